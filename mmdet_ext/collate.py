"""``fast_collate``: one padded uint8 batch tensor per batch, built in the worker, inputs untouched.

Why: mmengine's ``pseudo_collate`` hands the main process a list of images, and mmdet's
``DetDataPreprocessor`` converts, normalises and pads them one by one on the training process's
critical path. A home-made collate that converts the dataset's own lists to tensors in place goes
wrong the other way: the next epoch sees corrupted annotations. ``fast_collate`` copies
every image once, straight into a preallocated ``[B, C, H, W]`` uint8 tensor (in the DataLoader
worker, where it costs no training time), and builds only new containers: the samples it
receives are never modified. A batch it has no fast path for (tuple samples, multi-branch dict
inputs, images that are not ``Tensor[C, H, W]`` of one dtype and channel count) is collated by
``pseudo_collate``, so any batch mmengine accepts is accepted.

Use with ``FastDetDataPreprocessor`` (``mmdet_ext.models``), which normalises the batch and pads it
to its own ``pad_size_divisor`` exactly as mmdet does: the divisor is set once, there.
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from mmengine.dataset import pseudo_collate

from .registry import FUNCTIONS
from .rounding import padded_size


@FUNCTIONS.register_module()
def fast_collate(data_batch: Sequence, pad_size_divisor: int = 1, pad_value: int = 0,
                 pin_memory: bool = False) -> Any:
    """Collate ``PackDetInputs`` outputs into a padded batch.

    Args:
        data_batch: samples, each ``{'inputs': Tensor[C, H_i, W_i], 'data_samples': ...}``
            (any dtype, all the same; uint8 from the standard pipeline); other batches go to
            ``pseudo_collate``.
        pad_size_divisor: the batch's height and width are rounded up to a multiple of this.
            ``FastDetDataPreprocessor`` crops or pads the batch to its own divisor, so leave it
            at 1 (no padding beyond the largest image) unless another consumer needs it.
        pad_value: value of the padding (in the images' own units, before normalisation).
        pin_memory: allocate the batch in page-locked memory when CUDA is available and this
            runs in the main process (``num_workers=0``); workers cannot pin (no CUDA in forked
            workers) -- use the DataLoader's ``pin_memory=True`` for them.

    Returns:
        ``pseudo_collate(data_batch)`` for a batch without the fast path, else
        ``{'inputs': Tensor[B, C, H, W], 'data_samples': [...], 'input_shapes': [(H_i, W_i)]}``,
        H and W the largest H_i, W_i rounded up to ``pad_size_divisor``; every other key
        collated as ``pseudo_collate`` would. ``input_shapes`` lets the data preprocessor tell
        image from padding.
    """
    if len(data_batch) == 0:
        raise ValueError('fast_collate: the batch is empty')
    if pad_size_divisor < 1:
        raise ValueError(f'fast_collate: pad_size_divisor must be >= 1, got {pad_size_divisor}')
    if not _has_fast_path(data_batch):
        return pseudo_collate(data_batch)
    images = [sample['inputs'] for sample in data_batch]
    first = images[0]
    height = padded_size(max(image.shape[1] for image in images), pad_size_divisor)
    width = padded_size(max(image.shape[2] for image in images), pad_size_divisor)
    shape = (len(images), first.shape[0], height, width)
    if torch.utils.data.get_worker_info() is not None:
        # Allocate in shared memory, as default_collate does: otherwise sending the batch to the
        # main process copies it into shared memory once more.
        storage = first.untyped_storage()._new_shared(first.element_size() * int(np.prod(shape)))
        batch = first.new_empty(0).set_(storage).view(shape)
    else:
        pin = pin_memory and torch.cuda.is_available()
        batch = torch.empty(shape, dtype=first.dtype, pin_memory=pin)
    for slot, image in zip(batch, images):
        h, w = image.shape[1:]
        slot[:, :h, :w].copy_(image)
        # Fill only the padding: the image region is written exactly once.
        slot[:, h:, :].fill_(pad_value)
        slot[:, :h, w:].fill_(pad_value)

    others = [{key: value for key, value in sample.items() if key != 'inputs'}
              for sample in data_batch]
    collated = pseudo_collate(others)
    collated['inputs'] = batch
    collated['input_shapes'] = [tuple(image.shape[1:]) for image in images]
    return collated


def _has_fast_path(data_batch: Sequence) -> bool:
    """Whether every sample is a dict whose ``inputs`` is a Tensor[C, H, W], all of one dtype,
    device and channel count."""
    if not all(isinstance(sample, dict) and isinstance(sample.get('inputs'), torch.Tensor)
               for sample in data_batch):
        return False
    first = data_batch[0]['inputs']
    return all(sample['inputs'].dim() == 3 and sample['inputs'].dtype == first.dtype
               and sample['inputs'].device == first.device
               and sample['inputs'].shape[0] == first.shape[0] for sample in data_batch)
