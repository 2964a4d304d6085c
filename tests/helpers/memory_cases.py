"""Datasets with known memory behaviour, for testing the memory watch (and for trying it out).

Importing this module registers them in mmdet_ext's registries, so configs can name them: with
``tests/`` on ``PYTHONPATH``, ``custom_imports = dict(imports=['helpers.memory_cases'])``.

* :class:`ListOfDictsDataset`: annotations as a Python list of dicts, touched on every access:
  each forked worker dirties refcounts and copies the pages (copy-on-write): a sawtooth.
* :class:`AppendingDataset`: appends to a list on every access: a real leak.
* :class:`NumpyDatasetFlat`: the same annotations in numpy arrays: no refcounts, stays flat.
* :class:`FieldsDataset` + ``mask_keeping_collate``: a leak carried by one field, ``masks``
  (a collate function keeps every mask it sees), for memcheck's field bisection.
* :class:`CachedDictDataset` + ``in_place_decode_collate``: the dataset hands out
  its own cached dicts and the collate function writes decoded masks into them.
* :class:`OneWorkerLeakDataset`: :class:`AppendingDataset`'s leak in DataLoader worker 0 only.
* :class:`MainProcessLeakHook`: a hook that keeps ``leak_kib`` KiB per iteration in the main
  process.
* :class:`MeanOutputMetric`: a validation metric for :class:`TinyModel`, so that runs can
  evaluate every epoch.
"""
import random
from typing import Dict, List, Sequence

import numpy as np
import torch
from mmdet.registry import METRICS
from mmengine.evaluator import BaseMetric
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from torch.utils.data import Dataset, default_collate, get_worker_info

from mmdet_ext.registry import DATASETS, FUNCTIONS, HOOKS


@DATASETS.register_module()
class ListOfDictsDataset(Dataset):
    """COCO-like annotations kept as ``num_annotations`` small dicts; each item reads
    ``touches`` random ones (as filtering by image id would), which writes their refcounts.

    A full copy of the annotations costs each worker roughly 0.3 KiB x ``num_annotations``.
    """

    def __init__(self, length: int = 320, num_annotations: int = 300_000,
                 touches: int = 300) -> None:
        self.length = length
        self.touches = touches
        self.annotations = [
            dict(bbox=[float(i), 1.0, 2.0, 3.0], category_id=i % 7, area=float(i))
            for i in range(num_annotations)
        ]

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        rng = random.Random(index)
        area = sum(self.annotations[rng.randrange(len(self.annotations))]['area']
                   for _ in range(self.touches))
        return dict(inputs=torch.tensor([area], dtype=torch.float32))


@DATASETS.register_module()
class NumpyDatasetFlat(Dataset):
    """:class:`ListOfDictsDataset`'s annotations as one numpy array, read the same way: flat."""

    def __init__(self, length: int = 320, num_annotations: int = 300_000,
                 touches: int = 300) -> None:
        self.length = length
        self.touches = touches
        idx = np.arange(num_annotations, dtype=np.float64)
        self.annotations = np.stack([idx, np.ones_like(idx), np.full_like(idx, 2.0), idx], 1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        rows = np.random.default_rng(index).integers(0, len(self.annotations), self.touches)
        return dict(inputs=torch.tensor([self.annotations[rows, 3].sum()], dtype=torch.float32))


@DATASETS.register_module()
class AppendingDataset(Dataset):
    """Keeps ``leak_kib`` KiB per access in a list that is never cleared: a leak."""

    def __init__(self, length: int = 320, leak_kib: int = 64) -> None:
        self.length = length
        self.leak_kib = leak_kib
        self.history: List[np.ndarray] = []

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        self.history.append(np.full(self.leak_kib * 1024, index % 251, dtype=np.uint8))
        return dict(inputs=torch.tensor([float(index)]))


@DATASETS.register_module()
class OneWorkerLeakDataset(AppendingDataset):
    """:class:`NumpyDatasetFlat`'s samples, but DataLoader worker 0 keeps ``leak_kib`` KiB per
    access: a leak in one worker only (the others, and the main process, stay flat)."""

    def __getitem__(self, index: int) -> Dict[str, torch.Tensor]:
        worker = get_worker_info()
        if worker is not None and worker.id == 0:
            self.history.append(np.full(self.leak_kib * 1024, index % 251, dtype=np.uint8))
        return dict(inputs=torch.tensor([float(index)]))


@HOOKS.register_module()
class MainProcessLeakHook(Hook):
    """Keeps ``leak_kib`` KiB per training iteration in the main process, like a hook that
    stores every batch's statistics: a leak in the main process."""

    def __init__(self, leak_kib: int = 64) -> None:
        self.leak_kib = leak_kib
        self.kept: List[np.ndarray] = []

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self.kept.append(np.full(self.leak_kib * 1024, batch_idx % 251, dtype=np.uint8))


@METRICS.register_module()
class MeanOutputMetric(BaseMetric):
    """The mean of :class:`TinyModel`'s outputs over the validation set."""

    def process(self, data_batch, data_samples) -> None:
        self.results.append(float(torch.as_tensor(data_samples).float().mean()))

    def compute_metrics(self, results: list) -> dict:
        return dict(mean_output=float(np.mean(results)))


@DATASETS.register_module()
class FieldsDataset(Dataset):
    """Samples with three fields: ``img`` (H, W, 3) uint8, ``boxes`` (4, 4) float32 and
    ``masks`` (4, H, W) uint8, fresh on every access."""

    def __init__(self, length: int = 320, size: int = 128) -> None:
        self.length = length
        self.size = size

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Dict[str, np.ndarray]:
        rng = np.random.default_rng(index)
        s = self.size
        return dict(img=rng.integers(0, 255, (s, s, 3), dtype=np.uint8),
                    boxes=rng.random((4, 4), dtype=np.float32),
                    masks=rng.integers(0, 2, (4, s, s), dtype=np.uint8))


_SEEN_MASKS: List[np.ndarray] = []


@FUNCTIONS.register_module()
def mask_keeping_collate(samples: Sequence[dict]) -> dict:
    """``default_collate`` that also keeps every ``masks`` array "for statistics": the planted
    leak, carried by the ``masks`` field only."""
    for sample in samples:
        if 'masks' in sample:
            _SEEN_MASKS.append(sample['masks'])
    return default_collate(list(samples))


@DATASETS.register_module()
class CachedDictDataset(Dataset):
    """Returns its own cached annotation dict for each index (no copy): in-place changes made
    downstream corrupt it."""

    def __init__(self, length: int = 320) -> None:
        self.anns = [dict(img=np.full(4, i, dtype=np.float32), mask_value=i % 2)
                     for i in range(length)]

    def __len__(self) -> int:
        return len(self.anns)

    def __getitem__(self, index: int) -> dict:
        return self.anns[index]


@FUNCTIONS.register_module()
def in_place_decode_collate(samples: Sequence[dict]) -> dict:
    """Decodes a 128 KiB mask per sample and stores it back into the sample dict, in place.
    ``img`` is required; ``mask_value`` is optional (no mask without it)."""
    for sample in samples:
        if 'mask_value' in sample:
            sample['masks'] = np.full((4, 128, 256), sample['mask_value'], dtype=np.uint8)
    return default_collate([dict(img=s['img']) for s in samples])


class TinyModel(BaseModel):
    """A one-parameter model for ``{'inputs': Tensor[B, 1]}`` batches."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(1))

    def forward(self, inputs: torch.Tensor, data_samples=None, mode: str = 'tensor'):
        out = self.scale * torch.tanh(inputs.float() * 1e-9)  # bounded: inputs reach ~1e8
        if mode == 'loss':
            return dict(loss=out.pow(2).mean())
        return out
