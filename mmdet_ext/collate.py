"""``fast_collate``: one padded uint8 batch tensor per batch, built in the worker, inputs untouched.

Why: mmengine's ``pseudo_collate`` hands the main process a list of images, and mmdet's
``DetDataPreprocessor`` converts, normalises and pads them one by one on the training process's
critical path. A home-made collate that converts the dataset's own lists to tensors in place goes
wrong the other way: the next epoch sees corrupted annotations. ``fast_collate`` copies
every image once, straight into a preallocated ``[B, C, H, W]`` uint8 tensor padded to
``pad_size_divisor`` (in the DataLoader worker, where it costs no training time), and builds only
new containers: the samples it receives are never modified.

Use with ``FastDetDataPreprocessor`` (``mmdet_ext.models``), which normalises the batch and keeps
mmdet's padding semantics exactly; mmdet's own ``DetDataPreprocessor`` also accepts the batch
(see that class's docstring for the small difference).
"""
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from mmengine.dataset import pseudo_collate

from .registry import FUNCTIONS
from .rounding import padded_size


@FUNCTIONS.register_module()
def fast_collate(data_batch: Sequence[dict], pad_size_divisor: int = 32, pad_value: int = 0,
                 pin_memory: bool = False) -> dict[str, Any]:
    """Collate ``PackDetInputs`` outputs into a padded batch.

    Args:
        data_batch: samples, each ``{'inputs': Tensor[C, H_i, W_i], 'data_samples': ...}``
            (any dtype, all the same; uint8 from the standard pipeline).
        pad_size_divisor: the batch's height and width are rounded up to a multiple of this.
        pad_value: value of the padding (in the images' own units, before normalisation).
        pin_memory: allocate the batch in page-locked memory when CUDA is available and this
            runs in the main process (``num_workers=0``); workers cannot pin (no CUDA in forked
            workers) -- use the DataLoader's ``pin_memory=True`` for them.

    Returns:
        ``{'inputs': Tensor[B, C, H, W], 'data_samples': [...], 'input_shapes': [(H_i, W_i)]}``,
        H and W the largest H_i, W_i rounded up to ``pad_size_divisor``; every other key
        collated as ``pseudo_collate`` would. ``input_shapes`` lets the data preprocessor tell
        image from padding.
    """
    if len(data_batch) == 0:
        raise ValueError('fast_collate: the batch is empty')
    if pad_size_divisor < 1:
        raise ValueError(f'fast_collate: pad_size_divisor must be >= 1, got {pad_size_divisor}')
    images = [sample['inputs'] for sample in data_batch]
    first = images[0]
    for index, image in enumerate(images):
        if not isinstance(image, torch.Tensor) or image.dim() != 3:
            raise TypeError(f'fast_collate: sample {index} inputs must be a Tensor[C, H, W] '
                            f'(PackDetInputs output), got {type(image).__name__} '
                            f'{getattr(image, "shape", "")}')
        if image.dtype != first.dtype or image.shape[0] != first.shape[0]:
            raise ValueError(f'fast_collate: sample {index} is {image.dtype} with '
                             f'{image.shape[0]} channels, sample 0 is {first.dtype} with '
                             f'{first.shape[0]}: one batch needs one dtype and channel count')
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
