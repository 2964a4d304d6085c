"""Differential acceptance: variations of one small, valid COCO json, each loaded by stock mmdet's
``CocoDataset`` (pycocotools' ``COCO`` underneath) and by ``LazyCocoDataset``, real files on disk.

The rule (issue 49, docs/bad_data.md "What mmdet accepts"): what mmdet loads, we load with the same
samples; what mmdet refuses (raises), we refuse too, or load with a record in the problem report
that names the field. Every variation where that does not hold is listed, with its reason, in
docs/bad_data.md section 7's table (``KNOWN_DIFFERENCES`` reads it), and the test fails on a
difference that is not listed and on a listed one that has gone.

Variations: every scalar field of an image, an annotation and a category written as another json
type (integral float, fraction, string, bool, null; ints for strings), each key left out, keys in
reverse order, unicode file names, extra keys, and the forms ``segmentation`` takes (polygons,
RLE with a counts list, compressed RLE string).
"""
import copy
import json
import re
from pathlib import Path
from typing import Any, Callable, Optional

import cv2
import numpy as np
import pytest
from mmdet.datasets import CocoDataset
from pycocotools import mask as mask_utils

from mmdet_ext.datasets import LazyCocoDataset
from mmdet_ext.datasets.annotation_store import PROBLEMS_SUFFIX
from mmdet_ext.datasets.validation import read_problems

REPO = Path(__file__).resolve().parents[1]
HEIGHT, WIDTH = 40, 60
CLASSES = ('cat', 'dog')


def _square(x: int, y: int, size: int) -> np.ndarray:
    mask = np.zeros((HEIGHT, WIDTH), dtype=np.uint8)
    mask[y:y + size, x:x + size] = 1
    return mask


def _counts_list(mask: np.ndarray) -> list:
    """COCO's uncompressed RLE counts of ``mask`` (column-major runs, starting with zeros)."""
    flat = mask.flatten(order='F')
    changes = np.flatnonzero(np.diff(flat)) + 1
    runs = np.diff(np.concatenate([[0], changes, [flat.size]])).tolist()
    return runs if flat[0] == 0 else [0] + runs


def _compressed(mask: np.ndarray) -> str:
    return mask_utils.encode(np.asfortranarray(mask))['counts'].decode('ascii')


def base_coco() -> dict:
    """Two images, four instances: polygons (one with two parts), a crowd RLE with a counts
    list, a compressed RLE string."""
    return {
        'images': [{'id': 1, 'file_name': 'a.jpg', 'height': HEIGHT, 'width': WIDTH},
                   {'id': 2, 'file_name': 'b.jpg', 'height': HEIGHT, 'width': WIDTH}],
        'annotations': [
            {'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [10, 10, 20, 10], 'area': 200,
             'iscrowd': 0, 'segmentation': [[10, 10, 30, 10, 30, 20, 10, 20]]},
            {'id': 2, 'image_id': 1, 'category_id': 2, 'bbox': [2.5, 22.5, 8.25, 8.0],
             'area': 40.5, 'iscrowd': 0,
             'segmentation': [[2.5, 22.5, 10.75, 22.5, 10.75, 30.5], [40, 5, 50, 5, 50, 15]]},
            {'id': 3, 'image_id': 2, 'category_id': 1, 'bbox': [0, 0, 5, 5], 'area': 25,
             'iscrowd': 1,
             'segmentation': {'counts': _counts_list(_square(0, 0, 5)), 'size': [HEIGHT, WIDTH]}},
            {'id': 4, 'image_id': 2, 'category_id': 2, 'bbox': [20, 10, 6, 6], 'area': 36,
             'iscrowd': 0,
             'segmentation': {'counts': _compressed(_square(20, 10, 6)),
                              'size': [HEIGHT, WIDTH]}},
        ],
        'categories': [{'id': 1, 'name': 'cat'}, {'id': 2, 'name': 'dog'}],
    }


# -- the variations ------------------------------------------------------------------------------
Edit = Callable[[dict], None]


def _set(section: str, index: int, key: str, value: Any, *also: tuple) -> Edit:
    """Set ``coco[section][index][key]`` (and, for each (section, key) in ``also``, that key in
    every record of the section whose value was the old one: ids and the references to them)."""
    def edit(coco: dict) -> None:
        old = coco[section][index][key]
        coco[section][index][key] = value
        for other_section, other_key in also:
            for record in coco[other_section]:
                if record.get(other_key) == old and type(record.get(other_key)) is type(old):
                    record[other_key] = value
    return edit


def _delete(section: str, index: int, key: str) -> Edit:
    def edit(coco: dict) -> None:
        del coco[section][index][key]
    return edit


def _type_variants(value: Any) -> dict:
    """Other json types for a field whose valid value is ``value``."""
    if isinstance(value, str):
        return {'int': 7, 'bool': True, 'null': None}
    variants = {'float': float(value), 'str': str(value), 'bool': True, 'null': None}
    if isinstance(value, int):
        variants['fraction'] = value + 0.5
    return variants


# Where each field lives, the words a record naming it contains, and what else refers to it.
FIELDS = [
    ('images', 0, 'id', 'image', [('annotations', 'image_id')]),
    ('images', 0, 'id', 'image', []),  # the annotations still say 1
    ('images', 0, 'file_name', 'file_name', []),
    ('images', 0, 'height', 'height', []),
    ('images', 0, 'width', 'width', []),
    ('annotations', 0, 'id', 'annotation', []),
    ('annotations', 0, 'image_id', 'image_id', []),
    ('annotations', 0, 'category_id', 'category_id', []),
    ('annotations', 0, 'area', 'area', []),
    ('annotations', 0, 'iscrowd', 'iscrowd', []),
    ('annotations', 2, 'iscrowd', 'iscrowd', []),
    ('categories', 0, 'id', 'categories', [('annotations', 'category_id')]),
    ('categories', 0, 'name', 'categories', []),
]


def _bbox_value(index: int, position: int, value: Any) -> Edit:
    def edit(coco: dict) -> None:
        coco['annotations'][index]['bbox'][position] = value
    return edit


def _rename_files(coco: dict) -> None:
    coco['images'][0]['file_name'] = 'ä 图 ☃.jpg'
    coco['images'][1]['file_name'] = 'sub dir/ü.jpg'


def _reverse_keys(coco: dict) -> None:
    for section in ('images', 'annotations', 'categories'):
        coco[section] = [dict(reversed(list(record.items()))) for record in coco[section]]
    items = list(coco.items())
    coco.clear()
    coco.update(reversed(items))


def _extra_keys(coco: dict) -> None:
    coco['info'] = {'description': 'extra', 'year': 2026}
    coco['licenses'] = [{'id': 1, 'name': 'x'}]
    for section in ('images', 'annotations', 'categories'):
        for record in coco[section]:
            record['extra'] = {'nested': [1, 2.5, None, 'ü']}
            record['coco_url'] = 'http://example.com/x'


def _segmentation(index: int, value: Any, **others) -> Edit:
    def edit(coco: dict) -> None:
        coco['annotations'][index]['segmentation'] = copy.deepcopy(value)
        coco['annotations'][index].update(others)
    return edit


def _square_rle(counts: str) -> dict:
    mask = _square(10, 10, 10)
    value = _counts_list(mask) if counts == 'list' else _compressed(mask)
    return {'counts': value, 'size': [HEIGHT, WIDTH]}


def variations() -> dict[str, tuple[Edit, str]]:
    """name -> (edit of the base json, words a record naming the field contains)."""
    found: dict[str, tuple[Edit, str]] = {'base': (lambda coco: None, '')}
    for section, index, key, words, also in FIELDS:
        base_value = base_coco()[section][index][key]
        suffix = '+refs' if also else ''
        for kind, value in _type_variants(base_value).items():
            found[f'{section}[{index}].{key}{suffix}={kind}'] = (
                _set(section, index, key, value, *also), words)
        if isinstance(base_value, int):
            found[f'{section}[{index}].{key}{suffix}=2^70'] = (
                _set(section, index, key, 1 << 70, *also), words)
        if not also:
            found[f'{section}[{index}] without {key}'] = (_delete(section, index, key), key)
    for key in ('bbox', 'segmentation'):
        found[f'annotations[0] without {key}'] = (_delete('annotations', 0, key), key)
    for kind, value in {'float': 10.0, 'str': '10', 'bool': True, 'null': None}.items():
        found[f'annotations[0].bbox[0]={kind}'] = (_bbox_value(0, 0, value), 'bbox')
    found['unicode file names'] = (_rename_files, 'file_name')
    found['keys in reverse order'] = (_reverse_keys, '')
    found['extra keys'] = (_extra_keys, '')
    found['segmentation=RLE counts list'] = (_segmentation(0, _square_rle('list')), 'RLE')
    found['segmentation=RLE string'] = (_segmentation(0, _square_rle('string')), 'RLE')
    found['segmentation=crowd RLE string'] = (
        _segmentation(0, _square_rle('string'), iscrowd=1), 'RLE')
    found['segmentation=polygon, crowd'] = (_segmentation(1, [[10, 10, 30, 10, 30, 20]],
                                                          iscrowd=1), 'polygon')
    found['segmentation=[]'] = (_segmentation(0, []), 'segmentation')
    found['segmentation=null'] = (_segmentation(0, None), 'segmentation')
    found['segmentation=flat list'] = (_segmentation(0, [10, 10, 30, 10, 30, 20]), 'polygon')
    found['segmentation=RLE counts of strings'] = (
        _segmentation(0, {'counts': [str(v) for v in _counts_list(_square(10, 10, 10))],
                          'size': [HEIGHT, WIDTH]}), 'RLE')
    return found


VARIATIONS = variations()


def known_differences() -> dict[str, str]:
    """Variation name -> why, from docs/bad_data.md section 7's table (the one list of them)."""
    section = (REPO / 'docs' / 'bad_data.md').read_text().split('## 7. What mmdet accepts')[1]
    rows = re.findall(r'^\| `([^`]+)` \|(.*)\|$', section, re.MULTILINE)
    return {name: rest.split('|')[-1].strip() for name, rest in rows}


KNOWN_DIFFERENCES = known_differences()


# -- running both --------------------------------------------------------------------------------
def _write(root: Path, coco: dict) -> Path:
    for image in coco['images']:
        name = image.get('file_name')
        if isinstance(name, str) and name:
            path = root / 'img' / name
            path.parent.mkdir(parents=True, exist_ok=True)
            cv2.imwrite(str(path), np.full((HEIGHT, WIDTH, 3), 128, dtype=np.uint8))
    path = root / 'ann.json'
    path.write_text(json.dumps(coco, ensure_ascii=False))
    return path


def _mask(value: Any) -> Any:
    """A sample's mask in a comparable form: polygons as float lists, RLEs as their pixels."""
    if isinstance(value, dict) and 'counts' in value:
        rle = mask_utils.frPyObjects(value, *value['size']) if isinstance(value['counts'], list) \
            else {'size': value['size'], 'counts': value['counts'].encode()
                  if isinstance(value['counts'], str) else value['counts']}
        return ('rle', mask_utils.decode(rle).tobytes())
    if isinstance(value, list) and all(isinstance(part, list) for part in value):
        return ('polygons', [[float(v) for v in part] for part in value])
    return ('other', repr(value))


def _comparable(sample: dict) -> tuple:
    """What a sample must agree on: ids exactly (type too), numbers by value, masks by pixels."""
    instances = [(tuple(float(v) for v in inst['bbox']), inst['bbox_label'], inst['ignore_flag'],
                  _mask(inst['mask']) if 'mask' in inst else None)
                 for inst in sample['instances']]
    img_id = sample['img_id']
    return ((type(img_id).__name__, img_id), sample['img_path'], float(sample['height']),
            float(sample['width']), instances)


def _run(make: Callable[[], Any]) -> tuple[Optional[list], Optional[str]]:
    try:
        dataset = make()
        return [_comparable(dataset.get_data_info(i)) for i in range(len(dataset))], None
    except Exception as error:  # noqa: BLE001 -- which one is what is compared
        return None, f'{type(error).__name__}: {error}'


def outcome(root: Path, coco: dict) -> dict:
    """What mmdet and we make of ``coco`` (samples or the error), and our problem records."""
    ann_file = str(_write(root, coco))
    # serialize_data=False: the same samples, without mmengine's gc.collect() (0.2 s a dataset).
    common = dict(ann_file=ann_file, data_prefix=dict(img=str(root / 'img') + '/'), pipeline=[],
                  metainfo=dict(classes=CLASSES), serialize_data=False)
    stock, stock_error = _run(lambda: CocoDataset(**common))
    ours_dataset = []

    def make_ours():
        ours_dataset.append(LazyCocoDataset(**common, store_cache_dir=str(root / 'stores'),
                                            work_dir=str(root)))
        return ours_dataset[-1]

    ours, ours_error = _run(make_ours)
    problems = []
    reports = list((root / 'stores').glob(f'*{PROBLEMS_SUFFIX}'))
    if reports:
        problems = read_problems(str(reports[0]))
    return dict(stock=stock, stock_error=stock_error, ours=ours, ours_error=ours_error,
                problems=problems)


def verdict(result: dict, words: str) -> str:
    """'same', 'both raise', 'recorded' (mmdet raises, we record the field) or what differs."""
    named = [p for p in result['problems']
             if words and re.search(re.escape(words), p['reason'] + p['kind'], re.IGNORECASE)]
    if result['stock_error'] is None:
        if result['ours_error'] is not None:
            return f"mmdet loads, we raise {result['ours_error'][:120]}"
        if result['ours'] == result['stock']:
            return 'same'
        return 'mmdet loads, we load other samples' + (' (recorded)' if named else '')
    if result['ours_error'] is not None:
        return 'both raise'
    return 'recorded' if named else f"mmdet raises {result['stock_error'][:80]}, we load silently"


@pytest.fixture(scope='module')
def verdicts(tmp_path_factory) -> dict[str, str]:
    found = {}
    for k, (name, (edit, words)) in enumerate(VARIATIONS.items()):
        coco = base_coco()
        edit(coco)
        found[name] = verdict(outcome(tmp_path_factory.mktemp(f'v{k}'), coco), words)
    return found


def test_the_base_json_loads_the_same_samples(tmp_path):
    result = outcome(tmp_path, base_coco())
    assert result['stock_error'] is None and len(result['stock']) == 2
    assert result['ours'] == result['stock'] and result['problems'] == []


def test_every_variation_agrees_or_is_a_known_difference(verdicts):
    differences = {name: v for name, v in verdicts.items()
                   if v not in ('same', 'both raise', 'recorded')}
    unexpected = {n: v for n, v in differences.items() if n not in KNOWN_DIFFERENCES}
    assert not unexpected, '\n'.join(f'{n}: {v}' for n, v in unexpected.items())
    fixed = sorted(set(KNOWN_DIFFERENCES) - set(differences))
    assert not fixed, f'agree now, remove from KNOWN_DIFFERENCES and docs/bad_data.md: {fixed}'

    assert all(KNOWN_DIFFERENCES.values()), 'every listed difference says why'
