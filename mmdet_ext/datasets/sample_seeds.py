"""Per-sample random seeds and a batch order that can start in the middle of an epoch.

Why: a resumed run repeats the uninterrupted one only if every sample is augmented with the same
random draws and the data continues at the exact next batch. Stock mmengine gets neither in the
middle of an epoch: augmentation draws from per-worker RNG streams (seeded once per worker start,
so they depend on the worker count and, with ``persistent_workers=True``, on everything the
worker loaded before), an epoch-based loop restarts the epoch, and an iteration-based loop
replays every skipped batch through the pipeline.

Design:

* ``ResumableBatchSampler`` wraps the DataLoader's batch sampler. It hands out
  ``SeededKey(index, seed)`` instead of bare indices; the seed is a hash of the sample's
  identity in the run (sampler seed, sampler epoch, dataset index, its occurrence in the epoch),
  so it does not depend on which process or rank loads the sample, what that process loaded
  before, or how many ranks the run has.
  ``skip_next(n)`` makes the next epoch start at batch ``n``: the first ``n`` batches are drawn
  from the wrapped batch sampler (indices only, nothing is loaded) and dropped. Drawing them,
  rather than slicing the index list, keeps every batch sampler exact, mmdet's
  ``AspectRatioBatchSampler`` (which regroups indices by aspect ratio) included.
  On another number of ranks an epoch continues instead from the samples the saved run had not
  trained on (``unconsumed`` on every rank at the save, ``merge_unconsumed``, ``share_of``,
  ``continue_epoch``): the wrapped batch sampler batches this rank's share of them.
* ``PerSampleSeedDataset`` wraps the dataset: for a ``SeededKey`` it seeds python ``random``,
  numpy's global RNG and torch's CPU RNG from the key's seed, loads the sample, and puts the
  previous RNG states back (with ``num_workers=0`` the main process's streams -- dropout, the
  model -- stay untouched). Plain indices (val, test, other users) pass through unchanged.
* ``install_resumable_loading`` puts both into a built DataLoader before its first iteration.
"""
import math
from collections import Counter
from typing import Any, Iterator, NamedTuple, Optional, Sequence

import torch
from mmengine.dataset import DefaultSampler
from torch.utils.data import DataLoader, Dataset

from .._compat import discard_dataloader_iterator
from .seeded_rngs import load_seeded, sample_seed
from .wrapper_fetch import fetch_batch


class SeededKey(NamedTuple):
    """What ``ResumableBatchSampler`` yields per sample: dataset index and augmentation seed."""
    index: int
    seed: int


class PerSampleSeedDataset(Dataset):
    """``dataset`` whose samples asked for by ``SeededKey`` are loaded under their own seed.

    Every other attribute (``metainfo``, ``get_data_info``, ...) is the wrapped dataset's, read
    and written: mmdet's ``PipelineSwitchHook`` assigns ``train_dataloader.dataset.pipeline``,
    and that must reach the dataset the workers load from.
    """

    def __init__(self, dataset: Dataset) -> None:
        object.__setattr__(self, 'dataset', dataset)

    def __getattr__(self, name: str) -> Any:
        if name == 'dataset':  # not set yet (unpickling in a worker): no recursion
            raise AttributeError(name)
        return getattr(self.dataset, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == 'dataset':
            object.__setattr__(self, name, value)
        else:
            setattr(self.dataset, name, value)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: Any) -> Any:
        if not isinstance(key, SeededKey):
            return self.dataset[key]
        return load_seeded(self.dataset.__getitem__, key.index, key.seed)

    def __getitems__(self, keys: list) -> list:
        """A batch, each sample under its seed (plain indices: without), through
        ``wrapper_fetch.fetch_batch``: batched where the dataset, or what mmengine's wrappers
        around it wrap, has ``fetch_batch``, else sample by sample as ``__getitem__``."""
        seeded = [isinstance(key, SeededKey) for key in keys]
        if any(seeded) and not all(seeded):  # never made by ResumableBatchSampler
            return [self[key] for key in keys]
        if not any(seeded):
            return fetch_batch(self.dataset, keys)
        return fetch_batch(self.dataset, [key.index for key in keys], [key.seed for key in keys])


class EpochRest:
    """This rank's share of the samples of epoch ``epoch`` a run saved on another number of
    ranks had not trained on, in place of ``sampler`` (whose other attributes it answers:
    ``dataset`` for mmdet's ``AspectRatioBatchSampler``, ``seed``, ``set_epoch``) for that
    epoch."""

    def __init__(self, sampler: Any, epoch: int, indices: Sequence[int]) -> None:
        self.sampler, self.rest_epoch, self.indices = sampler, epoch, list(indices)

    def __getattr__(self, name: str) -> Any:
        if name == 'sampler':  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ResumableBatchSampler:
    """Batches of ``SeededKey`` from ``batch_sampler``; an epoch can start at any batch, or
    continue from the samples a run on another number of ranks had not trained on.

    Args:
        batch_sampler: the DataLoader's batch sampler (its ``sampler`` drives the epochs).
        seed: the run's sampler seed (the same on every rank).
        rank: this process's rank.
    """

    def __init__(self, batch_sampler: Any, seed: int, rank: int) -> None:
        self.batch_sampler = batch_sampler
        self.seed = seed
        self.rank = rank
        self._pending_skip = 0
        self._pending_epoch = 0
        self._skipped = 0  # batches dropped at the start of the current epoch
        self._rest: Optional[tuple[int, list[int]]] = None  # (epoch, this rank's share)
        self._drawn: list[list[int]] = []  # the current epoch's batches drawn so far (indices)

    @property
    def sampler(self) -> Any:
        return self.batch_sampler.sampler

    @property
    def batch_size(self) -> Optional[int]:
        return getattr(self.batch_sampler, 'batch_size', None)

    @property
    def continues_saved_rest(self) -> bool:
        """Whether the current epoch is the rest of one saved on another number of ranks."""
        return isinstance(self.sampler, EpochRest)

    def skip_next(self, batches: int) -> None:
        """Start the epoch the sampler is in now at batch ``batches`` (nothing before it loads).

        The skip holds for every iterator made in that epoch -- torch makes two when it starts
        workers -- until ``skip_next(0)`` (after the first batch) or the sampler's epoch moves on.
        """
        self._pending_skip = batches
        self._pending_epoch = getattr(self.sampler, 'epoch', 0)

    def continue_epoch(self, epoch: int, indices: Sequence[int]) -> None:
        """Make epoch ``epoch`` these samples (this rank's ``share_of`` the saved run's
        ``merge_unconsumed``), batched by the wrapped batch sampler, instead of its sampler's."""
        self._rest = (epoch, list(indices))
        self._pending_skip = 0

    def unconsumed(self, consumed_batches: int) -> Optional[tuple[list[int], list[int]]]:
        """(positions in this rank's index stream of the current epoch, indices) of the samples
        not in the epoch's first ``consumed_batches`` batches; None where the stream cannot be
        read again without side effects (a sampler other than mmengine's ``DefaultSampler``)."""
        sampler = self.sampler
        if isinstance(sampler, EpochRest):
            stream = sampler.indices
        elif isinstance(sampler, DefaultSampler):
            stream = list(sampler)  # the epoch's order again: a generator of its own, seeded
        else:
            return None
        taken = Counter(index for batch in self._drawn[:consumed_batches] for index in batch)
        positions, indices = [], []
        for position, index in enumerate(stream):
            if taken[index] > 0:
                taken[index] -= 1
            else:
                positions.append(position)
                indices.append(index)
        return positions, indices

    def __len__(self) -> int:
        self._place_rest(getattr(self.sampler, 'epoch', 0))
        return max(len(self.batch_sampler) - self._skipped, 0)

    def __iter__(self) -> Iterator[list[SeededKey]]:
        # Not a generator itself: the skip is taken when the epoch's iterator is made, so
        # __len__ tells the loop how many batches this (possibly partial) epoch has.
        epoch = getattr(self.sampler, 'epoch', 0)
        self._place_rest(epoch)
        self._skipped = self._pending_skip if epoch == self._pending_epoch else 0
        return self._batches(self._skipped, epoch)

    def _place_rest(self, epoch: int) -> None:
        """The saved rest in place of the wrapped batch sampler's sampler in its epoch, the
        sampler itself again in any other."""
        current = self.batch_sampler.sampler
        if isinstance(current, EpochRest) and current.rest_epoch != epoch:
            self.batch_sampler.sampler = current.sampler
            self._rest = None
        elif self._rest is not None and self._rest[0] == epoch and \
                not isinstance(current, EpochRest):
            self.batch_sampler.sampler = EpochRest(current, *self._rest)

    def _batches(self, skip: int, epoch: int) -> Iterator[list[SeededKey]]:
        # The wrapped samplers draw their order on the first batch, not when the iterator is
        # made; an iteration-based loop's iterator is remade at the saved epoch in before_train,
        # and DistSamplerSeedHook then sets the sampler to the loop's epoch (0) before the first
        # batch: the order would be epoch 0's, the seeds this epoch's.
        if getattr(self.sampler, 'epoch', epoch) != epoch:
            self.sampler.set_epoch(epoch)
        self._drawn = []
        occurrences: Counter = Counter()
        for position, batch in enumerate(self.batch_sampler):
            self._drawn.append(list(batch))
            keys = []
            for index in batch:
                keys.append(SeededKey(index, sample_seed(self.seed, epoch, index,
                                                         occurrences[index])))
                occurrences[index] += 1
            if position >= skip:
                yield keys


def merge_unconsumed(per_rank: Sequence[tuple[list[int], list[int]]]) -> list[int]:
    """One epoch's unconsumed samples (``ResumableBatchSampler.unconsumed`` of every rank, in
    rank order) in the epoch's global order: rank r of W holds positions r, r+W, ... of it, as
    ``DefaultSampler`` deals them."""
    world = len(per_rank)
    placed = sorted((position * world + rank, index)
                    for rank, (positions, indices) in enumerate(per_rank)
                    for position, index in zip(positions, indices))
    return [index for _, index in placed]


def share_of(rest: Sequence[int], rank: int, world_size: int, round_up: bool = True) -> list[int]:
    """Rank ``rank``'s part of ``rest`` on ``world_size`` ranks, dealt as ``DefaultSampler``
    deals an epoch: positions rank, rank + world_size, ...; with ``round_up`` the first samples
    repeated until every rank has as many (each rank then runs as many batches)."""
    rest = list(rest)
    if round_up and rest:
        total = math.ceil(len(rest) / world_size) * world_size
        rest = (rest * (total // len(rest) + 1))[:total]
    return rest[rank::world_size]


def index_sampler(loader: DataLoader) -> Any:
    """The sampler that orders ``loader``'s samples: its batch sampler's, when it has one.

    With ``batch_sampler=`` (mmdet's ``AspectRatioBatchSampler``), ``loader.sampler`` is a
    ``SequentialSampler`` torch made up, and the configured one is ``batch_sampler.sampler``.
    """
    batches = loader.batch_sampler
    return getattr(batches, 'sampler', None) or loader.sampler


def install_resumable_loading(loader: DataLoader, seed: int, rank: int) -> ResumableBatchSampler:
    """Give ``loader`` a ``ResumableBatchSampler`` and a ``PerSampleSeedDataset`` (idempotent).

    A DataLoader refuses new ``batch_sampler``/``dataset`` attributes once built, to keep them
    consistent with ``batch_size`` and ``sampler``; the wrappers keep both, so they are set
    directly. Workers started earlier (persistent ones) hold the old dataset: they are shut
    down, and the next iteration starts new ones. The loader gets a ``generator`` of its own
    (if it has none): torch draws a base seed for workers from it each time an iterator is
    made, which would otherwise take a number from the global torch RNG -- once per epoch, or
    once per run with persistent workers -- and shift dropout and everything else after it.
    """
    if isinstance(loader.batch_sampler, ResumableBatchSampler):
        return loader.batch_sampler
    if loader.batch_sampler is None:
        raise ValueError('mid-epoch exact resume needs a DataLoader that batches '
                         '(batch_size or batch_sampler set), got batch_size=None')
    discard_dataloader_iterator(loader)
    if loader.generator is None:
        loader.generator = torch.Generator().manual_seed(seed)
    batches = ResumableBatchSampler(loader.batch_sampler, seed, rank)
    object.__setattr__(loader, 'batch_sampler', batches)
    object.__setattr__(loader, 'dataset', PerSampleSeedDataset(loader.dataset))
    return batches
