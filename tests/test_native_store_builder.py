"""The native json reader (rapidjson, csrc/store/coco_json_reader.cpp) against the Python one.

Reference: ``json.loads`` + ``validation.validate_coco`` (issue 7's validator) + the Python
builder. On every json of the bad-input corpus and on hand-made bad files, the native reader must
give the same problems (kind, ids, file, reason, action, in the same order), the same dropped
counts and the same store sections; a file-level error must be the same exception type, naming
the file and the byte offset or key. Masks decoded from the compact store stay bit-exact with
pycocotools.
"""
import json
import os
import subprocess
import sys
import textwrap
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from mmdet_ext.datasets import AnnotationFileError, LazyCocoDataset, open_store, validate_coco
from mmdet_ext.datasets import annotation_store
from mmdet_ext.datasets.coco_columns import native_reader_available, read_columns, validate_columns
from mmdet_ext.datasets.coco_store_layout import (LAYOUT_VERSION, coco_to_columns,
                                                  columns_to_sections, decoded, encode_scaled)
from mmdet_ext.datasets.validation import parse_coco_json

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tools'))

from bad_corpus.base_data import ANN_FILE, IMG_DIR  # noqa: E402
from bad_corpus.cases import ALL_CASES  # noqa: E402

pytestmark = pytest.mark.skipif(not native_reader_available(),
                                reason='this build has no rapidjson (the Python reader is used)')
JSON_CASES = [case for case in ALL_CASES if case.group != 'checkpoint'
              and not getattr(case.build, 'leaves_no_json', False)]


POLYGON_POOL = ('mask_range', 'poly_part_offsets', 'poly_coords', 'poly_coords_decimals')


def _polygons(sections: dict) -> list:
    """Every instance's polygons (float64 lists) or mask range, in store order."""
    coords = sections['poly_coords']
    decimals = int(sections['poly_coords_decimals'][0])
    coords = coords if decimals < 0 else coords.astype(np.float64) / 10.0 ** decimals
    coords = np.ascontiguousarray(coords, dtype=np.float64).view(np.int64)  # bits: NaN == NaN
    offsets = sections['poly_part_offsets']
    out = []
    for kind, (start, end) in zip(sections['mask_kind'], sections['mask_range'].tolist()):
        if kind == 1:  # a range of parts: inside the pool (Python's negative indices would wrap)
            assert 0 <= start <= end < len(offsets), (start, end, len(offsets))
        out.append([coords[offsets[p]:offsets[p + 1]].tolist() for p in range(start, end)]
                   if kind == 1 else (start, end))
    return out


def _reference(path: Path, validation: dict):
    """(report, sections) of the Python reader and issue 7's validator, or the exception."""
    try:
        coco = parse_coco_json(path.read_bytes(), str(path))
        cleaned, report = validate_coco(coco, **validation)
        return report, columns_to_sections(coco_to_columns(cleaned, str(path)))
    except Exception as err:  # noqa: BLE001 -- compared with the native outcome
        return err, None


def _native(path: Path, validation: dict):
    try:
        columns = read_columns(str(path), record_starts=True)
        keep_images, keep_anns, report = validate_columns(columns, **validation)
        return report, columns_to_sections(columns, keep_images, keep_anns)
    except Exception as err:  # noqa: BLE001
        return err, None


def _assert_same(path: Path, validation: dict) -> None:
    expected, expected_sections = _reference(path, validation)
    got, sections = _native(path, validation)
    if isinstance(expected, Exception):
        assert type(got) is type(expected), (expected, got)
        if isinstance(expected, AnnotationFileError):  # parse errors: offsets, not lines
            assert str(got).startswith(f'{path}: '), got
        else:
            assert str(got) == str(expected)
        return
    assert not isinstance(got, Exception), got
    assert [asdict(p) for p in got.problems] == [asdict(p) for p in expected.problems]
    assert got.actions == expected.actions
    assert (got.dropped_images, got.dropped_instances) == \
        (expected.dropped_images, expected.dropped_instances)
    assert got.file_states == expected.file_states
    assert set(sections) == set(expected_sections)
    assert _polygons(sections) == _polygons(expected_sections)
    for name, array in expected_sections.items():
        if name in POLYGON_POOL:  # compared above: the pool's order may differ
            continue
        np.testing.assert_array_equal(sections[name], array, err_msg=name)
        assert sections[name].dtype == array.dtype, name


@pytest.mark.parametrize('case', JSON_CASES, ids=[case.kind for case in JSON_CASES])
def test_corpus_json_same_report_and_store(case, tmp_path):
    """Every corpus case with a json: default policy, and 'report' (what test_mode uses)."""
    options = case.build(tmp_path) or {}
    path = tmp_path / options.get('ann_file', ANN_FILE)
    assert path.is_file()
    img_prefix = str(tmp_path / options.get('img_prefix', IMG_DIR + '/'))
    _assert_same(path, {'img_prefix': img_prefix, 'mask_root': str(tmp_path)})
    _assert_same(path, {'img_prefix': img_prefix, 'mask_root': str(tmp_path), 'check_files': False,
                        'policy': {kind: 'report' for kind in ('bbox_invalid', 'mask_empty',
                                                               'polygon_invalid')}})


def _coco(**edits) -> dict:
    coco = {
        'images': [{'id': 1, 'file_name': 'a.jpg', 'height': 40, 'width': 60},
                   {'id': 2, 'file_name': 'b.jpg', 'height': 40, 'width': 60}],
        'annotations': [
            {'id': 1, 'image_id': 1, 'category_id': 1, 'bbox': [1.5, 2.25, 10.0, 12.0],
             'area': 100.5, 'iscrowd': 0,
             'segmentation': [[1.5, 2.25, 11.5, 2.25, 11.5, 14.25, 1.5, 14.25]]},
            {'id': 2, 'image_id': 2, 'category_id': 2, 'bbox': [0, 0, 5, 5], 'area': 25,
             'iscrowd': 1, 'segmentation': {'counts': [0, 25, 2375], 'size': [40, 60]}},
            {'id': 3, 'image_id': 1, 'category_id': 1, 'bbox': [3, 3, 4, 4], 'area': 12,
             'segmentation': [[3, 3, 7, 3, 7, 7], [10, 10, 12, 10, 12, 12, 10, 12]]},
        ],
        'categories': [{'id': 1, 'name': 'cat'}, {'id': 2, 'name': 'dog'}],
    }
    coco.update(edits)
    return coco


def test_hand_made_records_same_report_and_store(tmp_path):
    """Records of every irregular shape the native reader hands to Python, among clean ones."""
    coco = _coco()
    anns = coco['annotations']
    anns += [
        {'id': 4, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2], 'iscrowd': True,
         'segmentation': [[1, 1, 3, 1, 3, 3]]},                        # bool iscrowd: regular
        {'id': 5, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2], 'iscrowd': 1.0,
         'segmentation': [[1, 1, 3, 1, 3, 3]]},                        # float iscrowd: Python
        {'id': 6, 'image_id': 1.0, 'category_id': 1, 'bbox': [1, 1, 2, 2]},   # float image id
        {'id': 7, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 'x', 2]},
        {'id': 8, 'image_id': 1, 'category_id': 9, 'bbox': [1, 1, 2, 2]},     # unknown category
        {'id': 9, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2], 'segmentation': []},
        {'id': 10, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2],
         'segmentation': [[1, 1, 3, 1, 3]]},                           # odd coordinate count
        {'id': 11, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2],
         'segmentation': [[100, 100, 130, 100, 130, 130]]},             # outside the image
        {'id': 12, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2],
         'segmentation': [[1, 1, 1.2, 1, 1.2, 1.2]]},                   # covers no pixel
        {'id': 13, 'image_id': 7, 'category_id': 1, 'bbox': [1, 1, 2, 2]},    # unknown image
        {'id': 14, 'image_id': 1, 'category_id': 1, 'bbox': [1, 1, 2, 2], 'area': None},
        {'id': 15, 'image_id': 2, 'category_id': 1, 'bbox': [55, 1, 10, 2]},  # outside
        {'id': 16, 'image_id': 2, 'category_id': 1, 'bbox': [1, 1, 0, 2]},
        {'id': 17, 'image_id': 2, 'category_id': 1, 'bbox': [1, 1, 2, 2], 'mask_file': 'm.png'},
        {'id': 18, 'image_id': 2, 'category_id': 1, 'bbox': [1, 1, 2, 2],
         'segmentation': [[1, 1, 1e30, 1, 3, 3]]},                     # beyond the rasteriser
        {'id': 'x', 'image_id': 2, 'category_id': 1, 'bbox': [1, 1, 2, 2]},
        {'id': 3, 'image_id': 2, 'category_id': 1, 'bbox': [1, 1, 2, 2]},     # duplicate id
        # kept from Python (an integral float category id is converted), after dropped regular
        # polygons: its parts move down by the dropped ones' count
        {'id': 19, 'image_id': 1, 'category_id': 1.0, 'bbox': [1, 1, 4, 4], 'area': 9,
         'iscrowd': 0, 'segmentation': [[1, 1, 5, 1, 5, 5], [2, 2, 4, 2, 4, 4, 2, 4]]},
    ]
    coco['images'] += [{'id': 3, 'file_name': 'c.jpg', 'height': '40', 'width': 60},
                       {'id': 4, 'file_name': '', 'height': 40, 'width': 60},
                       {'id': 5, 'file_name': 'e.jpg', 'height': 1 << 20, 'width': 1 << 20}]
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(coco))
    validation = {'img_prefix': str(tmp_path), 'mask_root': str(tmp_path), 'check_files': False,
                  'policy': {'duplicate_ann_id': 'report'}}
    _assert_same(path, validation)
    _assert_same(path, {**validation, 'policy': {kind: 'report' for kind in (
        'duplicate_ann_id', 'bbox_invalid', 'bbox_outside_image', 'polygon_invalid', 'mask_empty',
        'unknown_category_id', 'image_unreadable', 'image_record_invalid')}})


@pytest.mark.parametrize('data, names', [
    (json.dumps(_coco()).encode()[:300], ('byte 300', 'truncated')),
    (b'', ('empty',)),
    (b'[1, 2]', ('a list',)),
    (json.dumps({'annotations': []}).encode(), ('no "images"', "'annotations'")),
    (json.dumps(_coco(images={'a': 1})).encode(), ('"images" is a dict, not a list',)),
    (json.dumps(_coco(annotations=[1])).encode(), ('annotations[0] is a int, not an object',)),
    (json.dumps(_coco(categories=[{'id': 1}])).encode(), ('categories[0]',)),
    (json.dumps(_coco()).encode().replace(b'a.jpg', b'\xe9.jpg'),
     (f"not UTF-8 at byte {json.dumps(_coco()).index('a.jpg')}",)),
    (b'{"images": [}', ('not valid json at byte 12',)),
    (json.dumps(_coco()).encode() + b' x', ('not valid json',)),
    (json.dumps(_coco()).encode('utf-16'), ('not UTF-8 at byte 0',)),
])
def test_bad_json_error_names_file_and_offset_or_key(tmp_path, data, names):
    path = tmp_path / 'ann.json'
    path.write_bytes(data)
    with pytest.raises(AnnotationFileError) as info:
        read_columns(str(path))
    message = str(info.value)
    assert message.startswith(f'{path}: ')
    for name in names:
        assert name in message, message
    with pytest.raises(AnnotationFileError):  # the reference refuses it too
        parse_coco_json(data, str(path))


def test_compact_layout_is_lossless_and_masks_stay_bit_exact(tmp_path):
    """Scaled integer coordinates decode to the json's float64s; masks equal pycocotools'."""
    rng = np.random.default_rng(0)
    coco = _coco()
    for k in range(40):  # random 2-decimal polygons, as COCO's
        xy = np.round(rng.uniform(0, 40, size=2 * int(rng.integers(3, 12))), 2).tolist()
        coco['annotations'].append({'id': 100 + k, 'image_id': 1 + k % 2, 'category_id': 1,
                                    'bbox': [1.25, 1.5, 20.75, 20.5], 'area': 10.0,
                                    'segmentation': [xy]})
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(coco))
    store = open_store(str(path), cache_dir=str(tmp_path / 'cache'))
    assert int(store['layout_version'][0]) == LAYOUT_VERSION
    assert int(store['poly_coords_decimals'][0]) == 2 and store['poly_coords'].dtype == np.uint16
    assert store['bbox'].dtype == np.uint16 and store['ann_id'].dtype == np.uint8
    dataset = LazyCocoDataset(ann_file=str(path), data_prefix=dict(img=str(tmp_path)),
                              metainfo=dict(classes=('cat', 'dog')), pipeline=[],
                              filter_cfg=None, validate=False,
                              store_cache_dir=str(tmp_path / 'cache'))
    by_id = {ann['id']: ann for ann in coco['annotations']}
    checked = 0
    for idx in range(len(dataset)):
        info = dataset.get_data_info(idx)
        anns = [a for a in coco['annotations'] if a['image_id'] == info['img_id']]
        for ann, instance in zip(anns, info['instances']):
            x, y, w, h = by_id[ann['id']]['bbox']
            assert instance['bbox'] == [x, y, x + w, y + h]
            if isinstance(ann['segmentation'], list):
                assert instance['mask'] == ann['segmentation']  # the same float64s
                ours = mask_utils.decode(mask_utils.frPyObjects(instance['mask'], 40, 60))
                ref = mask_utils.decode(mask_utils.frPyObjects(ann['segmentation'], 40, 60))
                np.testing.assert_array_equal(ours, ref)
                checked += 1
    assert checked >= 40


@pytest.mark.parametrize('values, decimals', [
    ([0.1, 0.2, 0.3, 12.34], 2), ([1.0, 2.0], 0), ([0.1 + 0.2], -1), ([-0.0, 1.0], -1),
    ([float('nan')], -1), ([1e300], -1), ([123456.789012], 6),
])
def test_encode_scaled_round_trips_bit_exactly_or_keeps_float64(values, decimals):
    values = np.array(values)
    stored, got = encode_scaled(values)
    assert got == decimals
    back = stored if got < 0 else stored.astype(np.float64) / 10.0 ** got
    assert back.view(np.int64).tolist() == values.view(np.int64).tolist()


def test_old_layout_store_is_rebuilt_not_misread(tmp_path):
    """A layout-1 store (what the previous release wrote) under the current name is rebuilt."""
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(_coco()))
    store = open_store(str(path))
    store_path = store.path
    del store
    old = columns_to_sections(read_columns(str(path)))
    old['layout_version'] = np.array([1], dtype=np.int64)
    old['file_name_range'] = np.array([[0, 5], [5, 10]], dtype=np.int64)
    key = annotation_store.AnnotationStore(store_path).key
    annotation_store.write_store(store_path, old, key)
    with pytest.raises(annotation_store.StoreError, match='layout version 1, this build reads'):
        annotation_store.AnnotationStore(store_path)
    rebuilt = open_store(str(path))
    assert int(rebuilt['layout_version'][0]) == LAYOUT_VERSION and rebuilt.num_instances == 3


def test_python_reader_fallback_builds_the_same_store(tmp_path, monkeypatch):
    """MMDET_EXT_JSON_READER=python (what a build without rapidjson uses) gives the same store."""
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(_coco()))
    native = open_store(str(path), cache_dir=str(tmp_path / 'n'))
    monkeypatch.setenv(annotation_store.JSON_READER_ENV, 'python')
    assert annotation_store.json_reader() == 'python'
    python = open_store(str(path), cache_dir=str(tmp_path / 'p'))
    assert set(native.arrays) == set(python.arrays)
    for name in native.arrays:
        np.testing.assert_array_equal(native[name], python[name], err_msg=name)
    np.testing.assert_array_equal(decoded(python, 'bbox')[0], [1.5, 2.25, 10.0, 12.0])


def test_python_reader_fallback_validates_too(toy_coco_root, tmp_path, monkeypatch):
    """With validation, the Python reader's columns hold the ids validation looks up (it failed
    with KeyError 'ann_start', then reported every annotation as a duplicate id)."""
    ann_file = str(toy_coco_root / 'annotations' / 'instances_train.json')
    validation = dict(img_prefix=str(toy_coco_root / 'train') + '/', mask_root=str(toy_coco_root),
                      policy={}, max_pixels=1 << 26)
    native = open_store(ann_file, cache_dir=str(tmp_path / 'n'), validation=validation)
    monkeypatch.setenv(annotation_store.JSON_READER_ENV, 'python')
    python = open_store(ann_file, cache_dir=str(tmp_path / 'p'), validation=validation)
    assert set(native.arrays) == set(python.arrays)
    for name in set(native.arrays) - {annotation_store.JSON_IDENTITY}:
        np.testing.assert_array_equal(native[name], python[name], err_msg=name)


def _too_big_for_a_double(coco: dict) -> str:
    """``coco``'s json with every (-)Infinity written as (-)1e400, which rapidjson refuses as
    "too big to be stored in double" and json.loads reads as (-)inf, plus such numbers (0e400, a
    400-digit integer, 1e999) in fields nobody reads."""
    text = json.dumps(coco).replace('-Infinity', '-1e400').replace('Infinity', '1e400')
    text = text.replace('"area": 25,', '"area": 25, "score": 0e400, "big": 1' + '0' * 400 + ',')
    return text.replace('"categories": [', '"info": {"v": 1E+0999}, "categories": [')


def test_numbers_too_big_for_a_double_drop_the_instance_as_infinity_does(tmp_path, monkeypatch):
    """1e400 in a bbox or polygon no longer refuses the file (native reader): both readers drop
    the one instance with the record an Infinity literal gets, and build the same store."""
    coco = _coco()
    coco['annotations'][0]['bbox'][2] = float('inf')
    coco['annotations'][2]['segmentation'][0][3] = float('-inf')
    big, infinity = tmp_path / 'big.json', tmp_path / 'inf.json'
    big.write_text(_too_big_for_a_double(coco))
    infinity.write_text(json.dumps(coco))
    validation = {'img_prefix': str(tmp_path), 'mask_root': str(tmp_path), 'check_files': False}
    _assert_same(big, validation)
    got, _ = _native(big, validation)
    expected, _ = _native(infinity, validation)
    assert [asdict(p) for p in got.problems] == [asdict(p) for p in expected.problems]
    assert [(p.kind, p.ann_id) for p in got.problems] == [('bbox_invalid', 1),
                                                          ('polygon_invalid', 3)]
    assert got.actions == ['drop_instance'] * 2
    stores = {}
    for reader in ('native', 'python'):
        monkeypatch.setenv(annotation_store.JSON_READER_ENV, reader)
        stores[reader] = open_store(str(big), cache_dir=str(tmp_path / reader),
                                    validation={**validation, 'policy': {}})
        problems = Path(stores[reader].path + '.problems.jsonl').read_text().splitlines()
        assert [json.loads(line)['action'] for line in problems] == ['drop_instance'] * 2
    for name in set(stores['native'].arrays) - {annotation_store.JSON_IDENTITY}:
        np.testing.assert_array_equal(stores['native'][name], stores['python'][name],
                                      err_msg=name)


@pytest.mark.parametrize('number', ['1e400-5', '01e400', '1e', '1.e400'])
def test_a_malformed_big_number_is_still_not_json(tmp_path, number):
    """Only well-formed numbers are re-read: a malformed one stays a parse error naming the file
    and the byte offset."""
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(_coco()).replace('"area": 25,', f'"area": {number},'))
    with pytest.raises(AnnotationFileError, match=f'{path}: not valid json at byte'):
        read_columns(str(path))
    with pytest.raises(AnnotationFileError):
        parse_coco_json(path.read_bytes(), str(path))


def test_cached_open_skips_hashing_only_while_the_json_is_unwritten(tmp_path, monkeypatch):
    """A store records the json's identity (inode, size, mtime, ctime); an equal identity opens
    it without hashing the json, any write (even same size, mtime set back) hashes and rebuilds."""
    monkeypatch.setattr(annotation_store, 'IDENTITY_SETTLE_S', -1.0)  # record at once
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(_coco()))
    first = open_store(str(path))
    assert annotation_store.JSON_IDENTITY in first.arrays
    real_hash = annotation_store._hash_file
    monkeypatch.setattr(annotation_store, '_hash_file',
                        lambda p: pytest.fail('hashed the json although it is unchanged'))
    second = open_store(str(path))
    assert second.path == first.path
    stat = path.stat()
    text = path.read_text().replace('"cat"', '"cow"')  # same size
    path.write_text(text)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # mtime set back; ctime moves on
    hashed = []
    monkeypatch.setattr(annotation_store, '_hash_file', lambda p: hashed.append(p) or real_hash(p))
    third = open_store(str(path))
    assert hashed and third.path != first.path
    assert third.text('category_name_bytes', 0, 3) == 'cow'


WAITER = textwrap.dedent('''
    import logging, sys
    sys.path.insert(0, sys.argv[1])
    from mmengine.logging import MMLogger

    class ReleaseOnTheNote(logging.Handler):
        def emit(self, record):
            if 'Waiting for another process' in record.getMessage():
                open(sys.argv[3], 'w').close()

    MMLogger.get_instance('waiter', log_level='INFO').addHandler(ReleaseOnTheNote())  # as a Runner
    from mmdet_ext.datasets import open_store
    print(open_store(sys.argv[2]).num_instances)
''')


def test_a_process_waiting_for_a_builder_says_so(tmp_path):
    """Two processes on one store folder: the second waits for the first and logs that it does."""
    path = tmp_path / 'ann.json'
    path.write_text(json.dumps(_coco()))
    release = tmp_path / 'release'
    holder = subprocess.Popen(
        [sys.executable, '-c', 'import os, sys, time; sys.path.insert(0, sys.argv[1]); '
         'from mmdet_ext.datasets.annotation_store import _folder_lock\n'
         'with _folder_lock(sys.argv[2]):\n    print("held", flush=True)\n'
         '    deadline = time.time() + 120\n'
         '    while not os.path.exists(sys.argv[3]) and time.time() < deadline:\n'
         '        time.sleep(0.05)', str(REPO), str(tmp_path), str(release)],
        stdout=subprocess.PIPE, text=True)
    try:
        # Not the first line: importing mmdet may print first (the onedl fork's mmdet does).
        assert 'held' in (line.strip() for line in holder.stdout), 'the holder never held the lock'
        # The waiter lets the holder go once it has said that it waits: however slow the
        # machine, the note comes before the release, and without the note the holder keeps
        # the lock for 120 s and the test fails.
        waiter = subprocess.run([sys.executable, '-c', WAITER, str(REPO), str(path), str(release)],
                                capture_output=True, text=True, timeout=300)
    finally:
        release.touch()
        holder.wait(60)
    log = waiter.stdout + waiter.stderr
    assert waiter.returncode == 0, log
    assert 'Waiting for another process' in log and 'Done waiting' in log, log
    assert waiter.stdout.strip().endswith('3')
