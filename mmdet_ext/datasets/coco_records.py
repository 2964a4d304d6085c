"""Which of the annotation store's rows become a sample's instances, and their masks.

The one rule: ``LazyCocoDataset.get_data_info`` (the per-sample path's instance dicts) and
``ColumnarAnnotations`` (the batched fetch's arrays) both read it. It is
``CocoDataset.parse_data_info``'s: an annotation is dropped when it is ignored, when its box
does not overlap the image, when its area is not positive, when its box is under one pixel wide
or high, or when its category is not a selected class. The comparisons run on float64, as
mmdet's on the json's Python floats (tests/test_annotation_acceptance.py compares with
``CocoDataset``).
"""
import os.path as osp
from typing import NamedTuple, Union

import numpy as np

from .coco_store_layout import MASK_PNG, MASK_POLYGON, MASK_RLE, decoded


class KeptInstances(NamedTuple):
    """One sample's instances, in json order: their store rows, iscrowd (bool), boxes
    (float64 [N, 4], x1 y1 x2 y2, as mmdet computes them from the json's floats) and labels
    (int64)."""
    rows: np.ndarray
    iscrowd: np.ndarray
    boxes: np.ndarray
    labels: np.ndarray


def _python_max(a: np.ndarray, b) -> np.ndarray:
    """Python's ``max(a, b)`` elementwise: ``b`` where ``b > a``, else ``a`` (NaN included)."""
    return np.where(b > a, b, a)


def _python_min(a: np.ndarray, b) -> np.ndarray:
    """Python's ``min(a, b)`` elementwise: ``b`` where ``b < a``, else ``a`` (NaN included)."""
    return np.where(b < a, b, a)


def kept_instances(store, image_rows: np.ndarray, cat2label: dict) -> list[KeptInstances]:
    """``KeptInstances`` of each image of ``image_rows`` (store rows), from one pass of array
    operations over all their annotations (per image, a handful of annotations would pay
    numpy's per-call cost many times over)."""
    image_rows = np.asarray(image_rows, dtype=np.int64)
    offsets = store['instance_offsets']
    if len(image_rows) == 1:  # a sample alone (the per-sample path): no per-image bookkeeping
        start, end = (int(v) for v in offsets[image_rows[0]:image_rows[0] + 2])
        rows = np.arange(start, end)
        size = store['image_hw'][image_rows[0], ::-1].astype(np.float64)  # (width, height)
    else:
        starts = offsets[image_rows].astype(np.int64)
        counts = offsets[image_rows + 1].astype(np.int64) - starts
        # Every annotation of the images, in order: the store rows and their image's size.
        first_of_image, total = np.cumsum(counts) - counts, int(counts.sum())
        rows = np.arange(total) + np.repeat(starts - first_of_image, counts)
        size = np.repeat(store['image_hw'][image_rows, ::-1].astype(np.float64), counts, axis=0)
    bbox = decoded(store, 'bbox', rows).reshape(-1, 4)
    corner, extent = bbox[:, :2], bbox[:, 2:]
    far = corner + extent
    # The overlap with the image, x and y at once: max(0, min(x1 + w, width) - max(x1, 0)).
    inter = _python_max(0, _python_min(far, size) - _python_max(corner, 0))
    categories = store['category_id'][rows].tolist()
    known = np.array([c in cat2label for c in categories], dtype=bool)
    small = extent < 1
    keep = ~store['ignore'][rows].astype(bool) & (inter[:, 0] * inter[:, 1] != 0) & \
        ~(decoded(store, 'area', rows) <= 0) & ~small[:, 0] & ~small[:, 1] & known
    kept = keep.nonzero()[0]
    boxes = np.concatenate([corner, far], axis=1)[kept]
    labels = np.array([cat2label[categories[i]] for i in kept.tolist()], dtype=np.int64)
    iscrowd = store['iscrowd'][rows[kept]].astype(bool)
    # Where each image's kept annotations start and end among all the kept ones.
    bounds = [0, len(kept)] if len(image_rows) == 1 else \
        np.searchsorted(kept, np.append(first_of_image, total)).tolist()
    return [KeptInstances(rows[kept[a:b]], iscrowd[a:b], boxes[a:b], labels[a:b])
            for a, b in zip(bounds[:-1], bounds[1:])]


def instance_mask(store, row: int, data_root: str) -> Union[list, dict, None]:
    """The mask of annotation ``row`` as the json gives it to mmdet: polygon parts (lists of
    floats), a compressed RLE dict, or ``{'mask_file': path}`` for a per-instance PNG; None when
    it has none."""
    kind = store['mask_kind'][row]
    start, end = (int(v) for v in store['mask_range'][row])
    if kind == MASK_POLYGON:
        part_offsets = store['poly_part_offsets']
        first, last = int(part_offsets[start]), int(part_offsets[end])
        coords = decoded(store, 'poly_coords', slice(first, last)).tolist()
        return [coords[int(part_offsets[p]) - first:int(part_offsets[p + 1]) - first]
                for p in range(start, end)]
    if kind == MASK_RLE:
        return {'size': [int(v) for v in store['rle_hw'][row]],
                'counts': store.text('blob', start, end)}
    if kind == MASK_PNG:
        return {'mask_file': osp.join(data_root or '', store.text('blob', start, end))}
    return None
