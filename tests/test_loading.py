"""NativeLoadImageFromFile against mmcv's LoadImageFromFile on the same files."""
import functools

import cv2
import numpy as np
import pytest
import torch
from mmcv.transforms import LoadImageFromFile

from mmdet_ext.io import DEFAULT_MAX_PIXELS
from mmdet_ext.ops import decode_image
from mmdet_ext.transforms import ImageLoadError, NativeLoadImageFromFile, NativeLoadResizeFlip


def _images(root):
    """One image of each kind the toy set has (toy_data.IMAGE_KINDS)."""
    return sorted((root / 'train').glob('*.jpg'))[:6]


@pytest.mark.parametrize('kwargs', [
    {}, {'to_float32': True}, {'color_type': 'grayscale'}, {'color_type': 'unchanged'},
    {'imdecode_backend': 'pillow'},  # accepted for compatibility; decoding stays OpenCV
])
def test_same_results_as_mmcv(toy_coco_root, kwargs):
    mmcv_kwargs = {k: v for k, v in kwargs.items() if k != 'imdecode_backend'}
    for path in _images(toy_coco_root):
        ours = NativeLoadImageFromFile(**kwargs)(dict(img_path=str(path)))
        reference = LoadImageFromFile(**mmcv_kwargs)(dict(img_path=str(path)))
        assert ours.keys() == reference.keys()
        assert ours['img'].dtype == reference['img'].dtype
        np.testing.assert_array_equal(ours['img'], reference['img'])
        assert ours['img_shape'] == reference['img_shape'] == cv2.imread(str(path)).shape[:2]
        assert ours['ori_shape'] == reference['ori_shape']


@pytest.mark.parametrize('content, cause', [
    (b'', 'empty'),
    (b'GIF89a definitely not a jpeg', 'could not decode'),
])
def test_bad_file_error_names_the_file(tmp_path, content, cause):
    path = tmp_path / 'broken.jpg'
    path.write_bytes(content)
    with pytest.raises(RuntimeError, match=f'cannot load {path}.*{cause}'):
        NativeLoadImageFromFile()(dict(img_path=str(path)))


def _drop_middle_of_scan(jpeg: bytes) -> bytes:
    """The JPEG without the middle third of its first scan; markers and EOI stay."""
    sos = jpeg.index(b'\xff\xda')
    start = end = sos + 2 + int.from_bytes(jpeg[sos + 2:sos + 4], 'big')
    while not (jpeg[end] == 0xFF and jpeg[end + 1] != 0 and not 0xD0 <= jpeg[end + 1] <= 0xD7):
        end += 1
    third = (end - start) // 3
    return jpeg[:start + third] + jpeg[start + 2 * third:]


def test_corrupt_jpeg_scan_error_names_the_file(toy_coco_root, tmp_path):
    path = tmp_path / 'corrupt_scan.jpg'
    path.write_bytes(_drop_middle_of_scan(_images(toy_coco_root)[0].read_bytes()))
    # mmcv (cv2.imdecode) loads it without a word: libjpeg only warns
    assert LoadImageFromFile()(dict(img_path=str(path)))['img'].shape == (240, 320, 3)
    with pytest.raises(RuntimeError, match=f'cannot load {path}: decode_image: corrupt JPEG data'):
        NativeLoadImageFromFile()(dict(img_path=str(path)))
    assert NativeLoadImageFromFile(ignore_empty=True)(dict(img_path=str(path))) is None


def test_missing_file_error_names_the_file(tmp_path):
    path = tmp_path / 'nowhere.jpg'
    with pytest.raises(RuntimeError, match=f'cannot load {path}'):
        NativeLoadImageFromFile()(dict(img_path=str(path)))


def test_ignore_empty_returns_none(tmp_path):
    path = tmp_path / 'empty.jpg'
    path.write_bytes(b'')
    assert NativeLoadImageFromFile(ignore_empty=True)(dict(img_path=str(path))) is None


@pytest.mark.parametrize('transform', [
    NativeLoadImageFromFile, functools.partial(NativeLoadResizeFlip, scale_factor=1.0)])
def test_max_pixels_reaches_the_decoder_for_formats_without_a_header_check(tmp_path, transform):
    # BMP has no header check in Python: the limit must still be the transform's, not another one.
    path = tmp_path / 'twenty_by_thirty.bmp'
    cv2.imwrite(str(path), np.zeros((20, 30, 3), dtype=np.uint8))
    with pytest.raises(ImageLoadError, match=f'{path}.*more than max_pixels=599'):
        transform(max_pixels=599)(dict(img_path=str(path)))
    assert transform(max_pixels=600)(dict(img_path=str(path)))['ori_shape'] == (20, 30)


def test_decode_image_has_one_default_limit():
    assert DEFAULT_MAX_PIXELS == 1 << 28
    encoded = torch.from_numpy(cv2.imencode('.png', np.zeros((20, 30), dtype=np.uint8))[1])
    with pytest.raises(RuntimeError, match='more than max_pixels=599'):
        decode_image(encoded, 'grayscale', max_pixels=599)
    assert decode_image(encoded, 'grayscale').shape == (20, 30, 1)
