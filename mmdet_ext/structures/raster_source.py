"""One instance mask that only exists as pixels (COCO RLE or a per-instance PNG), kept undecoded.

Geometric operations are recorded, not performed; ``bitmap()`` decodes the source once and
replays them through mmdet's ``BitmapMasks``, so the pixels are exactly what mmdet would produce
had it decoded the mask eagerly, and nothing is decoded for samples nobody looks at.
"""
from dataclasses import dataclass, field
from typing import Any, Callable, Union

import numpy as np
import torch
from mmdet.structures.mask import BitmapMasks
from ..ops import decode_image, rle_decode, rle_from_string


@dataclass(frozen=True)
class RasterSource:
    """An RLE string, a PNG path or a ready bitmap, plus the operations still to apply.

    Attributes:
        kind: 'rle' (``data`` = COCO compressed counts), 'png' (``data`` = file path) or
            'bitmap' (``data`` = ndarray[H, W] uint8, already final).
        height, width: size of the source in pixels.
        ops: pending operations on a ``BitmapMasks``, as (op, args, kwargs); ``op`` is a
            method name or a function of (masks, *args) (``apply_mask_op``).
    """

    kind: str
    data: Any
    height: int
    width: int
    ops: tuple = field(default_factory=tuple)

    def then(self, op: Union[str, Callable], *args, **kwargs) -> 'RasterSource':
        return RasterSource(self.kind, self.data, self.height, self.width,
                            self.ops + ((op, args, kwargs),))

    @property
    def is_plain_rle(self) -> bool:
        """An RLE with no pending operation: its counts are the mask itself, so the native RLE
        ops (area, box, crop) can read them without decoding the bitmap."""
        return self.kind == 'rle' and not self.ops

    def counts(self) -> torch.Tensor:
        """COCO run lengths of the source (``kind == 'rle'``): Tensor[K] int32."""
        return rle_from_string(self.data, self.height, self.width)

    def _decode(self) -> np.ndarray:
        if self.kind == 'bitmap':
            return self.data
        if self.kind == 'rle':
            return rle_decode(self.counts(), self.height, self.width).numpy()
        with open(self.data, 'rb') as f:
            encoded = np.frombuffer(f.read(), dtype=np.uint8)
        try:
            pixels = decode_image(torch.from_numpy(encoded.copy()), 'grayscale').numpy()[:, :, 0]
        except RuntimeError as err:
            raise RuntimeError(f'cannot read instance mask {self.data}: {err}') from err
        if pixels.shape != (self.height, self.width):
            raise ValueError(f'instance mask {self.data} is {pixels.shape[1]}x{pixels.shape[0]}, '
                             f'expected {self.width}x{self.height} (the image size)')
        return (pixels > 0).astype(np.uint8)

    def bitmaps(self) -> BitmapMasks:
        """The mask after every pending operation, as a one-instance ``BitmapMasks``."""
        masks = BitmapMasks(self._decode()[None], self.height, self.width)
        for op, args, kwargs in self.ops:
            masks = apply_mask_op(masks, op, args, kwargs)
        return masks

    def bitmap(self) -> np.ndarray:
        return self.bitmaps().masks[0]

    @staticmethod
    def from_bitmap(bitmap: np.ndarray) -> 'RasterSource':
        """A final bitmap (ndarray[H, W] uint8) with nothing left to apply."""
        return RasterSource('bitmap', bitmap, bitmap.shape[0], bitmap.shape[1])


def apply_mask_op(masks: Any, op: Union[str, Callable], args: tuple, kwargs: dict) -> Any:
    """``masks.<op>(*args, **kwargs)`` for a method name, ``op(masks, *args, **kwargs)`` for a
    function (a geometric operation the installed mmdet's classes lack, from ``_compat``)."""
    if isinstance(op, str):
        return getattr(masks, op)(*args, **kwargs)
    return op(masks, *args, **kwargs)
