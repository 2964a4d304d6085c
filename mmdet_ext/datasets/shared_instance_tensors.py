"""A batch's small annotation tensors as views of one storage per dtype.

Why: torch sends every tensor of a batch from a DataLoader worker through shared memory, one
segment per storage: creating, sending and mapping one costs about 0.2 ms of CPU between the two
processes, whatever its size. A detection sample carries four small ones (gt and ignored boxes
and labels), which cost more CPU than the same values as views of two storages per batch
(benchmarks/results/shared_instance_tensors.md); ``allocate_batch`` makes those two storages
the way ``worker_buffers`` sends cheapest (small ones inside the pickle). ``LazyCocoDataset``'s
batch fetch (``__getitems__``, batched pipeline or not) therefore lays the tensors of its
samples' instances out in one storage per dtype: the model receives the same values, dtypes and
shapes, each sample's tensors a contiguous view of their own.
"""
from typing import Any, Iterator

import torch
from mmdet.structures.bbox import BaseBoxes
from mmengine.structures import BaseDataElement, InstanceData

from ..collate import allocate_batch


def share_instance_tensors(samples: list) -> None:
    """Re-seat every plain CPU tensor of the samples' ``InstanceData`` fields (``gt_instances``,
    ``ignored_instances``, ...; boxes by their ``tensor``) as views of one storage per dtype,
    allocated by ``allocate_batch`` (this runs in a DataLoader worker). The samples must be the
    caller's own: they are changed in place."""
    slots = list(_instance_tensors(samples))
    by_dtype: dict[torch.dtype, list] = {}
    for slot in slots:
        by_dtype.setdefault(slot[2].dtype, []).append(slot)
    for group in by_dtype.values():
        storage = allocate_batch(group[0][2], (sum(t.numel() for _, _, t in group), ))
        start = 0
        for owner, name, tensor in group:
            view = storage[start:start + tensor.numel()].view(tensor.shape)
            view.copy_(tensor)
            setattr(owner, name, view)
            start += tensor.numel()


def _instance_tensors(samples: list) -> Iterator[tuple[Any, str, torch.Tensor]]:
    """(owner, attribute, tensor) of each tensor to re-seat: contiguous, CPU, no autograd."""
    for sample in samples:
        data_sample = sample.get('data_samples') if isinstance(sample, dict) else None
        if not isinstance(data_sample, BaseDataElement):
            continue
        for _, field in data_sample.items():
            if not isinstance(field, InstanceData):
                continue
            for name, value in field.items():
                owner, attribute = field, name
                if isinstance(value, BaseBoxes):
                    owner, attribute, value = value, 'tensor', value.tensor
                if isinstance(value, torch.Tensor) and value.device.type == 'cpu' and \
                        value.is_contiguous() and not value.requires_grad:
                    yield owner, attribute, value
