"""mmdet_ext::decode_image against its reference, cv2.imdecode (the opencv-python wheel)."""
import io
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image

from helpers.torch_features import requires_opcheck
import mmdet_ext  # noqa: F401  (registers torch.ops.mmdet_ext)
from mmdet_ext.ops import IMREAD_FLAGS, SCALE_DENOMS, decode_image
from helpers.build import needs_native_decoding

# Every test here decodes images: a build without OpenCV (docs/build.md) skips them.
pytestmark = needs_native_decoding

# A JPEG whose scan has one flipped bit (EOI intact): libjpeg warns "Corrupt JPEG data: 13
# extraneous bytes before marker 0xd9" and cv2.imdecode returns wrong pixels (docs/fuzzing.md).
CORRUPT_SCAN_JPEG = Path(__file__).parent / 'regressions' / 'decode_image_corrupt_scan.jpg'
INCOMPLETE_PROGRESSIVE_JPEG = (Path(__file__).parent / 'regressions'
                               / 'decode_image_incomplete_progressive.jpg')

# cv2.IMREAD_REDUCED_GRAYSCALE_N; | IMREAD_COLOR gives IMREAD_REDUCED_COLOR_N
REDUCED_FLAG = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
                8: cv2.IMREAD_REDUCED_GRAYSCALE_8}

SAMPLING = {name: getattr(cv2, f'IMWRITE_JPEG_SAMPLING_FACTOR_{name}', None)
            for name in ('444', '422', '420')}
JPEG_VARIANTS = {
    'baseline': [],
    'progressive': [cv2.IMWRITE_JPEG_PROGRESSIVE, 1],
    'optimized': [cv2.IMWRITE_JPEG_OPTIMIZE, 1],
    'restart_markers': [cv2.IMWRITE_JPEG_RST_INTERVAL, 3],
    **{f'sampling_{name}': [cv2.IMWRITE_JPEG_SAMPLING_FACTOR, value]
       for name, value in SAMPLING.items()},
}


def _random_image(seed: int, height: int, width: int, channels: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    smooth = cv2.GaussianBlur(rng.integers(0, 256, (height, width, channels), dtype=np.uint8),
                              (7, 7), 0)
    return smooth.reshape(height, width, channels)


def _encode(img: np.ndarray, ext: str, params=()) -> torch.Tensor:
    ok, buf = cv2.imencode(ext, img, list(params))
    assert ok
    return torch.from_numpy(buf.reshape(-1).copy())


def _tensor(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _imdecode(data: torch.Tensor | bytes, flags: int) -> np.ndarray | None:
    buf = np.frombuffer(bytes(data.numpy()) if isinstance(data, torch.Tensor) else data, np.uint8)
    img = cv2.imdecode(buf, flags)
    return img[:, :, None] if img is not None and img.ndim == 2 else img


def _reference(data, color_type: str, scale_denom: int, jpeg_channels: int) -> np.ndarray:
    """cv2.imdecode's result for decode_image(data, color_type, scale_denom) on a JPEG."""
    flags = IMREAD_FLAGS[color_type]
    if scale_denom > 1 and color_type == 'unchanged':
        # no IMREAD_REDUCED_UNCHANGED: unchanged is colour (or gray for a 1-component JPEG)
        # without EXIF rotation
        flags = (1 if jpeg_channels > 1 else 0) | cv2.IMREAD_IGNORE_ORIENTATION
    return _imdecode(data, flags | REDUCED_FLAG[scale_denom])


def _assert_matches_cv2(data, jpeg_channels: int, color_types=tuple(IMREAD_FLAGS),
                        scale_denoms=SCALE_DENOMS) -> None:
    for color_type in color_types:
        for scale_denom in scale_denoms:
            expected = _reference(data, color_type, scale_denom, jpeg_channels)
            decoded = decode_image(data, color_type, scale_denom)
            assert decoded.dtype == torch.uint8 and decoded.is_contiguous()
            assert decoded.shape == expected.shape, (color_type, scale_denom)
            assert torch.equal(decoded, torch.from_numpy(expected)), (color_type, scale_denom)


@pytest.mark.parametrize('ext', ['.jpg', '.png', '.bmp'])
@pytest.mark.parametrize('color_type', sorted(IMREAD_FLAGS))
@pytest.mark.parametrize('shape', [(240, 320, 3), (17, 5, 3), (64, 48, 1)])
def test_decode_matches_cv2_imdecode(ext, color_type, shape):
    data = _encode(_random_image(sum(shape), *shape), ext)
    expected = _imdecode(data, IMREAD_FLAGS[color_type])
    decoded = decode_image(data, color_type)
    assert decoded.dtype == torch.uint8 and decoded.is_contiguous()
    np.testing.assert_array_equal(decoded.numpy(), expected)


# ---------------------------------------------------------------------------------------------
# JPEG: bit-exact with cv2.imdecode for every encoding, mode and reduced size
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('variant', sorted(JPEG_VARIANTS))
@pytest.mark.parametrize('shape', [(240, 320, 3), (17, 5, 3), (33, 65, 3), (1, 1, 3),
                                   (101, 77, 1)])
@pytest.mark.parametrize('quality', [40, 95])
def test_jpeg_bit_exact_with_cv2_in_every_mode_and_scale(variant, shape, quality):
    params = JPEG_VARIANTS[variant]
    if None in params:
        pytest.skip(f'this OpenCV has no {variant}')
    img = _random_image(sum(shape) + quality, *shape)
    data = _encode(img, '.jpg', [cv2.IMWRITE_JPEG_QUALITY, quality, *params])
    _assert_matches_cv2(data, jpeg_channels=shape[2])


@pytest.mark.parametrize('scale_denom', SCALE_DENOMS)
def test_reduced_jpeg_sides_are_rounded_up(scale_denom):
    data = _encode(_random_image(11, 37, 50, 3), '.jpg')
    decoded = decode_image(data, 'color', scale_denom)
    assert decoded.shape == (-(-37 // scale_denom), -(-50 // scale_denom), 3)


@pytest.mark.parametrize('ext', ['.png', '.bmp'])
def test_scale_denom_is_ignored_for_other_formats(ext):
    data = _encode(_random_image(12, 30, 40, 3), ext)
    for scale_denom in SCALE_DENOMS:
        decoded = decode_image(data, 'color', scale_denom)
        np.testing.assert_array_equal(decoded.numpy(), _imdecode(data, cv2.IMREAD_COLOR))


def test_cmyk_jpeg_goes_through_opencv_and_matches():
    img = _random_image(13, 45, 70, 3)
    buffer = io.BytesIO()
    Image.fromarray(img[:, :, ::-1]).convert('CMYK').save(buffer, 'JPEG', quality=90)
    _assert_matches_cv2(_tensor(buffer.getvalue()), jpeg_channels=4)


def test_unknown_jfif_version_is_only_a_warning():
    # libjpeg warns about JFIF 3.01 but decodes the data as usual; so does OpenCV
    data = _encode(_random_image(14, 20, 30, 3), '.jpg')
    assert bytes(data[6:11].numpy()) == b'JFIF\0'
    data[11] = 3
    _assert_matches_cv2(data, jpeg_channels=3, scale_denoms=(1, ))


# ---------------------------------------------------------------------------------------------
# EXIF orientation, as cv2.imdecode applies it
# ---------------------------------------------------------------------------------------------

def _tiff(entries, little_endian: bool = True) -> bytes:
    """A TIFF header and IFD0 of (tag, type, count, 4-byte value) entries."""
    order = '<' if little_endian else '>'
    head = (b'II' if little_endian else b'MM') + struct.pack(order + 'HI', 42, 8)
    ifd = b''.join(struct.pack(order + 'HHI', tag, kind, count) + value
                   for tag, kind, count, value in entries)
    return head + struct.pack(order + 'H', len(entries)) + ifd + struct.pack(order + 'I', 0)


def _orientation_entry(orientation: int, little_endian: bool = True):
    return (0x0112, 3, 1, struct.pack('<HH' if little_endian else '>HH', orientation, 0))


def _with_app1(jpeg: torch.Tensor, *payloads: bytes) -> torch.Tensor:
    """The JPEG with APP1 segments holding `payloads` right after SOI."""
    raw = bytes(jpeg.numpy())
    segments = b''.join(b'\xff\xe1' + struct.pack('>H', len(p) + 2) + p for p in payloads)
    return _tensor(raw[:2] + segments + raw[2:])


def _pillow_jpeg(img: np.ndarray, orientation: int) -> torch.Tensor:
    """A JPEG written by Pillow with an EXIF orientation (Pillow writes big-endian TIFF)."""
    exif = Image.Exif()
    exif[0x0112] = orientation
    pil = Image.fromarray(img[:, :, ::-1] if img.shape[2] == 3 else img[:, :, 0])
    buffer = io.BytesIO()
    pil.save(buffer, 'JPEG', quality=90, exif=exif)
    return _tensor(buffer.getvalue())


def _expected_shape(color_type: str, orientation: int, height: int, width: int):
    rotates = color_type in ('color', 'grayscale') and orientation >= 5
    return (width, height) if rotates else (height, width)


@pytest.mark.parametrize('orientation', range(1, 9))
@pytest.mark.parametrize('writer', ['pillow_big_endian', 'spliced_little_endian'])
@pytest.mark.parametrize('channels', [3, 1])
def test_exif_orientation_matches_cv2(orientation, writer, channels):
    img = _random_image(orientation, 23, 41, channels)
    if writer == 'pillow_big_endian':
        data = _pillow_jpeg(img, orientation)
    else:
        exif = b'Exif\0\0' + _tiff([_orientation_entry(orientation)])
        data = _with_app1(_encode(img, '.jpg'), exif)
    _assert_matches_cv2(data, jpeg_channels=channels)
    for color_type in IMREAD_FLAGS:
        shape = decode_image(data, color_type).shape[:2]
        assert shape == _expected_shape(color_type, orientation, 23, 41), color_type


def test_exif_orientation_is_not_applied_for_unchanged():
    data = _pillow_jpeg(_random_image(20, 23, 41, 3), 6)
    unchanged = decode_image(data, 'unchanged')
    np.testing.assert_array_equal(unchanged.numpy(), _imdecode(data, cv2.IMREAD_UNCHANGED))
    np.testing.assert_array_equal(unchanged.numpy(), decode_image(data, 'color').numpy()
                                  .transpose(1, 0, 2)[::-1])  # 6 = rotate 90 clockwise


# OpenCV's ExifReader quirks: the first APP1 counts, whatever it holds; a bad value before the
# orientation tag ends the parse; the first of two orientation tags wins.
XMP = b'http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>'
OUT_OF_BOUNDS_STRING = (0x010F, 2, 100, struct.pack('<I', 5000))  # Make, 100 bytes at 5000


@pytest.mark.parametrize('payloads, rotated', [
    ([XMP, b'Exif\0\0' + _tiff([_orientation_entry(6)])], False),
    ([b'Exif\0\0' + _tiff([_orientation_entry(6)]), XMP], True),
    ([b'Xyz\0\0\0' + _tiff([_orientation_entry(6)])], True),
    ([b'Exif\0\0' + _tiff([OUT_OF_BOUNDS_STRING, _orientation_entry(6)])], False),
    ([b'Exif\0\0' + _tiff([_orientation_entry(6), OUT_OF_BOUNDS_STRING])], True),
    ([b'Exif\0\0' + _tiff([_orientation_entry(5), _orientation_entry(1)])], True),
    ([b'Exif\0\0' + _tiff([_orientation_entry(1), _orientation_entry(5)])], False),
    ([b'Exif\0\0' + _tiff([_orientation_entry(9)])], False),
    ([b'Exif\0'], False),
])
def test_exif_parsing_quirks_match_cv2(payloads, rotated):
    data = _with_app1(_encode(_random_image(21, 30, 50, 3), '.jpg'), *payloads)
    _assert_matches_cv2(data, jpeg_channels=3, scale_denoms=(1, 2))
    assert decode_image(data).shape[:2] == ((50, 30) if rotated else (30, 50))


# ---------------------------------------------------------------------------------------------
# Corrupt and truncated data: errors, never silently wrong pixels
# ---------------------------------------------------------------------------------------------

def _first_scan(raw: bytes) -> tuple[int, int]:
    """[start, end) of the entropy-coded data of the first scan (up to the next marker that is
    neither a stuffed FF 00 nor a restart marker)."""
    sos = raw.index(b'\xff\xda')
    start = end = sos + 2 + int.from_bytes(raw[sos + 2:sos + 4], 'big')
    while not (raw[end] == 0xFF and raw[end + 1] != 0 and not 0xD0 <= raw[end + 1] <= 0xD7):
        end += 1
    return start, end


def _flip_scan_bytes(data: torch.Tensor) -> torch.Tensor:
    """Flip bits in the second half of the first scan, leaving every marker (and EOI) intact."""
    raw = bytearray(data.numpy())
    start, end = _first_scan(raw)
    for i in range((start + end) // 2, end):
        if raw[i] != 0xFF and raw[i - 1] != 0xFF and raw[i] ^ 0x5A != 0xFF:
            raw[i] ^= 0x5A
    return _tensor(bytes(raw))


def _drop_scan_bytes(data: torch.Tensor) -> torch.Tensor:
    """Cut the middle third out of the first scan, keeping every marker (and EOI)."""
    raw = bytes(data.numpy())
    start, end = _first_scan(raw)
    third = (end - start) // 3
    return _tensor(raw[:start + third] + raw[start + 2 * third:])


CORRUPTIONS = {'flipped_bytes': _flip_scan_bytes, 'dropped_bytes': _drop_scan_bytes}


@pytest.mark.parametrize('corruption', sorted(CORRUPTIONS))
@pytest.mark.parametrize('variant, channels', [('baseline', 3), ('progressive', 3),
                                               ('baseline', 1), ('restart_markers', 3)])
def test_corrupt_scan_is_an_error_where_cv2_returns_wrong_pixels(corruption, variant, channels):
    img = _random_image(30, 96, 128, channels)
    clean = _encode(img, '.jpg', JPEG_VARIANTS[variant])
    corrupt = CORRUPTIONS[corruption](clean)
    # the reference decodes it "successfully", into something else than the clean image
    silently_wrong = _imdecode(corrupt, cv2.IMREAD_COLOR)
    assert silently_wrong is not None and silently_wrong.shape == (96, 128, 3)
    assert not np.array_equal(silently_wrong, _imdecode(clean, cv2.IMREAD_COLOR))
    for color_type in IMREAD_FLAGS:
        for scale_denom in SCALE_DENOMS:
            with pytest.raises(RuntimeError, match='corrupt JPEG data.*libjpeg: Corrupt JPEG data'):
                decode_image(corrupt, color_type, scale_denom)


def test_fuzz_finding_corrupt_scan_regression():
    data = _tensor(CORRUPT_SCAN_JPEG.read_bytes())
    assert _imdecode(data, cv2.IMREAD_COLOR).shape == (16, 16, 3)  # what OpenCV makes of it
    with pytest.raises(RuntimeError, match='corrupt JPEG data in the 667-byte buffer .*13 '
                                           'extraneous bytes before marker 0xd9'):
        decode_image(data)


def _scan_starts(raw: bytes) -> list[int]:
    """Offsets of the SOS markers of a JPEG written by cv2/Pillow (no 0xFFDA inside scans)."""
    return [i for i in range(len(raw) - 1) if raw[i] == 0xFF and raw[i + 1] == 0xDA]


@pytest.mark.parametrize('channels', [3, 1])
def test_progressive_jpeg_cut_at_a_scan_boundary_is_an_error(channels):
    # libjpeg gives no warning for a progressive JPEG whose scans stop early (EOI after any scan)
    # and estimates the missing coefficients, differently in libjpeg-turbo 2.1.5 and in the cv2
    # wheel's 3.0.3: the pixels were up to 6 levels off cv2's (fuzzing found it, docs/fuzzing.md).
    raw = bytes(_encode(_random_image(41, 24, 32, channels), '.jpg',
                        JPEG_VARIANTS['progressive']).numpy())
    scans = _scan_starts(raw)
    assert len(scans) > 2
    _assert_matches_cv2(_tensor(raw), channels)  # all scans: fine
    for cut in scans[1:]:
        data = _tensor(raw[:cut] + b'\xff\xd9')
        assert _imdecode(data, cv2.IMREAD_COLOR) is not None  # OpenCV decodes it
        for color_type in IMREAD_FLAGS:
            for scale_denom in (1, 8):
                with pytest.raises(RuntimeError, match='incomplete progressive JPEG'):
                    decode_image(data, color_type, scale_denom)


def test_fuzz_finding_incomplete_progressive_regression():
    # decode_image_vs_cv2 on the coverage-instrumented build: a mutated progressive JPEG with an
    # EOI after its third scan decoded up to 5 levels off cv2.imdecode in colour
    data = _tensor(INCOMPLETE_PROGRESSIVE_JPEG.read_bytes())
    assert _imdecode(data, cv2.IMREAD_COLOR).shape == (24, 32, 3)
    message = ('incomplete progressive JPEG in the 711-byte buffer: the scans end before '
               'coefficient 0 of component 0 is refined')
    with pytest.raises(RuntimeError, match=message):
        decode_image(data)


def test_incomplete_progressive_cmyk_jpeg_is_an_error_too():
    buffer = io.BytesIO()
    Image.fromarray(_random_image(43, 32, 40, 3)).convert('CMYK').save(buffer, 'JPEG',
                                                                       progressive=True)
    raw = buffer.getvalue()
    data = _tensor(raw[:_scan_starts(raw)[1]] + b'\xff\xd9')
    with pytest.raises(RuntimeError, match='incomplete progressive JPEG'):
        decode_image(data, 'color', 1)
    decode_image(_tensor(raw), 'color', 1)  # complete: decodes


def test_corrupt_cmyk_jpeg_is_an_error_too():
    buffer = io.BytesIO()
    Image.fromarray(_random_image(31, 64, 80, 3)).convert('CMYK').save(buffer, 'JPEG')
    corrupt = _drop_scan_bytes(_tensor(buffer.getvalue()))
    assert _imdecode(corrupt, cv2.IMREAD_COLOR) is not None
    for color_type in IMREAD_FLAGS:
        with pytest.raises(RuntimeError, match='corrupt JPEG data'):
            decode_image(corrupt, color_type, 2)


@pytest.mark.parametrize('scale_denom', [1, 8])
def test_jpeg_declaring_more_than_max_pixels_is_refused_before_decoding(scale_denom):
    # a progressive JPEG makes libjpeg buffer coefficients at the declared size, whatever the scale
    raw = bytearray(_encode(_random_image(15, 16, 16, 3), '.jpg',
                            JPEG_VARIANTS['progressive']).numpy())
    sof = raw.index(b'\xff\xc2')
    raw[sof + 5:sof + 9] = struct.pack('>HH', 40000, 30000)  # height, width
    with pytest.raises(RuntimeError, match='declares 30000x40000 pixels, more than max_pixels='):
        decode_image(_tensor(bytes(raw)), 'color', scale_denom)


def test_jpeg_without_image_is_a_libjpeg_error():
    # SOI then EOI: libjpeg's error (not a warning) becomes the message
    with pytest.raises(RuntimeError, match='cannot decode the 4-byte JPEG .libjpeg: JPEG '
                                           'datastream contains no image'):
        decode_image(_tensor(b'\xff\xd8\xff\xd9'))


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
    np.testing.assert_array_equal(decode_image(padded).numpy(), _imdecode(data, 1))


def test_truncated_png_is_an_error():
    data = _encode(_random_image(9, 64, 64, 3), '.png')
    with pytest.raises(RuntimeError, match='could not decode'):
        decode_image(data[: data.numel() // 2].clone())


# ---------------------------------------------------------------------------------------------
# The op itself
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize('ext', ['.png', '.jpg'])
def test_decoded_tensor_outlives_its_input(ext):
    data = _encode(_random_image(4, 32, 32, 3), ext)
    decoded = decode_image(data.clone())
    expected = _imdecode(data, 1)
    del data
    np.testing.assert_array_equal(decoded.numpy(), expected)


def test_decode_png_with_alpha_unchanged_keeps_four_channels():
    data = _encode(_random_image(3, 20, 30, 4), '.png')
    decoded = decode_image(data, 'unchanged')
    assert decoded.shape == (20, 30, 4)
    np.testing.assert_array_equal(decoded.numpy(), _imdecode(data, -1))


def test_unsupported_flag_is_rejected():
    data = _encode(_random_image(6, 8, 8, 3), '.png')
    with pytest.raises(RuntimeError, match='unsupported imread flags'):
        torch.ops.mmdet_ext.decode_image(data, 2)  # IMREAD_ANYDEPTH alone
    with pytest.raises(ValueError, match='color_type'):
        decode_image(data, 'rgb')


@pytest.mark.parametrize('scale_denom', [0, 3, 16, -2])
def test_unsupported_scale_denom_is_rejected(scale_denom):
    data = _encode(_random_image(6, 8, 8, 3), '.jpg')
    with pytest.raises(RuntimeError, match='scale_denom must be 1, 2, 4 or 8'):
        torch.ops.mmdet_ext.decode_image(data, 1, scale_denom)
    with pytest.raises(ValueError, match='scale_denom'):
        decode_image(data, 'color', scale_denom)


@pytest.mark.parametrize('ext, color_type, channels, scale_denom', [
    ('.jpg', 'color', 3, 1), ('.jpg', 'color', 3, 2), ('.jpg', 'grayscale', 3, 4),
    ('.png', 'unchanged', 4, 1), ('.png', 'color', 1, 1), ('.png', 'grayscale', 3, 1)])
def test_planar_is_the_interleaved_result_laid_out_channel_planar(ext, color_type, channels,
                                                                  scale_denom):
    data = _encode(_random_image(8, 37, 53, channels), ext)
    interleaved = decode_image(data, color_type, scale_denom)
    planar = decode_image(data, color_type, scale_denom, planar=True)
    assert planar.is_contiguous() and planar.dtype == torch.uint8
    assert torch.equal(planar, interleaved.permute(2, 0, 1))


@requires_opcheck
@pytest.mark.parametrize('ext, args', [('.png', (1, )), ('.jpg', (1, )), ('.jpg', (0, 4)),
                                       ('.jpg', (1, 2, None, True)), ('.png', (0, 1, None, True))])
def test_opcheck(ext, args):
    data = _encode(_random_image(7, 16, 24, 3), ext)
    torch.library.opcheck(torch.ops.mmdet_ext.decode_image.default, (data, *args),
                          test_utils=('test_schema', 'test_autograd_registration'))
