"""``FastPackDetInputs`` against mmdet's ``PackDetInputs`` (transforms/packing.py): the same
``inputs`` (values, dtype, shape, contiguous, a storage of its own where mmdet's has one) and the
same data sample, for the images pipelines give it: contiguous, flipped and cropped views, 2 to 4
channels, float images, and the ones left to mmdet's code."""
import copy

import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmdet.structures.bbox import BaseBoxes

from mmdet_ext.transforms import FastPackDetInputs

from helpers.transform_streams import same, samples_of


def _images():
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    yield 'contiguous', base
    yield 'flipped horizontally', base[:, ::-1]
    yield 'flipped vertically', base[::-1]
    yield 'flipped both ways', base[::-1, ::-1]
    yield 'cropped', base[3:30, 5:41]
    yield 'cropped and flipped', base[3:30, 5:41][:, ::-1]
    yield 'channels reversed', base[..., ::-1]
    yield 'every other column', base[:, ::2]
    yield 'two channels', base[..., :2].copy()
    yield 'four channels', rng.integers(0, 256, (20, 30, 4), dtype=np.uint8)
    yield 'five channels', rng.integers(0, 256, (20, 30, 5), dtype=np.uint8)
    yield 'one channel', base[..., 0].copy()
    yield 'one channel, 3-d', base[..., :1].copy()
    yield 'float32', rng.standard_normal((20, 30, 3)).astype(np.float32)
    yield 'float64 flipped', rng.standard_normal((20, 30, 3))[:, ::-1]
    yield 'uint16', rng.integers(0, 65536, (20, 30, 3), dtype=np.uint16)
    yield 'int64', rng.integers(-9, 9, (20, 30, 3), dtype=np.int64)
    yield 'bool', rng.integers(0, 2, (20, 30, 3)).astype(bool)
    yield 'float16', rng.standard_normal((20, 30, 3)).astype(np.float16)
    yield 'empty', np.zeros((0, 30, 3), dtype=np.uint8)


def _sample(img: np.ndarray) -> dict:
    return dict(img=img, img_id=7, img_path='x.jpg', ori_shape=img.shape[:2],
                img_shape=img.shape[:2], scale_factor=(1.0, 1.0), flip=False,
                flip_direction=None)


def _same_packed(expected: dict, got: dict, where: str) -> None:
    assert list(expected) == list(got), where
    if 'inputs' in expected:
        a, b = expected['inputs'], got['inputs']
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
        assert a.is_contiguous() == b.is_contiguous() and a.stride() == b.stride(), where
    a, b = expected['data_samples'], got['data_samples']
    assert a.metainfo.keys() == b.metainfo.keys(), where
    same({k: a.metainfo[k] for k in a.metainfo}, {k: b.metainfo[k] for k in b.metainfo}, where)
    for field in ('gt_instances', 'ignored_instances', 'proposals', 'gt_sem_seg'):
        assert (field in a) == (field in b), f'{where}.{field}'
        if field not in a:
            continue
        x, y = getattr(a, field), getattr(b, field)
        assert x.keys() == y.keys(), f'{where}.{field}'
        for key in x.keys():
            u, v = x.get(key), y.get(key)
            if isinstance(u, BaseBoxes):
                u, v = u.tensor, v.tensor
            if isinstance(u, torch.Tensor):
                assert u.dtype == v.dtype and torch.equal(u, v), f'{where}.{field}.{key}'
            else:
                same(u, v, f'{where}.{field}.{key}')


@pytest.mark.parametrize('name', [name for name, _ in _images()])
def test_fast_pack_gives_mmdets_inputs(name):
    img = dict(_images())[name]  # made afresh: the test writes to it
    theirs, ours = PackDetInputs(), FastPackDetInputs()
    try:
        expected = theirs(_sample(img))
    except Exception as error:  # torch < 2.3 has no uint16 tensors: mmdet's raises, so do we
        with pytest.raises(type(error)):
            ours(_sample(img))
        return
    got = ours(_sample(img))
    _same_packed(expected, got, name)
    sample = _sample(img)
    packed = ours(sample)
    assert sample['img'] is img  # results are read, not changed
    if img.ndim == 3 and img.shape[2] > 1 and img.size:
        # a storage of its own, as mmdet's: writing the image afterwards does not reach it
        before = packed['inputs'].clone()
        img[...] = 0
        assert torch.equal(packed['inputs'], before), name


def test_fast_pack_planes_are_made_by_opencv_where_it_can():
    # the path under test runs (not mmdet's, which would pass the test above as well)
    from mmdet_ext.transforms.packing import planar_copy
    rng = np.random.default_rng(1)
    img = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
    for view in (img, img[:, ::-1], img[::-1], img[2:10, 3:20]):
        planes = planar_copy(view)
        assert planes is not None and torch.equal(planes, torch.from_numpy(
            np.ascontiguousarray(view.transpose(2, 0, 1))))
    for refused in (img[..., ::-1], img[:, ::2], img[..., 0], img[..., :1],
                    img.astype(np.int64), img.astype(bool), np.zeros((0, 3, 3), np.uint8)):
        assert planar_copy(refused) is None


def test_fast_pack_leaves_an_img_meta_key_to_mmdet():
    img = np.random.default_rng(2).integers(0, 256, (10, 12, 3), dtype=np.uint8)
    keys = ('img_id', 'img_shape', 'img')
    _same_packed(PackDetInputs(meta_keys=keys)(_sample(img)),
                 FastPackDetInputs(meta_keys=keys)(_sample(img)), 'img in meta_keys')


def test_fast_pack_on_loaded_samples_with_instances(toy_coco_root):
    samples = samples_of(toy_coco_root, lazy=False)[:12]
    keys = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor')
    theirs, ours = PackDetInputs(meta_keys=keys), FastPackDetInputs(meta_keys=keys)
    for step, sample in enumerate(samples):
        sample['gt_ignore_flags'][::3] = True  # some ignored instances as well
        flipped = dict(sample, img=sample['img'][:, ::-1])
        for variant in (sample, flipped):
            _same_packed(theirs(copy.deepcopy(variant)), ours(copy.deepcopy(variant)),
                         f'sample {step}')
