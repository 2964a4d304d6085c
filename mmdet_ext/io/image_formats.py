"""Size and completeness of each image format OpenCV decodes, read from the header and the end.

Why one parser per format: a decoder allocates ``height * width * channels`` bytes from the
header before it reads a pixel, and fills what a truncated file lacks with gray (JPEG) or fails
deep in a DataLoader worker. Each format says its size and where its data ends in a few bytes:
JPEG (frame header, EOI marker), PNG (IHDR, IEND), BMP (pixel offset + rows), WebP (RIFF size,
VP8/VP8L/VP8X frame size), TIFF (first directory: width, length, strip/tile extents), PNM
(P1-P6 text header, binary data length), JPEG 2000 (J2K SIZ / JP2 ihdr, EOC marker or box size).

Each parser returns ``(height, width, truncated)`` where ``truncated`` is the reason the file is
incomplete (or None), and raises ``ImageHeaderError`` when the header itself is corrupt or missing.
"""
import struct
from collections.abc import Callable


class ImageHeaderError(ValueError):
    """The bytes are not a complete image of a known format, or declare an absurd size."""


class BytesNotRead(ImageHeaderError):
    """The header points into the part of the file that was not read (read the whole file)."""


class FileBytes:
    """An encoded file's bytes by absolute offset: all of them, or only its head and its tail.

    Why: validation judges each image from its first 16 KiB and last 1 KiB; a header that points
    elsewhere (a TIFF directory written after the pixels) raises ``BytesNotRead`` and the caller
    reads the whole file. Reading past the end returns fewer bytes (the file is truncated).
    """

    def __init__(self, head: bytes, tail: bytes | None = None,
                 size: int | None = None) -> None:
        self.head = head
        self.tail = head if tail is None else tail
        self.size = len(head) if size is None else size

    def at(self, offset: int, length: int) -> bytes:
        """Up to ``length`` bytes at ``offset`` (fewer at the end of the file)."""
        end = min(offset + length, self.size)
        if end <= len(self.head):
            return self.head[offset:end]
        tail_start = self.size - len(self.tail)
        if offset >= tail_start:
            return self.tail[offset - tail_start:end - tail_start]
        raise BytesNotRead(f'the header points at bytes {offset}..{end} of {self.size}, which '
                           'were not read')

    def last(self, length: int) -> bytes:
        """The file's last ``length`` bytes (at most what was read of its end)."""
        return self.tail[-length:]


def _unpack(fmt: str, data: bytes, what: str) -> tuple:
    if len(data) < struct.calcsize(fmt):
        raise ImageHeaderError(f'truncated {what}: the header is cut short')
    return struct.unpack(fmt, data[:struct.calcsize(fmt)])


# --- JPEG ------------------------------------------------------------------------------------
JPEG_MAGIC = b'\xff\xd8'
# SOFn markers carry the frame size; C4 (DHT), C8 (JPG) and CC (DAC) share the range but do not.
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def jpeg_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The frame header's size; truncated without an EOI marker in the last 1 KiB."""
    data = f.head  # the frame header is sought from the start: within what was read or nowhere
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
            complete = b'\xff\xd9' in f.last(1024)  # as image_decoder.cpp: padding may follow
            return height, width, None if complete else f'truncated JPEG: no end marker ' \
                f'({f.size} bytes)'
        if marker == 0xDA or length < 2:
            raise ImageHeaderError('corrupt JPEG: no frame header (SOF) before the scan data')
        pos += 2 + length
    raise ImageHeaderError(f'truncated JPEG: the frame header is missing ({f.size} bytes)')


# --- PNG -------------------------------------------------------------------------------------
PNG_MAGIC = b'\x89PNG\r\n\x1a\n'


def png_size(f: FileBytes) -> tuple[int, int, str | None]:
    """IHDR's size; truncated without IEND in the last 16 bytes."""
    head = f.at(0, 24)
    if len(head) < 24 or head[12:16] != b'IHDR':
        raise ImageHeaderError(f'truncated PNG: no IHDR chunk ({f.size} bytes)')
    width, height = struct.unpack('>II', head[16:24])
    complete = b'IEND' in f.last(16)
    return height, width, None if complete else f'truncated PNG: no end marker ({f.size} bytes)'


# --- BMP -------------------------------------------------------------------------------------
BMP_MAGIC = b'BM'
_BMP_RGB, _BMP_RLE8, _BMP_RLE4, _BMP_BITFIELDS = 0, 1, 2, 3


def bmp_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The info header's size; truncated when the file ends before the last pixel row.

    The compressions OpenCV's BMP decoder reads: none, RLE8, RLE4, bit fields. RLE data has no
    fixed length: only its start is checked.
    """
    offset, dib = _unpack('<10xII', f.at(0, 18), 'BMP')
    if dib == 12:  # BITMAPCOREHEADER (OS/2)
        width, height, _, bpp = _unpack('<HHHH', f.at(18, 8), 'BMP')
        compression = _BMP_RGB
    elif dib >= 40:  # BITMAPINFOHEADER and its successors
        width, height, _, bpp, compression = _unpack('<iiHHI', f.at(18, 16), 'BMP')
    else:
        raise ImageHeaderError(f'corrupt BMP: info header of {dib} bytes (expected 12 or >= 40)')
    height = abs(height)  # negative: rows stored top-down
    if bpp not in (1, 4, 8, 16, 24, 32):
        raise ImageHeaderError(f'corrupt BMP: {bpp} bits per pixel')
    if compression not in (_BMP_RGB, _BMP_RLE8, _BMP_RLE4, _BMP_BITFIELDS):
        raise ImageHeaderError(f'BMP compression {compression} (JPEG/PNG inside a BMP?), which '
                               'OpenCV does not decode')
    pixels = ((bpp * width + 31) // 32) * 4 * height \
        if compression in (_BMP_RGB, _BMP_BITFIELDS) else 1
    truncated = None
    if offset + pixels > f.size:
        truncated = f'truncated BMP: the pixel data ends at byte {offset + pixels}, the file ' \
            f'has {f.size} bytes'
    return height, width, truncated


# --- WebP ------------------------------------------------------------------------------------
def is_webp(data: bytes) -> bool:
    """RIFF container of the WEBP form."""
    return data[:4] == b'RIFF' and data[8:12] == b'WEBP'


def webp_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The first chunk's size (VP8 lossy, VP8L lossless, VP8X extended canvas); truncated when
    the file is shorter than the RIFF size says."""
    head = f.at(0, 30)
    (riff_size,) = _unpack('<4xI', head, 'WebP')
    chunk = head[12:16]
    if chunk == b'VP8 ':
        tag, start, width, height = _unpack('<3s3sHH', head[20:], 'WebP')
        if start != b'\x9d\x01\x2a' or tag[0] & 1:
            raise ImageHeaderError('corrupt WebP: the VP8 chunk does not start with a key frame')
        width, height = width & 0x3FFF, height & 0x3FFF
    elif chunk == b'VP8L':
        signature, bits = _unpack('<BI', head[20:], 'WebP')
        if signature != 0x2F:
            raise ImageHeaderError('corrupt WebP: bad VP8L signature')
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b'VP8X':
        w0, w1, w2, h0, h1, h2 = _unpack('<4x6B', head[20:], 'WebP')
        width = (w0 | w1 << 8 | w2 << 16) + 1
        height = (h0 | h1 << 8 | h2 << 16) + 1
    else:
        raise ImageHeaderError(f'corrupt WebP: first chunk {chunk!r} (expected VP8, VP8L or VP8X)')
    truncated = None
    if riff_size + 8 > f.size:
        truncated = f'truncated WebP: the RIFF header says {riff_size + 8} bytes, the file has ' \
            f'{f.size}'
    return height, width, truncated


# --- TIFF ------------------------------------------------------------------------------------
_TIFF_MAGICS = {b'II*\0': ('<', False), b'MM\0*': ('>', False),
                b'II+\0': ('<', True), b'MM\0+': ('>', True)}  # + : BigTIFF
# Bytes per value of each field type (TIFF 6.0 and BigTIFF); unsigned integer types by code.
_TIFF_TYPE_SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 1, 8: 2, 9: 4, 10: 8, 11: 4, 12: 8,
                   13: 4, 16: 8, 17: 8, 18: 8}
_TIFF_UINT = {1: 'B', 3: 'H', 4: 'I', 13: 'I', 16: 'Q', 18: 'Q'}
_TIFF_WIDTH, _TIFF_LENGTH, _TIFF_ORIENTATION = 256, 257, 0x0112
_TIFF_STRIP_OFFSETS, _TIFF_STRIP_BYTES, _TIFF_TILE_OFFSETS, _TIFF_TILE_BYTES = 273, 279, 324, 325


def is_tiff(data: bytes) -> bool:
    """Classic or BigTIFF byte-order mark and version."""
    return data[:4] in _TIFF_MAGICS


def tiff_first_directory(f: FileBytes) -> dict[int, tuple[int, ...]]:
    """The unsigned-integer fields of a TIFF's first directory (IFD): tag -> values.

    Also used for the TIFF structure inside a JPEG's EXIF block.
    """
    order, big = _TIFF_MAGICS[f.at(0, 4)]
    if big:
        (ifd,) = _unpack(order + '8xQ', f.at(0, 16), 'TIFF')
        count_fmt, entry_size, inline = 'Q', 20, 8
    else:
        (ifd,) = _unpack(order + '4xI', f.at(0, 8), 'TIFF')
        count_fmt, entry_size, inline = 'H', 12, 4
    if ifd + struct.calcsize(count_fmt) > f.size:
        raise ImageHeaderError(f'truncated TIFF: the first directory is at byte {ifd}, past the '
                               f'end of the file ({f.size} bytes)')
    (count,) = struct.unpack(order + count_fmt, f.at(ifd, struct.calcsize(count_fmt)))
    table = f.at(ifd + struct.calcsize(count_fmt), count * entry_size)
    if len(table) < count * entry_size:
        raise ImageHeaderError('truncated TIFF: the first directory is cut short')
    fields = {}
    for k in range(count):
        entry = table[k * entry_size:(k + 1) * entry_size]
        tag, kind = struct.unpack(order + 'HH', entry[:4])
        (n,) = struct.unpack(order + ('Q' if big else 'I'), entry[4:4 + inline])
        if kind not in _TIFF_UINT or n == 0:
            continue
        size = n * _TIFF_TYPE_SIZE[kind]
        raw = entry[4 + inline:] if size <= inline else \
            f.at(struct.unpack(order + ('Q' if big else 'I'), entry[4 + inline:])[0], size)
        if len(raw) < size:
            raise ImageHeaderError(f'truncated TIFF: the values of tag {tag} are cut short')
        fields[tag] = struct.unpack(f'{order}{n}{_TIFF_UINT[kind]}', raw[:size])
    return fields


def tiff_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The first directory's ImageWidth/ImageLength; truncated when a strip or tile of the first
    image ends past the end of the file (the image OpenCV decodes)."""
    fields = tiff_first_directory(f)
    if _TIFF_WIDTH not in fields or _TIFF_LENGTH not in fields:
        raise ImageHeaderError('corrupt TIFF: no ImageWidth/ImageLength in the first directory')
    width, height = fields[_TIFF_WIDTH][0], fields[_TIFF_LENGTH][0]
    offsets = fields.get(_TIFF_STRIP_OFFSETS) or fields.get(_TIFF_TILE_OFFSETS)
    sizes = fields.get(_TIFF_STRIP_BYTES) or fields.get(_TIFF_TILE_BYTES)
    if not offsets or not sizes or len(offsets) != len(sizes):
        raise ImageHeaderError('corrupt TIFF: no strip or tile offsets and byte counts')
    end = max(o + n for o, n in zip(offsets, sizes))
    truncated = None
    if end > f.size:
        truncated = f'truncated TIFF: the image data ends at byte {end}, the file has {f.size}'
    return height, width, truncated


def tiff_orientation(f: FileBytes) -> int:
    """A TIFF structure's Orientation (1..8), 1 when absent or unreadable."""
    try:
        value = tiff_first_directory(f).get(_TIFF_ORIENTATION, (1,))[0]
    except (ImageHeaderError, KeyError):
        return 1
    return value if 1 <= value <= 8 else 1


# --- PNM (PBM, PGM, PPM) -----------------------------------------------------------------------
def is_pnm(data: bytes) -> bool:
    """'P1'..'P6' followed by whitespace."""
    return len(data) >= 3 and data[0:1] == b'P' and data[1:2] in (b'1', b'2', b'3', b'4', b'5',
                                                                   b'6') and data[2:3].isspace()


def _pnm_fields(head: bytes, count: int) -> tuple[list[int], int]:
    """``count`` decimal fields after the magic (whitespace and # comments between them), and
    the offset of the pixel data (after the one whitespace byte that follows the last field)."""
    fields, pos = [], 2
    while len(fields) < count:
        while pos < len(head) and (head[pos:pos + 1].isspace() or head[pos] == ord('#')):
            if head[pos] == ord('#'):
                end = head.find(b'\n', pos)
                pos = len(head) if end < 0 else end
            pos += 1
        start = pos
        while pos < len(head) and head[pos:pos + 1].isdigit():
            pos += 1
        if pos == start or pos >= len(head):
            raise ImageHeaderError('corrupt or truncated PNM header (expected P1-P6, width, '
                                   'height[, maxval])')
        fields.append(int(head[start:pos]))
    return fields, pos + 1


def pnm_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The text header's size; a binary one (P4-P6) is truncated when the file ends before the
    last row. The text forms (P1-P3) have no fixed length: a cut one fails when decoded."""
    kind = f.head[1] - ord('0')
    fields, data_start = _pnm_fields(f.head, 2 if kind in (1, 4) else 3)
    width, height = fields[0], fields[1]
    if kind <= 3:
        return height, width, None
    sample = 2 if kind != 4 and fields[2] > 255 else 1
    row = (width + 7) // 8 if kind == 4 else width * sample * (3 if kind == 6 else 1)
    end = data_start + row * height
    truncated = None
    if end > f.size:
        truncated = f'truncated PNM: the pixel data ends at byte {end}, the file has {f.size}'
    return height, width, truncated


# --- JPEG 2000 -------------------------------------------------------------------------------
J2K_MAGIC = b'\xff\x4f\xff\x51'  # SOC then SIZ: a raw codestream
JP2_MAGIC = b'\x00\x00\x00\x0cjP  \r\n\x87\n'  # the JP2 signature box


def j2k_size(f: FileBytes) -> tuple[int, int, str | None]:
    """A raw codestream's SIZ size (minus the image offset); truncated without the EOC marker."""
    xsiz, ysiz, xo, yo = _unpack('>8xIIII', f.at(0, 24), 'JPEG 2000')
    complete = b'\xff\xd9' in f.last(16)
    return ysiz - yo, xsiz - xo, None if complete else \
        f'truncated JPEG 2000: no end-of-codestream marker ({f.size} bytes)'


def jp2_size(f: FileBytes) -> tuple[int, int, str | None]:
    """The ihdr box's size (inside jp2h); truncated when the codestream box (jp2c) is cut."""
    pos, size = 0, None
    while pos + 8 <= f.size:
        length, kind = _unpack('>I4s', f.at(pos, 8), 'JPEG 2000')
        header = 8
        if length == 1:
            (length,) = _unpack('>Q', f.at(pos + 8, 8), 'JPEG 2000')
            header = 16
        elif length == 0:
            length = f.size - pos
        if length < header:
            raise ImageHeaderError(f'corrupt JPEG 2000: box {kind!r} of {length} bytes')
        if kind == b'jp2h':
            ihdr = f.at(pos + header, 16)
            if ihdr[4:8] != b'ihdr':
                raise ImageHeaderError('corrupt JPEG 2000: jp2h does not start with ihdr')
            size = _unpack('>II', ihdr[8:16], 'JPEG 2000')
        elif kind == b'jp2c':
            if size is None:
                raise ImageHeaderError('corrupt JPEG 2000: no jp2h header before the codestream')
            truncated = None
            if pos + length > f.size:
                truncated = f'truncated JPEG 2000: the codestream ends at byte {pos + length}, ' \
                    f'the file has {f.size}'
            return size[0], size[1], truncated
        pos += length
    raise ImageHeaderError(f'truncated JPEG 2000: no codestream box ({f.size} bytes)')


# --- dispatch --------------------------------------------------------------------------------
Parser = Callable[[FileBytes], tuple[int, int, str | None]]
# (name, test on the first 16 bytes, parser), in the order they are tried.
FORMATS: tuple[tuple[str, Callable[[bytes], bool], Parser], ...] = (
    ('jpeg', lambda d: d.startswith(JPEG_MAGIC), jpeg_size),
    ('png', lambda d: d.startswith(PNG_MAGIC), png_size),
    ('bmp', lambda d: d.startswith(BMP_MAGIC), bmp_size),
    ('webp', is_webp, webp_size),
    ('tiff', is_tiff, tiff_size),
    ('pnm', is_pnm, pnm_size),
    ('jpeg2000', lambda d: d.startswith(J2K_MAGIC), j2k_size),
    ('jpeg2000', lambda d: d.startswith(JP2_MAGIC), jp2_size),
)
FORMAT_NAMES = 'JPEG, PNG, BMP, WebP, TIFF, PNM (PBM/PGM/PPM) or JPEG 2000'


def find_format(data: bytes) -> tuple[str, Parser] | None:
    """(name, parser) of the format ``data`` (a file's first bytes) starts like, or None."""
    for name, test, parse in FORMATS:
        if test(data[:16]):
            return name, parse
    return None
