"""Instance masks that stay compact through the pipeline and become pixels only when asked.

Why: mmdet's ``LoadAnnotations(poly2mask=True)`` rasterises every instance to a full-image bitmap
on every sample, and ``poly2mask=False`` keeps polygons but silently drops RLE (crowd) masks.
``LazyInstanceMasks`` keeps each instance in its source form -- a polygon (transformed as
coordinates, with mmdet's own ``PolygonMasks`` arithmetic) or a raster source (RLE / PNG path,
see ``RasterSource``) -- and rasterises in C++ only in ``to_ndarray``/``to_tensor``, at the size
the masks have by then. ``crop_and_resize`` (the Mask R-CNN mask head's targets) rasterises only
the 28x28 crops of polygons, never the full image.
"""
from typing import Sequence, Union

import mmcv
import numpy as np
import torch
from mmdet.structures.bbox import HorizontalBoxes, get_box_type
from mmdet.structures.mask import BaseInstanceMasks, BitmapMasks, PolygonMasks

from .polygon_raster import rasterize_polygons
from .raster_source import RasterSource

Polygon = list  # list[np.ndarray]: the parts of one instance, each [x0, y0, x1, y1, ...]
Item = Union[Polygon, RasterSource]


class LazyInstanceMasks(BaseInstanceMasks):
    """Masks of N instances of an image of ``height`` x ``width`` pixels.

    Args:
        items: per instance, a list of polygon parts (float64 ndarrays ``[x0, y0, ...]`` in
            pixels) or a ``RasterSource``.
        height, width: current mask size in pixels.

    Geometric methods return new objects (inputs are never modified). Polygon results equal
    mmdet's ``PolygonMasks`` rasterised output; raster results equal ``BitmapMasks``'.
    """

    def __init__(self, items: Sequence[Item], height: int, width: int) -> None:
        self.items = list(items)
        self.height = int(height)
        self.width = int(width)

    # -- containers ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __repr__(self) -> str:
        rasters = sum(isinstance(item, RasterSource) for item in self.items)
        return (f'{type(self).__name__}(num_masks={len(self)}, rasters={rasters}, '
                f'height={self.height}, width={self.width})')

    def __getitem__(self, index) -> 'LazyInstanceMasks':
        if isinstance(index, (int, np.integer)):
            return LazyInstanceMasks([self.items[index]], self.height, self.width)
        if isinstance(index, slice):
            return LazyInstanceMasks(self.items[index], self.height, self.width)
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        return LazyInstanceMasks([self.items[i] for i in index.tolist()], self.height, self.width)

    @classmethod
    def cat(cls, masks: Sequence['LazyInstanceMasks']) -> 'LazyInstanceMasks':
        if len(masks) == 0:
            raise ValueError('masks should not be an empty list.')
        items = [item for m in masks for item in m.items]
        return cls(items, masks[0].height, masks[0].width)

    # -- geometry: polygons through PolygonMasks, rasters recorded ---------------------------
    def _map(self, name: str, out_shape: tuple, *args, **kwargs) -> 'LazyInstanceMasks':
        """Apply ``PolygonMasks.<name>`` to every polygon and record it for every raster."""
        polygon_rows = [i for i, item in enumerate(self.items) if not isinstance(item, RasterSource)]
        items = list(self.items)
        if polygon_rows:
            polygons = PolygonMasks([items[i] for i in polygon_rows], self.height, self.width)
            result = getattr(polygons, name)(*args, **kwargs)
            for row, polygon in zip(polygon_rows, result.masks):
                items[row] = polygon
        for i, item in enumerate(items):
            if isinstance(item, RasterSource):
                items[i] = item.then(name, *args, **kwargs)
        return LazyInstanceMasks(items, *out_shape)

    def rescale(self, scale, interpolation: str = 'nearest') -> 'LazyInstanceMasks':
        new_w, new_h = mmcv.rescale_size((self.width, self.height), scale)
        return self._map('rescale', (new_h, new_w), scale, interpolation)

    def resize(self, out_shape, interpolation: str = 'nearest') -> 'LazyInstanceMasks':
        return self._map('resize', tuple(out_shape), tuple(out_shape), interpolation)

    def flip(self, flip_direction: str = 'horizontal') -> 'LazyInstanceMasks':
        return self._map('flip', (self.height, self.width), flip_direction)

    def pad(self, out_shape, pad_val: int = 0) -> 'LazyInstanceMasks':
        return self._map('pad', tuple(out_shape), tuple(out_shape), pad_val)

    def crop(self, bbox: np.ndarray) -> 'LazyInstanceMasks':
        bbox = bbox.copy()
        bbox[0::2] = np.clip(bbox[0::2], 0, self.width)
        bbox[1::2] = np.clip(bbox[1::2], 0, self.height)
        w, h = max(bbox[2] - bbox[0], 1), max(bbox[3] - bbox[1], 1)
        return self._map('crop', (int(h), int(w)), bbox)

    def expand(self, expanded_h: int, expanded_w: int, top: int, left: int):
        if any(not isinstance(item, RasterSource) for item in self.items):
            raise NotImplementedError('expand is not implemented for polygons (as in mmdet)')
        return self._map('expand', (expanded_h, expanded_w), expanded_h, expanded_w, top, left)

    def translate(self, out_shape, offset, direction='horizontal', border_value=None,
                  interpolation=None) -> 'LazyInstanceMasks':
        # PolygonMasks defaults both to None (border must be None/0, interpolation is unused);
        # BitmapMasks needs real values, with these defaults.
        border_value = 0 if border_value is None else border_value
        interpolation = 'bilinear' if interpolation is None else interpolation
        return self._map('translate', tuple(out_shape), tuple(out_shape), offset, direction,
                         border_value, interpolation)

    def shear(self, out_shape, magnitude, direction='horizontal', border_value=0,
              interpolation='bilinear') -> 'LazyInstanceMasks':
        return self._map('shear', tuple(out_shape), tuple(out_shape), magnitude, direction,
                         border_value, interpolation)

    def rotate(self, out_shape, angle, center=None, scale=1.0, border_value=0,
               interpolation='bilinear') -> 'LazyInstanceMasks':
        return self._map('rotate', tuple(out_shape), tuple(out_shape), angle, center, scale,
                         border_value, interpolation)

    def crop_and_resize(self, bboxes: np.ndarray, out_shape, inds, device='cpu',
                        interpolation: str = 'bilinear', binarize: bool = True
                        ) -> 'LazyInstanceMasks':
        """Targets of the mask head: instance ``inds[i]`` cropped to ``bboxes[i]``, resized to
        ``out_shape``. Polygons are transformed as coordinates (rasterised later at
        ``out_shape`` only); rasters go through ``BitmapMasks.crop_and_resize``."""
        out_h, out_w = out_shape
        inds = np.asarray(inds.cpu().numpy() if isinstance(inds, torch.Tensor) else inds)
        if len(self.items) == 0 or len(bboxes) == 0:
            return LazyInstanceMasks([], out_h, out_w)
        results: list = [None] * len(bboxes)
        polygon_boxes = [i for i, ind in enumerate(inds)
                         if not isinstance(self.items[ind], RasterSource)]
        if polygon_boxes:
            polygons = PolygonMasks([self.items[ind] for ind in inds[polygon_boxes]],
                                    self.height, self.width)
            cropped = polygons.crop_and_resize(bboxes[polygon_boxes], out_shape,
                                               np.arange(len(polygon_boxes)), device,
                                               interpolation, binarize)
            for box, polygon in zip(polygon_boxes, cropped.masks):
                results[box] = polygon
        decoded: dict = {}
        for box, ind in enumerate(inds):
            item = self.items[ind]
            if isinstance(item, RasterSource):
                if ind not in decoded:
                    decoded[ind] = item.bitmaps()
                crop = decoded[ind].crop_and_resize(bboxes[box:box + 1], out_shape, np.zeros(1, int),
                                                    device, interpolation, binarize)
                results[box] = RasterSource.from_bitmap(crop.masks[0])
        return LazyInstanceMasks(results, out_h, out_w)

    # -- pixels -------------------------------------------------------------------------------
    def to_ndarray(self) -> np.ndarray:
        """ndarray[N, height, width] uint8 (0/1)."""
        out = np.zeros((len(self.items), self.height, self.width), dtype=np.uint8)
        polygon_rows = [i for i, item in enumerate(self.items) if not isinstance(item, RasterSource)]
        if polygon_rows:
            out[polygon_rows] = rasterize_polygons([self.items[i] for i in polygon_rows],
                                                   self.height, self.width)
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                bitmap = item.bitmap()
                if bitmap.shape != (self.height, self.width):
                    raise ValueError(f'raster mask {i} is {bitmap.shape}, the masks are '
                                     f'{(self.height, self.width)}')
                out[i] = bitmap
        return out

    def to_tensor(self, dtype: torch.dtype, device) -> torch.Tensor:
        return torch.from_numpy(self.to_ndarray()).to(dtype=dtype, device=device)

    def to_bitmap(self) -> BitmapMasks:
        return BitmapMasks(self.to_ndarray(), self.height, self.width)

    @property
    def areas(self) -> np.ndarray:
        """Per-instance area in pixels: shoelace for polygons (as ``PolygonMasks``), pixel count
        for rasters (as ``BitmapMasks``)."""
        areas = np.zeros(len(self.items), dtype=np.float64)
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                areas[i] = item.bitmap().sum()
            else:
                areas[i] = PolygonMasks([item], self.height, self.width).areas[0]
        return areas

    def get_bboxes(self, dst_type='hbox'):
        """Tight boxes of the masks as ``dst_type`` (a registered box type name or class)."""
        boxes = np.zeros((len(self.items), 4), dtype=np.float32)
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                masks = BitmapMasks(item.bitmap()[None], self.height, self.width)
            else:
                masks = PolygonMasks([item], self.height, self.width)
            boxes[i] = masks.get_bboxes(HorizontalBoxes).numpy()[0]
        hbb = HorizontalBoxes(torch.from_numpy(boxes))
        name, box_type = get_box_type(dst_type)
        return hbb if box_type is HorizontalBoxes else hbb.convert_to(name)
