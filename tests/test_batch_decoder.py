"""Images decoded while a batch is planned: ``_C.DecodeQueue`` (native threads, no GIL) decodes
each image as ``decode_image(..., planar=True)`` does (and resizes and flips it into its slot of
a padded batch as ``decode_images_into`` does), names each failure, checks its arguments
before queueing, works again in a forked child, and with no threads of its own decodes on the
caller's thread; ``BatchDecoder`` places a batch's images one after another in a buffer that
grows when they do not fit; the batched fetch that uses it gives
the per-sample path's samples (tests/test_batched_fetch.py runs it too, in threads mode)."""
import multiprocessing

import numpy as np
import pytest
import torch

from mmdet_ext import NativeLoadResizeFlip
from mmdet_ext.datasets.inflight import InflightRecord
from mmdet_ext.datasets.batch_decoder import BatchDecoder, DecodeFailed, decode_queue
from mmdet_ext.io import DEFAULT_MAX_PIXELS
from mmdet_ext.ops import decode_image, decode_images_into
from mmdet_ext.ops.image import IMREAD_FLAGS
from mmdet_ext.ops.pixels import FLIP_CODES, INTERPOLATIONS
from mmdet_ext.transforms.fused_loading import PendingDecode
from helpers.build import needs_native_decoding
from helpers.encoded_images import encoded_image

pytestmark = needs_native_decoding


IMAGES = [(encoded_image(480, 640, seed=1), 1), (encoded_image(301, 199, seed=2), 2),
          (encoded_image(37, 18, 1, seed=3), 4), (encoded_image(64, 48, seed=4, ext='.png'), 2),
          (encoded_image(120, 160, seed=5), 8)]


@pytest.mark.parametrize('threads', [0, 1, 3])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_queue_decodes_each_image_as_decode_image(threads, color_type):
    queue = decode_queue(threads)
    expected = [decode_image(data, color_type, denom, planar=True) for data, denom in IMAGES]
    order = [3, 0, 4, 1, 2]  # offsets in another order than the queue's
    offsets, position = {}, 0
    for i in order:
        offsets[i], position = position, position + expected[i].numel()
    out = torch.full((position + 5,), 77, dtype=torch.uint8)
    for round_ in range(3):  # the same queue again and again
        out[:position] = 0
        for i, (data, denom) in enumerate(IMAGES):
            queue.submit(i, data, IMREAD_FLAGS[color_type], denom, DEFAULT_MAX_PIXELS, out,
                         offsets[i], list(expected[i].shape))
        assert queue.wait() == []
        for i, image in enumerate(expected):
            assert torch.equal(out[offsets[i]:offsets[i] + image.numel()].view(image.shape),
                               image), (round_, i)
        assert torch.equal(out[position:], torch.full((5,), 77, dtype=torch.uint8))


def test_queue_names_each_failure_by_its_tag_and_decodes_the_rest():
    queue = decode_queue(2)
    good = encoded_image(48, 64, seed=6)
    truncated = good[:len(good) // 2].clone()
    size = 3 * 48 * 64
    out = torch.zeros(4 * size, dtype=torch.uint8)
    queue.submit(10, good, 1, 1, DEFAULT_MAX_PIXELS, out, 0, [3, 48, 64])
    queue.submit(11, truncated, 1, 1, DEFAULT_MAX_PIXELS, out, size, [3, 48, 64])
    queue.submit(12, good, 1, 1, DEFAULT_MAX_PIXELS, out, 2 * size, [3, 64, 48])  # wrong shape
    queue.submit(13, good, 1, 1, DEFAULT_MAX_PIXELS, out, 3 * size, [3, 48, 64])
    failed = sorted(queue.wait())
    assert [tag for tag, _ in failed] == [11, 12]
    assert 'truncated JPEG' in failed[0][1]
    assert 'decoded to 3x48x64 (C x H x W), expected 3x64x48' in failed[1][1]
    expected = decode_image(good, planar=True).reshape(-1)
    assert torch.equal(out[:size], expected) and torch.equal(out[3 * size:], expected)
    assert queue.wait() == []  # reported once


def test_queue_checks_its_arguments_before_queueing():
    queue = decode_queue(1)
    data = encoded_image(48, 64, seed=7)
    out = torch.zeros(3 * 48 * 64, dtype=torch.uint8)
    with pytest.raises(RuntimeError, match=r'\(9216 bytes at offset 1\) does not fit'):
        queue.submit(0, data, 1, 1, DEFAULT_MAX_PIXELS, out, 1, [3, 48, 64])
    with pytest.raises(RuntimeError, match='bad expected shape'):
        queue.submit(0, data, 1, 1, DEFAULT_MAX_PIXELS, out, 0, [5, 48, 64])
    with pytest.raises(RuntimeError, match='out must be a contiguous 1-D CPU uint8'):
        queue.submit(0, data, 1, 1, DEFAULT_MAX_PIXELS, out.view(3, -1).t(), 0, [3, 48, 64])
    with pytest.raises(RuntimeError, match='encoded bytes'):
        queue.submit(0, data.int(), 1, 1, DEFAULT_MAX_PIXELS, out, 0, [3, 48, 64])
    assert queue.wait() == [] and not out.any()


@pytest.mark.parametrize('interpolation', ['bilinear', 'nearest', 'area'])
@pytest.mark.parametrize('color_type', ['color', 'grayscale'])
def test_queue_warps_into_slots_as_decode_images_into(interpolation, color_type):
    """Resized, flipped, into the slots of a padded batch: decode_images_into's bits, and the
    padding left as it was."""
    warps = [(500, 700, 'horizontal'), (200, 120, None), (40, 30, 'diagonal'),
             (64, 48, 'vertical'), (60, 80, None)]
    channels = 3 if color_type == 'color' else 1
    slot = (500, 700)
    data = [encoded for encoded, _ in IMAGES]
    denoms = [denom for _, denom in IMAGES]
    shapes = [tuple(decode_image(encoded, color_type, denom, planar=True).shape)
              for encoded, denom in IMAGES]
    slot_bytes = channels * slot[0] * slot[1]
    offsets = [i * slot_bytes for i in range(len(IMAGES))]
    expected = torch.full((len(IMAGES) * slot_bytes, ), 77, dtype=torch.uint8)
    decode_images_into(data, color_type, denoms, expected, offsets, shapes, num_threads=1,
                       warps=warps, interpolation=interpolation, slot_hw=slot)
    queue = decode_queue(2)
    out = torch.full_like(expected, 77)
    for i in [2, 0, 4, 1, 3]:
        h, w, flip = warps[i]
        queue.submit(i, data[i], IMREAD_FLAGS[color_type], denoms[i], DEFAULT_MAX_PIXELS, out,
                     offsets[i], list(shapes[i]), warp=[h, w, FLIP_CODES[flip]],
                     interpolation=INTERPOLATIONS[interpolation], slot_hw=list(slot))
    assert queue.wait() == []
    assert torch.equal(out, expected)
    assert (out.view(len(IMAGES), channels, *slot)[1, :, 200:] == 77).all()  # padding untouched


def test_queue_checks_warps_and_slots_before_queueing():
    queue = decode_queue(1)
    data = encoded_image(48, 64, seed=7)
    out = torch.zeros(3 * 100 * 100, dtype=torch.uint8)

    def submit(**warp):
        queue.submit(0, data, 1, 1, DEFAULT_MAX_PIXELS, out, 0, [3, 48, 64], **warp)

    with pytest.raises(RuntimeError, match='flip must be 0'):
        submit(warp=[50, 50, 4])
    with pytest.raises(RuntimeError, match='unknown interpolation 9'):
        submit(warp=[50, 50, 0], interpolation=9)
    with pytest.raises(RuntimeError, match=r'warp must be \(out_height, out_width, flip\)'):
        submit(warp=[50, 50])
    with pytest.raises(RuntimeError, match=r'image 0 is 120x50 \(h x w\), larger than its '
                                           '100x100 slot'):
        submit(warp=[120, 50, 0], slot_hw=[100, 100])
    with pytest.raises(RuntimeError, match=r'slot_hw must be \(height, width\), both > 0'):
        submit(warp=[50, 50, 0], slot_hw=[0, 100])
    with pytest.raises(RuntimeError, match=r'\(30300 bytes at offset 0\) does not fit'):
        submit(warp=[50, 50, 0], slot_hw=[100, 101])
    assert queue.wait() == [] and not out.any()


def _decode_in_child(result):
    data = encoded_image(48, 64, seed=8)
    out = torch.zeros(3 * 48 * 64, dtype=torch.uint8)
    queue = decode_queue(2)
    queue.submit(0, data, 1, 1, DEFAULT_MAX_PIXELS, out, 0, [3, 48, 64])
    result.put((queue.wait(), torch.equal(out.view(3, 48, 64), decode_image(data, planar=True))))


def test_a_forked_child_gets_its_own_queue():
    decode_queue(2)  # the parent's, with its threads: the child inherits the object only
    context = multiprocessing.get_context('fork')
    result = context.Queue()
    # daemon, and killed if it has not answered: a child that hangs fails the test, not the run
    child = context.Process(target=_decode_in_child, args=(result,), daemon=True)
    child.start()
    try:
        assert result.get(timeout=120) == ([], True)
        child.join(timeout=120)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join()
    test_queue_names_each_failure_by_its_tag_and_decodes_the_rest()  # the parent's still works


def _pending(data, denom, color_type='color', name='image.jpg'):
    shape = tuple(decode_image(data, color_type, denom, planar=True).shape)
    return PendingDecode(name, data, denom, shape)


def test_a_batch_larger_than_its_buffer_grows_it_and_keeps_what_was_decoded():
    loader = NativeLoadResizeFlip(scale=(100, 100), pixels_on='device')
    small, large = encoded_image(16, 16, seed=9), encoded_image(480, 640, seed=10)
    pendings = [_pending(small, 1), _pending(large, 1), _pending(small, 1), _pending(large, 2),
                _pending(large, 1)]
    decode = BatchDecoder(loader, 3, batch_size=len(pendings), inflight=InflightRecord(None))
    decode.add(0, pendings[0])
    first = decode.buffer
    for index, pending in enumerate(pendings[1:], start=1):
        decode.add(index, pending)
    assert decode.used == sum(int(np.prod(pending.shape)) for pending in pendings)
    assert decode.buffer.numel() >= decode.used > first.numel()  # it grew
    assert decode.buffer.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    images = decode.images()
    for image, pending in zip(images, pendings):
        assert torch.equal(image, decode_image(pending.encoded, 'color', pending.scale_denom,
                                               planar=True))
    starts = [image.storage_offset() for image in images]
    assert starts == [0, *np.cumsum([image.numel() for image in images])[:-1].tolist()]
    assert all(image.untyped_storage().data_ptr() == decode.buffer.untyped_storage().data_ptr()
               for image in images)


def test_a_failed_image_is_named_and_the_others_are_decoded():
    loader = NativeLoadResizeFlip(scale=(100, 100), pixels_on='device')
    good = encoded_image(48, 64, seed=11)
    pendings = [_pending(good, 1, name='a.jpg'), _pending(good, 1, name='b.jpg')._replace(
        encoded=good[:len(good) // 2].clone()), _pending(good, 1, name='c.jpg')]
    decode = BatchDecoder(loader, 2, batch_size=3, inflight=InflightRecord(None))
    for index, pending in zip([4, 7, 9], pendings):
        decode.add(index, pending)
    with pytest.raises(DecodeFailed,
                       match=r'^sample 7 \(b.jpg\): decode_image: truncated JPEG [^;]*$'):
        decode.images()
    expected = decode_image(good, planar=True).reshape(-1)
    size = expected.numel()
    assert torch.equal(decode.buffer[:size], expected)
    assert torch.equal(decode.buffer[2 * size:3 * size], expected)
