"""Write seed inputs for tools/fuzz/fuzz_native.py.

    python3 tools/fuzz/make_seeds.py DIR

DIR/images: small JPEGs (cv2 baseline, progressive, gray, restart markers + 4:4:4; Pillow with
EXIF orientation 6 and in CMYK), a PNG and the decode_image regression input -- for decode_image
and decode_image_vs_cv2. DIR/store: annotation stores written by the real writer (the toy COCO
dataset's, and one with a section of every dtype the layout uses) -- for annotation_store. The RLE
and polygon targets read their input through a FuzzedDataProvider and start from an empty corpus.
"""
import io
import sys
import tempfile
from pathlib import Path

import cv2
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mmdet_ext.datasets.annotation_store import build_store, write_store  # noqa: E402
from mmdet_ext.datasets.coco_store_layout import LAYOUT_VERSION  # noqa: E402
from mmdet_ext.toy_data import make_toy_coco  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def image_seeds(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    image = cv2.GaussianBlur(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8), (5, 5), 0)
    encodings = {
        'small.jpg': ('.jpg', image, []),
        'small_progressive.jpg': ('.jpg', image, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
        'small_gray.jpg': ('.jpg', cv2.cvtColor(image, cv2.COLOR_BGR2GRAY), []),
        'small_restart_444.jpg': ('.jpg', image, [cv2.IMWRITE_JPEG_RST_INTERVAL, 1,
                                                  cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                                  cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]),
        'small.png': ('.png', image, []),
    }
    for name, (ext, pixels, params) in encodings.items():
        ok, encoded = cv2.imencode(ext, pixels, params)
        assert ok, name
        (out / name).write_bytes(encoded.tobytes())
    pil = Image.fromarray(image[:, :, ::-1])
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90
    buffer = io.BytesIO()
    pil.save(buffer, 'JPEG', exif=exif.tobytes())
    (out / 'small_exif6.jpg').write_bytes(buffer.getvalue())
    buffer = io.BytesIO()
    pil.convert('CMYK').save(buffer, 'JPEG')
    (out / 'small_cmyk.jpg').write_bytes(buffer.getvalue())
    (out / 'corrupt_scan.jpg').write_bytes(
        (ROOT / 'tests' / 'regressions' / 'decode_image_corrupt_scan.jpg').read_bytes())


def store_seeds(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_toy_coco(root, num_train=2, num_val=1)
        ann_file = next(root.rglob('*train*.json'))
        build_store(ann_file.read_bytes(), str(out / 'toy_coco.mdxstore'), bytes(32))
    sections = {'layout_version': np.array([LAYOUT_VERSION], dtype=np.int64),
                'pairs': np.arange(6, dtype=np.int64).reshape(3, 2),
                'boxes': np.linspace(0, 1, 8).reshape(2, 4),
                'flags': np.array([0, 1, 2], dtype=np.uint8),
                'empty': np.zeros(0, dtype=np.float64)}
    write_store(str(out / 'small.mdxstore'), sections, b'k' * 32)


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(f'usage: {sys.argv[0]} DIR')
    out = Path(sys.argv[1])
    image_seeds(out / 'images')
    store_seeds(out / 'store')
    for path in sorted(out.rglob('*.*')):
        print(f'{path} {path.stat().st_size} bytes')


if __name__ == '__main__':
    main()
