"""A validated store never serves a decision taken on files that have changed since, missing images
follow mmdet's semantics, and a wrong image prefix is named."""
import json
import os
import shutil
from pathlib import Path

import pytest
from mmengine.registry import init_default_scope

from mmdet_ext.datasets import DataValidationError, LazyCocoDataset
from mmdet_ext.datasets.validation import MissingImagesError


@pytest.fixture(autouse=True)
def _mmdet_scope():
    init_default_scope('mmdet')  # where the plugin's transforms are registered


@pytest.fixture
def root(toy_coco_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / 'data'
    shutil.copytree(toy_coco_root / 'train', root / 'train')
    shutil.copytree(toy_coco_root / 'annotations', root / 'annotations')
    return root


def _dataset(root: Path, **kwargs) -> LazyCocoDataset:
    kwargs = {'data_prefix': dict(img='train/'), **kwargs}
    return LazyCocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                           pipeline=[dict(type='NativeLoadImageFromFile')], filter_cfg=None,
                           **kwargs)


def test_images_arriving_later_rebuild_the_store(root):
    """Dropped for a broken file, then repaired: the next open re-validates, not serves 7."""
    image = root / 'train' / '000000.jpg'
    good = image.read_bytes()
    image.write_bytes(b'')
    assert len(_dataset(root)) == 7
    image.write_bytes(good)
    assert len(_dataset(root)) == 8
    image.write_bytes(good[:len(good) // 2])  # broken again: dropped again
    assert len(_dataset(root)) == 7


def test_unchanged_files_reuse_the_store(root):
    first = _dataset(root)
    stamp = os.stat(first.store.path).st_mtime_ns
    second = _dataset(root)
    assert second.store.path == first.store.path
    assert os.stat(second.store.path).st_mtime_ns == stamp


def test_missing_image_is_kept_as_mmdet_keeps_it_and_fails_as_file_not_found(root):
    (root / 'train' / '000003.jpg').unlink()
    dataset = _dataset(root)
    assert len(dataset) == 8  # CocoDataset never opens images at init
    index = [dataset.get_data_info(i)['img_id'] for i in range(8)].index(4)
    with pytest.raises(FileNotFoundError, match='000003.jpg'):
        dataset[index]
    problems = Path(dataset.store.path + '.problems.jsonl').read_text().splitlines()
    assert [json.loads(line)['kind'] for line in problems] == ['image_missing']


@pytest.mark.parametrize('on_bad_sample', ['raise', 'skip'])
def test_wrong_prefix_names_the_prefix_and_a_missing_path(root, on_bad_sample):
    dataset = _dataset(root, data_prefix=dict(img='images/'), on_bad_sample=on_bad_sample)
    assert len(dataset) == 8
    with pytest.raises(MissingImagesError) as info:
        dataset[0]
    message = str(info.value)
    assert '8 of the 8 images are missing' in message
    assert f"'{root}/images/'" in message and f'{root}/images/0000' in message
    assert isinstance(info.value, FileNotFoundError)


def test_wrong_prefix_with_drop_image_fails_at_init_instead_of_an_empty_dataset(root):
    with pytest.raises(MissingImagesError, match='images are missing under the image prefix'):
        _dataset(root, data_prefix=dict(img='images/'),
                 validate=dict(image_missing='drop_image'))


def test_validate_takes_the_policy_and_bad_data_policy_still_works_with_a_warning_once(
        root, monkeypatch):
    """validate=dict(...) overrides the default actions (a missing image: kept, as mmdet keeps
    it); the former bad_data_policy still does the same, and says once where it moved."""
    from mmdet_ext import moved_settings
    from helpers.tiny_runner import record_mmengine_log
    monkeypatch.setattr(moved_settings, '_warned', set())
    next(iter(sorted((root / 'train').iterdir()))).unlink()
    drop = dict(image_missing='drop_image')
    assert len(_dataset(root)) == 8
    assert len(_dataset(root, validate=drop)) == 7
    with record_mmengine_log() as records:
        assert len(_dataset(root, bad_data_policy=drop)) == 7
        assert len(_dataset(root, bad_data_policy=drop, validate=False)) == 8
    assert [r.getMessage() for r in records if 'bad_data_policy' in r.getMessage()] == [
        "LazyCocoDataset: bad_data_policy is now validate's: "
        'validate=dict(<problem kind>=<action>, ...); logged once']
    with pytest.raises(ValueError, match="validate: unknown problem kind 'image_gone'"):
        _dataset(root, validate=dict(image_gone='drop_image'))


def test_training_on_nothing_is_an_error_naming_the_json(root):
    for image in (root / 'train').iterdir():
        image.write_bytes(b'')
    with pytest.raises(DataValidationError, match='instances_train.json.*no image is left'):
        _dataset(root)
    assert len(_dataset(root, test_mode=True)) == 8


def test_duplicate_annotation_ids_are_also_an_assertion_error(root):
    ann_file = root / 'annotations' / 'instances_train.json'
    coco = json.loads(ann_file.read_text())
    coco['annotations'][1]['id'] = coco['annotations'][0]['id']
    ann_file.write_text(json.dumps(coco))
    with pytest.raises(AssertionError, match='duplicate_ann_id'):
        _dataset(root)
