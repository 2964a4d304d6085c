"""Image size and integrity from the header and trailer, without decoding.

Why: a decoder allocates ``height * width * channels`` bytes from the header before it reads a
single pixel, so a 100-byte file declaring 60000 x 60000 pixels (a decompression bomb) costs
gigabytes. Reading the header first lets the store validation and ``NativeLoadImageFromFile``
refuse such files, and compare the real size with the json, for the price of a few bytes. Every
format OpenCV decodes for training data is read (``image_formats.FORMATS``: JPEG, PNG, BMP, WebP,
TIFF, PNM, JPEG 2000), so a valid file of any of them is kept, as mmcv's ``LoadImageFromFile``
would load it.
"""
import struct
from typing import NamedTuple

from .._native import _C
from .image_formats import FORMAT_NAMES, FileBytes, ImageHeaderError, find_format, tiff_orientation

# The one pixel limit of every image entry point: decode_image, these header checks, the loading
# transforms and dataset validation. 2^28 = 16384 x 16384 pixels; raise it explicitly (their
# ``max_pixels`` argument) if you need more. Defined once, in csrc/io/image_decoder.h.
DEFAULT_MAX_PIXELS: int = _C.default_max_pixels()


class ImageHeader(NamedTuple):
    """What the header declares: ``format`` (a name of ``image_formats.FORMATS``: 'jpeg', 'png',
    'bmp', 'webp', 'tiff', 'pnm', 'jpeg2000'), ``height`` and ``width`` in px."""

    format: str
    height: int
    width: int


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
            return tiff_orientation(FileBytes(segment[6:]))
        pos += 2 + length
    return 1


def image_format(data: bytes) -> str | None:
    """The format ``data`` (a file's first bytes) starts like, of those ``read_image_header``
    reads, or None."""
    found = find_format(data)
    return found[0] if found else None


def read_image_header(data: bytes | FileBytes,
                      max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageHeader:
    """Format and size of an encoded image file, checking it is complete.

    Args:
        data: the file's bytes (all of them: the end is checked for truncation), or a
            ``FileBytes`` of its head and tail (``BytesNotRead``, an ``ImageHeaderError``, when
            the header points between them: read the whole file then).
        max_pixels: refuse a declared ``height * width`` above this.

    Raises:
        ImageHeaderError: empty, unknown format, corrupt header, truncated, zero-sized or too
            large.
    """
    f = data if isinstance(data, FileBytes) else FileBytes(data)
    if f.size == 0:
        raise ImageHeaderError('the file is empty (zero bytes)')
    found = find_format(f.head)
    if found is None:
        raise ImageHeaderError(f'not an image of a format read here ({FORMAT_NAMES}); it starts '
                               f'with {f.head[:8]!r}')
    fmt, parse = found
    height, width, truncated = parse(f)
    if height <= 0 or width <= 0:
        raise ImageHeaderError(f'{fmt.upper()} header declares an empty image ({height}x{width})')
    if height * width > max_pixels:
        raise ImageHeaderError(
            f'{fmt.upper()} header declares {height}x{width} = {height * width} pixels, more than '
            f'max_pixels={max_pixels} (decompression bomb?); raise max_pixels if it is genuine')
    if truncated:
        raise ImageHeaderError(truncated)
    return ImageHeader(fmt, height, width)
