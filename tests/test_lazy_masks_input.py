"""What the lazy mask classes refuse, and how they say it, next to mmdet's own classes.

Written for the survivors of the mutation run over ``mmdet_ext/structures/lazy_masks.py``
(benchmarks/results/mutation.md): the instance checks, ``cat``'s checks and ``repr`` were
exercised by no test that reads what they say.
"""
import numpy as np
import pytest
import torch
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from pycocotools import mask as mask_utils

from mmdet_ext.structures import (LazyBitmapMasks, LazyInstanceMasks, LazyPolygonMasks,
                                  MaskInputError, RasterSource)

SQUARE = [np.array([1.0, 1.0, 5.0, 1.0, 5.0, 5.0])]


def _rle(height: int = 10, width: int = 20) -> RasterSource:
    mask = np.zeros((height, width), np.uint8, order='F')
    mask[2:6, 3:9] = 1
    return RasterSource('rle', mask_utils.encode(mask)['counts'].decode('ascii'), height, width)


def test_repr_names_the_flavour_the_count_and_the_rasters():
    assert repr(LazyInstanceMasks([SQUARE, _rle(), _rle()], 10, 20)) == \
        'LazyBitmapMasks(num_masks=3, rasters=2, height=10, width=20)'
    assert repr(LazyPolygonMasks([SQUARE], 10, 20)) == \
        'LazyPolygonMasks(num_masks=1, rasters=0, height=10, width=20)'


def test_an_instance_that_is_not_a_list_of_parts_is_refused_by_name():
    with pytest.raises(MaskInputError) as info:
        LazyBitmapMasks([SQUARE, np.zeros(6)], 10, 20)
    assert str(info.value) == ('LazyBitmapMasks: instance 1 must be a list of polygon parts (1-D '
                               'ndarrays) or a RasterSource, got ndarray '
                               'array([0., 0., 0., 0., 0., 0.])')


@pytest.mark.parametrize('part, shape', [
    (np.zeros(0), (0, )),  # no coordinates
    (np.zeros(5), (5, )),  # an odd number
    (np.zeros((3, 2)), (3, 2)),  # 2-D
    (np.array(['1', '2']), (2, )),  # not numeric
    ([1.0, 2.0], (2, )),  # not an ndarray
])
def test_a_polygon_part_that_is_not_coordinates_is_refused_by_name(part, shape):
    with pytest.raises(MaskInputError) as info:
        LazyPolygonMasks([SQUARE, SQUARE + [part]], 10, 20)
    assert str(info.value) == (
        'LazyPolygonMasks: instance 1 has a polygon part that is not a 1-D numeric ndarray of an '
        f'even number of coordinates [x0, y0, x1, y1, ...]: {type(part).__name__} of shape '
        f'{shape}')


def test_a_part_of_one_point_and_an_instance_without_parts_are_empty_masks():
    pixels = LazyPolygonMasks([[np.array([3.0, 4.0])], [], SQUARE], 10, 20).to_ndarray()
    assert pixels.shape == (3, 10, 20) and pixels[:2].sum() == 0
    np.testing.assert_array_equal(pixels[2], PolygonMasks([SQUARE], 10, 20).to_ndarray()[0])


@pytest.mark.parametrize('lazy, upstream', [(LazyBitmapMasks, BitmapMasks),
                                            (LazyPolygonMasks, PolygonMasks)])
def test_cat_of_nothing_raises_mmdets_error(lazy, upstream):
    with pytest.raises(ValueError) as theirs:
        upstream.cat([])
    with pytest.raises(ValueError) as ours:
        lazy.cat([])
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(ValueError, match='masks should not be an empty list'):
        LazyInstanceMasks.cat([])


def test_cat_takes_its_flavour_from_the_masks_and_refuses_the_other_flavour():
    polygons = LazyPolygonMasks([SQUARE], 10, 20)
    joined = LazyInstanceMasks.cat([polygons, PolygonMasks([SQUARE], 10, 20)])
    assert type(joined) is LazyPolygonMasks and len(joined) == 2
    bitmaps = LazyBitmapMasks([_rle()], 10, 20)
    assert type(LazyInstanceMasks.cat([bitmaps, bitmaps])) is LazyBitmapMasks
    with pytest.raises(AssertionError):  # mmdet's own refusal is an assert
        BitmapMasks.cat([BitmapMasks(np.zeros((1, 10, 20), np.uint8), 10, 20),
                         PolygonMasks([SQUARE], 10, 20)])
    with pytest.raises(MaskInputError) as info:
        LazyBitmapMasks.cat([bitmaps, polygons])
    assert str(info.value) == ('LazyBitmapMasks.cat: every mask must be a BitmapMasks, got '
                               "['LazyBitmapMasks', 'LazyPolygonMasks']")
    assert isinstance(info.value, AssertionError)


def test_cat_takes_its_size_from_the_first_masks_as_mmdet():
    first, second = PolygonMasks([SQUARE], 10, 20), PolygonMasks([SQUARE], 30, 40)
    joined = LazyPolygonMasks.cat([LazyPolygonMasks([SQUARE], 10, 20), second])
    expected = PolygonMasks.cat([first, second])
    assert (joined.height, joined.width) == (expected.height, expected.width) == (10, 20)


@pytest.mark.parametrize('bbox', [[1, 2, 8, 9], np.array([[1, 2, 8, 9]]), np.array([1, 2, 8])],
                         ids=['list', '2-D', 'three'])
def test_a_crop_box_that_is_not_an_ndarray_of_four_is_refused_as_mmdet_refuses(bbox):
    # mmdet asserts an ndarray of one dimension, then fails to unpack three values: a
    # MaskInputError is both (an AssertionError and a ValueError).
    with pytest.raises((AssertionError, ValueError)):
        BitmapMasks(np.zeros((1, 10, 20), np.uint8), 10, 20).crop(bbox)
    with pytest.raises(MaskInputError) as info:
        LazyBitmapMasks([_rle()], 10, 20).crop(bbox)
    assert str(info.value) == ('LazyBitmapMasks.crop: bbox must be an ndarray[4] (x1, y1, x2, '
                               f'y2), got {type(bbox).__name__} of shape {np.shape(bbox)}')


@pytest.mark.parametrize('flavour', ['bitmap', 'polygon'])
def test_the_optional_arguments_default_to_mmdets(flavour):
    """Each method called without its optional arguments, on raster instances (BitmapMasks
    arithmetic) and on polygons: the same pixels as mmdet's class called the same way."""
    if flavour == 'bitmap':
        lazy = LazyBitmapMasks([_rle(), _rle(10, 20)], 10, 20)
        theirs = BitmapMasks(lazy.to_ndarray(), 10, 20)
    else:
        lazy = LazyPolygonMasks([SQUARE, SQUARE], 10, 20)
        theirs = PolygonMasks([SQUARE, SQUARE], 10, 20)
    calls = [('flip', ()), ('pad', ((16, 24), )), ('translate', ((10, 20), 3.0)),
             ('shear', ((10, 20), 0.3)), ('rotate', ((10, 20), 30.0)),
             ('crop_and_resize', (np.array([[1.0, 1.5, 15.0, 8.0]]), (7, 7), np.array([1])))]
    for name, args in calls:
        np.testing.assert_array_equal(getattr(lazy, name)(*args).to_ndarray(),
                                      getattr(theirs, name)(*args).to_ndarray(), err_msg=name)


def test_soft_targets_of_polygons_are_refused_with_mmdets_message():
    boxes, inds = np.array([[1.0, 1.0, 9.0, 8.0]]), np.array([0])
    with pytest.raises(ValueError) as theirs:
        PolygonMasks([SQUARE], 10, 20).crop_and_resize(boxes, (7, 7), inds, binarize=False)
    with pytest.raises(ValueError) as ours:
        LazyPolygonMasks([SQUARE], 10, 20).crop_and_resize(boxes, (7, 7), inds, binarize=False)
    assert str(ours.value) == str(theirs.value)


def test_a_raster_of_another_size_is_refused_when_its_pixels_are_read():
    masks = LazyBitmapMasks([SQUARE, _rle(12, 20)], 10, 20)
    for read in (masks.to_ndarray, lambda: masks.to_tensor(torch.uint8, 'cpu')):
        with pytest.raises(ValueError) as info:
            read()
        assert str(info.value) == 'raster mask 1 is (12, 20), the masks are (10, 20)'


@pytest.mark.parametrize('bbox', [np.array([0, 0, 12, 7]), np.array([-3, -2, 30, 40])],
                         ids=['at-the-origin', 'past-every-edge'])
def test_a_crop_at_or_past_the_edges_is_mmdets(bbox):
    for lazy, theirs in ((LazyPolygonMasks([SQUARE], 10, 20), PolygonMasks([SQUARE], 10, 20)),
                         (LazyBitmapMasks([_rle()], 10, 20),
                          BitmapMasks(LazyBitmapMasks([_rle()], 10, 20).to_ndarray(), 10, 20))):
        cropped, expected = lazy.crop(bbox), theirs.crop(bbox)
        assert (cropped.height, cropped.width) == (expected.height, expected.width)
        np.testing.assert_array_equal(cropped.to_ndarray(), expected.to_ndarray())


def test_cat_of_masks_that_are_not_lazy_names_what_it_needs():
    with pytest.raises(MaskInputError) as info:
        LazyInstanceMasks.cat([BitmapMasks(np.zeros((1, 10, 20), np.uint8), 10, 20)])
    assert str(info.value) == \
        "BitmapMasks.cat: every mask must be a lazy mask, got ['BitmapMasks']"


@pytest.mark.parametrize('binarize', [True, False])
def test_targets_of_rasters_with_pending_operations_are_mmdets(binarize):
    """A flipped RLE is no longer a plain RLE: its targets go through BitmapMasks."""
    lazy = LazyBitmapMasks([_rle(), _rle()], 10, 20).flip('vertical')
    theirs = BitmapMasks(lazy.to_ndarray(), 10, 20)
    boxes, inds = np.array([[1.0, 1.5, 15.0, 8.0], [0.0, 0.0, 20.0, 10.0]]), np.array([1, 0])
    np.testing.assert_array_equal(
        lazy.crop_and_resize(boxes, (7, 7), inds, binarize=binarize).to_ndarray(),
        theirs.crop_and_resize(boxes, (7, 7), inds, binarize=binarize).to_ndarray())


def test_pixels_of_another_size_are_refused_as_mmdet_refuses_them():
    pixels = np.zeros((2, 12, 20), np.uint8)
    with pytest.raises(ValueError):
        BitmapMasks(pixels, 10, 20)
    with pytest.raises(MaskInputError) as info:
        LazyBitmapMasks(pixels, 10, 20)
    assert str(info.value) == 'LazyBitmapMasks: masks of shape (12, 20) given for height=10, ' \
                              'width=20'


def test_assigned_masks_replace_the_lazy_ones_and_must_be_three_dimensional():
    masks = LazyBitmapMasks([SQUARE, _rle()], 10, 20)
    masks.masks = []
    assert masks.masks.shape == (0, 10, 20) and len(masks) == 0
    with pytest.raises(MaskInputError) as info:
        masks.masks = np.zeros((10, 20), np.uint8)
    assert str(info.value) == 'LazyBitmapMasks.masks must be ndarray[N, H, W], got shape (10, 20)'


@pytest.mark.parametrize('read_first', [True, False], ids=['pixels-read', 'lazy'])
def test_a_pickled_copy_keeps_its_masks_and_its_views(read_first):
    import pickle
    masks = LazyBitmapMasks([SQUARE, _rle()], 10, 20)
    expected = masks.to_ndarray().copy()
    if read_first:
        masks.masks  # noqa: B018 (reading .masks makes the pixels the masks)
    copy = pickle.loads(pickle.dumps(masks))
    np.testing.assert_array_equal(copy.to_ndarray(), expected)
    assert (copy._pixels is not None) == read_first
    copy.masks[1, 0, 0] = 7  # an in-place write, as mmdet's RandomErasing does
    assert copy[1].to_ndarray()[0, 0, 0] == 7  # the instances are views of the pixels
    assert masks.to_ndarray()[1, 0, 0] == expected[1, 0, 0]  # the original is untouched


@pytest.mark.parametrize('index', [1, np.int64(1), -1, [1], [[0], [1]], np.array([True, False])],
                         ids=['int', 'np.int64', 'negative', 'list', 'nested', 'bool mask'])
def test_indexing_follows_bitmap_masks(index):
    lazy = LazyBitmapMasks([SQUARE, _rle()], 10, 20)
    theirs = BitmapMasks(lazy.to_ndarray(), 10, 20)
    np.testing.assert_array_equal(lazy[index].to_ndarray(), theirs[index].to_ndarray())


# Polygons leaving a 10x20 image on one side only; 'second-x' leaves by its second x alone,
# 'bottom-narrow' by its second y alone with every x under the height; the two '-edge' ones by
# under a pixel (a vertex at 20.75 or 10.75 sets column 20 or row 10 when rasterised on a larger
# canvas, as pycocotools rasterises).
OUTSIDE = {'bottom-narrow': [2.0, 2.0, 5.0, 16.0, 8.0, 2.0],
           'right-edge': [2.0, 2.0, 20.75, 2.0, 20.75, 8.0, 2.0, 8.0],
           'bottom-edge': [2.0, 2.0, 12.0, 2.0, 12.0, 10.75, 2.0, 10.75],
           'right': [2.0, 2.0, 30.0, 2.0, 30.0, 8.0, 2.0, 8.0],
           'left': [-8.0, 2.0, 12.0, 2.0, 12.0, 8.0, -8.0, 8.0],
           'top': [2.0, -6.0, 12.0, -6.0, 12.0, 8.0, 2.0, 8.0],
           'bottom': [2.0, 2.0, 12.0, 2.0, 12.0, 16.0, 2.0, 16.0],
           'both': [2.0, 2.0, 30.0, 2.0, 30.0, 16.0, 2.0, 16.0],
           'second-x': [2.0, 2.0, 26.0, 5.0, 12.0, 8.0]}


@pytest.mark.parametrize('side', list(OUTSIDE))
def test_a_polygon_reaching_outside_is_clipped_before_it_is_padded(side):
    """Padding reveals nothing of a polygon's part outside the image: mmdet's bitmap has
    clipped it."""
    outside = [np.array(OUTSIDE[side])]
    lazy = LazyBitmapMasks([outside, SQUARE], 10, 20)
    pixels = PolygonMasks([outside, SQUARE], 10, 20).to_ndarray().astype(np.uint8)
    theirs = BitmapMasks(pixels, 10, 20)
    np.testing.assert_array_equal(lazy.pad((16, 40)).to_ndarray(),
                                  theirs.pad((16, 40)).to_ndarray())
    # mmdet 3.3's own default, dst_type='hbb', is no registered box type (it raises); ours is
    # 'hbox', the one mmdet registers.
    expected = theirs.get_bboxes('hbox').tensor
    assert torch.equal(lazy.get_bboxes().tensor, expected)
    assert torch.equal(lazy.get_bboxes('hbox').tensor, expected)


@pytest.mark.parametrize('num_boxes, items', [(0, [SQUARE]), (1, [])], ids=['no boxes', 'no masks'])
def test_targets_of_nothing_are_empty_as_mmdets(num_boxes, items):
    boxes, inds = np.zeros((num_boxes, 4)), np.zeros(num_boxes, int)
    for lazy, theirs in ((LazyPolygonMasks(items, 10, 20), PolygonMasks(items, 10, 20)),
                         (LazyBitmapMasks(items, 10, 20),
                          BitmapMasks(np.zeros((len(items), 10, 20), np.uint8), 10, 20))):
        assert lazy.crop_and_resize(boxes, (7, 7), inds).to_ndarray().shape == \
            theirs.crop_and_resize(boxes, (7, 7), inds).to_ndarray().shape == (0, 7, 7)


def test_the_polygon_flavour_refuses_a_raster_by_name():
    for make in (lambda: LazyPolygonMasks([SQUARE, _rle()], 10, 20),
                 lambda: setattr(LazyPolygonMasks([SQUARE], 10, 20), 'masks', [SQUARE, _rle()])):
        with pytest.raises(MaskInputError) as info:
            make()
        assert str(info.value) == (
            'LazyPolygonMasks holds polygons only (as PolygonMasks); instance 1 is a rle raster: '
            'use LazyBitmapMasks (LoadLazyAnnotations with poly2mask=True)')


def test_a_selection_starting_with_an_instance_without_parts_raises_an_index_error_as_mmdet():
    lazy, theirs = LazyPolygonMasks([[], SQUARE], 10, 20), PolygonMasks([SQUARE, SQUARE], 10, 20)
    theirs.masks = [[], SQUARE]  # its constructor itself refuses this list (masks[0][0])
    with pytest.raises(IndexError):
        theirs[[0, 1]]
    with pytest.raises(IndexError) as info:
        lazy[[0, 1]]
    assert str(info.value) == ('LazyPolygonMasks[[0, 1]]: the first instance selected has no '
                               'polygon parts, which PolygonMasks refuses (IndexError)')


@pytest.mark.parametrize('index', ['0', 1.0, None], ids=['str', 'float', 'None'])
def test_an_index_polygon_masks_cannot_read_raises_mmdets_value_error(index):
    with pytest.raises(ValueError) as theirs:
        PolygonMasks([SQUARE], 10, 20)[index]
    with pytest.raises(ValueError) as ours:
        LazyPolygonMasks([SQUARE], 10, 20)[index]
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize('dtype', [np.int64, np.int32, np.float32, np.float64])
def test_targets_of_boxes_of_any_dtype_are_mmdets(dtype):
    boxes = np.array([[0, 0, 6, 6], [1, 2, 9, 7]]).astype(dtype)
    parts = [SQUARE, [np.array([0.5, 0.5, 8.25, 1.0, 4.0, 7.75])]]
    ours = LazyPolygonMasks(parts, 10, 20).crop_and_resize(boxes, (7, 7), [0, 1])
    theirs = PolygonMasks(parts, 10, 20).crop_and_resize(boxes, (7, 7), [0, 1])
    np.testing.assert_array_equal(ours.to_ndarray(), theirs.to_ndarray())


def test_boxes_of_polygon_instances_of_several_parts_are_mmdets():
    parts = [SQUARE,
             [np.array([0.5, 0.5, 8.25, 1.0, 4.0, 7.75]), np.array([12.0, 3, 15, 3, 15, 9])],
             [np.array([2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 2.0, 3.0])]]
    expected = PolygonMasks(parts, 10, 20).get_bboxes('hbox').tensor
    assert torch.equal(LazyPolygonMasks(parts, 10, 20).get_bboxes('hbox').tensor, expected)


def test_the_box_of_a_one_pixel_raster_is_mmdets():
    pixel = np.zeros((1, 10, 20), np.uint8)
    pixel[0, 4, 7] = 1
    rle = mask_utils.encode(np.asfortranarray(pixel[0]))['counts'].decode('ascii')
    lazy = LazyBitmapMasks([RasterSource('rle', rle, 10, 20)], 10, 20)
    expected = BitmapMasks(pixel, 10, 20).get_bboxes('hbox').tensor
    assert torch.equal(lazy.get_bboxes().tensor, expected)
