"""``crop_polygons`` is mmdet's ``PolygonMasks.crop``, coordinate for coordinate: polygons
inside, across and outside the box, concave ones the box cuts in several parts, self-crossing
ones ``buffer(0)`` splits, ones the box touches at an edge or a corner only, closed rings,
repeated points, float32 and float64, boxes partly outside the image; and the lazy masks crop
their polygons with it."""
import numpy as np
import pytest
from mmdet.structures.mask import PolygonMasks

from mmdet_ext.structures.lazy_masks import LazyPolygonMasks
from mmdet_ext.structures.polygon_crop import crop_polygons


def _assert_same(got, want):
    assert type(got) is PolygonMasks and (got.height, got.width) == (want.height, want.width)
    assert type(got.height) is type(want.height) and type(got.width) is type(want.width)
    assert len(got.masks) == len(want.masks)
    for got_instance, want_instance in zip(got.masks, want.masks):
        assert len(got_instance) == len(want_instance)
        for g, w in zip(got_instance, want_instance):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def _star(rng, cx, cy, radius, points):
    """A concave polygon: radii alternate between long and short."""
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * np.where(np.arange(points) % 2, 0.35, 1.0) * rng.uniform(0.8, 1.2, points)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).reshape(-1)


def _random_masks(rng, height, width, dtype):
    instances = []
    for _ in range(rng.integers(0, 8)):
        instance = []
        for _ in range(rng.integers(1, 4)):
            cx, cy = rng.uniform(-20, width + 20), rng.uniform(-20, height + 20)
            polygon = _star(rng, cx, cy, rng.uniform(2, 60), 2 * rng.integers(3, 12))
            instance.append(np.round(polygon, int(rng.integers(0, 3))).astype(dtype))
        instances.append(instance)
    return PolygonMasks(instances, height, width)


SPECIAL = [
    np.array([10, 10, 50, 10, 50, 50, 10, 50], float),        # a square inside
    np.array([0, 0, 100, 0, 100, 80, 0, 80, 0, 0], float),    # closed ring, the whole image
    np.array([10, 10, 50, 50, 50, 10, 10, 50], float),        # a bow tie: buffer(0) splits it
    np.array([30, 10, 30, 10, 60, 20, 40, 40], float),        # a repeated point
    np.array([70, 5, 90, 5, 90, 25], np.float32),             # a triangle, float32
    np.array([20, 20, 20, 20, 20, 20], float),                # one point: not valid
    np.array([0, 0, 40, 0, 40, 40], float),                   # touches the box at a corner
    np.array([5, 60, 95, 60, 95, 62, 80, 62, 80, 75, 70, 75, 70, 62, 30, 62, 30, 75, 20, 75,
              20, 62, 5, 62], float),                         # a comb the box cuts in parts
    np.array([10, 10, 40, 10, 40, np.nan, 10, 40], float),    # NaN, inf: what shapely makes
    np.array([10, 10, np.inf, 10, 40, 40], float),            # of them, as in mmdet's crop
]


@pytest.mark.parametrize('seed', range(40))
def test_random_polygons_crop_as_mmdet(seed):
    rng = np.random.default_rng(seed)
    height, width = int(rng.integers(20, 200)), int(rng.integers(20, 200))
    masks = _random_masks(rng, height, width, np.float32 if seed % 2 else np.float64)
    for _ in range(5):
        x1, y1 = rng.integers(-30, width), rng.integers(-30, height)
        box = np.array([x1, y1, x1 + rng.integers(0, 150), y1 + rng.integers(0, 150)])
        box = box.astype(np.float32) if seed % 3 == 0 else box
        _assert_same(crop_polygons(masks, box), masks.crop(box))


@pytest.mark.parametrize('box', [[40, 40, 100, 80], [0, 0, 100, 80], [50, 30, 70, 61],
                                 [40, 0, 60, 100], [-10, -10, 30, 30], [90, 70, 200, 200],
                                 [25, 25, 25, 25], [45, 61, 75, 80]])
def test_special_polygons_crop_as_mmdet(box):
    masks = PolygonMasks([[p] for p in SPECIAL] + [SPECIAL[:3], []], 80, 100)
    box = np.array(box)
    _assert_same(crop_polygons(masks, box), masks.crop(box))


def test_no_instances_and_bad_polygons_are_mmdets():
    box = np.array([0, 0, 10, 10])
    _assert_same(crop_polygons(PolygonMasks([], 20, 30), box), PolygonMasks([], 20, 30).crop(box))
    bad = PolygonMasks([[np.array([1.0, 2.0, 3.0, 4.0])]], 20, 30)  # two points
    with pytest.raises(ValueError) as want:
        bad.crop(box)
    with pytest.raises(ValueError) as got:
        crop_polygons(bad, box)
    assert str(got.value) == str(want.value)


def test_lazy_polygon_masks_crop_with_it():
    """``LazyPolygonMasks.crop`` (what ``RandomCrop`` calls on masks ``LoadLazyAnnotations``
    made) gives mmdet's polygons, through ``crop_polygons``."""
    masks = PolygonMasks([[p] for p in SPECIAL], 80, 100)
    box = np.array([20, 5, 90, 70])
    cropped = LazyPolygonMasks([[p] for p in SPECIAL], 80, 100).crop(box)
    want = masks.crop(box)
    assert (cropped.height, cropped.width) == (want.height, want.width)
    _assert_same(PolygonMasks(cropped.masks, want.height, want.width), want)
