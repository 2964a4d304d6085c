"""The adopted mosaic, mix-up and colour jitter give mmdet's results (transforms/mix_augment.py).

Each pair runs on the same stream of samples (the toy set's files through mmdet's loading steps,
sizes that differ, caches that fill and pop), each call from the same random states; the results
(image bits, boxes, labels, ignore flags, masks, every other key) and the random states after it
must be equal. The adopted RTMDet-Ins config's loader, with workers, is held to the same config
with mmdet's three transforms put back.
"""
import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import CachedMixUp, CachedMosaic, Pad, YOLOXHSVRandomAug
from mmengine.config import Config

from helpers.torch_features import requires_opcheck
from helpers.transform_streams import run_both, samples_of
from mmdet_ext.ops import average_floor, hsv_shift
from mmdet_ext.toy_data import CATEGORIES as TOY_CLASSES
from mmdet_ext.transforms import (FastCachedMixUp, FastCachedMosaic, FastPad,
                                  FastYOLOXHSVRandomAug)

RTMDET_INS_TINY = 'mmdet::rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py'


MOSAICS = [dict(img_scale=(640, 640), pad_val=114.0, max_cached_images=20, random_pop=False),
           dict(img_scale=(320, 256), max_cached_images=6, random_pop=True, prob=0.6)]


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('kwargs', MOSAICS, ids=['rtmdet', 'small-random-pop'])
def test_mosaic_matches_mmdet(toy_coco_root, kwargs, lazy):
    samples = samples_of(toy_coco_root, lazy)
    changed = run_both(CachedMosaic(**kwargs), FastCachedMosaic(**kwargs), samples)
    assert changed >= len(samples) // 3


@pytest.mark.parametrize('dtype', [torch.float32, torch.float64])
def test_mosaic_boxes_moved_at_once_equal_mmdets_calls_patch_by_patch(dtype):
    """``_moved_boxes``: the four patches' ``HorizontalBoxes`` scaled and shifted in one multiply
    and one add equal mmdet's ``clone``, ``rescale_``, ``translate_`` and ``cat`` bit for bit
    (factors that round in float32, empty patches, shifts of either sign); a box type other
    than ``HorizontalBoxes`` takes mmdet's calls themselves."""
    from mmdet.structures.bbox import HorizontalBoxes

    from mmdet_ext.transforms.mix_augment import _moved_boxes

    class OtherBoxes(HorizontalBoxes):
        pass

    rng = np.random.default_rng(5)
    for case in range(200):
        moves = [(HorizontalBoxes(torch.from_numpy(rng.uniform(-50, 700, (n, 4))).to(dtype)),
                  float(rng.uniform(0.1, 3.0)), int(rng.integers(-640, 640)),
                  int(rng.integers(-640, 640)))
                 for n in rng.integers(0, 9, 4) * (case % 7 != 0)]
        expected = []
        for boxes, scale, shift_x, shift_y in moves:
            boxes = boxes.clone()
            boxes.rescale_([scale, scale])
            boxes.translate_([shift_x, shift_y])
            expected.append(boxes)
        expected = expected[0].cat(expected, 0)
        before = [b.tensor.clone() for b, _, _, _ in moves]
        got = _moved_boxes(moves)
        assert type(got) is HorizontalBoxes and got.tensor.dtype == dtype
        assert torch.equal(got.tensor, expected.tensor), case
        assert all(torch.equal(b.tensor, t) for (b, _, _, _), t in zip(moves, before))
        other = [(OtherBoxes(b.tensor), *rest) for b, *rest in moves]
        assert type(_moved_boxes(other)) is OtherBoxes
        assert torch.equal(_moved_boxes(other).tensor, expected.tensor)


def test_average_floor_is_mmdets_float32_blend_of_two_8_bit_images():
    """``ops.average_floor``: ``(0.5 * a + 0.5 * b).astype(uint8)`` as mmdet's CachedMixUp
    computes it (float32), for every pair of byte values and for images of lengths that end
    inside and outside the 16-byte vector loop, views included."""
    values = np.arange(256, dtype=np.uint8)
    a, b = np.repeat(values, 256), np.tile(values, 256)  # every pair
    expected = (0.5 * a.astype(np.float32) + 0.5 * b.astype(np.float32)).astype(np.uint8)
    got = average_floor(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert np.array_equal(got, expected)
    rng = np.random.default_rng(0)
    for shape in ((1,), (15,), (17, 3), (640, 640, 3), (33, 47, 3)):
        x, y = (torch.from_numpy(rng.integers(0, 256, shape, dtype=np.uint8)) for _ in range(2))
        pairs = [(x, y)] if len(shape) < 2 else [(x, y), (x.transpose(0, 1), y.transpose(0, 1)),
                                                 (x.transpose(0, 1).contiguous(),
                                                  y.transpose(0, 1))]
        for u, v in pairs:
            want = (0.5 * u.numpy().astype(np.float32) +
                    0.5 * v.numpy().astype(np.float32)).astype(np.uint8)
            out = average_floor(u, v)
            assert out.is_contiguous() and np.array_equal(out.numpy(), want), shape
    with pytest.raises(RuntimeError, match="shapes differ"):
        average_floor(torch.zeros(3, dtype=torch.uint8), torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(RuntimeError, match="two CPU uint8 tensors"):
        average_floor(torch.zeros(3), torch.zeros(3))


@requires_opcheck
def test_average_floor_opcheck():
    x = torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8)
    torch.library.opcheck(torch.ops.mmdet_ext.average_floor.default, (x, x.flip(0)))


MIXUPS = [
    # RTMDet's, after its Pad: every image 640x640
    (dict(img_scale=(640, 640), ratio_range=(1.0, 1.0), max_cached_images=10, random_pop=False,
          pad_val=(114, 114, 114), prob=0.5), 'pad', False),
    # images of other sizes than the canvas: the crop's offsets are drawn
    (dict(img_scale=(480, 400), ratio_range=(1.0, 1.0), max_cached_images=4, pad_val=114.7),
     'none', False),
    # a jitter that resamples mmdet's float canvas, float images: mmdet's own code runs
    (dict(img_scale=(640, 640), ratio_range=(0.5, 1.5), max_cached_images=5), 'pad', False),
    (dict(img_scale=(640, 640), ratio_range=(1.0, 1.0), max_cached_images=5), 'pad', True),
]


@pytest.mark.parametrize('lazy', [False, True], ids=['polygons', 'lazy'])
@pytest.mark.parametrize('kwargs,before,to_float32', MIXUPS,
                         ids=['rtmdet', 'offsets', 'jitter', 'float32'])
def test_mixup_matches_mmdet(toy_coco_root, kwargs, before, to_float32, lazy):
    samples = samples_of(toy_coco_root, lazy, to_float32)
    if before == 'pad':
        pad = Pad(size=(640, 640), pad_val=dict(img=(114, 114, 114)))
        samples = [pad(sample) for sample in samples]
    changed = run_both(CachedMixUp(**kwargs), FastCachedMixUp(**kwargs), samples)
    assert changed >= len(samples) // 4


def mmdet_hsv_shift(hsv: np.ndarray, gains) -> np.ndarray:
    """What mmdet's YOLOXHSVRandomAug does between its two cvtColors (int16 gains)."""
    gains = np.asarray(gains, dtype=np.int16)
    shifted = hsv.astype(np.int16)
    shifted[..., 0] = (shifted[..., 0] + gains[0]) % 180
    shifted[..., 1] = np.clip(shifted[..., 1] + gains[1], 0, 255)
    shifted[..., 2] = np.clip(shifted[..., 2] + gains[2], 0, 255)
    return shifted.astype(np.uint8)


def test_hsv_shift_is_mmdets_int16_shift_for_every_byte_and_gain():
    """``ops.hsv_shift`` against mmdet's int16 arithmetic: every byte value in every channel
    (hues of 180..255 too, which cvtColor never makes) under gains at and around every edge of
    the hue's circle and of the clip, in lengths ending inside and outside the 48-byte vector
    loop, from views; and the gains it refuses."""
    values = np.arange(256, dtype=np.uint8)
    every = np.stack([values, values[::-1], np.roll(values, 77)], axis=-1)  # [256, 3]
    edges = (-255, -181, -180, -179, -100, -1, 0, 1, 5, 100, 179, 180, 181, 254, 255)
    rng = np.random.default_rng(0)
    for gains in [(h, s, v) for h in edges for s, v in ((0, 0), (-255, 255), (30, -30))] + \
            [tuple(rng.integers(-255, 256, 3)) for _ in range(50)]:
        got = hsv_shift(torch.from_numpy(every), gains).numpy()
        assert np.array_equal(got, mmdet_hsv_shift(every, gains)), gains
    for shape in ((1, 3), (15, 3), (16, 3), (17, 3), (5, 33, 3), (640, 640, 3)):
        image = rng.integers(0, 256, shape, dtype=np.uint8)
        views = [image] + ([image[:, ::-1], image[1:, 2:]] if len(shape) == 3 else [])
        for view in views:
            gains = tuple(rng.integers(-40, 41, 3))
            out = hsv_shift(torch.from_numpy(np.ascontiguousarray(view)) if view.strides[1] < 0
                            else torch.from_numpy(view), gains)
            assert out.is_contiguous() and out.shape == view.shape
            assert np.array_equal(out.numpy(), mmdet_hsv_shift(view, gains)), (shape, gains)
    with pytest.raises(RuntimeError, match="each gain must be in -255..255"):
        hsv_shift(torch.zeros(4, 3, dtype=torch.uint8), (0, 256, 0))
    with pytest.raises(RuntimeError, match="3 gains"):
        hsv_shift(torch.zeros(4, 3, dtype=torch.uint8), (0, 1))
    with pytest.raises(RuntimeError, match="uint8 tensor of 3 channels"):
        hsv_shift(torch.zeros(4, 4, dtype=torch.uint8), (0, 0, 0))


@requires_opcheck
def test_hsv_shift_opcheck():
    x = torch.randint(0, 256, (5, 7, 3), dtype=torch.uint8)
    torch.library.opcheck(torch.ops.mmdet_ext.hsv_shift.default, (x, [3, -20, 40]))


# mmdet's default deltas (RTMDet's), hue deltas past the circle, and deltas whose gains may pass
# -255..255 (mmdet's own code then).
HSV_DELTAS = [dict(), dict(hue_delta=170, saturation_delta=255, value_delta=120),
              dict(hue_delta=400, saturation_delta=300, value_delta=10)]


@pytest.mark.parametrize('deltas', HSV_DELTAS, ids=['default', 'wide', 'past-255'])
@pytest.mark.parametrize('to_float32', [False, True], ids=['uint8', 'float32'])
def test_hsv_jitter_matches_mmdet(toy_coco_root, to_float32, deltas):
    samples = samples_of(toy_coco_root, lazy=False, to_float32=to_float32)
    # a view into a larger image, as RandomCrop leaves it: the jitter writes through it
    samples[0]['img'] = np.ascontiguousarray(samples[0]['img'])[5:-5, 7:-3]
    changed = run_both(YOLOXHSVRandomAug(**deltas), FastYOLOXHSVRandomAug(**deltas), samples)
    assert changed >= len(samples) // 2


PADS = [dict(size=(640, 640), pad_val=dict(img=(114, 114, 114))), dict(size_divisor=32),
        dict(pad_to_square=True, pad_val=dict(img=7, seg=255))]
VIEWS = {'flipped': lambda img: img[:, ::-1], 'flipped vertically': lambda img: img[::-1],
         'flipped both ways': lambda img: img[::-1, ::-1], 'cropped': lambda img: img[3:-5, 2:-9],
         'channels reversed': lambda img: img[..., ::-1],
         'gray flipped': lambda img: img[:, ::-1, 0],
         'float32 flipped': lambda img: img.astype(np.float32)[:, ::-1],
         'int64 flipped': lambda img: img.astype(np.int64)[:, ::-1]}


@pytest.mark.parametrize('kwargs', PADS, ids=['rtmdet', 'divisor', 'square'])
@pytest.mark.parametrize('view', list(VIEWS))
def test_pad_matches_mmdet(toy_coco_root, kwargs, view):
    samples = samples_of(toy_coco_root, lazy=False)[:8]
    if view.startswith('gray') and 'pad_val' in kwargs:  # one value per channel: one channel
        kwargs = dict(kwargs, pad_val=dict(img=114))
    for sample in samples:
        sample['img'] = VIEWS[view](sample['img'])
    run_both(Pad(**kwargs), FastPad(**kwargs), samples)


def _loader_batches(config: Config, epochs: int) -> list:
    from mmengine.runner import Runner
    loader = Runner.build_dataloader(config.train_dataloader, seed=0)
    batches = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        batches += list(loader)
    assert len(batches) == epochs * len(loader)
    return batches


MMDET_TYPES = {'FastCachedMosaic': 'CachedMosaic', 'FastCachedMixUp': 'CachedMixUp',
               'FastYOLOXHSVRandomAug': 'YOLOXHSVRandomAug', 'FastPad': 'Pad',
               'FastPackDetInputs': 'PackDetInputs'}


def _rtmdet_config(root, tmp_path, name: str, mmdet_types: bool) -> Config:
    lines = [f"_base_ = '{RTMDET_INS_TINY}'",
             # a worker that hangs fails the test (DataLoader's timeout) instead of hanging CI
             'train_dataloader = dict(batch_size=2, num_workers=2, persistent_workers=True, '
             'timeout=120, '
             f"dataset=dict(data_root='{root}/', ann_file='annotations/instances_train.json', "
             f"data_prefix=dict(img='train/'), metainfo=dict(classes={TOY_CLASSES!r})))",
             'from mmdet_ext.adopt import adopt  # noqa: E402', 'adopt(globals())']
    path = tmp_path / f'{name}.py'
    path.write_text('\n'.join(lines) + '\n')
    config = Config.fromfile(str(path))
    pipeline = config.train_dataloader.dataset.pipeline
    types = [t['type'] for t in pipeline]
    assert {'ResizeCrop', 'FastCachedMixUp', 'FastYOLOXHSVRandomAug', 'FastPad',
            'FastPackDetInputs'} <= set(types)
    assert pipeline[types.index('ResizeCrop')]['mosaic']['type'] == 'FastCachedMosaic'
    if mmdet_types:  # mmdet's own steps in their place, the mosaic, resize and crop unfolded
        def mmdets(transform):
            return dict(transform, type=MMDET_TYPES.get(transform['type'], transform['type']))
        config.train_dataloader.dataset.pipeline = [
            mmdets(step) for transform in pipeline for step in (
                [transform[key] for key in ('mosaic', 'resize', 'crop')]
                if transform['type'] == 'ResizeCrop' else [transform])]
    return config


def test_adopted_rtmdet_ins_loader_matches_mmdet_transforms(toy_coco_root, tmp_path):
    """The adopted zoo config through the Runner's loader, two persistent workers, five epochs
    (each worker's caches fill, pop and mix), against the same with mmdet's own transforms."""
    ours = _loader_batches(_rtmdet_config(toy_coco_root, tmp_path, 'ours', False), 5)
    theirs = _loader_batches(_rtmdet_config(toy_coco_root, tmp_path, 'theirs', True), 5)
    assert len(ours) == len(theirs)
    mosaics = 0
    for step, (got, expected) in enumerate(zip(ours, theirs)):
        for a, b in zip(got['inputs'], expected['inputs']):
            assert torch.equal(a, b), f'batch {step}: images differ'
        for a, b in zip(got['data_samples'], expected['data_samples']):
            mosaics += a.metainfo.get('img_shape') == (640, 640)
            assert torch.equal(a.gt_instances.bboxes.tensor, b.gt_instances.bboxes.tensor)
            assert torch.equal(a.gt_instances.labels, b.gt_instances.labels)
            assert np.array_equal(a.gt_instances.masks.to_ndarray(),
                                  b.gt_instances.masks.to_ndarray())
            assert torch.equal(a.ignored_instances.bboxes.tensor,
                               b.ignored_instances.bboxes.tensor)
    assert mosaics > 0
