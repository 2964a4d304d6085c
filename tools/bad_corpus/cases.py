"""The bad-input corpus: every kind, how to make it, and what must happen.

Expected outcomes (``Case.expected``):

- ``error``: building or loading stops with an error whose message contains every string of
  ``names`` (the file, and the record where there is one); ``is_a`` names an upstream exception
  class the error must also be an instance of.
- ``drop``: the store's validation records the problem (a ``problems.jsonl`` entry containing
  every string of ``names``), leaves the bad data out, and every other sample loads.
- ``skip``: a load-time failure: ``on_bad_sample='raise'`` stops with an error naming the file;
  ``'skip'`` records it in ``bad_samples.jsonl`` (naming the file) and training goes on.
- ``loads``: valid but unusual: every sample loads, and is right.

Every loaded sample is also checked for what would train silently wrong (judge.py): an image
whose decoded size is not the json's, a non-finite box, an empty mask under a non-empty box.
"""
import json
import os
import socket
import struct
import zlib
from pathlib import Path
from typing import Callable

import cv2
import numpy as np
from PIL import Image

from .base_data import (ANN_FILE, HEIGHT, IMG_DIR, WIDTH, base_coco, jpeg_bytes, png_bytes, rect,
                        write_base, write_json)
from .case import Case
from .checkpoint_cases import CHECKPOINT_CASES


def _image(image_id: int) -> str:
    return f'{IMG_DIR}/{image_id:06d}.jpg'


def _replace_image(image_id: int, make: Callable[[Path], None]) -> Callable[[Path], dict]:
    """Write the base dataset, then let ``make`` replace (or remove) image ``image_id``."""
    def build(case_dir: Path) -> dict:
        write_base(case_dir)
        path = case_dir / _image(image_id)
        path.unlink()
        make(path)
        return {}
    return build


def _write(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _edit_json(edit: Callable[[dict], None], write_images: bool = True) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        coco = base_coco()
        if write_images:
            write_base(case_dir, coco)
        edit(coco)
        write_json(case_dir, coco)
        return {}
    return build


def _raw_json(text: bytes) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        write_base(case_dir)
        (case_dir / ANN_FILE).write_bytes(text)
        return {}
    return build


def _ann(coco: dict, ann_id: int) -> dict:
    return next(a for a in coco['annotations'] if a['id'] == ann_id)


def _set_ann(ann_id: int, **values) -> Callable[[dict], None]:
    return lambda coco: _ann(coco, ann_id).update(values)


def _png_declaring(height: int, width: int, crc_ok: bool = True) -> bytes:
    def chunk(kind: bytes, payload: bytes) -> bytes:
        crc = zlib.crc32(kind + payload) ^ (0 if crc_ok else 1)
        return struct.pack('>I', len(payload)) + kind + payload + struct.pack('>I', crc)
    raw = b''.join(b'\0' + b'\x80' * width for _ in range(min(height, 4)))
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', struct.pack('>IIBBBBB', width, height, 8, 0, 0,
                                                               0, 0))
            + chunk(b'IDAT', zlib.compress(raw)) + chunk(b'IEND', b''))


def _pil_bytes(mode: str, fmt: str, **save) -> bytes:
    import io
    rng = np.random.default_rng(3)
    image = Image.fromarray(rng.integers(0, 255, (HEIGHT, WIDTH, 3), dtype=np.uint8))
    image = image.convert(mode)
    out = io.BytesIO()
    image.save(out, fmt, **save)
    return out.getvalue()


def _exif_rotated_jpeg() -> bytes:
    """A 24x32 JPEG whose EXIF says 'rotate 90' (orientation 6): decoders may turn it to 32x24."""
    import io
    image = Image.fromarray(cv2.cvtColor(cv2.imdecode(np.frombuffer(jpeg_bytes(seed=9), np.uint8),
                                                      cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
    exif = Image.Exif()
    exif[0x0112] = 6
    out = io.BytesIO()
    image.save(out, 'JPEG', exif=exif.tobytes())
    return out.getvalue()


def _corrupt_scan_jpeg() -> bytes:
    """A complete JPEG (SOI..EOI) whose entropy-coded data is damaged mid-scan."""
    data = bytearray(jpeg_bytes(seed=5, IMWRITE_JPEG_QUALITY=95))
    sos = data.index(b'\xff\xda')
    for i in range(sos + 20, len(data) - 4, 7):
        data[i] = 0xFF if data[i + 1] != 0 else data[i]
    data[-40:-2] = b'\xff\xd0' * 19
    return bytes(data)


def _huge_exif_jpeg() -> bytes:
    """A valid JPEG whose frame header comes after a 40 KiB APP1 block."""
    data = jpeg_bytes(seed=6)
    app = b'\xff\xe1' + struct.pack('>H', 40002) + b'Exif\0\0' + b'\0' * 39994
    return data[:2] + app + data[2:]


def _encoded(ext: str, *params: int, height: int = HEIGHT, width: int = WIDTH) -> bytes:
    """An image in the format of ``ext``, as cv2.imwrite writes it (mmcv's own writer)."""
    image = cv2.imdecode(np.frombuffer(jpeg_bytes(height, width, seed=2), np.uint8),
                         cv2.IMREAD_COLOR)
    ok, data = cv2.imencode(ext, image, list(params))
    assert ok
    return data.tobytes()


def _half(data: bytes) -> bytes:
    return data[:len(data) // 2]


def _corrupt(data: bytes, offset: int, replacement: bytes) -> bytes:
    return data[:offset] + replacement + data[offset + len(replacement):]


def _named_image(ext: str, data: Callable[[], bytes], **size: int) -> Callable[[Path], dict]:
    """The base dataset with image 2 replaced by ``data()``, named ``000002<ext>`` in the json
    (and of ``height``/``width`` there, when given)."""
    def build(case_dir: Path) -> dict:
        coco = base_coco()
        write_base(case_dir, coco)
        (case_dir / _image(2)).unlink()
        coco['images'][1].update(file_name=f'000002{ext}', **size)
        (case_dir / IMG_DIR / f'000002{ext}').write_bytes(data())
        write_json(case_dir, coco)
        return {}
    return build


def _json_text(edit: Callable[[dict], None], old: bytes, new: bytes) -> Callable[[Path], dict]:
    """``edit`` the json, then replace ``old`` by ``new`` in its text (numbers json.dumps cannot
    write, such as 1e400)."""
    def build(case_dir: Path) -> dict:
        _edit_json(edit)(case_dir)
        path = case_dir / ANN_FILE
        path.write_bytes(path.read_bytes().replace(old, new))
        return {}
    return build


def _mkfifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # left bound: the file stays a socket for the case's lifetime


def _self_loop(path: Path) -> None:
    os.symlink(path.name, path)


def _png_mask(write_mask: bool) -> Callable[[Path], dict]:
    """Annotation 21's mask as a per-instance PNG: written (valid) or not (missing)."""
    def build(case_dir: Path) -> dict:
        coco = base_coco()
        write_base(case_dir, coco)
        if write_mask:
            mask = np.zeros((HEIGHT, WIDTH), np.uint8)
            mask[4:12, 4:20] = 255
            (case_dir / 'masks' / 'm21.png').write_bytes(png_bytes(mask))
        ann = _ann(coco, 21)
        del ann['segmentation']
        ann['mask_file'] = 'masks/m21.png'
        write_json(case_dir, coco)
        return {}
    return build


def _wrong_prefix(case_dir: Path) -> dict:
    write_base(case_dir)
    return {'img_prefix': 'images/'}


def _ann_file_is(make: Callable[[Path], None]) -> Callable[[Path], dict]:
    def build(case_dir: Path) -> dict:
        write_base(case_dir)
        (case_dir / ANN_FILE).unlink()
        make(case_dir / ANN_FILE)
        return {}
    build.leaves_no_json = True  # tests that read the json leave such cases out
    return build


def _unicode_names(case_dir: Path) -> dict:
    coco = base_coco()
    coco['images'][1]['file_name'] = 'été ü 猫.jpg'
    write_base(case_dir, coco)
    return {}


def _noncontiguous_categories(coco: dict) -> None:
    coco['categories'] = [{'id': 90, 'name': 'person'}, {'id': 5, 'name': 'car'}]
    for ann in coco['annotations']:
        ann['category_id'] = 90 if ann['category_id'] == 1 else 5


def _drop_anns_of(image_id: int) -> Callable[[dict], None]:
    def edit(coco: dict) -> None:
        coco['annotations'] = [a for a in coco['annotations'] if a['image_id'] != image_id]
    return edit


def _string_image_id(coco: dict) -> None:
    coco['images'][1]['id'] = 'two'
    for ann in coco['annotations']:
        if ann['image_id'] == 2:
            ann['image_id'] = 'two'


def _duplicate(key: str) -> Callable[[dict], None]:
    def edit(coco: dict) -> None:
        if key == 'images':
            coco['images'][1]['id'] = 1
        else:
            _ann(coco, 21)['id'] = 11
    return edit


IMAGE_CASES = [
    Case('image missing', 'image', 'skip', _replace_image(2, lambda p: None), (_image(2),),
         is_a='FileNotFoundError', note='kept at init as mmdet keeps it; loading it fails'),
    Case('image zero bytes', 'image', 'drop', _replace_image(2, _write(b'')), (_image(2), 'empty')),
    Case('truncated JPEG', 'image', 'drop',
         _replace_image(2, _write(jpeg_bytes(seed=2)[:300])), (_image(2), 'truncated')),
    Case('truncated PNG', 'image', 'drop',
         _replace_image(2, _write(png_bytes(np.zeros((HEIGHT, WIDTH, 3), np.uint8))[:40])),
         (_image(2), 'PNG')),
    Case('text file named .jpg', 'image', 'drop', _replace_image(2, _write(b'hello world\n' * 9)),
         (_image(2), 'not an image of a format read here')),
    Case('GIF named .jpg', 'image', 'drop', _replace_image(2, _write(_pil_bytes('P', 'GIF'))),
         (_image(2), 'not an image of a format read here'),
         note='no GIF decoder in OpenCV 4.6 nor in the opencv-python wheel mmcv uses'),
    Case('BMP named .jpg', 'image', 'loads', _replace_image(2, _write(_pil_bytes('RGB', 'BMP'))),
         note='decoders go by the content, not the name'),
    Case('WebP image (lossy)', 'image', 'loads',
         _named_image('.webp', lambda: _encoded('.webp', cv2.IMWRITE_WEBP_QUALITY, 80))),
    Case('WebP image (lossless)', 'image', 'loads',
         _named_image('.webp', lambda: _encoded('.webp', cv2.IMWRITE_WEBP_QUALITY, 101))),
    Case('TIFF image', 'image', 'loads', _named_image('.tif', lambda: _encoded('.tiff'))),
    Case('BMP image', 'image', 'loads', _named_image('.bmp', lambda: _encoded('.bmp'))),
    Case('PPM image', 'image', 'loads', _named_image('.ppm', lambda: _encoded('.ppm'))),
    Case('JPEG 2000 image', 'image', 'loads',
         _named_image('.jp2', lambda: _encoded('.jp2', height=40, width=48), height=40, width=48),
         note="40x48: OpenJPEG's default 6 resolution levels need 32 px a side"),
    Case('truncated WebP', 'image', 'drop',
         _named_image('.webp', lambda: _half(_encoded('.webp', cv2.IMWRITE_WEBP_QUALITY, 80))),
         ('000002.webp', 'truncated WebP')),
    Case('truncated TIFF', 'image', 'drop',
         _named_image('.tif', lambda: _encoded('.tiff')[:-200]), ('000002.tif', 'truncated TIFF')),
    Case('truncated BMP', 'image', 'drop',
         _named_image('.bmp', lambda: _half(_encoded('.bmp'))), ('000002.bmp', 'truncated BMP')),
    Case('WebP with a corrupt frame header', 'image', 'drop',
         _named_image('.webp', lambda: _corrupt(_encoded('.webp', cv2.IMWRITE_WEBP_QUALITY, 80),
                                                23, b'\0\0\0')),
         ('000002.webp', 'corrupt WebP'), note='the VP8 start code zeroed'),
    Case('named pipe as image', 'image', 'drop', _replace_image(2, _mkfifo),
         (_image(2), 'named pipe')),
    Case('unix socket as image', 'image', 'drop', _replace_image(2, _socket),
         (_image(2), 'socket')),
    Case('/dev/zero as image', 'image', 'drop',
         _replace_image(2, lambda p: os.symlink('/dev/zero', p)), (_image(2), 'character device')),
    Case('directory as image', 'image', 'drop', _replace_image(2, lambda p: p.mkdir()),
         (_image(2), 'directory')),
    Case('symlink loop as image', 'image', 'drop', _replace_image(2, _self_loop),
         (_image(2), 'symbolic links')),
    Case('image size differs from json', 'image', 'drop',
         _replace_image(2, _write(jpeg_bytes(20, 30, seed=2))), (_image(2), '20x30')),
    Case('PNG decompression bomb header', 'image', 'drop',
         _replace_image(2, _write(_png_declaring(60000, 60000))), (_image(2), 'decompression')),
    Case('JPEG with corrupt scan data', 'image', 'skip',
         _replace_image(2, _write(_corrupt_scan_jpeg())), (_image(2), 'corrupt')),
    Case('PNG with bad CRC', 'image', 'skip',
         _replace_image(2, _write(_png_declaring(HEIGHT, WIDTH, crc_ok=False))), (_image(2),)),
    Case('16-bit PNG', 'image', 'loads',
         _replace_image(2, lambda p: p.write_bytes(
             png_bytes(np.full((HEIGHT, WIDTH, 3), 40000, np.uint16))))),
    Case('JPEG with EXIF rotation', 'image', 'drop',
         _replace_image(2, _write(_exif_rotated_jpeg())), (_image(2), 'EXIF orientation'),
         note='decoders apply EXIF orientation: 24x32 in the header, 32x24 decoded'),
    Case('progressive JPEG', 'image', 'loads',
         _replace_image(2, _write(jpeg_bytes(seed=2, IMWRITE_JPEG_PROGRESSIVE=1)))),
    Case('CMYK JPEG', 'image', 'loads', _replace_image(2, _write(_pil_bytes('CMYK', 'JPEG')))),
    Case('grayscale JPEG', 'image', 'loads', _replace_image(2, _write(_pil_bytes('L', 'JPEG')))),
    Case('palette PNG', 'image', 'loads', _replace_image(2, _write(_pil_bytes('P', 'PNG')))),
    Case('RGBA PNG', 'image', 'loads', _replace_image(2, _write(_pil_bytes('RGBA', 'PNG')))),
    Case('JPEG with trailing garbage', 'image', 'loads',
         _replace_image(2, _write(jpeg_bytes(seed=2) + b'\0garbage' * 20))),
    Case('JPEG frame header after 40 KiB EXIF', 'image', 'loads',
         _replace_image(2, _write(_huge_exif_jpeg()))),
    Case('non-ASCII file name', 'image', 'loads', _unicode_names),
]


def _tiny_and_wide(coco: dict) -> None:
    coco['images'][0].update(height=1, width=1)
    _ann(coco, 11).update(bbox=[0, 0, 1, 1], area=1, segmentation=[rect(0, 0, 1, 1)])
    coco['images'][1].update(height=2, width=3000)
    _ann(coco, 21).update(bbox=[10, 0, 2000, 2], area=4000, segmentation=[rect(10, 0, 2010, 2)])


def _tiny_and_wide_files(case_dir: Path) -> dict:
    coco = base_coco()
    write_base(case_dir, coco)
    _tiny_and_wide(coco)
    (case_dir / _image(1)).write_bytes(jpeg_bytes(1, 1, seed=1))
    (case_dir / _image(2)).write_bytes(jpeg_bytes(2, 3000, seed=2))
    write_json(case_dir, coco)
    return {}


JSON_CASES = [
    Case('truncated json', 'json', 'error', lambda d: _raw_json(
        json.dumps(base_coco()).encode()[:500])(d), (ANN_FILE, 'truncated')),
    Case('empty json file', 'json', 'error', _raw_json(b''), (ANN_FILE,)),
    Case('json is a list', 'json', 'error', _raw_json(b'[1, 2]'), (ANN_FILE, 'list')),
    Case('json without "images"', 'json', 'error',
         _edit_json(lambda c: c.pop('images')), (ANN_FILE, 'images')),
    Case('json with no images', 'json', 'error',
         _edit_json(lambda c: c.update(images=[], annotations=[])), (ANN_FILE, 'no images')),
    Case('"annotations" is an object', 'json', 'error',
         _edit_json(lambda c: c.update(annotations={'a': 1})), (ANN_FILE, 'annotations')),
    Case('image record is a string', 'json', 'error',
         _edit_json(lambda c: c['images'].append('000005.jpg')), (ANN_FILE, 'images[4]')),
    Case('category without a name', 'json', 'error',
         _edit_json(lambda c: c['categories'][1].pop('name')), (ANN_FILE, 'categories[1]')),
    Case('raw latin-1 byte in a file name', 'json', 'error',
         lambda d: _raw_json(json.dumps(base_coco()).encode().replace(
             b'000002.jpg', b'\xe9t\xe9.jpg'))(d), (ANN_FILE, 'UTF-8', 'byte')),
    Case('UTF-16 json', 'json', 'error',
         lambda d: _raw_json(json.dumps(base_coco()).encode('utf-16'))(d), (ANN_FILE, 'UTF-8')),
    Case('deeply nested json', 'json', 'error', _raw_json(b'[' * 200000 + b']' * 200000),
         (ANN_FILE,)),
    Case('annotation file is a directory', 'json', 'error', _ann_file_is(lambda p: p.mkdir()),
         (ANN_FILE, 'directory')),
    Case('annotation file is a named pipe', 'json', 'error', _ann_file_is(_mkfifo),
         (ANN_FILE, 'named pipe')),
    Case('annotation file missing', 'json', 'error', _ann_file_is(lambda p: None), (ANN_FILE,),
         is_a='FileNotFoundError'),
    Case('surrogate-escaped file name', 'json', 'drop',
         _edit_json(lambda c: c['images'][1].update(file_name='\udce9t\udce9.jpg')),
         ('"image_id": 2', 'UTF-8')),
    Case('UTF-8 BOM before the json', 'json', 'loads',
         lambda d: _raw_json(b'\xef\xbb\xbf' + json.dumps(base_coco()).encode())(d)),
    Case('duplicate keys (last wins)', 'json', 'loads',
         lambda d: _raw_json(json.dumps(base_coco()).encode().replace(
             b'"height": 24', b'"height": 99, "height": 24'))(d)),
    Case('no "annotations" key', 'json', 'loads', _edit_json(lambda c: c.pop('annotations'))),
    Case('images without annotations', 'json', 'loads', _edit_json(_drop_anns_of(2))),
    Case('non-contiguous category ids', 'json', 'loads', _edit_json(_noncontiguous_categories)),
    Case('1x1 and 2x3000 images', 'json', 'loads', _tiny_and_wide_files),
]

ANNOTATION_CASES = [
    Case('duplicate annotation id', 'annotation', 'error', _edit_json(_duplicate('annotations')),
         ('duplicate_ann_id', 'annotation 11'), is_a='AssertionError'),
    Case('duplicate image id', 'annotation', 'error', _edit_json(_duplicate('images')),
         ('duplicate_image_id', 'image 1')),
    # pycocotools and mmdet take any hashable id: so do we (issue 49).
    Case('string image id', 'annotation', 'loads', _edit_json(_string_image_id),
         note='img_id is the json\'s string'),
    Case('string annotation id', 'annotation', 'loads',
         _edit_json(_set_ann(21, id='twenty-one'))),
    Case('annotation id beyond int64', 'annotation', 'loads',
         _edit_json(_set_ann(21, id=2 ** 70))),
    Case('boolean annotation id', 'annotation', 'loads', _edit_json(_set_ann(21, id=True))),
    Case('image height is a string', 'annotation', 'drop',
         _edit_json(lambda c: c['images'][1].update(height='24')), ('"image_id": 2',)),
    Case('huge image size in json', 'annotation', 'drop',
         _edit_json(lambda c: c['images'][1].update(height=10 ** 12, width=10 ** 12)),
         ('"image_id": 2', 'max_pixels')),
    Case('negative bbox width', 'annotation', 'drop',
         _edit_json(_set_ann(21, bbox=[4, 4, -16, 8])), ('"ann_id": 21', 'bbox_invalid')),
    Case('NaN bbox', 'annotation', 'drop',
         _edit_json(_set_ann(21, bbox=[4, float('nan'), 16, 8])), ('"ann_id": 21', 'finite')),
    Case('infinite bbox', 'annotation', 'drop',
         _edit_json(_set_ann(21, bbox=[4, 4, float('inf'), 8])), ('"ann_id": 21',)),
    Case('bbox of 1e400 (too big for a double)', 'annotation', 'drop',
         _json_text(_set_ann(21, bbox=[4, 4, float('inf'), 8]), b'Infinity', b'1e400'),
         ('"ann_id": 21', 'not finite'), note='json.loads reads inf, as for Infinity'),
    Case('polygon coordinate of -1e400', 'annotation', 'drop',
         _json_text(_set_ann(21, segmentation=[[4, 4, 20, float('-inf'), 20, 12]]),
                    b'-Infinity', b'-1e400'), ('"ann_id": 21', 'non-finite')),
    Case('bbox of 1e30', 'annotation', 'drop', _edit_json(_set_ann(21, bbox=[4, 4, 1e30, 8])),
         ('"ann_id": 21', 'outside')),
    Case('bbox of 3 numbers', 'annotation', 'drop', _edit_json(_set_ann(21, bbox=[4, 4, 16])),
         ('"ann_id": 21',)),
    Case('bbox of strings', 'annotation', 'drop',
         _edit_json(_set_ann(21, bbox=['4', '4', '16', '8'])), ('"ann_id": 21',)),
    Case('unknown image_id', 'annotation', 'drop', _edit_json(_set_ann(21, image_id=77)),
         ('"ann_id": 21', 'unknown_image_id')),
    Case('unknown category_id', 'annotation', 'drop', _edit_json(_set_ann(21, category_id=77)),
         ('"ann_id": 21', 'unknown_category_id')),
    Case('string category_id', 'annotation', 'drop', _edit_json(_set_ann(21, category_id='1')),
         ('"ann_id": 21',)),
    Case('iscrowd = 2', 'annotation', 'drop', _edit_json(_set_ann(21, iscrowd=2)),
         ('"ann_id": 21', 'iscrowd')),
    Case('area is a string', 'annotation', 'drop', _edit_json(_set_ann(21, area='big')),
         ('"ann_id": 21', 'area')),
    Case('empty segmentation list', 'annotation', 'drop', _edit_json(_set_ann(21, segmentation=[])),
         ('"ann_id": 21', 'empty list'), note='mmdet makes it an ignore region, unrecorded'),
    Case('segmentation is a string', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation='4 4 20 12')), ('"ann_id": 21',)),
    Case('polygon entirely outside the image', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[rect(40, 30, 60, 40)])),
         ('"ann_id": 21', 'outside'), note='box inside, polygon outside: an empty mask'),
    Case('polygon of zero area', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[[4, 4, 12, 4, 20, 4]])),
         ('"ann_id": 21', 'mask_empty')),
    Case('polygon with 2 points', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[[4, 4, 20, 12]])), ('"ann_id": 21', 'fewer than 3')),
    Case('polygon with an odd coordinate count', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[[4, 4, 20, 4, 20]])), ('"ann_id": 21', 'odd')),
    Case('NaN polygon coordinate', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[[4, 4, 20, float('nan'), 20, 12]])),
         ('"ann_id": 21', 'non-finite')),
    Case('polygon coordinate of 1e12', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[[4, 4, 1e12, 4, 20, 12]])),
         ('"ann_id": 21', 'beyond')),
    Case('polygon of strings', 'annotation', 'drop',
         _edit_json(_set_ann(21, segmentation=[['4', '4', '20', '4', '20', '12']])),
         ('"ann_id": 21',)),
    Case('polygon partly outside the image', 'annotation', 'loads',
         _edit_json(_set_ann(21, segmentation=[rect(-50, -50, 20, 12)], bbox=[0, 0, 20, 12]))),
    Case('RLE counts not summing to h*w', 'annotation', 'drop',
         _edit_json(_set_ann(32, segmentation={'size': [HEIGHT, WIDTH], 'counts': [5, 10, 7]})),
         ('"ann_id": 32', 'sum')),
    Case('corrupt compressed RLE string', 'annotation', 'drop',
         _edit_json(_set_ann(32, segmentation={'size': [HEIGHT, WIDTH], 'counts': '\x7f\x00ZZ'})),
         ('"ann_id": 32',)),
    Case('RLE size differs from the image', 'annotation', 'drop',
         _edit_json(_set_ann(32, segmentation={'size': [10, 10], 'counts': [100]})),
         ('"ann_id": 32', 'differs')),
    Case('RLE of an empty mask', 'annotation', 'drop',
         _edit_json(_set_ann(32, segmentation={'size': [HEIGHT, WIDTH],
                                               'counts': [HEIGHT * WIDTH]})),
         ('"ann_id": 32', 'no pixel')),
    Case('uncompressed crowd RLE', 'annotation', 'loads',
         _edit_json(_set_ann(32, segmentation={'size': [HEIGHT, WIDTH],
                                               'counts': [50, 100, HEIGHT * WIDTH - 150]}))),
    Case('per-instance PNG mask missing', 'annotation', 'drop', _png_mask(False),
         ('"ann_id": 21', 'masks/m21.png')),
    Case('per-instance PNG mask', 'annotation', 'loads', _png_mask(True)),
]

DATASET_CASES = [
    Case('wrong data_prefix (every image missing)', 'dataset', 'error', _wrong_prefix,
         ('images/', 'images/000001.jpg'), is_a='FileNotFoundError'),
]

DATA_CASES = IMAGE_CASES + JSON_CASES + ANNOTATION_CASES + DATASET_CASES
ALL_CASES = DATA_CASES + CHECKPOINT_CASES
