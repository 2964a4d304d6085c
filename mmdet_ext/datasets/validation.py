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
(missing, unreadable, size mismatch, too large) drop the image, duplicate ids fail.
"""
import json
import math
import os
import os.path as osp
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Optional, Union

from mmengine import fileio

from ..io import DEFAULT_MAX_PIXELS, ImageHeader, ImageHeaderError, read_image_header
from ..ops import rle_from_string

ACTIONS = ('drop_instance', 'drop_image', 'fail', 'report')
IMAGE_KINDS = ('image_missing', 'image_unreadable', 'image_size_mismatch', 'duplicate_image_id')
DEFAULT_POLICY: dict[str, str] = {
    'image_missing': 'drop_image',
    'image_unreadable': 'drop_image',  # includes truncated files and absurd declared sizes
    'image_size_mismatch': 'drop_image',
    'duplicate_image_id': 'fail',
    'duplicate_ann_id': 'fail',
    'unknown_image_id': 'drop_instance',
    'unknown_category_id': 'drop_instance',
    'bbox_invalid': 'drop_instance',  # NaN/inf, non-positive size, malformed
    'bbox_outside_image': 'drop_instance',
    'polygon_invalid': 'drop_instance',  # < 3 points, odd coordinate count, NaN
    'rle_invalid': 'drop_instance',  # counts do not sum to h*w, malformed, too large
    'rle_size_mismatch': 'drop_instance',
    'mask_file_missing': 'drop_instance',
    'mask_file_invalid': 'drop_instance',  # unreadable or of the wrong size
}
BBOX_TOLERANCE = 1.0  # px a box may extend past the image border (rounding in real datasets)


class DataValidationError(ValueError):
    """A problem whose policy is ``'fail'`` was found."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the data. ``image_id``/``ann_id`` are None where not applicable."""

    kind: str
    image_id: Optional[int]
    ann_id: Optional[int]
    file: Optional[str]
    reason: str

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


def resolve_policy(policy: Optional[dict[str, str]]) -> dict[str, str]:
    """``DEFAULT_POLICY`` updated with ``policy``; unknown kinds or actions are errors."""
    merged = dict(DEFAULT_POLICY)
    for kind, action in (policy or {}).items():
        if kind not in DEFAULT_POLICY:
            raise ValueError(f'bad_data_policy: unknown problem kind {kind!r}; '
                             f'known: {sorted(DEFAULT_POLICY)}')
        if action not in ACTIONS:
            raise ValueError(f'bad_data_policy[{kind!r}] = {action!r}; expected one of {ACTIONS}')
        if kind in IMAGE_KINDS and action == 'drop_instance':
            raise ValueError(f'bad_data_policy[{kind!r}]: an image-level problem cannot '
                             "'drop_instance'")
        merged[kind] = action
    return merged


HEAD_BYTES = 1 << 14  # holds the JPEG frame header unless a large EXIF/ICC block precedes it
TAIL_BYTES = 1024  # holds the end marker (read_image_header looks at the last 1024 bytes)


def _read_header(path: str, backend_args: Optional[dict],
                 max_pixels: int) -> Union[ImageHeader, str, None]:
    """The file's header, the reason it is unreadable, or None if it does not exist.

    Why head + tail: validating a whole dataset must not read every image in full; a local file
    is read in full only when its frame header is not in the first ``HEAD_BYTES``.
    """
    if '://' not in path and osp.isfile(path):
        with open(path, 'rb') as f:
            size = os.fstat(f.fileno()).st_size
            if size > HEAD_BYTES + TAIL_BYTES:
                head = f.read(HEAD_BYTES)
                f.seek(size - TAIL_BYTES)
                try:
                    return read_image_header(head + f.read(TAIL_BYTES), max_pixels)
                except ImageHeaderError:
                    f.seek(0)  # decide on the whole file
            else:
                f.seek(0)
            data = f.read()
    else:
        try:
            data = fileio.get(path, backend_args=backend_args)
        except (FileNotFoundError, IsADirectoryError):
            return None
    try:
        return read_image_header(data, max_pixels)
    except ImageHeaderError as err:
        return str(err)


class _Checker:
    def __init__(self, img_prefix: str, mask_root: str, backend_args: Optional[dict],
                 max_pixels: int, check_files: bool) -> None:
        self.img_prefix = img_prefix
        self.mask_root = mask_root
        self.backend_args = backend_args
        self.max_pixels = max_pixels
        self.check_files = check_files
        self.problems: list[Problem] = []

    def add(self, kind: str, image_id, ann_id, file, reason: str) -> None:
        self.problems.append(Problem(kind, image_id, ann_id, file, reason))

    def _header(self, path: str, missing: str, invalid: str, image_id,
                ann_id) -> Optional[ImageHeader]:
        """The file's header, or None after recording it as ``missing`` or ``invalid``."""
        header = _read_header(path, self.backend_args, self.max_pixels)
        if header is None:
            self.add(missing, image_id, ann_id, path, 'file not found')
        elif isinstance(header, str):
            self.add(invalid, image_id, ann_id, path, header)
        else:
            return header
        return None

    def image(self, image: dict) -> None:
        image_id, name = image.get('id'), image.get('file_name')
        height, width = image.get('height'), image.get('width')
        if not all(isinstance(v, int) and v > 0 for v in (height, width)):
            self.add('image_unreadable', image_id, None, name,
                     f'json size height={height} width={width} is not two positive integers')
            return
        if height * width > self.max_pixels:
            self.add('image_unreadable', image_id, None, name,
                     f'json declares {height}x{width} pixels, more than max_pixels='
                     f'{self.max_pixels}')
            return
        if not self.check_files:
            return
        path = osp.join(self.img_prefix, name)
        header = self._header(path, 'image_missing', 'image_unreadable', image_id, None)
        if header is None:
            return
        if (header.height, header.width) != (height, width):
            self.add('image_size_mismatch', image_id, None, path,
                     f'the file is {header.height}x{header.width}, the json says '
                     f'{height}x{width}')

    def annotation(self, ann: dict, image: dict, category_ids: set) -> None:
        image_id, ann_id = image['id'], ann.get('id')
        height, width = image.get('height', 0), image.get('width', 0)
        if ann.get('category_id') not in category_ids:
            self.add('unknown_category_id', image_id, ann_id, None,
                     f"category_id {ann.get('category_id')} is not in \"categories\"")
        self._bbox(ann.get('bbox'), image_id, ann_id, height, width)
        if 'mask_file' in ann:
            self._mask_file(ann['mask_file'], image_id, ann_id, height, width)
            return
        segmentation = ann.get('segmentation')
        if isinstance(segmentation, list):
            self._polygons(segmentation, image_id, ann_id)
        elif isinstance(segmentation, dict):
            self._rle(segmentation, image_id, ann_id, height, width)

    def _bbox(self, bbox, image_id, ann_id, height: int, width: int) -> None:
        if not (isinstance(bbox, list) and len(bbox) == 4
                and all(isinstance(v, (int, float)) for v in bbox)):
            self.add('bbox_invalid', image_id, ann_id, None, f'bbox {bbox!r} is not 4 numbers')
            return
        x, y, w, h = bbox
        if not all(math.isfinite(v) for v in bbox):
            self.add('bbox_invalid', image_id, ann_id, None, f'bbox {bbox} is not finite')
        elif w <= 0 or h <= 0:
            self.add('bbox_invalid', image_id, ann_id, None,
                     f'bbox {bbox} has a non-positive width or height')
        elif x < -BBOX_TOLERANCE or y < -BBOX_TOLERANCE or x + w > width + BBOX_TOLERANCE \
                or y + h > height + BBOX_TOLERANCE:
            self.add('bbox_outside_image', image_id, ann_id, None,
                     f'bbox {bbox} (x, y, w, h) extends outside the {height}x{width} image')

    def _polygons(self, polygons: list, image_id, ann_id) -> None:
        for k, part in enumerate(polygons):
            if not isinstance(part, list) or not all(isinstance(v, (int, float)) for v in part):
                reason = f'polygon part {k} is not a list of numbers'
            elif len(part) % 2:
                reason = f'polygon part {k} has an odd number of coordinates ({len(part)})'
            elif len(part) < 6:
                reason = f'polygon part {k} has {len(part) // 2} points, fewer than 3'
            elif not all(math.isfinite(v) for v in part):
                reason = f'polygon part {k} has a non-finite coordinate'
            else:
                continue
            self.add('polygon_invalid', image_id, ann_id, None, reason)
            return

    def _rle(self, rle: dict, image_id, ann_id, height: int, width: int) -> None:
        size, counts = rle.get('size'), rle.get('counts')
        if not (isinstance(size, list) and len(size) == 2
                and all(isinstance(v, int) and v >= 0 for v in size)):
            self.add('rle_invalid', image_id, ann_id, None, f'RLE size {size!r} is not [h, w]')
            return
        rle_h, rle_w = size
        if rle_h * rle_w > self.max_pixels:
            self.add('rle_invalid', image_id, ann_id, None,
                     f'RLE size {rle_h}x{rle_w} is more than max_pixels={self.max_pixels}')
            return
        if isinstance(counts, list):
            if not all(isinstance(v, int) and v >= 0 for v in counts):
                self.add('rle_invalid', image_id, ann_id, None,
                         'RLE counts are not non-negative integers')
                return
            if sum(counts) != rle_h * rle_w:
                self.add('rle_invalid', image_id, ann_id, None,
                         f'RLE counts sum to {sum(counts)}, not h*w = {rle_h}*{rle_w} = '
                         f'{rle_h * rle_w}')
                return
        elif isinstance(counts, (str, bytes)):
            try:  # the native parser checks the characters, the values and the sum
                rle_from_string(counts, rle_h, rle_w)
            except (RuntimeError, UnicodeEncodeError) as err:
                self.add('rle_invalid', image_id, ann_id, None, str(err).split('\n')[0])
                return
        else:
            self.add('rle_invalid', image_id, ann_id, None,
                     f'RLE counts is a {type(counts).__name__}')
            return
        if (rle_h, rle_w) != (height, width):
            self.add('rle_size_mismatch', image_id, ann_id, None,
                     f'RLE size {rle_h}x{rle_w} differs from the image ({height}x{width})')

    def _mask_file(self, mask_file: str, image_id, ann_id, height: int, width: int) -> None:
        if not self.check_files:
            return
        path = osp.join(self.mask_root, mask_file)
        header = self._header(path, 'mask_file_missing', 'mask_file_invalid', image_id, ann_id)
        if header is None:
            return
        if (header.height, header.width) != (height, width):
            self.add('mask_file_invalid', image_id, ann_id, path,
                     f'the mask is {header.height}x{header.width}, the image {height}x{width}')


def find_problems(coco: dict, img_prefix: str = '', mask_root: str = '',
                  backend_args: Optional[dict] = None, max_pixels: int = DEFAULT_MAX_PIXELS,
                  check_files: bool = True) -> list[Problem]:
    """Every problem in a parsed COCO instances json (and its files), in json order.

    Args:
        coco: the parsed json; not modified.
        img_prefix: directory that ``images[].file_name`` is relative to.
        mask_root: directory that ``annotations[].mask_file`` is relative to (``data_root``).
        backend_args: mmengine file backend arguments for reading the files.
        max_pixels: images, masks and RLEs declaring more pixels are invalid.
        check_files: read image and mask files (False: json-only checks).
    """
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
                        f"image_id {ann.get('image_id')} is not in \"images\"")
            continue
        checker.annotation(ann, image, category_ids)
    return checker.problems


def apply_policy(coco: dict, problems: list[Problem],
                 policy: Optional[dict[str, str]] = None) -> tuple[dict, ValidationReport]:
    """The json without what ``policy`` drops (a shallow copy), and the report.

    Raises:
        DataValidationError: a problem whose action is ``'fail'``; lists all such problems.
    """
    policy = resolve_policy(policy)
    actions = [policy[p.kind] for p in problems]
    failures = [p for p, a in zip(problems, actions) if a == 'fail']
    if failures:
        listing = '\n  '.join(str(p) for p in failures[:20])
        more = f'\n  ... and {len(failures) - 20} more' if len(failures) > 20 else ''
        raise DataValidationError(f'{len(failures)} data problems whose policy is "fail":\n  '
                                  f'{listing}{more}')
    bad_images = {p.image_id for p, a in zip(problems, actions) if a == 'drop_image'}
    bad_anns = {(p.image_id, p.ann_id) for p, a in zip(problems, actions)
                if a == 'drop_instance'}
    images, annotations = coco.get('images', []), coco.get('annotations', [])
    kept_anns = [ann for ann in annotations
                 if ann.get('image_id') not in bad_images
                 and (ann.get('image_id'), ann.get('id')) not in bad_anns]
    kept_images = [image for image in images if image.get('id') not in bad_images]
    report = ValidationReport(problems, actions,
                              dropped_images=len(images) - len(kept_images),
                              dropped_instances=len(annotations) - len(kept_anns))
    return {**coco, 'images': kept_images, 'annotations': kept_anns}, report


def validate_coco(coco: dict, img_prefix: str = '', mask_root: str = '',
                  policy: Optional[dict[str, str]] = None, backend_args: Optional[dict] = None,
                  max_pixels: int = DEFAULT_MAX_PIXELS,
                  check_files: bool = True) -> tuple[dict, ValidationReport]:
    """``find_problems`` then ``apply_policy``: the cleaned json and the report."""
    problems = find_problems(coco, img_prefix, mask_root, backend_args, max_pixels, check_files)
    return apply_policy(coco, problems, policy)
