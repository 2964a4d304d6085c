"""How a COCO annotation file is laid out in an annotation store: json in, named flat arrays out.

The store file itself (csrc/store/) only knows named 1-D/2-D arrays. This module decides what
they are, so that every image, instance and mask lives in a handful of flat numpy arrays (no
per-sample Python objects), with CSR-style offsets linking images to instances and instances to
their mask data. Masks are kept in their source form:

- polygons: ``poly_parts[mask_start:mask_end]`` indexes ``poly_part_offsets``, which delimit runs
  of ``poly_coords`` (float64, x0, y0, x1, y1, ... exactly as in the json);
- RLE: ``blob[mask_start:mask_end]`` is the COCO compressed counts string (uncompressed json
  counts are compressed with pycocotools at build time), ``rle_hw`` its declared size;
- per-instance PNG (annotation key ``mask_file``): ``blob[mask_start:mask_end]`` is the path.
"""
from typing import Callable, Optional

import numpy as np

from ..structures.coco_rle import compressed_rle_counts

MASK_NONE, MASK_POLYGON, MASK_RLE, MASK_PNG = 0, 1, 2, 3

# Bump together with the section meanings below (the C++ format version covers the container).
LAYOUT_VERSION = 1


class _Blob:
    """Append-only byte buffer returning (start, end) ranges."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> tuple[int, int]:
        start = self.size
        self.chunks.append(data)
        self.size += len(data)
        return start, self.size

    def array(self) -> np.ndarray:
        return np.frombuffer(b''.join(self.chunks), dtype=np.uint8)


def _offsets(lengths: list[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def coco_to_sections(coco: dict,
                     progress: Optional[Callable[[int, int], None]] = None
                     ) -> dict[str, np.ndarray]:
    """Flatten a parsed COCO instances json into the store's named arrays.

    Images keep the json's order and each image's annotations keep theirs, which is the order
    mmdet's ``CocoDataset`` (through pycocotools' ``COCO``) produces.

    Args:
        coco: the parsed json (``images``, ``annotations``, ``categories``).
        progress: called as ``progress(done, total)`` in annotations, once per image.
    """
    images = coco['images']
    row_of_image = {image['id']: row for row, image in enumerate(images)}
    anns_per_row: list[list[dict]] = [[] for _ in images]
    annotations = coco.get('annotations', [])
    for ann in annotations:
        if ann['image_id'] not in row_of_image:
            raise ValueError(f"annotation {ann.get('id')} refers to image_id {ann['image_id']}, "
                             'which is not in "images"')
        anns_per_row[row_of_image[ann['image_id']]].append(ann)

    names = _Blob()
    name_ranges = [names.add(image['file_name'].encode()) for image in images]
    blob = _Blob()
    parts: list[int] = []  # coordinate count of every polygon part
    coords: list[np.ndarray] = []
    instance_counts, ann_ids, bboxes, areas, categories, crowd, ignore = [], [], [], [], [], [], []
    kinds, mask_ranges, rle_hw = [], [], []
    for anns in anns_per_row:
        instance_counts.append(len(anns))
        done = len(ann_ids) + len(anns)
        for ann in anns:
            ann_ids.append(ann['id'])
            bboxes.append(ann['bbox'])
            areas.append(ann.get('area', 0.0))
            categories.append(ann['category_id'])
            crowd.append(bool(ann.get('iscrowd', False)))
            ignore.append(bool(ann.get('ignore', False)))
            segmentation = ann.get('segmentation')
            hw = (0, 0)
            if 'mask_file' in ann:
                kinds.append(MASK_PNG)
                mask_ranges.append(blob.add(ann['mask_file'].encode()))
            elif isinstance(segmentation, list) and segmentation:
                kinds.append(MASK_POLYGON)
                mask_ranges.append((len(parts), len(parts) + len(segmentation)))
                for polygon in segmentation:
                    parts.append(len(polygon))
                    coords.append(np.asarray(polygon, dtype=np.float64))
            elif isinstance(segmentation, dict) and 'counts' in segmentation:
                kinds.append(MASK_RLE)
                mask_ranges.append(blob.add(compressed_rle_counts(segmentation).encode('ascii')))
                hw = tuple(segmentation['size'])
            else:
                kinds.append(MASK_NONE)
                mask_ranges.append((0, 0))
            rle_hw.append(hw)
        if progress is not None:
            progress(done, len(annotations))

    categories_json = coco.get('categories', [])
    category_names = _Blob()
    category_name_ranges = [category_names.add(c['name'].encode()) for c in categories_json]
    return {
        'layout_version': np.array([LAYOUT_VERSION], dtype=np.int64),
        'image_id': np.array([image['id'] for image in images], dtype=np.int64),
        'image_hw': np.array([(image['height'], image['width']) for image in images],
                             dtype=np.int64).reshape(-1, 2),
        'file_name_range': np.array(name_ranges, dtype=np.int64).reshape(-1, 2),
        'file_name_bytes': names.array(),
        'instance_offsets': _offsets(instance_counts),
        'ann_id': np.array(ann_ids, dtype=np.int64),
        'bbox': np.array(bboxes, dtype=np.float64).reshape(-1, 4),
        'area': np.array(areas, dtype=np.float64),
        'category_id': np.array(categories, dtype=np.int64),
        'iscrowd': np.array(crowd, dtype=np.uint8),
        'ignore': np.array(ignore, dtype=np.uint8),
        'mask_kind': np.array(kinds, dtype=np.uint8),
        'mask_range': np.array(mask_ranges, dtype=np.int64).reshape(-1, 2),
        'rle_hw': np.array(rle_hw, dtype=np.int64).reshape(-1, 2),
        'poly_part_offsets': _offsets(parts),
        'poly_coords': np.concatenate(coords) if coords else np.zeros(0, dtype=np.float64),
        'blob': blob.array(),
        'category_ids': np.array([c['id'] for c in categories_json], dtype=np.int64),
        'category_name_range': np.array(category_name_ranges, dtype=np.int64).reshape(-1, 2),
        'category_name_bytes': category_names.array(),
    }
