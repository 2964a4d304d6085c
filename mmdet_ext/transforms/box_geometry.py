"""Resize, clip and flip of a sample's ``HorizontalBoxes`` in numpy, with mmdet's arithmetic.

Why: ``Resize._resize_bboxes`` (``rescale_``, then ``clip_``) and ``RandomFlip``'s ``flip_`` are
seven to ten torch calls on a tensor of a few boxes, and each call costs microseconds of dispatch:
about 80 us per sample inside a batched fetch, against a few for the same float32 operations in
numpy (``benchmarks/results/batched_fetch.md``). The numbers are the same bits: the same IEEE
float32 products, clamps and differences (the scale factor rounded to float32 as ``new_tensor``
rounds it; a clamp that keeps NaN and -0.0 as ``Tensor.clamp`` does), each box on its own.

Only for what mmdet would compute the same way: the exact ``HorizontalBoxes`` class over a float32
CPU tensor [N, 4] (``fast_boxes``); anything else goes through mmdet's own methods.
``tests/test_box_geometry.py`` compares the bits with mmdet's methods, on both families.
"""
from typing import Any

import numpy as np
import torch
from mmdet.datasets.transforms import Resize
from mmdet.structures.bbox import HorizontalBoxes

FLIP_DIRECTIONS = ('horizontal', 'vertical', 'diagonal')


def resizes_boxes_as_mmdet(resize: Resize) -> bool:
    """Whether ``resize`` resizes boxes with mmdet's own ``Resize._resize_bboxes``."""
    return getattr(type(resize), '_resize_bboxes', None) is Resize._resize_bboxes


def fast_boxes(boxes: Any) -> bool:
    """Whether ``boxes`` is a ``HorizontalBoxes`` (not a subclass) whose tensor numpy can stand
    for: float32, CPU, [N, 4], no autograd."""
    if type(boxes) is not HorizontalBoxes:
        return False
    tensor = boxes.tensor
    return tensor.dtype == torch.float32 and tensor.device.type == 'cpu' and \
        tensor.layout == torch.strided and tensor.dim() == 2 and not tensor.requires_grad


def rescale_and_clip(boxes: HorizontalBoxes, scale_factor: tuple, clip_to: Any = None) -> None:
    """``boxes.rescale_(scale_factor)``, then ``boxes.clip_(clip_to)`` unless ``clip_to`` is None:
    a new tensor, as ``rescale_`` makes. ``fast_boxes(boxes)`` and two scale factors."""
    scale_x, scale_y = scale_factor
    scaled = boxes.tensor.numpy() * np.array((scale_x, scale_y, scale_x, scale_y), np.float32)
    if clip_to is not None:
        for first, bound in ((0, clip_to[1]), (1, clip_to[0])):
            _clamp(scaled[:, first::2], np.float32(0), np.float32(bound))
    boxes.tensor = torch.from_numpy(scaled)


def _clamp(values: np.ndarray, low: np.float32, high: np.float32) -> None:
    """``values.clamp_(low, high)`` as torch does it, in place: only values below ``low`` or
    above ``high`` change, so NaN and -0.0 stay (``np.clip`` turns -0.0 into 0.0 in numpy 1.x,
    not in 2.x)."""
    values[values < low] = low
    values[values > high] = high


def flip_boxes(boxes: HorizontalBoxes, img_shape: tuple, direction: str) -> None:
    """``boxes.flip_(img_shape, direction)``, in place as there. ``fast_boxes(boxes)`` and a
    direction of ``FLIP_DIRECTIONS``."""
    flipped = boxes.tensor.numpy()
    original = flipped.copy()
    height, width = np.float32(img_shape[0]), np.float32(img_shape[1])
    if direction in ('horizontal', 'diagonal'):
        flipped[:, 0] = width - original[:, 2]
        flipped[:, 2] = width - original[:, 0]
    if direction in ('vertical', 'diagonal'):
        flipped[:, 1] = height - original[:, 3]
        flipped[:, 3] = height - original[:, 1]
