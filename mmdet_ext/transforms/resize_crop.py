"""mmdet's resize step then its ``RandomCrop``, with only the part of the resized image the crop
keeps computed (RTMDet's mosaic: a 1280x1280 canvas resized by 0.5 to 2, of which 640x640 is
kept: a quarter of the resized pixels on average).

``adopt()`` puts ``ResizeCrop(resize=..., crop=...)`` for a ``Resize``, ``RandomResize`` or
``RandomChoiceResize`` followed by a ``RandomCrop``, where the resize does not come straight after
the loading steps (there the batch engine plans the pair itself: ``fused_mmdet_loading``). Both
steps are built from their own configs and make their own random draws, in their order; the
resize's keys and annotation maths are its own methods' (``Resize._resize_bboxes`` and the
rest), the crop runs whole on a stand-in image of the resized shape (``crop_on_stand_in``, as the
batch engine runs it), and the kept part is resized by ``ops.resize_part``: the same bits as
``mmcv.imresize`` then the crop. Anything else (another interpolation or backend, an image that
is not 8-bit with 1 to 4 channels, other step types) runs the two steps as they are.

With ``mosaic`` (a ``CachedMosaic`` right before the resize, RTMDet's chain: ``adopt()`` puts it
in), the mosaic's draws, cache and annotations are ``FastCachedMosaic``'s, and its canvas is
painted only in the window the kept part's resize reads (``ops.source_window``: at most a
1280/r square of the 1280x1280 canvas for a resize by r, a quarter of it on average over
RTMDet's 0.5 to 2), the same pixels there as the whole canvas's; the resize of the window is the
resize of the whole canvas there (``resize_part``'s ``source``).
"""
from typing import Optional

import numpy as np
import torch
from mmcv.transforms import BaseTransform, RandomChoiceResize, RandomResize
from mmdet.datasets.transforms import RandomCrop, Resize
from mmdet.structures.bbox import autocast_box_type

from .._compat import draw_resize_scale, record_homography, resize_annotations
from ..ops import resize_part, source_window
from ..registry import TRANSFORMS
from .fused_loading import crop_on_stand_in, resize_target, stand_in_image
from .mix_augment import FastCachedMosaic, MosaicCanvas


@TRANSFORMS.register_module()
class ResizeCrop(BaseTransform):
    """``resize`` (a ``Resize``, ``RandomResize`` or ``RandomChoiceResize`` config) then
    ``crop`` (a ``RandomCrop`` config), after ``mosaic`` (a ``CachedMosaic`` config) if given,
    with mmdet's results (module doc)."""

    def __init__(self, resize: dict, crop: dict, mosaic: Optional[dict] = None) -> None:
        self.mosaic = None if mosaic is None else TRANSFORMS.build(mosaic)
        self.resize_step = TRANSFORMS.build(resize)
        self.crop = TRANSFORMS.build(crop)
        inner = getattr(self.resize_step, 'resize', self.resize_step)
        self.resize = inner if type(inner) is Resize else None
        self.planned = (self.resize is not None and type(self.crop) is RandomCrop
                        and type(self.resize_step) in (Resize, RandomResize, RandomChoiceResize)
                        and self.resize.interpolation == 'bilinear'
                        and self.resize.backend == 'cv2')

    @autocast_box_type()
    def transform(self, results: dict) -> Optional[dict]:
        canvas = None
        if isinstance(self.mosaic, FastCachedMosaic):
            canvas = self.mosaic.mosaic(results)
        elif self.mosaic is not None:
            results = self.mosaic(results)
        if canvas is not None and not self._plans(canvas):
            results['img'], canvas = canvas.paint(), None
        source = results.get('img', None) if canvas is None else canvas
        if not self._plans(source):
            results = self.resize_step(results)
            return None if results is None else self.crop(results)
        return self._resize_kept_part(results, source)

    def _plans(self, image) -> bool:
        """Whether the kept part of ``image`` (an array, or a mosaic's canvas) is resized here."""
        return self.planned and isinstance(image, (np.ndarray, MosaicCanvas)) and \
            image.dtype == np.uint8 and len(image.shape) == 3 and 1 <= image.shape[2] <= 4 and \
            min(image.shape) > 0

    def _resize_kept_part(self, results: dict, source) -> Optional[dict]:
        height, width = source.shape[:2]
        scale_idx = None
        if self.resize_step is not self.resize:
            scale_idx = draw_resize_scale(self.resize_step)
        resize = self.resize
        scale, (out_w, out_h) = resize_target(resize, width, height)
        results['scale'] = scale
        results['img'] = stand_in_image(out_h, out_w)
        results['img_shape'] = (out_h, out_w)
        results['scale_factor'] = (out_w / width, out_h / height)
        results['keep_ratio'] = resize.keep_ratio
        resize_annotations(resize, results)
        record_homography(resize, results)
        if scale_idx is not None:  # RandomChoiceResize's keys, after its resize
            results['scale_idx'] = scale_idx
        keep = crop_on_stand_in(self.crop, (), results, type(self).__name__)
        if keep is None:
            return None
        if isinstance(source, MosaicCanvas):
            window = source_window((height, width), (out_h, out_w), keep)
            pixels, where = source.paint(window), window[:2] + (height, width)
        else:
            pixels, where = np.ascontiguousarray(source), None
        results['img'] = resize_part(torch.from_numpy(pixels), (out_h, out_w), keep,
                                     where).numpy()
        return results

    def __repr__(self) -> str:
        mosaic = '' if self.mosaic is None else f'mosaic={self.mosaic!r}, '
        return f'{type(self).__name__}({mosaic}resize={self.resize_step!r}, crop={self.crop!r})'
