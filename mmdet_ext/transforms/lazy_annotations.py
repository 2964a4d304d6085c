"""Annotation loading that keeps instance masks compact (``LazyInstanceMasks``)."""
from typing import Optional

import numpy as np
from mmdet.datasets.transforms import LoadAnnotations

from ..registry import TRANSFORMS
from ..structures import LazyBitmapMasks, LazyPolygonMasks, RasterSource
from ..structures.coco_rle import compressed_rle_counts


@TRANSFORMS.register_module()
class LoadLazyAnnotations(LoadAnnotations):
    """Drop-in for mmdet's ``LoadAnnotations`` whose ``gt_masks`` are ``LazyInstanceMasks``.

    Same arguments (``with_bbox``, ``with_label``, ``with_mask``, ``with_seg``, ``poly2mask``,
    ...); boxes, labels, ignore flags and segmentation maps are loaded by mmdet's code. Masks are
    of the type mmdet would produce, but stay compact:

    - ``poly2mask=True`` (the default): ``LazyBitmapMasks``, a ``BitmapMasks``. Polygons stay
      polygons (float64 coordinates), every RLE -- crowd included -- stays a compressed RLE, and
      ``mask=dict(mask_file=PATH)`` (per-instance PNG, from ``LazyCocoDataset``) is read only
      when the sample's pixels are used, instead of a full-image bitmap per instance;
    - ``poly2mask=False``: ``LazyPolygonMasks``, a ``PolygonMasks``. As in mmdet, an RLE mask
      marks its instance ignored (a placeholder polygon takes its place); a PNG mask is an
      error, as mmdet has no such masks and dropping them silently would lose the instance;
    - it may come before the image is loaded (the mask size is then the json's ``height`` and
      ``width``), which ``NativeLoadResizeFlip`` needs.
    Invalid masks (no polygon part with >= 3 points, malformed RLE) mark the instance ignored, as
    mmdet does; an RLE whose size is not the image's is an error (raised before decoding).
    """

    def __init__(self, with_mask: bool = True, **kwargs) -> None:
        super().__init__(with_mask=with_mask, **kwargs)

    @staticmethod
    def _mask_item(mask, height: int, width: int, polygons_only: bool) -> Optional[object]:
        if isinstance(mask, list):
            parts = [np.asarray(part, dtype=np.float64) for part in mask
                     if len(part) % 2 == 0 and len(part) >= 6]
            return parts or None
        if polygons_only and isinstance(mask, dict) and 'mask_file' in mask:
            raise ValueError(f"LoadLazyAnnotations: {mask['mask_file']} is a per-instance PNG "
                             'mask, which poly2mask=False (PolygonMasks) cannot hold: set '
                             'poly2mask=True')
        if polygons_only:
            return None  # mmdet: "PolygonMasks requires polygons", the instance is ignored
        if isinstance(mask, dict) and 'mask_file' in mask:
            return RasterSource('png', mask['mask_file'], height, width)
        if isinstance(mask, dict) and isinstance(mask.get('counts'), (list, str, bytes)) \
                and mask.get('size') is not None:
            rle_h, rle_w = (int(v) for v in mask['size'])
            if (rle_h, rle_w) != (height, width):
                # Refused before decoding: a wrong (possibly absurd) declared size would allocate
                # rle_h * rle_w bytes and then break every geometric transform.
                raise ValueError(f'LoadLazyAnnotations: an RLE mask is {rle_h}x{rle_w} (h x w) but '
                                 f'the image is {height}x{width}; tools/validate_coco.py lists '
                                 'such annotations')
            return RasterSource('rle', compressed_rle_counts(mask), rle_h, rle_w)
        return None

    def _load_masks(self, results: dict) -> None:
        # Before the image is loaded (NativeLoadResizeFlip comes after this transform) the size is
        # the json's; NativeLoadResizeFlip refuses masks whose size is not the decoded image's.
        height, width = results['ori_shape'] if 'ori_shape' in results \
            else (results['height'], results['width'])
        items, ignore_flags = [], []
        for instance in results.get('instances', []):
            item = self._mask_item(instance.get('mask'), height, width, not self.poly2mask)
            if item is None:
                instance['ignore_flag'] = 1
                item = [np.zeros(6)]  # mmdet's placeholder for an invalid mask
            items.append(item)
            ignore_flags.append(instance['ignore_flag'])
        results['gt_ignore_flags'] = np.array(ignore_flags, dtype=bool)
        flavour = LazyBitmapMasks if self.poly2mask else LazyPolygonMasks
        results['gt_masks'] = flavour(items, height, width)
