"""LazyInstanceMasks and LoadLazyAnnotations against mmdet's PolygonMasks / BitmapMasks."""
import os
import shutil

import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs, Pad, RandomFlip, Resize
from mmdet.structures.mask import BitmapMasks, PolygonMasks

from mmdet_ext._compat import family_has
from mmdet_ext.datasets import LazyCocoDataset
from mmdet_ext.structures import LazyBitmapMasks, LazyInstanceMasks, RasterSource
from mmdet_ext.transforms import LoadLazyAnnotations

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')


def _samples(root, ann='instances_train.json', split='train'):
    dataset = LazyCocoDataset(data_root=str(root), ann_file=f'annotations/{ann}',
                              data_prefix=dict(img=f'{split}/'), metainfo=dict(classes=CLASSES),
                              pipeline=[])
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        info['ori_shape'] = (info['height'], info['width'])
        yield info


def _reference(info):
    """mmdet's view of the same sample: PolygonMasks for polygons, BitmapMasks for RLEs."""
    bitmaps = LoadAnnotations(with_mask=True, poly2mask=True)(dict(info))['gt_masks']
    return bitmaps


def _split(lazy: LazyInstanceMasks):
    polygon_rows = [i for i, item in enumerate(lazy.items) if not isinstance(item, RasterSource)]
    raster_rows = [i for i in range(len(lazy)) if i not in polygon_rows]
    return polygon_rows, raster_rows


def _loaded(info):
    return LoadLazyAnnotations()(dict(info, instances=[dict(x) for x in info['instances']]))


def test_native_resolution_equals_mmdet_poly2mask(toy_coco_root):
    checked = 0
    for info in _samples(toy_coco_root):
        ours = _loaded(info)
        reference = _reference(info)
        assert isinstance(ours['gt_masks'], LazyInstanceMasks)
        np.testing.assert_array_equal(ours['gt_masks'].to_ndarray(), reference.to_ndarray())
        reference_flags = LoadAnnotations(with_mask=True)(dict(info))['gt_ignore_flags']
        np.testing.assert_array_equal(ours['gt_ignore_flags'], reference_flags)
        checked += len(ours['gt_masks'])
    assert checked > 20


OWN_SHAPE = object()  # an op's out_shape: the masks' (height, width)
OPS = [
    ('resize', ((300, 400),), {}),
    ('rescale', ((200, 150),), {}),
    ('flip', ('horizontal',), {}),
    ('flip', ('vertical',), {}),
    ('flip', ('diagonal',), {}),
    ('pad', ((400, 416),), {'pad_val': 0}),  # larger than every toy image, as mmdet's Pad needs
    ('crop', (np.array([30, 20, 250, 200]),), {}),  # mmdet's RandomCrop passes int boxes
    ('translate', ((240, 320), 17.0), {'direction': 'horizontal'}),
    # out_shape: the masks' own, as mmdet's Rotate and Shear give it (mmdet's BitmapMasks, and
    # the fork's, cannot rotate or shear into another shape)
    ('rotate', (OWN_SHAPE, 30.0), {}),
    ('shear', (OWN_SHAPE, 0.3), {}),
]


def assert_op_equals_mmdet(root, op) -> None:
    """``op`` (a function of masks) on lazy masks of 6 toy samples gives, pixel for pixel, what
    it gives on mmdet's PolygonMasks (polygon instances) and BitmapMasks (RLE instances)."""
    for info in list(_samples(root))[:6]:
        lazy = _loaded(info)['gt_masks']
        polygon_rows, raster_rows = _split(lazy)
        out = op(lazy)
        pixels = out.to_ndarray()
        if polygon_rows:
            polygons = PolygonMasks([lazy.items[i] for i in polygon_rows], lazy.height, lazy.width)
            expected = op(polygons)
            assert (out.height, out.width) == (expected.height, expected.width)
            np.testing.assert_array_equal(pixels[polygon_rows], expected.to_ndarray())
        if raster_rows:
            bitmaps = BitmapMasks(np.stack([lazy.items[i].bitmap() for i in raster_rows]),
                                  lazy.height, lazy.width)
            np.testing.assert_array_equal(pixels[raster_rows], op(bitmaps).to_ndarray())


@pytest.mark.parametrize('name, args, kwargs', OPS, ids=[op[0] for op in OPS])
def test_each_op_equals_mmdet_on_the_rasterised_output(toy_coco_root, name, args, kwargs):
    def op(masks):
        own = [(masks.height, masks.width) if arg is OWN_SHAPE else arg for arg in args]
        return getattr(masks, name)(*own, **kwargs)

    assert_op_equals_mmdet(toy_coco_root, op)


@pytest.mark.parametrize('offset', [(17, -9), (-30, 25), 12, (400, 3)], ids=repr)
def test_translate_both_is_the_forks(toy_coco_root, offset):
    """The fork's Mosaic moves masks with ``translate(direction='both', offset=(dx, dy))`` (whole
    pixels). The reference: the installed classes' own 'both' where they have it (the fork),
    else OpenMMLab's translate axis after axis -- for whole pixels the fork's arithmetic
    exactly (tests/test_compat.py), which its 'both' does not otherwise have."""
    out_shape = (260, 300)
    dx, dy = offset if isinstance(offset, tuple) else (offset, offset)

    def reference(masks):
        if isinstance(masks, LazyInstanceMasks) or family_has('translate_both'):
            return masks.translate(out_shape, offset, direction='both')
        return masks.translate(out_shape, dx, 'horizontal').translate(out_shape, dy, 'vertical')

    assert_op_equals_mmdet(toy_coco_root, reference)


@pytest.mark.skipif(not family_has('translate_both'),
                    reason="OpenMMLab's mask classes have no translate(direction='both') to "
                           "compare fractional offsets with (the fork's: tools/compat/fork.sh)")
def test_translate_both_by_fractions_is_the_forks(toy_coco_root):
    assert_op_equals_mmdet(toy_coco_root, lambda masks: masks.translate(
        (250, 310), (7.4, -3.6), direction='both'))


def test_bitmap_flavour_built_from_an_array_holds_it_as_bitmap_masks_does():
    """The fork's BitmapMasks keeps an ndarray as given (OpenMMLab's copies): ours the same."""
    pixels = np.zeros((2, 8, 9), np.uint8)
    ours, theirs = LazyBitmapMasks(pixels, 8, 9), BitmapMasks(pixels, 8, 9)
    assert (ours.masks is pixels) == (theirs.masks is pixels)
    assert (ours.masks is pixels) == family_has('bitmap_masks_keep_array')
    pixels[0, 1, 2] = 1
    np.testing.assert_array_equal(ours.to_ndarray(), theirs.to_ndarray())
    np.testing.assert_array_equal(ours[[0]].to_ndarray(), theirs[[0]].to_ndarray())


def test_crop_and_resize_equals_mmdet(toy_coco_root):
    rng = np.random.default_rng(0)
    for info in [info for info in _samples(toy_coco_root) if info['instances']][:6]:
        lazy = _loaded(info)['gt_masks']
        n = 12
        x1y1 = rng.uniform(0, 200, (n, 2))
        boxes = np.concatenate([x1y1, x1y1 + rng.uniform(5, 120, (n, 2))], axis=1)
        inds = rng.integers(0, len(lazy), n)
        out = lazy.crop_and_resize(boxes, (28, 28), inds).to_ndarray()
        assert out.shape == (n, 28, 28)
        for box, ind in enumerate(inds):
            item = lazy.items[ind]
            if isinstance(item, RasterSource):
                ref = BitmapMasks(item.bitmap()[None], lazy.height, lazy.width)
            else:
                ref = PolygonMasks([item], lazy.height, lazy.width)
            expected = ref.crop_and_resize(boxes[box:box + 1], (28, 28),
                                           np.zeros(1, int)).to_ndarray()[0]
            np.testing.assert_array_equal(out[box], expected)


def test_areas_bboxes_indexing_and_cat(toy_coco_root):
    info = next(i for i in _samples(toy_coco_root) if len(i['instances']) >= 3)
    lazy = _loaded(info)['gt_masks']
    dense = BitmapMasks(lazy.to_ndarray(), lazy.height, lazy.width)
    np.testing.assert_array_equal(lazy.areas, dense.areas)  # a BitmapMasks: pixel counts
    boxes = lazy.get_bboxes('hbox').tensor
    torch.testing.assert_close(boxes, dense.get_bboxes('hbox').tensor)
    keep = np.zeros(len(lazy), dtype=bool)
    keep[[0, 2]] = True
    for index in (keep, [0, 2], np.array([0, 2]), torch.tensor([0, 2]), torch.from_numpy(keep)):
        np.testing.assert_array_equal(lazy[index].to_ndarray(), dense.to_ndarray()[[0, 2]])
    np.testing.assert_array_equal(lazy[1].to_ndarray(), dense.to_ndarray()[[1]])
    both = LazyInstanceMasks.cat([lazy[[0]], lazy[[2]]])
    np.testing.assert_array_equal(both.to_ndarray(), dense.to_ndarray()[[0, 2]])


def test_pipeline_through_mmdet_transforms_matches_mmdet(toy_coco_root):
    """Resize + flip + pad + pack, ours vs mmdet's PolygonMasks pipeline (polygon instances)."""
    transforms = [Resize(scale=(400, 300), keep_ratio=True), RandomFlip(prob=1.0),
                  Pad(size_divisor=32), PackDetInputs()]
    for info in list(_samples(toy_coco_root))[:4]:
        info = dict(info, img=np.zeros((info['height'], info['width'], 3), np.uint8),
                    img_shape=(info['height'], info['width']))
        ours = _loaded(info)
        reference = LoadAnnotations(with_mask=True, poly2mask=False)(dict(info))
        for t in transforms:
            ours, reference = t(ours), t(reference)
        ours_masks = ours['data_samples'].gt_instances.masks
        ref_masks = reference['data_samples'].gt_instances.masks
        assert isinstance(ours_masks, LazyInstanceMasks)
        np.testing.assert_array_equal(ours_masks.to_ndarray(), ref_masks.to_ndarray())


def test_png_masks_are_read_only_when_used(toy_coco_root, tmp_path):
    root = tmp_path / 'toy'
    shutil.copytree(toy_coco_root, root)
    info = next(i for i in _samples(root, 'instances_train_pngmasks.json')
                if any('mask_file' in inst['mask'] for inst in i['instances']))
    assert _loaded(info)['gt_masks'].flip('horizontal').to_ndarray().any()
    lazy = _loaded(info)['gt_masks'].flip('horizontal')  # loaded and transformed: no pixels yet
    png = next(item for item in lazy.items if isinstance(item, RasterSource) and item.kind == 'png')
    os.remove(png.data)
    with pytest.raises(OSError, match=os.path.basename(png.data)):
        lazy.to_ndarray()


def test_png_and_polygon_variants_rasterise_alike(toy_coco_root):
    polygons = list(_samples(toy_coco_root))
    pngs = list(_samples(toy_coco_root, 'instances_train_pngmasks.json'))
    for a, b in zip(polygons, pngs):
        ma, mb = _loaded(a)['gt_masks'].to_ndarray(), _loaded(b)['gt_masks'].to_ndarray()
        for x, y in zip(ma, mb):
            union = np.logical_or(x, y).sum()
            assert np.logical_and(x, y).sum() / max(union, 1) > 0.8


def _random_polygons(rng: np.random.Generator, dtype) -> list:
    """Instances of 1 to 3 polygons of 3 to 12 points, some off the image, one dtype."""
    return [[(rng.uniform(-20, 120, 2 * int(rng.integers(3, 13)))).astype(dtype)
             for _ in range(int(rng.integers(1, 4)))] for _ in range(int(rng.integers(1, 9)))]


@pytest.mark.parametrize('dtype', [np.float64, np.float32])
def test_polygon_ops_on_joined_polygons_equal_a_call_per_polygon(dtype):
    """``coordinatewise`` runs rescale, resize, flip and translate once on all polygons joined:
    every coordinate and dtype as mmdet's ``PolygonMasks`` computes it polygon by polygon."""
    from mmdet_ext._compat import translate_masks
    from mmdet_ext.structures.lazy_masks import coordinatewise
    rng = np.random.default_rng(3)
    for case in range(200):
        rows = _random_polygons(rng, dtype)
        op, args = [('rescale', (float(rng.uniform(0.3, 2.5)),)),
                    ('resize', ((int(rng.integers(5, 300)), int(rng.integers(5, 300))),)),
                    ('flip', (str(rng.choice(['horizontal', 'vertical', 'diagonal'])),)),
                    (translate_masks, ((90, 110), float(rng.uniform(-50, 50)),
                                       str(rng.choice(['horizontal', 'vertical']))))][case % 4]
        expected = (getattr(PolygonMasks(rows, 100, 100), op)(*args) if isinstance(op, str)
                    else op(PolygonMasks(rows, 100, 100), *args)).masks
        got = coordinatewise(rows, [(100, 100, op, args, {})])
        assert len(got) == len(expected)
        for got_row, expected_row in zip(got, expected):
            assert len(got_row) == len(expected_row)
            for a, b in zip(got_row, expected_row):
                assert a.dtype == b.dtype and np.array_equal(a, b), (case, op)
    mixed = [[np.zeros(6, np.float32)], [np.zeros(6, np.float64)]]
    assert coordinatewise(mixed, [(10, 10, 'flip', ('horizontal',), {})]) is None


def _random_calls(rng: np.random.Generator) -> list:
    """1 to 5 calls of ``LazyInstanceMasks.chain``'s methods, as the mosaic and mix-up make."""
    calls = []
    for _ in range(int(rng.integers(1, 6))):
        kind = int(rng.integers(0, 4))
        if kind == 0:
            calls.append(('rescale', (float(rng.uniform(0.3, 2.5)),), {}))
        elif kind == 1:
            calls.append(('resize', ((int(rng.integers(5, 300)), int(rng.integers(5, 300))),),
                          {}))
        elif kind == 2:
            calls.append(('flip', (str(rng.choice(['horizontal', 'vertical', 'diagonal'])),),
                          {}))
        else:
            calls.append(('translate', (), dict(
                out_shape=(int(rng.integers(50, 200)), int(rng.integers(50, 200))),
                offset=float(rng.uniform(-60, 60)),
                direction=str(rng.choice(['horizontal', 'vertical'])))))
    return calls


@pytest.mark.parametrize('dtype', [np.float64, np.float32])
def test_a_chain_of_calls_equals_the_calls_one_by_one(dtype):
    """``chain`` joins the polygons once for all its calls: the same polygons (every coordinate
    and dtype), the same recorded raster steps, shape and flavour as the calls one after the
    other, and as mmdet's ``PolygonMasks`` methods called in turn; ``self`` left as it was;
    polygons of mixed dtypes (which cannot be joined) take the calls one by one."""
    from mmdet_ext.structures.lazy_masks import LazyPolygonMasks
    rng = np.random.default_rng(11)
    rle = RasterSource('rle', 'PPYo1', 20, 30)
    for case in range(150):
        rows = _random_polygons(rng, dtype)
        if case % 5 == 4:  # the fallback: two dtypes
            rows[0] = [rows[0][0].astype(np.float32 if dtype == np.float64 else np.float64)]
        flavour = (LazyBitmapMasks, LazyPolygonMasks)[case % 2]
        items = rows + ([rle] if case % 3 == 0 and flavour is LazyBitmapMasks else [])
        masks = flavour(items, 100, 100)
        held = list(masks.items)
        before = [list(item) if isinstance(item, list) else item for item in masks.items]
        calls = _random_calls(rng)
        got = masks.chain(calls)
        expected, upstream = masks, PolygonMasks(rows, 100, 100)
        for name, args, kwargs in calls:
            expected = getattr(expected, name)(*args, **kwargs)
            upstream = getattr(upstream, name)(*args, **kwargs)
        assert type(got) is flavour and (got.height, got.width) == (expected.height,
                                                                     expected.width)
        assert (got.height, got.width) == (upstream.height, upstream.width)
        assert '_deferred' not in vars(got) and got._deferred is None
        assert len(got.items) == len(expected.items) == len(items)
        for row, (a, b) in enumerate(zip(got.items, expected.items)):
            if isinstance(b, RasterSource):
                assert a == b
                continue
            assert len(a) == len(b) == len(upstream.masks[row])
            for x, y, z in zip(a, b, upstream.masks[row]):
                assert x.dtype == y.dtype == z.dtype and np.array_equal(x, y) and \
                    np.array_equal(x, z), (case, calls)
        assert all(a is b for a, b in zip(masks.items, held))  # nothing of self replaced
        assert all(np.array_equal(p, q) for item, old in zip(masks.items, before)
                   if isinstance(item, list) for p, q in zip(item, old))
    with pytest.raises(ValueError, match="'crop' is not one of"):
        LazyBitmapMasks([], 10, 10).chain([('crop', (np.array([0, 0, 5, 5]),), {})])
