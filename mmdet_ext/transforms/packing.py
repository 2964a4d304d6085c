"""mmdet's ``PackDetInputs`` with its channel-planar image made by OpenCV's deinterleave.

mmdet makes ``inputs`` ([C, H, W]) of the pipeline's [H, W, C] image with torch's
``permute(2, 0, 1).contiguous()`` (numpy's transpose, then a copy, for an image that is not
contiguous): a strided copy, several times as slow as ``cv2.split`` into the planes of the
tensor it makes (benchmarks/results/zoo_transforms_rtmdet.md: the packing step). The image of
a pipeline the batch engine does not plan (RTMDet's mosaic and mix-up, Mask2Former's large scale
jitter) is packed this way, once a sample. ``FastPackDetInputs`` makes the same tensor -- shape,
dtype, values, a storage of its own, contiguous -- by ``cv2.split`` into its planes, and packs
everything else with mmdet's own code, which reads ``img`` for ``inputs`` only. A one-channel
image (mmdet's is then a view of ``img``, not a copy), an image whose dtype or channel count
OpenCV cannot hold, and a ``meta_keys`` that names ``img`` are packed by mmdet's code.
"""
from typing import Optional

import cv2
import numpy as np
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmdet.registry import TRANSFORMS

from .mix_augment import CV2_DEPTHS, contiguous_if_flipped


def planar_copy(img: np.ndarray) -> Optional[torch.Tensor]:
    """The [C, H, W] tensor mmdet's ``PackDetInputs`` makes of ``img`` ([H, W, C], 2 to 4
    channels, a dtype OpenCV holds), made by ``cv2.split``; None for any other image."""
    if not (isinstance(img, np.ndarray) and img.ndim == 3 and 2 <= img.shape[2] <= 4
            and img.dtype in CV2_DEPTHS and img.size):
        return None
    img = contiguous_if_flipped(img)
    if img.strides[2] != img.itemsize or img.strides[1] != img.shape[2] * img.itemsize or \
            img.strides[0] < 0:
        return None  # not rows of whole pixels: OpenCV would copy it first
    planes = np.empty((img.shape[2],) + img.shape[:2], dtype=img.dtype)
    split = cv2.split(img, list(planes))
    if any(got.ctypes.data != want.ctypes.data for got, want in zip(split, planes)):
        return None  # OpenCV wrote planes of its own (never seen): mmdet's path instead
    return torch.from_numpy(planes)


@TRANSFORMS.register_module()
class FastPackDetInputs(PackDetInputs):
    """mmdet's ``PackDetInputs`` (same arguments and results; module doc)."""

    def transform(self, results: dict) -> dict:
        inputs = None if 'img' in self.meta_keys else planar_copy(results.get('img'))
        if inputs is None:
            return super().transform(results)
        packed = super().transform({key: value for key, value in results.items()
                                    if key != 'img'})
        return {'inputs': inputs, **packed}


# The packers that read ``img`` for ``inputs`` only (the batch engine hands them a view instead).
PACKERS = (PackDetInputs, FastPackDetInputs)
