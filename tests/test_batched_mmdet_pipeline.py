"""The batched fetch on mmdet's own loading steps (``fused_mmdet_loading.py``):
``NativeLoadImageFromFile``, annotation loaders, ``Resize`` / ``RandomResize`` /
``RandomChoiceResize``, ``RandomFlip`` -- the pipeline an adopted mmdet config keeps -- give exactly
the per-sample path's samples and random stream, through real DataLoader workers too, with bad
samples and EXIF-rotated photos; anything else falls back and says why."""
import itertools
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.dataset import Compose
from mmengine.registry import DefaultScope

from mmdet_ext.datasets.batched_fetch import batch_plan
from helpers.build import needs_native_decoding
from test_adopt import _write_adopted_config
from test_adopt import elsewhere  # noqa: F401 (a fixture: pytest finds it by name)
from test_batched_fetch import (FLIP, INDICES, _assert_same_samples, _batched, _dataset, _loader,
                                _losses, _one_storage, _per_sample, _rotated_with_exif,
                                assert_bad_samples_skipped_as_per_sample)
from test_batched_fetch import bad_root, log_file  # noqa: F401 (fixtures, as above)

pytestmark = needs_native_decoding

TOY_CONFIG = Path(__file__).resolve().parents[1] / 'configs' / 'mask-rcnn_r18_fpn_toy-coco.py'

# The toy images are 320x240: fixed, by factor, every exact interpolation, random range, random
# ratio, random choice.
RESIZE_STEPS = [
    dict(type='Resize', scale=(1333, 800), keep_ratio=True),
    dict(type='Resize', scale=(160, 120), keep_ratio=False, interpolation='nearest'),
    dict(type='Resize', scale_factor=0.75, keep_ratio=True),
    dict(type='Resize', scale=(400, 300), keep_ratio=True, interpolation='area'),
    dict(type='Resize', scale=(150, 100), keep_ratio=False, interpolation='lanczos'),
    dict(type='RandomResize', scale=[(200, 150), (400, 300)], keep_ratio=True),
    dict(type='RandomResize', scale=(320, 240), ratio_range=(0.5, 1.5), keep_ratio=True),
    dict(type='RandomChoiceResize', scales=[(300, 200), (200, 300), (160, 120)],
         keep_ratio=True),
    dict(type='RandomChoiceResize', scales=[(480, 360), (200, 100)], keep_ratio=False,
         interpolation='area'),
]
LAZY_ANNOTATIONS = dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True)
META_KEYS = ('img_id', 'img_path', 'ori_shape', 'img_shape', 'scale_factor', 'flip',
             'flip_direction', 'scale', 'keep_ratio', 'homography_matrix')


_scopes = itertools.count()


@pytest.fixture(autouse=True)
def mmdet_scope():
    """The Runner's default scope: RandomResize builds mmdet's Resize through it."""
    yield DefaultScope.get_instance(f'test_batched_mmdet_{next(_scopes)}', scope_name='mmdet')


# Large scale jitter, as mmdet's LSJ configs have it (the strong baseline's and Mask2Former's
# crop and filter, at the toy images' size), and the other crop types: the steps between the
# resize and the flip.
LSJ_RESIZE = dict(type='RandomResize', scale=(320, 240), ratio_range=(0.1, 2.0), keep_ratio=True)
CROP_STEPS = [
    [dict(type='RandomCrop', crop_type='absolute_range', crop_size=(200, 200),
          recompute_bbox=True, allow_negative_crop=True),
     dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-2, 1e-2))],
    [dict(type='RandomCrop', crop_size=(180, 150), crop_type='absolute', recompute_bbox=True,
          allow_negative_crop=True),
     dict(type='FilterAnnotations', min_gt_bbox_wh=(1e-5, 1e-5), by_mask=True)],
    [dict(type='RandomCrop', crop_size=(120, 90))],  # samples without boxes are drawn again
    [dict(type='RandomCrop', crop_type='relative_range', crop_size=(0.3, 0.7),
          bbox_clip_border=False)],
    [dict(type='RandomCrop', crop_type='absolute_range', crop_size=(100, 300))],
]


def _mmdet_pipeline(resize=RESIZE_STEPS[0], color_type='color', annotations=LAZY_ANNOTATIONS,
                    flip=True, between=(), crop=(), after=()):
    meta_keys = META_KEYS + (('scale_idx',) if resize['type'] == 'RandomChoiceResize' else ())
    return [dict(type='NativeLoadImageFromFile', color_type=color_type), annotations, *between,
            resize, *crop, *([dict(type='RandomFlip', **FLIP)] if flip else []), *after,
            dict(type='PackDetInputs', meta_keys=meta_keys)]


def _assert_batched_exactly(root, pipeline, seeds=range(3), **kwargs):
    batched = _dataset(root, pipeline, **kwargs)
    reference = _dataset(root, pipeline, batched_fetch=False, **kwargs)
    assert batched.batch_engine().plan.loader.read_as == 'NativeLoadImageFromFile'
    flips = set()
    for seed in seeds:
        samples = _batched(batched, INDICES, seed)
        _assert_same_samples(_per_sample(reference, INDICES, seed), samples)
        assert _one_storage(samples)
        flips |= {s['data_samples'].metainfo.get('flip_direction') for s in samples}
        # ... and the RNG stream goes on exactly as after the per-sample path
        assert np.random.randint(1 << 30) == (_per_sample(reference, INDICES, seed),
                                              np.random.randint(1 << 30))[1]
    return flips


@pytest.mark.parametrize('color_type', ['color', 'grayscale', 'unchanged'])
@pytest.mark.parametrize('resize', RESIZE_STEPS)
def test_mmdet_loading_steps_are_batched_exactly(toy_coco_root, resize, color_type):
    flips = _assert_batched_exactly(toy_coco_root, _mmdet_pipeline(resize, color_type))
    assert len(flips) > 1  # the flip draws differ between samples: the test sees them


@pytest.mark.parametrize('annotations', [
    dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True, poly2mask=False),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True, poly2mask=False),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=False)])
def test_any_annotation_loader_and_no_flip_are_batched_exactly(toy_coco_root, annotations):
    _assert_batched_exactly(toy_coco_root,
                            _mmdet_pipeline(RESIZE_STEPS[7], annotations=annotations))
    _assert_batched_exactly(toy_coco_root, _mmdet_pipeline(RESIZE_STEPS[5], flip=False))


@pytest.mark.parametrize('crop', CROP_STEPS)
@pytest.mark.parametrize('resize', [LSJ_RESIZE, RESIZE_STEPS[1], RESIZE_STEPS[3]])
def test_a_crop_between_the_resize_and_the_flip_is_batched_exactly(toy_coco_root, resize, crop):
    """LSJ (RandomResize, RandomCrop, FilterAnnotations, RandomFlip): the crop planned with the
    loader, its part of the resized image decoded into the batch, boxes, masks, labels and
    ignore flags by RandomCrop's own code; the per-sample path's samples and random stream."""
    pipeline = _mmdet_pipeline(resize, crop=crop)
    loader = _dataset(toy_coco_root, pipeline).batch_engine().plan.loader
    assert [type(step).__name__ for step in loader.crop_steps] == [c['type'] for c in crop]
    _assert_batched_exactly(toy_coco_root, pipeline, seeds=range(4))


def test_crops_differ_between_samples_and_keep_inner_parts(toy_coco_root):
    """The crop's draws differ from sample to sample, and its offsets are not all 0: the
    equality above sees both the offset and the size of the part kept."""
    dataset = _dataset(toy_coco_root, _mmdet_pipeline(LSJ_RESIZE, crop=CROP_STEPS[0]))
    samples = [s['data_samples'] for seed in range(3) for s in _batched(dataset, INDICES, seed)]
    offsets = {tuple(np.round(s.homography_matrix[:2, 2]).astype(int)) for s in samples}
    assert len({s.img_shape for s in samples}) > 2 and len(offsets) > 2
    assert max(max(s.img_shape) for s in samples) == 200  # some cropped to the crop size


def test_random_scales_differ_between_samples(toy_coco_root):
    """The scale is drawn per sample, in the per-sample path's order (the equality tests above
    would pass for a constant scale too)."""
    dataset = _dataset(toy_coco_root, _mmdet_pipeline(RESIZE_STEPS[5]))
    shapes = {s['data_samples'].img_shape for s in _batched(dataset, INDICES, 0)}
    assert len(shapes) > 1


def test_a_test_pipeline_with_annotations_after_the_resize_is_batched(toy_coco_root):
    pipeline = [dict(type='NativeLoadImageFromFile'), RESIZE_STEPS[0], LAZY_ANNOTATIONS,
                dict(type='PackDetInputs')]
    _assert_batched_exactly(toy_coco_root, pipeline, seeds=[0])


@pytest.mark.parametrize('pipeline', [_mmdet_pipeline(RESIZE_STEPS[7]),
                                      _mmdet_pipeline(LSJ_RESIZE, crop=CROP_STEPS[0])])
def test_dataloader_workers_batch_mmdet_steps_exactly(toy_coco_root, pipeline):
    batches = list(_loader(_dataset(toy_coco_root, pipeline), 2, timeout=300))  # a hang fails
    expected = list(_loader(_dataset(toy_coco_root, pipeline, batched_fetch=False), 0))
    assert len(batches) == len(expected) == 3
    for got, want in zip(batches, expected):
        assert torch.equal(got['inputs'], want['inputs'])
        for got_sample, want_sample in zip(got['data_samples'], want['data_samples']):
            assert got_sample.img_shape == want_sample.img_shape
            assert got_sample.get('scale_idx') == want_sample.get('scale_idx')
            assert np.array_equal(got_sample.homography_matrix, want_sample.homography_matrix)
            assert got_sample.flip_direction == want_sample.flip_direction
            assert torch.equal(got_sample.gt_instances.bboxes.tensor,
                               want_sample.gt_instances.bboxes.tensor)


def test_exif_rotated_photos_are_batched_exactly_on_mmdet_steps(toy_coco_root, tmp_path,
                                                                log_file):  # noqa: F811
    root = tmp_path / 'rotated'
    shutil.copytree(toy_coco_root, root)
    _rotated_with_exif(root / 'train' / '000003.jpg')
    _assert_batched_exactly(root, _mmdet_pipeline(RESIZE_STEPS[7]))
    assert 'instead of batched' not in log_file.read_text()


def test_bad_samples_on_mmdet_steps_are_skipped_as_in_the_per_sample_path(
        bad_root, tmp_path, log_file):  # noqa: F811
    assert_bad_samples_skipped_as_per_sample(bad_root, tmp_path, log_file,
                                             _mmdet_pipeline(RESIZE_STEPS[5]))
    assert 'NativeLoadImageFromFile: cannot load' in \
        (tmp_path / 'batched' / 'bad_samples.jsonl').read_text()


def test_ignore_empty_images_are_replaced_as_in_the_per_sample_path(bad_root):  # noqa: F811
    """``NativeLoadImageFromFile(ignore_empty=True)``: a truncated image (refused when read) and
    a corrupt one (refused when decoded) make None, and the sample is drawn again, as per sample."""
    pipeline = _mmdet_pipeline(RESIZE_STEPS[5])
    pipeline[0] = dict(type='NativeLoadImageFromFile', ignore_empty=True)
    dataset = _dataset(bad_root, pipeline, validate=False)
    reference = _dataset(bad_root, pipeline, validate=False, batched_fetch=False)
    indices = [0, 1, 2, 5, 6]
    for seed in range(3):
        samples = _batched(dataset, indices, seed)
        _assert_same_samples(_per_sample(reference, indices, seed), samples)
        assert not {s['data_samples'].img_id for s in samples} & {2, 6}


@pytest.mark.parametrize('pipeline,why', [
    (_mmdet_pipeline(dict(type='Resize', scale=(200, 150), backend='pillow')),
     "the resize has backend='pillow'"),
    (_mmdet_pipeline(dict(type='Resize', scale=(200, 150), interpolation='bicubic')),
     "the resize has backend='cv2', interpolation='bicubic' (cv2 with one of nearest, "
     'bilinear, area, lanczos is batched exactly)'),
    ([dict(type='NativeLoadImageFromFile', to_float32=True), LAZY_ANNOTATIONS, RESIZE_STEPS[0],
      dict(type='PackDetInputs')], 'NativeLoadImageFromFile has to_float32=True'),
    ([LAZY_ANNOTATIONS, dict(type='NativeLoadImageFromFile'), RESIZE_STEPS[0],
      dict(type='PackDetInputs')], 'annotations are loaded before NativeLoadImageFromFile'),
    (_mmdet_pipeline(between=[dict(type='FilterAnnotations')]),
     'FilterAnnotations follows NativeLoadImageFromFile and its annotation loaders'),
    (_mmdet_pipeline(after=[dict(type='RandomCrop', crop_size=(100, 100))]),
     'RandomCrop comes after RandomFlip'),
    ([dict(type='LoadImageFromFile'), LAZY_ANNOTATIONS, RESIZE_STEPS[0],
      dict(type='PackDetInputs')],
     'the pipeline has no NativeLoadResizeFlip or NativeLoadImageFromFile'),
])
def test_other_mmdet_pipelines_fall_back_and_say_why(toy_coco_root, log_file,  # noqa: F811
                                                     pipeline, why):
    assert why in batch_plan(Compose(pipeline).transforms)[1]
    dataset = _dataset(toy_coco_root, pipeline)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    _assert_same_samples(_per_sample(reference, INDICES[:2]), _batched(dataset, INDICES[:2]))
    assert f'batched fetch off, samples load one by one: {why}' in log_file.read_text()


@pytest.mark.parametrize('zoo', [
    'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    'strong_baselines/mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_lsj-100e_coco.py'])
def test_an_adopted_mmdet_config_is_batched(elsewhere, toy_coco_root, zoo):  # noqa: F811
    """mmdet's own Mask R-CNN config and its LSJ strong baseline (RandomResize, RandomCrop,
    FilterAnnotations, RandomFlip), adopted: their train and val pipelines load in batches."""
    from mmdet.registry import DATASETS
    cfg = Config.fromfile(str(_write_adopted_config(elsewhere, f'mmdet::{zoo}', toy_coco_root)))
    for name in ('train_dataloader', 'val_dataloader'):
        config = cfg[name].dataset
        while 'dataset' in config:  # RepeatDataset: the toy data for the dataset it repeats
            toy = {k: config.pop(k) for k in ('data_root', 'ann_file', 'data_prefix', 'metainfo')}
            config = config.dataset
            config.update(toy)
        dataset = DATASETS.build(config)
        reference = DATASETS.build({**config, 'batched_fetch': False})
        loader = dataset.batch_engine().plan.loader
        assert loader.read_as == 'NativeLoadImageFromFile'
        assert [type(step).__name__ for step in loader.crop_steps] == (
            ['RandomCrop', 'FilterAnnotations'] if 'lsj' in zoo and name == 'train_dataloader'
            else [])
        indices = list(range(min(4, len(dataset))))
        samples = _batched(dataset, indices)
        _assert_same_samples(_per_sample(reference, indices), samples)
        assert _one_storage(samples)


def test_training_on_batched_mmdet_steps_gives_the_per_sample_losses(toy_coco_root, tmp_path,
                                                                    train_toy):
    """tools/train.py, the toy Mask R-CNN with mmdet's multi-scale loading steps, 2 workers:
    the batched fetch feeds the model what the per-sample path feeds it."""
    config = tmp_path / 'mmdet_steps.py'
    config.write_text(f"""_base_ = '{TOY_CONFIG}'
train_dataloader = dict(dataset=dict(pipeline=[
    dict(type='NativeLoadImageFromFile'),
    dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
    dict(type='RandomChoiceResize', scales=[(320, 240), (288, 216), (352, 264)], keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')]))
""")
    options = ('randomness.seed=0', )
    log = train_toy(toy_coco_root, tmp_path / 'batched', 1, options=options, config=config)
    assert 'batched fetch on: each batch decoded natively as one' in log
    log = train_toy(toy_coco_root, tmp_path / 'per_sample', 1, config=config,
                    options=options + ('train_dataloader.dataset.batched_fetch=False', ))
    assert 'batched fetch off, samples load one by one: batched_fetch=False' in log
    losses = _losses(tmp_path / 'batched')
    assert len(losses) == 4 and losses == _losses(tmp_path / 'per_sample')
