"""Differential conformance: lazy masks against mmdet's ``BitmapMasks`` / ``PolygonMasks`` built by
mmdet's ``LoadAnnotations`` from the same generated annotations, member by member.

The contract (docs/compatibility.md): ``LoadLazyAnnotations(poly2mask=True)`` gives a
``LazyBitmapMasks`` equal to mmdet's ``BitmapMasks`` in every member at the loaded size and
after any operation on raster (RLE, PNG) instances; ``poly2mask=False`` gives a
``LazyPolygonMasks`` equal to ``PolygonMasks`` in every member. Polygon instances inside a
``LazyBitmapMasks`` are transformed with ``PolygonMasks``' arithmetic (their pixels equal
``PolygonMasks``' after a geometric operation).
"""
import copy
import pickle

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmdet.datasets.transforms import LoadAnnotations
from mmdet.structures.mask import BitmapMasks, PolygonMasks

from mmdet_ext.structures import (LazyBitmapMasks, LazyInstanceMasks, LazyPolygonMasks,
                                  MaskInputError)
from mmdet_ext.transforms import LoadLazyAnnotations
from helpers.mask_annotations import (POLYGON_KINDS, RLE_KINDS, reference_bitmap, samples,
                                            with_png_masks)

CONFORMANCE = settings(max_examples=25, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.function_scoped_fixture])


def load_both(sample: dict, poly2mask: bool, ours_sample: dict = None) -> tuple:
    """(ours, mmdet's) ``LoadAnnotations`` results of ``sample`` (ours from ``ours_sample`` when
    given: the same pixels in another form)."""
    args = dict(with_bbox=True, with_label=True, with_mask=True, poly2mask=poly2mask)
    ours = LoadLazyAnnotations(**args)(copy.deepcopy(ours_sample or sample))
    reference = LoadAnnotations(**args)(copy.deepcopy(sample))
    return ours, reference


def assert_same_pixels(ours, reference, same_dtype: bool = True) -> None:
    """Same length, pixels and (unless told otherwise) pixel dtype."""
    assert len(ours) == len(reference)
    expected = reference.to_ndarray()
    actual = ours.to_ndarray()
    np.testing.assert_array_equal(actual, expected)
    assert actual.dtype == expected.dtype or not same_dtype


def assert_same_polygons(ours: list, reference: list) -> None:
    """``PolygonMasks.masks`` equality: instances, parts and coordinates."""
    assert len(ours) == len(reference)
    for ours_parts, reference_parts in zip(ours, reference):
        assert len(ours_parts) == len(reference_parts)
        for a, b in zip(ours_parts, reference_parts):
            np.testing.assert_array_equal(a, b)


def indexes(count: int) -> list:
    """Every index form mmdet code uses on gt_masks, plus Python bools."""
    flags = np.arange(count) % 2 == 0
    forms = [slice(None), slice(1, None), slice(None, None, 2), [], flags, np.flatnonzero(flags),
             torch.from_numpy(np.flatnonzero(flags)), False, True]
    if count != 1:  # numpy reads a one-element bool tensor as the int 1: an upstream quirk
        forms.append(torch.from_numpy(flags))
    if count:
        forms += [0, -1, np.int64(count - 1), [count - 1, 0], np.array([0, 0])]
    return forms


def assert_same_indexing(ours, reference, same_result) -> None:
    for index in indexes(len(reference)):
        try:
            expected = reference[index]
        except Exception as error:  # the same input must fail the same way
            with pytest.raises(type(error)):
                ours[index]
            continue
        selected = ours[index]
        assert type(selected) is type(ours), index
        same_result(selected, expected)


def assert_same_errors(ours, reference) -> None:
    """Bad boxes and float indices raise the upstream exception type."""
    for bad_box in (np.array([[0, 0, 4, 4]]), [0, 0, 4, 4]):
        with pytest.raises(AssertionError):
            reference.crop(bad_box)
        with pytest.raises(AssertionError):
            ours.crop(bad_box)
    for bad_index in (torch.tensor([0.0]), np.array([0.0])):
        try:
            reference[bad_index]
        except Exception as error:
            with pytest.raises(type(error)):
                ours[bad_index]


# -- the bitmap flavour: poly2mask=True ---------------------------------------------------------
@CONFORMANCE
@given(samples())
def test_bitmap_flavour_members_equal_bitmap_masks(sample):
    ours, reference = load_both(sample, poly2mask=True)
    np.testing.assert_array_equal(ours['gt_ignore_flags'], reference['gt_ignore_flags'])
    np.testing.assert_array_equal(ours['gt_bboxes'].tensor, reference['gt_bboxes'].tensor)
    np.testing.assert_array_equal(ours['gt_bboxes_labels'], reference['gt_bboxes_labels'])
    ours, reference = ours['gt_masks'], reference['gt_masks']
    assert isinstance(ours, BitmapMasks) and not isinstance(ours, PolygonMasks)
    assert (ours.height, ours.width) == (reference.height, reference.width)
    assert_same_pixels(ours, reference)
    np.testing.assert_array_equal(ours.areas, reference.areas)
    assert ours.areas.dtype == reference.areas.dtype
    torch.testing.assert_close(ours.get_bboxes('hbox').tensor,
                               reference.get_bboxes('hbox').tensor, rtol=0, atol=0)
    torch.testing.assert_close(ours.to_tensor(torch.float32, 'cpu'),
                               reference.to_tensor(torch.float32, 'cpu'), rtol=0, atol=0)
    assert len(list(ours)) == len(list(reference))
    for a, b in zip(ours, reference):
        np.testing.assert_array_equal(a, b)
    assert_same_indexing(ours, reference, assert_same_pixels)
    assert_same_errors(ours, reference)
    assert_same_pixels(ours.expand(ours.height + 9, ours.width + 5, 4, 3),
                       reference.expand(reference.height + 9, reference.width + 5, 4, 3))
    assert_same_pixels(ours.pad((ours.height + 7, ours.width + 3)),
                       reference.pad((reference.height + 7, reference.width + 3)))
    if len(reference):
        assert_same_pixels(LazyBitmapMasks.cat([ours, ours[[0]]]),
                           BitmapMasks.cat([reference, reference[[0]]]))
    # .masks: pixels on read, kept; in-place writes and assignment are the masks from then on
    masks = ours.masks
    np.testing.assert_array_equal(masks, reference.masks)
    assert ours.masks is masks
    if len(reference):
        masks[:, :2, :2] = 1
        reference.masks[:, :2, :2] = 1
        assert_same_pixels(ours, reference)
        assert_same_pixels(ours.flip('vertical'), reference.flip('vertical'))
        np.testing.assert_array_equal(ours.areas, reference.areas)
        copied = pickle.loads(pickle.dumps(ours))
        copied.masks[:, 3:, :] = 0
        top_rows = (np.arange(ours.height) < 3)[:, None]
        np.testing.assert_array_equal(copied.to_ndarray(), masks * top_rows)
    ours.masks = reference.masks[::-1].copy()
    assert_same_pixels(ours, BitmapMasks(reference.masks[::-1], reference.height, reference.width))


def geometric_operations(height: int, width: int, pad: bool = True):
    """Strategy: (method name, args) of a ``BaseInstanceMasks`` geometric method (``pad``
    among them unless told otherwise)."""
    size = st.tuples(st.integers(3, 50), st.integers(3, 50))
    direction = st.sampled_from(['horizontal', 'vertical'])
    crop_box = st.tuples(st.integers(0, width - 2), st.integers(0, height - 2),
                         st.integers(1, width + 3), st.integers(1, height + 3)).map(
        lambda b: np.array([b[0], b[1], max(b[2], b[0] + 1), max(b[3], b[1] + 1)]))
    pads = st.tuples(st.just('pad'), st.tuples(st.tuples(st.integers(height, height + 20),
                                                        st.integers(width, width + 20))))
    return st.one_of(
        pads if pad else st.nothing(),
        st.tuples(st.just('rescale'), st.tuples(st.floats(0.3, 2.5))),
        st.tuples(st.just('resize'), st.tuples(size)),
        st.tuples(st.just('flip'),
                  st.tuples(st.sampled_from(['horizontal', 'vertical', 'diagonal']))),
        st.tuples(st.just('crop'), st.tuples(crop_box)),
        st.tuples(st.just('translate'), st.tuples(st.just((height, width)),
                                                  st.integers(-12, 12), direction)),
        st.tuples(st.just('shear'), st.tuples(st.just((height, width)), st.floats(-0.5, 0.5),
                                              direction)),
        st.tuples(st.just('rotate'), st.tuples(st.just((height, width)), st.floats(-180, 180))),
    )


def crop_and_resize_arguments(height: int, width: int):
    """Strategy: (boxes ndarray[M, 4] float32, out_shape, inds) for ``crop_and_resize``."""
    box = st.tuples(st.floats(-3, width), st.floats(-3, height), st.floats(1, width + 3),
                    st.floats(1, height + 3)).map(
        lambda b: [b[0], b[1], max(b[2], b[0] + 0.5), max(b[3], b[1] + 0.5)])
    return st.tuples(st.lists(box, min_size=1, max_size=6).map(
        lambda boxes: np.array(boxes, dtype=np.float32)),
        st.tuples(st.integers(2, 14), st.integers(2, 14)))


def apply_random_operations(data, ours, reference, lazy_type, assert_same):
    """Up to three drawn geometric operations applied to both; checked after each one."""
    for _ in range(3):
        if min(reference.height, reference.width) < 4:
            break
        name, args = data.draw(geometric_operations(reference.height, reference.width))
        ours, reference = getattr(ours, name)(*args), getattr(reference, name)(*args)
        assert isinstance(ours, lazy_type), name
        assert_same(ours, reference)
    return ours, reference


@CONFORMANCE
@given(data=st.data())
def test_bitmap_flavour_operations_on_rasters_equal_bitmap_masks(data, tmp_path_factory):
    """RLE (both forms, crowd, empty) and PNG instances: every operation, pixel for pixel."""
    sample = data.draw(samples(kinds=RLE_KINDS, min_size=1))
    png_sample = with_png_masks(sample, tmp_path_factory.mktemp('png'))
    ours, reference = load_both(sample, poly2mask=True, ours_sample=png_sample)
    ours, reference = ours['gt_masks'], reference['gt_masks']
    for instance, expected in zip(png_sample['instances'], reference.masks):
        if 'mask_file' in instance['mask']:
            np.testing.assert_array_equal(reference_bitmap(instance['mask']), expected)
    ours, reference = apply_random_operations(data, ours, reference, LazyBitmapMasks,
                                              assert_same_pixels)
    np.testing.assert_array_equal(ours.areas, reference.areas)
    torch.testing.assert_close(ours.get_bboxes('hbox').tensor,
                               reference.get_bboxes('hbox').tensor, rtol=0, atol=0)
    boxes, out_shape = data.draw(crop_and_resize_arguments(reference.height, reference.width))
    inds = np.arange(len(boxes)) % len(reference)
    for binarize in (True, False):
        assert_same_pixels(ours.crop_and_resize(boxes, out_shape, inds, binarize=binarize),
                           reference.crop_and_resize(boxes, out_shape, inds, binarize=binarize))


# -- the polygon flavour: poly2mask=False -------------------------------------------------------
@CONFORMANCE
@given(st.data())
def test_polygon_flavour_members_equal_polygon_masks(data):
    sample = data.draw(samples())
    ours, reference = load_both(sample, poly2mask=False)
    np.testing.assert_array_equal(ours['gt_ignore_flags'], reference['gt_ignore_flags'])
    ours, reference = ours['gt_masks'], reference['gt_masks']
    assert isinstance(ours, PolygonMasks) and not isinstance(ours, BitmapMasks)
    assert_same_polygons(ours.masks, reference.masks)
    assert_same_polygons(list(ours), list(reference))
    assert_same_pixels(ours, reference)
    np.testing.assert_array_equal(ours.areas, reference.areas)
    torch.testing.assert_close(ours.get_bboxes('hbox').tensor,
                               reference.get_bboxes('hbox').tensor, rtol=0, atol=0)
    torch.testing.assert_close(ours.to_tensor(torch.float32, 'cpu'),
                               reference.to_tensor(torch.float32, 'cpu'), rtol=0, atol=0)
    assert_same_indexing(ours, reference, lambda a, b: assert_same_polygons(a.masks, b.masks))
    assert_same_errors(ours, reference)
    with pytest.raises(NotImplementedError):
        reference.expand(30, 30, 1, 1)
    with pytest.raises(NotImplementedError):
        ours.expand(30, 30, 1, 1)
    if len(reference):
        assert_same_polygons(LazyPolygonMasks.cat([ours, ours[[0]]]).masks,
                             PolygonMasks.cat([reference, reference[[0]]]).masks)
        boxes, out_shape = data.draw(crop_and_resize_arguments(reference.height, reference.width))
        inds = np.arange(len(boxes)) % len(reference)
        assert_same_pixels(ours.crop_and_resize(boxes, out_shape, inds),
                           reference.crop_and_resize(boxes, out_shape, inds))
    def same_polygons_and_pixels(ours, reference):
        assert_same_polygons(ours.masks, reference.masks)
        assert_same_pixels(ours, reference)

    ours, reference = apply_random_operations(data, ours, reference, LazyPolygonMasks,
                                              same_polygons_and_pixels)
    ours.masks = reference.masks[::-1]
    assert_same_pixels(ours, PolygonMasks(reference.masks[::-1], reference.height,
                                          reference.width))


@CONFORMANCE
@given(st.data())
def test_polygons_in_the_bitmap_flavour_move_as_polygon_masks(data):
    """The documented choice: polygon instances keep PolygonMasks' arithmetic (what makes the
    Mask R-CNN targets fast and exact), so after a geometric operation their pixels are
    PolygonMasks'; at the loaded size, and padded, they are BitmapMasks' (the first test)."""
    sample = data.draw(samples(kinds=POLYGON_KINDS, min_size=1))
    ours = LoadLazyAnnotations(with_mask=True, poly2mask=True)(copy.deepcopy(sample))['gt_masks']
    reference = LoadAnnotations(with_mask=True, poly2mask=False)(copy.deepcopy(sample))['gt_masks']
    for _ in range(2):
        if min(reference.height, reference.width) < 4:
            break
        name, args = data.draw(geometric_operations(reference.height, reference.width,
                                                    pad=False))
        ours, reference = getattr(ours, name)(*args), getattr(reference, name)(*args)
    assert_same_pixels(ours, reference, same_dtype=False)  # BitmapMasks' uint8, not bool
    boxes, out_shape = data.draw(crop_and_resize_arguments(reference.height, reference.width))
    inds = np.arange(len(boxes)) % len(reference)
    assert_same_pixels(ours.crop_and_resize(boxes, out_shape, inds),
                       reference.crop_and_resize(boxes, out_shape, inds), same_dtype=False)


def test_an_rle_or_png_with_poly2mask_false_is_handled_as_mmdet_does(tmp_path):
    """mmdet's poly2mask=False ignores a non-polygon instance and keeps a placeholder; a PNG
    mask (which mmdet has not) is an error naming the file, never a silently lost instance."""
    sample = samples(kinds=('rle',), min_size=2, max_size=2).example()
    ours, reference = load_both(sample, poly2mask=False)
    np.testing.assert_array_equal(ours['gt_ignore_flags'], [True, True])
    np.testing.assert_array_equal(reference['gt_ignore_flags'], [True, True])
    assert_same_polygons(ours['gt_masks'].masks, reference['gt_masks'].masks)
    png_sample = with_png_masks(sample, tmp_path, share=1.0)
    with pytest.raises(ValueError, match=r'\.png is a per-instance PNG mask.*poly2mask=True'):
        LoadLazyAnnotations(with_mask=True, poly2mask=False)(png_sample)


# -- constructor --------------------------------------------------------------------------------
@pytest.mark.parametrize('items', [
    [[[]]],                              # a part that is an empty list
    [[np.zeros((8, 9), np.uint8)]],      # a bitmap given as a polygon part
    [[np.zeros(5)]],                     # odd number of coordinates
    [[np.zeros(0)]],                     # no coordinates
    [np.zeros(6)],                       # an instance that is one part, not a list of parts
    ['polygon'],
], ids=['empty-list-part', 'bitmap-part', 'odd-length', 'empty-part', 'bare-part', 'str'])
def test_constructor_refuses_what_is_not_a_mask(items):
    for flavour in (LazyInstanceMasks, LazyBitmapMasks, LazyPolygonMasks):
        with pytest.raises(MaskInputError, match='instance 0'):
            flavour(items, 8, 9)
    with pytest.raises(AssertionError):  # what mmdet's classes raise, caught the same way
        LazyInstanceMasks(items, 8, 9)


def test_lazy_instance_masks_builds_the_bitmap_flavour():
    masks = LazyInstanceMasks([[np.array([0.0, 0, 4, 0, 4, 4])]], 8, 9)
    assert type(masks) is LazyBitmapMasks and isinstance(masks, BitmapMasks)
    assert type(masks.flip()) is LazyBitmapMasks and type(masks[[0]]) is LazyBitmapMasks


@CONFORMANCE
@given(sample=samples())
def test_the_bitmap_flavour_takes_bitmap_masks_constructor_input(sample):
    """mmdet rebuilds masks as ``type(masks)(pixels, height, width)`` (Albu, ``random``)."""
    ours, reference = load_both(sample, poly2mask=True)
    ours, reference = ours['gt_masks'], reference['gt_masks']
    for pixels in (reference.masks, list(reference.masks)):
        rebuilt = type(ours)(pixels, reference.height, reference.width)
        assert_same_pixels(rebuilt, BitmapMasks(pixels, reference.height, reference.width))
    random_masks = type(ours).random(num_masks=3, height=9, width=7)
    assert isinstance(random_masks, BitmapMasks) and random_masks.masks.shape == (3, 9, 7)
    with pytest.raises(AssertionError):
        type(ours)(np.zeros((2, 5, 5), np.uint8), reference.height + 5, reference.width)


# -- issue 28: instances without polygon parts, as PolygonMasks indexes them --------------------
def _with_empty_instance() -> list:
    """Three instances, the middle one with no parts (PolygonMasks accepts it anywhere but
    first)."""
    square = np.array([1.0, 1.0, 5.0, 1.0, 5.0, 5.0, 1.0, 5.0])
    return [[square], [], [square + 2]]


@pytest.mark.parametrize('index', [
    1, -2, np.int64(1), np.array(1), True, 0, [1], [1, 0], [0, 1], np.array([1, 2]),
    np.array([False, True, True]), np.array(True), slice(1, None), slice(0, None), [],
], ids=repr)
def test_polygon_flavour_indexes_an_instance_without_parts_as_polygon_masks(index):
    """An int selecting it gives no instances (iterating yields nothing); a selection starting
    with it raises IndexError (PolygonMasks' constructor reads masks[0][0])."""
    reference = PolygonMasks(_with_empty_instance(), 10, 10)
    ours = LazyPolygonMasks(_with_empty_instance(), 10, 10)
    try:
        expected = reference[index]
    except Exception as error:
        with pytest.raises(type(error)):
            ours[index]
        return
    selected = ours[index]
    assert type(selected) is LazyPolygonMasks
    assert_same_polygons(list(selected), list(expected))
    assert_same_polygons(selected.masks, expected.masks)


def test_iterating_polygon_flavour_yields_polygon_masks_members():
    raw = [[np.array([0.0, 0, 4, 0, 4, 4])], [np.array([1.0, 1, 5, 1, 5, 5]),
                                             np.array([6.0, 6, 8, 6, 8, 8])], []]
    reference, ours = PolygonMasks(raw, 10, 10), LazyPolygonMasks(raw, 10, 10)
    for index in (slice(None), [2], 2, -1, [0, 2]):
        try:
            expected = list(reference[index])
        except IndexError:  # mmdet's index error is ours too
            with pytest.raises(IndexError):
                list(ours[index])
            continue
        assert_same_polygons(list(ours[index]), expected)
    assert_same_polygons(list(ours), list(reference))


# -- issue 49 item 4: the three places mmdet's own mask tests tell the classes apart -------------
def _three_polygons() -> list:
    square = np.array([1.0, 1.0, 5.0, 1.0, 5.0, 5.0, 1.0, 5.0])
    return [[square], [square + 2, square + 9], [square * 2]]


INDEX_DTYPES = [np.int64, np.int32, np.int8, np.uint8, np.uint64, np.float64, np.float32,
                np.bool_]


@pytest.mark.parametrize('dtype', INDEX_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize('values', [[], [2, 0], [1]], ids=['empty', 'two', 'one'])
def test_polygon_flavour_takes_an_index_array_of_any_dtype_as_polygon_masks(dtype, values):
    """``PolygonMasks.__getitem__`` on an ndarray: bools through ``np.where``, everything else
    through ``tolist()``, so an empty float array selects nothing and a non-empty one raises."""
    index = np.array(values, dtype=dtype)
    reference = PolygonMasks(_three_polygons(), 12, 12)
    ours = LazyPolygonMasks(_three_polygons(), 12, 12)
    try:
        expected = reference[index]
    except Exception as error:  # noqa: BLE001 -- the same type is what is checked
        with pytest.raises(type(error)):
            ours[index]
        return
    selected = ours[index]
    assert type(selected) is LazyPolygonMasks
    assert_same_polygons(selected.masks, expected.masks)
    assert_same_polygons(list(selected), list(expected))


def test_polygon_flavour_passes_mmdet_polygon_index_iter_and_expand_tests():
    """mmdet's test_mask_structures.py (its 2.x suite ported to 3.x): ``test_polygon_mask_index``,
    ``test_polygon_mask_iter`` and ``test_polygon_mask_expand``, on both classes."""
    for cls in (PolygonMasks, LazyPolygonMasks):
        raw = _three_polygons()
        masks = cls(raw, 28, 28)
        assert len(masks[0]) == 1 and len(masks[[0, 1]]) == 2
        assert len(masks[np.asarray([0, 1])]) == 2
        with pytest.raises(ValueError):
            masks[torch.Tensor([1, 2])]
        for i, instance in enumerate(masks):
            assert isinstance(instance, list) and len(instance) == len(raw[i])
            assert all(np.equal(part, expected).all() for part, expected in zip(instance, raw[i]))
        with pytest.raises(NotImplementedError):
            cls([], 28, 28).expand(56, 56, 10, 17)
