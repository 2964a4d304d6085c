"""``resize_normalize_batch`` (CPU kernel) against its references, exactly: ``cv2.resize`` /
``mmcv.imresize`` for the resize (every column, many sizes up and down), ``mmcv.imflip`` for the
flips, mmdet's ``DetDataPreprocessor`` for channel order, normalisation and padding. The CUDA
kernel is compared with this one in test_cuda_kernels.py."""
import cv2
import mmcv
import numpy as np
import pytest
import torch
from mmdet.models.data_preprocessors import DetDataPreprocessor

from helpers.torch_features import requires_opcheck
from mmdet_ext.ops import FLIP_CODES, resize_normalize_batch

OPS = torch.ops.mmdet_ext
CV2_INTERPOLATIONS = {'bilinear': cv2.INTER_LINEAR, 'nearest': cv2.INTER_NEAREST}


def pack(images):
    """Images HxWxC to (flat CHW buffer, image_shapes [B, 3]), as fast_collate packs them."""
    data = torch.cat([torch.from_numpy(np.ascontiguousarray(im.transpose(2, 0, 1))).reshape(-1)
                      for im in images])
    shapes = torch.tensor([im.shape for im in images], dtype=torch.int64).view(-1, 3)
    return data, shapes


def resize_only(images, out_shapes, interpolation, flips=None):
    """The op with mean 0, std 1: the resized (flipped) uint8 pixels as floats."""
    data, shapes = pack(images)
    channels = images[0].shape[2]
    flips = torch.zeros(len(images), dtype=torch.int64) if flips is None else flips
    return resize_normalize_batch(data, shapes, torch.tensor(out_shapes).view(-1, 2), flips,
                                  torch.zeros(channels), torch.ones(channels), False,
                                  interpolation=interpolation)


def random_sizes(rng, count):
    """(h, w, out_h, out_w): up, down, mixed, odd, 1 px, exact 2x (cv2's INTER_AREA shortcut),
    identity, and widths around the SIMD widths (16, 32 lanes)."""
    sizes = [(1, 1, 5, 7), (1, 9, 4, 1), (7, 1, 1, 3), (6, 8, 3, 4), (40, 62, 20, 31),
             (5, 5, 5, 5), (9, 12, 9, 25), (3, 17, 3, 9), (2, 31, 4, 33), (4, 15, 8, 16)]
    for _ in range(count):
        h, w = (int(v) for v in rng.integers(1, 120, 2))
        sizes.append((h, w, *(int(v) for v in rng.integers(1, 150, 2))))
    return sizes


@pytest.mark.parametrize('interpolation', ['bilinear', 'nearest'])
@pytest.mark.parametrize('channels', [3, 1, 4])
def test_resize_equals_cv2_bit_for_bit(interpolation, channels):
    rng = np.random.default_rng(channels)
    for h, w, out_h, out_w in random_sizes(rng, 60):
        image = rng.integers(0, 256, (h, w, channels), dtype=np.uint8)
        expected = cv2.resize(image, (out_w, out_h),
                              interpolation=CV2_INTERPOLATIONS[interpolation])
        expected = expected.reshape(out_h, out_w, channels)
        got = resize_only([image], [(out_h, out_w)], interpolation)[0]
        assert got.shape == (channels, out_h, out_w)
        np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(), expected.astype(np.float32),
                                      err_msg=f'{h}x{w} -> {out_h}x{out_w}')


def test_resize_equals_mmcv_on_photo_sizes():
    """mmdet's usual geometries: 640x480 up to 1333x800's 1067x800, a reduced-decode 1280x960
    down to 1067x800, a portrait; one textured image each (gradients + noise)."""
    rng = np.random.default_rng(7)
    cases = [((480, 640), (800, 1067)), ((960, 1280), (800, 1067)), ((640, 427), (800, 534))]
    for (h, w), (out_h, out_w) in cases:
        yy, xx = np.mgrid[:h, :w]
        base = (xx * 255 // w + yy * 255 // h) // 2
        image = np.clip(base[..., None] + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)
        for direction in (None, 'horizontal', 'vertical', 'diagonal'):
            expected = mmcv.imresize(image, (out_w, out_h), interpolation='bilinear')
            if direction is not None:
                expected = mmcv.imflip(expected, direction)
            got = resize_only([image], [(out_h, out_w)], 'bilinear',
                              torch.tensor([FLIP_CODES[direction]]))[0]
            np.testing.assert_array_equal(got.permute(1, 2, 0).numpy(),
                                          expected.astype(np.float32))


def mmdet_batch(images, out_shapes, directions, preprocessor):
    """mmdet's path: mmcv.imresize + mmcv.imflip per image, then DetDataPreprocessor."""
    inputs = []
    for image, (out_h, out_w), direction in zip(images, out_shapes, directions):
        warped = mmcv.imresize(image, (out_w, out_h), interpolation='bilinear')
        if direction is not None:
            warped = mmcv.imflip(warped, direction)
        inputs.append(torch.from_numpy(np.ascontiguousarray(warped.transpose(2, 0, 1))))
    return preprocessor({'inputs': inputs, 'data_samples': None})['inputs']


@pytest.mark.parametrize('pad_value,divisor', [(0, 32), (114, 1), (0, 7)])
def test_batch_equals_mmdet_data_preprocessor(pad_value, divisor):
    rng = np.random.default_rng(pad_value + divisor)
    sizes = [(37, 50), (60, 41), (23, 23), (50, 70)]
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    out_shapes = [(64, 86), (30, 21), (23, 23), (61, 99)]
    directions = ['horizontal', 'vertical', None, 'diagonal']
    mean, std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
    preprocessor = DetDataPreprocessor(mean=mean, std=std, bgr_to_rgb=True,
                                       pad_size_divisor=divisor, pad_value=pad_value)
    expected = mmdet_batch(images, out_shapes, directions, preprocessor)
    data, shapes = pack(images)
    got = resize_normalize_batch(data, shapes, torch.tensor(out_shapes),
                                 torch.tensor([FLIP_CODES[d] for d in directions]),
                                 torch.tensor(mean), torch.tensor(std), True,
                                 pad_size_divisor=divisor, pad_value=pad_value)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    assert torch.equal(got, expected)


@pytest.mark.parametrize('dtype', [torch.float16, torch.bfloat16])
def test_reduced_precision_output_is_the_float32_output_rounded(dtype):
    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(30, 40), (17, 9)]]
    data, shapes = pack(images)
    args = (data, shapes, torch.tensor([[45, 60], [20, 11]]), torch.tensor([1, 0]),
            torch.tensor([123.675, 116.28, 103.53]), torch.tensor([58.395, 57.12, 57.375]), True)
    full = resize_normalize_batch(*args, pad_size_divisor=8, pad_value=0)
    reduced = resize_normalize_batch(*args, pad_size_divisor=8, pad_value=0, dtype=dtype)
    assert reduced.dtype == dtype and torch.equal(reduced, full.to(dtype))


@requires_opcheck
def test_opcheck():
    rng = np.random.default_rng(5)
    images = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(12, 9), (7, 15)]]
    data, shapes = pack(images)
    args = (data, shapes, torch.tensor([[20, 11], [5, 30]]), torch.tensor([3, 1]), 1,
            torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 3.0, 4.0]), True, 24, 32, 0.5, None)
    torch.library.opcheck(OPS.resize_normalize_batch.default, args)


def test_bad_input_raises_clear_errors():
    image = np.zeros((10, 12, 3), np.uint8)
    data, shapes = pack([image])
    mean, std, flips, out = torch.zeros(3), torch.ones(3), torch.tensor([0]), torch.tensor([[5, 6]])
    with pytest.raises(ValueError, match="'bicubic' is not implemented"):
        resize_normalize_batch(data, shapes, out, flips, mean, std, False, interpolation='bicubic')
    with pytest.raises(RuntimeError, match="interpolation 'area' is not implemented"):
        OPS.resize_normalize_batch(data, shapes, out, flips, 3, mean, std, False, 8, 8, 0.0)
    with pytest.raises(RuntimeError, match='buffer holds 359 bytes but image_shapes describe 360'):
        OPS.resize_normalize_batch(data[:-1], shapes, out, flips, 1, mean, std, False, 8, 8, 0.0)
    with pytest.raises(RuntimeError, match='image 0 resizes to 5x6, which must .* fit the 4x8'):
        OPS.resize_normalize_batch(data, shapes, out, flips, 1, mean, std, False, 4, 8, 0.0)
    with pytest.raises(RuntimeError, match='image 0 has flip 4'):
        OPS.resize_normalize_batch(data, shapes, out, torch.tensor([4]), 1, mean, std, False, 8,
                                   8, 0.0)
    two, two_shapes = pack([image, np.zeros((4, 4, 1), np.uint8)])
    with pytest.raises(RuntimeError, match='image 1 has 1 channels, image 0 has 3'):
        OPS.resize_normalize_batch(two, two_shapes, torch.tensor([[5, 6], [5, 6]]),
                                   torch.tensor([0, 0]), 1, mean, std, False, 8, 8, 0.0)
    with pytest.raises(RuntimeError, match='mean and std need one value per channel'):
        OPS.resize_normalize_batch(data, shapes, out, flips, 1, torch.zeros(2), std, False, 8, 8,
                                   0.0)
