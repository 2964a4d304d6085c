"""The small, valid COCO dataset every data case starts from, written into a case directory.

Layout of a case directory: ``ann.json``, ``img/000001.jpg`` ... ``img/000004.jpg`` (24 x 32 px
JPEGs), ``masks/`` for per-instance PNG masks. Four images so that one bad image is 25 % of the
data (below the missing-image and bad-sample limits); every image has a polygon instance, image 3
also a crowd RLE, image 4 two polygons.
"""
import json
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

HEIGHT, WIDTH = 24, 32
ANN_FILE = 'ann.json'
IMG_DIR = 'img'


def jpeg_bytes(height: int = HEIGHT, width: int = WIDTH, seed: int = 0, **params) -> bytes:
    """A smooth random-coloured JPEG (cv2 ``IMWRITE_*`` params as keyword args)."""
    rng = np.random.default_rng(seed)
    image = cv2.resize(rng.integers(0, 255, (4, 4, 3), dtype=np.uint8), (width, height))
    flags = [v for key, value in params.items() for v in (getattr(cv2, key), value)]
    ok, data = cv2.imencode('.jpg', image, flags)
    assert ok
    return data.tobytes()


def png_bytes(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode('.png', image)
    assert ok
    return data.tobytes()


def rect(x0: float, y0: float, x1: float, y1: float) -> list[float]:
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def base_coco() -> dict:
    """The valid json (ids 1..4 for images; annotation ids 11, 21, 31, 32, 41, 42)."""
    images = [{'id': i, 'file_name': f'{i:06d}.jpg', 'height': HEIGHT, 'width': WIDTH}
              for i in range(1, 5)]
    crowd = np.zeros((HEIGHT, WIDTH), dtype=np.uint8, order='F')
    crowd[2:10, 20:30] = 1
    rle = mask_utils.encode(crowd)
    anns = []

    def add(ann_id: int, image_id: int, poly: list, **extra) -> None:
        xs, ys = poly[0::2], poly[1::2]
        bbox = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
        anns.append({'id': ann_id, 'image_id': image_id, 'category_id': 1 + ann_id % 2,
                     'bbox': bbox, 'area': bbox[2] * bbox[3], 'iscrowd': 0,
                     'segmentation': [poly], **extra})

    add(11, 1, rect(2, 3, 14, 15))
    add(21, 2, rect(4, 4, 20, 12))
    add(31, 3, rect(1, 1, 10, 20))
    anns.append({'id': 32, 'image_id': 3, 'category_id': 1, 'bbox': [20, 2, 10, 8],
                 'area': 80, 'iscrowd': 1,
                 'segmentation': {'size': [HEIGHT, WIDTH], 'counts': rle['counts'].decode()}})
    add(41, 4, rect(0, 0, 8, 8))
    add(42, 4, [10, 10, 30, 12, 20, 22])
    return {'images': images, 'annotations': anns,
            'categories': [{'id': 1, 'name': 'person'}, {'id': 2, 'name': 'car'}]}


def write_base(case_dir: Path, coco: dict = None) -> dict:
    """Write the valid dataset into ``case_dir``; returns the json written."""
    coco = base_coco() if coco is None else coco
    (case_dir / IMG_DIR).mkdir(parents=True, exist_ok=True)
    (case_dir / 'masks').mkdir(exist_ok=True)
    for image in coco['images']:
        (case_dir / IMG_DIR / image['file_name']).write_bytes(
            jpeg_bytes(image['height'], image['width'], seed=image['id']))
    write_json(case_dir, coco)
    return coco


def write_json(case_dir: Path, coco: dict) -> None:
    (case_dir / ANN_FILE).write_text(json.dumps(coco, allow_nan=True))
