"""Streams of samples through mmdet's loading steps, and a pair of transforms run on them from the
same random states with their results compared (tests/test_mix_augment.py,
tests/test_resize_crop.py)."""
import copy
import random

import numpy as np
import torch
from mmcv.transforms import LoadImageFromFile
from mmdet.datasets.transforms import LoadAnnotations
from mmdet.registry import TRANSFORMS
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from mmengine.registry import init_default_scope

from mmdet_ext.toy_data import CATEGORIES
from mmdet_ext.transforms import LoadLazyAnnotations
from mmdet_ext.transforms.mix_augment import CACHED_KEYS


def samples_of(root, lazy: bool, to_float32: bool = False, resize: bool = True) -> list:
    """The toy train images, loaded as mmdet's pipeline loads them (polygons kept, or the lazy
    masks), resized at random to varied sizes, three times over (the caches fill and pop)."""
    from mmdet.datasets import CocoDataset
    dataset = CocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                          data_prefix=dict(img='train/'), metainfo=dict(classes=CATEGORIES),
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


def same(a, b, where: str) -> None:
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            same(a[key], b[key], f'{where}[{key!r}]')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f'{where}[{i}]')
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif isinstance(a, HorizontalBoxes):
        assert torch.equal(a.tensor, b.tensor), where
    elif isinstance(a, PolygonMasks):
        assert (a.height, a.width) == (b.height, b.width), where
        same(a.masks, b.masks, f'{where}.masks')
    elif isinstance(a, BitmapMasks):  # the lazy masks too: their pixels
        assert (a.height, a.width, len(a)) == (b.height, b.width, len(b)), where
        assert np.array_equal(a.to_ndarray(), b.to_ndarray()), where
    else:
        assert a == b, where


def overwrite(results: dict) -> None:
    """What a later transform may do to its input: change its arrays in place. A cache that
    shared them with the output would then differ from mmdet's."""
    for key in ('img', 'gt_bboxes_labels', 'gt_ignore_flags'):
        results[key].flags.writeable and results[key].fill(1)
    boxes = results['gt_bboxes']
    boxes.tensor.fill_(1.0) if hasattr(boxes, 'tensor') else boxes.fill(1.0)  # boxes or an array
    if isinstance(results.get('gt_masks'), PolygonMasks):
        for polygons in results['gt_masks'].masks:
            for polygon in polygons:
                polygon.fill(1.0)


def run_both(theirs, ours, samples: list, count: str = 'changed') -> int:
    """Both transforms on every sample from the same random states; returns how many samples the
    transform changed, or with ``count='none'`` how many it dropped (returned None for), so that
    a test knows its path ran."""
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
        if expected is None or got is None:
            assert expected is None and got is None, f'sample {step}: one gave None'
            changed += count == 'none'
            continue
        same(expected, got, f'sample {step}')
        for output in (expected, got):
            overwrite(output)
        differs = expected['img'].shape != sample['img'].shape or not np.array_equal(
            expected['img'], sample['img'])
        changed += count == 'changed' and differs
    # the caches hold the same of what the transforms read (mmdet's holds all of each sample)
    same(*[[{key: entry[key] for key in CACHED_KEYS if key in entry}
             for entry in getattr(transform, 'results_cache', [])]
            for transform in (theirs, ours)], 'cache')
    return changed
