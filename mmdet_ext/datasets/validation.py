"""Validation of a COCO instances json and its files before the annotation store is built.

Why: one corrupt sample used to surface as a bare OpenCV/pycocotools error deep in a DataLoader
worker (or as what looked like a hang), and silently wrong annotations (NaN boxes, RLEs of the wrong
size) trained without complaint. Checking once, when the store is built, turns every problem into
a ``Problem`` record naming the image id, annotation id, file and reason, and a per-kind policy
decides what happens to it:

- ``'drop_instance'``: the annotation is left out of the store;
- ``'drop_image'``: the image and all its annotations are left out;
- ``'fail'``: building stops with a ``DataValidationError`` listing the problems;
- ``'report'``: recorded only, the data stays as it is.

Defaults (``DEFAULT_POLICY``): instance-level problems drop the instance, image-level ones
(unreadable, size mismatch, too large, malformed record) drop the image, duplicate ids fail. A
missing image file is recorded and kept, as mmdet's ``CocoDataset`` keeps it (it never opens images
at init): loading it later raises an error that is a ``FileNotFoundError`` (``on_bad_sample``
decides), and when more than ``MAX_MISSING_FRACTION`` of the images are missing the dataset stops
with an error naming the image prefix (a wrong ``data_prefix``), see ``LazyCocoDataset``.

Problems of the file as a whole (not json, not UTF-8, no ``"images"`` list, a record that is not an
object) are not records a policy can drop: ``AnnotationFileError`` names the file and where.
"""
import json
import math
import os.path as osp
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional, Union

import numpy as np
import torch
from mmengine import fileio

from ..io import (DEFAULT_MAX_PIXELS, FileBytes, ImageHeader, ImageHeaderError,
                  NotRegularFileError, file_state, read_image_header, read_regular_file)
from ..io.image_header import jpeg_exif_orientation
from ..ops import rle_area, rle_from_polygons, rle_from_string

ACTIONS = ('drop_instance', 'drop_image', 'fail', 'report')
IMAGE_KINDS = ('image_missing', 'image_unreadable', 'image_size_mismatch', 'duplicate_image_id',
               'image_record_invalid', 'image_record_converted')
DEFAULT_POLICY: dict[str, str] = {
    'image_missing': 'report',  # kept, as mmdet keeps it; loading it raises FileNotFoundError
    'image_unreadable': 'drop_image',  # truncated, not an image, a pipe/device/directory, too large
    'image_size_mismatch': 'drop_image',
    'image_record_invalid': 'drop_image',  # file_name not a UTF-8 path
    'image_record_converted': 'report',  # height/width integral floats (640.0), stored as ints
    'duplicate_image_id': 'fail',
    'duplicate_ann_id': 'fail',
    'annotation_record_invalid': 'drop_instance',  # category_id not integral, iscrowd/area bad
    'annotation_record_converted': 'report',  # category_id an integral float, stored as an int
    'unknown_image_id': 'drop_instance',
    'unknown_category_id': 'drop_instance',
    'bbox_invalid': 'drop_instance',  # NaN/inf, non-positive size, malformed
    'bbox_outside_image': 'drop_instance',
    'segmentation_invalid': 'drop_instance',  # neither polygons nor an RLE
    'polygon_invalid': 'drop_instance',  # empty, < 3 points, odd count, NaN, beyond +-2^24
    'mask_empty': 'drop_instance',  # polygon/RLE covering no pixel (e.g. outside the image)
    'rle_invalid': 'drop_instance',  # counts do not sum to h*w, malformed, too large
    'rle_size_mismatch': 'drop_instance',
    'mask_file_missing': 'drop_instance',
    'mask_file_invalid': 'drop_instance',  # unreadable or of the wrong size
}
BBOX_TOLERANCE = 1.0  # px a box may extend past the image border (rounding in real datasets)
# The polygon rasteriser's range (kMaxCoordinate in csrc/masks/polygon_raster.h): beyond it its
# integer arithmetic would overflow, so such coordinates are refused here, not in the mask head.
MAX_POLYGON_COORDINATE = float(1 << 24)
# More than this fraction of the images missing is a wrong image prefix, not a few lost files.
MAX_MISSING_FRACTION = 0.5
_INT64 = (-(1 << 63), (1 << 63) - 1)


class DataValidationError(ValueError):
    """A problem whose policy is ``'fail'`` was found."""


class DuplicateIdError(DataValidationError, AssertionError):
    """Ids used twice; also an ``AssertionError``, which mmdet's ``CocoDataset`` raises for them."""


class MissingImagesError(DataValidationError, FileNotFoundError):
    """Most images are missing: the image prefix (``data_prefix``/``data_root``) is wrong.

    Also a ``FileNotFoundError``, which mmcv's ``LoadImageFromFile`` raises for a missing image.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)  # OSError's (errno, strerror) form would hide the message

    def __str__(self) -> str:
        return self.args[0]


class AnnotationFileError(DataValidationError):
    """The annotation file as a whole is unusable (not json, not UTF-8, not a COCO layout)."""


def missing_images_message(missing: int, total: int, img_prefix: str, example: str) -> str:
    """The error for a dataset with most of its images missing (names the prefix and a path)."""
    return (f'{missing} of the {total} images are missing under the image prefix '
            f'{img_prefix!r} (e.g. {example}): check data_root / data_prefix=dict(img=...); more '
            f'than {MAX_MISSING_FRACTION:.0%} missing is taken as a wrong prefix, not lost files')


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the data. ``image_id``/``ann_id`` are None where not applicable."""

    kind: str
    image_id: Optional[int]
    ann_id: Optional[int]
    file: Optional[str]
    reason: str
    # False where the store cannot hold the data as it is (a string id, a bbox that is not
    # numbers): ``'report'`` then drops it like ``'drop_instance'``/``'drop_image'`` would.
    storable: bool = True

    def __str__(self) -> str:
        return (f'{self.kind}: image {self.image_id} annotation {self.ann_id} '
                f'file {self.file}: {self.reason}')


@dataclass
class ValidationReport:
    """Every problem found, the action taken on each, and what was dropped."""

    problems: list[Problem]
    actions: list[str]
    dropped_images: int = 0
    dropped_instances: int = 0
    listed_images: int = 0  # what the json lists, before anything is dropped
    listed_instances: int = 0
    file_states: dict[str, tuple[int, int]] = field(default_factory=dict)
    images_checked: int = 0
    missing_images: int = 0
    missing_example: str = ''

    def summary(self) -> str:
        """One line: counts per kind and what was dropped."""
        kinds = Counter(p.kind for p in self.problems)
        detail = ', '.join(f'{kind}={n}' for kind, n in sorted(kinds.items())) or 'none'
        return (f'{len(self.problems)} data problems ({detail}); dropped '
                f'{self.dropped_images} images and {self.dropped_instances} instances')

    def write_jsonl(self, path: str) -> None:
        """One json object per problem (``kind, image_id, ann_id, file, reason, action``)."""
        with open(path, 'w') as f:
            f.writelines(json.dumps({**asdict(problem), 'action': action}) + '\n'
                         for problem, action in zip(self.problems, self.actions))


DROP_ACTIONS = ('drop_image', 'drop_instance')


def read_problems(path: str) -> list[dict]:
    """The records ``ValidationReport.write_jsonl`` wrote to ``path`` (one dict per problem)."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def nothing_left_message(listed_images: int, listed_instances: int, dropped_images: int,
                         dropped_instances: int, problems: Optional[list[dict]],
                         problems_path: str, top: int = 3) -> str:
    """Why validation left no image: what the json lists, what was dropped, the ``top`` most
    common kinds of drop (a count and one example each), and where the full report is.

    ``problems``: ``read_problems``' records, or None when the report cannot be read.
    """
    lines = [f'the json lists {listed_images} images and {listed_instances} instances; '
             f'validation dropped {dropped_images} of the images and {dropped_instances} of the '
             'instances, so there is nothing to train on']
    if problems is None:
        lines.append(f'the problem report {problems_path} cannot be read')
        return '\n  '.join(lines)
    dropped = [p for p in problems if p.get('action') in DROP_ACTIONS]
    kinds = Counter(p['kind'] for p in dropped)
    example = {}
    for problem in dropped:
        example.setdefault(problem['kind'], problem)
    lines.append(f'most common reasons ({len(dropped)} records dropped data):')
    for kind, count in kinds.most_common(top):
        p = example[kind]
        lines.append(f'  {kind} x{count} ({p["action"]}), e.g. image {p["image_id"]!r} '
                     f'annotation {p["ann_id"]!r} file {p["file"]!r}: {p["reason"]}')
    if len(kinds) > top:
        lines.append(f'  ... and {len(kinds) - top} more kinds')
    lines.append(f'every problem and the action taken: {problems_path}; the dataset\'s validate '
                 '(a dict of overrides) decides what each kind does (docs/bad_data.md)')
    return '\n  '.join(lines)


def resolve_policy(policy: Optional[dict[str, str]]) -> dict[str, str]:
    """``DEFAULT_POLICY`` updated with ``policy``; unknown kinds or actions are errors."""
    merged = dict(DEFAULT_POLICY)
    for kind, action in (policy or {}).items():
        if kind not in DEFAULT_POLICY:
            raise ValueError(f'validate: unknown problem kind {kind!r}; '
                             f'known: {sorted(DEFAULT_POLICY)}')
        if action not in ACTIONS:
            raise ValueError(f'validate[{kind!r}] = {action!r}; expected one of {ACTIONS}')
        if kind in IMAGE_KINDS and action == 'drop_instance':
            raise ValueError(f'validate[{kind!r}]: an image-level problem cannot '
                             "'drop_instance'")
        merged[kind] = action
    return merged


HEAD_BYTES = 1 << 14  # holds the JPEG frame header unless a large EXIF/ICC block precedes it
TAIL_BYTES = 1024  # holds the end marker (read_image_header looks at the last 1024 bytes)


def _read_header(path: str, backend_args: Optional[dict],
                 max_pixels: int) -> Union[ImageHeader, str, None]:
    """The file's header, the reason it is unreadable, or None if it does not exist.

    Why head + tail: validating a whole dataset must not read every image in full; a local file
    is read in full only when its header is not within its first ``HEAD_BYTES`` and last
    ``TAIL_BYTES`` (a JPEG frame header after a large EXIF block, a TIFF directory in the
    middle). A local path that is not a regular file (pipe, socket, device, directory) is refused
    before it is read.
    """
    try:
        if '://' in path:
            data = FileBytes(fileio.get(path, backend_args=backend_args))
        else:
            head, size = read_regular_file(path, HEAD_BYTES, TAIL_BYTES)
            data = FileBytes(head[:HEAD_BYTES], head[HEAD_BYTES:], size) if len(head) < size \
                else FileBytes(head)
            if len(head) < size:
                try:
                    read_image_header(data, max_pixels)
                except ImageHeaderError:
                    data = FileBytes(read_regular_file(path)[0])  # decide on the whole file
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFileError as err:
        return err.strerror
    except IsADirectoryError:
        return 'is a directory, not a file'
    except OSError as err:
        return f'cannot be read: {err.strerror or err}'
    try:
        header = read_image_header(data, max_pixels)
    except ImageHeaderError as err:
        return str(err)
    if header.format == 'jpeg' and jpeg_exif_orientation(data.head) >= 5:
        # Decoders apply the EXIF rotation: the decoded image is width x height.
        return header._replace(height=header.width, width=header.height, format='jpeg (EXIF '
                               'orientation rotates it by 90 degrees)')
    return header


def _is_int64(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and \
        _INT64[0] <= value <= _INT64[1]


def as_int64(value) -> Optional[int]:
    """``value`` as the int64 it equals where the store may keep it so: an int64 int, or a float
    that is integral (640.0, as some exporters write sizes; Python and pycocotools compare it
    equal to 640). None for anything else: bools (a json ``true`` is no size or id), fractions,
    strings, out-of-range numbers."""
    if _is_int64(value):
        return value
    if isinstance(value, float) and value.is_integer() and _INT64[0] <= value < 2.0 ** 63:
        return int(value)
    return None


def id_key(value) -> Optional[int]:
    """The int64 a json id equals under Python equality (pycocotools' dicts compare ids so:
    ``1 == 1.0 == True``), or None where it equals none (a string, null, 1.5, 2^70)."""
    return int(value) if isinstance(value, bool) else as_int64(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond float64
        return False


def _path_problem(name) -> Optional[str]:
    """Why ``name`` cannot be a relative file path in the store, or None."""
    if not isinstance(name, str) or not name:
        return f'{name!r} is not a non-empty string'
    try:
        name.encode('utf-8')
    except UnicodeEncodeError as err:
        return (f'{name!r} is not valid UTF-8 (character {err.start} is a lone surrogate, e.g. a '
                'file name escaped from non-UTF-8 bytes)')
    if '\0' in name:
        return f'{name!r} contains a NUL character'
    return None


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


class _Checker:
    def __init__(self, img_prefix: str, mask_root: str, backend_args: Optional[dict],
                 max_pixels: int, check_files: bool) -> None:
        self.img_prefix = img_prefix
        self.mask_root = mask_root
        self.backend_args = backend_args
        self.max_pixels = max_pixels
        self.check_files = check_files
        self.problems: list[Problem] = []
        # (size, mtime_ns) of every local file a decision was taken on; see annotation_store.py
        self.file_states: dict[str, tuple[int, int]] = {}
        self.images_checked = 0

    def add(self, kind: str, image_id, ann_id, file, reason: str, storable: bool = True) -> None:
        self.problems.append(Problem(kind, _printable(image_id), _printable(ann_id),
                                     _printable(file), reason, storable))

    def _header(self, path: str, missing: str, invalid: str, image_id,
                ann_id) -> Optional[ImageHeader]:
        """The file's header, or None after recording it as ``missing`` or ``invalid``."""
        if '://' not in path:
            self.file_states[path] = file_state(path)
        header = _read_header(path, self.backend_args, self.max_pixels)
        if header is None:
            self.add(missing, image_id, ann_id, path, 'file not found')
        elif isinstance(header, str):
            self.add(invalid, image_id, ann_id, path, header)
        else:
            return header
        return None

    def image(self, image: dict) -> None:
        # Any id is kept (check_coco_layout has made sure it is hashable, all pycocotools needs):
        # the store keys images by int64 and keeps the json's ids beside (coco_store_layout).
        image_id, name = image.get('id'), image.get('file_name')
        json_height, json_width = image.get('height'), image.get('width')
        if 'id' not in image:  # an explicit null is an id; no key at all fails pycocotools
            self.add('image_record_invalid', None, None, _printable(name),
                     "no 'id' (pycocotools' index needs one: KeyError in mmdet)", storable=False)
            return
        reason = _path_problem(name)
        if reason is not None:
            self.add('image_record_invalid', image_id, None, None, f'file_name {reason}',
                     storable=False)
            return
        height, width = as_int64(json_height), as_int64(json_width)
        if height is None or width is None or height <= 0 or width <= 0:
            self.add('image_unreadable', image_id, None, name,
                     f'json size height={json_height!r} width={json_width!r} is not two '
                     'positive integers', storable=False)
            return
        if not (_is_int64(json_height) and _is_int64(json_width)):
            self.add('image_record_converted', image_id, None, name,
                     f'json size height={json_height!r} width={json_width!r} is stored as the '
                     f'integers {height}x{width}')
        if height * width > self.max_pixels:
            self.add('image_unreadable', image_id, None, name,
                     f'json declares {height}x{width} pixels, more than max_pixels='
                     f'{self.max_pixels}')
            return
        if not self.check_files:
            return
        path = osp.join(self.img_prefix, name)
        self.images_checked += 1
        header = self._header(path, 'image_missing', 'image_unreadable', image_id, None)
        if header is None:
            return
        if (header.height, header.width) != (height, width):
            self.add('image_size_mismatch', image_id, None, path,
                     f'the file is {header.height}x{header.width}, the json says '
                     f'{height}x{width}'
                     + (f'; {header.format}' if 'EXIF' in header.format else ''))

    def annotation(self, ann: dict, image: dict, category_ids: set) -> None:
        image_id, ann_id = image['id'], ann.get('id')
        height, width = as_int64(image.get('height')), as_int64(image.get('width'))
        if height is None or width is None:
            return  # the image itself is recorded and dropped; nothing to measure against
        reason = _annotation_record_problem(ann)
        if reason is not None:
            self.add('annotation_record_invalid', image_id, ann_id, None, reason, storable=False)
            return
        if not _is_int64(ann['category_id']):  # 1.0, true: pycocotools matches them to 1
            self.add('annotation_record_converted', image_id, ann_id, None,
                     f"category_id {ann['category_id']!r} is stored as the integer "
                     f"{id_key(ann['category_id'])}")
        if not _hashable(ann.get('category_id')) or ann.get('category_id') not in category_ids:
            self.add('unknown_category_id', image_id, ann_id, None,
                     f"category_id {ann.get('category_id')!r} is not in \"categories\"")
        self._bbox(ann.get('bbox'), image_id, ann_id, height, width)
        if 'mask_file' in ann:
            self._mask_file(ann['mask_file'], image_id, ann_id, height, width)
            return
        segmentation = ann.get('segmentation')
        if isinstance(segmentation, list):
            self._polygons(segmentation, image_id, ann_id, height, width)
        elif isinstance(segmentation, dict):
            self._rle(segmentation, image_id, ann_id, height, width)
        elif segmentation is not None:
            self.add('segmentation_invalid', image_id, ann_id, None,
                     f'segmentation is a {type(segmentation).__name__}, neither a list of '
                     'polygons nor an RLE object', storable=False)

    def _bbox(self, bbox, image_id, ann_id, height: int, width: int) -> None:
        if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
            self.add('bbox_invalid', image_id, ann_id, None, f'bbox {bbox!r} is not 4 numbers',
                     storable=False)
            return
        x, y, w, h = bbox
        if not all(_finite(v) for v in bbox):
            self.add('bbox_invalid', image_id, ann_id, None, f'bbox {bbox} is not finite',
                     storable=False)
        elif w <= 0 or h <= 0:
            self.add('bbox_invalid', image_id, ann_id, None,
                     f'bbox {bbox} has a non-positive width or height')
        elif x < -BBOX_TOLERANCE or y < -BBOX_TOLERANCE or x + w > width + BBOX_TOLERANCE \
                or y + h > height + BBOX_TOLERANCE:
            self.add('bbox_outside_image', image_id, ann_id, None,
                     f'bbox {bbox} (x, y, w, h) extends outside the {height}x{width} image')

    def _polygons(self, polygons: list, image_id, ann_id, height: int, width: int) -> None:
        if not polygons:
            self.add('polygon_invalid', image_id, ann_id, None,
                     'segmentation is an empty list (no polygon); mmdet would silently turn the '
                     'instance into an ignore region', storable=False)
            return
        for k, part in enumerate(polygons):
            if not isinstance(part, list) or not all(_is_number(v) for v in part):
                reason = f'polygon part {k} is not a list of numbers'
            elif len(part) % 2:
                reason = f'polygon part {k} has an odd number of coordinates ({len(part)})'
            elif len(part) < 6:
                reason = f'polygon part {k} has {len(part) // 2} points, fewer than 3'
            elif not all(_finite(v) for v in part):
                reason = f'polygon part {k} has a non-finite coordinate'
            elif max(abs(v) for v in part) > MAX_POLYGON_COORDINATE:
                reason = (f'polygon part {k} has a coordinate of {max(part, key=abs):g}, beyond '
                          f'+-{MAX_POLYGON_COORDINATE:g} px (the rasteriser\'s range)')
            else:
                continue
            self.add('polygon_invalid', image_id, ann_id, None, reason,
                     storable=not reason.endswith('not a list of numbers'))
            return
        reason = _empty_polygon_reason(polygons, height, width)
        if reason is not None:
            self.add('mask_empty', image_id, ann_id, None, reason)

    def _rle(self, rle: dict, image_id, ann_id, height: int, width: int) -> None:
        size, counts = rle.get('size'), rle.get('counts')
        if not (isinstance(size, list) and len(size) == 2
                and all(isinstance(v, int) and v >= 0 for v in size)):
            self.add('rle_invalid', image_id, ann_id, None, f'RLE size {size!r} is not [h, w]',
                     storable=False)
            return
        rle_h, rle_w = size
        if not _is_int64(rle_h * rle_w) or rle_h * rle_w > self.max_pixels:
            self.add('rle_invalid', image_id, ann_id, None,
                     f'RLE size {rle_h}x{rle_w} is more than max_pixels={self.max_pixels}')
            return
        if isinstance(counts, list):
            if not all(_is_int64(v) and v >= 0 for v in counts):
                self.add('rle_invalid', image_id, ann_id, None,
                         'RLE counts are not non-negative integers', storable=False)
                return
            if sum(counts) != rle_h * rle_w:
                self.add('rle_invalid', image_id, ann_id, None,
                         f'RLE counts sum to {sum(counts)}, not h*w = {rle_h}*{rle_w} = '
                         f'{rle_h * rle_w}')
                return
            area = sum(counts[1::2])
        elif isinstance(counts, (str, bytes)):
            try:  # the native parser checks the characters, the values and the sum
                area = rle_area(rle_from_string(counts, rle_h, rle_w))
            except (RuntimeError, UnicodeEncodeError) as err:
                self.add('rle_invalid', image_id, ann_id, None, str(err).split('\n')[0])
                return
        else:
            self.add('rle_invalid', image_id, ann_id, None,
                     f'RLE counts is a {type(counts).__name__}', storable=False)
            return
        if (rle_h, rle_w) != (height, width):
            self.add('rle_size_mismatch', image_id, ann_id, None,
                     f'RLE size {rle_h}x{rle_w} differs from the image ({height}x{width})')
        elif area == 0:
            self.add('mask_empty', image_id, ann_id, None,
                     'the RLE covers no pixel (an empty mask under a box)')

    def _mask_file(self, mask_file: str, image_id, ann_id, height: int, width: int) -> None:
        reason = _path_problem(mask_file)
        if reason is not None:
            self.add('mask_file_invalid', image_id, ann_id, None, f'mask_file {reason}',
                     storable=False)
            return
        if not self.check_files:
            return
        path = osp.join(self.mask_root, mask_file)
        header = self._header(path, 'mask_file_missing', 'mask_file_invalid', image_id, ann_id)
        if header is None:
            return
        if (header.height, header.width) != (height, width):
            self.add('mask_file_invalid', image_id, ann_id, path,
                     f'the mask is {header.height}x{header.width}, the image {height}x{width}')


def _printable(value):
    """``value`` as a Problem field: json-able and printable (no lone surrogates)."""
    if value is None or _is_int64(value):
        return value
    text = value if isinstance(value, str) else repr(value)
    return text.encode('utf-8', 'backslashreplace').decode('utf-8')


def _annotation_record_problem(ann: dict) -> Optional[str]:
    """Why the annotation's own fields cannot be stored, or None."""
    # Any id is kept (hashable, check_coco_layout): mmdet only checks that ids are unique.
    for key in ('id', 'area'):  # an explicit null is an id; no key at all fails mmdet
        if key not in ann:
            return f"no '{key}' (KeyError in mmdet's CocoDataset)"
    if id_key(ann.get('category_id')) is None:
        return f"category_id {ann.get('category_id')!r} is not a 64-bit integer"
    for key in ('iscrowd', 'ignore'):  # mmdet reads them as truth values; null is absent
        if ann.get(key) not in (0, 1, None):  # True/False, 1.0/0.0 compare equal to 1/0
            return f'{key} {ann.get(key)!r} is not 0 or 1'
    area = ann.get('area', 0.0)
    if not _is_number(area) or not _finite(area):
        return f'area {area!r} is not a finite number'
    return None


def _shoelace_area(part: np.ndarray) -> float:
    """Area in px^2 of one polygon part (x0, y0, x1, y1, ...)."""
    xs, ys = part[0::2], part[1::2]
    return abs(float(np.dot(xs, np.roll(ys, 1)) - np.dot(ys, np.roll(xs, 1)))) / 2


def _empty_polygon_reason(polygons: list, height: int, width: int) -> Optional[str]:
    """Why well-formed ``polygons`` rasterise to no pixel of the image, or None.

    Why: such an instance trains as an empty mask under its (non-empty) box. The exact
    rasteriser runs only for polygons whose shoelace area is below 2 px^2 (rare); the rest is
    an extent test.
    """
    coords = np.concatenate([np.asarray(part, dtype=np.float64) for part in polygons])
    xs, ys = coords[0::2], coords[1::2]
    if xs.max() <= 0 or ys.max() <= 0 or xs.min() >= width or ys.min() >= height:
        return (f'the polygon (x {xs.min():g}..{xs.max():g}, y {ys.min():g}..{ys.max():g}) lies '
                f'entirely outside the {height}x{width} image: an empty mask under a box')
    area = sum(_shoelace_area(np.asarray(part, dtype=np.float64)) for part in polygons)
    if area < 2.0:
        lengths = torch.tensor([len(part) for part in polygons], dtype=torch.int64)
        rle = rle_from_polygons(torch.from_numpy(coords), lengths, height, width)
        if rle_area(rle) == 0:
            return f'the polygon has an area of {area:g} px^2 and covers no pixel: an empty mask'
    return None


def check_coco_layout(coco, ann_file: str) -> None:
    """Raise ``AnnotationFileError`` naming ``ann_file`` unless ``coco`` has COCO's layout.

    What is checked here is what no per-record policy can repair: the top-level object, the three
    lists, records that are not objects, categories without an integer id and a string name, and
    ids that cannot even be compared.
    """
    if not isinstance(coco, dict):
        raise AnnotationFileError(f'{ann_file}: the json is a {type(coco).__name__}, not a '
                                  'COCO object with "images", "annotations", "categories"')
    if 'images' not in coco:
        raise AnnotationFileError(f'{ann_file}: no "images" list (keys: '
                                  f'{sorted(map(str, coco))[:10]}): not a COCO instances json')
    for key in ('images', 'annotations', 'categories'):
        records = coco.get(key, [])
        if not isinstance(records, list):
            raise AnnotationFileError(f'{ann_file}: "{key}" is a {type(records).__name__}, '
                                      'not a list')
        for index, record in enumerate(records):
            if not isinstance(record, dict):
                raise AnnotationFileError(f'{ann_file}: {key}[{index}] is a '
                                          f'{type(record).__name__}, not an object')
    for index, category in enumerate(coco.get('categories', [])):
        if id_key(category.get('id')) is None or not isinstance(category.get('name'), str) \
                or _path_problem(category.get('name')) is not None:
            raise AnnotationFileError(f'{ann_file}: categories[{index}] = '
                                      f'{_printable(category)} needs an integer "id" and a '
                                      'UTF-8 string "name"')
    for key, id_field in (('images', 'id'), ('annotations', 'image_id')):
        for index, record in enumerate(coco.get(key, [])):
            if not _hashable(record.get(id_field)):
                raise AnnotationFileError(f'{ann_file}: {key}[{index}] has "{id_field}" = '
                                          f'{_printable(record.get(id_field))}, not an id')
    for index, record in enumerate(coco.get('annotations', [])):
        if not _hashable(record.get('id')):
            raise AnnotationFileError(f'{ann_file}: annotations[{index}] has "id" = '
                                      f'{_printable(record.get("id"))}, not an id')


def parse_coco_json(data: bytes, ann_file: str) -> dict:
    """The parsed json of ``ann_file``'s bytes; every failure names the file and the offset.

    Raises:
        AnnotationFileError: not UTF-8, not json (truncated, ...), or not COCO's layout.
    """
    try:
        text = data.decode('utf-8-sig')  # a BOM before the json is harmless
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b'\n') + 1
        raise AnnotationFileError(
            f'{ann_file}: not UTF-8 at byte {err.start} (line {line}): '
            f'{data[max(0, err.start - 30):err.start + 10]!r}; json must be UTF-8 (a file name '
            'written in latin-1?)') from err
    try:
        coco = json.loads(text)
    except json.JSONDecodeError as err:
        raise AnnotationFileError(
            f'{ann_file}: not valid json at line {err.lineno} column {err.colno} (character '
            f'{err.pos} of {len(text)}): {err.msg}'
            + ('; the file looks truncated' if err.pos >= len(text.rstrip()) else '')) from err
    except RecursionError as err:
        raise AnnotationFileError(f'{ann_file}: json nested too deeply to parse') from err
    check_coco_layout(coco, ann_file)
    return coco


def _check(coco: dict, img_prefix: str, mask_root: str, backend_args: Optional[dict],
           max_pixels: int, check_files: bool) -> _Checker:
    checker = _Checker(img_prefix, mask_root, backend_args, max_pixels, check_files)
    image_of_id: dict = {}
    for image in coco.get('images', []):
        if image.get('id') in image_of_id:
            checker.add('duplicate_image_id', image.get('id'), None, image.get('file_name'),
                        'another image has the same id')
            continue
        image_of_id[image.get('id')] = image
        checker.image(image)
    category_ids = {c.get('id') for c in coco.get('categories', [])}
    seen_ann_ids: set = set()
    for ann in coco.get('annotations', []):
        if ann.get('id') in seen_ann_ids:
            checker.add('duplicate_ann_id', ann.get('image_id'), ann.get('id'), None,
                        'another annotation has the same id')
        seen_ann_ids.add(ann.get('id'))
        image = image_of_id.get(ann.get('image_id'))
        if image is None:
            checker.add('unknown_image_id', ann.get('image_id'), ann.get('id'), None,
                        f"image_id {ann.get('image_id')!r} is not in \"images\"", storable=False)
            continue
        checker.annotation(ann, image, category_ids)
    return checker


def find_problems(coco: dict, img_prefix: str = '', mask_root: str = '',
                  backend_args: Optional[dict] = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                  check_files: bool = True) -> list[Problem]:
    """Every problem in a parsed COCO instances json (and its files), in json order.

    Args:
        coco: the parsed json (COCO's layout, see ``check_coco_layout``); not modified.
        img_prefix: directory that ``images[].file_name`` is relative to.
        mask_root: directory that ``annotations[].mask_file`` is relative to (``data_root``).
        backend_args: mmengine file backend arguments for reading the files.
        max_pixels: images, masks and RLEs declaring more pixels are invalid.
        check_files: read image and mask files (False: json-only checks).
    """
    return _check(coco, img_prefix, mask_root, backend_args, max_pixels, check_files).problems


def _effective_action(problem: Problem, action: str) -> str:
    if action == 'report' and not problem.storable:
        return 'drop_image' if problem.kind in IMAGE_KINDS else 'drop_instance'
    return action


def decide_actions(problems: list[Problem], policy: Optional[dict[str, str]]
                   ) -> tuple[list[str], set, set]:
    """Each problem's action under ``policy``, the image ids to drop and the (image id, ann id)
    pairs to drop; shared by the json path (``apply_policy``) and the columns path.

    Raises:
        DataValidationError: a problem whose action is ``'fail'``; lists all such problems
            (``DuplicateIdError``, also an ``AssertionError``, when ids are duplicated).
    """
    policy = resolve_policy(policy)
    actions = [_effective_action(p, policy[p.kind]) for p in problems]
    failures = [p for p, a in zip(problems, actions) if a == 'fail']
    if failures:
        listing = '\n  '.join(str(p) for p in failures[:20])
        more = f'\n  ... and {len(failures) - 20} more' if len(failures) > 20 else ''
        error = DuplicateIdError if any(p.kind.startswith('duplicate_') for p in failures) \
            else DataValidationError
        raise error(f'{len(failures)} data problems whose policy is "fail":\n  '
                    f'{listing}{more}')
    bad_images = {p.image_id for p, a in zip(problems, actions) if a == 'drop_image'}
    bad_anns = {(p.image_id, p.ann_id) for p, a in zip(problems, actions)
                if a == 'drop_instance'}
    return actions, bad_images, bad_anns


def apply_policy(coco: dict, problems: list[Problem],
                 policy: Optional[dict[str, str]] = None) -> tuple[dict, ValidationReport]:
    """The json without what ``policy`` drops (a shallow copy), and the report.

    ``'report'`` on data the store cannot hold (``Problem.storable`` False) drops it instead; the
    report says so.

    Raises:
        DataValidationError: a problem whose action is ``'fail'``; lists all such problems
            (``DuplicateIdError``, also an ``AssertionError``, when ids are duplicated).
    """
    actions, bad_images, bad_anns = decide_actions(problems, policy)
    images, annotations = coco.get('images', []), coco.get('annotations', [])
    kept_anns = [ann for ann in annotations
                 if _printable(ann.get('image_id')) not in bad_images
                 and (_printable(ann.get('image_id')), _printable(ann.get('id'))) not in bad_anns]
    kept_images = [image for image in images if _printable(image.get('id')) not in bad_images]
    report = ValidationReport(problems, actions,
                              dropped_images=len(images) - len(kept_images),
                              dropped_instances=len(annotations) - len(kept_anns),
                              listed_images=len(images), listed_instances=len(annotations))
    return {**coco, 'images': kept_images, 'annotations': kept_anns}, report


def validate_coco(coco: dict, img_prefix: str = '', mask_root: str = '',
                  policy: Optional[dict[str, str]] = None, backend_args: Optional[dict] = None,
                  max_pixels: int = DEFAULT_MAX_PIXELS,
                  check_files: bool = True) -> tuple[dict, ValidationReport]:
    """``find_problems`` then ``apply_policy``: the cleaned json and the report.

    The report also holds ``file_states`` (what each local file looked like when it was judged)
    and the missing-image counts.

    Raises:
        MissingImagesError: ``image_missing`` is ``'drop_image'`` and more than
            ``MAX_MISSING_FRACTION`` of the images are missing (a wrong prefix would otherwise
            leave an empty or gutted dataset).
    """
    checker = _check(coco, img_prefix, mask_root, backend_args, max_pixels, check_files)
    missing = [p for p in checker.problems if p.kind == 'image_missing']
    if missing and resolve_policy(policy)['image_missing'] == 'drop_image' \
            and len(missing) > MAX_MISSING_FRACTION * checker.images_checked:
        raise MissingImagesError(missing_images_message(
            len(missing), checker.images_checked, img_prefix, missing[0].file))
    cleaned, report = apply_policy(coco, checker.problems, policy)
    report.file_states = checker.file_states
    report.images_checked = checker.images_checked
    report.missing_images = len(missing)
    report.missing_example = missing[0].file if missing else ''
    return cleaned, report
