"""Native COCO mask codecs (csrc/masks/) against pycocotools, mmdet and mmcv.

pycocotools is the reference everywhere and equality is exact: same RLE counts, same compressed
string, same pixels. Crop-and-resize is compared with mmdet's PolygonMasks / BitmapMasks (whose
bitmap path is mmcv's CPU roi_align) when they are installed, and always with numpy
transcriptions of those two functions.
"""
import numpy as np
import pytest
import torch
from pycocotools import mask as mask_utils

from helpers.bounded import run_bounded
from helpers.torch_features import requires_opcheck
import mmdet_ext  # noqa: F401  (registers torch.ops.mmdet_ext)
from mmdet_ext import ops
from mmdet_ext.toy_data import make_toy_coco

OPS = torch.ops.mmdet_ext
# pycocotools' Masks.__array__ predates numpy 2's copy keyword
pytestmark = pytest.mark.filterwarnings('ignore:__array__ implementation:DeprecationWarning')


# ----------------------------------------------------------------------------- references
def coco_polygon_rle(parts: list[np.ndarray], height: int, width: int) -> dict:
    """mmdet's _poly2mask up to decode: frPyObjects + merge (parts of >= 3 points)."""
    return mask_utils.merge(mask_utils.frPyObjects([list(map(float, p)) for p in parts], height,
                                                   width))


def coco_rle(mask: np.ndarray) -> dict:
    return mask_utils.encode(np.asfortranarray(mask, dtype=np.uint8))


def native_polygon(parts: list[np.ndarray], height: int, width: int) -> torch.Tensor:
    coords, part_lengths, _ = ops.pack_polygons([parts])
    return ops.rle_from_polygons(coords, part_lengths, height, width)


def mmdet_polygon_crop_reference(parts: list[np.ndarray], box: np.ndarray, out_h: int,
                                 out_w: int) -> np.ndarray:
    """mmdet 3.3 PolygonMasks.crop_and_resize(...).to_ndarray() for one box, transcribed."""
    x1, y1, x2, y2 = box
    w = np.maximum(x2 - x1, 1)
    h = np.maximum(y2 - y1, 1)
    h_scale = out_h / max(h, 0.1)
    w_scale = out_w / max(w, 0.1)
    resized = []
    for p in parts:
        p = np.array(p, dtype=np.float64)
        p[0::2] = p[0::2] - box[0]
        p[1::2] = p[1::2] - box[1]
        p[0::2] = p[0::2] * w_scale
        p[1::2] = p[1::2] * h_scale
        resized.append(p)
    return mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(resized, out_h, out_w)))


def roi_align_binary_reference(mask: np.ndarray, box: np.ndarray, out_h: int,
                               out_w: int) -> np.ndarray:
    """mmcv CPU roi_align(aligned=True, sampling_ratio=0, 'avg') >= 0.5, transcribed to numpy.

    Every operation runs in the box dtype T in mmcv's order (sums are sequential, not
    numpy's pairwise), so the result is bit-exact.
    """
    t = box.dtype.type
    start_w, start_h, end_w, end_h = (box * t(1) - t(0.5))
    roi_w, roi_h = end_w - start_w, end_h - start_h
    bin_h, bin_w = roi_h / t(out_h), roi_w / t(out_w)
    grid_h = int(np.ceil(np.float32(roi_h / t(out_h))))
    grid_w = int(np.ceil(np.float32(roi_w / t(out_w))))
    count = t(max(grid_h * grid_w, 1))

    def axis(start, size_bin, grid, pooled, size):
        p = np.arange(pooled, dtype=t)[:, None]
        i = (np.arange(grid, dtype=np.float32) + np.float32(0.5)).astype(t)[None, :]
        y = (start + p * size_bin) + (i * size_bin) / t(grid)
        inside = ~((y < -1.0) | (y > size))
        y = np.where(y <= 0, t(0), y)
        low = np.where(inside, y, 0).astype(np.int64)
        top = low >= size - 1
        low = np.where(top, size - 1, low)
        high = np.where(top, size - 1, low + 1)
        y = np.where(top, low.astype(t), y)
        lo = (y - low.astype(t)).astype(t)
        hi = (1.0 - lo.astype(np.float64)).astype(t)
        return inside, low, high, lo, hi  # each (pooled, grid)

    yin, ylow, yhigh, ly, hy = axis(start_h, bin_h, grid_h, out_h, mask.shape[0])
    xin, xlow, xhigh, lx, hx = axis(start_w, bin_w, grid_w, out_w, mask.shape[1])
    m = mask.astype(t)
    total = np.zeros((out_h, out_w), dtype=t)
    for iy in range(grid_h):
        for ix in range(grid_w):
            valid = yin[:, iy, None] & xin[None, :, ix]
            yl, yh = ylow[:, iy, None], yhigh[:, iy, None]
            xl, xh = xlow[None, :, ix], xhigh[None, :, ix]
            w1 = hy[:, iy, None] * hx[None, :, ix]
            w2 = hy[:, iy, None] * lx[None, :, ix]
            w3 = ly[:, iy, None] * hx[None, :, ix]
            w4 = ly[:, iy, None] * lx[None, :, ix]
            val = w1 * m[yl, xl] + w2 * m[yl, xh] + w3 * m[yh, xl] + w4 * m[yh, xh]
            total = total + np.where(valid, val, t(0))
    return (total / count >= 0.5).astype(np.uint8)


# ----------------------------------------------------------------------------- polygon families
def random_parts(rng: np.random.Generator, family: str, height: int,
                 width: int) -> list[np.ndarray]:
    size = max(height, width)
    num_parts = int(rng.integers(1, 4)) if family != 'many_parts' else int(rng.integers(5, 25))
    parts = []
    for _ in range(num_parts):
        k = int(rng.integers(3, 12))
        if family == 'uniform' or family == 'many_parts':
            p = rng.uniform(-0.1 * size, 1.1 * size, 2 * k)
        elif family == 'half_pixels':  # exact pixel boundaries and .5 values
            p = np.round(rng.uniform(-2, size + 2, 2 * k) * 2) / 2
        elif family == 'fifths':  # on the rasteriser's 5x grid, and halfway between its cells
            p = np.round(rng.uniform(-2, size + 2, 2 * k) * 10) / 10
        elif family == 'integers':
            p = rng.integers(-2, size + 3, 2 * k).astype(np.float64)
        elif family == 'tiny':  # sub-pixel polygons
            c = rng.uniform(0, size, 2)
            p = np.tile(c, k) + rng.uniform(-0.6, 0.6, 2 * k)
        elif family == 'outside':  # negative and beyond-the-image coordinates
            p = rng.uniform(-3 * size, 4 * size, 2 * k)
        elif family == 'huge':  # pycocotools walks every point of such edges: keep them few
            p = rng.uniform(-2e4, 2e4, 2 * k)
        elif family == 'star':  # self-intersecting
            angles = np.sort(rng.uniform(0, 2 * np.pi, k)) * 2
            r = rng.uniform(0.2, 0.6, k) * size
            p = np.stack([size / 2 + r * np.cos(angles), size / 2 + r * np.sin(angles)], 1).ravel()
        elif family == 'degenerate':  # all points equal, or collinear
            if rng.random() < 0.5:
                p = np.tile(rng.uniform(-1, size + 1, 2), k)
            else:
                a, b = rng.uniform(-1, size + 1, 2), rng.uniform(-1, size + 1, 2)
                s = rng.uniform(-0.5, 1.5, k)[:, None]
                p = (a + s * (b - a)).ravel()
        else:
            raise ValueError(family)
        parts.append(p)
    return parts


FAMILIES = ['uniform', 'half_pixels', 'fifths', 'integers', 'tiny', 'outside', 'huge', 'star',
            'degenerate', 'many_parts']


def image_size(rng: np.random.Generator, case: int) -> tuple[int, int]:
    if case % 10 == 0:
        return 1, int(rng.integers(1, 40))
    if case % 10 == 1:
        return int(rng.integers(1, 40)), 1
    return int(rng.integers(2, 70)), int(rng.integers(2, 70))


@pytest.mark.parametrize('family', FAMILIES)
def test_polygons_match_pycocotools(family):
    rng = np.random.default_rng(FAMILIES.index(family))
    for case in range(200):
        height, width = image_size(rng, case)
        parts = random_parts(rng, family, height, width)
        ref = coco_polygon_rle(parts, height, width)
        counts = native_polygon(parts, height, width)
        assert counts.dtype == torch.int32
        assert ops.rle_to_string(counts) == ref['counts'], (family, case, height, width)
        np.testing.assert_array_equal(ops.rle_decode(counts, height, width).numpy(),
                                      mask_utils.decode(ref))
        coords, part_lengths, part_counts = ops.pack_polygons([parts])
        np.testing.assert_array_equal(
            ops.polygons_to_masks(coords, part_lengths, part_counts, height, width)[0].numpy(),
            mask_utils.decode(ref))


def test_polygon_edge_cases_match_pycocotools():
    cases = [
        ([[0, 0, 10, 0, 10, 10, 0, 10]], 10, 10),  # exactly the image
        ([[0, 0, 10, 0, 10, 10, 0, 10]], 7, 13),
        ([[-5, -5, 20, -5, 20, 20, -5, 20]], 10, 10),  # covers the image
        ([[0.5, 0.5, 3.5, 0.5, 3.5, 3.5, 0.5, 3.5]], 5, 5),
        ([[2.2, 2.2, 2.2, 2.2, 2.2, 2.2]], 5, 5),  # one repeated point
        ([[1, 1, 4, 4, 8, 8]], 10, 10),  # collinear
        ([[1, 1, 9, 9, 1, 9, 9, 1]], 10, 10),  # bow tie
        ([[0, 0, 1e-9, 0, 0, 1e-9]], 3, 3),
        ([[-1.3, -2.7, -0.1, 5.2, 3.3, -0.4]], 4, 6),  # negative coordinates (int truncation)
        ([[1, 1, 6, 1, 6, 6, 1, 6], [3, 3, 8, 3, 8, 8, 3, 8]], 10, 10),  # overlapping parts
        ([[0, 0, 5, 0, 5, 5], [0, 0, 5, 0, 5, 5]], 6, 6),  # identical parts
        ([[1, 1, 30, 1, 30, 30, 1, 30]], 1, 40),
        ([[1, 1, 30, 1, 30, 30, 1, 30]], 40, 1),
        ([[0, 0, 1, 0, 1, 1, 0, 1]], 1, 1),
        ([[-1e6, -1e6, 1e6, -1e6, 0, 1e6]], 50, 50),
        ([[-1e6, 3.3, 1e6, 7.1, 12.5, 40], [-3, 1e6, 19.7, -1e6, 12, 1e6]], 20, 30),
    ]
    for parts, height, width in cases:
        parts = [np.asarray(p, dtype=np.float64) for p in parts]
        ref = coco_polygon_rle(parts, height, width)
        assert ops.rle_to_string(native_polygon(parts, height, width)) == ref['counts'], parts


def test_work_is_bounded_by_the_image_not_the_coordinates():
    """Edges spanning the coordinate limit (+-2^24 px) cost about as much as the image they
    cross: pycocotools would walk ~1.7e8 boundary points per edge, 5e10 for these 100 parts."""
    limit = float(2**24)
    # a wedge from far left to far right, about rows 15 to 17.5 where it crosses the image
    triangle = torch.tensor([-limit, 10.0, limit, 20.0, limit, 25.0], dtype=torch.float64)
    single = OPS.rle_from_polygons(triangle, torch.tensor([6]), 30, 40)
    assert 0 < ops.rle_area(single) < 30 * 40
    union = OPS.rle_from_polygons(triangle.repeat(100), torch.full((100, ), 6), 30, 40)
    assert torch.equal(union, single)
    # The bound itself: the same union within 30 CPU s and 1 GiB (one edge's walk alone would
    # hold 1.7e8 points, 2.7 GB; all of them, 5e10).
    run_bounded('''
        limit = float(2**24)
        triangle = torch.tensor([-limit, 10.0, limit, 20.0, limit, 25.0], dtype=torch.float64)
        OPS.rle_from_polygons(triangle.repeat(100), torch.full((100, ), 6), 30, 40)
    ''', cpu_seconds=30, extra_address_space=1 << 30)


def test_parts_of_one_or_two_points_are_empty_like_frpoly():
    for part in ([3.0, 4.0], [1.0, 1.0, 8.0, 6.0], [0.0, 9.0, 9.0, 0.0]):
        ref = mask_utils._mask.frPoly([part], 10, 10)[0]
        assert ops.rle_to_string(native_polygon([np.array(part)], 10, 10)) == ref['counts']
        assert ops.rle_decode(native_polygon([np.array(part)], 10, 10), 10, 10).sum() == 0
    # and they add nothing to the union of an instance
    triangle = np.array([1.0, 1.0, 8.0, 2.0, 4.0, 8.0])
    ref = coco_polygon_rle([triangle], 10, 10)
    with_segment = native_polygon([triangle, np.array([0.0, 0.0, 9.0, 9.0])], 10, 10)
    assert ops.rle_to_string(with_segment) == ref['counts']


def test_no_parts_and_empty_images():
    empty = torch.zeros(0, dtype=torch.float64)
    no_parts = torch.zeros(0, dtype=torch.int64)
    assert OPS.rle_from_polygons(empty, no_parts, 4, 5).tolist() == [20]
    triangle = torch.tensor([1.0, 1.0, 3.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    # pycocotools gives [0] for a 0-row image (for 0 columns its counts do not even sum to 0)
    assert mask_utils.frPyObjects([triangle.tolist()], 0, 10)[0]['counts'] == b'0'
    assert OPS.rle_from_polygons(triangle, torch.tensor([6]), 0, 10).tolist() == [0]
    assert OPS.rle_from_polygons(triangle, torch.tensor([6]), 10, 0).tolist() == [0]
    masks = OPS.polygons_to_masks(triangle, torch.tensor([6]), torch.tensor([1]), 0, 10)
    assert masks.shape == (1, 0, 10)
    masks = OPS.polygons_to_masks(empty, no_parts, torch.tensor([0, 0]), 3, 4)
    assert masks.shape == (2, 3, 4) and masks.sum() == 0


def test_batched_polygons_to_masks_matches_per_instance():
    rng = np.random.default_rng(7)
    instances = [random_parts(rng, 'uniform', 40, 50) for _ in range(9)]
    instances[3] = []  # an instance without parts decodes to an empty mask
    coords, part_lengths, part_counts = ops.pack_polygons(instances)
    masks = ops.polygons_to_masks(coords, part_lengths, part_counts, 40, 50)
    assert masks.shape == (9, 40, 50) and masks.dtype == torch.uint8 and masks.is_contiguous()
    for mask, parts in zip(masks, instances):
        expected = mask_utils.decode(coco_polygon_rle(parts, 40, 50)) if parts else 0
        np.testing.assert_array_equal(mask.numpy(), expected)


@pytest.fixture(scope='module')
def toy_coco(tmp_path_factory):
    import json
    summary = make_toy_coco(tmp_path_factory.mktemp('toy'), num_train=6, num_val=3, width=160,
                            height=120)
    data = [json.loads(open(summary[split]['json']).read()) for split in ('train', 'val')]
    return data


def test_toy_coco_annotations_match_pycocotools(toy_coco):
    checked = {'polygon': 0, 'rle': 0}
    for data in toy_coco:
        sizes = {img['id']: (img['height'], img['width']) for img in data['images']}
        for ann in data['annotations']:
            height, width = sizes[ann['image_id']]
            seg = ann['segmentation']
            if isinstance(seg, list):
                ref = coco_polygon_rle([np.array(p) for p in seg], height, width)
                counts = native_polygon([np.array(p) for p in seg], height, width)
                assert ops.rle_to_string(counts) == ref['counts']
                checked['polygon'] += 1
            else:
                if isinstance(seg['counts'], str):  # compressed (train split)
                    ref = {'size': seg['size'], 'counts': seg['counts'].encode()}
                    counts = ops.rle_from_string(seg['counts'], height, width)
                else:
                    ref = mask_utils.frPyObjects(seg, height, width)
                    counts = torch.tensor(seg['counts'])
                np.testing.assert_array_equal(
                    ops.rle_decode(counts, height, width).numpy(), mask_utils.decode(ref))
                assert ops.rle_to_string(counts) == ref['counts']
                checked['rle'] += 1
    assert checked['polygon'] > 20 and checked['rle'] > 0


# ----------------------------------------------------------------------------- RLE codecs
def random_masks(rng: np.random.Generator):
    sizes = [(1, 1), (1, 17), (23, 1), (5, 7), (32, 48), (64, 3), (100, 120)]
    for height, width in sizes:
        for density in (0.0, 0.02, 0.5, 0.98, 1.0):
            yield (rng.random((height, width)) < density).astype(np.uint8)
        blocky = np.zeros((height, width), np.uint8)
        blocky[height // 4:3 * height // 4 + 1, width // 3:] = 1
        yield blocky


def test_rle_codecs_match_pycocotools():
    for mask in random_masks(np.random.default_rng(1)):
        height, width = mask.shape
        ref = coco_rle(mask)
        counts = ops.rle_encode(torch.from_numpy(mask))
        assert counts.dtype == torch.int32
        assert ops.rle_to_string(counts) == ref['counts']
        assert torch.equal(ops.rle_from_string(ref['counts'], height, width), counts)
        decoded = ops.rle_decode(counts, height, width)
        assert decoded.dtype == torch.uint8 and decoded.is_contiguous()
        np.testing.assert_array_equal(decoded.numpy(), mask_utils.decode(ref))
        assert ops.rle_area(counts) == int(mask_utils.area(ref))
        np.testing.assert_array_equal(ops.rle_to_bbox(counts, height, width).numpy(),
                                      mask_utils.toBbox(ref))


def test_encode_accepts_bool_and_fortran_masks_and_reads_nonzero_as_foreground():
    mask = np.random.default_rng(2).random((13, 9)) < 0.4
    expected = ops.rle_encode(torch.from_numpy(mask.astype(np.uint8)))
    assert torch.equal(ops.rle_encode(torch.from_numpy(mask)), expected)
    assert torch.equal(ops.rle_encode(torch.from_numpy(np.asfortranarray(mask))), expected)
    assert torch.equal(ops.rle_encode(torch.from_numpy(mask.astype(np.uint8) * 255)), expected)


def test_rle_decode_batch_matches_single_decodes():
    masks = list(random_masks(np.random.default_rng(3)))
    same_size = [m for m in masks if m.shape == (32, 48)]
    counts, run_counts = ops.pack_counts([ops.rle_encode(torch.from_numpy(m)) for m in same_size])
    decoded = ops.rle_decode_batch(counts, run_counts, 32, 48)
    np.testing.assert_array_equal(decoded.numpy(), np.stack(same_size))
    assert ops.rle_decode_batch(*ops.pack_counts([]), 32, 48).shape == (0, 32, 48)


def test_into_ops_write_what_the_functional_ops_return():
    """rle_decode_batch_into / polygons_to_masks_into (what LazyInstanceMasks.to_tensor calls):
    every pixel of out overwritten, stale contents included, equal to the functional op."""
    rng = np.random.default_rng(11)
    masks = [(rng.random((32, 48)) < p).astype(np.uint8) for p in (0.0, 0.3, 1.0)]
    rles = ops.pack_counts([ops.rle_encode(torch.from_numpy(m)) for m in masks])
    out = torch.full((3, 32, 48), 7, dtype=torch.uint8)
    assert ops.rle_decode_batch_into(*rles, out) is None
    assert torch.equal(out, ops.rle_decode_batch(*rles, 32, 48))
    instances = [random_parts(rng, 'uniform', 40, 50) for _ in range(5)]
    instances[2] = []
    polygons = ops.pack_polygons(instances)
    out = torch.full((5, 40, 50), 7, dtype=torch.uint8)
    ops.polygons_to_masks_into(*polygons, out)
    assert torch.equal(out, ops.polygons_to_masks(*polygons, 40, 50))
    empty = torch.full((5, 0, 50), 7, dtype=torch.uint8)
    ops.polygons_to_masks_into(*polygons, empty)  # a 0-pixel image: nothing to paint
    ops.rle_decode_batch_into(*ops.pack_counts([]), torch.empty(0, 32, 48, dtype=torch.uint8))


def test_counts_as_int64_and_uncompressed_coco_form():
    rle = {'size': [4, 5], 'counts': [0, 3, 2, 1, 14]}
    ref = mask_utils.frPyObjects(rle, 4, 5)
    counts = torch.tensor(rle['counts'], dtype=torch.int64)
    assert ops.rle_to_string(counts) == ref['counts']
    np.testing.assert_array_equal(ops.rle_decode(counts, 4, 5).numpy(), mask_utils.decode(ref))


def test_empty_rle_and_zero_sized_masks():
    for height, width in [(0, 0), (0, 7), (7, 0)]:
        mask = np.zeros((height, width), np.uint8)
        counts = ops.rle_encode(torch.from_numpy(mask))
        assert counts.tolist() == [0]
        if height == 0:  # pycocotools cannot encode (7, 0): numpy refuses its Fortran buffer
            assert ops.rle_to_string(counts) == coco_rle(mask)['counts']
        assert ops.rle_decode(counts, height, width).shape == (height, width)
        assert ops.rle_area(counts) == 0
    assert ops.rle_decode(torch.zeros(0, dtype=torch.int32), 0, 3).shape == (0, 3)
    assert ops.rle_to_bbox(torch.tensor([12]), 3, 4).tolist() == [0, 0, 0, 0]
    assert ops.rle_from_string(b'', 0, 0).tolist() == []
    assert ops.rle_to_string(torch.zeros(0, dtype=torch.int32)) == b''


def test_rle_to_bbox_of_odd_rles_matches_pycocotools():
    # a zero-length foreground run, and no foreground run among an even number of runs
    for counts, height, width in [([5, 0, 15], 4, 5), ([3, 0, 2, 0, 15], 4, 5), ([20, 0], 4, 5),
                                  ([0, 20], 4, 5), ([3, 9, 8], 4, 5), ([7, 1, 12], 4, 5)]:
        ref = mask_utils.frPyObjects({'size': [height, width], 'counts': counts}, height, width)
        np.testing.assert_array_equal(
            ops.rle_to_bbox(torch.tensor(counts), height, width).numpy(), mask_utils.toBbox(ref))


def test_string_codec_on_large_counts_and_negative_deltas():
    rng = np.random.default_rng(4)
    height, width = 3000, 4000  # runs up to 1.2e7: values of 5-6 characters, both signs
    for _ in range(20):
        cuts = np.sort(rng.choice(height * width, int(rng.integers(1, 40)), replace=False))
        counts = np.diff(np.concatenate([[0], cuts, [height * width]])).astype(np.uint32)
        rle = {'size': [height, width], 'counts': counts.tolist()}
        ref = mask_utils.frPyObjects(rle, height, width)
        native = torch.from_numpy(counts.astype(np.int64))
        assert ops.rle_to_string(native) == ref['counts']
        assert ops.rle_from_string(ref['counts'], height, width).tolist() == counts.tolist()


def test_merge_matches_pycocotools():
    rng = np.random.default_rng(5)
    for case in range(100):
        height, width = image_size(rng, case)
        masks = [(rng.random((height, width)) < rng.random()).astype(np.uint8)
                 for _ in range(int(rng.integers(1, 5)))]
        refs = [coco_rle(m) for m in masks]
        counts, run_counts = ops.pack_counts([ops.rle_encode(torch.from_numpy(m))
                                              for m in masks])
        for intersect in (False, True):
            merged = ops.rle_merge(counts, run_counts, height, width, intersect)
            assert ops.rle_to_string(merged) == mask_utils.merge(refs, intersect)['counts']


# ----------------------------------------------------------------------------- crop and resize
def random_boxes(rng: np.random.Generator, n: int, height: int, width: int,
                 dtype=np.float32) -> np.ndarray:
    x = np.sort(rng.uniform(-5, width + 5, (n, 2)), axis=1)
    y = np.sort(rng.uniform(-5, height + 5, (n, 2)), axis=1)
    boxes = np.stack([x[:, 0], y[:, 0], x[:, 1], y[:, 1]], axis=1)
    boxes[: n // 4, 2:] = boxes[: n // 4, :2] + rng.uniform(0, 1.5, (n // 4, 2))  # < 1 px boxes
    boxes[n // 4: n // 2] = np.round(boxes[n // 4: n // 2] * 2) / 2
    if dtype == np.float32:  # as mmdet's mask target: proposals clipped to the image
        boxes[n // 2:, [0, 2]] = np.clip(boxes[n // 2:, [0, 2]], 0, width)
        boxes[n // 2:, [1, 3]] = np.clip(boxes[n // 2:, [1, 3]], 0, height)
    return boxes.astype(dtype)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_polygons_crop_and_resize_matches_mmdet_reference(dtype):
    rng = np.random.default_rng(6)
    height, width = 90, 120
    instances = [random_parts(rng, family, height, width)
                 for family in ('uniform', 'star', 'half_pixels', 'tiny', 'outside')] * 2
    coords, part_lengths, part_counts = ops.pack_polygons(instances)
    for out_shape in [(28, 28), (14, 20), (1, 5)]:
        boxes = random_boxes(rng, 64, height, width, dtype)
        inds = rng.integers(0, len(instances), len(boxes))
        crops = ops.polygons_crop_and_resize(coords, part_lengths, part_counts,
                                             torch.from_numpy(boxes), torch.from_numpy(inds),
                                             out_shape)
        assert crops.shape == (len(boxes), *out_shape) and crops.dtype == torch.uint8
        for crop, box, i in zip(crops.numpy(), boxes, inds):
            expected = mmdet_polygon_crop_reference(instances[i], box, *out_shape)
            np.testing.assert_array_equal(crop, expected)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_rle_crop_and_resize_matches_roi_align_reference(dtype):
    rng = np.random.default_rng(8)
    height, width = 70, 90
    masks = [(np.random.default_rng(i).random((height, width)) < d).astype(np.uint8)
             for i, d in enumerate([0.3, 0.6, 0.0, 1.0])]
    masks += [mask_utils.decode(coco_polygon_rle(random_parts(rng, 'star', height, width), height,
                                                 width)) for _ in range(4)]
    counts, run_counts = ops.pack_counts([ops.rle_encode(torch.from_numpy(m)) for m in masks])
    for out_shape in [(28, 28), (7, 11)]:
        boxes = random_boxes(rng, 48, height, width, dtype)
        inds = rng.integers(0, len(masks), len(boxes))
        crops = ops.rle_crop_and_resize(counts, run_counts, height, width,
                                        torch.from_numpy(boxes), torch.from_numpy(inds), out_shape)
        for crop, box, i in zip(crops.numpy(), boxes, inds):
            np.testing.assert_array_equal(crop, roi_align_binary_reference(masks[i], box,
                                                                           *out_shape))


@pytest.mark.parametrize('seed, out_shape', [(9, (28, 28)), (10, (14, 14)), (11, (7, 13))])
def test_crop_and_resize_match_mmdet(seed, out_shape):
    structures = pytest.importorskip('mmdet.structures.mask')
    rng = np.random.default_rng(seed)
    height, width = 80, 100
    instances = [random_parts(rng, family, height, width)
                 for family in ('uniform', 'star', 'half_pixels', 'tiny', 'outside', 'many_parts')]
    boxes = random_boxes(rng, 60, height, width)
    inds = rng.integers(0, len(instances), len(boxes))
    polygon_masks = structures.PolygonMasks(instances, height, width)
    expected = polygon_masks.crop_and_resize(boxes, out_shape, inds).to_ndarray()
    coords, part_lengths, part_counts = ops.pack_polygons(instances)
    crops = ops.polygons_crop_and_resize(coords, part_lengths, part_counts,
                                         torch.from_numpy(boxes), torch.from_numpy(inds), out_shape)
    np.testing.assert_array_equal(crops.numpy(), expected)

    bitmaps = polygon_masks.to_ndarray()
    expected = structures.BitmapMasks(bitmaps, height, width).crop_and_resize(
        boxes, out_shape, inds).to_ndarray()
    counts, run_counts = ops.pack_counts([ops.rle_encode(torch.from_numpy(m)) for m in bitmaps])
    crops = ops.rle_crop_and_resize(counts, run_counts, height, width, torch.from_numpy(boxes),
                                    torch.from_numpy(inds), out_shape)
    np.testing.assert_array_equal(crops.numpy(), expected)


# ----------------------------------------------------------------------------- bad input
TRIANGLE = torch.tensor([1.0, 1.0, 5.0, 1.0, 3.0, 4.0], dtype=torch.float64)
ONE_PART = torch.tensor([6])
BOX = torch.tensor([[0.0, 0.0, 4.0, 4.0]])
IND = torch.tensor([0])


@pytest.mark.parametrize('call, message', [
    (lambda: OPS.rle_decode(torch.tensor([3, 4]), 2, 4), 'sum to 7 but a 2x4 mask has 8'),
    (lambda: OPS.rle_decode(torch.tensor([9, -1]), 2, 4), 'out of range'),
    (lambda: OPS.rle_decode(torch.tensor([8.0]), 2, 4), '1-D integer tensor'),
    (lambda: OPS.rle_decode(torch.tensor([[8]]), 2, 4), '1-D integer tensor'),
    (lambda: OPS.rle_decode(torch.tensor([8]), -2, -4), 'must be non-negative'),
    (lambda: OPS.rle_decode(torch.tensor([0]), 65536, 32768), 'more than 2\\^31 - 1 pixels'),
    (lambda: OPS.rle_decode_batch(torch.tensor([8, 8]), torch.tensor([1]), 2, 4),
     'run_counts sum to 1 but counts holds 2'),
    (lambda: OPS.rle_decode_batch(torch.tensor([8, 7]), torch.tensor([1, 1]), 2, 4),
     'counts of RLE 1 sum to 7'),
    (lambda: OPS.rle_encode(torch.zeros(2, 3, 1, dtype=torch.uint8)), r'\(height, width\)'),
    (lambda: OPS.rle_encode(torch.zeros(2, 3)), 'uint8 or bool'),
    (lambda: ops.rle_from_string(b'1 2', 1, 3), 'not a COCO RLE character'),
    (lambda: ops.rle_from_string(b'1\x00', 1, 3), 'not a COCO RLE character'),
    (lambda: ops.rle_from_string(b'1P', 1, 3), 'ends inside the value'),
    (lambda: ops.rle_from_string(b'PPPPPPP1', 1, 3), 'longer than 7 characters'),
    (lambda: ops.rle_from_string(b'12', 1, 4), 'sum to 3 but a 1x4 mask has 4'),
    (lambda: ops.rle_from_string(b'111K', 1, 3), 'decodes to run length -4'),
    (lambda: OPS.rle_from_string(torch.zeros(2, 2, dtype=torch.uint8), 1, 3), '1-D uint8'),
    (lambda: OPS.rle_merge(torch.zeros(0, dtype=torch.int32), torch.zeros(0, dtype=torch.int64),
                           2, 2), 'at least one RLE'),
    (lambda: OPS.rle_to_bbox(torch.tensor([5]), 2, 2), 'sum to 5 but a 2x2 mask has 4'),
    (lambda: OPS.rle_area(torch.tensor([2, -3])), 'out of range'),
    (lambda: OPS.rle_to_string(torch.tensor([2**31])), 'out of range'),
    (lambda: OPS.rle_from_polygons(TRIANGLE[:5], torch.tensor([5]), 8, 8), 'positive, even'),
    (lambda: OPS.rle_from_polygons(TRIANGLE, torch.tensor([6, 0]), 8, 8), 'part 1 has 0'),
    (lambda: OPS.rle_from_polygons(TRIANGLE, torch.tensor([4]), 8, 8),
     'part_lengths sum to 4 but coords holds 6'),
    (lambda: OPS.rle_from_polygons(torch.tensor([1.0, float('nan'), 3, 4, 5, 6],
                                                dtype=torch.float64), ONE_PART, 8, 8),
     'coordinate 1 is nan'),
    (lambda: OPS.rle_from_polygons(torch.tensor([1.0, 2, 3, float('-inf'), 5, 6],
                                                dtype=torch.float64), ONE_PART, 8, 8),
     'coordinate 3 is -inf'),
    (lambda: OPS.rle_from_polygons(torch.tensor([1.0, 2, 3, 4, 5, 2e7], dtype=torch.float64),
                                   ONE_PART, 8, 8), 'beyond \\+-2\\^24'),
    (lambda: OPS.rle_from_polygons(TRIANGLE, ONE_PART, 50000, 50000), 'more than 2\\^31'),
    (lambda: OPS.rle_from_polygons(TRIANGLE.view(2, 3), ONE_PART, 8, 8), '1-D float64'),
    (lambda: OPS.polygons_to_masks(TRIANGLE, ONE_PART, torch.tensor([2]), 8, 8),
     'part_counts sum to 2 but part_lengths describes 1'),
    (lambda: OPS.polygons_to_masks(TRIANGLE, ONE_PART, torch.tensor([2, -1]), 8, 8),
     'negative count'),
    (lambda: OPS.polygons_to_masks_into(TRIANGLE, ONE_PART, IND + 1,
                                        torch.zeros(2, 8, 8, dtype=torch.uint8)),
     'out has room for 2 masks, the input holds 1'),
    (lambda: OPS.polygons_to_masks_into(TRIANGLE, ONE_PART, IND + 1, torch.zeros(1, 8, 8)),
     'contiguous uint8 tensor'),
    (lambda: OPS.rle_decode_batch_into(torch.tensor([64]), IND + 1,
                                       torch.zeros(8, 8, 1, dtype=torch.uint8).transpose(0, 2)),
     r'\(not contiguous\)'),
    (lambda: OPS.rle_decode_batch_into(torch.tensor([64]), IND + 1,
                                       torch.zeros(1, 8, 7, dtype=torch.uint8)),
     'sum to 64 but a 8x7 mask has 56'),
    (lambda: OPS.rle_decode_batch_into(torch.tensor([64]), IND + 1,
                                       torch.zeros(8, 8, dtype=torch.uint8)), r'\[N, height'),
    (lambda: OPS.polygons_crop_and_resize(TRIANGLE, ONE_PART, IND + 1, BOX, IND + 1, 28, 28),
     'inds\\[0\\] = 1 is out of range for 1 masks'),
    (lambda: OPS.polygons_crop_and_resize(TRIANGLE, ONE_PART, IND + 1, BOX[:, :3], IND, 28, 28),
     r'\(N, 4\)'),
    (lambda: OPS.polygons_crop_and_resize(TRIANGLE, ONE_PART, IND + 1, BOX, IND, 0, 28),
     'must be positive'),
    (lambda: OPS.polygons_crop_and_resize(TRIANGLE, ONE_PART, IND + 1, BOX * float('nan'), IND,
                                          28, 28), 'non-finite'),
    (lambda: OPS.polygons_crop_and_resize(TRIANGLE, ONE_PART, IND + 1, BOX, IND.repeat(2), 28,
                                          28), 'one mask index per box'),
    (lambda: OPS.rle_crop_and_resize(torch.tensor([64]), IND + 1, 8, 8,
                                     torch.tensor([[4.0, 0, 2, 4]]), IND, 28, 28),
     'x2 >= x1 and y2 >= y1'),
    (lambda: OPS.rle_crop_and_resize(torch.tensor([64]), IND + 1, 8, 8, BOX, IND + 3, 28, 28),
     'inds\\[0\\] = 3 is out of range for 1 masks'),
    (lambda: OPS.rle_crop_and_resize(torch.tensor([64]), IND + 1, 8, 8, BOX.half(), IND, 28, 28),
     'float32 or float64'),
])
def test_bad_input_gives_clear_error(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# ----------------------------------------------------------------------------- opcheck
def _opcheck_cases():
    mask = torch.from_numpy((np.random.default_rng(10).random((12, 9)) < 0.5).astype(np.uint8))
    counts = OPS.rle_encode(mask)
    packed = ops.pack_counts([counts, OPS.rle_encode(1 - mask)])
    coords, part_lengths, part_counts = ops.pack_polygons(
        [[[1.0, 1.0, 7.0, 2.0, 4.0, 9.0]], [[0.0, 0.0, 5.0, 0.0, 5.0, 5.0], [6, 6, 8, 6, 8, 8]]])
    boxes = torch.tensor([[0.5, 1.0, 8.0, 10.0], [2.0, 2.0, 3.0, 3.0]])
    inds = torch.tensor([1, 0])
    return {
        'rle_encode': (mask, ),
        'rle_decode': (counts, 12, 9),
        'rle_decode_batch': (*packed, 12, 9),
        'rle_decode_batch_into': (*packed, torch.zeros(2, 12, 9, dtype=torch.uint8)),
        'rle_to_string': (counts, ),
        'rle_from_string': (OPS.rle_to_string(counts), 12, 9),
        'rle_merge': (*packed, 12, 9, True),
        'rle_area': (counts, ),
        'rle_to_bbox': (counts, 12, 9),
        'rle_crop_and_resize': (*packed, 12, 9, boxes, inds, 7, 5),
        'rle_from_polygons': (coords[:6], part_lengths[:1], 12, 9),
        'polygons_to_masks': (coords, part_lengths, part_counts, 12, 9),
        'polygons_to_masks_into': (coords, part_lengths, part_counts,
                                   torch.zeros(2, 12, 9, dtype=torch.uint8)),
        'polygons_crop_and_resize': (coords, part_lengths, part_counts, boxes, inds, 7, 5),
    }


@requires_opcheck
@pytest.mark.parametrize('name, args', sorted(_opcheck_cases().items()))
def test_opcheck(name, args):
    torch.library.opcheck(getattr(OPS, name).default, args)
