"""The batched fetch through mmengine's dataset wrappers.

Why: ``RepeatDataset``, ``ClassBalancedDataset`` and ``ConcatDataset`` have no ``__getitems__``,
so a DataLoader over them asks for one sample at a time, and the batched fetch of the
``LazyCocoDataset`` inside (``batched_fetch.py``) would never run. ``fetch_batch`` maps the
batch's indices through the wrappers as their ``__getitem__`` does and hands each wrapped dataset
its part of the batch in one call. ``PerSampleSeedDataset`` (which ``ExactResumeHook`` puts around
every training dataset) fetches through it.

Each sample is loaded under its own seed, so a ``ConcatDataset`` batch may be split by dataset
and reassembled in order without changing any sample. Without seeds the samples draw from the
global random state in batch order, so a ``ConcatDataset`` batch then loads sample by sample.
Any other dataset without ``fetch_batch`` loads sample by sample too; the first such dataset of a
process is logged.
"""
import logging
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from mmengine.dataset import ClassBalancedDataset, ConcatDataset, RepeatDataset
from mmengine.logging import print_log

from .seeded_rngs import load_seeded

_logged: set[str] = set()


def fetch_batch(dataset: Any, indices: Sequence[int], seeds: Optional[Sequence[int]]) -> list:
    """``[dataset[i] for i in indices]``, each under ``seeds[k]`` when given, batched wherever
    the dataset or what it wraps has ``fetch_batch``."""
    if hasattr(dataset, 'fetch_batch'):
        return dataset.fetch_batch(list(indices), seeds)
    if isinstance(dataset, (RepeatDataset, ClassBalancedDataset)):
        _full_init(dataset)
        return fetch_batch(dataset.dataset, [dataset._get_ori_dataset_idx(i) for i in indices],
                           seeds)
    if isinstance(dataset, ConcatDataset) and seeds is not None:
        _full_init(dataset)
        return _fetch_concatenated(dataset, indices, seeds)
    _log_once(type(dataset).__name__, 'without seeds' if isinstance(dataset, ConcatDataset)
              else 'it has no fetch_batch')
    return [load_seeded(dataset.__getitem__, index, None if seeds is None else seeds[k])
            for k, index in enumerate(indices)]


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
                        seeds: Sequence[int]) -> list:
    parts: dict[int, list[tuple[int, int, int]]] = {}  # dataset -> (position, index, seed)
    for position, (index, seed) in enumerate(zip(indices, seeds)):
        dataset_idx, sample_idx = dataset._get_ori_dataset_idx(index)
        parts.setdefault(dataset_idx, []).append((position, sample_idx, seed))
    samples: list = [None] * len(indices)
    for dataset_idx, part in parts.items():
        loaded = fetch_batch(dataset.datasets[dataset_idx], [i for _, i, _ in part],
                             [s for _, _, s in part])
        if len(parts) == 1:
            return loaded  # the part's batch in order, as it is (a FetchedBatch stays one)
        for (position, _, _), sample in zip(part, loaded):
            samples[position] = sample
    return samples


def _full_init(dataset: Any) -> None:
    """What the wrappers' ``__getitem__`` does first."""
    if not getattr(dataset, '_fully_initialized', True):
        dataset.full_init()


def _log_once(name: str, why: str) -> None:
    if name in _logged:
        return
    _logged.add(name)
    print_log(f'{name} loads its batches sample by sample ({why}): no batched fetch',
              logger='current', level=logging.INFO)
