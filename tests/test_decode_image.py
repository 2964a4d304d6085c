"""mmdet_ext::decode_image against its reference, cv2.imdecode."""
import cv2
import numpy as np
import pytest
import torch

import mmdet_ext  # noqa: F401  (registers torch.ops.mmdet_ext)
from mmdet_ext.ops import IMREAD_FLAGS, decode_image


def _random_image(seed: int, height: int, width: int, channels: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = cv2.GaussianBlur(rng.integers(0, 256, (height, width, channels), dtype=np.uint8),
                              (7, 7), 0)
    return smooth.reshape(height, width, channels)


def _encode(img: np.ndarray, ext: str) -> torch.Tensor:
    ok, buf = cv2.imencode(ext, img)
    assert ok
    return torch.from_numpy(buf.reshape(-1).copy())


@pytest.mark.parametrize('ext', ['.jpg', '.png', '.bmp'])
@pytest.mark.parametrize('color_type', sorted(IMREAD_FLAGS))
@pytest.mark.parametrize('shape', [(240, 320, 3), (17, 5, 3), (64, 48, 1)])
def test_decode_matches_cv2_imdecode(ext, color_type, shape):
    data = _encode(_random_image(sum(shape), *shape), ext)
    expected = cv2.imdecode(data.numpy(), IMREAD_FLAGS[color_type])
    if expected.ndim == 2:
        expected = expected[:, :, None]
    decoded = decode_image(data, color_type)
    assert decoded.dtype == torch.uint8 and decoded.is_contiguous()
    np.testing.assert_array_equal(decoded.numpy(), expected)


def test_decode_png_with_alpha_unchanged_keeps_four_channels():
    data = _encode(_random_image(3, 20, 30, 4), '.png')
    decoded = decode_image(data, 'unchanged')
    assert decoded.shape == (20, 30, 4)
    np.testing.assert_array_equal(decoded.numpy(), cv2.imdecode(data.numpy(), -1))


def test_decoded_tensor_outlives_its_input():
    data = _encode(_random_image(4, 32, 32, 3), '.png')
    decoded = decode_image(data.clone())
    expected = cv2.imdecode(data.numpy(), 1)
    del data
    np.testing.assert_array_equal(decoded.numpy(), expected)


@pytest.mark.parametrize('bad, message', [
    (torch.empty(0, dtype=torch.uint8), 'empty'),
    (torch.tensor(list(b'not an image at all'), dtype=torch.uint8), 'could not decode'),
    (torch.zeros(4, 4, dtype=torch.uint8), '1-D uint8'),
    (torch.zeros(8, dtype=torch.float32), '1-D uint8'),
])
def test_bad_input_gives_clear_error(bad, message):
    with pytest.raises(RuntimeError, match=message):
        decode_image(bad)


@pytest.mark.parametrize('keep', [0.3, 0.9, 0.999])
def test_truncated_jpeg_is_an_error_not_a_gray_filled_image(keep):
    data = _encode(_random_image(5, 64, 64, 3), '.jpg')
    truncated = data[: int(data.numel() * keep)].clone()
    with pytest.raises(RuntimeError, match='truncated JPEG'):
        decode_image(truncated)


def test_jpeg_with_trailing_padding_still_decodes():
    data = _encode(_random_image(8, 32, 32, 3), '.jpg')
    padded = torch.cat([data, torch.zeros(16, dtype=torch.uint8)])
    np.testing.assert_array_equal(decode_image(padded).numpy(), cv2.imdecode(data.numpy(), 1))


def test_truncated_png_is_an_error():
    data = _encode(_random_image(9, 64, 64, 3), '.png')
    with pytest.raises(RuntimeError, match='could not decode'):
        decode_image(data[: data.numel() // 2].clone())


def test_unsupported_flag_is_rejected():
    data = _encode(_random_image(6, 8, 8, 3), '.png')
    with pytest.raises(RuntimeError, match='unsupported imread flags'):
        torch.ops.mmdet_ext.decode_image(data, 2)  # IMREAD_ANYDEPTH alone
    with pytest.raises(ValueError, match='color_type'):
        decode_image(data, 'rgb')


def test_opcheck():
    data = _encode(_random_image(7, 16, 24, 3), '.png')
    torch.library.opcheck(torch.ops.mmdet_ext.decode_image.default, (data, 1),
                          test_utils=('test_schema', 'test_autograd_registration'))
