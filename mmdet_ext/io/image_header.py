"""Image size and integrity from the JPEG/PNG header and trailer, without decoding.

Why: a decoder allocates ``height * width * channels`` bytes from the header before it reads a
single pixel, so a 100-byte file declaring 60000 x 60000 pixels (a decompression bomb) costs
gigabytes. Reading the header first lets the store validation and ``NativeLoadImageFromFile``
refuse such files, and compare the real size with the json, for the price of a few bytes.
"""
import struct
from typing import NamedTuple

from .._native import _C

# The one pixel limit of every image entry point: decode_image, these header checks, the loading
# transforms and dataset validation. 2^28 = 16384 x 16384 pixels; raise it explicitly (their
# ``max_pixels`` argument) if you need more. Defined once, in csrc/io/image_decoder.h.
DEFAULT_MAX_PIXELS: int = _C.default_max_pixels()

_PNG_MAGIC = b'\x89PNG\r\n\x1a\n'
_JPEG_MAGIC = b'\xff\xd8'
# SOFn markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


class ImageHeaderError(ValueError):
    """The bytes are not a complete JPEG/PNG, or declare an absurd size."""


class ImageHeader(NamedTuple):
    """What the header declares: ``format`` ('jpeg' | 'png'), ``height`` and ``width`` in px."""

    format: str
    height: int
    width: int


def _jpeg_size(data: bytes) -> tuple[int, int]:
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise ImageHeaderError(f'corrupt JPEG: no marker at byte {pos}')
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0x01,) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        (length,) = struct.unpack('>H', data[pos + 2:pos + 4])
        if marker in _JPEG_SOF:
            if pos + 9 > len(data):
                break
            height, width = struct.unpack('>HH', data[pos + 5:pos + 9])
            return height, width
        if marker == 0xDA or length < 2:
            raise ImageHeaderError('corrupt JPEG: no frame header (SOF) before the scan data')
        pos += 2 + length
    raise ImageHeaderError(f'truncated JPEG: the frame header is missing ({len(data)} bytes)')


def jpeg_exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1..8) of a JPEG, 1 when it has none or the EXIF block is damaged.

    Why: decoders (``cv2.imdecode``, so mmcv and ``decode_image``) apply it, and orientations 5..8
    swap height and width: the header's size is then not the decoded image's.
    """
    pos = 2
    while pos + 4 <= len(data) and data[pos] == 0xFF:
        marker = data[pos + 1]
        if marker == 0xFF:
            pos += 1
            continue
        (length,) = struct.unpack('>H', data[pos + 2:pos + 4])
        if marker == 0xDA or length < 2:
            break
        segment = data[pos + 4:pos + 2 + length]
        if marker == 0xE1 and segment.startswith(b'Exif\0\0'):
            return _tiff_orientation(segment[6:])
        pos += 2 + length
    return 1


def _tiff_orientation(tiff: bytes) -> int:
    order = {b'II': '<', b'MM': '>'}.get(tiff[:2])
    if order is None or len(tiff) < 8:
        return 1
    (ifd,) = struct.unpack(order + 'I', tiff[4:8])
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack(order + 'H', tiff[ifd:ifd + 2])
    for entry in range(ifd + 2, min(ifd + 2 + 12 * count, len(tiff) - 11), 12):
        tag, kind = struct.unpack(order + 'HH', tiff[entry:entry + 4])
        if tag == 0x0112 and kind == 3:  # Orientation, SHORT
            (value,) = struct.unpack(order + 'H', tiff[entry + 8:entry + 10])
            return value if 1 <= value <= 8 else 1
    return 1


def is_jpeg_or_png(data: bytes) -> bool:
    """Whether ``data`` starts like a JPEG or PNG file (the formats ``read_image_header`` reads)."""
    return data.startswith((_JPEG_MAGIC, _PNG_MAGIC))


def read_image_header(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageHeader:
    """Format and size of a whole encoded JPEG/PNG file, checking it is complete.

    Args:
        data: the file's bytes (all of them: the trailer is checked for truncation).
        max_pixels: refuse a declared ``height * width`` above this.

    Raises:
        ImageHeaderError: empty, unknown format, truncated, zero-sized or too large.
    """
    if not data:
        raise ImageHeaderError('the file is empty (zero bytes)')
    if data.startswith(_PNG_MAGIC):
        if len(data) < 24 or data[12:16] != b'IHDR':
            raise ImageHeaderError(f'truncated PNG: no IHDR chunk ({len(data)} bytes)')
        width, height = struct.unpack('>II', data[16:24])
        fmt = 'png'
        complete = b'IEND' in data[-16:]
    elif data.startswith(_JPEG_MAGIC):
        height, width = _jpeg_size(data)
        fmt = 'jpeg'
        complete = b'\xff\xd9' in data[-1024:]  # as image_decoder.cpp: padding may follow
    else:
        raise ImageHeaderError(f'not a JPEG or PNG file (starts with {data[:8]!r})')
    if height <= 0 or width <= 0:
        raise ImageHeaderError(f'{fmt.upper()} header declares an empty image ({height}x{width})')
    if height * width > max_pixels:
        raise ImageHeaderError(
            f'{fmt.upper()} header declares {height}x{width} = {height * width} pixels, more than '
            f'max_pixels={max_pixels} (decompression bomb?); raise max_pixels if it is genuine')
    if not complete:
        raise ImageHeaderError(f'truncated {fmt.upper()}: no end marker ({len(data)} bytes)')
    return ImageHeader(fmt, height, width)
