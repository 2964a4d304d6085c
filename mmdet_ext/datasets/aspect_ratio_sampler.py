"""mmdet's ``AspectRatioBatchSampler`` with the images' sizes read in bulk.

Why: mmdet's sampler calls ``dataset.get_data_info(idx)`` for every index of every epoch, in the
main process, to read two numbers; ``LazyCocoDataset.get_data_info`` builds the whole sample's
annotations each time (benchmarks/results/aspect_ratio_sampler.md). Here each epoch reads the
sizes of every sample in one ``image_sizes`` call where the dataset has one (``LazyCocoDataset``:
the store's columns), through mmengine's ``RepeatDataset``, ``ClassBalancedDataset`` and
``ConcatDataset``; any other dataset is asked ``get_data_info`` per index, as mmdet does. Indices
are drawn from the sampler one at a time, as mmdet draws them (``InfiniteSampler`` shares one
stream between its iterators). ``adopt()`` puts it in place of mmdet's.
"""
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np
from mmdet.datasets.samplers import AspectRatioBatchSampler
from mmengine.dataset import ClassBalancedDataset, ConcatDataset, RepeatDataset

from ..registry import DATA_SAMPLERS

# (width, height) arrays of the samples asked for, or None where the dataset cannot tell.
Sizes = Optional[tuple[np.ndarray, np.ndarray]]


@DATA_SAMPLERS.register_module()
class FastAspectRatioBatchSampler(AspectRatioBatchSampler):
    """mmdet's ``AspectRatioBatchSampler`` (same arguments, batches, order and length), the
    images' sizes read with ``image_sizes`` (module doc) instead of ``get_data_info``.

    The buckets stay in ``_aspect_ratio_buckets``, as mmdet keeps them: an iterator left at a
    full bucket leaves it there, and ``ExactResumeHook`` clears it on restart.
    """

    def __iter__(self) -> Iterator[list]:
        for idx, portrait in self._orientations():
            bucket = self._aspect_ratio_buckets[0 if portrait else 1]
            bucket.append(idx)
            if len(bucket) == self.batch_size:
                yield bucket[:]
                del bucket[:]
        rest = self._aspect_ratio_buckets[0] + self._aspect_ratio_buckets[1]
        self._aspect_ratio_buckets = [[] for _ in range(2)]
        # mmdet yields the rest in batch_size pieces; the last piece (which may be a full one)
        # is dropped under drop_last.
        last = (len(rest) - 1) // self.batch_size * self.batch_size
        for start in range(0, last, self.batch_size):
            yield rest[start:start + self.batch_size]
        if rest and not self.drop_last:
            yield rest[last:]

    def _orientations(self) -> Iterator[tuple[Any, bool]]:
        """(index, width < height) for each index of the sampler, in its order."""
        dataset = self.sampler.dataset
        sizes = image_sizes(dataset, range(len(dataset)))
        if sizes is None:
            for idx in self.sampler:  # as mmdet: one get_data_info per index
                info = dataset.get_data_info(idx)
                yield idx, info['width'] < info['height']
            return
        widths, heights = sizes
        portrait = (widths < heights).tolist()
        for idx in self.sampler:
            yield idx, portrait[idx]


def image_sizes(dataset: Any, indices: Sequence[int]) -> Sizes:
    """(widths, heights) of samples ``indices`` of ``dataset`` as its ``get_data_info`` gives
    them, from ``dataset.image_sizes`` through mmengine's wrappers; None where some dataset
    (or a wrapper subclass with its own ``get_data_info``) has no such answer."""
    own = getattr(dataset, 'image_sizes', None)
    if own is not None:
        return own(indices)
    if _plain(dataset, (RepeatDataset, ClassBalancedDataset)):
        return image_sizes(dataset.dataset, [dataset._get_ori_dataset_idx(i) for i in indices])
    if _plain(dataset, (ConcatDataset,)):
        return _concatenated_sizes(dataset, indices)
    return None


def _plain(dataset: Any, wrappers: tuple[type, ...]) -> bool:
    """Whether ``dataset`` is one of ``wrappers`` and reads its samples' info as it does."""
    return any(isinstance(dataset, wrapper) and
               type(dataset).get_data_info is wrapper.get_data_info for wrapper in wrappers)


def _concatenated_sizes(dataset: ConcatDataset, indices: Sequence[int]) -> Sizes:
    located = np.array([dataset._get_ori_dataset_idx(i) for i in indices],
                       dtype=np.int64).reshape(-1, 2)
    widths = np.zeros(len(indices), dtype=np.int64)
    heights = np.zeros(len(indices), dtype=np.int64)
    for dataset_idx in np.unique(located[:, 0]).tolist():
        where = located[:, 0] == dataset_idx
        sizes = image_sizes(dataset.datasets[dataset_idx], located[where, 1].tolist())
        if sizes is None:
            return None
        widths[where], heights[where] = sizes
    return widths, heights
