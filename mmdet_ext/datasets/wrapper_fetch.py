"""The route of a batch: through mmengine's dataset wrappers to the dataset that loads it, and
there by the batch engine or sample by sample. The one place that decides.

Why through the wrappers: ``RepeatDataset``, ``ClassBalancedDataset`` and ``ConcatDataset`` have
no ``__getitems__``, so a DataLoader over them asks for one sample at a time, and the batched
fetch of the ``LazyCocoDataset`` inside (``batched_fetch.py``) would never run. ``fetch_batch``
maps the batch's indices through the wrappers as their ``__getitem__`` does and hands each
wrapped dataset its part of the batch in one call. ``PerSampleSeedDataset`` (which
``ExactResumeHook`` puts around every training dataset) fetches through it, with seeds or
without.

A ``ConcatDataset`` batch is split by dataset: where every sample has its own seed, into one part
per dataset (each sample is loaded under its seed, so the order they load in changes nothing),
else into runs of consecutive samples of one dataset, fetched in order (the samples then draw
from the global random state in batch order, as one by one).

``load_batch`` then makes the batch: by the dataset's batch engine where it has one for its
current pipeline (``LazyCocoDataset.batch_engine``) and the engine can make the batch exactly,
else sample by sample (``seeded_rngs.load_one_by_one``: a dataset's ``load_sample`` where it has
one, its ``__getitem__`` otherwise). The first dataset of a process without a batch engine of
its own is logged.
"""
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from mmengine.dataset import ClassBalancedDataset, ConcatDataset, RepeatDataset
from mmengine.logging import print_log

from .seeded_rngs import load_one_by_one

_logged: set[str] = set()


def fetch_batch(dataset: Any, indices: Sequence[int],
                seeds: Optional[Sequence[int]] = None) -> list:
    """``[dataset[i] for i in indices]``, each under ``seeds[k]`` when given, batched wherever
    the dataset or what it wraps has ``fetch_batch``."""
    if hasattr(dataset, 'fetch_batch'):
        return dataset.fetch_batch(list(indices), seeds)
    if isinstance(dataset, (RepeatDataset, ClassBalancedDataset)):
        _full_init(dataset)
        return fetch_batch(dataset.dataset, [dataset._get_ori_dataset_idx(i) for i in indices],
                           seeds)
    if isinstance(dataset, ConcatDataset):
        _full_init(dataset)
        return _fetch_concatenated(dataset, indices, seeds)
    return load_batch(dataset, indices, seeds)


def load_batch(dataset: Any, indices: Sequence[int],
               seeds: Optional[Sequence[int]] = None) -> list:
    """``[dataset[i] for i in indices]`` (each under ``seeds[k]`` when given) made by the
    dataset's batch engine where it has one and it can make this batch exactly, else sample by
    sample (see the module docstring)."""
    if not hasattr(dataset, 'batch_engine'):
        _log_once(type(dataset).__name__)
        return load_one_by_one(dataset.__getitem__, indices, seeds)
    engine = dataset.batch_engine()
    samples = None if engine is None else engine.fetch(indices, seeds)
    return load_one_by_one(dataset.load_sample, indices, seeds) if samples is None else samples


def wrapped_datasets(dataset: Any) -> Iterator[Any]:
    """The datasets under ``dataset``'s wrappers (mmengine's, ``PerSampleSeedDataset``, any
    with a ``dataset`` attribute), or ``dataset`` itself."""
    if isinstance(dataset, ConcatDataset):
        for part in dataset.datasets:
            yield from wrapped_datasets(part)
        return
    inner = getattr(dataset, 'dataset', None)  # mmengine's wrappers are not torch Datasets
    if inner is not None and inner is not dataset:
        yield from wrapped_datasets(inner)
    else:
        yield dataset


def _fetch_concatenated(dataset: ConcatDataset, indices: Sequence[int],
                        seeds: Optional[Sequence[int]]) -> list:
    """The batch fetched part by part (see the module docstring), reassembled in order."""
    seeded = seeds is not None
    seeds = list(seeds) if seeded else [None] * len(indices)
    # (dataset, [(position, index, seed)]): one per dataset where seeded, else one per run
    parts: list[tuple[int, list[tuple[int, int, Optional[int]]]]] = []
    part_of: dict[int, int] = {}
    for position, (index, seed) in enumerate(zip(indices, seeds)):
        dataset_idx, sample_idx = dataset._get_ori_dataset_idx(index)
        if seeded and dataset_idx in part_of:
            part = part_of[dataset_idx]
        elif not seeded and parts and parts[-1][0] == dataset_idx:
            part = len(parts) - 1
        else:
            part = part_of[dataset_idx] = len(parts)
            parts.append((dataset_idx, []))
        parts[part][1].append((position, sample_idx, seed))
    samples: list = [None] * len(indices)
    for dataset_idx, part in parts:
        loaded = fetch_batch(dataset.datasets[dataset_idx], [i for _, i, _ in part],
                             [s for _, _, s in part] if seeded else None)
        if len(parts) == 1:
            return loaded  # the part's batch in order, as it is (a FetchedBatch stays one)
        for (position, _, _), sample in zip(part, loaded):
            samples[position] = sample
    return samples


def _full_init(dataset: Any) -> None:
    """What the wrappers' ``__getitem__`` does first."""
    if not getattr(dataset, '_fully_initialized', True):
        dataset.full_init()


def _log_once(name: str) -> None:
    if name in _logged:
        return
    _logged.add(name)
    print_log(f'{name} loads its batches sample by sample (it has no batch engine): no batched '
              'fetch', logger='current', level=logging.INFO)
