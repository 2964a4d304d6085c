"""Generated COCO instance annotations for the conformance suite (hypothesis strategies).

A sample is what ``CocoDataset`` hands ``LoadAnnotations``: ``ori_shape`` and ``instances``, each
with a ``bbox`` and a ``mask`` in one of COCO's forms -- polygons (multi-part, holes, degenerate
parts, points outside the image), compressed and uncompressed RLE (crowd or not, empty or not)
-- or, for the plugin only, a per-instance PNG file.
"""
from pathlib import Path

import cv2
import numpy as np
from hypothesis import strategies as st
from pycocotools import mask as mask_utils

POLYGON_KINDS = ('polygon', 'polygon_with_hole', 'degenerate_polygon')
RLE_KINDS = ('rle', 'rle_uncompressed', 'rle_empty')


@st.composite
def image_sizes(draw) -> tuple:
    """(height, width) in px, small enough for many examples."""
    return draw(st.integers(6, 40)), draw(st.integers(6, 40))


@st.composite
def samples(draw, kinds=POLYGON_KINDS + RLE_KINDS, min_size=0, max_size=5, size=None) -> dict:
    """A ``LoadAnnotations`` input with instances of the given mask ``kinds``, of ``size``
    (height, width) when given."""
    height, width = size or draw(image_sizes())
    instances = []
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=min_size, max_size=max_size)):
        seed = draw(st.integers(0, 2**31 - 1))
        mask = _MAKERS[kind](np.random.default_rng(seed), height, width)
        crowd = kind.startswith('rle') and draw(st.booleans())
        x1, y1 = draw(st.integers(0, width - 2)), draw(st.integers(0, height - 2))
        bbox = [float(x1), float(y1), float(draw(st.integers(x1 + 1, width))),
                float(draw(st.integers(y1 + 1, height)))]
        instances.append(dict(bbox=bbox, bbox_label=len(instances) % 3, ignore_flag=int(crowd),
                              mask=mask))
    return dict(ori_shape=(height, width), height=height, width=width, img_shape=(height, width),
                instances=instances)


def with_png_masks(sample: dict, directory: Path, share: float = 0.5) -> dict:
    """``sample`` with about ``share`` of its RLE masks written as PNG files and referenced as
    ``LazyCocoDataset`` does (``mask=dict(mask_file=PATH)``); the pixels are the same."""
    instances = []
    for index, instance in enumerate(sample['instances']):
        if isinstance(instance['mask'], dict) and index % int(1 / share) == 0:
            bitmap = mask_utils.decode(_compressed(instance['mask']))
            path = directory / f'{abs(hash((bitmap.tobytes(), bitmap.shape)))}.png'
            cv2.imwrite(str(path), bitmap * 255)
            instance = dict(instance, mask=dict(mask_file=str(path)))
        instances.append(instance)
    return dict(sample, instances=instances)


def reference_bitmap(mask: dict) -> np.ndarray:
    """ndarray[H, W] uint8 of a PNG ``mask_file`` mask, read with OpenCV (foreground > 0)."""
    return (cv2.imread(mask['mask_file'], cv2.IMREAD_GRAYSCALE) > 0).astype(np.uint8)


def _polygon_part(rng, height: int, width: int, points: int) -> list:
    """``points`` vertices around a random centre, some possibly outside the image."""
    centre = rng.uniform([-2, -2], [width + 2, height + 2])
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = rng.uniform(1, max(height, width) / 2, points)
    xy = centre + np.stack([np.cos(angles), np.sin(angles)], 1) * radii[:, None]
    return [round(float(v), 2) for v in xy.ravel()]


def _polygon(rng, height, width) -> list:
    return [_polygon_part(rng, height, width, int(rng.integers(3, 8)))
            for _ in range(int(rng.integers(1, 4)))]


def _polygon_with_hole(rng, height, width) -> list:
    outer = [0.5, 0.5, width - 0.5, 0.5, width - 0.5, height - 0.5, 0.5, height - 0.5]
    return [outer, _polygon_part(rng, height, width, 5)]


def _degenerate_polygon(rng, height, width) -> list:
    """Parts mmdet drops (2 points, odd length) beside, sometimes, one valid part."""
    parts = [[1.0, 1.0, 3.0, 3.0], [1.0, 2.0, 3.0]]
    return parts + ([_polygon_part(rng, height, width, 3)] if rng.random() < 0.5 else [])


def _bitmap(rng, height, width) -> np.ndarray:
    """Union of random rectangles plus noise: long and short runs."""
    bitmap = (rng.random((height, width)) < 0.1).astype(np.uint8)
    for _ in range(int(rng.integers(1, 4))):
        y0, x0 = rng.integers(0, height), rng.integers(0, width)
        bitmap[y0:y0 + rng.integers(1, height), x0:x0 + rng.integers(1, width)] = 1
    return bitmap


def _rle(rng, height, width) -> dict:
    rle = mask_utils.encode(np.asfortranarray(_bitmap(rng, height, width)))
    return dict(size=[height, width], counts=rle['counts'].decode('ascii'))


def _rle_uncompressed(rng, height, width) -> dict:
    """COCO's uncompressed form: column-major run lengths starting with a run of zeros."""
    flat = _bitmap(rng, height, width).ravel(order='F')
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(bounds).tolist()
    if flat[0] == 1:
        counts = [0] + counts
    return dict(size=[height, width], counts=counts)


def _rle_empty(rng, height, width) -> dict:
    rle = mask_utils.encode(np.zeros((height, width), dtype=np.uint8, order='F'))
    return dict(size=[height, width], counts=rle['counts'].decode('ascii'))


def _compressed(mask: dict) -> dict:
    if isinstance(mask['counts'], list):
        return mask_utils.frPyObjects(mask, *mask['size'])
    return mask


_MAKERS = dict(polygon=_polygon, polygon_with_hole=_polygon_with_hole,
               degenerate_polygon=_degenerate_polygon, rle=_rle, rle_uncompressed=_rle_uncompressed,
               rle_empty=_rle_empty)
