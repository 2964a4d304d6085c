"""Test-time masks as RLEs (paste_masks_to_rle, rle_encode_batch) against mmdet and pycocotools.

The reference of ``paste_masks_to_rle`` is mmdet 3.3 itself: ``FCNMaskHead._predict_by_feat_single``
as it runs on the CPU (``_do_paste_mask(..., skip_empty=True)`` box by box, then the threshold),
and its GPU branch (``_do_paste_mask(..., skip_empty=False)`` over the whole image, run here on the
CPU), each followed by ``encode_mask_results`` (pycocotools). Equality is exact: the same
compressed counts strings, the same decoded pixels.
"""
import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from helpers.bounded import run_bounded
from helpers.torch_features import requires_opcheck
from mmdet_ext import ops

OPS = torch.ops.mmdet_ext
STEP_SIGN = 'inconsistent with step sign'  # what torch.arange says where mmdet's CPU path fails


@pytest.fixture(scope='module')
def mmdet_paste():
    """(cpu_path, gpu_path): mmdet's full-size boolean masks [N, H, W] of both branches."""
    fcn_mask_head = pytest.importorskip('mmdet.models.roi_heads.mask_heads.fcn_mask_head')
    from mmengine.config import ConfigDict
    head = fcn_mask_head.FCNMaskHead(num_convs=0, num_classes=1, class_agnostic=True)

    def cpu_path(probs, boxes, height, width, threshold):
        # rescale with scale factor 1 (an exact division) and activate_map: the probabilities
        # go in as they are, as after the sigmoid
        return head._predict_by_feat_single(
            probs[:, None].clone(), boxes.clone(), torch.zeros(len(boxes), dtype=torch.long),
            {'ori_shape': (height, width), 'scale_factor': (1.0, 1.0)},
            ConfigDict(mask_thr_binary=threshold), rescale=True, activate_map=True)

    def gpu_path(probs, boxes, height, width, threshold):
        pasted, _ = fcn_mask_head._do_paste_mask(probs[:, None], boxes, height, width,
                                                 skip_empty=False)
        return pasted >= threshold

    return cpu_path, gpu_path


def coco_rles(masks: torch.Tensor) -> list[bytes]:
    """mmdet's encode_mask_results: pycocotools on each Fortran-ordered uint8 mask."""
    return [mask_utils.encode(np.asfortranarray(m[:, :, None], dtype=np.uint8))[0]['counts']
            for m in masks.numpy()]


def native_rles(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                width: int) -> list[bytes]:
    return [rle['counts'] for rle in ops.to_coco_rles(counts, run_counts, height, width)]


def assert_same_masks(expected: torch.Tensor, counts: torch.Tensor, run_counts: torch.Tensor):
    """Same RLE strings as pycocotools gives for mmdet's masks, and the same pixels back."""
    height, width = expected.shape[1:]
    assert native_rles(counts, run_counts, height, width) == coco_rles(expected)
    decoded = ops.rle_decode_batch(counts, run_counts, height, width)
    assert torch.equal(decoded, expected.to(torch.uint8))


def random_probabilities(rng, count, shape=(28, 28), threshold=0.5):
    """Mask head outputs of several kinds: smooth blobs (sigmoid of a bump, the usual case),
    uniform noise, 0/1 cells, and values within a few float32 steps of the threshold."""
    m_h, m_w = shape
    yy, xx = np.meshgrid(np.linspace(-1, 1, m_h), np.linspace(-1, 1, m_w), indexing='ij')
    cut = np.float32(threshold)
    out = []
    for kind in rng.integers(0, 4, count):
        if kind == 0:
            logits = 8 * (1 - (xx**2 + yy**2) * rng.uniform(0.5, 2)) + rng.normal(0, 2, shape)
            p = 1 / (1 + np.exp(-logits))
        elif kind == 1:
            p = rng.random(shape)
        elif kind == 2:
            p = (rng.random(shape) < 0.5).astype(np.float32)
        else:
            p = cut
            for _ in range(4):  # up to 4 float32 steps away, either side
                step = rng.integers(-1, 2, shape).astype(bool)
                p = np.where(step, np.nextafter(p, np.float32(2 * cut)), p)
                p = np.where(rng.random(shape) < 0.3, np.nextafter(p, np.float32(0)), p)
        out.append(np.asarray(p, dtype=np.float32))
    return torch.from_numpy(np.stack(out) if out else np.zeros((0, m_h, m_w), np.float32))


def random_boxes(rng, count, height, width):
    """x1, y1, x2, y2 in float32: fractional, tiny (< 1 px) to much larger than the image,
    inside, across the edges and beyond them."""
    x1 = rng.uniform(-0.3, 1.1, count) * width
    y1 = rng.uniform(-0.3, 1.1, count) * height
    sizes = np.array([0.3, 2.5, 20, 90, 300]) * rng.uniform(0.5, 1.0, (2, count, 1))
    w = np.take_along_axis(sizes[0], rng.integers(0, 5, (count, 1)), 1)[:, 0]
    h = np.take_along_axis(sizes[1], rng.integers(0, 5, (count, 1)), 1)[:, 0]
    w = np.where(rng.random(count) < 0.1, 2.5 * width, w)
    return torch.from_numpy(np.stack([x1, y1, x1 + w, y1 + h], 1).astype(np.float32))


def paste_one_by_one(cpu_path, probs, boxes, height, width, threshold):
    """mmdet's CPU path box by box: the mask it makes, or None where it raises."""
    masks = []
    for i in range(len(boxes)):
        try:
            masks.append(cpu_path(probs[i:i + 1], boxes[i:i + 1], height, width, threshold)[0])
        except RuntimeError as error:
            assert STEP_SIGN in str(error)
            masks.append(None)
    return masks


def cpu_path_or_empty(cpu_path, probs, boxes, height, width, threshold):
    """paste_one_by_one, with an empty mask where mmdet raises (what the op gives there)."""
    empty = torch.zeros(height, width, dtype=torch.bool)
    return torch.stack([empty if m is None else m
                        for m in paste_one_by_one(cpu_path, probs, boxes, height, width,
                                                  threshold)])


# ----------------------------------------------------------------------------- paste vs mmdet
SIZES = [(480, 640), (37, 23), (1, 1), (1, 17), (13, 1), (3, 5), (101, 67)]


@pytest.mark.parametrize('height, width', SIZES)
@pytest.mark.parametrize('threshold', [0.5, 0.3, 0.7])
def test_paste_matches_mmdet_cpu_path(mmdet_paste, height, width, threshold):
    """Random boxes (some past the image edges, tiny, huge) and probabilities (some within a
    few float32 steps of the threshold): the RLEs of mmdet's CPU path, box by box. Where mmdet
    raises (a box more than a pixel outside the image), the mask is empty."""
    cpu_path, _ = mmdet_paste
    rng = np.random.default_rng(height * 1000 + width + int(threshold * 10))
    probs = random_probabilities(rng, 40, threshold=threshold)
    boxes = random_boxes(rng, 40, height, width)
    counts, run_counts = ops.paste_masks_to_rle(probs, boxes, height, width, threshold)
    expected = cpu_path_or_empty(cpu_path, probs, boxes, height, width, threshold)
    assert_same_masks(expected, counts, run_counts)


@pytest.mark.parametrize('height, width', SIZES)
@pytest.mark.parametrize('threshold', [0.5, 0.3, 0.7])
def test_paste_matches_mmdet_gpu_path(mmdet_paste, height, width, threshold):
    """skip_empty=False: mmdet's GPU branch, every pixel of the image sampled (run on the CPU)."""
    _, gpu_path = mmdet_paste
    rng = np.random.default_rng(height * 1000 + width + int(threshold * 10) + 1)
    probs = random_probabilities(rng, 40, threshold=threshold)
    boxes = random_boxes(rng, 40, height, width)
    counts, run_counts = ops.paste_masks_to_rle(probs, boxes, height, width, threshold,
                                                skip_empty=False)
    assert_same_masks(gpu_path(probs, boxes, height, width, threshold), counts, run_counts)


def test_paste_matches_mmdet_with_realistic_detections(mmdet_paste):
    """100 detections in a 1333 x 800 image, boxes clipped to it as mmdet's bbox head does, the
    sizes of COCO objects: both paths, mask for mask."""
    cpu_path, gpu_path = mmdet_paste
    rng = np.random.default_rng(7)
    height, width = 800, 1333
    side = np.exp(rng.uniform(np.log(4), np.log(700), (100, 2)))
    x1, y1 = rng.uniform(-50, width, 100), rng.uniform(-50, height, 100)
    boxes = np.stack([x1, y1, x1 + side[:, 0], y1 + side[:, 1]], 1)
    boxes = torch.from_numpy(boxes.clip(0, [width, height, width, height]).astype(np.float32))
    probs = random_probabilities(rng, 100)
    for skip_empty, path in ((True, cpu_path), (False, gpu_path)):
        counts, run_counts = ops.paste_masks_to_rle(probs, boxes, height, width, 0.5, skip_empty)
        assert_same_masks(path(probs, boxes, height, width, 0.5), counts, run_counts)


@pytest.mark.parametrize('shape', [(14, 20), (1, 1), (2, 5)])
def test_paste_of_non_square_and_tiny_masks(mmdet_paste, shape):
    cpu_path, gpu_path = mmdet_paste
    rng = np.random.default_rng(sum(shape))
    probs = random_probabilities(rng, 30, shape)
    boxes = random_boxes(rng, 30, 60, 45)
    assert_same_masks(cpu_path_or_empty(cpu_path, probs, boxes, 60, 45, 0.5),
                      *ops.paste_masks_to_rle(probs, boxes, 60, 45, 0.5))
    assert_same_masks(gpu_path(probs, boxes, 60, 45, 0.5),
                      *ops.paste_masks_to_rle(probs, boxes, 60, 45, 0.5, skip_empty=False))


def test_threshold_is_compared_in_float32_as_mmdet_does(mmdet_paste):
    """A box of exactly M x M whole pixels samples cell centres, so inside it the value is the
    cell's: float32(0.7) >= 0.7 holds in float32 (mmdet), not in float64."""
    cpu_path, _ = mmdet_paste
    probs = torch.full((1, 28, 28), 0.7)
    boxes = torch.tensor([[3.0, 2.0, 31.0, 30.0]])
    expected = cpu_path(probs, boxes, 40, 40, 0.7)
    assert not float(np.float32(0.7)) >= 0.7 and expected.sum() >= 26 * 28
    assert_same_masks(expected, *ops.paste_masks_to_rle(probs, boxes, 40, 40, 0.7))


def test_degenerate_and_reversed_boxes(mmdet_paste):
    """Zero-width and zero-height boxes (mmdet zeroes the infinite grid values they make) and
    boxes with x2 < x1 (mirrored), where mmdet's CPU path does not raise; the GPU form always."""
    cpu_path, gpu_path = mmdet_paste
    boxes = torch.tensor([[10.0, 2.0, 10.0, 12.0], [3.0, 7.5, 30.0, 7.5], [4.5, 4.5, 4.5, 4.5],
                          [20.0, 5.0, 19.0, 9.0], [20.0, 6.5, 18.5, 5.0], [0.25, 3.0, 0.25, 3.0]])
    probs = random_probabilities(np.random.default_rng(3), len(boxes))
    expected = torch.stack(paste_one_by_one(cpu_path, probs, boxes, 20, 50, 0.5))
    assert_same_masks(expected, *ops.paste_masks_to_rle(probs, boxes, 20, 50, 0.5))
    assert_same_masks(gpu_path(probs, boxes, 20, 50, 0.5),
                      *ops.paste_masks_to_rle(probs, boxes, 20, 50, 0.5, skip_empty=False))


def test_boxes_where_mmdet_cpu_path_raises_give_empty_masks(mmdet_paste):
    cpu_path, gpu_path = mmdet_paste
    boxes = torch.tensor([[60.0, 5.0, 70.0, 9.0], [-30.0, 5.0, -3.0, 9.0], [3.0, 25.0, 9.0, 30.0],
                          [20.0, 5.0, 10.0, 9.0]])
    probs = torch.ones(len(boxes), 28, 28)
    assert paste_one_by_one(cpu_path, probs, boxes, 20, 50, 0.5) == [None] * 4
    counts, run_counts = ops.paste_masks_to_rle(probs, boxes, 20, 50, 0.5)
    assert counts.tolist() == [1000] * 4 and run_counts.tolist() == [1] * 4
    # the GPU form is defined there: the reversed box pastes a mirrored mask
    assert_same_masks(gpu_path(probs, boxes, 20, 50, 0.5),
                      *ops.paste_masks_to_rle(probs, boxes, 20, 50, 0.5, skip_empty=False))


def test_skip_empty_forms_differ_for_wide_and_degenerate_boxes(mmdet_paste):
    """mmdet's CPU and GPU paths give different masks, and the op follows each:

    - at a threshold t < 0.5, a box wider than 1.5 M / (0.5 - t) px (M = 28: 210 px at 0.3)
      reaches past its span: bilinear sampling still weighs the mask's last column by up to
      0.5 - 1.5 M / width one pixel beyond ceil(x2) + 1, where the CPU path stops;
    - at any threshold, a box of zero width (a box clipped at the image edge) samples the
      mask's middle column in every column of the image on the GPU path (mmdet zeroes the
      infinite grid values), in two columns on the CPU path.

    At 0.5 the first cannot happen (the weight stays below 0.5), so the paths agree there except
    for zero-width or zero-height boxes (test_paste_matches_mmdet_with_realistic_detections)."""
    cpu_path, gpu_path = mmdet_paste
    probs = torch.ones(2, 28, 28)
    boxes = torch.tensor([[0.0, 2.0, 300.0, 12.0], [10.0, 2.0, 10.0, 12.0]])
    for threshold, differing in ((0.3, [10, 10 * 398]), (0.5, [0, 10 * 398])):
        cpu, gpu = cpu_path(probs, boxes, 20, 400, threshold), gpu_path(probs, boxes, 20, 400,
                                                                        threshold)
        assert (cpu != gpu).sum((1, 2)).tolist() == differing
        assert_same_masks(cpu, *ops.paste_masks_to_rle(probs, boxes, 20, 400, threshold))
        assert_same_masks(gpu, *ops.paste_masks_to_rle(probs, boxes, 20, 400, threshold,
                                                       skip_empty=False))


def test_no_masks_and_empty_images(mmdet_paste):
    cpu_path, _ = mmdet_paste
    counts, run_counts = ops.paste_masks_to_rle(torch.zeros(0, 28, 28), torch.zeros(0, 4), 40,
                                                30, 0.5)
    assert counts.dtype == torch.int32 and run_counts.dtype == torch.int64
    assert counts.numel() == 0 and run_counts.numel() == 0
    probs, boxes = torch.ones(2, 28, 28), torch.tensor([[1.0, 1.0, 5.0, 5.0]] * 2)
    for height, width in ((0, 10), (10, 0), (0, 0)):
        expected = cpu_path(probs, boxes, height, width, 0.5)
        for skip_empty in (True, False):
            assert_same_masks(expected, *ops.paste_masks_to_rle(probs, boxes, height, width, 0.5,
                                                                skip_empty))


def test_work_follows_the_boxes_not_the_image():
    """In a 46000 x 46000 image (2.1e9 pixels, a 2 GB boolean mask each), the masks are the
    small image's, shifted by nothing: only the boxes' pixels are ever visited."""
    rng = np.random.default_rng(5)
    probs = random_probabilities(rng, 3)
    boxes = torch.tensor([[10.5, 10.0, 60.0, 50.25], [0.0, 0.0, 99.0, 99.0], [40.0, 70.0, 45.0,
                                                                              99.5]])
    small = ops.rle_decode_batch(*ops.paste_masks_to_rle(probs, boxes, 100, 100, 0.5), 100, 100)
    for skip_empty in (True, False):
        counts, run_counts = ops.paste_masks_to_rle(probs, boxes, 46000, 46000, 0.5, skip_empty)
        for i, rle in enumerate(torch.split(counts, run_counts.tolist())):
            assert rle.sum() == 46000 * 46000
            assert ops.rle_area(rle) == int(small[i].sum())
            assert ops.rle_to_bbox(rle, 46000, 46000).tolist() == mask_utils.toBbox(
                mask_utils.encode(np.asfortranarray(small[i].numpy()))).tolist()
    # The bound itself: the same pastes within 1 GiB more address space (one image-sized mask
    # is 2.1 GB) and 30 CPU s.
    run_bounded('''
        probs = torch.rand(3, 28, 28, generator=torch.Generator().manual_seed(5))
        boxes = torch.tensor([[10.5, 10.0, 60.0, 50.25], [0.0, 0.0, 99.0, 99.0],
                              [40.0, 70.0, 45.0, 99.5]])
        for skip_empty in (True, False):
            ops.paste_masks_to_rle(probs, boxes, 46000, 46000, 0.5, skip_empty)
    ''', cpu_seconds=30, extra_address_space=1 << 30)


def test_boxes_at_the_edge_of_the_largest_image_stay_inside_it():
    """1 x (2^31 - 1) pixels: float32 rounds the width up to 2^31, the spans must not follow."""
    width = 2**31 - 1
    boxes = torch.tensor([[2147483520.0, 0.0, 2147483647.0, 1.0]])
    counts, run_counts = ops.paste_masks_to_rle(torch.ones(1, 28, 28), boxes, 1, width, 0.5)
    assert counts.to(torch.int64).sum() == width and counts.ge(0).all()
    assert run_counts[0] == 2 and counts[1] == 127  # foreground up to the last pixel, not past


# ----------------------------------------------------------------------------- batch encode
@pytest.mark.parametrize('height, width', [(37, 23), (1, 1), (1, 17), (13, 1), (64, 64),
                                           (480, 640), (0, 7), (7, 0), (5, 8), (5, 9)])
@pytest.mark.parametrize('dtype', [torch.uint8, torch.bool])
def test_rle_encode_batch_matches_pycocotools(height, width, dtype):
    rng = np.random.default_rng(height * 7 + width)
    masks = []
    for kind in range(6):
        if kind == 0:
            m = np.zeros((height, width), bool)
        elif kind == 1:
            m = np.ones((height, width), bool)
        elif kind == 2:
            m = rng.random((height, width)) < 0.5
        else:  # rectangles with ragged edges, touching the borders sometimes
            m = np.zeros((height, width), bool)
            for _ in range(kind):
                y, x = rng.integers(0, max(height, 1)), rng.integers(0, max(width, 1))
                m[y:y + rng.integers(1, height + 2), x:x + rng.integers(1, width + 2)] = True
            m ^= rng.random((height, width)) < 0.03
        masks.append(m)
    batch = torch.from_numpy(np.stack(masks)).to(dtype)
    counts, run_counts = ops.rle_encode_batch(batch)
    assert counts.dtype == torch.int32 and run_counts.dtype == torch.int64
    assert native_rles(counts, run_counts, height, width) == coco_rles(batch)
    for rle, mask in zip(torch.split(counts, run_counts.tolist()), batch):
        assert torch.equal(rle, ops.rle_encode(mask))


def test_rle_encode_batch_matches_encode_mask_results():
    structures = pytest.importorskip('mmdet.structures.mask')
    rng = np.random.default_rng(11)
    masks = torch.from_numpy(rng.random((4, 61, 83)) < 0.3)
    expected = structures.encode_mask_results(masks.numpy())
    assert ops.to_coco_rles(*ops.rle_encode_batch(masks), 61, 83) == expected


def test_rle_encode_batch_reads_any_layout_and_nonzero_as_foreground():
    rng = np.random.default_rng(12)
    masks = torch.from_numpy((rng.random((3, 19, 26)) < 0.5).astype(np.uint8))
    expected = ops.rle_encode_batch(masks)
    for other in (masks * 255, masks.transpose(1, 2).contiguous().transpose(1, 2),
                  torch.cat([masks, masks], 2)[:, :, :26]):
        assert all(torch.equal(a, b) for a, b in zip(ops.rle_encode_batch(other), expected))
    # the single-mask encoder agrees, Fortran-ordered or not
    fortran = masks[0].t().contiguous().t()
    assert torch.equal(ops.rle_encode(fortran), ops.rle_encode(masks[0]))
    assert ops.rle_encode_batch(torch.zeros(0, 5, 5, dtype=torch.bool))[1].numel() == 0


# ----------------------------------------------------------------------------- bad input
PROBS, BOX = torch.ones(1, 28, 28), torch.tensor([[0.0, 0.0, 4.0, 4.0]])


@pytest.mark.parametrize('call, message', [
    (lambda: OPS.paste_masks_to_rle(PROBS[0], BOX, 8, 8, 0.5), r'\(N, M_h, M_w\) float32'),
    (lambda: OPS.paste_masks_to_rle(PROBS.double(), BOX, 8, 8, 0.5), r'convert others with'),
    (lambda: OPS.paste_masks_to_rle(torch.ones(1, 0, 28), BOX, 8, 8, 0.5), '1 to 2\\^24 cells'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX[:, :3], 8, 8, 0.5), r'boxes as a \(N, 4\)'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX.double(), 8, 8, 0.5), 'float32 tensor of x1'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX.repeat(2, 1), 8, 8, 0.5),
     'one box per mask, got 2 boxes for 1 masks'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX * float('nan'), 8, 8, 0.5),
     'box 0 has a non-finite coordinate'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX + float('inf'), 8, 8, 0.5), 'non-finite'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, -8, 8, 0.5), 'must be non-negative'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, 65536, 32768, 0.5), 'more than 2\\^31 - 1'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, 8, 8, 0.0), 'threshold > 0'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, 8, 8, -1.0), 'soft uint8 masks'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, 8, 8, float('nan')), 'finite threshold'),
    (lambda: OPS.paste_masks_to_rle(PROBS, BOX, 8, 8, 1e-50), r'as float32: 0\)'),
    (lambda: OPS.rle_encode_batch(torch.zeros(3, 4, dtype=torch.uint8)),
     r'\(N, height, width\) uint8 or bool'),
    (lambda: OPS.rle_encode_batch(torch.zeros(1, 3, 4)), 'uint8 or bool tensor, got Float'),
    (lambda: OPS.rle_encode_batch(torch.zeros(1, 1, 1, dtype=torch.bool).expand(1, 65536,
                                                                                32768)),
     'more than 2\\^31 - 1'),
])
def test_bad_input_gives_clear_error(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ----------------------------------------------------------------------------- opcheck
def _opcheck_cases():
    rng = np.random.default_rng(13)
    probs = random_probabilities(rng, 3)
    boxes = torch.tensor([[1.5, 2.0, 9.0, 11.0], [0.0, 0.0, 20.0, 4.0], [-3.0, 5.0, 2.0, 9.5]])
    masks = torch.from_numpy(rng.random((3, 12, 9)) < 0.5)
    return {
        'paste_masks_to_rle': (probs, boxes, 12, 9, 0.5),
        'paste_masks_to_rle_whole_image': (probs, boxes, 12, 9, 0.5, False),
        'rle_encode_batch': (masks, ),
    }


@requires_opcheck
@pytest.mark.parametrize('name, args', sorted(_opcheck_cases().items()))
def test_opcheck(name, args):
    op = name.removesuffix('_whole_image')
    torch.library.opcheck(getattr(OPS, op).default, args)
