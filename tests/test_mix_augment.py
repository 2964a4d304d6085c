"""The adopted mosaic, mix-up and colour jitter give mmdet's results (transforms/mix_augment.py).

Each pair runs on the same stream of samples (the toy set's files through mmdet's loading steps,
sizes that differ, caches that fill and pop), each call from the same random states; the results
(image bits, boxes, labels, ignore flags, masks, every other key) and the random states after it
must be equal. The adopted RTMDet-Ins config's loader, with workers, is held to the same config
with mmdet's three transforms put back.
"""
import copy
import random

import numpy as np
import pytest
import torch
from mmcv.transforms import LoadImageFromFile
from mmdet.datasets.transforms import (CachedMixUp, CachedMosaic, LoadAnnotations, Pad,
                                       YOLOXHSVRandomAug)
from mmdet.registry import TRANSFORMS
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from mmengine.config import Config
from mmengine.registry import init_default_scope

from mmdet_ext.transforms.mix_augment import CACHED_KEYS
from mmdet_ext.transforms import (FastCachedMixUp, FastCachedMosaic, FastPad,
                                  FastYOLOXHSVRandomAug, LoadLazyAnnotations)
from mmdet_ext.toy_data import CATEGORIES as TOY_CLASSES

RTMDET_INS_TINY = 'mmdet::rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py'


def _samples(root, lazy: bool, to_float32: bool = False, resize: bool = True) -> list:
    """The toy train images, loaded as mmdet's pipeline loads them (polygons kept, or the lazy
    masks), resized at random to varied sizes, three times over (the caches fill and pop)."""
    from mmdet.datasets import CocoDataset
    dataset = CocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                          data_prefix=dict(img='train/'), metainfo=dict(classes=TOY_CLASSES),
                          filter_cfg=dict(filter_empty_gt=False), pipeline=[])
    load = LoadImageFromFile(to_float32=to_float32)
    annotations = (LoadLazyAnnotations(with_mask=True) if lazy
                   else LoadAnnotations(with_bbox=True, with_mask=True, poly2mask=False))
    init_default_scope('mmdet')  # mmdet's Resize inside: boxes and masks resized too
    resizer = TRANSFORMS.build(dict(type='RandomResize', scale=(640, 640), ratio_range=(0.3, 1.2),
                                    keep_ratio=True))
    samples = []
    for turn in range(3):
        for index in range(len(dataset)):
            random.seed(1000 * turn + index)
            np.random.seed(1000 * turn + index)
            results = annotations(load(dataset.get_data_info(index)))
            samples.append(resizer(results) if resize else results)
    return samples


def _same(a, b, where: str) -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f'{where}[{key!r}]')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f'{where}[{i}]')
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, HorizontalBoxes):
        assert torch.equal(a.tensor, b.tensor), where
    elif isinstance(a, PolygonMasks):
        assert (a.height, a.width) == (b.height, b.width), where
        _same(a.masks, b.masks, f'{where}.masks')
    elif isinstance(a, BitmapMasks):  # the lazy masks too: their pixels
        assert (a.height, a.width, len(a)) == (b.height, b.width, len(b)), where
        assert np.array_equal(a.to_ndarray(), b.to_ndarray()), where
    else:
        assert a == b, where


def _overwrite(results: dict) -> None:
    """What a later transform may do to its input: change its arrays in place. A cache that
    shared them with the output would then differ from mmdet's."""
    for key in ('img', 'gt_bboxes_labels', 'gt_ignore_flags'):
        results[key].flags.writeable and results[key].fill(1)
    results['gt_bboxes'].tensor.fill_(1.0)
    if isinstance(results.get('gt_masks'), PolygonMasks):
        for polygons in results['gt_masks'].masks:
            for polygon in polygons:
                polygon.fill(1.0)


def _run_both(theirs, ours, samples: list) -> int:
    """Both transforms on every sample from the same random states; returns how many samples the
    transform changed (so that a test knows its path ran)."""
    changed = 0
    for step, sample in enumerate(samples):
        random.seed(step)
        np.random.seed(step)
        expected = theirs(copy.deepcopy(sample))
        after = random.getstate(), np.random.get_state()
        random.seed(step)
        np.random.seed(step)
        got = ours(copy.deepcopy(sample))
        assert random.getstate() == after[0], f'sample {step}: python draws differ'
        assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state(), after[1]))
        _same(expected, got, f'sample {step}')
        for output in (expected, got):
            _overwrite(output)
        changed += expected['img'].shape != sample['img'].shape or not np.array_equal(
            expected['img'], sample['img'])
    # the caches hold the same of what the transforms read (mmdet's holds all of each sample)
    _same(*[[{key: entry[key] for key in CACHED_KEYS if key in entry}
             for entry in getattr(transform, 'results_cache', [])]
            for transform in (theirs, ours)], 'cache')
    return changed


MOSAICS = [dict(img_scale=(640, 640), pad_val=114.0, max_cached_images=20, random_pop=False),
           dict(img_scale=(320, 256), max_cached_images=6, random_pop=True, prob=0.6)]


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('kwargs', MOSAICS, ids=['rtmdet', 'small-random-pop'])
def test_mosaic_matches_mmdet(toy_coco_root, kwargs, lazy):
    samples = _samples(toy_coco_root, lazy)
    changed = _run_both(CachedMosaic(**kwargs), FastCachedMosaic(**kwargs), samples)
    assert changed >= len(samples) // 3


MIXUPS = [
    # RTMDet's, after its Pad: every image 640x640
    (dict(img_scale=(640, 640), ratio_range=(1.0, 1.0), max_cached_images=10, random_pop=False,
          pad_val=(114, 114, 114), prob=0.5), 'pad', False),
    # images of other sizes than the canvas: the crop's offsets are drawn
    (dict(img_scale=(480, 400), ratio_range=(1.0, 1.0), max_cached_images=4, pad_val=114.7),
     'none', False),
    # a jitter that resamples mmdet's float canvas, float images: mmdet's own code runs
    (dict(img_scale=(640, 640), ratio_range=(0.5, 1.5), max_cached_images=5), 'pad', False),
    (dict(img_scale=(640, 640), ratio_range=(1.0, 1.0), max_cached_images=5), 'pad', True),
]


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('kwargs,before,to_float32', MIXUPS,
                         ids=['rtmdet', 'offsets', 'jitter', 'float32'])
def test_mixup_matches_mmdet(toy_coco_root, kwargs, before, to_float32, lazy):
    samples = _samples(toy_coco_root, lazy, to_float32)
    if before == 'pad':
        pad = Pad(size=(640, 640), pad_val=dict(img=(114, 114, 114)))
        samples = [pad(sample) for sample in samples]
    changed = _run_both(CachedMixUp(**kwargs), FastCachedMixUp(**kwargs), samples)
    assert changed >= len(samples) // 4


@pytest.mark.parametrize('to_float32', [False, True], ids=['uint8', 'float32'])
def test_hsv_jitter_matches_mmdet(toy_coco_root, to_float32):
    samples = _samples(toy_coco_root, lazy=False, to_float32=to_float32)
    # a view into a larger image, as RandomCrop leaves it: the jitter writes through it
    samples[0]['img'] = np.ascontiguousarray(samples[0]['img'])[5:-5, 7:-3]
    changed = _run_both(YOLOXHSVRandomAug(), FastYOLOXHSVRandomAug(), samples)
    assert changed >= len(samples) // 2


PADS = [dict(size=(640, 640), pad_val=dict(img=(114, 114, 114))), dict(size_divisor=32),
        dict(pad_to_square=True, pad_val=dict(img=7, seg=255))]
VIEWS = {'flipped': lambda img: img[:, ::-1], 'flipped vertically': lambda img: img[::-1],
         'flipped both ways': lambda img: img[::-1, ::-1], 'cropped': lambda img: img[3:-5, 2:-9],
         'channels reversed': lambda img: img[..., ::-1], 'gray flipped': lambda img: img[:, ::-1, 0],
         'float32 flipped': lambda img: img.astype(np.float32)[:, ::-1],
         'int64 flipped': lambda img: img.astype(np.int64)[:, ::-1]}


@pytest.mark.parametrize('kwargs', PADS, ids=['rtmdet', 'divisor', 'square'])
@pytest.mark.parametrize('view', list(VIEWS))
def test_pad_matches_mmdet(toy_coco_root, kwargs, view):
    samples = _samples(toy_coco_root, lazy=False)[:8]
    if view.startswith('gray') and 'pad_val' in kwargs:  # one value per channel: one channel
        kwargs = dict(kwargs, pad_val=dict(img=114))
    for sample in samples:
        sample['img'] = VIEWS[view](sample['img'])
    _run_both(Pad(**kwargs), FastPad(**kwargs), samples)


def _loader_batches(config: Config, epochs: int) -> list:
    from mmengine.runner import Runner
    loader = Runner.build_dataloader(config.train_dataloader, seed=0)
    batches = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        batches += list(loader)
    assert len(batches) == epochs * len(loader)
    return batches


def _rtmdet_config(root, tmp_path, name: str, mmdet_types: bool) -> Config:
    lines = [f"_base_ = '{RTMDET_INS_TINY}'",
             'train_dataloader = dict(batch_size=2, num_workers=2, persistent_workers=True, '
             f"dataset=dict(data_root='{root}/', ann_file='annotations/instances_train.json', "
             f"data_prefix=dict(img='train/'), metainfo=dict(classes={TOY_CLASSES!r})))",
             'from mmdet_ext.adopt import adopt  # noqa: E402', 'adopt(globals())']
    path = tmp_path / f'{name}.py'
    path.write_text('\n'.join(lines) + '\n')
    config = Config.fromfile(str(path))
    pipeline = config.train_dataloader.dataset.pipeline
    types = [t['type'] for t in pipeline]
    assert {'FastCachedMosaic', 'FastCachedMixUp', 'FastYOLOXHSVRandomAug'} <= set(types)
    if mmdet_types:
        for transform in pipeline:
            transform['type'] = transform['type'].removeprefix('Fast') if transform[
                'type'].startswith('FastCached') or transform['type'] == \
                'FastYOLOXHSVRandomAug' else transform['type']
    return config


def test_adopted_rtmdet_ins_loader_matches_mmdet_transforms(toy_coco_root, tmp_path):
    """The adopted zoo config through the Runner's loader, two persistent workers, five epochs
    (each worker's caches fill, pop and mix), against the same with mmdet's three transforms."""
    ours = _loader_batches(_rtmdet_config(toy_coco_root, tmp_path, 'ours', False), 5)
    theirs = _loader_batches(_rtmdet_config(toy_coco_root, tmp_path, 'theirs', True), 5)
    assert len(ours) == len(theirs)
    mosaics = 0
    for step, (got, expected) in enumerate(zip(ours, theirs)):
        for a, b in zip(got['inputs'], expected['inputs']):
            assert torch.equal(a, b), f'batch {step}: images differ'
        for a, b in zip(got['data_samples'], expected['data_samples']):
            mosaics += a.metainfo.get('img_shape') == (640, 640)
            assert torch.equal(a.gt_instances.bboxes.tensor, b.gt_instances.bboxes.tensor)
            assert torch.equal(a.gt_instances.labels, b.gt_instances.labels)
            assert np.array_equal(a.gt_instances.masks.to_ndarray(),
                                  b.gt_instances.masks.to_ndarray())
            assert torch.equal(a.ignored_instances.bboxes.tensor,
                               b.ignored_instances.bboxes.tensor)
    assert mosaics > 0
