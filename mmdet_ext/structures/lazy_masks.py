"""Instance masks that stay compact through the pipeline and become pixels only when asked.

Why: mmdet's ``LoadAnnotations(poly2mask=True)`` rasterises every instance to a full-image bitmap
on every sample, and ``poly2mask=False`` keeps polygons but silently drops RLE (crowd) masks.
``LazyInstanceMasks`` keeps each instance in its source form -- a polygon (transformed as
coordinates, with mmdet's own ``PolygonMasks`` arithmetic) or a raster source (RLE / PNG path,
see ``RasterSource``) -- and rasterises in C++ only in ``to_ndarray``/``to_tensor``, at the size
the masks have by then. ``crop_and_resize`` (the Mask R-CNN mask head's targets) rasterises
polygons straight into the 28x28 crops and reads only the runs of an RLE inside each box, one
native call per mask kind per image, never the full image.
"""
from functools import partial
from typing import Callable, Optional, Sequence, Union

import mmcv
import numpy as np
import torch
from mmdet.structures.bbox import HorizontalBoxes, get_box_type
from mmdet.structures.mask import BaseInstanceMasks, BitmapMasks, PolygonMasks

from .._compat import bitmap_masks_pixels, translate_masks
from ..ops import (has_kernel, pack_counts, pack_polygons, polygons_crop_and_resize,
                   polygons_to_masks_into, rle_area, rle_crop_and_resize, rle_decode_batch_into,
                   rle_from_polygons, rle_to_bbox, rle_to_string)
from .polygon_crop import crop_polygons
from .polygon_raster import rasterize_polygons
from .raster_source import RasterSource, apply_mask_op

Polygon = list  # list[np.ndarray]: the parts of one instance, each [x0, y0, x1, y1, ...]
Item = Union[Polygon, RasterSource]

# PolygonMasks' methods that compute each coordinate alone (x from x, y from y, the same numbers
# for all): one call on all the polygons joined end to end gives what a call per polygon gives.
COORDINATEWISE_OPS = ('rescale', 'resize', 'flip', translate_masks)


# The LazyInstanceMasks methods whose polygon work is one of COORDINATEWISE_OPS: ``chain``'s.
CHAINABLE = ('rescale', 'resize', 'flip', 'translate')


def coordinatewise(rows: list, steps: Sequence[tuple]) -> Optional[list]:
    """``steps`` -- each (height, width, op, args, kwargs), ``op`` one of ``COORDINATEWISE_OPS``
    on an image of ``height`` x ``width`` -- on the instances ``rows`` (each a list of polygons),
    one after the other, as ``PolygonMasks(rows, height, width)``'s own methods compute them, one
    call a step on the installed mmdet's ``PolygonMasks``: all the polygons joined into one (x, y
    pairs stay pairs) once, then split back once. The same numbers as a call per polygon and
    step, without their Python loops. None where the polygons are not all flat arrays of one
    dtype with whole (x, y) pairs (then the caller runs the steps as they are)."""
    parts, dtype = [], None
    for row in rows:
        for part in row:
            if type(part) is not np.ndarray or part.ndim != 1 or len(part) % 2 or \
                    (dtype is not None and part.dtype != dtype):
                return None
            dtype = part.dtype
            parts.append(part)
    if not parts:
        return None
    moved = np.concatenate(parts)
    for height, width, op, args, kwargs in steps:
        moved = apply_mask_op(PolygonMasks([[moved]], height, width), op, args, kwargs).masks[0][0]
    result, start = [], 0
    for row in rows:
        pieces = []
        for part in row:
            end = start + len(part)
            pieces.append(moved[start:end])
            start = end
        result.append(pieces)
    return result


def chain_calls(masks: BaseInstanceMasks, calls: Sequence[tuple]) -> BaseInstanceMasks:
    """``masks`` after ``calls`` (each (method name, args, kwargs), of ``CHAINABLE``) in order:
    ``LazyInstanceMasks.chain`` for lazy masks, the methods one after the other for mmdet's."""
    if isinstance(masks, LazyInstanceMasks):
        return masks.chain(calls)
    for name, args, kwargs in calls:
        masks = getattr(masks, name)(*args, **kwargs)
    return masks


class MaskInputError(ValueError, AssertionError):
    """Invalid masks, index or box given to a lazy mask class.

    Both a ``ValueError`` and an ``AssertionError``: mmdet's ``BitmapMasks``/``PolygonMasks``
    ``assert`` on the same input, so code that catches their exception catches ours.
    """


class MaskIndexError(MaskInputError, IndexError):
    """A ``LazyPolygonMasks`` selection that ``PolygonMasks`` refuses with an ``IndexError``."""


class LazyInstanceMasks(BaseInstanceMasks):
    """Masks of N instances of an image of ``height`` x ``width`` pixels, kept in source form.

    Args:
        items: per instance, a list of polygon parts (1-D float ndarrays ``[x0, y0, ...]`` in
            pixels, an even number of values) or a ``RasterSource``.
        height, width: current mask size in pixels.

    Two concrete flavours, each an instance of the mmdet class that ``LoadAnnotations`` would
    have produced, so mmdet code that dispatches on the type takes the same branch:
    ``LazyBitmapMasks`` (a ``BitmapMasks``; ``poly2mask=True``, mmdet's default) and
    ``LazyPolygonMasks`` (a ``PolygonMasks``; ``poly2mask=False``). ``LazyInstanceMasks(...)``
    itself builds the bitmap flavour, which holds every kind of instance.

    Geometric methods return new objects of the same flavour (inputs are never modified).
    Polygon instances follow mmdet's ``PolygonMasks`` arithmetic, raster instances (RLE, PNG)
    ``BitmapMasks``'; pixels are produced only by the methods that return pixels.
    """

    def __new__(cls, *args, **kwargs):
        return super().__new__(LazyBitmapMasks if cls is LazyInstanceMasks else cls)

    def __init__(self, items: Sequence[Item], height: int, width: int) -> None:
        self.items = [self._checked_item(item, i) for i, item in enumerate(items)]
        self.height = int(height)
        self.width = int(width)

    @classmethod
    def _wrap(cls, items: list, height: int, width: int) -> 'LazyInstanceMasks':
        """An object of this flavour holding ``items`` as they are (already checked)."""
        masks = object.__new__(cls)
        masks.items, masks.height, masks.width = items, int(height), int(width)
        return masks

    def _checked_item(self, item, index: int) -> Item:
        """``item`` if it is a valid instance, else ``MaskInputError`` saying what is wrong."""
        if isinstance(item, RasterSource):
            return item
        if not isinstance(item, (list, tuple)):  # no parts is the empty mask, as in PolygonMasks
            raise MaskInputError(f'{type(self).__name__}: instance {index} must be a list of '
                                 'polygon parts (1-D ndarrays) or a RasterSource, got '
                                 f'{type(item).__name__} {item!r:.60}')
        for part in item:
            if not (isinstance(part, np.ndarray) and part.ndim == 1 and part.size % 2 == 0
                    and part.size > 0 and np.issubdtype(part.dtype, np.number)):
                raise MaskInputError(
                    f'{type(self).__name__}: instance {index} has a polygon part that is not a '
                    '1-D numeric ndarray of an even number of coordinates [x0, y0, x1, y1, ...]: '
                    f'{type(part).__name__} of shape {np.shape(part)}')
        return list(item)

    # -- containers ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        rasters = sum(isinstance(item, RasterSource) for item in self.items)
        return (f'{type(self).__name__}(num_masks={len(self)}, rasters={rasters}, '
                f'height={self.height}, width={self.width})')

    def __getitem__(self, index) -> 'LazyInstanceMasks':
        positions = self._positions(index)
        return self._wrap([self.items[i] for i in positions], self.height, self.width)

    def _positions(self, index) -> list:
        """The instances ``index`` selects, with the indexing rules of this flavour's mmdet
        class (a Python bool, for one, is a mask for ``BitmapMasks`` and an int for
        ``PolygonMasks``)."""
        raise NotImplementedError

    @classmethod
    def cat(cls, masks: Sequence[BaseInstanceMasks]) -> 'LazyInstanceMasks':
        """Concatenate masks of one flavour; mmdet masks of this flavour's mmdet class join in."""
        if len(masks) == 0:
            raise ValueError('masks should not be an empty list.')
        flavour = cls if cls is not LazyInstanceMasks else type(masks[0])
        upstream = _UPSTREAM_CLASS.get(flavour)
        if upstream is None or not all(isinstance(m, upstream) for m in masks):
            raise MaskInputError(f'{flavour.__name__}.cat: every mask must be a '
                                 f'{getattr(upstream, "__name__", "lazy mask")}, got '
                                 f'{[type(m).__name__ for m in masks]}')
        items = [item for m in masks for item in flavour._items_of(m)]
        return flavour._wrap(items, masks[0].height, masks[0].width)

    @staticmethod
    def _items_of(masks: BaseInstanceMasks) -> list:
        """``masks``' instances as items."""
        raise NotImplementedError

    def _polygon_rows(self) -> list:
        return [i for i, item in enumerate(self.items) if not isinstance(item, RasterSource)]

    # -- geometry: polygons through PolygonMasks, rasters recorded ---------------------------
    # Inside ``chain``: the polygon steps put off so far, (height, width, op, args, kwargs).
    _deferred: Optional[list] = None

    def _map(self, op: Union[str, Callable], out_shape: tuple, *args,
             polygon_op: Optional[Callable] = None, **kwargs) -> 'LazyInstanceMasks':
        """Apply ``op`` -- a mask method's name, or a function of (masks, *args) -- to every
        polygon as ``PolygonMasks`` (``polygon_op`` there instead, where given: a function that
        computes what ``op`` does to them) and record it for every raster. Inside ``chain`` the
        polygons' step is put off (``_deferred``)."""
        polygon_rows = self._polygon_rows()
        items = list(self.items)
        if self._deferred is not None:
            assert polygon_op is None and op in COORDINATEWISE_OPS, op  # chain's CHAINABLE
            polygon_rows = []
            deferred = self._deferred + [(self.height, self.width, op, args, kwargs)]
        if polygon_rows:
            rows = [items[i] for i in polygon_rows]
            result = None
            if polygon_op is None and op in COORDINATEWISE_OPS:
                result = coordinatewise(rows, [(self.height, self.width, op, args, kwargs)])
            if result is None:
                polygons = PolygonMasks(rows, self.height, self.width)
                result = apply_mask_op(polygons, polygon_op or op, args, kwargs).masks
            for row, polygon in zip(polygon_rows, result):
                items[row] = polygon
        for i, item in enumerate(items):
            if isinstance(item, RasterSource):
                items[i] = item.then(op, *args, **kwargs)
        result = self._wrap(items, *out_shape)
        if self._deferred is not None:
            result._deferred = deferred
        return result

    def chain(self, calls: Sequence[tuple]) -> 'LazyInstanceMasks':
        """The masks after ``calls`` -- each (method name, args, kwargs), of ``CHAINABLE`` --
        made in order, as calling the methods one after the other makes them, with the polygons
        joined and split once for all the calls (``coordinatewise``), not once a call."""
        for name, _, _ in calls:
            if name not in CHAINABLE:
                raise MaskInputError(f'{type(self).__name__}.chain: {name!r} is not one of '
                                     f'{CHAINABLE}')
        masks = self._wrap(list(self.items), self.height, self.width)
        masks._deferred = []
        for name, args, kwargs in calls:
            masks = getattr(masks, name)(*args, **kwargs)
        steps = masks.__dict__.pop('_deferred')
        polygon_rows = self._polygon_rows()
        if not polygon_rows:
            return masks
        moved = coordinatewise([self.items[i] for i in polygon_rows], steps)
        if moved is None:  # polygons coordinatewise cannot join: the calls one by one
            masks = self
            for name, args, kwargs in calls:
                masks = getattr(masks, name)(*args, **kwargs)
            return masks
        for row, polygon in zip(polygon_rows, moved):
            masks.items[row] = polygon
        return masks

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
        """Crop to ``bbox`` (ndarray[4], x1, y1, x2, y2 in px), as mmdet's mask classes."""
        if not (isinstance(bbox, np.ndarray) and bbox.ndim == 1 and bbox.size == 4):
            raise MaskInputError(f'{type(self).__name__}.crop: bbox must be an ndarray[4] '
                                 f'(x1, y1, x2, y2), got {type(bbox).__name__} of shape '
                                 f'{np.shape(bbox)}')
        bbox = bbox.copy()
        bbox[0::2] = np.clip(bbox[0::2], 0, self.width)
        bbox[1::2] = np.clip(bbox[1::2], 0, self.height)
        w, h = max(bbox[2] - bbox[0], 1), max(bbox[3] - bbox[1], 1)
        return self._map('crop', (int(h), int(w)), bbox, polygon_op=crop_polygons)

    def translate(self, out_shape, offset, direction='horizontal', border_value=None,
                  interpolation=None) -> 'LazyInstanceMasks':
        """Move by ``offset`` px along ``direction``: 'horizontal', 'vertical', or the fork's
        'both' with ``offset`` (dx, dy) -- in either family (``_compat.translate_masks``)."""
        # PolygonMasks defaults both to None (border must be None/0, interpolation is unused);
        # BitmapMasks needs real values, with these defaults.
        border_value = 0 if border_value is None else border_value
        interpolation = 'bilinear' if interpolation is None else interpolation
        return self._map(translate_masks, tuple(out_shape), tuple(out_shape), offset, direction,
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
                        interpolation: str = 'bilinear', binarize: bool = True) -> BitmapMasks:
        """Targets of the mask head: instance ``inds[i]`` cropped to ``bboxes[i]`` (x1, y1, x2, y2
        in px) and resized to ``out_shape``.

        Returns ``BitmapMasks`` of ndarray[M, out_h, out_w]: uint8 0/1, or the soft targets of
        ``BitmapMasks`` when ``binarize=False`` (the targets are final pixels, and mmdet's only
        caller, ``mask_target_single``, reads them with ``to_ndarray``). Polygons equal
        ``PolygonMasks.crop_and_resize``, rasters ``BitmapMasks.crop_and_resize`` (which ignores
        ``interpolation``). All the polygon boxes go to one native call and all the boxes on
        RLEs without pending operations to another, both on the CPU whatever ``device`` says:
        the result is an ndarray (mmdet copies it to the device itself), and on a GPU the
        inputs and outputs would cross PCIe with blocking copies, several per image, for
        kernels that take microseconds (``to_tensor``, whose result stays on the device, does
        use the CUDA kernels). The other rasters (PNG, pending operations, soft targets) go
        through ``BitmapMasks``, with ``device`` as mmdet uses it.
        """
        out_h, out_w = out_shape
        inds = _index_array(inds)
        boxes = bboxes.cpu().numpy() if isinstance(bboxes, torch.Tensor) else np.asarray(bboxes)
        if len(self.items) == 0 or len(boxes) == 0:
            return _bitmap_masks(np.empty((0, out_h, out_w), dtype=np.uint8))
        kinds = np.array([_crop_kind(item, binarize) for item in self.items])[inds]
        if not binarize and (kinds == _POLYGON).any():
            raise ValueError('Polygons are always binary, setting binarize=False is unsupported')
        device = torch.device(device)
        bitmap_targets = partial(self._bitmap_targets, device=device,
                                 interpolation=interpolation, binarize=binarize)
        pieces = []
        for kind, targets in ((_POLYGON, self._polygon_targets), (_RLE, self._rle_targets),
                              (_BITMAP, bitmap_targets)):
            rows = np.flatnonzero(kinds == kind)
            if rows.size:
                pieces.append((rows, targets(boxes[rows], inds[rows], out_shape)))
        out = np.empty((len(boxes), out_h, out_w),
                       dtype=np.result_type(*(targets.dtype for _, targets in pieces)))
        for rows, targets in pieces:
            out[rows] = targets
        return _bitmap_masks(out)

    def _polygon_targets(self, boxes: np.ndarray, inds: np.ndarray, out_shape) -> np.ndarray:
        """ndarray[M, out_h, out_w] uint8 of polygon instances, one ``polygons_crop_and_resize``
        on the CPU."""
        distinct, rows = _distinct(inds, len(self.items))
        packed = pack_polygons([self.items[i] for i in distinct])
        return polygons_crop_and_resize(*packed, _box_tensor(boxes), torch.from_numpy(rows),
                                        out_shape).numpy()

    def _rle_targets(self, boxes: np.ndarray, inds: np.ndarray, out_shape) -> np.ndarray:
        """ndarray[M, out_h, out_w] uint8 of RLEs without pending ops, one
        ``rle_crop_and_resize`` on the CPU."""
        distinct, rows = _distinct(inds, len(self.items))
        counts, run_counts = pack_counts([self.items[i].counts() for i in distinct])
        return rle_crop_and_resize(counts, run_counts, self.height, self.width,
                                   _box_tensor(boxes), torch.from_numpy(rows), out_shape).numpy()

    def _bitmap_targets(self, boxes: np.ndarray, inds: np.ndarray, out_shape,
                        device: torch.device, interpolation: str, binarize: bool) -> np.ndarray:
        """Targets of the other rasters, each decoded once, through ``BitmapMasks``."""
        distinct, rows = _distinct(inds, len(self.items))
        bitmaps = BitmapMasks(np.stack([self.items[i].bitmap() for i in distinct]), self.height,
                              self.width)
        return bitmaps.crop_and_resize(boxes, out_shape, rows, device, interpolation,
                                       binarize).to_ndarray()

    # -- pixels -------------------------------------------------------------------------------
    def to_ndarray(self) -> np.ndarray:
        """ndarray[N, height, width] uint8 (0/1)."""
        return self._rasterize()

    def _rasterize(self) -> np.ndarray:
        """ndarray[N, height, width] uint8 of every instance, computed now."""
        out = np.zeros((len(self.items), self.height, self.width), dtype=np.uint8)
        polygon_rows = self._polygon_rows()
        if polygon_rows:
            out[polygon_rows] = rasterize_polygons([self.items[i] for i in polygon_rows],
                                                   self.height, self.width)
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                out[i] = self._raster_pixels(i)
        return out

    def _raster_pixels(self, i: int) -> np.ndarray:
        """ndarray[height, width] uint8 of raster item i, decoded with its pending operations."""
        bitmap = self.items[i].bitmap()
        if bitmap.shape != (self.height, self.width):
            raise ValueError(f'raster mask {i} is {bitmap.shape}, the masks are '
                             f'{(self.height, self.width)}')
        return bitmap

    def to_tensor(self, dtype: torch.dtype, device) -> torch.Tensor:
        """Tensor[N, height, width] of ``dtype`` on ``device``, equal to ``to_ndarray``.

        Polygons and same-size RLEs without pending operations are rasterised where the result
        goes, one native call each from the packed data on the host (on a GPU in a CUDA build:
        no full-size mask crosses from the host, and the host never waits for the device); the
        other rasters are decoded on the host as in ``to_ndarray`` and copied over.
        """
        device = torch.device(device)
        # Every row is written below (the three kinds of rows cover them all): no zeroing.
        out = torch.empty((len(self.items), self.height, self.width), dtype=torch.uint8,
                          device=device)
        polygon_rows = self._polygon_rows()
        if polygon_rows:
            packed = pack_polygons([self.items[i] for i in polygon_rows])
            _fill_rows(out, polygon_rows, 'polygons_to_masks_into',
                       partial(polygons_to_masks_into, *packed))
        rle_rows = [i for i, item in enumerate(self.items) if isinstance(item, RasterSource)
                    and item.is_plain_rle and (item.height, item.width) == (self.height,
                                                                            self.width)]
        if rle_rows:
            packed = pack_counts([self.items[i].counts() for i in rle_rows])
            _fill_rows(out, rle_rows, 'rle_decode_batch_into',
                       partial(rle_decode_batch_into, *packed))
        other_rows = set(range(len(self.items))) - set(polygon_rows) - set(rle_rows)
        for i in sorted(other_rows):
            out[i].copy_(_staged(torch.from_numpy(self._raster_pixels(i)), device),
                         non_blocking=True)
        return out.to(dtype)

    def to_bitmap(self) -> BitmapMasks:
        return BitmapMasks(self.to_ndarray(), self.height, self.width)

    @property
    def areas(self) -> np.ndarray:
        """Per-instance area in pixels, ndarray[N] float64: shoelace for polygons (as
        ``PolygonMasks``), pixel count for rasters (as ``BitmapMasks``)."""
        areas = np.zeros(len(self.items), dtype=np.float64)
        polygon_rows = self._polygon_rows()
        if polygon_rows:
            # One PolygonMasks for all: its per-part np.dot sums in BLAS order, which no other
            # reduction reproduces to the last bit.
            areas[polygon_rows] = PolygonMasks([self.items[i] for i in polygon_rows],
                                               self.height, self.width).areas
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                areas[i] = rle_area(item.counts()) if item.is_plain_rle else item.bitmap().sum()
        return areas

    def get_bboxes(self, dst_type='hbox'):
        """Tight boxes of the masks as ``dst_type`` (a registered box type name or class), equal
        to ``PolygonMasks.get_bboxes`` for polygons and ``BitmapMasks.get_bboxes`` for rasters."""
        boxes = np.zeros((len(self.items), 4), dtype=np.float32)
        polygon_rows = self._polygon_rows()
        boxes[polygon_rows] = _polygon_boxes([self.items[i] for i in polygon_rows], self.height,
                                             self.width)
        for i, item in enumerate(self.items):
            if isinstance(item, RasterSource):
                boxes[i] = _raster_box(item)
        hbb = HorizontalBoxes(torch.from_numpy(boxes))
        name, box_type = get_box_type(dst_type)
        return hbb if box_type is HorizontalBoxes else hbb.convert_to(name)


class LazyBitmapMasks(LazyInstanceMasks, BitmapMasks):
    """Lazy masks that are a ``BitmapMasks`` (what ``LoadAnnotations(poly2mask=True)``, mmdet's
    default, produces); instances may be polygons, RLEs or PNG files.

    ``.masks`` is ``BitmapMasks``' ndarray[N, height, width]: reading it rasterises every
    instance once, natively, at the current size, and from then on those pixels are the masks
    (code that writes into ``.masks`` in place, as mmdet's ``RandomErasing`` does, changes
    them); assigning ``.masks`` replaces the lazy content. Iterating yields one [height, width]
    array per instance, as ``BitmapMasks`` does. Every other member stays lazy.
    """

    _pixels = None  # ndarray[N, height, width] once .masks was read or assigned

    def __init__(self, items, height: int, width: int) -> None:
        """``items`` as ``LazyInstanceMasks``, or what ``BitmapMasks`` takes -- ndarray[N, H, W]
        or a list of ndarray[H, W] -- since mmdet code rebuilds masks with
        ``type(masks)(pixels, height, width)`` (``Albu``, ``BitmapMasks.random``)."""
        if not _are_pixels(items):
            super().__init__(items, height, width)
            return
        self.height, self.width = int(height), int(width)
        pixels = bitmap_masks_pixels(items) if len(items) else np.empty((0, height, width),
                                                                        np.uint8)
        if pixels.shape[1:] != (self.height, self.width):
            raise MaskInputError(f'LazyBitmapMasks: masks of shape {pixels.shape[1:]} given '
                                 f'for height={height}, width={width}')
        self._adopt(pixels)

    @property
    def masks(self) -> np.ndarray:
        if self._pixels is None:
            self._adopt(self._rasterize())
        return self._pixels

    @masks.setter
    def masks(self, value) -> None:
        pixels = np.asarray(value)
        if pixels.size == 0:
            pixels = np.empty((0, self.height, self.width), dtype=np.uint8)
        if pixels.ndim != 3:
            raise MaskInputError(f'{type(self).__name__}.masks must be ndarray[N, H, W], got '
                                 f'shape {pixels.shape}')
        self._adopt(pixels)

    def _adopt(self, pixels: np.ndarray) -> None:
        """Make ``pixels`` (ndarray[N, H, W]) the masks; each instance becomes a view of it."""
        self._pixels = pixels
        self.items = [RasterSource.from_bitmap(bitmap) for bitmap in pixels]

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        if self._pixels is not None:
            del state['items']  # views of _pixels: rebuilt, so they stay views after unpickling
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if 'items' not in state:
            self._adopt(self._pixels)

    def __iter__(self):
        return iter(self.masks)

    def _positions(self, index) -> list:
        if isinstance(index, torch.Tensor):
            index = index.cpu().numpy()
        # numpy's rules on the instance axis, as BitmapMasks indexes its ndarray
        return np.arange(len(self.items))[index].reshape(-1).tolist()

    @staticmethod
    def _items_of(masks: BaseInstanceMasks) -> list:
        if isinstance(masks, LazyInstanceMasks):
            return masks.items
        return [RasterSource.from_bitmap(bitmap) for bitmap in masks.masks]

    def to_ndarray(self) -> np.ndarray:
        """ndarray[N, height, width] (uint8 0/1 unless other pixels were assigned)."""
        return self._rasterize() if self._pixels is None else self._pixels

    def to_tensor(self, dtype: torch.dtype, device) -> torch.Tensor:
        if self._pixels is None:
            return super().to_tensor(dtype, device)
        return torch.tensor(self._pixels, dtype=dtype, device=device)

    def expand(self, expanded_h: int, expanded_w: int, top: int,
               left: int) -> 'LazyBitmapMasks':
        """The masks placed at (``top``, ``left``) in a zero canvas of ``expanded_h`` x
        ``expanded_w``, as ``BitmapMasks.expand``. Polygon instances become their RLE at the
        current size first: moving the polygon would also reveal its parts outside the image,
        which the bitmap has clipped."""
        return self._as_rasters()._map('expand', (expanded_h, expanded_w), expanded_h,
                                       expanded_w, top, left)

    @property
    def areas(self) -> np.ndarray:
        """Foreground pixels per instance, ndarray[N], as ``BitmapMasks.areas`` (polygons: the
        pixels they rasterise to at the current size, counted on their RLE)."""
        if self._pixels is not None:
            return self._pixels.sum((1, 2))
        return LazyInstanceMasks.areas.fget(self._as_rasters()).astype(np.uint64)

    def get_bboxes(self, dst_type='hbox'):
        """Tight pixel boxes as ``BitmapMasks.get_bboxes`` (last row and column + 1, zeros for an
        empty mask), polygons included."""
        return LazyInstanceMasks.get_bboxes(self._as_rasters(), dst_type)

    def pad(self, out_shape, pad_val: int = 0) -> 'LazyBitmapMasks':
        """Zero-pad to ``out_shape`` as ``BitmapMasks.pad``. A polygon reaching outside the
        image becomes its RLE first (padding would reveal the part the bitmap has clipped);
        the others stay polygons."""
        outside = [not _inside(item, self.height, self.width) for item in self.items]
        return self._as_rasters(outside)._map('pad', tuple(out_shape), tuple(out_shape), pad_val)

    def _as_rasters(self, which: Sequence[bool] = None) -> 'LazyBitmapMasks':
        """These masks with the polygon instances (those flagged in ``which``, default all)
        replaced by their RLE at the current size (one native ``rle_from_polygons`` each; no
        full-size bitmap)."""
        which = [True] * len(self.items) if which is None else which
        rows = [i for i in self._polygon_rows() if which[i]]
        if not rows:
            return self
        items = list(self.items)
        for i in rows:
            items[i] = RasterSource('rle', rle_to_string(_polygon_rle(items[i], self.height,
                                                                      self.width)),
                                    self.height, self.width)
        return self._wrap(items, self.height, self.width)


def _are_pixels(items) -> bool:
    """Whether ``items`` is ``BitmapMasks`` input: ndarray[N, H, W] or ndarrays[H, W]."""
    if isinstance(items, np.ndarray):
        return True
    return len(items) > 0 and all(isinstance(item, np.ndarray) and item.ndim == 2
                                  for item in items)


def _inside(item: Item, height: int, width: int) -> bool:
    """Whether ``item`` is a raster, or a polygon whose points all lie in [0, width - 1] x
    [0, height - 1] (then its pixels never leave the image)."""
    if isinstance(item, RasterSource):
        return True
    return all(part.size == 0 or (part[0::2].min() >= 0 and part[0::2].max() <= width - 1
                                  and part[1::2].min() >= 0 and part[1::2].max() <= height - 1)
               for part in item)


def _polygon_rle(parts: Polygon, height: int, width: int) -> torch.Tensor:
    """Counts (Tensor[K] int32) of one polygon instance rasterised at ``height`` x ``width``."""
    coords, part_lengths, _ = pack_polygons([parts])
    return rle_from_polygons(coords, part_lengths, height, width)


class LazyPolygonMasks(LazyInstanceMasks, PolygonMasks):
    """Lazy masks that are a ``PolygonMasks`` (what ``LoadAnnotations(poly2mask=False)``
    produces): polygon instances only, as there.

    ``.masks`` is ``PolygonMasks``' list of instances, each a list of 1-D ndarray parts
    (assignable); iteration and indexing follow ``PolygonMasks``. What this adds to mmdet's
    class is speed: pixels and Mask R-CNN targets are rasterised natively, bit-exact.
    """

    def _checked_item(self, item, index: int) -> Item:
        if isinstance(item, RasterSource):
            raise MaskInputError(f'LazyPolygonMasks holds polygons only (as PolygonMasks); '
                                 f'instance {index} is a {item.kind} raster: use '
                                 'LazyBitmapMasks (LoadLazyAnnotations with poly2mask=True)')
        return super()._checked_item(item, index)

    @property
    def masks(self) -> list:
        return self.items

    @masks.setter
    def masks(self, value) -> None:
        self.items = [self._checked_item(item, i) for i, item in enumerate(value)]

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, index) -> 'LazyPolygonMasks':
        """``PolygonMasks.__getitem__``, also where an instance has no polygon parts.

        There, an int (or 0-d int array) selecting such an instance gives no instances at all
        (the instance's empty list of parts is read as an empty list of instances), and any other
        selection that starts with one raises ``IndexError`` (its constructor reads
        ``masks[0][0]``). mmdet's ``LoadAnnotations``, and ours, never make such an instance (a
        mask without a valid part becomes the placeholder ``[np.zeros(6)]``).
        """
        selected = super().__getitem__(index)
        if not selected.items or selected.items[0]:
            return selected
        if _is_scalar_index(index):
            return self._wrap([], self.height, self.width)
        raise MaskIndexError(f'LazyPolygonMasks[{index!r:.60}]: the first instance selected has '
                             'no polygon parts, which PolygonMasks refuses (IndexError)')

    def _positions(self, index) -> list:
        count = len(self.items)
        if isinstance(index, np.ndarray):  # np.where as there: a 0-d bool array raises
            index = (np.where(index)[0] if index.dtype == bool else index).tolist()
        if isinstance(index, list):
            return [range(count)[i] for i in index]
        try:  # Python's list rules, as PolygonMasks indexes its list (a bool is an int there)
            selected = range(count)[index]
        except Exception:
            raise ValueError(f'Unsupported input of type {type(index)} for indexing!') from None
        return list(selected) if isinstance(selected, range) else [selected]

    @staticmethod
    def _items_of(masks: BaseInstanceMasks) -> list:
        return masks.items if isinstance(masks, LazyInstanceMasks) else list(masks.masks)

    def to_ndarray(self) -> np.ndarray:
        """ndarray[N, height, width] bool, as ``PolygonMasks.to_ndarray`` (uint8 when N = 0)."""
        pixels = self._rasterize()
        return pixels.view(bool) if len(pixels) else pixels

    def crop_and_resize(self, bboxes, out_shape, inds, device='cpu', interpolation='bilinear',
                        binarize=True) -> BitmapMasks:
        """``LazyInstanceMasks.crop_and_resize`` with ``PolygonMasks``' bool targets."""
        targets = super().crop_and_resize(bboxes, out_shape, inds, device, interpolation,
                                          binarize)
        if len(targets):
            targets.masks = targets.masks.view(bool)
        return targets


_UPSTREAM_CLASS = {LazyBitmapMasks: BitmapMasks, LazyPolygonMasks: PolygonMasks}


_POLYGON, _RLE, _BITMAP = 0, 1, 2  # how crop_and_resize computes an instance's targets


def _is_scalar_index(index) -> bool:
    """Whether ``PolygonMasks.__getitem__`` reads ``index`` as one position (not a list or slice):
    a bool ndarray becomes a list of positions there, any other ndarray its ``tolist()``."""
    if isinstance(index, np.ndarray):
        return index.ndim == 0 and index.dtype != bool
    return not isinstance(index, (list, slice))


def _crop_kind(item: Item, binarize: bool) -> int:
    if not isinstance(item, RasterSource):
        return _POLYGON
    # rle_crop_and_resize reproduces BitmapMasks' binarized targets, not the soft ones
    return _RLE if binarize and item.is_plain_rle else _BITMAP


def _fill_rows(out: torch.Tensor, rows: list, op_name: str,
               fill: Callable[[torch.Tensor], None]) -> None:
    """Makes masks ``rows`` of ``out`` with ``fill(target)`` (an ``*_into`` op writing a uint8
    [len(rows), H, W] target): straight into ``out`` when the rows are all of it, else into a
    scratch tensor copied in by row index; on the CPU, then copied over, in a build without the
    kernel for out's device."""
    run_on = _kernel_device(op_name, out.device)
    if run_on == out.device and rows == list(range(len(out))):
        fill(out)
        return
    target = torch.empty((len(rows), *out.shape[1:]), dtype=torch.uint8, device=run_on)
    fill(target)
    out.index_copy_(0, _staged(torch.tensor(rows, dtype=torch.int64), out.device),
                    _staged(target, out.device))


def _staged(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` without making the host wait: a host tensor goes to a GPU through
    pinned memory (a copy from pageable memory waits for the stream)."""
    if tensor.device == device:
        return tensor
    if device.type == 'cuda' and tensor.device.type == 'cpu':
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _kernel_device(op_name: str, device: torch.device) -> torch.device:
    """``device`` when this build has ``op_name``'s kernel for it, else the CPU (a CPU-only build
    used for GPU training): the dispatcher's answer, with the same bits either way."""
    return device if has_kernel(op_name, device) else torch.device('cpu')


def _index_array(inds) -> np.ndarray:
    """Instance indices (a sequence, ndarray or Tensor[M]) as ndarray[M] int64."""
    if isinstance(inds, torch.Tensor):
        inds = inds.cpu().numpy()
    return np.asarray(inds, dtype=np.int64).reshape(-1)


def _distinct(inds: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """The instances that ``inds`` (ndarray[M], values in [0, count)) names, ascending, and each
    ind's position among them: ``np.unique(inds, return_inverse=True)`` without sorting."""
    used = np.bincount(inds, minlength=count) > 0
    return np.flatnonzero(used), (np.cumsum(used) - 1)[inds]


def _bitmap_masks(masks: np.ndarray) -> BitmapMasks:
    """``BitmapMasks`` holding ndarray[N, H, W] ``masks`` itself: its constructor would copy them
    one mask at a time (``np.stack``), which takes longer than computing 128 targets."""
    bitmaps = BitmapMasks([], *masks.shape[1:])
    bitmaps.masks = masks
    return bitmaps


def _box_tensor(boxes: np.ndarray) -> torch.Tensor:
    """Tensor[M, 4] for the native ops. float32/float64 stay (mmdet rounds in the boxes' dtype);
    other dtypes become float64, which is what mmdet's polygon arithmetic makes of integers."""
    if boxes.dtype not in (np.float32, np.float64):
        boxes = boxes.astype(np.float64)
    return torch.from_numpy(np.ascontiguousarray(boxes))


def _polygon_boxes(instances: Sequence[Polygon], height: int, width: int) -> np.ndarray:
    """ndarray[N, 4] float32 x1, y1, x2, y2 of polygon instances, as ``PolygonMasks.get_bboxes``:
    float32 extremes of the points, the minimum starting at (2 * width, 2 * height) and the
    maximum at (0, 0). Minima and maxima are exact, so one vectorised pass gives the same bits."""
    boxes = np.tile(np.array([2 * width, 2 * height, 0, 0], dtype=np.float32),
                    (len(instances), 1))
    parts = [np.asarray(part).reshape(-1, 2) for instance in instances for part in instance]
    if not parts:
        return boxes
    points = np.concatenate(parts).astype(np.float32)
    points_per_instance = [sum(len(part) for part in instance) // 2 for instance in instances]
    owner = np.repeat(np.arange(len(instances)), points_per_instance)
    np.minimum.at(boxes[:, :2], owner, points)
    np.maximum.at(boxes[:, 2:], owner, points)
    return boxes


def _raster_box(item: RasterSource) -> np.ndarray:
    """ndarray[4] float32 x1, y1, x2, y2 of one raster, as ``BitmapMasks.get_bboxes``: the last
    row and column + 1, zeros for an empty mask."""
    if not item.is_plain_rle:
        bitmap = item.bitmap()
        return BitmapMasks(bitmap[None], *bitmap.shape).get_bboxes(HorizontalBoxes).numpy()[0]
    counts = item.counts()
    if rle_area(counts) == 0:
        return np.zeros(4, dtype=np.float32)
    x, y, w, h = rle_to_bbox(counts, item.height, item.width).tolist()
    return np.array([x, y, x + w, y + h], dtype=np.float32)
