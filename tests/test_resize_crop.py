"""``ops.resize_part`` against mmcv's resize then the crop, and ``ResizeCrop`` against mmdet's
resize step then its ``RandomCrop`` (transforms/resize_crop.py)."""
import cv2
import mmcv
import numpy as np
import pytest
import torch
from mmdet.registry import TRANSFORMS
from mmengine.registry import init_default_scope

from mmdet_ext.ops import resize_part, source_window
from mmdet_ext.transforms import ResizeCrop
from mmdet_ext.transforms.mix_augment import CACHED_KEYS, MosaicCanvas

from helpers.transform_streams import run_both, same, samples_of


def _case(rng: np.random.Generator):
    height, width = (int(v) for v in rng.integers(1, 160, 2))
    channels = int(rng.choice([1, 3, 4]))
    kind = rng.integers(4)
    if kind == 0:  # the same size: cv2 copies
        out_h, out_w = height, width
    elif kind == 1 and height > 1 and width > 1:  # halving: cv2's area path where exact
        out_h, out_w = max(1, height // 2), max(1, width // 2)
    else:
        out_h, out_w = (int(v) for v in np.maximum(1, np.array([height, width]) *
                                                     rng.uniform(0.2, 3.0, 2)).astype(int))
    y, x = int(rng.integers(out_h)), int(rng.integers(out_w))
    keep = (y, x, int(rng.integers(1, out_h - y + 1)), int(rng.integers(1, out_w - x + 1)))
    image = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    return image, (out_h, out_w), keep


def test_resize_part_equals_mmcv_resize_then_crop():
    rng = np.random.default_rng(0)
    for case in range(1500):
        image, (out_h, out_w), (y, x, h, w) = _case(rng)
        expected = mmcv.imresize(image, (out_w, out_h)).reshape(out_h, out_w, -1)
        got = resize_part(torch.from_numpy(image), (out_h, out_w), (y, x, h, w)).numpy()
        assert np.array_equal(got, expected[y:y + h, x:x + w]), (case, image.shape, out_h, out_w,
                                                                 (y, x, h, w))


def test_resize_part_equals_mmcv_at_mosaic_and_lsj_sizes():
    # Rows long enough for the vector loops' full blocks and their tails, at the sizes RTMDet's
    # mosaic (1280x1280 by 0.5 to 2) and large scale jitter (0.1 to 2) resize to.
    rng = np.random.default_rng(1)
    for case in range(12):
        height, width = (int(v) for v in rng.integers(600, 1400, 2))
        channels = (3, 1, 4)[case % 3]
        ratio = rng.uniform(0.1, 2.0, 2) if case % 2 else np.full(2, rng.uniform(0.5, 2.0))
        out_h, out_w = (int(v) for v in np.maximum(1, np.array([height, width]) * ratio))
        kh, kw = min(out_h, 640), min(out_w, 640)
        y, x = int(rng.integers(out_h - kh + 1)), int(rng.integers(out_w - kw + 1))
        image = cv2.GaussianBlur(rng.integers(0, 256, (height, width, channels), dtype=np.uint8),
                                 (5, 5), 1.5).reshape(height, width, channels)
        expected = mmcv.imresize(image, (out_w, out_h)).reshape(out_h, out_w, -1)
        got = resize_part(torch.from_numpy(image), (out_h, out_w), (y, x, kh, kw)).numpy()
        assert np.array_equal(got, expected[y:y + kh, x:x + kw]), (case, image.shape, out_h,
                                                                   out_w)


def test_resize_part_of_a_window_equals_the_whole_images():
    # A window holding what source_window bounds gives the whole image's bits; one a pixel
    # short on any side is refused, never read past.
    rng = np.random.default_rng(2)
    refused = 0
    for case in range(400):
        image, (out_h, out_w), (y, x, h, w) = _case(rng)
        whole = resize_part(torch.from_numpy(image), (out_h, out_w), (y, x, h, w))
        wy, wx, wh, ww = source_window(image.shape[:2], (out_h, out_w), (y, x, h, w))
        assert 0 <= wy and wy + wh <= image.shape[0] and 0 <= wx and wx + ww <= image.shape[1]
        window = np.ascontiguousarray(image[wy:wy + wh, wx:wx + ww])
        got = resize_part(torch.from_numpy(window), (out_h, out_w), (y, x, h, w),
                          (wy, wx) + image.shape[:2])
        assert torch.equal(got, whole), (case, image.shape, (out_h, out_w), (y, x, h, w))
        for side in range(4):  # the window narrowed by one pixel on one side, if it reads there
            sy, sx, sh, sw = wy + (side == 0), wx + (side == 1), wh - (side in (0, 2)), \
                ww - (side in (1, 3))
            if sh < 1 or sw < 1:
                continue
            narrowed = np.ascontiguousarray(image[sy:sy + sh, sx:sx + sw])
            try:
                again = resize_part(torch.from_numpy(narrowed), (out_h, out_w), (y, x, h, w),
                                    (sy, sx) + image.shape[:2])
            except RuntimeError as error:
                assert 'lacks pixels the part' in str(error)
                refused += 1
            else:
                assert torch.equal(again, whole), (case, side)
    assert refused > 100
    with pytest.raises(RuntimeError, match='is not inside a 10x10 image'):
        resize_part(torch.zeros((5, 5, 3), dtype=torch.uint8), (20, 20), (0, 0, 4, 4),
                    (6, 0, 10, 10))


def test_resize_part_refuses_a_part_outside_the_image():
    image = torch.zeros((10, 10, 3), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match='inside the 20x20 resized image'):
        resize_part(image, (20, 20), (15, 0, 10, 5))
    with pytest.raises(RuntimeError, match='1 to 4 channels'):
        resize_part(torch.zeros((4, 4, 5), dtype=torch.uint8), (8, 8), (0, 0, 2, 2))


PAIRS = {
    # RTMDet's, after its mosaic
    'rtmdet': (dict(type='RandomResize', scale=(1280, 1280), ratio_range=(0.5, 2.0),
                    keep_ratio=True), dict(type='RandomCrop', crop_size=(640, 640))),
    'choice-negative-crop': (dict(type='RandomChoiceResize', scales=[(300, 200), (800, 600)],
                                  keep_ratio=True),
                             dict(type='RandomCrop', crop_size=(0.5, 0.7),
                                  crop_type='relative_range', allow_negative_crop=True)),
    'fixed-no-ratio': (dict(type='Resize', scale=(500, 333), keep_ratio=False),
                       dict(type='RandomCrop', crop_size=(200, 300), recompute_bbox=True)),
    'factor': (dict(type='Resize', scale_factor=1.7, keep_ratio=True),
               dict(type='RandomCrop', crop_size=(256, 256), bbox_clip_border=False)),
    # not planned: mmdet's steps run as they are
    'nearest': (dict(type='RandomResize', scale=(640, 640), ratio_range=(0.5, 2.0),
                     keep_ratio=True, interpolation='nearest'),
                dict(type='RandomCrop', crop_size=(320, 320))),
}


class _Pair:
    """mmdet's two steps as one callable, for ``_run_both``."""

    def __init__(self, resize: dict, crop: dict) -> None:
        self.resize, self.crop = TRANSFORMS.build(resize), TRANSFORMS.build(crop)

    def __call__(self, results: dict):
        results = self.resize(results)
        return None if results is None else self.crop(results)


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('name', list(PAIRS))
def test_resize_crop_matches_mmdet(toy_coco_root, name, lazy):
    init_default_scope('mmdet')
    samples = samples_of(toy_coco_root, lazy)
    resize, crop = PAIRS[name]
    ours = ResizeCrop(resize=resize, crop=crop)
    assert ours.planned == (name != 'nearest')
    changed = run_both(_Pair(resize, crop), ours, samples)
    assert changed > len(samples) // 2


def test_a_crop_that_keeps_no_box_gives_none_as_mmdet(toy_coco_root):
    init_default_scope('mmdet')
    resize, crop = (dict(type='Resize', scale=(2000, 2000), keep_ratio=True),
                    dict(type='RandomCrop', crop_size=(8, 8)))
    samples = samples_of(toy_coco_root, lazy=True)
    nones = run_both(_Pair(resize, crop), ResizeCrop(resize=resize, crop=crop), samples,
                      count='none')
    assert nones > 0


class _Chain:
    """mmdet's mosaic, resize and crop as one callable, for ``run_both``."""

    def __init__(self, mosaic: dict, resize: dict, crop: dict) -> None:
        self.steps = [TRANSFORMS.build(cfg) for cfg in (mosaic, resize, crop)]

    def __call__(self, results: dict):
        for step in self.steps:
            results = step(results)
            if results is None:
                return None
        return results


CHAINS = {
    # RTMDet-Ins's own
    'rtmdet': (dict(img_scale=(640, 640), pad_val=114.0, max_cached_images=20,
                    random_pop=False), *PAIRS['rtmdet']),
    # a smaller canvas, some samples left as they are, a crop that can miss every box
    'small-sometimes': (dict(img_scale=(320, 256), max_cached_images=6, random_pop=True,
                             prob=0.6), *PAIRS['choice-negative-crop']),
    'factor': (dict(img_scale=(256, 256), pad_val=7), *PAIRS['factor']),
    # not planned: the canvas painted whole, mmdet's steps after it
    'nearest': (dict(img_scale=(320, 320)), *PAIRS['nearest']),
}


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('name', list(CHAINS))
def test_resize_crop_after_a_mosaic_matches_mmdet(toy_coco_root, name, lazy):
    """``ResizeCrop(mosaic=...)``, the canvas painted only where the resize reads, against
    mmdet's ``CachedMosaic``, resize and ``RandomCrop``: the same draws, outputs and caches,
    sample after sample."""
    init_default_scope('mmdet')
    samples = samples_of(toy_coco_root, lazy)
    mosaic, resize, crop = CHAINS[name]
    if name == 'small-sometimes':  # boxes as arrays (LoadAnnotations(box_type=None))
        for sample in samples:
            sample['gt_bboxes'] = sample['gt_bboxes'].numpy()
    theirs = _Chain(dict(type='CachedMosaic', **mosaic), resize, crop)
    ours = ResizeCrop(resize=resize, crop=crop, mosaic=dict(type='FastCachedMosaic', **mosaic))
    painted = []
    paint = MosaicCanvas.paint
    with pytest.MonkeyPatch.context() as patch:  # to see which windows were painted
        patch.setattr(MosaicCanvas, 'paint', lambda self, window=None: (
            painted.append((window, self.shape)), paint(self, window))[1])
        changed = run_both(theirs, ours, samples)
    assert changed > len(samples) // 2
    same([{key: entry[key] for key in CACHED_KEYS if key in entry}
          for entry in theirs.steps[0].results_cache],
         [{key: entry[key] for key in CACHED_KEYS if key in entry}
          for entry in ours.mosaic.results_cache], 'cache')
    assert painted
    parts = [window for window, _ in painted]
    if name == 'nearest':
        assert parts == [None] * len(parts)
    else:  # windows only, and some of them a part of the canvas
        assert None not in parts
        assert any(w[2] * w[3] < shape[0] * shape[1] for w, (_, shape) in zip(parts, painted))
