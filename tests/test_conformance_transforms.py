"""Differential conformance: mmdet's own transforms that read or write ``gt_masks.masks`` --
``CopyPaste``, ``RandomErasing``, ``Expand`` -- and those that read ``areas``/boxes, applied to
``LoadLazyAnnotations`` output and to mmdet's ``LoadAnnotations`` output of the same generated
annotations, with the same random state: the same results.
"""
import copy
import random

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mmdet.datasets.transforms import (CopyPaste, Expand, FilterAnnotations, LoadAnnotations,
                                       PackDetInputs, Pad, RandomCrop, RandomErasing, RandomFlip,
                                       Resize)
from mmdet.structures.mask import BitmapMasks

from helpers.mask_annotations import RLE_KINDS, image_sizes, samples
from mmdet_ext.structures import LazyBitmapMasks
from mmdet_ext.transforms import LoadLazyAnnotations

CONFORMANCE = settings(max_examples=20, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LOAD = dict(with_bbox=True, with_label=True, with_mask=True, poly2mask=True)


def loaded(sample: dict, seed: int) -> tuple:
    """(ours, mmdet's) loaded results of ``sample`` with the same random image."""
    image = np.random.default_rng(seed).integers(0, 256, (*sample['ori_shape'], 3), np.uint8)
    sample = dict(sample, img=image)
    return (LoadLazyAnnotations(**LOAD)(copy.deepcopy(sample)),
            LoadAnnotations(**LOAD)(copy.deepcopy(sample)))


def run_seeded(transform, results: dict, seed: int) -> dict:
    random.seed(seed)
    np.random.seed(seed)
    return transform(results)


def assert_same_results(ours: dict, reference: dict) -> None:
    if reference is None:  # the transform dropped the sample
        assert ours is None
        return
    assert isinstance(ours['gt_masks'], BitmapMasks)
    np.testing.assert_array_equal(ours['gt_masks'].to_ndarray(), reference['gt_masks'].to_ndarray())
    assert ours['gt_masks'].to_ndarray().dtype == reference['gt_masks'].to_ndarray().dtype
    np.testing.assert_array_equal(ours['gt_bboxes'].tensor, reference['gt_bboxes'].tensor)
    np.testing.assert_array_equal(ours['gt_bboxes_labels'], reference['gt_bboxes_labels'])
    np.testing.assert_array_equal(ours['gt_ignore_flags'], reference['gt_ignore_flags'])
    np.testing.assert_array_equal(ours['img'], reference['img'])


@CONFORMANCE
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_copy_paste(data, seed):
    size = data.draw(image_sizes())
    destination = loaded(data.draw(samples(size=size)), seed)
    source = loaded(data.draw(samples(size=size, min_size=1)), seed + 1)
    transform = CopyPaste(max_num_pasted=4, bbox_occluded_thr=2, mask_occluded_thr=5)
    ours = run_seeded(transform, dict(destination[0], mix_results=[source[0]]), seed)
    reference = run_seeded(transform, dict(destination[1], mix_results=[source[1]]), seed)
    assert_same_results(ours, reference)


@CONFORMANCE
@given(sample=samples(), seed=st.integers(0, 2**16))
def test_random_erasing(sample, seed):
    ours, reference = loaded(sample, seed)
    transform = RandomErasing(n_patches=(1, 4), ratio=(0.1, 0.6), bbox_erased_thr=0.8)
    ours_out = run_seeded(transform, ours, seed)
    assert_same_results(ours_out, run_seeded(transform, reference, seed))
    assert type(ours_out['gt_masks']) is LazyBitmapMasks  # erased in place, still lazy-typed


@CONFORMANCE
@given(sample=samples(), seed=st.integers(0, 2**16))
def test_expand(sample, seed):
    ours, reference = loaded(sample, seed)
    transform = Expand(mean=(10, 20, 30), ratio_range=(1, 3), prob=1.0)
    ours_out = run_seeded(transform, ours, seed)
    assert_same_results(ours_out, run_seeded(transform, reference, seed))
    assert type(ours_out['gt_masks']) is LazyBitmapMasks


@CONFORMANCE
@given(sample=samples(), seed=st.integers(0, 2**16), min_area=st.integers(1, 60))
def test_filter_annotations_by_mask_area(sample, seed, min_area):
    ours, reference = loaded(sample, seed)
    transform = FilterAnnotations(min_gt_mask_area=min_area, by_box=False, by_mask=True,
                                  keep_empty=True)
    assert_same_results(transform(ours), transform(reference))


@CONFORMANCE
@given(sample=samples(kinds=RLE_KINDS), seed=st.integers(0, 2**16))
def test_random_crop_recomputing_boxes_from_masks(sample, seed):
    """Crop + ``get_bboxes`` on raster instances (polygons are cropped as ``PolygonMasks``:
    test_conformance_masks.py)."""
    ours, reference = loaded(sample, seed)
    height, width = sample['ori_shape']
    transform = RandomCrop(crop_size=(max(height // 2, 2), max(width // 2, 2)),
                           recompute_bbox=True, allow_negative_crop=True)
    assert_same_results(run_seeded(transform, ours, seed), run_seeded(transform, reference, seed))


@CONFORMANCE
@given(sample=samples(), seed=st.integers(0, 2**16))
def test_pack_det_inputs_keeps_the_lazy_bitmap_masks(sample, seed):
    ours, reference = loaded(sample, seed)
    ours = PackDetInputs()(ours)['data_samples'].gt_instances
    reference = PackDetInputs()(reference)['data_samples'].gt_instances
    assert type(ours.masks) is LazyBitmapMasks
    np.testing.assert_array_equal(ours.masks.to_ndarray(), reference.masks.to_ndarray())


@CONFORMANCE
@given(sample=samples(kinds=('polygon', 'rle'), min_size=1), seed=st.integers(0, 2**16))
def test_the_standard_pipeline_never_asks_for_pixels(sample, seed):
    """Being a BitmapMasks costs nothing on the paths that do not read pixels: after mmdet's
    usual pipeline the instances are still polygons and RLEs, and ``.masks`` was never built."""
    ours, _ = loaded(sample, seed)
    height, width = sample['ori_shape']
    for transform in (Resize(scale=(width * 2 + 1, height + 3), keep_ratio=True),
                      RandomFlip(prob=1.0), Pad(size_divisor=8),
                      FilterAnnotations(by_box=False, by_mask=True), PackDetInputs()):
        ours = run_seeded(transform, ours, seed)
        assume(ours is not None)  # FilterAnnotations dropped the sample: not an example
    masks = ours['data_samples'].gt_instances.masks
    assert masks._pixels is None
    assert all(isinstance(item, list) or item.kind == 'rle' for item in masks.items)
