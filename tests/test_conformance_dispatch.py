"""Differential conformance: mmdet code that dispatches on the type of ``gt_masks`` (``isinstance``
``BitmapMasks`` / ``PolygonMasks``) or reads its members, given our masks and mmdet's masks
from the same annotations: the same branch, the same result.
"""
import copy
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmdet.datasets.transforms import LoadAnnotations
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmdet.models.utils import mask2ndarray
from mmdet.structures import DetDataSample
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks, PolygonMasks, mask_target
from mmdet.visualization import DetLocalVisualizer
from mmengine.config import ConfigDict
from mmengine.structures import InstanceData

from helpers.mask_annotations import POLYGON_KINDS, RLE_KINDS, samples
from mmdet_ext.transforms import LoadLazyAnnotations

CONFORMANCE = settings(max_examples=15, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def masks_of(sample: dict, poly2mask: bool) -> tuple:
    """(ours, mmdet's) ``gt_masks`` of ``sample``."""
    args = dict(with_bbox=True, with_label=True, with_mask=True, poly2mask=poly2mask)
    return (LoadLazyAnnotations(**args)(copy.deepcopy(sample))['gt_masks'],
            LoadAnnotations(**args)(copy.deepcopy(sample))['gt_masks'])


FLAVOURS = st.one_of(st.tuples(samples(), st.just(True)),
                     st.tuples(samples(kinds=POLYGON_KINDS), st.just(False)))


@CONFORMANCE
@given(case=FLAVOURS)
def test_boxes_from_instance_masks(case):
    ours, reference = masks_of(*case)
    torch.testing.assert_close(HorizontalBoxes.from_instance_masks(ours).tensor,
                               HorizontalBoxes.from_instance_masks(reference).tensor,
                               rtol=0, atol=0)


@CONFORMANCE
@given(case=FLAVOURS)
def test_mask2ndarray(case):
    """mmdet's browse_dataset tool and its tests read GT masks through this."""
    ours, reference = masks_of(*case)
    np.testing.assert_array_equal(mask2ndarray(ours), mask2ndarray(reference))


@CONFORMANCE
@given(case=FLAVOURS)
def test_visualizer_draws_ground_truth_masks(case):
    """``DetLocalVisualizer._draw_instances`` (DetVisualizationHook, tools/test.py --show-dir)."""
    images = []
    for masks in masks_of(*case):
        instances = InstanceData(labels=torch.arange(len(masks)) % 3, masks=masks)
        visualizer = DetLocalVisualizer(name=f'conformance{id(masks)}')
        np.random.seed(0)  # the mask colours are jittered
        image = np.zeros((masks.height, masks.width, 3), np.uint8)
        try:
            images.append(visualizer._draw_instances(image, instances, ['a', 'b', 'c'], None))
        except ValueError as error:  # mmengine cannot draw zero contours: the same for both
            images.append(type(error))
    if isinstance(images[1], type):
        assert images[0] is images[1]
    else:
        np.testing.assert_array_equal(images[0], images[1])


@CONFORMANCE
@given(sample=samples(kinds=RLE_KINDS, min_size=1), poly_sample=samples(kinds=POLYGON_KINDS,
                                                                        min_size=1),
       rois=st.integers(1, 8))
def test_mask_rcnn_targets(sample, poly_sample, rois):
    """``mask_target`` (FCNMaskHead.get_targets): the bitmap flavour on rasters equals
    BitmapMasks, the polygon flavour equals PolygonMasks."""
    for case in ((sample, True), (poly_sample, False)):
        ours, reference = masks_of(*case)
        height, width = reference.height, reference.width
        rng = np.random.default_rng(rois)
        corners = np.sort(rng.uniform(-2, [width + 2, height + 2], (rois, 2, 2)), axis=1)
        proposals = torch.from_numpy(corners.reshape(rois, 4)).float()
        inds = torch.from_numpy(np.arange(rois) % len(reference))
        cfg = ConfigDict(mask_size=(7, 9), soft_mask_target=False)
        torch.testing.assert_close(mask_target([proposals], [inds], [ours], cfg),
                                   mask_target([proposals], [inds], [reference], cfg),
                                   rtol=0, atol=0)


@CONFORMANCE
@given(case=FLAVOURS, extra=st.tuples(st.integers(0, 9), st.integers(0, 9)))
def test_data_preprocessor_pads_gt_masks(case, extra):
    """``DetDataPreprocessor(pad_mask=True)`` in training pads each sample's masks to the batch."""
    padded = []
    for masks in masks_of(*case):
        sample = DetDataSample(metainfo=dict(img_shape=(masks.height, masks.width)))
        sample.gt_instances = InstanceData(masks=masks)
        shape = (masks.height + extra[0], masks.width + extra[1])
        batch = dict(inputs=[torch.zeros(3, *shape, dtype=torch.uint8)], data_samples=[sample])
        out = DetDataPreprocessor(pad_mask=True, mask_pad_value=0)(batch, training=True)
        padded.append(out['data_samples'][0].gt_instances.masks)
    assert isinstance(padded[0], type(padded[1]))
    np.testing.assert_array_equal(padded[0].to_ndarray(), padded[1].to_ndarray())


@CONFORMANCE
@given(case=FLAVOURS)
def test_pickle_and_deepcopy_keep_type_and_pixels(case):
    """DataLoader workers pickle samples; mmengine deep-copies data infos."""
    ours, reference = masks_of(*case)
    for copied in (pickle.loads(pickle.dumps(ours)), copy.deepcopy(ours)):
        assert type(copied) is type(ours)
        np.testing.assert_array_equal(copied.to_ndarray(), reference.to_ndarray())


def test_albu_takes_the_bitmap_branch():
    """``Albu`` converts ``BitmapMasks.masks`` to a list of arrays and refuses PolygonMasks."""
    pytest.importorskip('albumentations')
    from mmdet.datasets.transforms import Albu
    sample = samples(kinds=RLE_KINDS + POLYGON_KINDS, min_size=2).example()
    flipped = {}
    for poly2mask in (True, False):
        for name, masks in zip(('ours', 'mmdet'), masks_of(sample, poly2mask)):
            results = dict(img=np.zeros((masks.height, masks.width, 3), np.uint8),
                           gt_masks=masks, img_shape=(masks.height, masks.width))
            albu = Albu(transforms=[dict(type='VerticalFlip', p=1.0)],
                        keymap=dict(img='image', gt_masks='masks'))
            try:
                flipped[name, poly2mask] = albu(results)['gt_masks'].to_ndarray()
            except NotImplementedError as error:  # 'Albu only supports BitMap masks now'
                flipped[name, poly2mask] = type(error)
    np.testing.assert_array_equal(flipped['ours', True], flipped['mmdet', True])
    assert flipped['ours', False] is flipped['mmdet', False] is NotImplementedError


def test_d2_wrapper_takes_the_same_branch():
    """``D2Wrapper`` hands ``PolygonMasks.masks`` / ``BitmapMasks.masks`` to detectron2."""
    pytest.importorskip('detectron2')
    from detectron2.structures import BitMasks, PolygonMasks as D2PolygonMasks
    sample = samples(kinds=POLYGON_KINDS, min_size=2).example()
    ours, reference = masks_of(sample, poly2mask=False)
    assert isinstance(ours, PolygonMasks)
    assert D2PolygonMasks(ours.masks).area().tolist() == \
        D2PolygonMasks(reference.masks).area().tolist()
    ours, reference = masks_of(sample, poly2mask=True)
    assert isinstance(ours, BitmapMasks)
    assert torch.equal(BitMasks(ours.masks).tensor, BitMasks(reference.masks).tensor)


@CONFORMANCE
@given(case=FLAVOURS)
def test_instance_data_indexing_and_cat(case):
    """mmengine's ``InstanceData[index]`` slices then ``cat``s masks; ``InstanceData.cat`` too
    (samplers, assigners, PackDetInputs' ignore split)."""
    ours, reference = masks_of(*case)
    count = len(reference)
    data = [InstanceData(masks=masks, labels=torch.arange(count)) for masks in (ours, reference)]
    flags = torch.arange(count) % 2 == 0
    for index in (flags, torch.nonzero(flags).view(-1), slice(0, count, 2),
                  *([[0, 0], 0, -1] if count else [])):
        selected = [instance_data[index].masks for instance_data in data]
        assert isinstance(selected[0], type(reference))
        np.testing.assert_array_equal(selected[0].to_ndarray(), selected[1].to_ndarray())
    joined = [InstanceData.cat([instance_data, instance_data]).masks for instance_data in data]
    assert isinstance(joined[0], type(reference))
    np.testing.assert_array_equal(joined[0].to_ndarray(), joined[1].to_ndarray())
