"""``NativeLoadResizeFlip(pixels_on='device')`` + ``fast_collate`` + ``FastDetDataPreprocessor``:
the same result keys as the worker path, the same model inputs, metainfo and padded masks as
today's path and as mmdet's ``DetDataPreprocessor`` on the eagerly resized images (CPU; the
CUDA kernel is compared with the CPU one in test_cuda_kernels.py)."""
import copy

import cv2

import numpy as np
import pytest
import torch
from mmdet.datasets import CocoDataset
from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmengine.dataset import pseudo_collate
from torch.utils.data import DataLoader

from mmdet_ext import (FastDetDataPreprocessor, LazyCocoDataset, LoadLazyAnnotations,
                       NativeLoadResizeFlip, fast_collate)
from mmdet_ext import worker_buffers
from mmdet_ext.toy_data import make_toy_coco
from mmdet_ext.engine import DevicePrefetcher, RecordingStreams
from mmdet_ext.transforms import DEFERRED_META_KEYS
from helpers.build import needs_native_decoding
from helpers.deferred_batches import CLASSES, FLIP, PREPROCESSOR, RESIZES
from helpers.tiny_runner import record_mmengine_log

# Every test here decodes images: a build without OpenCV (docs/build.md) skips them.
pytestmark = needs_native_decoding


def _dataset(root, pixels_on, resize, split='train'):
    meta_keys = DEFERRED_META_KEYS if pixels_on == 'device' else DEFERRED_META_KEYS[:-1]
    pipeline = [LoadLazyAnnotations(with_bbox=True, with_mask=True),
                NativeLoadResizeFlip(**resize, **FLIP, pixels_on=pixels_on),
                PackDetInputs(meta_keys=meta_keys)]
    return LazyCocoDataset(data_root=str(root), ann_file=f'annotations/instances_{split}.json',
                           data_prefix=dict(img=f'{split}/'), metainfo=dict(classes=CLASSES),
                           pipeline=pipeline)


def _samples(dataset, count=4, seed=0):
    np.random.seed(seed)  # RandomFlip draws from numpy's global RNG
    return [dataset[i] for i in range(count)]


def test_transform_writes_the_worker_results_but_keeps_the_decoded_image(toy_coco_root):
    annotate = LazyCocoDataset(data_root=str(toy_coco_root),
                               ann_file='annotations/instances_train.json',
                               data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                               pipeline=[LoadLazyAnnotations(with_bbox=True, with_mask=True)])
    for resize in RESIZES:
        for i in range(4):
            sample = annotate[i]
            np.random.seed(i)
            eager = NativeLoadResizeFlip(**resize, **FLIP)(copy.deepcopy(sample))
            np.random.seed(i)
            deferred = NativeLoadResizeFlip(**resize, **FLIP, pixels_on='device')(
                copy.deepcopy(sample))
            assert set(deferred) == set(eager) | {'pending_warp'}
            for key in eager:
                if key in ('img', 'gt_masks', 'gt_bboxes', 'homography_matrix'):
                    continue
                if isinstance(eager[key], np.ndarray):
                    np.testing.assert_array_equal(deferred[key], eager[key], err_msg=key)
                else:
                    assert deferred[key] == eager[key], key
            np.testing.assert_array_equal(deferred['homography_matrix'],
                                          eager['homography_matrix'])
            assert deferred['gt_bboxes'].tensor.equal(eager['gt_bboxes'].tensor)
            np.testing.assert_array_equal(deferred['gt_masks'].to_ndarray(),
                                          eager['gt_masks'].to_ndarray())
            full = cv2.imread(sample['img_path'])
            denom = -(-full.shape[1] // deferred['img'].shape[1])  # 1, 2, 4 or 8: reduced decode
            assert denom in (1, 2, 4, 8) and deferred['img'].dtype == np.uint8
            assert deferred['img'].shape == (-(-full.shape[0] // denom),
                                             -(-full.shape[1] // denom), 3)
            if denom == 1:
                np.testing.assert_array_equal(deferred['img'], full)
            assert deferred['pending_warp'] == {'out_shape': eager['img_shape'],
                                                'flip_direction': eager['flip_direction'],
                                                'interpolation': resize.get('interpolation',
                                                                            'bilinear')}
            # Decoded channel-planar: PackDetInputs' CHW tensor is the decoded pixels, uncopied.
            packed = PackDetInputs(meta_keys=DEFERRED_META_KEYS)(deferred)
            assert packed['inputs'].is_contiguous()
            assert np.shares_memory(packed['inputs'].numpy(), deferred['img'])
            assert torch.equal(packed['inputs'], torch.from_numpy(
                np.ascontiguousarray(deferred['img'].transpose(2, 0, 1))))


def _assert_same_batches(ours, reference):
    assert ours['inputs'].dtype == reference['inputs'].dtype
    assert torch.equal(ours['inputs'], reference['inputs'])
    for mine, theirs in zip(ours['data_samples'], reference['data_samples']):
        assert mine.batch_input_shape == theirs.batch_input_shape
        assert mine.pad_shape == theirs.pad_shape
        assert mine.img_shape == theirs.img_shape
        np.testing.assert_array_equal(mine.gt_instances.masks.to_ndarray(),
                                      theirs.gt_instances.masks.to_ndarray())
        assert torch.equal(mine.gt_instances.bboxes, theirs.gt_instances.bboxes)


@pytest.mark.parametrize('resize', RESIZES)
def test_model_inputs_equal_todays_path_and_mmdet(toy_coco_root, resize):
    deferred = _samples(_dataset(toy_coco_root, 'device', resize))
    eager = _samples(_dataset(toy_coco_root, 'worker', resize))
    ours = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(deferred), training=True)
    today = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(eager), training=True)
    mmdet = DetDataPreprocessor(**PREPROCESSOR)(pseudo_collate(eager), training=True)
    _assert_same_batches(ours, today)
    _assert_same_batches(ours, mmdet)


def test_collate_packs_without_touching_the_samples(toy_coco_root):
    samples = _samples(_dataset(toy_coco_root, 'device', RESIZES[0]))
    before = copy.deepcopy(samples)
    batch = fast_collate(samples)
    for sample, original in zip(samples, before):
        assert torch.equal(sample['inputs'], original['inputs'])
        assert sample['data_samples'].metainfo == original['data_samples'].metainfo
    assert batch['inputs'].dtype == torch.uint8 and batch['inputs'].dim() == 1
    assert torch.equal(batch['inputs'], torch.cat([s['inputs'].reshape(-1) for s in samples]))
    warp = batch['pending_warp']
    assert warp['image_shapes'].tolist() == [[*s['inputs'].shape[1:], 3] for s in samples]
    assert batch['input_shapes'] == [s['data_samples'].img_shape for s in samples]


def test_dataloader_workers_give_the_in_process_batch(toy_coco_root):
    dataset = _dataset(toy_coco_root, 'device', RESIZES[0])
    loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=fast_collate,
                        worker_init_fn=lambda worker: np.random.seed(1))
    batch = next(iter(loader))  # worker 0's, seeded as the main process is below
    np.random.seed(1)  # seed 1: four different draws (seed 0 flips all four diagonally)
    in_process = fast_collate([dataset[i] for i in range(4)])
    assert len(set(in_process['pending_warp']['flips'].tolist())) > 1
    assert [s.img_id for s in batch['data_samples']] == \
        [s.img_id for s in in_process['data_samples']] == [1, 2, 3, 4]
    for key in ('image_shapes', 'out_shapes', 'flips'):
        assert torch.equal(batch['pending_warp'][key], in_process['pending_warp'][key]), key
    assert torch.equal(batch['inputs'], in_process['inputs'])  # every decoded pixel
    # sent as it is: in torch's shared memory, or in a worker's reused segment
    assert batch['inputs'].is_shared() or worker_buffers.is_received(batch['inputs'])
    preprocessor = FastDetDataPreprocessor(**PREPROCESSOR)
    _assert_same_batches(preprocessor(batch), preprocessor(in_process))


def test_out_dtype_is_ignored_with_a_warning_once(toy_coco_root, monkeypatch):
    """The inputs are float32 whatever out_dtype an old config sets; it says so once."""
    from mmdet_ext import moved_settings
    monkeypatch.setattr(moved_settings, '_warned', set())
    samples = _samples(_dataset(toy_coco_root, 'device', RESIZES[0]))
    full = FastDetDataPreprocessor(**PREPROCESSOR)(fast_collate(samples))['inputs']
    with record_mmengine_log() as records:
        old = [FastDetDataPreprocessor(**PREPROCESSOR, out_dtype=dtype)
               for dtype in ('float16', 'bfloat16')]
    assert [r.getMessage() for r in records if 'out_dtype' in r.getMessage()] == [
        'FastDetDataPreprocessor: out_dtype is ignored: its inputs are float32, as '
        "DetDataPreprocessor's (autocast casts them where a model runs in lower precision); "
        'logged once']
    for preprocessor in old:
        inputs = preprocessor(fast_collate(samples))['inputs']
        assert inputs.dtype == torch.float32 and torch.equal(inputs, full)


def test_bad_configurations_raise(toy_coco_root):
    with pytest.raises(ValueError, match="defer must be one of"):
        NativeLoadResizeFlip(scale=(10, 10), defer='gpu')
    with pytest.raises(ValueError, match="pixels_on='gpu', decode_on=None is not a setting"):
        NativeLoadResizeFlip(scale=(10, 10), pixels_on='gpu')
    with pytest.raises(ValueError, match="defer='decode' contradicts pixels_on='device'"):
        NativeLoadResizeFlip(scale=(10, 10), defer='decode', pixels_on='device')
    with pytest.raises(ValueError, match="interpolation in .*'bicubic'"):
        NativeLoadResizeFlip(scale=(10, 10), interpolation='bicubic', defer='resize')
    with pytest.raises(ValueError, match='to_float32=True'):
        NativeLoadResizeFlip(scale=(10, 10), to_float32=True, defer='resize')
    mixed = _samples(_dataset(toy_coco_root, 'device', RESIZES[0]), 2) + \
        _samples(_dataset(toy_coco_root, 'worker', RESIZES[0]), 2)
    with pytest.raises(ValueError, match='some samples of this batch were resized in the worker'):
        fast_collate(mixed)


def test_prefetcher_hands_out_every_batch_in_order(toy_coco_root):
    """The look-ahead and the copies, on the CPU with the streams recorded (the ordering is
    checked in test_device_prefetch.py); the copy on a side stream runs only with CUDA
    (test_cuda_kernels.py)."""
    dataset = _dataset(toy_coco_root, 'device', RESIZES[0])
    loader = DataLoader(dataset, batch_size=3, collate_fn=fast_collate)  # 8 samples: 3 + 3 + 2
    np.random.seed(0)
    expected = list(loader)
    np.random.seed(0)
    streams = RecordingStreams()
    got = list(DevicePrefetcher(iter(loader), streams))
    assert len(got) == len(expected) == 3
    for k, (mine, theirs) in enumerate(zip(got, expected)):
        assert streams.name_of(mine['inputs']) == f'copy {k}'
        assert torch.equal(mine['inputs'], theirs['inputs'])
    assert list(DevicePrefetcher(iter([]), streams)) == []


@pytest.mark.parametrize('size, scale', [(None, (1333, 800)), ((333, 250), (80, 60))],
                         ids=['full-size-decode', 'reduced-decode-of-an-odd-width'])
def test_deferred_samples_without_their_record_are_refused(toy_coco_root, tmp_path, size, scale):
    # Outside a LazyCocoDataset (which adds it, below), the default meta_keys drop
    # 'pending_warp': the images arrive unresized, and batching them as they are would train on
    # the wrong pixels. At (80, 60) a 333x250 JPEG is decoded at 1/4: 84x63, its width rounded up.
    root = toy_coco_root
    if size is not None:
        root = tmp_path / 'odd'
        make_toy_coco(root, num_train=2, num_val=1, width=size[0], height=size[1])
    pipeline = [LoadAnnotations(with_bbox=True),  # its masks need an image loader first
                NativeLoadResizeFlip(scale=scale, keep_ratio=True, pixels_on='device'),
                PackDetInputs()]
    dataset = CocoDataset(data_root=str(root),
                              ann_file='annotations/instances_train.json',
                              data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                              pipeline=pipeline)
    samples = _samples(dataset, count=2)
    with pytest.raises(ValueError) as info:
        fast_collate(samples)
    metainfo = samples[0]['data_samples'].metainfo
    assert str(info.value) == (
        f"fast_collate: sample 0 ({metainfo['img_path']}) has an image of its decoded size "
        f"{tuple(samples[0]['inputs'].shape[1:])} but the metainfo of a "
        f"{tuple(metainfo['img_shape'][:2])} image. With NativeLoadResizeFlip("
        "pixels_on='device'), PackDetInputs must carry 'pending_warp' in its meta_keys "
        '(mmdet_ext.transforms.DEFERRED_META_KEYS).')
    if size is not None:
        assert samples[0]['inputs'].shape[1:] == (63, 84)


@pytest.mark.parametrize('defer', ['resize', 'decode'])
def test_a_lazy_coco_dataset_gives_pack_det_inputs_the_record(toy_coco_root, defer):
    """PackDetInputs() after a deferring loader: LazyCocoDataset adds 'pending_warp' to its
    meta_keys, so the batch is the one the explicit DEFERRED_META_KEYS give."""
    pack = PackDetInputs()
    dataset = LazyCocoDataset(
        data_root=str(toy_coco_root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
        pipeline=[LoadLazyAnnotations(with_bbox=True, with_mask=True),
                  NativeLoadResizeFlip(**RESIZES[0], **FLIP, defer=defer), pack])
    assert pack.meta_keys == DEFERRED_META_KEYS
    explicit = _dataset(toy_coco_root, 'device', RESIZES[0])
    if defer == 'decode':
        explicit.pipeline.transforms[1].defer = 'decode'
    preprocess = FastDetDataPreprocessor(**PREPROCESSOR)
    _assert_same_batches(preprocess(fast_collate(_samples(dataset)), training=True),
                         preprocess(fast_collate(_samples(explicit)), training=True))


def test_the_old_spellings_are_defer_with_one_warning(monkeypatch):
    """pixels_on / decode_on (before `defer`) give the same transform, and say so once."""
    from mmdet_ext import moved_settings
    monkeypatch.setattr(moved_settings, '_warned', set())
    with record_mmengine_log() as records:
        for old, defer in ((dict(pixels_on='worker'), None), (dict(pixels_on='device'), 'resize'),
                           (dict(pixels_on='device', decode_on='device'), 'decode')):
            transform = NativeLoadResizeFlip(scale=(10, 10), **old)
            assert transform.defer == defer
            # ... and reads back as it was spelled
            assert (transform.pixels_on, transform.decode_on) == \
                (old['pixels_on'], old.get('decode_on', 'worker'))
            assert repr(transform) == repr(NativeLoadResizeFlip(scale=(10, 10), defer=defer))
    warnings = [r.getMessage() for r in records if 'spelled defer' in r.getMessage()]
    assert warnings == ["NativeLoadResizeFlip: pixels_on='worker', decode_on=None is spelled "
                        'defer=None now (the old spelling keeps working); logged once']
