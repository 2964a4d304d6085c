"""NativeLoadResizeFlip against mmcv's LoadImageFromFile + mmdet's Resize + RandomFlip."""
import copy

import cv2
import mmcv
import numpy as np
import pytest
import torch
from mmcv.transforms import LoadImageFromFile
from mmdet.datasets.transforms import RandomFlip, Resize

from helpers.torch_features import requires_opcheck
from mmdet_ext import ImageLoadError, LazyCocoDataset, NativeLoadResizeFlip, ops
from mmdet_ext.transforms import LoadLazyAnnotations
from helpers.build import needs_native_decoding

# Every test here decodes images: a build without OpenCV (docs/build.md) skips them.
pytestmark = needs_native_decoding

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
RESULT_KEYS = ('ori_shape', 'img_shape', 'scale', 'scale_factor', 'keep_ratio', 'flip',
               'flip_direction')


def _annotated(root, split='train') -> list[dict]:
    dataset = LazyCocoDataset(data_root=str(root), ann_file=f'annotations/instances_{split}.json',
                              data_prefix=dict(img=f'{split}/'), metainfo=dict(classes=CLASSES),
                              pipeline=[LoadLazyAnnotations(with_bbox=True, with_mask=True)])
    return [dataset[i] for i in range(4)]


def _mmdet(results: dict, resize: dict, flip: dict) -> dict:
    results = LoadImageFromFile()(results)
    return RandomFlip(**flip)(Resize(**resize)(results))


def _assert_same(ours: dict, reference: dict, exact_image: bool = True) -> None:
    for key in RESULT_KEYS:
        assert ours[key] == reference[key], key
    np.testing.assert_array_equal(ours['homography_matrix'], reference['homography_matrix'])
    if exact_image:
        np.testing.assert_array_equal(ours['img'], reference['img'])
    assert ours['img'].shape == reference['img'].shape
    assert ours['gt_bboxes'].tensor.equal(reference['gt_bboxes'].tensor)
    np.testing.assert_array_equal(ours['gt_masks'].to_ndarray(),
                                  reference['gt_masks'].to_ndarray())


@pytest.mark.parametrize('resize', [
    dict(scale=(320, 240), keep_ratio=True),
    dict(scale=(500, 333), keep_ratio=True),
    dict(scale=(200, 190), keep_ratio=False),
    dict(scale_factor=0.37),
    dict(scale=(640, 480), keep_ratio=True, interpolation='nearest'),
])
@pytest.mark.parametrize('direction', ['horizontal', 'vertical', 'diagonal'])
def test_equals_mmdet_load_resize_flip(toy_coco_root, resize, direction):
    """Decoded at full size, everything equals mmdet's, pixels included, flipped or not."""
    flip = dict(prob=0.5, direction=direction)
    drawn = []
    # Seeds 0-3 draw no flip, flip, flip, no flip: both branches of each direction are compared.
    for seed, sample in enumerate(_annotated(toy_coco_root)):
        np.random.seed(seed)  # both draw the flip from numpy's global RNG, the same way
        reference = _mmdet(copy.deepcopy(sample), resize, flip)
        np.random.seed(seed)
        transform = NativeLoadResizeFlip(**resize, **flip, reduced_decode=False)
        _assert_same(transform(copy.deepcopy(sample)), reference)
        drawn.append(reference['flip_direction'])
    assert drawn == [None, direction, direction, None]


def test_without_prob_it_does_not_flip_or_draw(toy_coco_root):
    sample = _annotated(toy_coco_root, 'val')[0]
    state = np.random.get_state()[1].copy()
    ours = NativeLoadResizeFlip(scale=(320, 240), keep_ratio=True)(copy.deepcopy(sample))
    np.testing.assert_array_equal(np.random.get_state()[1], state)
    reference = Resize(scale=(320, 240), keep_ratio=True)(LoadImageFromFile()(sample))
    assert 'flip' not in ours
    np.testing.assert_array_equal(ours['img'], reference['img'])


def _large_copy(sample: dict, tmp_path, factor: int) -> dict:
    """The sample with its image (and masks' size) ``factor`` times larger, as a JPEG."""
    img = cv2.imread(sample['img_path'])
    big = cv2.resize(img, None, fx=factor, fy=factor, interpolation=cv2.INTER_CUBIC)
    path = tmp_path / f'big_{factor}.jpg'
    cv2.imwrite(str(path), big, [cv2.IMWRITE_JPEG_QUALITY, 95])
    sample = copy.deepcopy(sample)
    sample['img_path'] = str(path)
    sample['height'], sample['width'] = big.shape[:2]
    sample['gt_masks'] = sample['gt_masks'].rescale(float(factor))
    sample['gt_bboxes'].rescale_((factor, factor))
    return sample


def test_reduced_decode_stays_close_to_mmdet(toy_coco_root, tmp_path):
    """A 4x larger JPEG resized back to 320x240: libjpeg decodes it at 1/4 size."""
    sample = _large_copy(_annotated(toy_coco_root)[0], tmp_path, factor=4)
    resize, flip = dict(scale=(320, 240), keep_ratio=True), dict(prob=1.0)
    reference = _mmdet(copy.deepcopy(sample), resize, flip)
    full = NativeLoadResizeFlip(**resize, **flip, reduced_decode=False)(copy.deepcopy(sample))
    _assert_same(full, reference)
    transform = NativeLoadResizeFlip(**resize, **flip)
    reduced = transform(copy.deepcopy(sample))
    _assert_same(reduced, reference, exact_image=False)  # geometry and annotations exact
    difference = np.abs(reduced['img'].astype(int) - reference['img'].astype(int))
    assert 0 < difference.mean() < 3.0, difference.mean()  # reduced, and close


def test_mask_size_mismatch_and_bad_files_name_the_file(toy_coco_root, tmp_path):
    sample = _annotated(toy_coco_root)[0]
    wrong = copy.deepcopy(sample)
    wrong['gt_masks'] = wrong['gt_masks'].resize((100, 100))
    with pytest.raises(ImageLoadError, match=f'{sample["img_path"]} is 320x240 but its masks'):
        NativeLoadResizeFlip(scale=(320, 240), keep_ratio=True)(wrong)
    broken = tmp_path / 'broken.jpg'
    broken.write_bytes(open(sample['img_path'], 'rb').read()[:500])
    bad = dict(copy.deepcopy(sample), img_path=str(broken))
    with pytest.raises(ImageLoadError, match=f'NativeLoadResizeFlip: cannot load {broken}'):
        NativeLoadResizeFlip(scale=(320, 240), keep_ratio=True)(copy.deepcopy(bad))
    assert NativeLoadResizeFlip(scale=(320, 240), keep_ratio=True, ignore_empty=True)(bad) is None


@pytest.mark.parametrize('channels', [1, 3, 4])
@pytest.mark.parametrize('interpolation', ['nearest', 'bilinear', 'bicubic', 'area', 'lanczos'])
def test_warp_image_op_equals_mmcv(channels, interpolation):
    image = np.random.default_rng(channels).integers(0, 256, (37, 53, channels), dtype=np.uint8)
    tensor = torch.from_numpy(image)
    # The flips are done while the channels are split (mirrored rows: 16-pixel SIMD steps,
    # 8-byte swaps, then the tails), into a buffer each thread reuses: widths below and above
    # those steps, and sizes that shrink and grow from one call to the next.
    for out_shape, direction in [((37, 53), None), ((20, 91), 'horizontal'),
                                 ((80, 31), 'vertical'), ((37, 53), 'diagonal'),
                                 ((9, 5), 'horizontal'), ((64, 160), 'horizontal'),
                                 ((3, 17), 'diagonal'), ((120, 96), 'vertical')]:
        expected = mmcv.imresize(image, out_shape[::-1], interpolation=interpolation)
        expected = expected.reshape(*out_shape, channels)
        if direction is not None:
            expected = mmcv.imflip(expected, direction)
        got = ops.warp_image(tensor, out_shape, interpolation, direction).numpy().astype(int)
        # Bit-exact, except bicubic: Debian's OpenCV 4.6 and the cv2 wheel's 4.11 round a few
        # bicubic pixels differently (off by one).
        tolerance = 1 if interpolation == 'bicubic' else 0
        assert np.abs(got - expected.transpose(2, 0, 1)).max() <= tolerance


@pytest.mark.parametrize('channels', [1, 3])
@pytest.mark.parametrize('interpolation', ['nearest', 'bilinear', 'area', 'lanczos'])
def test_warp_image_op_keeps_the_part_mmdet_crops(channels, interpolation):
    """``keep``: mmdet's RandomCrop between the resize and the flip -- ``img[y:y+h, x:x+w]`` of
    the resized image, then flipped -- bit for bit: corners, edges, the whole, one pixel, a part
    of an image the resize leaves as it is."""
    image = np.random.default_rng(channels).integers(0, 256, (41, 59, channels), dtype=np.uint8)
    tensor = torch.from_numpy(image)
    for out_shape, keep, direction in [((80, 120), (0, 0, 30, 40), None),
                                       ((80, 120), (50, 80, 30, 40), 'horizontal'),
                                       ((80, 120), (13, 7, 61, 97), 'vertical'),
                                       ((80, 120), (0, 0, 80, 120), 'diagonal'),
                                       ((20, 25), (19, 24, 1, 1), None),
                                       ((41, 59), (5, 9, 30, 33), 'horizontal'),
                                       ((300, 17), (100, 3, 150, 14), 'diagonal')]:
        resized = mmcv.imresize(image, out_shape[::-1], interpolation=interpolation)
        y, x, h, w = keep
        expected = resized.reshape(*out_shape, channels)[y:y + h, x:x + w]
        if direction is not None:
            expected = mmcv.imflip(expected, direction)
        got = ops.warp_image(tensor, out_shape, interpolation, direction, keep).numpy()
        np.testing.assert_array_equal(got, expected.transpose(2, 0, 1))


@pytest.mark.parametrize('channels', [1, 3, 4])
def test_warp_image_op_keeps_the_part_of_large_and_halving_bilinear_resizes(channels):
    """A kept part of a bilinear resize is computed alone (resize_part.h): the same bits as the
    whole resize then the crop and the flip, at large scale jitter's sizes (a 640x480 image
    doubled, 1024x1024 kept), shrunk, and where cv2 halves exactly (its own filter, so the
    whole image is resized)."""
    rng = np.random.default_rng(10 + channels)
    for shape, out_shape, keep, direction in [
            ((480, 640), (1536, 2048), (311, 1023, 1024, 1024), 'horizontal'),
            ((480, 640), (1536, 2048), (0, 0, 1024, 1024), None),
            ((480, 640), (960, 1280), (1, 255, 959, 1024), 'diagonal'),
            ((480, 640), (210, 280), (3, 5, 200, 270), 'vertical'),
            ((480, 640), (240, 320), (7, 9, 200, 300), 'horizontal')]:
        image = rng.integers(0, 256, shape + (channels,), dtype=np.uint8)
        y, x, h, w = keep
        resized = mmcv.imresize(image, out_shape[::-1]).reshape(*out_shape, channels)
        expected = resized[y:y + h, x:x + w]
        if direction is not None:
            expected = mmcv.imflip(expected, direction)
        got = ops.warp_image(torch.from_numpy(image), out_shape, 'bilinear', direction,
                             keep).numpy()
        np.testing.assert_array_equal(got, expected.transpose(2, 0, 1))


@requires_opcheck
def test_warp_image_opcheck():
    tensor = torch.from_numpy(
        np.random.default_rng(3).integers(0, 256, (37, 53, 3), dtype=np.uint8))
    torch.library.opcheck(torch.ops.mmdet_ext.warp_image.default, (tensor, 20, 30, 1, 1))
    torch.library.opcheck(torch.ops.mmdet_ext.warp_image.default,
                          (tensor, 20, 30, 1, 1, [2, 3, 10, 12]))


def test_warp_image_op_refuses_bad_arguments():
    image = torch.zeros((4, 4, 3), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match='must be within 1..32768'):
        torch.ops.mmdet_ext.warp_image(image, 0, 4, 1, 0)
    with pytest.raises(RuntimeError, match='flip must be 0'):
        torch.ops.mmdet_ext.warp_image(image, 4, 4, 1, 7)
    for keep in ([0, 0, 0, 2], [3, 0, 2, 2], [0, 1, 4, 4], [-1, 0, 2, 2]):
        with pytest.raises(RuntimeError, match=r'the kept part \(y, x, h, w\) = .* must be '
                                               'non-empty and inside the 4x4 resized image'):
            torch.ops.mmdet_ext.warp_image(image, 4, 4, 1, 0, keep)
    with pytest.raises(RuntimeError, match=r'keep must be \(y, x, height, width\)'):
        torch.ops.mmdet_ext.warp_image(image, 4, 4, 1, 0, [0, 0, 2])
    with pytest.raises(RuntimeError, match='expected a CPU uint8 tensor'):
        torch.ops.mmdet_ext.warp_image(image.float(), 4, 4, 1, 0)
    with pytest.raises(ValueError, match='interpolation must be one of'):
        ops.warp_image(image, (4, 4), 'cubic')


def test_exif_rotated_jpeg_is_sized_like_mmdet(tmp_path):
    """Width and height swap under EXIF orientation 6: the target comes from the decoded image,
    as mmdet's Resize takes it from LoadImageFromFile's output, reduced decode or not."""
    from PIL import Image
    rng = np.random.default_rng(0)
    pixels = cv2.resize(rng.integers(0, 256, (60, 100, 3), dtype=np.uint8), (1000, 600))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    path = tmp_path / 'rotated.jpg'
    Image.fromarray(pixels[:, :, ::-1]).save(path, 'JPEG', quality=95, exif=exif)
    resize = dict(scale=(200, 150), keep_ratio=True)
    reference = Resize(**resize)(LoadImageFromFile()(dict(img_path=str(path))))
    assert reference['ori_shape'] == (1000, 600)
    for reduced in (False, True):
        ours = NativeLoadResizeFlip(**resize, reduced_decode=reduced)(dict(img_path=str(path)))
        for key in ('ori_shape', 'img_shape', 'scale_factor'):
            assert ours[key] == reference[key], (reduced, key)
    np.testing.assert_array_equal(
        NativeLoadResizeFlip(**resize, reduced_decode=False)(dict(img_path=str(path)))['img'],
        reference['img'])


def test_an_image_of_another_size_than_its_masks_is_refused_by_name(tmp_path):
    """The annotation file declares another size than the image has: its masks would not fit."""
    from mmdet.structures.mask import BitmapMasks
    path = tmp_path / 'a.png'
    cv2.imwrite(str(path), np.zeros((24, 32, 3), np.uint8))
    results = dict(img_path=str(path), gt_masks=BitmapMasks(np.zeros((1, 20, 30), np.uint8),
                                                            20, 30))
    with pytest.raises(ImageLoadError) as info:
        NativeLoadResizeFlip(scale=(64, 48))(results)
    assert str(info.value) == (
        f'NativeLoadResizeFlip: {path} is 32x24 but its masks are 30x20 (the annotation file '
        'declares another image size; tools/validate_coco.py lists such images)')


def test_plan_writes_what_transform_writes_also_for_boxes_given_as_arrays(tmp_path):
    """mmdet's LoadAnnotations(box_type=None) gives boxes as an ndarray: the batched fetch's
    plan (every key but the pixels) takes them as transform does, and gives an ndarray back."""
    path = tmp_path / 'a.jpg'
    cv2.imwrite(str(path), np.random.default_rng(0).integers(0, 255, (48, 64, 3), np.uint8))
    boxes = np.array([[1.0, 2.0, 30.0, 20.0], [10.0, 5.0, 60.0, 47.0]], np.float32)
    transform = NativeLoadResizeFlip(scale=(32, 24), keep_ratio=True, prob=1.0)
    planned, done = dict(img_path=str(path), gt_bboxes=boxes.copy()), \
        dict(img_path=str(path), gt_bboxes=boxes.copy())
    assert transform.plan(planned) is not None
    transform(done)
    assert isinstance(planned['gt_bboxes'], np.ndarray)
    np.testing.assert_array_equal(planned['gt_bboxes'], done['gt_bboxes'])
    assert planned.keys() == done.keys()


@pytest.mark.parametrize('boxes', ['none', 'float64'])
@pytest.mark.parametrize('direction', ['horizontal', 'vertical', 'diagonal'])
def test_a_flip_without_boxes_or_of_float64_boxes_is_mmdets(toy_coco_root, boxes, direction):
    """Only float32 HorizontalBoxes take the numpy flip; a sample without boxes (an unlabelled
    image) or with float64 ones is flipped as mmdet flips it."""
    from mmdet.structures.bbox import HorizontalBoxes
    sample = _annotated(toy_coco_root)[0]
    del sample['gt_masks']
    if boxes == 'none':
        del sample['gt_bboxes']
    else:
        sample['gt_bboxes'] = HorizontalBoxes(sample['gt_bboxes'].tensor.double())
    resize, flip = dict(scale=(200, 150), keep_ratio=True), dict(prob=1.0, direction=direction)
    reference = _mmdet(copy.deepcopy(sample), resize, flip)
    ours = NativeLoadResizeFlip(**resize, **flip, reduced_decode=False)(copy.deepcopy(sample))
    np.testing.assert_array_equal(ours['img'], reference['img'])
    assert ours['flip_direction'] == reference['flip_direction'] == direction
    if boxes == 'none':
        assert 'gt_bboxes' not in ours
    else:
        assert ours['gt_bboxes'].tensor.dtype == torch.float64
        assert ours['gt_bboxes'].tensor.equal(reference['gt_bboxes'].tensor)
