"""LazyInstanceMasks' native paths (crop_and_resize, areas, get_bboxes) against mmdet's
PolygonMasks / BitmapMasks, bit for bit, on polygon, RLE, PNG and transformed-raster instances."""
import cv2
import numpy as np
import pytest
import torch
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from pycocotools import mask as mask_utils

from mmdet_ext.structures import LazyInstanceMasks, LazyPolygonMasks, RasterSource
from helpers.build import needs_native_decoding

HEIGHT, WIDTH = 96, 128
DEVICES = ['cpu', pytest.param('cuda', marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason='needs a CUDA device'))]


def _polygon(rng, parts: int) -> list:
    """An instance of `parts` random star-shaped parts, some reaching outside the image."""
    instance = []
    for _ in range(parts):
        k = int(rng.integers(3, 40))
        angles = np.sort(rng.uniform(0, 2 * np.pi, k))
        radii = rng.uniform(5, 45, k)
        centre = rng.uniform([-10, -10], [WIDTH + 10, HEIGHT + 10])
        xy = centre + np.stack([radii * np.cos(angles), radii * np.sin(angles)], 1)
        instance.append(np.round(xy, 3).ravel())
    return instance


def _rle(mask: np.ndarray) -> RasterSource:
    counts = mask_utils.encode(np.asfortranarray(mask))['counts'].decode('ascii')
    return RasterSource('rle', counts, *mask.shape)


def _blob(rng) -> np.ndarray:
    """A random 0/1 mask: the union of a few ellipses, so its runs wrap across columns."""
    mask = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        centre = tuple(int(v) for v in rng.integers([0, 0], [WIDTH, HEIGHT]))
        axes = tuple(int(v) for v in rng.integers(3, 50, 2))
        cv2.ellipse(mask, centre, axes, float(rng.uniform(0, 180)), 0, 360, 1, -1)
    return mask


def _png(rng, path) -> RasterSource:
    cv2.imwrite(str(path), _blob(rng) * 255)
    return RasterSource('png', str(path), HEIGHT, WIDTH)


def _mixed(rng, tmp_path) -> LazyInstanceMasks:
    """Polygons (one and three parts), plain RLEs (an empty one and a full one too), a PNG, an
    RLE with a pending flip and a final bitmap."""
    items = [_polygon(rng, 1), _rle(_blob(rng)), _polygon(rng, 3), _png(rng, tmp_path / 'a.png'),
             _rle(_blob(rng)).then('flip', 'horizontal'), _rle(np.zeros((HEIGHT, WIDTH), np.uint8)),
             _polygon(rng, 2), RasterSource.from_bitmap(_blob(rng)),
             _rle(np.ones((HEIGHT, WIDTH), np.uint8)), _rle(_blob(rng))]
    return LazyInstanceMasks(items, HEIGHT, WIDTH)


def _one(lazy: LazyInstanceMasks, i: int):
    """mmdet's masks for instance i alone."""
    item = lazy.items[i]
    if isinstance(item, RasterSource):
        return BitmapMasks(item.bitmap()[None], lazy.height, lazy.width)
    return PolygonMasks([item], lazy.height, lazy.width)


def _expected_targets(lazy, boxes, inds, out_shape, **kwargs) -> list:
    return [_one(lazy, ind).crop_and_resize(boxes[b:b + 1], out_shape, np.zeros(1, int),
                                            **kwargs).to_ndarray()[0]
            for b, ind in enumerate(inds)]


def _boxes(rng, n: int, dtype) -> np.ndarray:
    """Boxes of 0.5-90 px, a third of them reaching outside the image, some a single pixel."""
    x1y1 = rng.uniform([-20, -20], [WIDTH, HEIGHT], (n, 2))
    boxes = np.concatenate([x1y1, x1y1 + rng.uniform(0.5, 90, (n, 2))], axis=1)
    boxes[::7, 2:] = boxes[::7, :2]
    return boxes.astype(dtype)


@pytest.mark.parametrize('dtype', [np.float32, np.float64])
@pytest.mark.parametrize('out_shape', [(28, 28), (14, 9)])
@needs_native_decoding
def test_crop_and_resize_equals_mmdet_per_instance(tmp_path, dtype, out_shape):
    rng = np.random.default_rng(0)
    lazy = _mixed(rng, tmp_path)
    boxes = _boxes(rng, 200, dtype)
    inds = rng.integers(0, len(lazy), len(boxes))  # every instance, most of them repeatedly
    result = lazy.crop_and_resize(boxes, out_shape, inds)
    assert isinstance(result, BitmapMasks)
    targets = result.to_ndarray()
    assert targets.shape == (len(boxes), *out_shape) and targets.dtype == np.uint8
    for box, expected in enumerate(_expected_targets(lazy, boxes, inds, out_shape)):
        np.testing.assert_array_equal(targets[box], expected, err_msg=f'box {box}')


@pytest.mark.parametrize('to_inds', [list, np.asarray, torch.tensor, lambda i: torch.tensor(
    i, dtype=torch.int32)], ids=['list', 'ndarray', 'tensor', 'int32-tensor'])
@needs_native_decoding
def test_crop_and_resize_accepts_every_index_form(tmp_path, to_inds):
    rng = np.random.default_rng(1)
    lazy = _mixed(rng, tmp_path)
    boxes = _boxes(rng, 30, np.float32)
    inds = rng.integers(0, len(lazy), len(boxes)).tolist()
    expected = lazy.crop_and_resize(boxes, (28, 28), np.asarray(inds)).to_ndarray()
    np.testing.assert_array_equal(lazy.crop_and_resize(boxes, (28, 28), to_inds(inds)).to_ndarray(),
                                  expected)


@pytest.mark.parametrize('device', DEVICES)
def test_crop_and_resize_on_device_equals_mmdet(device):
    """With mmdet's `device` argument; the targets come back on the CPU."""
    rng = np.random.default_rng(2)
    items = [_polygon(rng, 2), _rle(_blob(rng)), _polygon(rng, 1), _rle(_blob(rng))]
    lazy = LazyInstanceMasks(items, HEIGHT, WIDTH)
    boxes = _boxes(rng, 64, np.float32)
    inds = rng.integers(0, len(lazy), len(boxes))
    targets = lazy.crop_and_resize(boxes, (28, 28), torch.from_numpy(inds), device=device)
    for box, expected in enumerate(_expected_targets(lazy, boxes, inds, (28, 28))):
        np.testing.assert_array_equal(targets.to_ndarray()[box], expected)


def test_crop_and_resize_runs_the_cpu_kernels_whatever_the_device(monkeypatch):
    """mmdet wants an ndarray back: sending polygons and RLEs to a GPU kernel would cost
    blocking copies both ways. Even where this build has every kernel for `device` (faked
    here), the native ops get their inputs on the CPU."""
    import mmdet_ext.structures.lazy_masks as lazy_masks
    monkeypatch.setattr(lazy_masks, 'has_kernel', lambda op_name, device: True)
    devices = []
    for name in ('polygons_crop_and_resize', 'rle_crop_and_resize'):
        def recording(*args, op=getattr(lazy_masks, name)):
            devices.extend(a.device.type for a in args if isinstance(a, torch.Tensor))
            return op(*args)
        monkeypatch.setattr(lazy_masks, name, recording)
    rng = np.random.default_rng(2)
    lazy = LazyInstanceMasks([_polygon(rng, 2), _rle(_blob(rng))], HEIGHT, WIDTH)
    boxes, inds = _boxes(rng, 8, np.float32), rng.integers(0, 2, 8)
    targets = lazy.crop_and_resize(boxes, (28, 28), inds, device='cuda')
    assert devices and set(devices) == {'cpu'}
    for box, expected in enumerate(_expected_targets(lazy, boxes, inds, (28, 28))):
        np.testing.assert_array_equal(targets.to_ndarray()[box], expected)


def test_crop_and_resize_of_nothing_is_empty(tmp_path):
    lazy = _mixed(np.random.default_rng(3), tmp_path)
    for masks, boxes in ((lazy, np.zeros((0, 4), np.float32)),
                         (LazyInstanceMasks([], HEIGHT, WIDTH), np.array([[0, 0, 9, 9.]]))):
        result = masks.crop_and_resize(boxes, (28, 14), np.zeros(len(boxes), int))
        assert isinstance(result, BitmapMasks)
        assert result.to_ndarray().shape == (0, 28, 14)


def test_interpolation_is_ignored_as_in_mmdet(tmp_path):
    rng = np.random.default_rng(4)
    lazy = _mixed(rng, tmp_path)
    boxes = _boxes(rng, 40, np.float32)
    inds = rng.integers(0, len(lazy), len(boxes))
    targets = lazy.crop_and_resize(boxes, (28, 28), inds, interpolation='nearest').to_ndarray()
    expected = _expected_targets(lazy, boxes, inds, (28, 28), interpolation='nearest')
    np.testing.assert_array_equal(targets, np.stack(expected))


@needs_native_decoding
def test_soft_targets_go_through_bitmap_masks(tmp_path):
    rng = np.random.default_rng(5)
    lazy = _mixed(rng, tmp_path)
    rasters = [i for i, item in enumerate(lazy.items) if isinstance(item, RasterSource)]
    boxes = _boxes(rng, 40, np.float32)
    inds = rng.choice(rasters, len(boxes))
    targets = lazy.crop_and_resize(boxes, (28, 28), inds, binarize=False).to_ndarray()
    expected = np.stack(_expected_targets(lazy, boxes, inds, (28, 28), binarize=False))
    assert targets.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(targets, expected)
    with pytest.raises(ValueError, match='Polygons are always binary'):
        lazy.crop_and_resize(boxes[:1], (28, 28), [0], binarize=False)


@needs_native_decoding
def test_areas_equal_mmdet_exactly(tmp_path):
    """The bitmap flavour counts pixels (BitmapMasks), the polygon flavour uses the shoelace
    formula (PolygonMasks)."""
    for seed in range(5):
        lazy = _mixed(np.random.default_rng(seed), tmp_path)
        expected = BitmapMasks(lazy.to_ndarray(), HEIGHT, WIDTH).areas
        np.testing.assert_array_equal(lazy.areas, expected)
        assert lazy.areas.dtype == expected.dtype
        polygons = [item for item in lazy.items if not isinstance(item, RasterSource)]
        np.testing.assert_array_equal(LazyPolygonMasks(polygons, HEIGHT, WIDTH).areas,
                                      PolygonMasks(polygons, HEIGHT, WIDTH).areas)


@needs_native_decoding
def test_get_bboxes_equal_mmdet_exactly(tmp_path):
    for seed in range(5):
        lazy = _mixed(np.random.default_rng(seed), tmp_path)
        expected = BitmapMasks(lazy.to_ndarray(), HEIGHT, WIDTH).get_bboxes(HorizontalBoxes)
        boxes = lazy.get_bboxes('hbox')
        assert isinstance(boxes, HorizontalBoxes)
        np.testing.assert_array_equal(boxes.numpy(), expected.numpy())
        polygons = [item for item in lazy.items if not isinstance(item, RasterSource)]
        np.testing.assert_array_equal(
            LazyPolygonMasks(polygons, HEIGHT, WIDTH).get_bboxes('hbox').numpy(),
            PolygonMasks(polygons, HEIGHT, WIDTH).get_bboxes(HorizontalBoxes).numpy())
    assert not expected.numpy()[5].any()  # the empty RLE: zeros, as BitmapMasks gives
    np.testing.assert_array_equal(expected.numpy()[8], [0, 0, WIDTH, HEIGHT])


def test_polygon_bboxes_start_from_mmdet_bounds():
    """An instance left of and above the image keeps x2, y2 = 0; one without parts keeps
    mmdet's starting values."""
    items = [[np.array([-30., -20, -5, -20, -5, -2])], [],
             [np.array([10., 10, 300, 10, 300, 200]), np.array([-1., 5, 3, 5, 3, 9])]]
    lazy = LazyPolygonMasks(items, HEIGHT, WIDTH)
    expected = PolygonMasks(items, HEIGHT, WIDTH).get_bboxes(HorizontalBoxes).numpy()
    np.testing.assert_array_equal(lazy.get_bboxes().numpy(), expected)


@pytest.mark.parametrize('device', DEVICES)
@needs_native_decoding
def test_to_tensor_on_device_equals_to_ndarray_and_mmdet(tmp_path, device):
    """Polygons and plain RLEs are rasterised on the device; the result is to_ndarray's, which
    is mmdet's PolygonMasks / BitmapMasks to_ndarray per instance."""
    lazy = _mixed(np.random.default_rng(11), tmp_path)
    tensor = lazy.to_tensor(torch.float32, device)
    assert tensor.device.type == device and tensor.dtype == torch.float32
    expected = lazy.to_ndarray()
    assert np.array_equal(tensor.cpu().numpy(), expected)
    for i in range(len(lazy)):
        assert np.array_equal(expected[i], _one(lazy, i).to_ndarray()[0])
    assert lazy[[]].to_tensor(torch.uint8, device).shape == (0, HEIGHT, WIDTH)
