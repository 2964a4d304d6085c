"""ColumnarAnnotations (LoadLazyAnnotations from the store's columns, for the batched fetch)
against LoadLazyAnnotations on get_data_info's instances: the same keys, types, dtypes, values
and errors, for every sample of real stores, and where the batched fetch uses it."""
import json

import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import (FilterAnnotations, LoadAnnotations, PackDetInputs,
                                       RandomFlip, Resize)
from mmdet.structures.bbox import BaseBoxes, HorizontalBoxes, register_box
from pycocotools import mask as mask_utils

from mmdet_ext.datasets import LazyCocoDataset
from mmdet_ext.datasets import batched_fetch
from mmdet_ext.datasets.columnar_annotations import ColumnarAnnotations
from mmdet_ext.transforms import LoadLazyAnnotations, NativeLoadImageFromFile, NativeLoadResizeFlip

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
LOADERS = [dict(), dict(poly2mask=False), dict(with_mask=False), dict(with_bbox=False),
           dict(with_label=False), dict(box_type=None)]


def _dataset(root, ann_file, **kwargs):
    return LazyCocoDataset(data_root=str(root), ann_file=str(ann_file),
                           data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                           pipeline=[], **kwargs)


def _edge_case_json(root, tmp_path, rle_size=None):
    """The toy train images with annotations made to hit every rule: dropped instances
    (ignore, zero area, narrower than 1 px, right of or below the image, unknown category),
    polygon parts that are too short or odd, no valid part, no mask, compressed and uncompressed
    RLEs, boxes partly outside, coordinates with many decimals, images with none or only
    dropped ones."""
    data = json.loads((root / 'annotations' / 'instances_train.json').read_text())
    images = data['images'][:4]
    height, width = images[0]['height'], images[0]['width']
    square = [[10.0, 10.0, 60.0, 10.0, 60.0, 50.0, 10.0, 50.0]]
    bitmap = np.zeros((height, width), dtype=np.uint8, order='F')
    bitmap[20:40, 30:90] = 1
    compressed = mask_utils.encode(bitmap)
    compressed['counts'] = compressed['counts'].decode()
    if rle_size is not None:
        compressed['size'] = list(rle_size)
    uncompressed = {'size': [height, width], 'counts': [20 * height + 20, 15, height * 300]}

    def ann(image, bbox, segmentation=square, **extra):
        record = dict(image_id=image['id'], category_id=data['categories'][0]['id'], bbox=bbox,
                      area=extra.pop('area', 500.0), iscrowd=extra.pop('iscrowd', 0), **extra)
        if segmentation is not None:
            record['segmentation'] = segmentation
        return record

    first, second, third = images[0], images[1], images[2]
    annotations = [
        ann(first, [10.0, 10.0, 50.0, 40.0],
            segmentation=[[1.0, 2.0, 3.0, 4.0, 5.0], square[0], [7.0, 8.0, 9.0, 10.0]]),
        ann(first, [12.123456789, 3.25, 40.5, 20.75],
            segmentation=[[12.123456789, 3.25, 52.623456789, 3.25, 52.6, 24.0]]),
        ann(first, [5.0, 5.0, 10.0, 10.0], segmentation=[[1.0, 2.0, 3.0, 4.0]]),
        ann(first, [5.0, 5.0, 10.0, 10.0], area=0.0),
        ann(first, [5.0, 5.0, 0.5, 10.0]),
        ann(first, [width + 10.0, 5.0, 10.0, 10.0]),
        ann(first, [5.0, height + 10.0, 10.0, 10.0]),
        ann(first, [5.0, 5.0, 10.0, 10.0], ignore=1),
        ann(first, [-5.0, -3.0, 30.0, 30.0]),
        ann(first, [30.0, 20.0, 60.0, 20.0], segmentation=compressed, iscrowd=1),
        ann(first, [20.0, 20.0, 15.0, 10.0], segmentation=uncompressed),
        ann(first, [8.0, 8.0, 20.0, 20.0], segmentation=None),
        ann(third, [5.0, 5.0, 10.0, 10.0], area=0.0),
        dict(ann(third, [5.0, 5.0, 10.0, 10.0]), category_id=999),
    ]
    for i, record in enumerate(annotations):
        record['id'] = i + 1
    del second  # no annotation at all
    path = tmp_path / 'edge_cases.json'
    path.write_text(json.dumps(dict(data, images=images, annotations=annotations)))
    return path


def _assert_same_results(want, got):
    assert set(got) == set(want) - {'instances'}
    for key, value in want.items():
        if key == 'instances':
            continue
        mine = got[key]
        assert type(mine) is type(value), key
        if isinstance(value, BaseBoxes):
            assert mine.tensor.dtype == value.tensor.dtype and torch.equal(mine.tensor,
                                                                            value.tensor)
        elif isinstance(value, np.ndarray):
            assert mine.dtype == value.dtype and mine.shape == value.shape, key
            np.testing.assert_array_equal(mine, value, err_msg=key)
        elif key == 'gt_masks':
            assert (mine.height, mine.width, len(mine)) == (value.height, value.width, len(value))
            for ours, theirs in zip(mine.items, value.items):
                assert type(ours) is type(theirs)
                if isinstance(theirs, list):
                    assert len(ours) == len(theirs)
                    for a, b in zip(ours, theirs):
                        assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)
                else:
                    assert ours == theirs  # a RasterSource: kind, data, size, pending ops
        else:
            assert mine == value, key


def _assert_columns_equal_dicts(dataset, loader, batch_size=3):
    columns = ColumnarAnnotations(dataset, loader)
    indices = list(range(len(dataset)))
    for start in range(0, len(indices), batch_size):
        batch = indices[start:start + batch_size]
        columns.prepare(batch)
        for index in batch:
            want = loader(dataset.get_data_info(index))
            _assert_same_results(want, columns(dataset.data_info_without_instances(index)))
    # A sample the batch did not prepare (a replacement for a bad one) is read on its own.
    columns.prepare([])
    want = loader(dataset.get_data_info(-1))
    _assert_same_results(want, columns(dataset.data_info_without_instances(-1)))


@pytest.mark.parametrize('loader', LOADERS)
@pytest.mark.parametrize('ann_file', ['instances_train.json', 'instances_train_pngmasks.json'])
def test_columns_give_what_load_lazy_annotations_gives_on_the_toy_stores(toy_coco_root, ann_file,
                                                                          loader):
    dataset = _dataset(toy_coco_root, toy_coco_root / 'annotations' / ann_file)
    load = LoadLazyAnnotations(**dict(dict(with_bbox=True), **loader))
    if ann_file.endswith('pngmasks.json') and loader.get('poly2mask') is False:
        with pytest.raises(ValueError, match='per-instance PNG mask') as want:
            load(dataset.get_data_info(0))
        columns = ColumnarAnnotations(dataset, load)
        with pytest.raises(ValueError) as got:
            columns(dataset.data_info_without_instances(0))
        assert str(got.value) == str(want.value)
        return
    _assert_columns_equal_dicts(dataset, load)


@pytest.mark.parametrize('loader', LOADERS)
def test_columns_keep_and_drop_instances_by_the_same_rules(toy_coco_root, tmp_path, loader):
    dataset = _dataset(toy_coco_root, _edge_case_json(toy_coco_root, tmp_path), validate=False)
    instances = dataset.get_data_info(0)['instances']
    # What the edge cases are for: 7 of the first image's 12 kept; one crowd, two without a
    # valid mask.
    assert len(instances) == 7 and not dataset.get_data_info(2)['instances']
    _assert_columns_equal_dicts(dataset,
                                LoadLazyAnnotations(**dict(dict(with_bbox=True), **loader)))


def test_an_rle_of_another_size_is_the_same_error(toy_coco_root, tmp_path):
    dataset = _dataset(toy_coco_root, _edge_case_json(toy_coco_root, tmp_path, (10, 10)),
                       validate=False)
    load = LoadLazyAnnotations()
    with pytest.raises(ValueError, match='an RLE mask is 10x10') as want:
        load(dataset.get_data_info(0))
    with pytest.raises(ValueError) as got:
        ColumnarAnnotations(dataset, load)(dataset.data_info_without_instances(0))
    assert str(got.value) == str(want.value)


def _fetcher_columns(dataset):
    dataset.fetch_batch([0, 1])
    return dataset._fetcher.columns


def _pipeline(annotations=None, after=(), **pack):
    return [annotations or LoadLazyAnnotations(with_bbox=True, with_mask=True),
            NativeLoadResizeFlip(scale=(160, 120), keep_ratio=True, prob=0.5),
            *after, PackDetInputs(**pack)]


@register_box('columnar_test_boxes')
class _OtherBoxes(HorizontalBoxes):
    """A box type of another name: the columns make only 'hbox' (and arrays)."""


def _mmdet_loading():
    return [NativeLoadImageFromFile(), LoadLazyAnnotations(with_bbox=True, with_mask=True),
            Resize(scale=(160, 120), keep_ratio=True), RandomFlip(prob=0.5), PackDetInputs()]


@pytest.mark.parametrize('pipeline, used', [
    (_pipeline, True),
    (_mmdet_loading, True),
    (lambda: _pipeline(after=[FilterAnnotations(min_gt_bbox_wh=(4, 4))]), True),
    (lambda: _pipeline(LoadAnnotations(with_bbox=True)), False),
    (lambda: _pipeline(LoadLazyAnnotations(with_bbox=True, box_type='columnar_test_boxes')),
     False),
    (lambda: _pipeline(after=[LoadAnnotations(with_bbox=True)]), False),
    (lambda: _pipeline(meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                                  'instances')), False),
])
def test_the_batched_fetch_reads_columns_only_where_nothing_needs_the_instances(
        toy_coco_root, pipeline, used):
    dataset = LazyCocoDataset(data_root=str(toy_coco_root),
                              ann_file='annotations/instances_train.json',
                              data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                              pipeline=pipeline())
    assert dataset.batch_engine() is not None  # batched either way
    assert (_fetcher_columns(dataset) is not None) == used


class _OwnInstances(LazyCocoDataset):
    def _instance(self, *args):
        return super()._instance(*args)


def test_a_dataset_that_makes_its_own_instances_gets_dicts(toy_coco_root):
    dataset = _OwnInstances(data_root=str(toy_coco_root),
                            ann_file='annotations/instances_train.json',
                            data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                            pipeline=_pipeline())
    assert _fetcher_columns(dataset) is None


def test_batches_with_columns_equal_batches_with_dicts(toy_coco_root, monkeypatch):
    """The whole batched fetch, columns against dicts: every packed sample alike (the batched
    fetch's own tests compare it with the per-sample path)."""
    from test_batched_fetch import _assert_same_samples

    def fetch(columnar):
        monkeypatch.setattr(batched_fetch, 'COLUMNAR_ANNOTATIONS', columnar)
        dataset = LazyCocoDataset(data_root=str(toy_coco_root),
                                  ann_file='annotations/instances_train.json',
                                  data_prefix=dict(img='train/'),
                                  metainfo=dict(classes=CLASSES), pipeline=_pipeline())
        torch.manual_seed(3)
        np.random.seed(3)
        samples = dataset.fetch_batch([5, 0, 3, 3, 7])
        assert (dataset._fetcher.columns is not None) == columnar
        return samples

    _assert_same_samples(fetch(False), fetch(True))



def test_a_sample_twice_in_a_batch_shares_nothing(toy_coco_root):
    dataset = _dataset(toy_coco_root, toy_coco_root / 'annotations' / 'instances_train.json')
    columns = ColumnarAnnotations(dataset, LoadLazyAnnotations(with_bbox=True, box_type=None))
    columns.prepare([1, 1])
    first, second = (columns(dataset.data_info_without_instances(1)) for _ in range(2))
    want = {key: np.copy(second[key]) for key in ('gt_bboxes', 'gt_ignore_flags',
                                                  'gt_bboxes_labels')}
    polygon = second['gt_masks'].items[0][0].copy()
    for key in want:
        first[key][...] = 1  # a consumer changing its sample in place
    first['gt_masks'].items[0][0][...] = -1
    for key, value in want.items():
        np.testing.assert_array_equal(second[key], value, err_msg=key)
    np.testing.assert_array_equal(second['gt_masks'].items[0][0], polygon)
