"""Differential conformance of the loading transforms: ``NativeLoadImageFromFile`` against mmcv's
``LoadImageFromFile`` and ``LoadLazyAnnotations`` against mmdet's ``LoadAnnotations``, same
arguments, same files: the same results (keys, values, dtypes, box types).

Not here: the exception type for a missing or unreadable image (the bad-data suite owns it).
"""
import copy

import cv2
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mmcv.transforms import LoadImageFromFile
from mmdet.datasets.transforms import LoadAnnotations

from helpers.mask_annotations import samples
from mmdet_ext.transforms import LoadLazyAnnotations, NativeLoadImageFromFile

CONFORMANCE = settings(max_examples=20, deadline=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.function_scoped_fixture])
COLOR_TYPES = ['color', 'grayscale', 'unchanged', 'color_ignore_orientation',
               'grayscale_ignore_orientation']


@pytest.fixture(scope='module')
def image_files(tmp_path_factory) -> dict:
    """Images of every channel layout and format the zoo meets: colour JPEG/PNG/BMP/WebP (lossy
    and lossless)/TIFF/PPM/JPEG 2000, grayscale, RGBA."""
    root = tmp_path_factory.mktemp('images')
    rng = np.random.default_rng(0)
    color = rng.integers(0, 256, (23, 31, 3), np.uint8)
    images = {'color.jpg': color, 'color.png': color, 'color.bmp': color,
              'color.webp': color, 'lossless.webp': color, 'color.tiff': color,
              'color.ppm': color, 'gray.pgm': color[:, :, 0],
              # OpenJPEG's default 6 resolution levels need 32 px a side
              'color.jp2': rng.integers(0, 256, (37, 53, 3), np.uint8),
              'gray.tif': color[:, :, 0], 'gray.png': color[:, :, 0], 'gray.jpg': color[:, :, 0],
              'rgba.png': np.dstack([color, rng.integers(0, 256, (23, 31), np.uint8)]),
              'rgba.tiff': np.dstack([color, rng.integers(0, 256, (23, 31), np.uint8)])}
    for name, pixels in images.items():
        # cv2 writes lossless WebP by default; quality <= 100 is the lossy (VP8) codec
        params = [cv2.IMWRITE_WEBP_QUALITY, 80] if name == 'color.webp' else []
        cv2.imwrite(str(root / name), pixels, params)
    return {name: str(root / name) for name in images}


@pytest.mark.parametrize('color_type', COLOR_TYPES)
@pytest.mark.parametrize('to_float32', [False, True])
@pytest.mark.parametrize('backend_args', [None, dict(backend='local')])
@pytest.mark.parametrize('name', ['color.jpg', 'color.png', 'color.bmp', 'color.webp',
                                  'lossless.webp', 'color.tiff', 'color.ppm', 'color.jp2',
                                  'gray.pgm', 'gray.tif', 'gray.png', 'gray.jpg', 'rgba.png',
                                  'rgba.tiff'])
def test_load_image_from_file(image_files, name, color_type, to_float32, backend_args):
    args = dict(color_type=color_type, to_float32=to_float32, backend_args=backend_args)
    reference = LoadImageFromFile(**args)(dict(img_path=image_files[name]))
    ours = NativeLoadImageFromFile(**args)(dict(img_path=image_files[name]))
    assert ours.keys() == reference.keys()
    assert ours['img'].dtype == reference['img'].dtype
    np.testing.assert_array_equal(ours['img'], reference['img'])
    assert ours['img_shape'] == reference['img_shape']
    assert ours['ori_shape'] == reference['ori_shape']


def test_ignore_empty_returns_none_as_mmcv(tmp_path):
    missing = dict(img_path=str(tmp_path / 'missing.jpg'))
    assert LoadImageFromFile(ignore_empty=True)(dict(missing)) is None
    assert NativeLoadImageFromFile(ignore_empty=True)(dict(missing)) is None


def _with_seg_map(sample: dict, directory, seed: int) -> dict:
    seg = np.random.default_rng(seed).integers(0, 6, sample['ori_shape'], np.uint8)
    path = directory / f'seg_{seed}_{seg.shape[0]}x{seg.shape[1]}.png'
    cv2.imwrite(str(path), seg)
    return dict(sample, seg_map_path=str(path))


@CONFORMANCE
@given(sample=samples(), seed=st.integers(0, 1000),
       args=st.fixed_dictionaries(dict(with_bbox=st.booleans(), with_label=st.booleans(),
                                       with_mask=st.booleans(), with_seg=st.booleans(),
                                       poly2mask=st.booleans(),
                                       box_type=st.sampled_from(['hbox', None]))))
def test_load_annotations(sample, seed, args, tmp_path_factory):
    sample = _with_seg_map(sample, tmp_path_factory.getbasetemp(), seed)
    ours = LoadLazyAnnotations(**args)(copy.deepcopy(sample))
    reference = LoadAnnotations(**args)(copy.deepcopy(sample))
    assert ours.keys() == reference.keys()
    for key, expected in reference.items():
        actual = ours[key]
        if key == 'gt_masks':
            assert isinstance(actual, type(expected))
            np.testing.assert_array_equal(actual.to_ndarray(), expected.to_ndarray())
        elif key == 'gt_bboxes':
            assert type(actual) is type(expected)
            expected = expected if isinstance(expected, np.ndarray) else expected.tensor
            actual = actual if isinstance(actual, np.ndarray) else actual.tensor
            np.testing.assert_array_equal(actual, expected)
            assert actual.dtype == expected.dtype
        elif isinstance(expected, (np.ndarray, torch.Tensor)):
            np.testing.assert_array_equal(actual, expected)
            assert actual.dtype == expected.dtype
        elif key != 'instances':  # ignore flags are written into the instances: compared above
            assert actual == expected, key
