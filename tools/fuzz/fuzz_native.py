"""Fuzz the native parsers (and the Python image-header reader) with atheris.

    python3 tools/fuzz/fuzz_native.py TARGET [atheris/libFuzzer flags, e.g. -max_total_time=60]

TARGET is one of: rle_from_string, rle_decode, rle_from_polygons, decode_image,
decode_image_vs_cv2, image_header. A finding is anything other than the documented error: a crash
(segfault, abort), a hang, or an exception that is not a ``RuntimeError`` from a ``TORCH_CHECK``
(``ImageHeaderError`` for the header reader). ``decode_image_vs_cv2`` adds an oracle: whenever
``decode_image`` returns an image for a JPEG, it must be the one ``cv2.imdecode`` returns (an
``AssertionError`` otherwise). Native code is not coverage-instrumented here (only Python is), so
this is mutation fuzzing of the native ops; build with ``tools/fuzz/build_sanitized.sh`` so memory
errors abort instead of passing silently. Findings are recorded in ``docs/fuzzing.md``.
"""
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


def image_header(data: bytes) -> None:
    try:
        read_image_header(data, max_pixels=MAX_SIDE * MAX_SIDE)
    except ImageHeaderError:
        pass


TARGETS = {f.__name__: f for f in (rle_from_string, rle_decode, rle_from_polygons, decode_image,
                                   decode_image_vs_cv2, image_header)}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f'usage: {sys.argv[0]} {{{",".join(TARGETS)}}} [libFuzzer flags]')
    target = TARGETS[sys.argv[1]]

    def one_input(data: bytes) -> None:
        try:
            target(data)
        except RuntimeError:  # TORCH_CHECK: the documented refusal of malformed input
            pass
    atheris.Setup([sys.argv[0], *sys.argv[2:]], one_input)
    atheris.Fuzz()


if __name__ == '__main__':
    main()
