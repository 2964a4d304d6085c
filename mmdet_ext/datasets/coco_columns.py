"""A COCO json read by the native streaming reader into columns, validated without Python records.

Why: ``json.loads`` of a COCO-train-sized file makes millions of Python objects (4-5 GB for 583 MB
of json; tens of GB for LVIS or Objects365). ``_C.read_coco_json`` (csrc/store/coco_json_reader.h,
rapidjson SAX over a file stream) returns flat numpy columns instead, in json order. Only the
records the columns cannot hold exactly ("irregular": a field of another type, an RLE or
``mask_file`` segmentation) and the categories are read by Python, from their byte ranges.

Validation gives the report of ``validation.validate_coco`` on the same json, problem for problem:
vectorised checks over the columns find every record that *may* have a problem (with margins, so
the set is a superset), and exactly those records are re-read from the json and judged by the same
``validation._Checker`` code, in json order. Clean records are never turned into Python objects.
"""
import json
import os
from dataclasses import dataclass
from functools import cached_property
from typing import Callable, Optional

import numpy as np

from .._native import _C
from .validation import (MAX_MISSING_FRACTION, AnnotationFileError, MissingImagesError,
                         ValidationReport, _Checker, _hashable, _is_int64, _path_problem,
                         _printable, check_coco_layout, decide_actions, id_key,
                         missing_images_message, resolve_policy, MAX_POLYGON_COORDINATE,
                         BBOX_TOLERANCE)
from ..io import DEFAULT_MAX_PIXELS

KIND_NONE, KIND_POLYGON, KIND_IRREGULAR = 0, 1, 2


def native_reader_available() -> bool:
    """Whether this build has the rapidjson reader (else the store uses ``json.loads``)."""
    return bool(_C.build_info().get('rapidjson'))


@dataclass
class CocoColumns:
    """One COCO json as columns (json order). ``ann_*`` arrays have one row per annotation."""

    path: str
    cols: dict[str, np.ndarray]
    categories: list[dict]
    irregular_images: dict[int, dict]  # json index -> the record as json.loads reads it
    irregular_anns: dict[int, dict]

    @cached_property
    def part_start(self) -> np.ndarray:
        """[num_parts + 1] offsets into ``coords``."""
        return _offsets(self.cols['part_len'])

    @cached_property
    def ann_part_start(self) -> np.ndarray:
        """[num_anns + 1] offsets into the parts (made only where needed: 200 MB at 25M)."""
        return _offsets(self.cols['ann_nparts'])

    @cached_property
    def num_images(self) -> int:
        return len(self.cols['img_id'])

    @cached_property
    def num_anns(self) -> int:
        return len(self.cols['ann_id'])


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


class _Records:
    """Random access to records of the json by byte range.

    ``pread``, not a mapping: the records read (1% of COCO's, spread over the file) would map
    and count in RSS most of the file's pages.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_RDONLY)
        self._decoder = json.JSONDecoder()

    def read(self, start: int, end: int):
        """The json value starting at ``start`` (anything after it up to ``end`` is ignored)."""
        text = os.pread(self._fd, end - start, start).decode('utf-8')
        return self._decoder.raw_decode(text)[0]

    def close(self) -> None:
        os.close(self._fd)


def read_columns(path: str, record_starts: bool = False,
                 progress: Optional[Callable[[int, int], None]] = None,
                 image_names: str = 'file_name') -> CocoColumns:
    """Stream ``path`` into columns and check COCO's layout, as ``parse_coco_json`` does.

    ``image_names='coco_url'`` names images as ``name_images_by_url`` does (LVIS v1).

    Raises:
        AnnotationFileError: not UTF-8, not json (truncated, ...), or not COCO's layout; the
            message names the file and the byte offset or the key.
    """
    try:
        named = _C.read_coco_json(path, record_starts, progress)
    except _C.CocoJsonError as err:
        raise AnnotationFileError(str(err)) from None
    if progress is not None:
        size = os.path.getsize(path)
        progress(size, size)
    cols = {name: tensor.numpy() for name, tensor in named}
    del named
    cols['ann_bbox'] = cols['ann_bbox'].reshape(-1, 4)
    records = _Records(path)
    try:
        spans = {key: cols.pop(f'{key}_spans').reshape(-1, 3)
                 for key in ('images', 'annotations', 'categories')}
        categories = [records.read(start, end) for _, start, end in spans['categories']]
        images = {int(i): records.read(s, e) for i, s, e in spans['images']}
        anns = {int(i): records.read(s, e) for i, s, e in spans['annotations']}
    finally:
        records.close()
    # The file-level checks of check_coco_layout, on what Python read (categories, and the ids of
    # irregular records: regular ones are int64 by construction).
    check_coco_layout({'images': list(images.values()), 'annotations': [],
                       'categories': categories}, path)
    _check_ids(images, anns, path)
    for index, image in images.items():  # what the columns hold of them: int64 ids where they are
        cols['img_id'][index] = image['id'] if _is_int64(image.get('id')) else 0
    for index, ann in anns.items():
        for key in ('id', 'image_id', 'category_id'):
            value = ann.get(key)
            cols[f'ann_{key}'][index] = value if _is_int64(value) else 0
    columns = CocoColumns(path, cols, categories, images, anns)
    if image_names != 'file_name':
        name_images(columns, image_names, from_file=True)
    return columns


IMAGE_NAME_SOURCES = ('file_name', 'coco_url')
# What mmdet's LVISV1Dataset removes from "coco_url" to make the file name
# (e.g. http://images.cocodataset.org/train2017/000000391895.jpg -> train2017/000000391895.jpg).
COCO_URL_PREFIX = 'http://images.cocodataset.org/'


def name_images(columns: CocoColumns, image_names: str, from_file: bool) -> None:
    """Name every image as ``image_names`` says, in place, before validation and the store.

    ``'coco_url'`` (LVIS v1, whose images carry ``coco_url`` and no ``file_name``): the name is
    ``coco_url.replace(COCO_URL_PREFIX, '')``, exactly mmdet's ``LVISV1Dataset`` expression,
    whatever ``file_name`` the record has. The native reader reads only ``file_name`` (an image
    without one is "irregular"), so here each image record is re-read from its byte range
    (``from_file``; one small dict at a time, never one per annotation) and the image is made
    regular again: its id, size and derived name go into the columns, so validation judges it,
    and its annotations, vectorised as any COCO image. Images whose id or size the columns cannot
    hold stay irregular dicts, with the derived ``file_name`` (validation reports them as usual).

    Raises:
        AnnotationFileError: an image has no string ``coco_url`` (names the file and the index).
    """
    if image_names not in IMAGE_NAME_SOURCES:
        raise ValueError(f'image_names must be one of {IMAGE_NAME_SOURCES}, not {image_names!r}')
    if image_names == 'file_name':
        return
    cols = columns.cols
    num_images = columns.num_images
    records = None
    if from_file:
        starts = cols['img_start']
        ends = np.append(starts[1:], max(int(cols['section_ends'][0]), 0)) if num_images else starts
        records = _Records(columns.path)
    names: list[bytes] = []
    name_len = np.zeros(num_images, dtype=np.int64)
    irregular = cols['img_irregular']
    try:
        for index in range(num_images):
            image = columns.irregular_images.get(index)
            if image is None:
                image = records.read(int(starts[index]), int(ends[index]))
            url = image.get('coco_url')
            if not isinstance(url, str):
                raise AnnotationFileError(
                    f'{columns.path}: images[{index}] has "coco_url" = {_printable(url)}, not a '
                    'string; LVIS v1 names its images by coco_url (mmdet strips '
                    f'{COCO_URL_PREFIX!r} from it)')
            image['file_name'] = url.replace(COCO_URL_PREFIX, '')
            if not _regular_image(image):
                columns.irregular_images[index] = image
                irregular[index] = 1
                continue
            columns.irregular_images.pop(index, None)
            irregular[index] = 0
            cols['img_id'][index] = image['id']
            cols['img_h'][index], cols['img_w'][index] = image['height'], image['width']
            data = image['file_name'].encode()
            names.append(data)
            name_len[index] = len(data)
    finally:
        if records is not None:
            records.close()
    cols['img_name_len'] = name_len
    cols['img_name_bytes'] = np.frombuffer(b''.join(names), dtype=np.uint8).copy()


def _regular_image(image: dict) -> bool:
    """Whether the columns hold ``image`` exactly (what the native reader calls regular)."""
    height, width = image.get('height'), image.get('width')
    return (_is_int64(image.get('id')) and _is_int64(height) and _is_int64(width)
            and height > 0 and width > 0 and _path_problem(image.get('file_name')) is None)


def _check_ids(images: dict, anns: dict, path: str) -> None:
    """check_coco_layout's "not an id" errors, with the json index of the record."""
    for index, image in images.items():
        if not _hashable(image.get('id')):
            raise AnnotationFileError(f'{path}: images[{index}] has "id" = '
                                      f'{_printable(image.get("id"))}, not an id')
    for key in ('image_id', 'id'):
        for index, ann in anns.items():
            if not _hashable(ann.get(key)):
                raise AnnotationFileError(f'{path}: annotations[{index}] has "{key}" = '
                                          f'{_printable(ann.get(key))}, not an id')


def image_record(columns: CocoColumns, index: int, names: np.ndarray,
                 name_start: np.ndarray) -> dict:
    """Image ``index`` as a dict with the keys validation reads (the parsed record if irregular)."""
    if index in columns.irregular_images:
        return columns.irregular_images[index]
    cols = columns.cols
    start = int(name_start[index])
    return {'id': int(cols['img_id'][index]),
            'file_name': names[start:start + int(cols['img_name_len'][index])].tobytes().decode(),
            'height': int(cols['img_h'][index]), 'width': int(cols['img_w'][index])}


class _ImageLookup:
    """Row of the first image with a given id, as ``image_of_id.get`` in ``validation._check``."""

    def __init__(self, columns: CocoColumns, int_ids: np.ndarray) -> None:
        self.columns = columns
        odd = [i for i, image in columns.irregular_images.items()
               if not _is_int64(image.get('id'))]
        # Ids that are not int64 (strings, floats, bools) compare like Python values: then every
        # lookup goes through one Python dict of all ids (a rare, malformed file).
        self.python: Optional[dict] = None
        if odd:
            self.python = {}
            for index in range(columns.num_images):
                image = columns.irregular_images.get(index)
                key = image.get('id') if image is not None else int(int_ids[index])
                self.python.setdefault(key, index)
        is_int = np.ones(len(int_ids), dtype=bool)
        is_int[odd] = False
        int_rows = np.flatnonzero(is_int)
        # Stable sort: among equal ids the first row comes first, as image_of_id keeps the first.
        self.sorted_rows = int_rows[np.argsort(int_ids[int_rows], kind='stable')]
        self.sorted_ids = int_ids[self.sorted_rows]

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """Vectorised lookup of int64 ids: first row with that id, -1 where none."""
        if not len(self.sorted_ids):
            return np.full(len(ids), -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.sorted_ids, ids, side='left'),
                         len(self.sorted_ids) - 1)
        return np.where(self.sorted_ids[pos] == ids, self.sorted_rows[pos], -1)

    def row(self, value) -> int:
        """Row for any json value (Python equality), -1 where none."""
        if self.python is not None:
            try:
                return self.python.get(value, -1)
            except TypeError:
                return -1
        key = id_key(value)
        if key is None:
            return -1
        return int(self.rows(np.array([key], dtype=np.int64))[0])


def _first_occurrence_dups(ids: np.ndarray) -> np.ndarray:
    """True where an id occurred earlier in ``ids``."""
    if not len(ids):
        return np.zeros(0, dtype=bool)
    order = np.argsort(ids, kind='stable')
    sorted_ids = ids[order]
    repeat = np.zeros(len(ids), dtype=bool)
    repeat[1:] = sorted_ids[1:] == sorted_ids[:-1]
    dup = np.zeros(len(ids), dtype=bool)
    dup[order] = repeat
    return dup


def _python_dups(values: list) -> np.ndarray:
    seen: set = set()
    dup = np.zeros(len(values), dtype=bool)
    for index, value in enumerate(values):
        if value in seen:
            dup[index] = True
        seen.add(value)
    return dup


# Coordinates checked per step of _polygon_suspects: its ~10 per-point temporaries of 8 bytes
# then take ~0.3 GB at most, where the whole of COCO train (56M coordinates) at once took ~2 GB.
POLYGON_CHECK_COORDINATES = 4_000_000


def _polygon_suspects(columns: CocoColumns, ann_rows: np.ndarray, img_h: np.ndarray,
                      img_w: np.ndarray) -> np.ndarray:
    """Polygon annotations that may be ``polygon_invalid`` or ``mask_empty`` (a superset).

    In steps of whole annotations holding about POLYGON_CHECK_COORDINATES coordinates, so the
    peak memory of a validated build does not grow with the dataset.
    """
    cols = columns.cols
    num_anns = columns.num_anns
    suspect = np.zeros(num_anns, dtype=bool)
    if not len(img_h) or not len(cols['part_len']):
        return suspect  # unknown images: every annotation is a suspect already; no polygons
    ann_part_start = columns.ann_part_start
    ann_coord_start = columns.part_start[ann_part_start]
    first = 0
    while first < num_anns:
        limit = ann_coord_start[first] + POLYGON_CHECK_COORDINATES
        end = int(np.searchsorted(ann_coord_start, limit, side='right')) - 1
        end = min(max(end, first + 1), num_anns)
        parts = slice(ann_part_start[first], ann_part_start[end])
        coords = slice(ann_coord_start[first], ann_coord_start[end])
        suspect[first:end] = _polygon_suspects_in(
            cols['part_len'][parts].astype(np.int64), cols['coords'][coords],
            columns.part_start[parts.start:parts.stop + 1] - coords.start,
            cols['ann_nparts'][first:end], cols['ann_kind'][first:end], ann_rows[first:end],
            img_h, img_w)
        first = end
    return suspect


def _polygon_suspects_in(part_len: np.ndarray, coords: np.ndarray, part_start: np.ndarray,
                         ann_nparts: np.ndarray, ann_kind: np.ndarray, ann_rows: np.ndarray,
                         img_h: np.ndarray, img_w: np.ndarray) -> np.ndarray:
    """_polygon_suspects for consecutive annotations: their parts' lengths, their coordinates,
    the parts' [num_parts + 1] offsets into those, parts per annotation, kinds, image rows."""
    num_anns = len(ann_nparts)
    suspect = np.zeros(num_anns, dtype=bool)
    num_parts = len(part_len)
    if not num_parts:
        return suspect
    part_ann = np.repeat(np.arange(num_anns, dtype=np.int64), ann_nparts)
    bad_part = (part_len % 2 == 1) | (part_len < 6)
    bad_coord = ~np.isfinite(coords) | (np.abs(coords) > MAX_POLYGON_COORDINATE)
    nonempty = part_len > 0
    if bad_coord.any():
        bad_part[nonempty] |= np.maximum.reduceat(bad_coord.view(np.uint8),
                                                  part_start[:-1][nonempty]) > 0
    suspect[part_ann[bad_part]] = True
    # Points (x, y) of each part; the point before the first is the last (shoelace wraps).
    npts = part_len // 2
    pt_part = np.repeat(np.arange(num_parts, dtype=np.int64), npts)
    pt_first = _offsets(npts)
    pt_k = np.arange(len(pt_part), dtype=np.int64) - pt_first[pt_part]
    idx = part_start[pt_part] + 2 * pt_k
    prev = np.where(pt_k == 0, part_start[pt_part] + 2 * (npts[pt_part] - 1), idx - 2)
    del pt_k
    x, y, xp, yp = coords[idx], coords[idx + 1], coords[prev], coords[prev + 1]
    del idx, prev
    with np.errstate(invalid='ignore', over='ignore'):
        term = x * yp - y * xp
        scale = np.abs(x * yp) + np.abs(y * xp)
    del xp, yp
    part_area = np.abs(np.bincount(pt_part, weights=term, minlength=num_parts)) / 2
    part_scale = np.bincount(pt_part, weights=scale, minlength=num_parts)
    del term, scale
    ann_area = np.bincount(part_ann, weights=part_area, minlength=num_anns)
    ann_scale = np.bincount(part_ann, weights=part_scale, minlength=num_anns)
    # Python sums in another order: a margin far above float64 rounding of these sums.
    suspect |= (ann_kind == KIND_POLYGON) & ~(ann_area >= 2.0 + 1e-9 * ann_scale + 1e-6)
    # Extent per annotation over its points (points of one annotation are contiguous).
    pt_ann = part_ann[pt_part]
    del pt_part
    ann_npts = np.bincount(pt_ann, minlength=num_anns)
    has_pts = ann_npts > 0
    starts = _offsets(ann_npts)[:-1][has_pts]
    if len(starts):
        rows = ann_rows[has_pts]
        safe = np.maximum(rows, 0)
        height = np.where(rows >= 0, img_h[safe], 0).astype(np.float64)
        width = np.where(rows >= 0, img_w[safe], 0).astype(np.float64)
        margin = 1e-6
        outside = ((np.maximum.reduceat(x, starts) <= margin)
                   | (np.maximum.reduceat(y, starts) <= margin)
                   | (np.minimum.reduceat(x, starts) >= width - margin)
                   | (np.minimum.reduceat(y, starts) >= height - margin))
        suspect[np.flatnonzero(has_pts)[outside]] = True
    suspect &= ann_kind == KIND_POLYGON
    return suspect


def _annotation_suspects(columns: CocoColumns, rows: np.ndarray, category_ids: np.ndarray,
                         img_h: np.ndarray, img_w: np.ndarray,
                         image_irregular: np.ndarray) -> np.ndarray:
    """Regular annotations that may have a problem in ``_Checker.annotation`` (a superset)."""
    cols = columns.cols
    known = rows >= 0
    if not len(img_h):
        return np.zeros(len(rows), dtype=bool)  # every annotation's image is unknown
    safe_rows = np.where(known, rows, 0)
    height = img_h[safe_rows].astype(np.float64)
    width = img_w[safe_rows].astype(np.float64)
    suspect = known & image_irregular[safe_rows]
    # A record without "area" is regular with area 0 in the columns (rare in real data): judged
    # from the json, as _Checker records a missing key.
    suspect |= ~np.isfinite(cols['ann_area']) | (cols['ann_area'] == 0)
    suspect |= ~np.isin(cols['ann_category_id'], category_ids)
    bbox = cols['ann_bbox']
    x, y, w, h = bbox[:, 0], bbox[:, 1], bbox[:, 2], bbox[:, 3]
    margin = 1e-3
    with np.errstate(invalid='ignore', over='ignore'):
        suspect |= ~np.isfinite(bbox).all(axis=1)
        suspect |= (w <= margin) | (h <= margin)
        suspect |= (x < -BBOX_TOLERANCE + margin) | (y < -BBOX_TOLERANCE + margin)
        suspect |= (x + w > width + BBOX_TOLERANCE - margin)
        suspect |= (y + h > height + BBOX_TOLERANCE - margin)
    suspect |= _polygon_suspects(columns, rows, img_h, img_w)
    return suspect & known


def validate_columns(columns: CocoColumns, img_prefix: str = '', mask_root: str = '',
                     policy: Optional[dict[str, str]] = None,
                     backend_args: Optional[dict] = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                     check_files: bool = True
                     ) -> tuple[np.ndarray, np.ndarray, ValidationReport]:
    """``validate_coco`` on columns: (images kept, annotations kept) as boolean masks over json
    order, and the report (the same problems, in the same order, as ``validate_coco``).

    ``columns`` must have been read with ``record_starts=True`` (suspect records are re-read).

    Raises:
        DataValidationError, MissingImagesError: as ``validate_coco``.
    """
    cols = columns.cols
    checker = _Checker(img_prefix, mask_root, backend_args, max_pixels, check_files)
    num_images, num_anns = columns.num_images, columns.num_anns
    names = cols['img_name_bytes']
    name_start = _offsets(cols['img_name_len'])
    image_irregular = cols['img_irregular'].astype(bool)
    lookup = _ImageLookup(columns, cols['img_id'])
    # Images: duplicates, then _Checker.image, in json order.
    if lookup.python is not None:
        ids = [columns.irregular_images[i].get('id') if i in columns.irregular_images
               else int(cols['img_id'][i]) for i in range(num_images)]
        image_dup = _python_dups(ids)
    else:
        image_dup = _first_occurrence_dups(cols['img_id'])
    img_h, img_w = cols['img_h'], cols['img_w']
    image_suspect = image_irregular | image_dup | (img_h > max_pixels) | (img_w > max_pixels)
    with np.errstate(over='ignore'):
        image_suspect |= img_h.astype(np.float64) * img_w.astype(np.float64) > max_pixels * 0.999
    visit = np.arange(num_images) if check_files else np.flatnonzero(image_suspect)
    for index in visit.tolist():
        image = image_record(columns, index, names, name_start)
        if image_dup[index]:
            checker.add('duplicate_image_id', image.get('id'), None, image.get('file_name'),
                        'another image has the same id')
            continue
        checker.image(image)
    # Annotations.
    category_ids = np.array([c['id'] for c in columns.categories], dtype=np.int64)
    category_set = {c.get('id') for c in columns.categories}
    irregular = np.zeros(num_anns, dtype=bool)
    irregular[list(columns.irregular_anns)] = True
    odd_ids = [i for i, a in columns.irregular_anns.items() if not _is_int64(a.get('id'))]
    if odd_ids:
        ann_dup = _python_dups([columns.irregular_anns[i].get('id') if irregular[i]
                                else int(cols['ann_id'][i]) for i in range(num_anns)])
    else:
        ann_dup = _first_occurrence_dups(cols['ann_id'])
    rows = lookup.rows(cols['ann_image_id']) if lookup.python is None else \
        np.array([lookup.row(int(v)) for v in cols['ann_image_id']], dtype=np.int64)
    for index, ann in columns.irregular_anns.items():
        rows[index] = lookup.row(ann.get('image_id'))
    suspect = irregular | ann_dup | (rows < 0)
    suspect |= _annotation_suspects(columns, rows, category_ids, img_h, img_w, image_irregular)
    records = _Records(columns.path)
    starts = cols['ann_start']
    ends = np.append(starts[1:], max(int(cols['section_ends'][1]), 0))
    try:
        for index in np.flatnonzero(suspect).tolist():
            ann = columns.irregular_anns.get(index)
            if ann is None:
                ann = records.read(int(starts[index]), int(ends[index]))
            if ann_dup[index]:
                checker.add('duplicate_ann_id', ann.get('image_id'), ann.get('id'), None,
                            'another annotation has the same id')
            row = int(rows[index])
            if row < 0:
                checker.add('unknown_image_id', ann.get('image_id'), ann.get('id'), None,
                            f"image_id {ann.get('image_id')!r} is not in \"images\"",
                            storable=False)
                continue
            checker.annotation(ann, image_record(columns, row, names, name_start), category_set)
    finally:
        records.close()
    missing = [p for p in checker.problems if p.kind == 'image_missing']
    if missing and resolve_policy(policy)['image_missing'] == 'drop_image' \
            and len(missing) > MAX_MISSING_FRACTION * checker.images_checked:
        raise MissingImagesError(missing_images_message(
            len(missing), checker.images_checked, img_prefix, missing[0].file))
    keep_images, keep_anns, report = _apply_policy(columns, checker.problems, policy, rows)
    report.file_states = checker.file_states
    report.images_checked = checker.images_checked
    report.missing_images = len(missing)
    report.missing_example = missing[0].file if missing else ''
    return keep_images, keep_anns, report


def _apply_policy(columns: CocoColumns, problems: list, policy: Optional[dict],
                  rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, ValidationReport]:
    """``validation.apply_policy`` on columns: keep masks instead of filtered lists."""
    actions, bad_images, bad_anns = decide_actions(problems, policy)
    cols = columns.cols
    keep_images = np.ones(columns.num_images, dtype=bool)
    keep_anns = np.ones(columns.num_anns, dtype=bool)
    int_bad_images = np.array([v for v in bad_images if _is_int64(v)], dtype=np.int64)
    # Regular records: int64 ids, whose _printable is themselves.
    keep_images &= ~np.isin(cols['img_id'], int_bad_images)
    keep_anns &= ~np.isin(cols['ann_image_id'], int_bad_images)
    int_bad_pairs = [(i, a) for i, a in bad_anns if _is_int64(i) and _is_int64(a)]
    if int_bad_pairs:
        candidates = np.flatnonzero(np.isin(cols['ann_id'],
                                            np.array([a for _, a in int_bad_pairs])))
        pairs = set(int_bad_pairs)
        for index in candidates.tolist():
            if (int(cols['ann_image_id'][index]), int(cols['ann_id'][index])) in pairs:
                keep_anns[index] = False
    # Irregular records: the expressions of apply_policy on the parsed values.
    for index, image in columns.irregular_images.items():
        keep_images[index] = _printable(image.get('id')) not in bad_images
    for index, ann in columns.irregular_anns.items():
        image_id, ann_id = _printable(ann.get('image_id')), _printable(ann.get('id'))
        keep_anns[index] = image_id not in bad_images and (image_id, ann_id) not in bad_anns
    report = ValidationReport(problems, actions,
                              dropped_images=int((~keep_images).sum()),
                              dropped_instances=int((~keep_anns).sum()),
                              listed_images=columns.num_images, listed_instances=columns.num_anns)
    return keep_images, keep_anns, report
