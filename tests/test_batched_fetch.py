"""Batched fetch (``LazyCocoDataset.__getitems__``): a batch's images decoded in one native call
(``decode_images_into``; resized and flipped too with ``pixels_on='worker'``) give exactly the
samples of the per-sample path -- same seeds, same flips, same pixels, same annotations and
metainfo -- for both ``pixels_on``, through real DataLoader workers and the threads option, with
bad samples, EXIF-rotated photos, the per-sample fall back and its log, and a batch that reaches
the training process in the very buffer it was decoded into."""
import json
import os
import random
import shutil
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmcv.transforms import BaseTransform
from mmdet.datasets.transforms import FilterAnnotations, PackDetInputs
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmengine.dataset import Compose, pseudo_collate
from mmengine.logging import MMLogger
from PIL import Image
from torch.utils.data import DataLoader

from mmdet_ext import LazyCocoDataset, LoadLazyAnnotations, NativeLoadResizeFlip, fast_collate
from mmdet_ext import worker_buffers
from mmdet_ext.datasets.batched_fetch import batch_plan, reads_no_pixels
from mmdet_ext.datasets.sample_seeds import PerSampleSeedDataset, SeededKey
from mmdet_ext.models import FastDetDataPreprocessor
from mmdet_ext.ops import decode_image, decode_images_into, warp_image
from mmdet_ext.transforms import DEFERRED_META_KEYS, FastPackDetInputs
from helpers.build import needs_native_decoding
from helpers.encoded_images import encoded_image as _jpeg
from helpers.tiny_runner import record_mmengine_log
from helpers.torch_features import requires_opcheck

pytestmark = needs_native_decoding

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
FLIP = dict(prob=[0.25, 0.25, 0.25], direction=['horizontal', 'vertical', 'diagonal'])
# The toy images are 320x240: up, reduced decode (1/2), down without keeping the ratio.
RESIZES = [dict(scale=(1333, 800), keep_ratio=True), dict(scale=(150, 100), keep_ratio=True),
           dict(scale=(160, 120), keep_ratio=False, interpolation='nearest')]
INDICES = [0, 5, 2, 7, 3]


PIXELS_ON = ['device', 'worker']


def _pipeline(resize=RESIZES[0], color_type='color', after=(), pixels_on='device', **loader):
    pack = PackDetInputs(meta_keys=DEFERRED_META_KEYS) if pixels_on == 'device' else \
        PackDetInputs()
    return [LoadLazyAnnotations(with_bbox=True, with_mask=True),
            NativeLoadResizeFlip(**resize, **FLIP, color_type=color_type, pixels_on=pixels_on,
                                 **loader),
            *after, pack]


def _dataset(root, pipeline=None, **kwargs):
    return LazyCocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                           data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                           pipeline=pipeline or _pipeline(), **kwargs)


def _per_sample(dataset, indices, seed=0):
    np.random.seed(seed)  # RandomFlip draws from numpy's global RNG
    return [dataset[i] for i in indices]


def _batched(dataset, indices, seed=0):
    np.random.seed(seed)
    return dataset.__getitems__(indices)


def _assert_same_samples(expected, actual):
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert got['inputs'].dtype == want['inputs'].dtype
        assert torch.equal(got['inputs'], want['inputs'])
        want_sample, got_sample = want['data_samples'], got['data_samples']
        assert set(got_sample.metainfo) == set(want_sample.metainfo)
        for key, value in want_sample.metainfo.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(got_sample.metainfo[key], value, err_msg=key)
            else:
                assert got_sample.metainfo[key] == value, key
        for field in ('gt_instances', 'ignored_instances'):
            want_data, got_data = want_sample.get(field), got_sample.get(field)
            assert set(got_data.keys()) == set(want_data.keys())
            assert torch.equal(got_data.bboxes.tensor, want_data.bboxes.tensor)
            assert torch.equal(got_data.labels, want_data.labels)
            if 'masks' in want_data:
                np.testing.assert_array_equal(got_data.masks.to_ndarray(),
                                              want_data.masks.to_ndarray())


def _one_storage(samples):
    pointers = {sample['inputs'].untyped_storage().data_ptr() for sample in samples}
    return len(pointers) == 1


@pytest.fixture
def log_file(tmp_path):
    """The current mmengine logger writes to this file (print_log(logger='current'))."""
    path = tmp_path / 'run.log'
    MMLogger.get_instance(f'batched_fetch_{tmp_path.name}', log_file=str(path), log_level='INFO')
    return path


# ---------------------------------------------------------------------------------------------
# decode_images_into: each image as decode_image(planar=True) decodes it
# ---------------------------------------------------------------------------------------------

def _layout(shapes):
    sizes = [int(np.prod(shape)) for shape in shapes]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    return offsets[:-1], offsets[-1]


@pytest.mark.parametrize('threads', [1, 3, 16])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_decode_images_into_matches_decode_image(threads, color_type):
    data = [_jpeg(480, 640, seed=1), _jpeg(301, 199, seed=2), _jpeg(37, 18, 1, seed=3),
            _jpeg(64, 48, seed=4, ext='.png')]
    denoms = [1, 2, 4, 2]  # the PNG ignores its denominator, as in decode_image
    expected = [decode_image(d, color_type, denom, planar=True) for d, denom in zip(data, denoms)]
    shapes = [tuple(e.shape) for e in expected]
    offsets, total = _layout(shapes)
    out = torch.full((total + 7, ), 77, dtype=torch.uint8)
    decode_images_into(data, color_type, denoms, out, offsets, shapes, num_threads=threads)
    for image, offset in zip(expected, offsets):
        assert torch.equal(out[offset:offset + image.numel()].view(image.shape), image)
    assert torch.equal(out[total:], torch.full((7, ), 77, dtype=torch.uint8))  # nothing beyond


def test_decode_images_into_names_each_failure_and_decodes_the_rest():
    good = _jpeg(48, 64, seed=5)
    truncated = good[:len(good) // 2].clone()
    data = [good, truncated, good, good]
    shapes = [(3, 48, 64), (3, 48, 64), (3, 64, 48), (3, 48, 64)]  # image 2: the wrong shape
    offsets, total = _layout(shapes)
    out = torch.zeros(total, dtype=torch.uint8)
    with pytest.raises(RuntimeError) as info:
        decode_images_into(data, 'color', [1] * 4, out, offsets, shapes, num_threads=2)
    message = str(info.value)
    assert 'image 1: decode_image: truncated JPEG' in message
    assert 'image 2: decoded to 3x48x64 (C x H x W), expected 3x64x48' in message
    assert 'image 0' not in message and 'image 3' not in message
    expected = decode_image(good, 'color', planar=True).reshape(-1)
    assert torch.equal(out[offsets[3]:], expected) and torch.equal(out[:offsets[1]], expected)


def test_decode_images_into_checks_every_argument_before_writing():
    data = [_jpeg(48, 64, seed=6)] * 2
    out = torch.zeros(2 * 3 * 48 * 64 - 1, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r'image 1 \(9216 bytes at offset 9216\) does not fit'):
        decode_images_into(data, 'color', [1, 1], out, [0, 9216], [(3, 48, 64)] * 2)
    assert not out.any()  # image 0 fitted, but nothing was decoded
    with pytest.raises(RuntimeError, match='2 images need 2 scale_denoms, 2 offsets and 6'):
        decode_images_into(data, 'color', [1, 1], out, [0], [(3, 48, 64)] * 2)
    with pytest.raises(ValueError, match="got 'unchanged'"):
        decode_images_into(data, 'unchanged', [1, 1], out, [0, 0], [(3, 48, 64)] * 2)
    with pytest.raises(RuntimeError, match='out must be a contiguous 1-D CPU uint8'):
        decode_images_into(data, 'color', [1, 1], out.float(), [0, 0], [(3, 48, 64)] * 2)


@pytest.mark.parametrize('interpolation', ['nearest', 'bilinear', 'bicubic', 'area', 'lanczos'])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_decode_images_into_warps_as_warp_image_does(interpolation, color_type):
    data = [_jpeg(480, 640, seed=11), _jpeg(301, 199, seed=12), _jpeg(37, 18, 1, seed=13)]
    denoms = [2, 1, 1]
    decoded = [decode_image(d, color_type, denom) for d, denom in zip(data, denoms)]
    warps = [(800, 1067, 'horizontal'), (150, 99, None), (74, 36, 'diagonal')]
    expected = [warp_image(image, (h, w), interpolation, flip)
                for image, (h, w, flip) in zip(decoded, warps)]
    offsets, total = _layout([tuple(e.shape) for e in expected])
    out = torch.full((total + 5, ), 77, dtype=torch.uint8)
    decode_images_into(data, color_type, denoms, out, offsets,
                       [(d.shape[2], *d.shape[:2]) for d in decoded], num_threads=2,
                       warps=warps, interpolation=interpolation)
    for image, offset in zip(expected, offsets):
        assert torch.equal(out[offset:offset + image.numel()].view(image.shape), image)
    assert torch.equal(out[total:], torch.full((5, ), 77, dtype=torch.uint8))


def test_decode_images_into_checks_the_warps_before_writing():
    data = [_jpeg(48, 64, seed=14)] * 2
    shapes = [(3, 48, 64)] * 2
    out = torch.zeros(2 * 3 * 96 * 128, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r'image 1 \(37152 bytes at offset 36864\) does not'):
        decode_images_into(data, 'color', [1, 1], out, [0, 36864], shapes,
                           warps=[(96, 128, None), (96, 129, None)])
    with pytest.raises(RuntimeError, match='2 images need 6 warp values'):
        torch.ops.mmdet_ext.decode_images_into(data, 1, [1, 1], None, out, [0, 0],
                                               [3, 48, 64] * 2, 1, [96, 128, 0], 1)
    with pytest.raises(RuntimeError, match='decode_images_into: unknown interpolation 9'):
        torch.ops.mmdet_ext.decode_images_into(data, 1, [1, 1], None, out, [0, 0],
                                               [3, 48, 64] * 2, 1, [96, 128, 0] * 2, 9)
    with pytest.raises(RuntimeError, match='decode_images_into: output size 0x128'):
        decode_images_into(data, 'color', [1, 1], out, [0, 0], shapes,
                           warps=[(96, 128, None), (0, 128, None)])
    with pytest.raises(ValueError, match="got \\[None, 'sideways'\\]"):
        decode_images_into(data, 'color', [1, 1], out, [0, 0], shapes,
                           warps=[(96, 128, None), (96, 128, 'sideways')])
    assert not out.any()  # nothing was decoded


@pytest.mark.parametrize('warped', [True, False])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_decode_images_into_writes_each_image_into_its_slot_of_a_padded_batch(warped, color_type):
    data = [_jpeg(48, 64, seed=21), _jpeg(40, 30, seed=22), _jpeg(37, 18, 1, seed=23)]
    decoded = [decode_image(d, color_type) for d in data]
    warps = [(50, 70, 'horizontal'), (33, 21, None), (61, 9, 'diagonal')] if warped else None
    expected = [warp_image(image, (h, w), 'bilinear', flip) for image, (h, w, flip)
                in zip(decoded, warps)] if warped else [d.permute(2, 0, 1) for d in decoded]
    channels = expected[0].shape[0]
    height = max(e.shape[1] for e in expected) + 2
    width = max(e.shape[2] for e in expected) + 1
    batch = torch.full((len(data), channels, height, width), 77, dtype=torch.uint8)
    decode_images_into(data, color_type, [1] * 3, batch.view(-1),
                       [i * batch[0].numel() for i in range(3)],
                       [(d.shape[2], *d.shape[:2]) for d in decoded], num_threads=2, warps=warps,
                       slot_hw=(height, width))
    untouched = torch.ones_like(batch, dtype=torch.bool)
    for slot, image, written in zip(batch, expected, untouched):
        h, w = image.shape[1:]
        assert torch.equal(slot[:, :h, :w], image)
        written[:, :h, :w] = False
    assert (batch[untouched] == 77).all()  # the padding is left as it was


def test_decode_images_into_checks_the_slots_before_writing():
    data = [_jpeg(48, 64, seed=24)] * 2
    shapes = [(3, 48, 64)] * 2
    out = torch.zeros(2 * 3 * 50 * 70, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r'image 1 is 51x70 \(h x w\), larger than its 50x70'):
        decode_images_into(data, 'color', [1, 1], out, [0, 10500], shapes,
                           warps=[(50, 70, None), (51, 70, None)], slot_hw=(50, 70))
    with pytest.raises(RuntimeError, match=r'image 0 is 48x64 \(h x w\), larger than its 48x63'):
        decode_images_into(data, 'color', [1, 1], out, [0, 9072], shapes, slot_hw=(48, 63))
    with pytest.raises(RuntimeError, match=r'image 1 \(10500 bytes at offset 10501\) does not'):
        decode_images_into(data, 'color', [1, 1], out, [0, 10501], shapes, slot_hw=(50, 70))
    with pytest.raises(RuntimeError, match=r'slot_hw must be \(height, width\), both > 0'):
        torch.ops.mmdet_ext.decode_images_into(data, 1, [1, 1], None, out, [0, 0],
                                               [3, 48, 64] * 2, 1, None, 1, [50])
    with pytest.raises(RuntimeError, match=r'slot_hw must be \(height, width\), both > 0'):
        decode_images_into(data, 'color', [1, 1], out, [0, 10500], shapes, slot_hw=(0, 70))
    assert not out.any()  # nothing was decoded


@requires_opcheck
def test_decode_images_into_opcheck():
    data = [_jpeg(48, 64, seed=7), _jpeg(20, 30, seed=8)]
    shapes = [(3, 48, 64), (3, 10, 15)]
    offsets, total = _layout(shapes)
    out = torch.zeros(total, dtype=torch.uint8)
    torch.library.opcheck(torch.ops.mmdet_ext.decode_images_into.default,
                          (data, 1, [1, 2], None, out, offsets, [3, 48, 64, 3, 10, 15], 2))


# ---------------------------------------------------------------------------------------------
# The dataset: batched == per-sample
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('pixels_on', PIXELS_ON)
@pytest.mark.parametrize('resize', RESIZES)
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
# 2 CPUs, 'device': decoded while planned
@pytest.mark.parametrize('usable_cpus', [1, 2], indirect=True)
def test_batch_equals_the_per_sample_path(toy_coco_root, resize, color_type, pixels_on,
                                          usable_cpus):
    pipeline = _pipeline(resize, color_type, pixels_on=pixels_on)
    batched = _dataset(toy_coco_root, pipeline)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    for seed in range(3):  # different flips each time
        samples = _batched(batched, INDICES, seed)
        _assert_same_samples(_per_sample(reference, INDICES, seed), samples)
        assert _one_storage(samples)
        # ... and the RNG stream goes on exactly as after the per-sample path
        assert np.random.randint(1 << 30) == (_per_sample(reference, INDICES, seed),
                                              np.random.randint(1 << 30))[1]


@pytest.mark.parametrize('loader', [dict(interpolation='bicubic'), dict(interpolation='area'),
                                    dict(to_float32=True), dict(reduced_decode=False)])
def test_worker_mode_options_are_batched_exactly(toy_coco_root, loader):
    resize = dict(scale=(150, 100), keep_ratio=True)  # reduced decode unless turned off
    pipeline = _pipeline(resize, pixels_on='worker', **loader)
    batched = _dataset(toy_coco_root, pipeline)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    samples = _batched(batched, INDICES)
    _assert_same_samples(_per_sample(reference, INDICES), samples)
    assert _one_storage(samples) != bool(loader.get('to_float32'))  # float32: PackDetInputs'


def test_seeded_batch_equals_seeded_samples(toy_coco_root):
    dataset = PerSampleSeedDataset(_dataset(toy_coco_root))
    reference = PerSampleSeedDataset(_dataset(toy_coco_root, batched_fetch=False))
    keys = [SeededKey(index, 1000 + 17 * slot) for slot, index in enumerate(INDICES)]
    samples = dataset.__getitems__(keys)
    _assert_same_samples([reference[key] for key in keys], samples)
    assert _one_storage(samples)
    flips = {s['data_samples'].flip_direction for s in samples}
    assert len(flips) > 1  # the seeds draw different flips: the test sees the seeding


def _rng_states():
    return random.getstate(), np.random.get_state()[1].tolist(), torch.get_rng_state()


def _assert_same_rng_states(got, want):
    assert got[0] == want[0] and got[1] == want[1] and torch.equal(got[2], want[2])


def test_a_seeded_batch_leaves_the_rngs_as_it_found_them(toy_coco_root, bad_root):
    """As per sample (seeded_rngs): with num_workers=0 they are the training process's own."""
    from mmdet_ext.datasets import BadSampleError
    keys = [SeededKey(index, 1000 + 17 * slot) for slot, index in enumerate(INDICES)]
    random.seed(5)
    np.random.seed(6)
    torch.manual_seed(7)
    before = _rng_states()
    PerSampleSeedDataset(_dataset(toy_coco_root)).__getitems__(keys)
    _assert_same_rng_states(_rng_states(), before)
    with pytest.raises(BadSampleError):  # a batch that raises puts them back too
        PerSampleSeedDataset(_dataset(bad_root, validate=False)).__getitems__(
            [SeededKey(0, 11), SeededKey(1, 12)])
    _assert_same_rng_states(_rng_states(), before)


def test_filter_annotations_after_the_loader_is_batched(toy_coco_root):
    after = [FilterAnnotations(min_gt_bbox_wh=(40, 40), keep_empty=True)]
    dataset = _dataset(toy_coco_root, _pipeline(after=after))
    reference = _dataset(toy_coco_root, _pipeline(after=after), batched_fetch=False)
    samples = _batched(dataset, INDICES)
    _assert_same_samples(_per_sample(reference, INDICES), samples)
    assert _one_storage(samples)


# What the in-flight record listed as decoding in the background (None: nothing) each time a
# transform after the loader ran: the tests below see whether the pixels could still be decoding.
_SEEN_DECODING = []


class OwnPack(PackDetInputs):
    """A PackDetInputs of the user's: it may read the pixels (mmdet's makes inputs from img)."""

    def transform(self, results: dict) -> dict:
        _SEEN_DECODING.append(self.inflight.background)
        return super().transform(results)


class OwnFilter(FilterAnnotations):
    """A FilterAnnotations of the user's: it may read the pixels."""

    def transform(self, results: dict) -> dict:
        _SEEN_DECODING.append(self.inflight.background)
        return super().transform(results)


@pytest.mark.parametrize('after,pack,reads_none', [
    ((), PackDetInputs(meta_keys=DEFERRED_META_KEYS), True),
    ((FilterAnnotations(min_gt_bbox_wh=(40, 40)), ), PackDetInputs(meta_keys=DEFERRED_META_KEYS),
     True),
    ((), FastPackDetInputs(meta_keys=DEFERRED_META_KEYS), True),
    ((), OwnPack(meta_keys=DEFERRED_META_KEYS), False),
    ((OwnFilter(min_gt_bbox_wh=(40, 40)), ), PackDetInputs(meta_keys=DEFERRED_META_KEYS), False),
    ((), PackDetInputs(meta_keys=DEFERRED_META_KEYS + ('img', )), False)])
@pytest.mark.parametrize('usable_cpus', [2], indirect=True)  # threads: 2
def test_samples_finished_while_decoding_only_where_nothing_reads_the_pixels(
        toy_coco_root, monkeypatch, after, pack, reads_none, usable_cpus):
    """Threads, 'device': the samples are packed while the last images decode only where the
    transforms after the loader are mmdet's own and leave the pixels unread; else after."""
    pipeline = [*_pipeline()[:-1], *after, pack]
    plan, why = batch_plan(pipeline)
    assert plan is not None, why
    assert reads_no_pixels(plan) == reads_none
    batched = _dataset(toy_coco_root, pipeline)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    if type(pack) in (PackDetInputs, FastPackDetInputs):  # seen through mmdet's transform
        packs = PackDetInputs.transform
        monkeypatch.setattr(PackDetInputs, 'transform', lambda self, results: (
            _SEEN_DECODING.append(self.inflight.background), packs(self, results))[1])
    for transform in (*after, pack):
        transform.inflight = batched.inflight
    for seed in range(2):
        want = _per_sample(reference, INDICES, seed)
        _SEEN_DECODING.clear()
        samples = _batched(batched, INDICES, seed)
        assert len(_SEEN_DECODING) == len(INDICES) * (1 + sum(isinstance(t, OwnFilter)
                                                           for t in after))
        # early: every pack ran while images were listed as decoding (those planned last at
        # least: the record is cleared only when the decodes are waited for)
        assert all(_SEEN_DECODING) if reads_none else not any(_SEEN_DECODING)
        _assert_same_samples(want, samples)


def test_fast_collate_takes_the_batch_buffer_as_it_is(toy_coco_root):
    dataset = _dataset(toy_coco_root)
    samples = _batched(dataset, INDICES)
    batch = fast_collate(samples)
    assert batch['inputs'].data_ptr() == samples[0]['inputs'].data_ptr()
    assert batch['inputs'].numel() == sum(s['inputs'].numel() for s in samples)
    reference = fast_collate(_per_sample(_dataset(toy_coco_root, batched_fetch=False), INDICES))
    assert torch.equal(batch['inputs'], reference['inputs'])
    for key in ('image_shapes', 'out_shapes', 'flips'):
        assert torch.equal(batch['pending_warp'][key], reference['pending_warp'][key])
    # Samples out of their buffer order are copied into a batch of their own.
    reordered = fast_collate(samples[::-1])
    assert reordered['inputs'].data_ptr() != samples[0]['inputs'].data_ptr()
    assert torch.equal(reordered['inputs'], torch.cat([s['inputs'].reshape(-1)
                                                       for s in samples[::-1]]))


@pytest.mark.parametrize('resize', RESIZES)
def test_a_worker_resized_batch_is_decoded_into_the_padded_batch_fast_collate_sends(
        toy_coco_root, resize):
    pipeline = _pipeline(resize, pixels_on='worker')
    samples = _batched(_dataset(toy_coco_root, pipeline), INDICES)
    expected = _per_sample(_dataset(toy_coco_root, pipeline, batched_fetch=False), INDICES)
    batch = fast_collate(samples)
    reference = fast_collate(expected)
    # Each sample's inputs are the top left of its slot of the batch: nothing was copied.
    assert batch['inputs'].data_ptr() == samples[0]['inputs'].data_ptr()
    assert [s['inputs'].data_ptr() for s in samples] == \
        [slot.data_ptr() for slot in batch['inputs']]
    assert torch.equal(batch['inputs'], reference['inputs'])  # padding included
    assert batch['input_shapes'] == reference['input_shapes']
    _assert_same_samples(expected, samples)  # the padding written left the pixels alone
    # Samples out of slot order: a batch of their own.
    other, others = fast_collate(samples[::-1]), fast_collate(expected[::-1])
    assert other['inputs'].data_ptr() != samples[0]['inputs'].data_ptr()
    assert torch.equal(other['inputs'], others['inputs'])


@pytest.mark.parametrize('resize', RESIZES)
def test_slots_padded_to_the_models_divisor_reach_the_model_without_a_copy(toy_coco_root,
                                                                          resize):
    """The dataset's pad_size_divisor (the model's, WorkerDefaultsHook hands it over): the slots
    are allocated padded to it, fast_collate sends them as they are, and the preprocessed batch
    is mmdet's."""
    pipeline = _pipeline(resize, pixels_on='worker')
    dataset = _dataset(toy_coco_root, pipeline)
    dataset.pad_size_divisor = 64
    samples = _batched(dataset, INDICES)
    expected = _per_sample(_dataset(toy_coco_root, pipeline, batched_fetch=False), INDICES)
    _assert_same_samples(expected, samples)
    batch = fast_collate(samples)
    assert batch['inputs'].data_ptr() == samples[0]['inputs'].data_ptr()
    assert [s['inputs'].data_ptr() for s in samples] == \
        [slot.data_ptr() for slot in batch['inputs']]
    assert all(size % 64 == 0 for size in batch['inputs'].shape[2:])
    reference = fast_collate(expected)  # the largest image's size: the slots' top left
    height, width = reference['inputs'].shape[2:]
    assert torch.equal(batch['inputs'][:, :, :height, :width], reference['inputs'])
    assert not batch['inputs'][:, :, height:].any() and not batch['inputs'][..., width:].any()
    args = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375], bgr_to_rgb=True,
                pad_size_divisor=64)
    ours = FastDetDataPreprocessor(**args)(fast_collate(samples), training=False)
    stock = DetDataPreprocessor(**args)(pseudo_collate(expected), training=False)
    assert torch.equal(ours['inputs'], stock['inputs'])
    assert [s.pad_shape for s in ours['data_samples']] == \
        [s.pad_shape for s in stock['data_samples']]


# ---------------------------------------------------------------------------------------------
# Real DataLoaders: workers and the threads option
# ---------------------------------------------------------------------------------------------

def _seeded_batches(indices, batch_size):
    return [[SeededKey(index, 7 * position + 3) for position, index in enumerate(chunk)]
            for chunk in (indices[i:i + batch_size] for i in range(0, len(indices), batch_size))]


def _loader(dataset, num_workers, **options):
    return DataLoader(PerSampleSeedDataset(dataset), batch_sampler=_seeded_batches(
        list(range(8))[::-1], 3), num_workers=num_workers, collate_fn=fast_collate, **options)


@pytest.mark.parametrize('pixels_on,num_workers,usable_cpus', [
    ('device', 2, None), ('device', 0, None), ('device', 0, 1), ('worker', 2, None),
    ('worker', 0, 1)], indirect=['usable_cpus'])
def test_dataloader_batches_equal_the_per_sample_ones(toy_coco_root, pixels_on, num_workers,
                                                      usable_cpus):
    pipeline = _pipeline(pixels_on=pixels_on)
    dataset = _dataset(toy_coco_root, pipeline)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    batches = list(_loader(dataset, num_workers))
    expected = list(_loader(reference, 0))
    assert len(batches) == len(expected) == 3
    for got, want in zip(batches, expected):
        assert torch.equal(got['inputs'], want['inputs'])
        assert got['input_shapes'] == want['input_shapes']
        if pixels_on == 'device':
            for key in ('image_shapes', 'out_shapes', 'flips'):
                assert torch.equal(got['pending_warp'][key], want['pending_warp'][key])
        else:  # resized in the worker: a padded batch, as fast_collate always made it
            assert got['inputs'].dim() == 4
        assert [s.img_id for s in got['data_samples']] == [s.img_id for s in want['data_samples']]
        for got_sample, want_sample in zip(got['data_samples'], want['data_samples']):
            assert got_sample.flip_direction == want_sample.flip_direction
            for field in ('gt_instances', 'ignored_instances'):
                got_data, want_data = got_sample.get(field), want_sample.get(field)
                for got_tensor, want_tensor in zip(_instance_tensors(got_data),
                                                   _instance_tensors(want_data)):
                    assert got_tensor.dtype == want_tensor.dtype
                    assert torch.equal(got_tensor, want_tensor)
        if num_workers:
            # in shared memory once, sent as it is: torch's, or a worker's reused segment
            assert got['inputs'].is_shared() or worker_buffers.is_received(got['inputs'])
            # ... and the boxes (labels) of every sample, gt and ignored, in one storage
            tensors = [t for s in got['data_samples'] for field in ('gt_instances',
                                                                   'ignored_instances')
                       for t in _instance_tensors(s.get(field))]
            assert len(tensors) == 4 * len(got['data_samples'])
            assert len({(t.dtype, t.untyped_storage().data_ptr()) for t in tensors}) == 2


def _collate_noting_a_copy(samples):
    """``fast_collate``, and whether it copied the samples' images (in the worker)."""
    batch = fast_collate(samples)
    batch['copied'] = batch['inputs'].data_ptr() != samples[0]['inputs'].data_ptr()
    return batch


@pytest.mark.parametrize('defer', ['resize', 'decode'])
def test_a_flat_batch_that_outgrows_its_first_buffer_in_a_worker_is_still_sent_as_it_is(
        toy_coco_root, defer):
    """A flat batch is queued image by image as planned, into a buffer sized at the first image:
    where the rest is larger it grows, in memory the worker sends as it is, and the batch is
    the per-sample one."""
    pipeline = _pipeline(reduced_decode=False, **(
        {'pixels_on': 'device'} if defer == 'resize' else
        {'pixels_on': 'device', 'decode_on': 'device'}))
    dataset = _dataset(toy_coco_root, pipeline)
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    sizes = [info['height'] * info['width'] * 3 if defer == 'resize' else
             os.path.getsize(info['img_path']) for info in infos]  # the bytes each takes
    by_size = sorted(range(len(dataset)), key=sizes.__getitem__)
    batch = [by_size[0], *by_size[-3:]]  # the smallest first: the buffer must grow
    assert 4 * sizes[batch[0]] < sum(sizes[i] for i in batch)
    loader = DataLoader(PerSampleSeedDataset(dataset), batch_sampler=_seeded_batches(batch, 4),
                        num_workers=1, collate_fn=_collate_noting_a_copy)
    got, = list(loader)
    assert got.pop('copied') is False  # fast_collate took the grown buffer as it is
    want, = list(DataLoader(PerSampleSeedDataset(_dataset(toy_coco_root, pipeline,
                                                           batched_fetch=False)),
                            batch_sampler=_seeded_batches(batch, 4), collate_fn=fast_collate))
    if defer == 'resize':  # pixels: a pooled segment (the files' bytes travel in the pickle)
        assert got['inputs'].numel() > worker_buffers.INLINE_MAX_BYTES
        assert worker_buffers.is_received(got['inputs'])
    assert torch.equal(got['inputs'], want['inputs'])
    assert [s.img_id for s in got['data_samples']] == [s.img_id for s in want['data_samples']]


def _instance_tensors(instances):
    return [instances.bboxes.tensor, instances.labels]


@pytest.mark.parametrize('batched_fetch', [True, False])
def test_a_pipeline_loaded_sample_by_sample_shares_its_instance_tensors_too(toy_coco_root,
                                                                           batched_fetch):
    """Sharing the instance tensors does not need the batched decode: a pipeline it does not
    recognise gets it as well, batched_fetch=False (the per-sample path as it was) does not."""
    pipeline = _pipeline(after=[CountInstances()], pixels_on='worker')
    dataset = _dataset(toy_coco_root, pipeline, batched_fetch=batched_fetch)
    reference = _dataset(toy_coco_root, pipeline, batched_fetch=False)
    for got, want in zip(_loader(dataset, 2), _loader(reference, 0)):
        assert torch.equal(got['inputs'], want['inputs'])
        tensors = [t for s in got['data_samples'] for field in ('gt_instances',
                                                               'ignored_instances')
                   for t in _instance_tensors(s.get(field))]
        expected = [t for s in want['data_samples'] for field in ('gt_instances',
                                                                 'ignored_instances')
                    for t in _instance_tensors(s.get(field))]
        assert all(torch.equal(g, w) and g.dtype == w.dtype for g, w in zip(tensors, expected))
        if batched_fetch:
            assert len({t.untyped_storage().data_ptr() for t in tensors}) == 2
        else:  # each its own (empty ones have no memory to tell apart)
            filled = [t for t in tensors if t.numel()]
            assert len({t.untyped_storage().data_ptr() for t in filled}) == len(filled) > 2


# ---------------------------------------------------------------------------------------------
# What the batch cannot do exactly goes through the per-sample path
# ---------------------------------------------------------------------------------------------

class CountInstances(BaseTransform):
    """A user's own transform after the loader: the batch cannot know what it does."""

    def transform(self, results: dict) -> dict:
        results['num_instances'] = len(results['gt_bboxes'])
        return results


def test_pipeline_it_does_not_recognise_falls_back_and_says_which_transform(toy_coco_root,
                                                                            log_file):
    own = CountInstances()
    dataset = _dataset(toy_coco_root, _pipeline(after=[own]))
    reference = _dataset(toy_coco_root, _pipeline(after=[own]), batched_fetch=False)
    _assert_same_samples(_per_sample(reference, INDICES), _batched(dataset, INDICES))
    _batched(dataset, INDICES)
    logged = log_file.read_text()
    assert logged.count('batched fetch off, samples load one by one: CountInstances comes '
                        'after NativeLoadResizeFlip') == 1
    assert batch_plan(Compose(_pipeline(after=[own])).transforms)[0] is None
    no_pack = [LoadLazyAnnotations(), NativeLoadResizeFlip(scale=(100, 100)), FilterAnnotations()]
    assert batch_plan(no_pack) == (None, 'the pipeline does not end with PackDetInputs')


def test_a_new_pipeline_gets_its_own_decision(toy_coco_root, log_file):
    dataset = _dataset(toy_coco_root)
    assert _one_storage(_batched(dataset, INDICES))
    dataset.pipeline = Compose(_pipeline(after=[CountInstances()]))  # PipelineSwitchHook
    assert not _one_storage(_batched(dataset, INDICES))
    logged = log_file.read_text()
    assert 'batched fetch on: each batch decoded natively as one' in logged
    assert 'batched fetch off' in logged


def _rotated_with_exif(path: Path) -> None:
    """Rewrite the JPEG as a phone does: pixels stored rotated, EXIF orientation 6 to undo it."""
    image = cv2.imread(str(path))
    exif = Image.Exif()
    exif[0x0112] = 6  # display = stored rotated 90 degrees clockwise
    stored = cv2.rotate(image, cv2.ROTATE_90_COUNTERCLOCKWISE)
    Image.fromarray(stored[:, :, ::-1]).save(str(path), 'JPEG', quality=95, exif=exif)


@pytest.mark.parametrize('pixels_on', PIXELS_ON)
def test_exif_rotated_photos_are_batched_exactly(toy_coco_root, tmp_path, log_file, pixels_on):
    root = tmp_path / 'rotated'
    shutil.copytree(toy_coco_root, root)
    upright = cv2.imread(str(root / 'train' / '000003.jpg')).shape  # 216x384: not square
    _rotated_with_exif(root / 'train' / '000003.jpg')
    assert cv2.imread(str(root / 'train' / '000003.jpg')).shape == upright
    for resize in RESIZES[:2]:  # full-size and reduced decode
        dataset = _dataset(root, _pipeline(resize, pixels_on=pixels_on))
        reference = _dataset(root, _pipeline(resize, pixels_on=pixels_on), batched_fetch=False)
        samples = _batched(dataset, INDICES)
        _assert_same_samples(_per_sample(reference, INDICES), samples)
        assert _one_storage(samples)
    assert 'instead of batched' not in log_file.read_text()


@pytest.mark.parametrize('pixels_on', PIXELS_ON)
def test_a_sample_fetched_alone_is_a_batch_of_one(toy_coco_root, log_file, pixels_on):
    """``dataset[i]`` goes through the batched fetch (the decision is logged the first time it
    is asked) and gives the per-sample path's samples, draws included."""
    dataset = _dataset(toy_coco_root, _pipeline(RESIZES[1], pixels_on=pixels_on))
    reference = _dataset(toy_coco_root, _pipeline(RESIZES[1], pixels_on=pixels_on),
                         batched_fetch=False)
    samples = _per_sample(dataset, INDICES)
    assert 'batched fetch on: each batch decoded natively as one' in log_file.read_text()
    _assert_same_samples(_per_sample(reference, INDICES), samples)


def test_a_sample_alone_the_batch_cannot_make_falls_back_to_the_per_sample_path(
        bad_root, tmp_path, log_file):
    """A corrupt image (a valid header) alone: the batch of one fails to decode it, the
    per-sample path loads it (no recursion back into the batch) and replaces it as mmdet does."""
    options = dict(validate=False, on_bad_sample='skip', max_bad_fraction=1.0)
    dataset = _dataset(bad_root, work_dir=str(tmp_path / 'alone'), **options)
    reference = _dataset(bad_root, work_dir=str(tmp_path / 'reference'), batched_fetch=False,
                         **options)
    _assert_same_samples(_per_sample(reference, [5]), _per_sample(dataset, [5]))
    assert _bad_records(tmp_path / 'alone') == _bad_records(tmp_path / 'reference') == [(5, 6)]
    assert 'a batch was loaded sample by sample instead of batched' in log_file.read_text()


@pytest.mark.parametrize('batched_fetch', [True, False])
def test_the_datasets_max_pixels_is_its_loaders(toy_coco_root, batched_fetch):
    """One value: a dataset's max_pixels below the toy images' 320x240 refuses them when they
    are decoded (validation off), on either path; a loader given another value is refused."""
    from mmdet_ext.datasets import BadSampleError
    dataset = _dataset(toy_coco_root, validate=False, max_pixels=70000,
                       batched_fetch=batched_fetch)
    with pytest.raises(BadSampleError, match=r'sample 0 .*more than max_pixels=70000'):
        dataset[0]
    with pytest.raises(ValueError, match=r'^LazyCocoDataset: max_pixels=70000 but its '
                                         r'NativeLoadResizeFlip has max_pixels=90000; set it '
                                         r'once, on the dataset \(its loaders take it\)$'):
        _dataset(toy_coco_root, _pipeline(max_pixels=90000), validate=False, max_pixels=70000)


def test_decode_threads_is_ignored_with_a_warning_once(toy_coco_root, monkeypatch):
    """The thread count follows the process's CPUs; a config's decode_threads still loads."""
    from mmdet_ext import moved_settings
    monkeypatch.setattr(moved_settings, '_warned', set())
    with record_mmengine_log() as records:
        old = _dataset(toy_coco_root, decode_threads=3)
        _dataset(toy_coco_root, decode_threads=1)
    warnings = [r.getMessage() for r in records if 'decode_threads' in r.getMessage()]
    assert warnings == ['LazyCocoDataset: decode_threads is ignored: a batch decodes on 1 thread '
                        'in a DataLoader worker, on every CPU the process may run on with '
                        'num_workers=0 (taskset narrows it); logged once']
    _assert_same_samples(_per_sample(_dataset(toy_coco_root, batched_fetch=False), INDICES),
                         _batched(old, INDICES))


@pytest.fixture
def bad_root(toy_coco_root, tmp_path):
    """Image 2 truncated (refused when read), image 6 with corrupt entropy-coded data (refused
    when decoded, with a valid header); validation off to reach the pipeline."""
    root = tmp_path / 'bad'
    shutil.copytree(toy_coco_root, root)
    data = (root / 'train' / '000001.jpg').read_bytes()
    (root / 'train' / '000001.jpg').write_bytes(data[:len(data) // 3])
    data = bytearray((root / 'train' / '000005.jpg').read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(range(7, 71))  # garbage inside the scan, the end intact
    (root / 'train' / '000005.jpg').write_bytes(bytes(data))
    return root


def _bad_records(work_dir):
    lines = (work_dir / 'bad_samples.jsonl').read_text().splitlines()
    return sorted((r['sample_idx'], r['img_id']) for r in map(json.loads, lines))


@pytest.mark.parametrize('pixels_on', PIXELS_ON)
# 2 CPUs, 'device': decoded while planned
@pytest.mark.parametrize('usable_cpus', [1, 2], indirect=True)
def test_bad_samples_are_skipped_and_replaced_as_in_the_per_sample_path(bad_root, tmp_path,
                                                                        log_file, pixels_on,
                                                                        usable_cpus):
    assert_bad_samples_skipped_as_per_sample(bad_root, tmp_path, log_file,
                                             _pipeline(pixels_on=pixels_on))


def assert_bad_samples_skipped_as_per_sample(bad_root, tmp_path, log_file, pipeline):
    """Under 'skip', a batch with a truncated image (refused when read) and a corrupt one
    (refused when decoded) is the per-sample path's: same replacements, records and counts."""
    options = dict(validate=False, on_bad_sample='skip', max_bad_fraction=1.0, pipeline=pipeline)
    dataset = _dataset(bad_root, work_dir=str(tmp_path / 'batched'), **options)
    reference = _dataset(bad_root, work_dir=str(tmp_path / 'reference'), batched_fetch=False,
                         **options)
    indices = [0, 1, 2, 5, 6]
    for seed in range(3):
        samples = _batched(dataset, indices, seed)
        _assert_same_samples(_per_sample(reference, indices, seed), samples)
        assert not {s['data_samples'].img_id for s in samples} & {2, 6}
    assert _bad_records(tmp_path / 'batched') == _bad_records(tmp_path / 'reference') \
        == [(1, 2), (5, 6)]  # each logged once, by either path
    assert dataset.bad_samples.tried == reference.bad_samples.tried
    assert dataset.bad_samples.bad_count == reference.bad_samples.bad_count
    logged = log_file.read_text()
    assert logged.count('instead of batched (logged once per process)') == 1
    assert '000005.jpg' in logged and 'corrupt' in logged


def test_bad_sample_under_raise_names_it_in_batch_mode_too(bad_root):
    from mmdet_ext.datasets import BadSampleError
    dataset = _dataset(bad_root, validate=False)
    with pytest.raises(BadSampleError, match=r'sample 1 \(img_id=2.*truncated JPEG'):
        dataset.__getitems__([0, 1])
    with pytest.raises(BadSampleError, match=r'sample 5 \(img_id=6.*000005.jpg.*corrupt'):
        dataset.__getitems__([0, 5])


# ---------------------------------------------------------------------------------------------
# mmengine's wrappers forward the batched fetch (PerSampleSeedDataset: ExactResumeHook's path)
# ---------------------------------------------------------------------------------------------

def _wrapped(kind, root, **kwargs):
    from mmengine.dataset import ClassBalancedDataset, ConcatDataset, RepeatDataset
    if kind == 'repeat':
        return RepeatDataset(_dataset(root, **kwargs), times=3)
    if kind == 'class_balanced':
        return ClassBalancedDataset(_dataset(root, **kwargs), oversample_thr=1.0)
    return ConcatDataset([_dataset(root, **kwargs), _dataset(root, _pipeline(RESIZES[1]),
                                                             **kwargs)])


@pytest.mark.parametrize('kind', ['repeat', 'class_balanced', 'concat'])
def test_wrappers_forward_the_batched_fetch(toy_coco_root, kind):
    dataset = PerSampleSeedDataset(_wrapped(kind, toy_coco_root))
    reference = PerSampleSeedDataset(_wrapped(kind, toy_coco_root, batched_fetch=False))
    assert len(dataset) > 8
    indices = [len(dataset) - 1, 0, 9, 3, 8, 1]  # both halves of the ConcatDataset, mixed
    keys = [SeededKey(index, 99 + slot) for slot, index in enumerate(indices)]
    samples = dataset.__getitems__(keys)
    _assert_same_samples([reference[key] for key in keys], samples)
    if kind != 'concat':
        assert _one_storage(samples)
    else:  # one batch call per wrapped dataset: two buffers
        assert len({s['inputs'].untyped_storage().data_ptr() for s in samples}) == 2


def test_a_concatenated_batch_without_seeds_is_fetched_in_runs_in_order(toy_coco_root):
    """Without seeds the samples draw from the global random state in batch order: each run of
    consecutive samples of one dataset is one batched fetch, the runs in order."""
    from mmdet_ext.datasets import wrapper_fetch
    concat = _wrapped('concat', toy_coco_root)
    reference = _wrapped('concat', toy_coco_root, batched_fetch=False)
    first = len(concat.datasets[0])
    indices = [0, 1, first, first + 1, 2]  # runs: [0, 1], [first, first + 1], [2]
    for seed in range(2):
        samples = (np.random.seed(seed), wrapper_fetch.fetch_batch(concat, indices))[1]
        _assert_same_samples(_per_sample(reference, indices, seed), samples)
        storages = [s['inputs'].untyped_storage().data_ptr() for s in samples]
        assert storages[0] == storages[1] and storages[2] == storages[3]
        assert len(set(storages)) == 3  # one buffer per run: each run was one batched fetch


def test_a_dataset_without_batched_fetch_is_logged_once(toy_coco_root, log_file):
    from torch.utils.data import Subset

    from mmdet_ext.datasets import wrapper_fetch
    wrapper_fetch._logged.discard('Subset')
    subset = Subset(_dataset(toy_coco_root), [3, 0, 5])
    reference = _dataset(toy_coco_root, batched_fetch=False)
    for _ in range(2):  # sample by sample, in order
        _assert_same_samples(_per_sample(reference, [5, 3]),
                             (np.random.seed(0), wrapper_fetch.fetch_batch(subset, [2, 0]))[1])
    assert log_file.read_text().count('Subset loads its batches sample by sample '
                                      '(it has no batch engine)') == 1


def test_the_runners_num_batch_per_epoch_slice_keeps_the_batched_fetch(toy_coco_root):
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner
    init_default_scope('mmdet')
    pipeline = [dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                dict(type='NativeLoadResizeFlip', scale=(1333, 800), keep_ratio=True, prob=0.5,
                     pixels_on='device'),
                dict(type='PackDetInputs', meta_keys=DEFERRED_META_KEYS)]
    loader = Runner.build_dataloader(dict(
        batch_size=3, num_workers=0, num_batch_per_epoch=2,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='pseudo_collate'),
        dataset=dict(type='LazyCocoDataset', data_root=str(toy_coco_root),
                     ann_file='annotations/instances_train.json',
                     data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                     pipeline=pipeline)), seed=0)
    assert type(loader.dataset).__name__ == '_SlicedDataset'
    batches = list(loader)
    assert len(batches) == 2
    for batch in batches:  # each batch decoded into one buffer: the batched fetch ran
        assert len({image.untyped_storage().data_ptr() for image in batch['inputs']}) == 1


@pytest.mark.parametrize('usable_cpus', [1, 2], indirect=True)
def test_the_inflight_record_names_every_file_of_a_batch_decode(toy_coco_root, tmp_path,
                                                                 usable_cpus):
    """Every record written while images are queued or decoding names them before what the
    planning writes: a flat batch's images are queued as they are planned, on 1 thread (decoded
    on the caller's when the batch is waited for) as on 2 (batch_decoder.py)."""
    from mmdet_ext.datasets.inflight import RECORD_BYTES, InflightRecord, inflight_path

    class RecordingInflight(InflightRecord):
        """The real record (a file in tmp_path), plus every text it held, read back."""

        def __init__(self, directory):
            super().__init__(directory)
            self.held = []

        def _write(self, text):
            super()._write(text)
            record = Path(inflight_path(str(tmp_path), os.getpid())).read_text()
            self.held.append(record.strip())

    dataset = _dataset(toy_coco_root)
    dataset.inflight = RecordingInflight(str(tmp_path))
    dataset.__getitems__([0, 5])
    paths = [str(toy_coco_root / 'train' / f'{i:06d}.jpg') for i in (0, 5)]
    samples = [f'sample 0 (img_id=1, img_path={paths[0]})',
               f'sample 5 (img_id=6, img_path={paths[1]})']
    both = f'batch decode of 2 images: sample 0 ({paths[0]}), sample 5 ({paths[1]})'
    first = f'batch decode of 1 images: sample 0 ({paths[0]})'
    assert dataset.inflight.held == [
        f'loading {samples[0]}', 'idle', f'{first}; idle', f'{first}; loading {samples[1]}',
        f'{first}; idle', f'{both}; idle', 'idle']
    # A batch of 16 (the toy set twice over) is named whole within the record's RECORD_BYTES.
    dataset.inflight.held.clear()
    dataset.__getitems__([index % len(dataset) for index in range(16)])
    decodes = [text for text in dataset.inflight.held
               if text.startswith('batch decode of 16 images: ')]
    decode = decodes[-1]  # the decode of the 16, the plan done
    assert decode.endswith('; idle')
    for index in range(len(dataset)):
        file = toy_coco_root / 'train' / f'{index:06d}.jpg'
        assert decode.count(f'sample {index} ({file})') == 2
    assert len(decode) < RECORD_BYTES


class BlockOnImage(BaseTransform):
    """A user's transform before the loader that hangs on one image until released (a stuck
    network read, say): the batched fetch runs it inside its plan pass."""

    def __init__(self, img_id, release_file):
        self.img_id, self.release_file = img_id, release_file

    def transform(self, results: dict) -> dict:
        while results['img_id'] == self.img_id and not os.path.exists(self.release_file):
            time.sleep(0.02)
        return results


def _wait_for(condition, what, deadline_s=120):
    """Poll until ``condition()``; a generous deadline turns a never into a failure, not a
    hang (nothing here measures time)."""
    deadline = time.monotonic() + deadline_s
    while not condition():
        assert time.monotonic() < deadline, f'never happened: {what}'
        time.sleep(0.05)


def test_a_worker_stuck_in_a_batch_is_named_by_its_inflight_record(toy_coco_root, tmp_path,
                                                                  log_file):
    """What HangWatchdogHook reports for a stuck DataLoader worker is its in-flight record: in
    batch mode it names the sample the worker is stuck on, and the batch, once released, is
    the per-sample path's."""
    work_dir, release = tmp_path / 'work', tmp_path / 'release'
    work_dir.mkdir()
    block = BlockOnImage(img_id=5, release_file=str(release))
    pipeline = _pipeline(pixels_on='worker')
    pipeline.insert(1, block)
    dataset = _dataset(toy_coco_root, pipeline, work_dir=str(work_dir))
    reference = _dataset(toy_coco_root, [t for t in pipeline if t is not block],
                         batched_fetch=False)
    batches = []
    loading = threading.Thread(target=lambda: batches.extend(_loader(dataset, 1, timeout=300)))
    loading.start()
    try:
        def stuck_record():
            for path in work_dir.glob('inflight_*.txt'):
                text = path.read_text()
                if 'sample 4 ' in text:
                    return path, text.strip()
            return None
        _wait_for(stuck_record, 'a worker recording sample 4')
        path, record = stuck_record()
        image = toy_coco_root / 'train' / '000004.jpg'
        assert record == f'loading sample 4 (img_id=5, img_path={image})'
        assert path.name != f'inflight_{os.getpid()}.txt'  # the worker's record, not ours
        assert 'batched fetch on: each batch decoded natively as one' in log_file.read_text()
    finally:
        release.touch()
        loading.join(timeout=300)
    assert not loading.is_alive() and len(batches) == 3
    for got, want in zip(batches, _loader(reference, 0)):
        assert torch.equal(got['inputs'], want['inputs'])
        assert [s.img_id for s in got['data_samples']] == [s.img_id for s in want['data_samples']]


class FailOnImage(BaseTransform):
    """A transform after the loader that fails on one image, as a user's check would."""

    def __init__(self, img_id):
        self.img_id = img_id

    def transform(self, results: dict) -> dict:
        if results['img_id'] == self.img_id:
            raise ValueError(f'no instances wanted in image {self.img_id}')
        return results


def test_a_transform_after_the_loader_that_raises_is_a_bad_sample_as_before(toy_coco_root,
                                                                           tmp_path, monkeypatch):
    # FailOnImage is not in AFTER_LOADER, so batch_plan refuses it; allow it here to reach the
    # fall back that an allowed transform raising (FilterAnnotations on odd data) takes.
    from mmdet_ext.datasets import batched_fetch
    monkeypatch.setattr(batched_fetch, 'AFTER_LOADER',
                        batched_fetch.AFTER_LOADER + (FailOnImage, ))
    options = dict(on_bad_sample='skip', max_bad_fraction=1.0)
    after = [FailOnImage(img_id=3)]
    batched = _dataset(toy_coco_root, _pipeline(after=after), work_dir=str(tmp_path / 'b'),
                       **options)
    reference = _dataset(toy_coco_root, _pipeline(after=after), batched_fetch=False,
                         work_dir=str(tmp_path / 'r'), **options)
    samples = _batched(batched, INDICES)
    assert batched._fetcher is not None  # the batched path ran, then fell back
    _assert_same_samples(_per_sample(reference, INDICES), samples)
    assert 3 not in {s['data_samples'].img_id for s in samples}
    assert _bad_records(tmp_path / 'b') == _bad_records(tmp_path / 'r') == [(2, 3)]


def _losses(work_dir: Path) -> list[float]:
    """The logged losses of the run's last launch (a resumed run has one folder per launch)."""
    scalars = sorted(work_dir.glob('*/vis_data/scalars.json'))[-1]
    return [row['loss'] for row in map(json.loads, scalars.read_text().splitlines())
            if 'loss' in row]


# The main job's pipeline resizes in the worker; the deferred one on the model's device.
DEFERRED_OPTIONS = ('train_dataloader.dataset.pipeline.1.pixels_on=device',
                    'train_dataloader.dataset.pipeline.2.meta_keys=(img_id,img_path,ori_shape,'
                    'img_shape,scale_factor,flip,flip_direction,pending_warp)')


@pytest.mark.parametrize('pixels_on', PIXELS_ON)
def test_training_on_the_batched_fetch_gives_the_per_sample_losses(toy_coco_root, tmp_path,
                                                                   train_toy, pixels_on):
    """tools/train.py, the toy Mask R-CNN, 2 workers: the batched fetch feeds the model exactly
    what the per-sample path feeds it (ExactResumeHook's seeds)."""
    options = ('randomness.seed=0', ) + (DEFERRED_OPTIONS if pixels_on == 'device' else ())
    log = train_toy(toy_coco_root, tmp_path / 'batched', 1, options=options)
    assert 'batched fetch on: each batch decoded natively as one' in log
    log = train_toy(toy_coco_root, tmp_path / 'per_sample', 1,
                    options=options + ('train_dataloader.dataset.batched_fetch=False', ))
    assert 'batched fetch off, samples load one by one: batched_fetch=False' in log
    losses = _losses(tmp_path / 'batched')
    assert len(losses) == 4 and losses == _losses(tmp_path / 'per_sample')


def test_resuming_on_the_batched_fetch_repeats_the_run(toy_coco_root, tmp_path, train_toy):
    """The main job's config (batched, resized in the workers): 2 epochs in one go, and 1 epoch
    then --resume to 2, log the same second-epoch losses (ExactResumeHook's seeds)."""
    options = ('randomness.seed=0', )
    log = train_toy(toy_coco_root, tmp_path / 'whole', 2, options=options)
    assert 'batched fetch on: each batch decoded natively as one' in log
    train_toy(toy_coco_root, tmp_path / 'split', 1, options=options)
    log = train_toy(toy_coco_root, tmp_path / 'split', 2, '--resume', options=options)
    assert 'resumed epoch: 1' in log
    whole, resumed = _losses(tmp_path / 'whole'), _losses(tmp_path / 'split')
    assert len(whole) == 8 and len(resumed) == 4
    assert resumed == whole[4:]
