"""LazyCocoDataset against mmdet's CocoDataset, and copy-safety: a sample changed in place by
its consumer cannot change what the dataset returns next time."""
import copy
import os
import pickle

import numpy as np
import pytest
import torch
from mmdet.datasets import CocoDataset
from pycocotools import mask as mask_utils

from mmdet_ext.datasets import LazyCocoDataset

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')


def _pair(root, split='train', **kwargs):
    common = dict(data_root=str(root), ann_file=f'annotations/instances_{split}.json',
                  data_prefix=dict(img=f'{split}/'), pipeline=[], **kwargs)
    common.setdefault('metainfo', dict(classes=CLASSES))
    return LazyCocoDataset(**common), CocoDataset(**common)


def _decoded(mask, height, width):
    if isinstance(mask, list):
        return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(mask, height, width)))
    if isinstance(mask['counts'], list):
        mask = mask_utils.frPyObjects(mask, height, width)
    return mask_utils.decode(mask)


def _assert_same_data_info(ours, theirs):
    assert ours.keys() == theirs.keys()
    for key in ours.keys() - {'instances'}:
        assert ours[key] == theirs[key], key
    assert len(ours['instances']) == len(theirs['instances'])
    for mine, ref in zip(ours['instances'], theirs['instances']):
        assert mine.keys() == ref.keys()
        assert mine['bbox'] == ref['bbox'] and mine['bbox_label'] == ref['bbox_label']
        assert mine['ignore_flag'] == ref['ignore_flag']
        if isinstance(ref['mask'], list):
            assert mine['mask'] == ref['mask']  # polygons: the json's floats, exactly
        else:  # RLE: compressed form of the same runs
            np.testing.assert_array_equal(_decoded(mine['mask'], ours['height'], ours['width']),
                                          _decoded(ref['mask'], ours['height'], ours['width']))


@pytest.mark.parametrize('split, kwargs', [
    ('train', dict(filter_cfg=dict(filter_empty_gt=True, min_size=40))),
    ('train', dict(filter_cfg=dict(filter_empty_gt=True), metainfo=dict(classes=('ring', 'circle')))),
    ('train', dict(indices=5)),
    ('val', dict(test_mode=True)),
])
def test_same_samples_as_mmdet_coco_dataset(mixed_coco_root, split, kwargs):
    """On mixed_coco_root (conftest.py), whose 11 train images include one under min_size=40 and
    one without annotations, so that each filter here removes images."""
    ours, theirs = _pair(mixed_coco_root, split, **kwargs)
    assert len(ours) == len(theirs) > 0
    if 'filter_cfg' in kwargs:
        assert len(ours) < 11
    assert ours.cat_ids == theirs.cat_ids and ours.cat2label == theirs.cat2label
    assert ours.metainfo == theirs.metainfo
    for idx in range(len(ours)):
        _assert_same_data_info(ours.get_data_info(idx), theirs.get_data_info(idx))


def test_filter_drops_images_without_selected_categories(toy_coco_root):
    ours, theirs = _pair(toy_coco_root, filter_cfg=dict(filter_empty_gt=True),
                         metainfo=dict(classes=('ring',)))
    assert len(ours) == len(theirs)
    assert [ours.get_data_info(i)['img_id'] for i in range(len(ours))] == \
        [theirs.get_data_info(i)['img_id'] for i in range(len(theirs))]


def _in_place_converting_collate(data_info):
    """A collate function that converts the dataset's own annotation dict in place: lists to
    tensors, keys deleted, entries appended."""
    for instance in data_info['instances']:
        instance['bbox'] = torch.tensor(instance['bbox'])
        if isinstance(instance.get('mask'), list):
            instance['mask'][0].append(-1.0)
            instance['mask'] = torch.zeros(1)
        instance.pop('bbox_label')
    data_info['instances'].append({'junk': True})
    data_info['img_path'] += '.bad'
    del data_info['height']


def test_mutating_a_sample_cannot_change_the_next_epoch(toy_coco_root):
    dataset, _ = _pair(toy_coco_root, filter_cfg=dict(filter_empty_gt=True))
    first_epoch = [copy.deepcopy(dataset.get_data_info(i)) for i in range(len(dataset))]
    for i in range(len(dataset)):
        _in_place_converting_collate(dataset.get_data_info(i))
        _in_place_converting_collate(dataset[i])  # through the (empty) pipeline too
    second_epoch = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert pickle.dumps(second_epoch) == pickle.dumps(first_epoch)


def test_png_mask_variant_points_at_existing_files(toy_coco_root):
    dataset = LazyCocoDataset(data_root=str(toy_coco_root),
                              ann_file='annotations/instances_train_pngmasks.json',
                              data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                              pipeline=[])
    masks = [inst['mask'] for i in range(len(dataset))
             for inst in dataset.get_data_info(i)['instances']]
    png = [m['mask_file'] for m in masks if 'mask_file' in m]
    assert png and all(os.path.isfile(p) and p.startswith(str(toy_coco_root)) for p in png)


def test_dataset_pickles_without_its_annotations(toy_coco_root):
    dataset, _ = _pair(toy_coco_root)
    clone = pickle.loads(pickle.dumps(dataset))
    assert len(pickle.dumps(dataset)) < 20_000
    assert clone.get_data_info(0) == dataset.get_data_info(0)
