"""Store-time validation: a generated corpus of bad COCO data, each kind reported and handled."""
import json
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmdet.datasets import CocoDataset
from pycocotools import mask as mask_utils

from mmdet_ext.datasets import annotation_store
from mmdet_ext.datasets import DataValidationError, LazyCocoDataset, open_store, validate_coco
from mmdet_ext.datasets.validation import HEAD_BYTES, TAIL_BYTES, find_problems, resolve_policy
from mmdet_ext.io import ImageHeaderError, read_image_header
from mmdet_ext.transforms import NativeLoadImageFromFile

REPO = Path(__file__).resolve().parents[1]


def _png_header(height: int, width: int) -> bytes:
    """A PNG whose IHDR declares ``height`` x ``width`` with one tiny IDAT (a 'bomb')."""
    def chunk(kind: bytes, payload: bytes) -> bytes:
        return (struct.pack('>I', len(payload)) + kind + payload
                + struct.pack('>I', zlib.crc32(kind + payload)))
    ihdr = struct.pack('>IIBBBBB', width, height, 8, 0, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', zlib.compress(b'\0' * 64))
            + chunk(b'IEND', b''))


@pytest.fixture
def bad_root(toy_coco_root: Path, tmp_path: Path) -> Path:
    """A copy of the toy dataset's train split to break."""
    root = tmp_path / 'bad'
    shutil.copytree(toy_coco_root / 'train', root / 'train')
    shutil.copytree(toy_coco_root / 'masks', root / 'masks')
    shutil.copytree(toy_coco_root / 'annotations', root / 'annotations')
    return root


def _load(root: Path, name: str = 'instances_train.json') -> dict:
    return json.loads((root / 'annotations' / name).read_text())


def _kinds(problems) -> list[tuple]:
    return [(p.kind, p.image_id, p.ann_id) for p in problems]


@pytest.mark.parametrize('name', ['instances_train.json', 'instances_val.json',
                                  'instances_train_pngmasks.json'])
def test_clean_toy_data_has_no_problems(toy_coco_root, name):
    split = 'val' if 'val' in name else 'train'
    coco = json.loads((toy_coco_root / 'annotations' / name).read_text())
    assert find_problems(coco, str(toy_coco_root / split), str(toy_coco_root)) == []


def test_image_file_corpus(bad_root):
    """Zero-byte, truncated JPEG/PNG, wrong type, huge, wrong size: dropped; missing: recorded."""
    images = bad_root / 'train'
    (images / '000000.jpg').unlink()
    (images / '000001.jpg').write_bytes(b'')
    data = (images / '000002.jpg').read_bytes()
    (images / '000002.jpg').write_bytes(data[:len(data) // 2])
    png = _png_header(240, 320)
    (images / '000003.jpg').write_bytes(png[:20])
    (images / '000004.jpg').write_bytes(b'GIF89a' + b'\0' * 100)
    (images / '000005.jpg').write_bytes(_png_header(60000, 60000))
    coco = _load(bad_root)
    coco['images'][6]['width'] = 321
    cleaned, report = validate_coco(coco, str(images))
    by_image = {p.image_id: p for p in report.problems}
    expected = {
        1: ('image_missing', 'file not found'),
        2: ('image_unreadable', 'empty'),
        3: ('image_unreadable', 'truncated JPEG'),
        4: ('image_unreadable', 'truncated PNG'),
        5: ('image_unreadable', 'not an image of a format read here'),
        6: ('image_unreadable', 'decompression bomb'),
        7: ('image_size_mismatch', 'the file is 240x320, the json says 240x321'),
    }
    assert sorted(by_image) == sorted(expected)
    for image_id, (kind, reason) in expected.items():
        assert by_image[image_id].kind == kind
        assert reason in by_image[image_id].reason
        assert by_image[image_id].file.endswith(coco['images'][image_id - 1]['file_name'])
    # A missing file is recorded but kept, as mmdet keeps it; loading it raises FileNotFoundError.
    assert [image['id'] for image in cleaned['images']] == [1, 8]
    assert {ann['image_id'] for ann in cleaned['annotations']} == {1, 8}
    assert report.dropped_images == 6
    assert 'dropped 6 images' in report.summary()


def test_annotation_corpus(bad_root):
    """Each instance-level problem is reported with its ids and drops only that instance."""
    coco = _load(bad_root)
    anns = {ann['id']: ann for ann in coco['annotations']}
    images = {image['id']: image for image in coco['images']}
    # (h, w) of each annotation's image: the toy set's images differ in size.
    h, w = {}, {}
    for ann_id, ann in anns.items():
        h[ann_id], w[ann_id] = images[ann['image_id']]['height'], images[ann['image_id']]['width']
    anns[1]['bbox'] = [float('nan'), 1.0, 2.0, 3.0]
    anns[2]['bbox'] = [10.0, 10.0, 0.0, 5.0]
    anns[3]['bbox'] = [w[3] - 20.0, h[3] - 40.0, 50.0, 50.0]
    anns[4]['segmentation'] = [[1.0, 1.0, 5.0, 5.0]]
    anns[5]['segmentation'] = [[1.0, 1.0, 5.0, 5.0, 9.0, 1.0, 3.0]]
    anns[7]['category_id'] = 99
    anns[8]['segmentation'] = {'size': [h[8], w[8]], 'counts': [100, 5]}
    anns[9]['segmentation'] = mask_utils.encode(np.zeros((24, 32), dtype=np.uint8, order='F'))
    anns[9]['segmentation']['counts'] = anns[9]['segmentation']['counts'].decode()
    anns[10]['segmentation'] = {'size': [1 << 20, 1 << 20], 'counts': [1]}
    anns[11]['image_id'] = 999
    small = mask_utils.encode(np.ones((24, 32), dtype=np.uint8, order='F'))['counts'].decode()
    anns[12]['segmentation'] = {'size': [h[12], w[12]], 'counts': small}
    anns[13]['segmentation'] = {'size': [h[13], w[13]], 'counts': 'ab c'}
    cleaned, report = validate_coco(coco, str(bad_root / 'train'))
    got = {p.ann_id: (p.kind, p.reason) for p in report.problems}
    expected = {
        1: ('bbox_invalid', 'not finite'), 2: ('bbox_invalid', 'non-positive'),
        3: ('bbox_outside_image', f'outside the {h[3]}x{w[3]} image'),
        4: ('polygon_invalid', 'fewer than 3'), 5: ('polygon_invalid', 'odd number'),
        7: ('unknown_category_id', 'category_id 99'),
        8: ('rle_invalid', f'sum to 105, not h*w = {h[8]}*{w[8]}'),
        9: ('rle_size_mismatch', f'RLE size 24x32 differs from the image ({h[9]}x{w[9]})'),
        10: ('rle_invalid', 'more than max_pixels'),
        11: ('unknown_image_id', 'image_id 999'),
        12: ('rle_invalid', f'the decoded runs sum to 768 but a {h[12]}x{w[12]} mask has '
                            f'{h[12] * w[12]} pixels'),
        13: ('rle_invalid', 'is not a COCO RLE character'),
    }
    assert len({(h[ann_id], w[ann_id]) for ann_id in expected if ann_id != 11}) > 1
    assert sorted(got) == sorted(expected)
    for ann_id, (kind, reason) in expected.items():
        assert got[ann_id][0] == kind and reason in got[ann_id][1], (ann_id, got[ann_id])
    assert {p.image_id for p in report.problems if p.ann_id == 1} == {1}
    kept = {ann['id'] for ann in cleaned['annotations']}
    assert kept == set(anns) - set(expected)
    assert len(cleaned['images']) == len(coco['images'])


def test_mask_file_corpus(bad_root):
    coco = _load(bad_root, 'instances_train_pngmasks.json')
    first, second = coco['annotations'][0], coco['annotations'][1]
    (bad_root / first['mask_file']).unlink()
    (bad_root / second['mask_file']).write_bytes(_png_header(24, 32))
    _, report = validate_coco(coco, str(bad_root / 'train'), str(bad_root))
    assert _kinds(report.problems) == [('mask_file_missing', first['image_id'], first['id']),
                                       ('mask_file_invalid', second['image_id'], second['id'])]
    image = next(image for image in coco['images'] if image['id'] == second['image_id'])
    assert f"the mask is 24x32, the image {image['height']}x{image['width']}" in \
        report.problems[1].reason
    assert report.dropped_instances == 2


def test_duplicate_ids_fail_with_every_duplicate_listed(bad_root):
    coco = _load(bad_root)
    coco['images'].append(dict(coco['images'][0]))
    coco['annotations'][1]['id'] = coco['annotations'][0]['id']
    with pytest.raises(DataValidationError, match=r'2 data problems whose policy is "fail"'
                       r'(.|\n)*duplicate_image_id: image 1(.|\n)*duplicate_ann_id'):
        validate_coco(coco, str(bad_root / 'train'))


def test_policy_overrides_and_errors(bad_root):
    coco = _load(bad_root)
    coco['annotations'][0]['bbox'] = [1.0, 1.0, -1.0, 1.0]
    _, report = validate_coco(coco, str(bad_root / 'train'), policy={'bbox_invalid': 'drop_image'})
    assert report.dropped_images == 1
    with pytest.raises(DataValidationError, match='bbox_invalid: image 1 annotation 1'):
        validate_coco(coco, str(bad_root / 'train'), policy={'bbox_invalid': 'fail'})
    with pytest.raises(ValueError, match="unknown problem kind 'bbox'"):
        resolve_policy({'bbox': 'fail'})
    with pytest.raises(ValueError, match="cannot 'drop_instance'"):
        resolve_policy({'image_missing': 'drop_instance'})


def test_store_holds_cleaned_data_and_the_report(bad_root):
    (bad_root / 'train' / '000000.jpg').write_bytes(b'')
    ann_file = str(bad_root / 'annotations' / 'instances_train.json')
    validation = {'img_prefix': str(bad_root / 'train'), 'policy': {}}
    store = open_store(ann_file, validation=validation)
    assert store.num_images == 7 and 1 not in store['image_id']
    lines = Path(store.path + '.problems.jsonl').read_text().splitlines()
    assert [json.loads(line)['action'] for line in lines] == ['drop_image']
    plain = open_store(ann_file)
    assert plain.path != store.path and plain.num_images == 8
    reported = open_store(ann_file, validation={**validation,
                                                'policy': {'image_unreadable': 'report'}})
    assert reported.path not in (store.path, plain.path) and reported.num_images == 8


def test_dataset_validates_train_but_drops_nothing_in_test_mode(bad_root):
    (bad_root / 'train' / '000000.jpg').write_bytes(b'')
    kwargs = dict(data_root=str(bad_root), ann_file='annotations/instances_train.json',
                  data_prefix=dict(img='train/'), pipeline=[])
    assert len(LazyCocoDataset(**kwargs)) == 7
    assert len(LazyCocoDataset(test_mode=True, **kwargs)) == 8
    assert len(LazyCocoDataset(validate=False, **kwargs)) == 8


def test_header_reader_and_load_guard(tmp_path):
    assert read_image_header(_png_header(3, 5)) == ('png', 3, 5)
    with pytest.raises(ImageHeaderError, match='more than max_pixels=14'):
        read_image_header(_png_header(3, 5), max_pixels=14)
    bomb = tmp_path / 'bomb.png'
    bomb.write_bytes(_png_header(60000, 60000))
    with pytest.raises(RuntimeError, match=f'cannot load {bomb}: .*decompression bomb'):
        NativeLoadImageFromFile()(dict(img_path=str(bomb)))


def test_validate_tool_prints_the_report(bad_root):
    (bad_root / 'train' / '000000.jpg').write_bytes(b'')
    ann_file = bad_root / 'annotations' / 'instances_train.json'
    cmd = [sys.executable, str(REPO / 'tools' / 'validate_coco.py'), str(ann_file),
           '--img-prefix', str(bad_root / 'train')]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert '[drop_image] image_unreadable: image 1 annotation None' in result.stdout
    assert 'dropped 1 images' in result.stdout
    failing = subprocess.run(cmd + ['--policy', 'image_unreadable=fail'], capture_output=True,
                             text=True, check=False)
    assert failing.returncode == 1 and 'policy is "fail"' in failing.stdout


def test_large_files_are_checked_from_head_and_tail(tmp_path):
    """A big JPEG is judged on its first/last bytes; a frame header after ~190 KiB of APP data
    (EXIF/ICC) is still found by falling back to the whole file."""
    rng = np.random.default_rng(0)
    ok, encoded = cv2.imencode('.jpg', rng.integers(0, 255, (600, 800, 3), dtype=np.uint8),
                               [cv2.IMWRITE_JPEG_QUALITY, 100])
    assert ok and len(encoded) > HEAD_BYTES + TAIL_BYTES
    data = encoded.tobytes()
    app = b'\xff\xe1' + struct.pack('>H', 65000) + b'\0' * 64998
    images = [{'id': 1, 'file_name': 'big.jpg', 'height': 600, 'width': 800},
              {'id': 2, 'file_name': 'cut.jpg', 'height': 600, 'width': 800},
              {'id': 3, 'file_name': 'exif.jpg', 'height': 600, 'width': 800}]
    (tmp_path / 'big.jpg').write_bytes(data)
    (tmp_path / 'cut.jpg').write_bytes(data[:-4096])
    (tmp_path / 'exif.jpg').write_bytes(data[:2] + app * 3 + data[2:])
    problems = find_problems({'images': images, 'annotations': [], 'categories': []},
                             str(tmp_path))
    assert _kinds(problems) == [('image_unreadable', 2, None)]
    assert 'truncated JPEG' in problems[0].reason


def _small_coco(root: Path, ids: list, size=(24, 32)) -> Path:
    """Images ``ids`` (one instance each) as real JPEGs under ``root/img``; the json's path."""
    (root / 'img').mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for k, image_id in enumerate(ids):
        cv2.imwrite(str(root / 'img' / f'{k}.jpg'), np.zeros((24, 32, 3), dtype=np.uint8))
        images.append({'id': image_id, 'file_name': f'{k}.jpg', 'height': size[0],
                       'width': size[1]})
        annotations.append({'id': k + 1, 'image_id': image_id, 'category_id': 1, 'area': 16.0,
                            'bbox': [2, 2, 4, 4], 'segmentation': [[2, 2, 6, 2, 6, 6, 2, 6]]})
    path = root / 'ann.json'
    path.write_text(json.dumps({'images': images, 'annotations': annotations,
                                'categories': [{'id': 1, 'name': 'person'}]}))
    return path


@pytest.mark.parametrize('reader', ['native', 'python'])
def test_ids_that_are_not_integers_load_as_mmdet_gives_them(tmp_path, monkeypatch, reader):
    """Strings, null, 2^70, 1.5 and 7.0 stay the json's ids in ``img_id``; annotations find their
    image by Python equality (7.0 == 7), as pycocotools' index does (issue 49)."""
    monkeypatch.setenv(annotation_store.JSON_READER_ENV, reader)
    ids = ['a', None, 1 << 70, 1.5, 7.0, 3]
    ann_file = _small_coco(tmp_path, ids)
    coco = json.loads(ann_file.read_text())
    coco['annotations'][4]['image_id'] = 7  # the int an image id of 7.0 equals
    ann_file.write_text(json.dumps(coco))
    kwargs = dict(ann_file=str(ann_file), data_prefix=dict(img=str(tmp_path / 'img') + '/'),
                  pipeline=[])
    ours = LazyCocoDataset(store_cache_dir=str(tmp_path / 'stores'), **kwargs)
    stock = CocoDataset(**kwargs)
    got = [ours.get_data_info(i) for i in range(len(ours))]
    assert [(type(s['img_id']), s['img_id']) for s in got] == [(type(v), v) for v in ids]
    for sample, expected in zip(got, (stock.get_data_info(i) for i in range(len(stock)))):
        assert sample['img_id'] == expected['img_id'] and len(sample['instances']) == 1
        assert sample['instances'] == expected['instances']
    assert not Path(ours.store.path + '.problems.jsonl').exists()


def test_integral_float_sizes_load_as_ints_with_a_record(tmp_path):
    ann_file = _small_coco(tmp_path, [1, 2], size=(24.0, 32.0))
    dataset = LazyCocoDataset(ann_file=str(ann_file), pipeline=[],
                              data_prefix=dict(img=str(tmp_path / 'img') + '/'))
    sample = dataset.get_data_info(0)
    assert (sample['height'], sample['width']) == (24, 32)
    assert type(sample['height']) is int and len(sample['instances']) == 1
    records = [json.loads(line) for line in
               Path(dataset.store.path + '.problems.jsonl').read_text().splitlines()]
    assert [(r['kind'], r['image_id'], r['action']) for r in records] == [
        ('image_record_converted', 1, 'report'), ('image_record_converted', 2, 'report')]
    assert 'height=24.0 width=32.0 is stored as the integers 24x32' in records[0]['reason']


def test_everything_dropped_says_what_the_json_lists_and_why(tmp_path):
    """Not "the json lists no images": what it lists, what was dropped, the most common reasons
    with a count and an example each, and where the report is (issue 49)."""
    ann_file = _small_coco(tmp_path, [1, 2, 3, 4])
    coco = json.loads(ann_file.read_text())
    for image in coco['images'][:3]:
        image['height'] = 'tall'
    coco['images'][3]['file_name'] = ''
    coco['annotations'].append(dict(coco['annotations'][3], id=99, bbox=[1, 1, -2, 3]))
    ann_file.write_text(json.dumps(coco))
    with pytest.raises(DataValidationError) as info:
        LazyCocoDataset(ann_file=str(ann_file), pipeline=[],
                        data_prefix=dict(img=str(tmp_path / 'img') + '/'))
    message = str(info.value)
    report = next(tmp_path.glob('*.problems.jsonl'))
    assert message.startswith(f'{ann_file} (image prefix ')
    assert 'the json lists 4 images and 5 instances; validation dropped 4 of the images and ' \
        '5 of the instances' in message
    assert "image_unreadable x3 (drop_image), e.g. image 1 annotation None file '0.jpg': json " \
        "size height='tall' width=32 is not two positive integers" in message
    assert 'image_record_invalid x1 (drop_image), e.g. image 4' in message
    assert 'bbox_invalid x1 (drop_instance), e.g. image 4 annotation 99' in message
    assert message.index('image_unreadable x3') < message.index('image_record_invalid x1')
    assert str(report) in message and 'nothing to train on' in message
    assert 'lists no images' not in message


def test_keys_for_string_ids_never_collide_with_large_integer_ids(tmp_path):
    """The keys given to ids that are not integers start past the largest integer id, computed
    in int64: through float64, 2^62 + 1 would round to 2^62 and the key would be its own."""
    ids = [(1 << 62) + 1, 'a', (1 << 62) - 1]
    ann_file = _small_coco(tmp_path, ids)
    dataset = LazyCocoDataset(ann_file=str(ann_file), pipeline=[],
                              data_prefix=dict(img=str(tmp_path / 'img') + '/'))
    assert len(set(dataset.store['image_id'].tolist())) == 3
    samples = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert [s['img_id'] for s in samples] == ids
    assert [len(s['instances']) for s in samples] == [1, 1, 1]
