"""How a COCO annotation file is laid out in an annotation store: columns in, named flat arrays out.

The store file itself (csrc/store/) only knows named 1-D/2-D arrays. This module decides what
they are, so that every image, instance and mask lives in a handful of flat numpy arrays (no
per-sample Python objects), with CSR-style offsets linking images to instances and instances to
their mask data. Masks are kept in their source form:

- polygons: ``poly_parts[mask_start:mask_end]`` indexes ``poly_part_offsets``, which delimit runs
  of ``poly_coords`` (x0, y0, x1, y1, ... exactly as in the json);
- RLE: ``blob[mask_start:mask_end]`` is the COCO compressed counts string (uncompressed json
  counts are compressed with pycocotools at build time), ``rle_hw`` its declared size;
- per-instance PNG (annotation key ``mask_file``): ``blob[mask_start:mask_end]`` is the path.

Layout 2 (compact, lossless): every integer section has the smallest integer type holding its
values (``smallest_int``); ``bbox``, ``area`` and ``poly_coords`` are integers with a decimal
scale (``<name>_decimals`` = k: the value is ``float64(stored) / 10.0**k``) when that gives back
exactly the float64 of every value, bit for bit (-0.0 and NaN included: else float64 is
stored, k = -1). COCO's two-decimal polygons then take 2 bytes a coordinate instead of 8.
Read them with ``decoded``. Layout 1 (float64/int64 everywhere, ``file_name_range``) is never
read: its stores are rebuilt.

Layout 3: ids the json writes as something other than an int64 (strings, null, 2^70, 1.0, which
pycocotools and mmdet's ``CocoDataset`` take as they are) no longer drop their records.
``image_id`` is then an int64 key (the id itself where it equals an int64, ``1.0 == 1``; else
one that no other image uses) and ``image_id_json`` (``image_id_json_offsets`` delimiting runs of
``image_id_json_bytes``, present only when some id is not an int64) holds every image's id as
json text, so samples carry the json's id (``AnnotationStore.image_id``). Annotation ids get keys
the same way (mmdet's samples never show them); annotations find their image by Python equality,
as pycocotools' index does. Layout 2 stores dropped such records: they are rebuilt.
"""
import json
from typing import Callable, Optional

import numpy as np

from ..structures.coco_rle import compressed_rle_counts
from .coco_columns import KIND_IRREGULAR, KIND_POLYGON, CocoColumns
from .validation import _INT64, _is_int64, as_int64, id_key

MASK_NONE, MASK_POLYGON, MASK_RLE, MASK_PNG = 0, 1, 2, 3

# Bump together with the section meanings below (the C++ format version covers the container).
LAYOUT_VERSION = 3
# Sections stored as scaled integers where lossless (see the module doc).
SCALED_SECTIONS = ('bbox', 'area', 'poly_coords')
MAX_DECIMALS = 9
SCALE_CHUNK = 1 << 22  # values encoded at a time
# The json's image ids as json text, where some are not int64s (see the module doc).
IMAGE_ID_JSON_OFFSETS, IMAGE_ID_JSON_BYTES = 'image_id_json_offsets', 'image_id_json_bytes'
_INT_TYPES = (np.uint8, np.int8, np.uint16, np.int16, np.uint32, np.int32, np.int64)


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


def _offsets(lengths) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def smallest_int(values: np.ndarray) -> np.ndarray:
    """``values`` (integers) in the smallest integer type that holds them all."""
    values = np.asarray(values)
    if not values.size:
        return values.astype(np.uint8)
    low, high = int(values.min()), int(values.max())
    for dtype in _INT_TYPES:
        info = np.iinfo(dtype)
        if info.min <= low and high <= info.max:
            return values.astype(dtype)
    return values.astype(np.int64)


def decode_scaled(stored: np.ndarray, decimals: int) -> np.ndarray:
    """float64 values of a scaled section (``decimals`` < 0: stored as float64 already)."""
    if decimals < 0:
        return stored
    return stored.astype(np.float64) / 10.0 ** decimals


def encode_scaled(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(stored, decimals): the smallest integers k decimals give back bit-exactly, else float64.

    Why bit-exact: masks rasterised from the stored polygons must stay identical to
    pycocotools' on the json's values, so "close" is not enough; the check is the decoding itself.
    Works in chunks (a COCO-train json has 56M coordinates): no full-size temporaries.
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    flat = values.reshape(-1)
    if not flat.size:
        return values, -1
    decimals, low, high = 0, 0, 0
    for start in range(0, flat.size, SCALE_CHUNK):  # pass 1: the decimals and the range
        chunk = flat[start:start + SCALE_CHUNK]
        while True:
            integers, ok = _round_trips(chunk, decimals)
            if ok:
                break
            if decimals == MAX_DECIMALS:
                return values, -1
            decimals += 1  # earlier chunks' integers scale by 10 (exactly, below 2^53)
            low, high = low * 10, high * 10
        low, high = min(low, int(integers.min())), max(high, int(integers.max()))
    if max(abs(low), abs(high)) >= 2 ** 53:
        return values, -1
    out = np.empty(flat.size, dtype=smallest_int(np.array([low, high])).dtype)
    for start in range(0, flat.size, SCALE_CHUNK):  # pass 2: at the final decimals, checked again
        integers, ok = _round_trips(flat[start:start + SCALE_CHUNK], decimals)
        if not ok:
            return values, -1
        out[start:start + len(integers)] = integers
    return out.reshape(values.shape), decimals


def _round_trips(values: np.ndarray, decimals: int) -> tuple[np.ndarray, bool]:
    """(integers, whether float64(integers) / 10**decimals is ``values`` bit for bit)."""
    with np.errstate(invalid='ignore', over='ignore'):
        scaled = np.rint(values * 10.0 ** decimals)
        if not np.isfinite(scaled).all() or np.abs(scaled).max() >= 2.0 ** 53:
            return scaled, False
    integers = scaled.astype(np.int64)
    del scaled
    # The check is the decoding itself, from the integers (-0.0 becomes 0 there, and fails).
    decoded = integers.astype(np.float64) / 10.0 ** decimals
    return integers, np.array_equal(decoded.view(np.int64), values.view(np.int64))


def decoded(store, name: str, index=slice(None)) -> np.ndarray:
    """float64 values of a scaled section (``bbox``, ``area``, ``poly_coords``) at ``index``."""
    return decode_scaled(store[name][index], int(store[f'{name}_decimals'][0]))


def _keys_for_odd_ids(ids: list, taken: np.ndarray) -> dict:
    """{json id: int64 key} for the ``ids`` that equal no int64 (``id_key`` None), in json
    order; the keys are consecutive and none is in ``taken`` (the int64 keys of the other ids).

    Raises:
        ValueError: ``taken`` spans so much of the int64 range that no run of keys is free.
    """
    odd = list(dict.fromkeys(value for value in ids if id_key(value) is None))
    if not odd:
        return {}
    low, high = (int(taken.min()), int(taken.max())) if len(taken) else (0, -1)
    if high + len(odd) <= _INT64[1]:
        start = high + 1
    elif low - len(odd) >= _INT64[0]:
        start = low - len(odd)
    else:
        raise ValueError(f'{len(odd)} ids that are not integers (e.g. {odd[0]!r}) need int64 '
                         f'keys, and the integer ids span {low}..{high}: none is left free')
    return {value: start + k for k, value in enumerate(odd)}


def _taken_keys(int_ids: np.ndarray, json_ids: list) -> np.ndarray:
    """int64 keys in use: ``int_ids`` and those of ``json_ids`` that equal an int64 (never
    through float64, which would round ids beyond 2^53)."""
    keys = [key for key in map(id_key, json_ids) if key is not None]
    return np.concatenate([int_ids.astype(np.int64), np.array(keys, dtype=np.int64)])


def _key(value, odd_keys: dict, what: str) -> int:
    """The int64 key of a json id (``id_key``, else ``odd_keys``)."""
    key = id_key(value)
    if key is None:
        key = odd_keys.get(value)
        if key is None:
            raise ValueError(f'{what} {value!r}, which is not in "images"')
    return key


def coco_to_columns(coco: dict, path: str) -> CocoColumns:
    """A parsed json (the Python builder) as ``CocoColumns``: every record is "irregular", i.e.
    taken from its dict, as the native reader's irregular records are."""
    images, annotations = coco['images'], coco.get('annotations', [])
    zeros = lambda n, dtype: np.zeros(n, dtype=dtype)  # noqa: E731
    cols = {
        'img_id': zeros(len(images), np.int64), 'img_h': zeros(len(images), np.int64),
        'img_w': zeros(len(images), np.int64), 'img_name_len': zeros(len(images), np.int64),
        'img_name_bytes': zeros(0, np.uint8), 'img_irregular': np.ones(len(images), np.uint8),
        'ann_id': zeros(len(annotations), np.int64),
        'ann_image_id': zeros(len(annotations), np.int64),
        'ann_category_id': zeros(len(annotations), np.int64),
        'ann_bbox': zeros((len(annotations), 4), np.float64),
        'ann_area': zeros(len(annotations), np.float64),
        'ann_iscrowd': zeros(len(annotations), np.uint8),
        'ann_ignore': zeros(len(annotations), np.uint8),
        'ann_kind': np.full(len(annotations), KIND_IRREGULAR, np.uint8),
        'ann_nparts': zeros(len(annotations), np.int32), 'part_len': zeros(0, np.int32),
        'coords': zeros(0, np.float64),
        # What validate_columns reads beside the columns; never used to re-read a record here
        # (every record is a dict already).
        'ann_start': zeros(len(annotations), np.int64),
        'section_ends': np.full(3, -1, np.int64),
    }
    # As read_columns leaves irregular records: their int64 ids in the columns (validation's
    # duplicate and image lookups read the columns), 0 where not an int64.
    for index, image in enumerate(images):
        cols['img_id'][index] = image['id'] if _is_int64(image.get('id')) else 0
    for index, ann in enumerate(annotations):
        for key in ('id', 'image_id', 'category_id'):
            value = ann.get(key)
            cols[f'ann_{key}'][index] = value if _is_int64(value) else 0
    return CocoColumns(path, cols, coco.get('categories', []), dict(enumerate(images)),
                       dict(enumerate(annotations)))


def _image_id_json(columns: CocoColumns, image_rows: np.ndarray) -> Optional[list[bytes]]:
    """The json text of the id of every image in ``image_rows``, or None when all are int64s
    (the store's ``image_id`` then is the id itself)."""
    irregular = columns.irregular_images
    if all(_is_int64(irregular[row]['id']) for row in image_rows.tolist() if row in irregular):
        return None
    ids = columns.cols['img_id']
    return [json.dumps(irregular[row]['id']).encode() if row in irregular else b'%d' % ids[row]
            for row in image_rows.tolist()]


def columns_to_sections(columns: CocoColumns, keep_images: Optional[np.ndarray] = None,
                        keep_anns: Optional[np.ndarray] = None,
                        progress: Optional[Callable[[int, int], None]] = None
                        ) -> dict[str, np.ndarray]:
    """The store's named arrays for the kept images and annotations of ``columns``.

    Images keep the json's order and each image's annotations keep theirs, which is the order
    mmdet's ``CocoDataset`` (through pycocotools' ``COCO``) produces. Irregular records are taken
    from their parsed dicts (the columns hold placeholders for them). Consumes ``columns``: its
    annotation columns are dropped as their sections are made.
    """
    cols = columns.cols
    num_images, num_anns = columns.num_images, columns.num_anns
    keep_images = np.ones(num_images, bool) if keep_images is None else keep_images
    keep_anns = np.ones(num_anns, bool) if keep_anns is None else keep_anns
    ann_bbox = cols['ann_bbox'].reshape(-1, 4)

    # Images: the columns, with irregular ones filled from their dicts.
    kept_irregular_images = {index: image for index, image in columns.irregular_images.items()
                             if keep_images[index]}
    image_keys = _keys_for_odd_ids(
        [image['id'] for image in kept_irregular_images.values()],
        _taken_keys(cols['img_id'][keep_images & (cols['img_irregular'] == 0)],
                    [image['id'] for image in kept_irregular_images.values()]))
    name_start = _offsets(cols['img_name_len'])
    name_lengths = cols['img_name_len'].copy()
    pieces, cursor = [], 0
    for index, image in sorted(kept_irregular_images.items()):
        cols['img_id'][index] = _key(image['id'], image_keys, 'image id')
        cols['img_h'][index] = as_int64(image['height'])
        cols['img_w'][index] = as_int64(image['width'])
        data = image['file_name'].encode()
        start = int(name_start[index])
        pieces += [cols['img_name_bytes'][cursor:start], np.frombuffer(data, np.uint8)]
        cursor = start
        name_lengths[index] = len(data)
    if pieces:
        pieces.append(cols['img_name_bytes'][cursor:])
        name_bytes = np.concatenate(pieces)
    else:
        name_bytes = cols['img_name_bytes']
    image_rows = np.flatnonzero(keep_images)
    kept_name_start = _offsets(name_lengths)[image_rows]
    kept_name_len = name_lengths[image_rows]
    if len(image_rows) == num_images:
        file_name_bytes = name_bytes
    else:  # gather the kept names
        take = np.repeat(kept_name_start - _offsets(kept_name_len)[:-1], kept_name_len) \
            + np.arange(int(kept_name_len.sum()), dtype=np.int64)
        file_name_bytes = name_bytes[take]
    image_ids = cols['img_id'][image_rows]
    id_json = _image_id_json(columns, image_rows)

    # Annotations: irregular ones filled from their dicts; masks of irregular ones collected.
    blob = _Blob()
    mask_kind = np.where(cols['ann_kind'] == KIND_POLYGON, MASK_POLYGON, MASK_NONE).astype(np.uint8)
    # Boxes-only files (Objects365: 25M instances) need no per-instance mask ranges: they are
    # made only where some instance has a mask.
    has_masks = len(cols['part_len']) > 0 or bool(columns.irregular_anns)
    mask_range = np.zeros((num_anns if has_masks else 0, 2), dtype=np.int64)
    if len(cols['part_len']):
        part_starts = columns.ann_part_start
        mask_range[:, 0] = part_starts[:-1]
        mask_range[:, 1] = part_starts[1:]
        del part_starts
    rle_sizes: dict[int, tuple] = {}
    extra_parts: list[int] = []
    extra_coords: list[np.ndarray] = []
    num_parts = len(cols['part_len'])
    kept_irregular_anns = {index: ann for index, ann in columns.irregular_anns.items()
                           if keep_anns[index]}
    ann_keys = _keys_for_odd_ids([ann['id'] for ann in kept_irregular_anns.values()],
                                 _taken_keys(cols['ann_id'][keep_anns],
                                             [ann['id'] for ann in kept_irregular_anns.values()]))
    for index, ann in kept_irregular_anns.items():
        cols['ann_id'][index] = _key(ann['id'], ann_keys, 'annotation id')
        cols['ann_image_id'][index] = _key(ann['image_id'], image_keys,
                                           f'annotation {ann["id"]!r} refers to image_id')
        cols['ann_category_id'][index] = id_key(ann['category_id'])
        ann_bbox[index] = ann['bbox']
        cols['ann_area'][index] = ann.get('area', 0.0)
        cols['ann_iscrowd'][index] = bool(ann.get('iscrowd', False))
        cols['ann_ignore'][index] = bool(ann.get('ignore', False))
        segmentation = ann.get('segmentation')
        if 'mask_file' in ann:
            mask_kind[index] = MASK_PNG
            mask_range[index] = blob.add(ann['mask_file'].encode())
        elif isinstance(segmentation, list) and segmentation:
            mask_kind[index] = MASK_POLYGON
            first = num_parts + len(extra_parts)
            for polygon in segmentation:
                extra_parts.append(len(polygon))
                extra_coords.append(np.asarray(polygon, dtype=np.float64))
            mask_range[index] = (first, num_parts + len(extra_parts))
        elif isinstance(segmentation, dict) and 'counts' in segmentation:
            mask_kind[index] = MASK_RLE
            mask_range[index] = blob.add(compressed_rle_counts(segmentation).encode('ascii'))
            rle_sizes[index] = tuple(segmentation['size'])
        else:
            mask_kind[index] = MASK_NONE
            mask_range[index] = (0, 0)

    del ann_bbox  # the column itself is consumed below
    if has_masks:
        mask_range[mask_kind == MASK_NONE] = 0

    # Which kept image each kept annotation belongs to (the last image of that id, as the
    # Python builder's dict did), then stable grouping by image.
    ann_rows = np.flatnonzero(keep_anns)
    order = np.argsort(image_ids, kind='stable')
    sorted_ids = image_ids[order]
    ann_image_ids = cols['ann_image_id'][ann_rows]
    pos = np.searchsorted(sorted_ids, ann_image_ids, side='right') - 1
    found = (pos >= 0) & (sorted_ids[np.maximum(pos, 0)] == ann_image_ids) if len(sorted_ids) \
        else np.zeros(len(ann_rows), dtype=bool)
    if not found.all():
        bad = ann_rows[np.flatnonzero(~found)[0]]
        raise ValueError(f'annotation {int(cols["ann_id"][bad])} refers to image_id '
                         f'{int(cols["ann_image_id"][bad])}, which is not in "images"')
    image_of_ann = order[pos] if len(order) else pos
    grouping = np.argsort(image_of_ann, kind='stable')
    ann_rows = ann_rows[grouping]
    instance_counts = np.bincount(image_of_ann, minlength=len(image_rows))
    del grouping, image_of_ann, pos, found
    if progress is not None:
        progress(len(ann_rows), len(ann_rows))

    # Polygon data: regular parts of kept annotations (compacted if any were dropped), then the
    # parts of irregular ones.
    part_len = cols['part_len'].astype(np.int64)
    coords = cols['coords']
    regular_polygon = (cols['ann_kind'] == KIND_POLYGON)
    keep_part = np.repeat(keep_anns[regular_polygon], cols['ann_nparts'][regular_polygon])
    if not keep_part.all():
        new_index = np.cumsum(keep_part) - keep_part
        moved = regular_polygon & keep_anns
        mask_range[moved, 0] = new_index[np.minimum(mask_range[moved, 0], num_parts - 1)]
        mask_range[moved, 1] = mask_range[moved, 0] + cols['ann_nparts'][moved]
        coords = coords[np.repeat(keep_part, part_len)]
        part_len = part_len[keep_part]
        shift = num_parts - len(part_len)
        irregular_polygon = np.zeros(num_anns, dtype=bool)
        irregular_polygon[[i for i in columns.irregular_anns if keep_anns[i]]] = True
        irregular_polygon &= mask_kind == MASK_POLYGON
        mask_range[irregular_polygon] -= shift
    if extra_parts:
        part_len = np.concatenate([part_len, np.array(extra_parts, dtype=np.int64)])
        coords = np.concatenate([coords] + extra_coords)

    categories = columns.categories
    category_names = _Blob()
    category_name_ranges = [category_names.add(c['name'].encode()) for c in categories]
    kept = len(ann_rows)
    rle_hw = np.zeros((kept, 2), dtype=np.uint8)
    if rle_sizes:
        full = np.zeros((num_anns, 2), dtype=np.int64)
        for index, size in rle_sizes.items():
            full[index] = size
        rle_hw = smallest_int(full[ann_rows])
        del full
    # Each column is gathered into its section and dropped (``cols`` is consumed): at 25M
    # instances the columns are GBs, and only one of them is copied at a time.
    sections = {
        'layout_version': np.array([LAYOUT_VERSION], dtype=np.int64),
        'image_id': smallest_int(image_ids),
        'image_hw': smallest_int(np.stack([cols['img_h'][image_rows],
                                           cols['img_w'][image_rows]], axis=1).reshape(-1, 2)),
        'file_name_offsets': smallest_int(_offsets(kept_name_len)),
        'file_name_bytes': file_name_bytes,
        'instance_offsets': smallest_int(_offsets(instance_counts)),
    }
    if id_json is not None:
        sections[IMAGE_ID_JSON_OFFSETS] = smallest_int(_offsets([len(t) for t in id_json]))
        sections[IMAGE_ID_JSON_BYTES] = np.frombuffer(b''.join(id_json), dtype=np.uint8)
    for name, column in (('ann_id', 'ann_id'), ('category_id', 'ann_category_id')):
        sections[name] = smallest_int(cols.pop(column)[ann_rows])
    for name, column in (('iscrowd', 'ann_iscrowd'), ('ignore', 'ann_ignore')):
        sections[name] = cols.pop(column)[ann_rows].astype(np.uint8)
    sections['mask_kind'] = mask_kind[ann_rows]
    del mask_kind
    sections['mask_range'] = smallest_int(mask_range[ann_rows]) if has_masks \
        else np.zeros((kept, 2), dtype=np.uint8)
    del mask_range
    sections.update({
        'rle_hw': rle_hw,
        'poly_part_offsets': smallest_int(_offsets(part_len)),
        'blob': blob.array(),
        'category_ids': smallest_int(np.array([id_key(c['id']) for c in categories],
                                              dtype=np.int64)),
        'category_name_range': smallest_int(np.array(category_name_ranges,
                                                     dtype=np.int64).reshape(-1, 2)),
        'category_name_bytes': category_names.array(),
    })
    for name, values in (('bbox', None), ('area', None), ('poly_coords', coords)):
        if values is None:
            values = (cols.pop('ann_bbox').reshape(-1, 4) if name == 'bbox'
                      else cols.pop('ann_area'))[ann_rows]
        stored, decimals = encode_scaled(values)
        del values
        sections[name] = stored
        sections[f'{name}_decimals'] = np.array([decimals], dtype=np.int64)
    return sections
