"""Fuzz the native parsers (and the Python image-header reader) with atheris.

    python3 tools/fuzz/fuzz_native.py TARGET [atheris/libFuzzer flags, e.g. -max_total_time=60]

TARGET is one of: rle_from_string, rle_decode, rle_from_polygons, decode_image,
decode_image_vs_cv2, image_header, annotation_store. A finding is anything other than the
documented error: a crash (segfault, abort), a hang, or an exception that is not a
``RuntimeError`` from a ``TORCH_CHECK`` (``ImageHeaderError`` for the header reader, ``StoreError``
-- a ``RuntimeError`` -- for the store reader). ``decode_image_vs_cv2`` adds an oracle: whenever
``decode_image`` returns an image for a JPEG, it must be the one ``cv2.imdecode`` returns (an
``AssertionError`` otherwise); ``annotation_store`` checks that every section it returns holds
exactly the file's bytes at the section's offset. Run against the build of
``tools/fuzz/build_fuzz_coverage.sh`` the native code is coverage-instrumented too (libFuzzer sees
the C++ edges, and ASan/UBSan abort on memory errors); against a normal build only this Python is,
which makes it mutation fuzzing of the native ops. Findings are recorded in ``docs/fuzzing.md``.
"""
import builtins
import os
import struct
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# Coverage-instrument only our Python (instrumenting torch and mmdet takes minutes).
with atheris.instrument_imports(include=['mmdet_ext.io', 'mmdet_ext.ops']):
    import cv2
    import numpy as np
    import torch

    from mmdet_ext import ops
    from mmdet_ext.io import ImageHeaderError, read_image_header

MAX_SIDE = 256  # keep every allocation small: the fuzzer looks for parser bugs, not big images


def _size(fdp: atheris.FuzzedDataProvider) -> tuple[int, int]:
    return fdp.ConsumeIntInRange(0, MAX_SIDE), fdp.ConsumeIntInRange(0, MAX_SIDE)


def rle_from_string(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    height, width = _size(fdp)
    counts = ops.rle_from_string(fdp.ConsumeBytes(fdp.remaining_bytes()), height, width)
    ops.rle_decode(counts, height, width)


def rle_decode(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    height, width = _size(fdp)
    runs = fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 64), -2**31, 2**31 - 1)
    counts = torch.tensor(runs, dtype=torch.int32)
    ops.rle_decode(counts, height, width)
    ops.rle_to_bbox(counts, height, width)
    ops.rle_to_string(counts)


def rle_from_polygons(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    height, width = _size(fdp)
    lengths = fdp.ConsumeIntListInRange(fdp.ConsumeIntInRange(0, 8), -4, 64)
    coords = fdp.ConsumeFloatList(max(sum(v for v in lengths if v > 0), 0))
    ops.rle_from_polygons(torch.tensor(coords, dtype=torch.float64),
                          torch.tensor(lengths, dtype=torch.int64), height, width)


# Every imread mode with every reduced size. The mode comes from the input's length, so inputs
# stay plain image files (the seeds are real JPEGs and PNGs) and each mode sees all of them.
DECODE_MODES = [(color_type, scale_denom) for color_type in ops.IMREAD_FLAGS
                for scale_denom in ops.SCALE_DENOMS]
CV2_REDUCED = {1: 0, 2: cv2.IMREAD_REDUCED_GRAYSCALE_2, 4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
               8: cv2.IMREAD_REDUCED_GRAYSCALE_8}


def _decode(data: bytes) -> tuple[np.ndarray, str, int]:
    color_type, scale_denom = DECODE_MODES[len(data) % len(DECODE_MODES)]
    encoded = torch.from_numpy(np.frombuffer(bytearray(data) or bytearray(1), dtype=np.uint8))
    return ops.decode_image(encoded, color_type, scale_denom).numpy(), color_type, scale_denom


def decode_image(data: bytes) -> None:
    _decode(data)


def decode_image_vs_cv2(data: bytes) -> None:
    decoded, color_type, scale_denom = _decode(data)  # a RuntimeError ends it: documented
    if not data.startswith(b'\xff\xd8\xff'):
        return  # other formats go through the system OpenCV, not the wheel: not bit-exact
    flags = ops.IMREAD_FLAGS[color_type]
    if color_type == 'unchanged' and scale_denom > 1:  # no IMREAD_REDUCED_UNCHANGED
        flags = (1 if decoded.shape[2] == 3 else 0) | cv2.IMREAD_IGNORE_ORIENTATION
    expected = cv2.imdecode(np.frombuffer(data, dtype=np.uint8), flags | CV2_REDUCED[scale_denom])
    assert expected is not None, f'decode_image decoded what cv2 refuses ({color_type}, ' \
        f'{scale_denom})'
    expected = expected[:, :, None] if expected.ndim == 2 else expected
    assert decoded.shape == expected.shape and np.array_equal(decoded, expected), \
        f'not bit-exact with cv2 ({color_type}, {scale_denom})'


# The annotation store reader (csrc/store/mapped_store.cpp, through AnnotationStore) reads a file.
# The input is the file's bytes, with the header's file_size, payload checksum and header checksum
# recomputed so mutations get past them into the section table (a wrong checksum is a one-line
# refusal, tested in tests/test_annotation_store.py); inputs shorter than the header go as they are.
STORE_HEADER = 72  # sizeof(store::Header): magic, version, num_sections, file_size, payload ...
STORE_FILE = f'/dev/shm/mmdet_ext_fuzz_{os.getpid()}.mdxstore'
_M64 = 2**64 - 1
_P1, _P2 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def checksum64(data: bytes) -> int:
    """store::checksum64 (csrc/store/checksum.cpp) in Python."""
    lanes = [(_P1 + _P2) & _M64, _P2, 0, (-_P1) & _M64]
    blocks = len(data) // 32
    for i, word in enumerate(struct.unpack_from(f'<{blocks * 4}Q', data)):
        lanes[i % 4] = (_rotl((lanes[i % 4] + word * _P2) & _M64, 31) * _P1) & _M64
    h = (_rotl(lanes[0], 1) + _rotl(lanes[1], 7) + _rotl(lanes[2], 12) + _rotl(lanes[3], 18)) & _M64
    h ^= (len(data) * _P1) & _M64
    for byte in data[blocks * 32:]:
        h = (_rotl(h ^ ((byte * _P1) & _M64), 11) * _P2) & _M64
    h ^= h >> 33
    h = (h * _P2) & _M64
    return h ^ (h >> 29)


def fix_store_checksums(data: bytes) -> bytes:
    if len(data) < STORE_HEADER:
        return data
    fixed = bytearray(data)
    struct.pack_into('<QQ', fixed, 16, len(fixed), checksum64(bytes(fixed[STORE_HEADER:])))
    struct.pack_into('<Q', fixed, 64, 0)
    struct.pack_into('<Q', fixed, 64, checksum64(bytes(fixed[:STORE_HEADER])))
    return bytes(fixed)


def annotation_store(data: bytes) -> None:
    from mmdet_ext.datasets.annotation_store import AnnotationStore, StoreError
    data = fix_store_checksums(data)
    with open(STORE_FILE, 'wb') as f:
        f.write(data)
    try:
        store = AnnotationStore(STORE_FILE, verify=len(data) % 2 == 0)
    except StoreError:
        return
    finally:
        os.remove(STORE_FILE)  # the mapping stays valid; nothing is left in /dev/shm
    num_sections = struct.unpack_from('<I', data, 12)[0]
    for i in range(num_sections):  # oracle: each section is the file's bytes at its offset
        name, offset, nbytes = struct.unpack_from('<32s24xQQ', data, STORE_HEADER + 72 * i)
        name = name.split(b'\0')[0].decode()  # names that are not UTF-8 must be refused
        array = store.arrays[name]
        assert array.nbytes == nbytes and array.tobytes() == data[offset:offset + nbytes], \
            f'section {name!r}: {array.shape} {array.dtype} is not the bytes [{offset}, +{nbytes})'


def image_header(data: bytes) -> None:
    try:
        read_image_header(data, max_pixels=MAX_SIDE * MAX_SIDE)
    except ImageHeaderError:
        pass


TARGETS = {f.__name__: f for f in (rle_from_string, rle_decode, rle_from_polygons, decode_image,
                                   decode_image_vs_cv2, image_header, annotation_store)}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f'usage: {sys.argv[0]} {{{",".join(TARGETS)}}} [libFuzzer flags]')
    target = TARGETS[sys.argv[1]]
    if target is annotation_store:  # imports mmdet; only for this target
        with atheris.instrument_imports(include=['mmdet_ext.datasets.annotation_store']):
            import mmdet_ext.datasets.annotation_store  # noqa: F401

    # FUZZ_KNOWN=UnicodeDecodeError,TypeError: treat these (already reported) findings as refusals,
    # to look for others before they are fixed.
    known = tuple(exc for exc in (RuntimeError, *(getattr(builtins, name, None) for name in
                                                  os.environ.get('FUZZ_KNOWN', '').split(',')
                                                  if name)) if exc is not None)

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except known:  # RuntimeError (TORCH_CHECK): the documented refusal of malformed input
            pass
    atheris.Setup([sys.argv[0], *sys.argv[2:]], one_input)
    atheris.Fuzz()


if __name__ == '__main__':
    main()
