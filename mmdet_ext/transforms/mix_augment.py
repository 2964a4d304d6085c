"""RTMDet's mosaic, mix-up and colour jitter with mmdet's results, without its redundant work.

``adopt()`` swaps mmdet 3.3's ``CachedMosaic``, ``CachedMixUp``, ``YOLOXHSVRandomAug`` and ``Pad``
for these subclasses. Each makes the random draws its parent makes, in the same order (it calls the
parent's own draw methods), keeps the caches as the parent keeps them (one snapshot of every
sample, the same pop rule), and gives the same ``results``: the same image bits, boxes, labels,
ignore flags and masks (``tests/test_mix_augment.py`` runs both on the same seeds, sample after
sample, caches filled). What they leave out:

- ``CachedMosaic`` deep-copies each of the four patches twice more after the cache's snapshot
  (``mix_results``, then ``results_patch``), only to read them. Here the patches are read where
  they are (the cache's snapshots and ``results``), and only what mmdet changes in place, the
  boxes, is cloned first; a patch already at its mosaic size is pasted without the resize's copy,
  and only the canvas around the patches is filled with the pad value.
- ``CachedMixUp`` deep-copies the retrieved snapshot, and builds its canvases in float64
  (``np.ones(...) * pad_val``): a 640x640 image passes through three float64 images before it
  is averaged in float32 and truncated. Where that is exact in 8 bits (uint8 colour images, a
  pad value in 0..255, no scale jitter that resamples the float canvas), the canvas is uint8
  and the average is ``floor((a + b) / 2)`` (``ops.average_floor``, one pass), which is what
  ``(0.5 * a + 0.5 * b).astype(uint8)`` gives for 8-bit ``a`` and ``b`` (both halves and their
  sum are exact in float32). Anything else runs mmdet's own code.
- ``Pad`` of a flipped image (``RandomFlip`` leaves a view with a negative stride) goes
  through numpy's strided copy, which OpenCV makes of such a view, before its border is added;
  here the flipped view is copied by ``cv2.flip`` first.
- ``YOLOXHSVRandomAug`` shifts and clips the HSV channels as int16 images. Here the same
  per-channel map is one pass over the uint8 HSV image (``ops.hsv_shift``; nothing where the
  three gains are drawn 0); other images, and deltas past 255 (gains past -255..255, where
  mmdet's int16 sums could wrap), run mmdet's own code.
"""
import copy
from typing import NamedTuple, Optional

import cv2
import mmcv
import numpy as np
import torch
from mmdet.datasets.transforms import CachedMixUp, CachedMosaic, Pad, YOLOXHSVRandomAug
from mmdet.registry import TRANSFORMS
from mmdet.structures.bbox import HorizontalBoxes, autocast_box_type

from ..ops import average_floor, hsv_shift
from ..structures.lazy_masks import chain_calls

LOCATIONS = ('top_left', 'top_right', 'bottom_left', 'bottom_right')


# What the cached transforms read of a cached sample (all they keep of it).
CACHED_KEYS = ('img', 'gt_bboxes', 'gt_bboxes_labels', 'gt_ignore_flags', 'gt_masks')


def _snapshot_into(cache: list, results: dict, limit: int, random_pop: bool) -> dict:
    """The cache rule both cached transforms share with mmdet: every sample appended, and past
    ``limit`` one popped, the oldest or one drawn as mmdet draws it (numpy's
    ``randint(0, len - 1)``, which never picks the sample just appended). Returns the entry.

    mmdet appends a deep copy of ``results``. The entry here holds ``CACHED_KEYS``' values
    themselves: a transform that mixes replaces every one of them in ``results`` with a new
    object, so the entry is then the only holder of the old ones and needs no copy (but for what
    the new objects share: the mix-up's masks); a transform that leaves ``results`` as it was
    calls ``_own_copy`` on the entry before it returns."""
    entry = {key: results[key] for key in CACHED_KEYS if key in results}
    cache.append(entry)
    if len(cache) > limit:
        cache.pop(np.random.randint(0, len(cache) - 1) if random_pop else 0)
    return entry


def _own_copy(entry: dict, results: dict) -> dict:
    """``results`` goes on unchanged: the cache's ``entry`` of it becomes a copy of its own."""
    entry.update(copy.deepcopy(entry))
    return results


def _resized(img: np.ndarray, size_wh: tuple) -> np.ndarray:
    """``mmcv.imresize(img, size_wh)``; an image already that size is given back as it is (cv2
    copies it unchanged), to be read, not written."""
    if (img.shape[1], img.shape[0]) == tuple(size_wh):
        return img
    return mmcv.imresize(img, size_wh)


CV2_DEPTHS = tuple(np.dtype(t) for t in (np.uint8, np.int8, np.uint16, np.int16, np.int32,
                                         np.float32, np.float64))


def contiguous_if_flipped(img: np.ndarray) -> np.ndarray:
    """``img`` as it is, or, where it is a flipped view (``RandomFlip``'s ``np.flip``: a
    negative stride along its height or width), a contiguous copy of it made by ``cv2.flip`` of
    the view it was flipped from: the same values, about 40 times faster than numpy's strided
    copy, which OpenCV makes of such a view before it reads it."""
    if img.ndim not in (2, 3) or min(img.strides[:2]) >= 0 or \
            min(img.strides[2:], default=0) < 0 or img.dtype not in CV2_DEPTHS:
        return img
    flip_code = {(True, False): 0, (False, True): 1, (True, True): -1}[
        (img.strides[0] < 0, img.strides[1] < 0)]
    return cv2.flip(img[::-1 if img.strides[0] < 0 else 1, ::-1 if img.strides[1] < 0 else 1],
                    flip_code)


def _fill_around(canvas: np.ndarray, quadrant: tuple, pasted: tuple, fill: np.ndarray) -> None:
    """``fill`` the part of ``canvas``'s ``quadrant`` around ``pasted`` (a part of it; both
    (y1, y2, x1, x2)): with the four patches pasted, the mosaic's canvas is then what mmdet's
    is (filled, then pasted on) without the pasted pixels written twice."""
    qy1, qy2, qx1, qx2 = quadrant
    py1, py2, px1, px2 = pasted
    if py2 <= py1 or px2 <= px1:
        canvas[qy1:qy2, qx1:qx2] = fill
        return
    canvas[qy1:py1, qx1:qx2] = fill
    canvas[py2:qy2, qx1:qx2] = fill
    canvas[py1:py2, qx1:px1] = fill
    canvas[py1:py2, px2:qx2] = fill


def _is_byte_colour(img: np.ndarray) -> bool:
    return img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3


def _moved_boxes(moves: list):
    """The mosaic's boxes: each patch's (``moves``: (boxes, scale, shift_x, shift_y)) cloned,
    ``rescale_([scale, scale])``, ``translate_([shift_x, shift_y])``, then joined (``cat``), as
    mmdet makes them. For ``HorizontalBoxes`` of one float dtype (those two methods multiply by
    the factors and add the shifts as tensors of the boxes' dtype), one multiply and one add over
    all the patches' boxes with each row's factor and shift: the same operations on the same
    numbers, elementwise."""
    first = moves[0][0].tensor
    if not all(type(b) is HorizontalBoxes and b.tensor.dtype == first.dtype and
               b.tensor.device == first.device for b, _, _, _ in moves) or \
            not first.dtype.is_floating_point:
        moved = []
        for patch_boxes, scale, shift_x, shift_y in moves:
            patch_boxes = patch_boxes.clone()
            patch_boxes.rescale_([scale, scale])
            patch_boxes.translate_([shift_x, shift_y])
            moved.append(patch_boxes)
        return moved[0].cat(moved, 0)
    factors = np.repeat(np.array([[scale] * 4 + [shift_x, shift_y] * 2
                                  for _, scale, shift_x, shift_y in moves], dtype=np.float64),
                        [len(b) for b, _, _, _ in moves], axis=0)
    factors = torch.from_numpy(factors).to(first.dtype)  # new_tensor's rounding
    joined = torch.cat([b.tensor for b, _, _, _ in moves]).reshape(-1, 4)
    return HorizontalBoxes(joined * factors[:, :4] + factors[:, 4:], clone=False)


class MosaicCanvas(NamedTuple):
    """A mosaic's canvas before it is painted: its shape and dtype, the pad value, and the four
    quadrants, each with the part of it its patch covers (both (y1, y2, x1, x2)) and the patch's
    pixels there (a view of the patch, which is read, not written)."""
    shape: tuple
    dtype: np.dtype
    fill: np.ndarray
    quadrants: list

    def paint(self, window: Optional[tuple] = None) -> np.ndarray:
        """The canvas mmdet's ``CachedMosaic`` makes, or its part ``window`` (y, x, h, w), a new
        array: the patches pasted on, the rest filled with the pad value, each pixel written
        once."""
        y0, x0, height, width = window or (0, 0) + tuple(self.shape[:2])
        out = np.empty((height, width) + tuple(self.shape[2:]), dtype=self.dtype)

        def clipped(box):  # the part of box inside the window, in the window's coordinates
            y1, y2, x1, x2 = box
            return (min(max(y1 - y0, 0), height), min(max(y2 - y0, 0), height),
                    min(max(x1 - x0, 0), width), min(max(x2 - x0, 0), width))

        for quadrant, pasted, pixels in self.quadrants:
            qy1, qy2, qx1, qx2 = clipped(quadrant)
            if qy2 <= qy1 or qx2 <= qx1:
                continue
            py1, py2, px1, px2 = clipped(pasted)
            if py2 > py1 and px2 > px1:
                sy, sx = py1 + y0 - pasted[0], px1 + x0 - pasted[2]
                out[py1:py2, px1:px2] = pixels[sy:sy + py2 - py1, sx:sx + px2 - px1]
            _fill_around(out, (qy1, qy2, qx1, qx2), (py1, py2, px1, px2), self.fill)
        return out


@TRANSFORMS.register_module()
class FastCachedMosaic(CachedMosaic):
    """mmdet's ``CachedMosaic`` (same arguments, draws, cache and results; module doc)."""

    def transform(self, results: dict) -> dict:
        canvas = self.mosaic(results)
        if canvas is not None:
            results['img'] = canvas.paint()
        return results

    @autocast_box_type()
    def mosaic(self, results: dict) -> Optional[MosaicCanvas]:
        """mmdet's mosaic of ``results`` but for its pixels: the sample cached, the draws made,
        the boxes, labels, flags and masks of the four patches put in ``results``, whose
        ``img`` is then None; the canvas is returned unpainted, for the caller to paint (whole,
        or only where a resize after it reads: ``ResizeCrop``). None where mmdet leaves the
        sample as it is (too few cached, or the draw against ``prob``): ``results`` unchanged."""
        entry = _snapshot_into(self.results_cache, results, self.max_cached_images,
                               self.random_pop)
        if len(self.results_cache) <= 4 or np.random.uniform(0, 1) > self.prob:
            _own_copy(entry, results)
            return None
        patches = [results] + [self.results_cache[i] for i in self.get_indexes(self.results_cache)]
        width, height = self.img_scale
        img = results['img']
        shape = (int(height * 2), int(width * 2)) + ((3,) if img.ndim == 3 else ())
        fill = np.full((), self.pad_val, dtype=img.dtype)  # np.full's cast, as mmdet's canvas
        # the centre's two draws come after the patches' indexes, as in mmdet
        center = (int(np.random.uniform(*self.center_ratio_range) * width),
                  int(np.random.uniform(*self.center_ratio_range) * height))
        rows, columns = shape[:2]
        quadrants = ((0, center[1], 0, center[0]), (0, center[1], center[0], columns),
                     (center[1], rows, 0, center[0]), (center[1], rows, center[0], columns))
        with_mask = 'gt_masks' in results
        boxes, labels, ignore_flags, masks, painted = [], [], [], [], []
        for loc, patch, quadrant in zip(LOCATIONS, patches, quadrants):
            patch_h, patch_w = patch['img'].shape[:2]
            scale = min(height / patch_h, width / patch_w)
            patch_img = _resized(patch['img'], (int(patch_w * scale), int(patch_h * scale)))
            (px1, py1, px2, py2), (cx1, cy1, cx2, cy2) = self._mosaic_combine(
                loc, center, patch_img.shape[:2][::-1])
            painted.append((quadrant, (py1, py2, px1, px2), patch_img[cy1:cy2, cx1:cx2]))
            shift_x, shift_y = px1 - cx1, py1 - cy1
            boxes.append((patch['gt_bboxes'], scale, shift_x, shift_y))
            labels.append(patch['gt_bboxes_labels'])
            ignore_flags.append(patch['gt_ignore_flags'])
            if with_mask and patch.get('gt_masks', None) is not None:
                out_shape = (int(width * 2), int(height * 2))
                masks.append(chain_calls(patch['gt_masks'], [
                    ('rescale', (float(scale),), {}),
                    ('translate', (), dict(out_shape=out_shape, offset=shift_x,
                                           direction='horizontal')),
                    ('translate', (), dict(out_shape=out_shape, offset=shift_y,
                                           direction='vertical'))]))
        boxes = _moved_boxes(boxes)
        if self.bbox_clip_border:
            boxes.clip_([2 * height, 2 * width])
        inside = boxes.is_inside([2 * height, 2 * width]).numpy()
        results['img'] = None
        results['img_shape'] = shape[:2]
        results['gt_bboxes'] = boxes[inside]
        results['gt_bboxes_labels'] = np.concatenate(labels, 0)[inside]
        results['gt_ignore_flags'] = np.concatenate(ignore_flags, 0)[inside]
        if with_mask:
            results['gt_masks'] = masks[0].cat(masks)[inside]
        return MosaicCanvas(shape, img.dtype, fill, painted)


@TRANSFORMS.register_module()
class FastCachedMixUp(CachedMixUp):
    """mmdet's ``CachedMixUp`` (same arguments, draws, cache and results; module doc)."""

    @autocast_box_type()
    def transform(self, results: dict) -> dict:
        pad = np.asarray(self.pad_val, dtype=np.float64)  # a value, or one per channel
        if not (_is_byte_colour(results['img']) and pad.shape in ((), (3,))
                and np.all((pad >= 0) & (pad <= 255))):
            return super().transform(results)
        # What mmdet's transform would start from, should a draw below leave the 8-bit case.
        state, cache = np.random.get_state(), list(self.results_cache)
        entry = _snapshot_into(self.results_cache, results, self.max_cached_images,
                               self.random_pop)
        if len(self.results_cache) <= 1 or np.random.uniform(0, 1) > self.prob:
            return _own_copy(entry, results)
        retrieved = self.results_cache[self.get_indexes(self.results_cache)]
        if retrieved['gt_bboxes'].shape[0] == 0:
            return _own_copy(entry, results)
        jit_factor = np.random.uniform(*self.ratio_range)
        is_flip = np.random.uniform(0, 1) > self.flip_ratio
        width, height = self.dynamic_scale
        if not (_is_byte_colour(retrieved['img'])
                and (int(width * jit_factor), int(height * jit_factor)) == (width, height)):
            np.random.set_state(state)
            self.results_cache[:] = cache
            return super().transform(results)
        if 'gt_masks' in entry:  # the mixed masks hold this sample's own polygons (cat)
            entry['gt_masks'] = copy.deepcopy(entry['gt_masks'])
        img = results['img']
        scale = min(height / retrieved['img'].shape[0], width / retrieved['img'].shape[1])
        small = _resized(retrieved['img'], (int(retrieved['img'].shape[1] * scale),
                                            int(retrieved['img'].shape[0] * scale)))
        target_h, target_w = img.shape[:2]
        # mmdet's float canvas, flipped, then padded to the target's size: one uint8 image
        shape = (max(height, target_h), max(width, target_w), 3)
        if small.shape == shape:  # it covers the canvas (RTMDet's: both 640x640): no pad
            canvas = cv2.flip(small, 1) if is_flip else small
        else:
            canvas = np.empty(shape, dtype=np.uint8)
            canvas[...] = pad.astype(np.uint8)  # mmdet's float to uint8 cast: truncation
            canvas[:small.shape[0], :small.shape[1]] = small
            if is_flip:
                canvas[:height, :width] = cv2.flip(canvas[:height, :width], 1)
        y_offset = np.random.randint(0, canvas.shape[0] - target_h) if canvas.shape[0] > target_h \
            else 0
        x_offset = np.random.randint(0, canvas.shape[1] - target_w) if canvas.shape[1] > target_w \
            else 0
        mixed = canvas[y_offset:y_offset + target_h, x_offset:x_offset + target_w]
        mixed = average_floor(torch.from_numpy(img), torch.from_numpy(mixed)).numpy()
        return self._mix_annotations(results, retrieved, mixed, scale * jit_factor, is_flip,
                                     (height, width), (x_offset, y_offset))

    def _mix_annotations(self, results: dict, retrieved: dict, mixed: np.ndarray, scale: float,
                         is_flip: bool, scaled_hw: tuple, offset_xy: tuple) -> dict:
        """``results`` with the retrieved sample's boxes, labels, flags and masks added as mmdet
        maps them (scaled, clipped to the jittered canvas, flipped in it, shifted by the crop,
        clipped to the target; those outside the target dropped)."""
        target_h, target_w = mixed.shape[:2]
        boxes = retrieved['gt_bboxes'].clone()
        boxes.rescale_([scale, scale])
        with_mask = 'gt_masks' in results
        if self.bbox_clip_border:
            boxes.clip_(list(scaled_hw))
        if is_flip:
            boxes.flip_(list(scaled_hw), direction='horizontal')
        boxes.translate_([-offset_xy[0], -offset_xy[1]])
        if with_mask:
            masks = chain_calls(retrieved['gt_masks'], [
                ('rescale', (scale,), {}), *([('flip', (), {})] if is_flip else []),
                ('translate', (), dict(out_shape=(target_h, target_w), offset=-offset_xy[0],
                                       direction='horizontal')),
                ('translate', (), dict(out_shape=(target_h, target_w), offset=-offset_xy[1],
                                       direction='vertical'))])
        if self.bbox_clip_border:
            boxes.clip_([target_h, target_w])
        boxes = boxes.cat((results['gt_bboxes'], boxes), dim=0)
        inside = boxes.is_inside([target_h, target_w]).numpy()
        results['img'] = mixed
        results['img_shape'] = mixed.shape[:2]
        results['gt_bboxes'] = boxes[inside]
        for key in ('gt_bboxes_labels', 'gt_ignore_flags'):
            results[key] = np.concatenate((results[key], retrieved[key]), axis=0)[inside]
        if with_mask:
            results['gt_masks'] = masks.cat([results['gt_masks'], masks])[inside]
        return results


@TRANSFORMS.register_module()
class FastYOLOXHSVRandomAug(YOLOXHSVRandomAug):
    """mmdet's ``YOLOXHSVRandomAug`` (same arguments, draws and image; module doc)."""

    def transform(self, results: dict) -> dict:
        img = results['img']
        if not _is_byte_colour(img):
            return super().transform(results)
        if max(abs(self.hue_delta), abs(self.saturation_delta), abs(self.value_delta)) > 255:
            return super().transform(results)  # gains past -255..255: mmdet's int16 sums
        gains = self._get_hsv_gains().astype(np.int64)  # each |gain| < its delta
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
        if gains.any():
            hsv = hsv_shift(torch.from_numpy(hsv), gains.tolist()).numpy()
        cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR, dst=img)
        results['img'] = img
        return results


@TRANSFORMS.register_module()
class FastPad(Pad):
    """mmdet's ``Pad`` (same arguments and results): a flipped view is made contiguous by
    ``cv2.flip`` before OpenCV pads it (module doc)."""

    def _pad_img(self, results: dict) -> None:
        if isinstance(results.get('img', None), np.ndarray):
            results['img'] = contiguous_if_flipped(results['img'])
        super()._pad_img(results)
