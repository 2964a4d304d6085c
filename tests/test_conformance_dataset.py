"""Differential conformance: ``LazyCocoDataset`` against mmdet's ``CocoDataset`` for every
constructor argument, on a COCO set whose image files all exist: the same length, metainfo,
category maps, data infos and samples.

Not here (the bad-data suite owns them): images missing at build time, and the other data
problems and their exception types; here only the duplicate annotation id's message, which mmdet's
users match by its text.
"""
import json
import re
import shutil

import numpy as np
import pytest
from mmdet.datasets import CocoDataset

from mmdet_ext.datasets import LazyCocoDataset
from test_lazy_coco_dataset import _assert_same_data_info as assert_same_data_info

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
ARGUMENTS = {
    'defaults': dict(),
    'filter_empty_gt': dict(filter_cfg=dict(filter_empty_gt=True)),
    'filter_min_size': dict(filter_cfg=dict(filter_empty_gt=False, min_size=40)),
    'filter_both': dict(filter_cfg=dict(filter_empty_gt=True, min_size=64)),
    'test_mode': dict(test_mode=True, filter_cfg=dict(filter_empty_gt=True)),
    'lazy_init': dict(lazy_init=True),
    'indices_int': dict(indices=3),
    'indices_list': dict(indices=[3, 0, 2]),
    'no_serialize': dict(serialize_data=False),
    'return_classes': dict(return_classes=True),
    'class_subset': dict(metainfo=dict(classes=('ring', 'circle')),
                         filter_cfg=dict(filter_empty_gt=True)),
    'extra_metainfo': dict(metainfo=dict(classes=CLASSES, palette=[(1, 2, 3)] * 4,
                                         dataset_note='toy')),
    'backend_args': dict(backend_args=dict(backend='local')),
    'max_refetch': dict(max_refetch=3),
}


def dataset_arguments(root, split: str, arguments: dict) -> dict:
    """The toy set's arguments, with ``arguments`` replacing any of them (metainfo too)."""
    common = dict(data_root=str(root), ann_file=f'annotations/instances_{split}.json',
                  data_prefix=dict(img=f'{split}/'), pipeline=[], metainfo=dict(classes=CLASSES))
    common.update(arguments)
    return common


def build_pair(root, split: str, arguments: dict) -> tuple:
    common = dataset_arguments(root, split, arguments)
    return LazyCocoDataset(**common), CocoDataset(**common)


@pytest.mark.parametrize('split', ['train', 'val'])
@pytest.mark.parametrize('name', list(ARGUMENTS))
def test_same_dataset_as_coco_dataset(mixed_coco_root, split, name):
    ours, reference = build_pair(mixed_coco_root, split, ARGUMENTS[name])
    if ARGUMENTS[name].get('lazy_init'):
        assert not ours._fully_initialized and not reference._fully_initialized
        ours.full_init()
        reference.full_init()
    assert len(ours) == len(reference) > 0
    assert ours.metainfo == reference.metainfo
    assert ours.cat_ids == reference.cat_ids and ours.cat2label == reference.cat2label
    for index in range(len(reference)):
        assert_same_data_info(ours.get_data_info(index), reference.get_data_info(index))
        assert ours.get_cat_ids(index) == reference.get_cat_ids(index)
        sample, expected = ours[index], reference[index]  # pipeline=[]: the data info, prepared
        assert sample.keys() == expected.keys()
        assert_same_data_info(sample, expected)


# What each filter must remove from mixed_coco_root's train split: the toy set's own image 5 has
# no annotations and 6 is 56x28 (toy_data.IMAGE_KINDS); of conftest.MIXED_EXTRA_IMAGES, 9 is
# 36x48 with a rectangle, 10 is 50x60 with a circle, 11 has no annotations.
REMOVED = {'filter_empty_gt': {5, 11}, 'filter_min_size': {6, 9},
           'filter_both': {5, 6, 9, 10, 11}, 'test_mode': set()}


@pytest.mark.parametrize('name', [*REMOVED, 'class_subset'])
def test_the_filter_keeps_the_same_images(mixed_coco_root, name):
    ours, reference = build_pair(mixed_coco_root, 'train', ARGUMENTS[name])
    ids = [ours.get_data_info(i)['img_id'] for i in range(len(ours))]
    assert ids == [reference.get_data_info(i)['img_id'] for i in range(len(reference))]
    assert np.all(np.diff(ids) > 0)
    removed = set(range(1, 12)) - set(ids)
    if name == 'class_subset':  # and whichever toy images have neither a ring nor a circle
        assert {9, 11} <= removed and 10 not in removed
    else:
        assert removed == REMOVED[name]


def test_duplicate_annotation_ids_fail_with_mmdets_message(toy_coco_root, tmp_path):
    """mmdet asserts ``Annotation ids in '<ann_file>' are not unique!``; ours says the same
    (an AssertionError too), then lists the duplicates."""
    root = tmp_path / 'root'
    shutil.copytree(toy_coco_root, root)
    ann_path = root / 'annotations' / 'instances_train.json'
    coco = json.loads(ann_path.read_text())
    coco['annotations'][1]['id'] = coco['annotations'][0]['id']
    ann_path.write_text(json.dumps(coco))
    expected = re.escape(f"Annotation ids in '{ann_path}' are not unique!")
    with pytest.raises(AssertionError, match=expected):
        CocoDataset(**dataset_arguments(root, 'train', {}))
    with pytest.raises(AssertionError, match=expected) as ours:
        LazyCocoDataset(**dataset_arguments(root, 'train', {}),
                        store_cache_dir=str(tmp_path / 'stores'))
    assert 'duplicate_ann_id' in str(ours.value)
