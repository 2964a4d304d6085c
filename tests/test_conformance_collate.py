"""Differential conformance: ``fast_collate`` + ``FastDetDataPreprocessor`` against mmengine's
``pseudo_collate`` + mmdet's ``DetDataPreprocessor`` with the same preprocessor arguments,
on generated batches: the same model inputs, metainfo, padded masks and segmentation maps.

The pad divisor is the preprocessor's alone: ``fast_collate``'s own divisor (1 by default) only
changes how much the worker pads, never the result.
"""
import copy
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmdet.datasets.transforms import PackDetInputs
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks
from mmengine.dataset import pseudo_collate
from mmengine.logging import MessageHub

from mmdet_ext import FastDetDataPreprocessor, fast_collate
from mmdet_ext.structures import LazyBitmapMasks

CONFORMANCE = settings(max_examples=25, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def packed_batches(draw, with_seg: bool = True) -> list:
    """1-4 ``PackDetInputs`` outputs of different sizes, with boxes, lazy masks and a seg map."""
    batch = []
    for _ in range(draw(st.integers(1, 4))):
        height, width = draw(st.integers(5, 45)), draw(st.integers(5, 45))
        rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        count = int(rng.integers(0, 4))
        pixels = (rng.random((count, height, width)) < 0.3).astype(np.uint8)
        results = dict(img=rng.integers(0, 256, (height, width, 3), np.uint8),
                       img_shape=(height, width), ori_shape=(height, width), img_id=len(batch),
                       img_path=f'{len(batch)}.jpg', scale_factor=(1.0, 1.0), flip=False,
                       flip_direction=None,
                       gt_bboxes=HorizontalBoxes(rng.uniform(0, 5, (count, 4)).cumsum(1)),
                       gt_bboxes_labels=rng.integers(0, 3, count),
                       gt_ignore_flags=np.zeros(count, bool),
                       gt_masks=LazyBitmapMasks(list(pixels), height, width))
        if with_seg:
            results['gt_seg_map'] = rng.integers(0, 5, (height, width)).astype(np.uint8)
        batch.append(PackDetInputs()(results))
    return batch


def preprocessor_arguments():
    return st.fixed_dictionaries(dict(
        pad_size_divisor=st.sampled_from([1, 4, 7, 32]),
        pad_value=st.sampled_from([0, 3.5]),
        bgr_to_rgb=st.booleans(),
        pad_mask=st.booleans(),
        mask_pad_value=st.sampled_from([0, 1]),
        pad_seg=st.booleans(),
        seg_pad_value=st.sampled_from([255, 7]),
        boxtype2tensor=st.booleans(),
        normalize=st.booleans(),
    )).map(_normalisation)


def _normalisation(args: dict) -> dict:
    if args.pop('normalize'):
        args.update(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375])
    return args


def run_both(batch: list, args: dict, training: bool, seed: int = 0) -> tuple:
    """(ours, mmdet's) preprocessor outputs for ``batch``."""
    outputs = []
    for preprocessor, collate in ((FastDetDataPreprocessor(**args), fast_collate),
                                  (DetDataPreprocessor(**args), pseudo_collate)):
        random.seed(seed)  # batch augments draw sizes from `random`
        np.random.seed(seed)
        outputs.append(preprocessor(collate(copy.deepcopy(batch)), training=training))
    return tuple(outputs)


def assert_same_outputs(ours: dict, reference: dict) -> None:
    assert ours['inputs'].shape == reference['inputs'].shape
    assert ours['inputs'].dtype == reference['inputs'].dtype
    torch.testing.assert_close(ours['inputs'], reference['inputs'], rtol=0, atol=0)
    if reference['data_samples'] is None:
        assert ours['data_samples'] is None
        return
    for mine, theirs in zip(ours['data_samples'], reference['data_samples'], strict=True):
        assert mine.metainfo == theirs.metainfo
        if 'gt_instances' not in theirs:
            continue
        mine, theirs = mine.gt_instances, theirs.gt_instances
        assert type(mine.bboxes) is type(theirs.bboxes)
        bboxes = (lambda b: b.tensor if isinstance(b, HorizontalBoxes) else b)
        torch.testing.assert_close(bboxes(mine.bboxes), bboxes(theirs.bboxes), rtol=0, atol=0)
        np.testing.assert_array_equal(mine.masks.to_ndarray(), theirs.masks.to_ndarray())
        assert isinstance(mine.masks, BitmapMasks)


def assert_same_seg(ours: dict, reference: dict) -> None:
    for mine, theirs in zip(ours['data_samples'], reference['data_samples']):
        torch.testing.assert_close(mine.gt_sem_seg.sem_seg, theirs.gt_sem_seg.sem_seg,
                                   rtol=0, atol=0)


@CONFORMANCE
@given(batch=packed_batches(), args=preprocessor_arguments(), training=st.booleans())
def test_every_preprocessor_argument(batch, args, training):
    ours, reference = run_both(batch, args, training)
    assert_same_outputs(ours, reference)
    assert_same_seg(ours, reference)


@CONFORMANCE
@given(batch=packed_batches(), args=preprocessor_arguments(), seed=st.integers(0, 100),
       augment=st.sampled_from(['fixed_size_pad', 'sync_random_resize']))
def test_batch_augments(batch, args, seed, augment):
    if augment == 'fixed_size_pad':
        height = max(sample['inputs'].shape[1] for sample in batch) + 40
        width = max(sample['inputs'].shape[2] for sample in batch) + 40
        augments = [dict(type='mmdet.BatchFixedSizePad', size=(height, width), pad_mask=True,
                         pad_seg=True, img_pad_value=args.get('pad_value', 0))]
    else:
        MessageHub.get_current_instance().update_info('iter', seed)
        augments = [dict(type='mmdet.BatchSyncRandomResize', random_size_range=(16, 64),
                         interval=1, size_divisor=16)]
    ours, reference = run_both(batch, dict(args, batch_augments=augments), True, seed=seed)
    assert_same_outputs(ours, reference)


# -- finding 7: one source of truth for padding -------------------------------------------------
def test_the_preprocessors_divisor_decides_the_batch_shape():
    """fast_collate and the preprocessor give mmdet's (2, 3, 10, 14); fast_collate's old
    divisor (ignored, with a warning once) changes nothing."""
    batch = [dict(inputs=torch.zeros(3, 10, 14, dtype=torch.uint8)),
             dict(inputs=torch.zeros(3, 7, 9, dtype=torch.uint8))]
    for collate_divisor in (None, 32):
        collated = fast_collate(batch) if collate_divisor is None else \
            fast_collate(batch, pad_size_divisor=collate_divisor)
        assert FastDetDataPreprocessor()(collated)['inputs'].shape == (2, 3, 10, 14)
    assert DetDataPreprocessor()(pseudo_collate(batch))['inputs'].shape == (2, 3, 10, 14)


# -- finding 5: no data_samples -----------------------------------------------------------------
def test_a_batch_without_data_samples():
    batch = [dict(inputs=torch.randint(0, 256, (3, 10 + i, 12), dtype=torch.uint8))
             for i in range(3)]
    ours, reference = run_both(batch, dict(pad_size_divisor=8, bgr_to_rgb=True), False)
    assert ours['data_samples'] is None
    assert_same_outputs(ours, reference)


# -- finding 6: any batch pseudo_collate accepts ------------------------------------------------
def assert_same_structure(ours, reference) -> None:
    assert type(ours) is type(reference)
    if isinstance(ours, dict):
        assert ours.keys() == reference.keys()
        for key in ours:
            assert_same_structure(ours[key], reference[key])
    elif isinstance(ours, (list, tuple)):
        assert len(ours) == len(reference)
        for a, b in zip(ours, reference):
            assert_same_structure(a, b)
    elif isinstance(ours, torch.Tensor):
        assert torch.equal(ours, reference)
    elif isinstance(ours, np.ndarray):
        np.testing.assert_array_equal(ours, reference)
    else:
        assert ours == reference


def _image(height: int, width: int, channels: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (channels, height, width), dtype=torch.uint8)


@pytest.mark.parametrize('batch', [
    [(_image(4, 5), 1), (_image(6, 3), 2)],                                     # tuple samples
    [dict(inputs=dict(sup=_image(4, 5), unsup=_image(5, 5)), data_samples=dict(sup=1, unsup=2)),
     dict(inputs=dict(sup=_image(6, 3), unsup=_image(2, 2)), data_samples=dict(sup=3, unsup=4))],
    [dict(inputs=np.zeros((4, 5, 3), np.uint8)), dict(inputs=np.ones((2, 5, 3), np.uint8))],
    [dict(inputs=_image(4, 5)), dict(inputs=_image(4, 5, channels=1))],         # channel counts
    [dict(inputs=_image(4, 5)), dict(inputs=_image(4, 5).float())],             # dtypes
    [dict(inputs=torch.zeros(5, 5, dtype=torch.uint8))],                        # not [C, H, W]
    [dict(inputs=_image(4, 5)), dict(img=_image(4, 5))],          # pseudo_collate: KeyError
    [1, 2, 3],
], ids=['tuples', 'multi-branch', 'ndarrays', 'channels', 'dtypes', '2-d', 'keys', 'ints'])
def test_any_batch_pseudo_collate_accepts(batch):
    try:
        expected = pseudo_collate(batch)
    except Exception as error:  # what pseudo_collate refuses fails the same way
        with pytest.raises(type(error)):
            fast_collate(batch)
        return
    assert_same_structure(fast_collate(batch), expected)


# -- issue 28: mmengine's own pseudo_collate test, fast_collate swapped in ----------------------
def test_float_tensors_that_are_not_images_stay_a_list_of_the_same_objects():
    """mmengine's ``test_pseudo_collate``: float ``inputs`` without image metainfo come back as
    ``pseudo_collate`` gives them, a list holding the very tensors and data elements."""
    from mmengine.structures import BaseDataElement
    inputs = [torch.randn(1, 3, 5), torch.randn(1, 3, 5)]
    for samples in ([torch.randn(1), torch.randn(1)],
                    [BaseDataElement(label=torch.tensor(1)), BaseDataElement(label=torch.tensor(1))]):
        batch = [dict(inputs=i, data_sample=s) for i, s in zip(inputs, samples)]
        ours, reference = fast_collate(batch), pseudo_collate(batch)
        assert_same_structure(ours, reference)
        assert ours.keys() == {'inputs', 'data_sample'}
        assert all(a is b for a, b in zip(ours['inputs'], inputs))
        assert all(a is b for a, b in zip(ours['data_sample'], samples))


def test_float_images_with_their_metainfo_keep_the_fast_path():
    """A float image (``to_float32``) is told from other tensors by its ``img_shape``."""
    from mmdet.structures import DetDataSample
    batch = [dict(inputs=torch.rand(3, h, w),
                  data_samples=DetDataSample(metainfo=dict(img_shape=(h, w))))
             for h, w in ((4, 6), (5, 3))]
    ours = fast_collate(batch)
    assert ours['inputs'].shape == (2, 3, 5, 6) and ours['input_shapes'] == [(4, 6), (5, 3)]
