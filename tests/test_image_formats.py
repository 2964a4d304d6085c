"""Every image format OpenCV decodes for training data is read, validated and loaded as mmcv loads it.

Real files from ``cv2.imwrite`` (WebP lossy and lossless, TIFF, BMP, PPM/PGM/PBM, JPEG 2000): the
header gives the size ``cv2.imdecode`` decodes to; a truncated copy is refused naming the format
and the problem; a ``LazyCocoDataset`` keeps the valid ones and yields mmcv's
``LoadImageFromFile`` pixels, and drops the truncated ones with a record naming the file.
"""
import json
import struct
from pathlib import Path

import cv2
import numpy as np
import pytest
from mmcv.transforms import LoadImageFromFile

from mmdet_ext.datasets import LazyCocoDataset, validate_coco
from mmdet_ext.datasets.validation import HEAD_BYTES, TAIL_BYTES
from mmdet_ext.io import BytesNotRead, FileBytes, ImageHeaderError, read_image_header
from mmdet_ext.transforms import NativeLoadImageFromFile
from mmdet_ext.transforms.loading import ImageLoadError

# name -> (extension, imwrite params, channels, format read_image_header names)
KINDS = {
    'webp_lossy': ('.webp', [cv2.IMWRITE_WEBP_QUALITY, 80], 3, 'webp'),
    'webp_lossless': ('.webp', [cv2.IMWRITE_WEBP_QUALITY, 101], 3, 'webp'),
    'tiff': ('.tiff', [], 3, 'tiff'),
    'tif_gray': ('.tif', [], 1, 'tiff'),
    'bmp': ('.bmp', [], 3, 'bmp'),
    'bmp_gray': ('.bmp', [], 1, 'bmp'),
    'ppm': ('.ppm', [], 3, 'pnm'),
    'pgm': ('.pgm', [], 1, 'pnm'),
    'pbm': ('.pbm', [], 1, 'pnm'),
    'jp2': ('.jp2', [], 3, 'jpeg2000'),
}
HEIGHT, WIDTH = 37, 53  # OpenJPEG's default 6 resolution levels need 32 px a side


def _pixels(channels: int, seed: int = 0, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (height, width, channels), np.uint8)
    return image[:, :, 0] if channels == 1 else image


def _write(directory: Path, kind: str, stem: str = 'image', **size) -> Path:
    ext, params, channels, _ = KINDS[kind]
    path = directory / f'{stem}{ext}'
    assert cv2.imwrite(str(path), _pixels(channels, **size), params)
    return path


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_header_gives_the_decoded_size(tmp_path, kind):
    path = _write(tmp_path, kind)
    data = path.read_bytes()
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    assert read_image_header(data) == (KINDS[kind][3], *decoded.shape[:2])
    with pytest.raises(ImageHeaderError, match=f'declares {HEIGHT}x{WIDTH} = .* more than '
                                               'max_pixels=100 .*decompression bomb'):
        read_image_header(data, max_pixels=100)


@pytest.mark.parametrize('kind', sorted(KINDS))
def test_truncated_file_is_refused(tmp_path, kind):
    data = _write(tmp_path, kind).read_bytes()
    cut = tmp_path / f'cut{KINDS[kind][0]}'
    cut.write_bytes(data[:len(data) * 2 // 3])
    fmt = {'pnm': 'PNM', 'jpeg2000': 'JPEG 2000', 'webp': 'WebP'}.get(KINDS[kind][3],
                                                                      KINDS[kind][3].upper())
    with pytest.raises(ImageHeaderError, match=f'truncated {fmt}'):
        read_image_header(cut.read_bytes())
    with pytest.raises(ImageLoadError, match=f'cannot load {cut}: truncated {fmt}'):
        NativeLoadImageFromFile()({'img_path': str(cut)})


@pytest.mark.parametrize('header, problem', [
    # BMP: info header declaring 60000 x 60000, 24 bpp, no pixels
    (b'BM' + struct.pack('<IHHII', 54, 0, 0, 54, 40) + struct.pack('<iiHHI', 60000, 60000, 1, 24, 0)
     + b'\0' * 20, 'BMP header declares 60000x60000'),
    # WebP VP8X canvas of 60000 x 60000 in a 30-byte file
    (b'RIFF' + struct.pack('<I', 22) + b'WEBPVP8X' + struct.pack('<I', 10) + b'\0' * 4
     + (59999).to_bytes(3, 'little') * 2, 'WEBP header declares 60000x60000'),
    # TIFF with ImageWidth = ImageLength = 60000 and one 1-byte strip
    (b'II*\0' + struct.pack('<I', 8) + struct.pack('<H', 4)
     + b''.join(struct.pack('<HHII', tag, 4, 1, value)
                for tag, value in ((256, 60000), (257, 60000), (273, 0), (279, 1)))
     + b'\0' * 4, 'TIFF header declares 60000x60000'),
    (b'P5\n60000 60000\n255\n' + b'\0' * 10, 'PNM header declares 60000x60000'),
])
def test_decompression_bomb_headers_are_refused_before_decoding(tmp_path, header, problem):
    with pytest.raises(ImageHeaderError, match=f'{problem} = 3600000000 pixels, more than'):
        read_image_header(header)
    path = tmp_path / 'bomb.img'
    path.write_bytes(header)
    with pytest.raises(ImageLoadError, match=f'cannot load {path}: .*decompression bomb'):
        NativeLoadImageFromFile()({'img_path': str(path)})


@pytest.mark.parametrize('data, problem', [
    (b'RIFF' + struct.pack('<I', 30) + b'WEBPVP8 ' + b'\0' * 14, 'not start with a key frame'),
    (b'RIFF' + struct.pack('<I', 30) + b'WEBPABCD' + b'\0' * 14, "first chunk b'ABCD'"),
    (b'II*\0' + struct.pack('<I', 1000), 'first directory is at byte 1000, past the end'),
    (b'II*\0' + struct.pack('<I', 8) + struct.pack('<H', 0), 'no ImageWidth/ImageLength'),
    (b'BM' + b'\0' * 12 + struct.pack('<I', 20) + b'\0' * 30, 'info header of 20 bytes'),
    (b'P6\n12 x\n', 'corrupt or truncated PNM header'),
])
def test_corrupt_headers_are_named(data, problem):
    with pytest.raises(ImageHeaderError, match=problem):
        read_image_header(data)


def test_a_header_outside_head_and_tail_is_read_from_the_whole_file(tmp_path):
    """A TIFF directory between the bytes validation reads first: it asks for the whole file."""
    path = _write(tmp_path, 'tiff', height=300, width=400)
    data = path.read_bytes()
    (ifd,) = struct.unpack('<I', data[4:8])
    # Move the directory's target out of both windows by pretending the file is in two parts.
    partial = FileBytes(data[:64], data[-8:], len(data))
    assert 64 < ifd < len(data) - 8
    with pytest.raises(BytesNotRead):
        read_image_header(partial)
    assert len(data) > HEAD_BYTES + TAIL_BYTES
    coco = _coco([path.name], [(300, 400)])
    _, report = validate_coco(coco, str(tmp_path))
    assert report.problems == []


def _coco(names: list, sizes: list) -> dict:
    images = [{'id': i + 1, 'file_name': name, 'height': h, 'width': w}
              for i, (name, (h, w)) in enumerate(zip(names, sizes))]
    anns = [{'id': i + 1, 'image_id': i + 1, 'category_id': 1, 'bbox': [2.0, 2.0, 10.0, 8.0], 'area': 80.0,
                 'iscrowd': 0, 'segmentation': [[2.0, 2.0, 12.0, 2.0, 12.0, 10.0, 2.0, 10.0]]}
            for i in range(len(names))]
    return {'images': images, 'annotations': anns, 'categories': [{'id': 1, 'name': 'thing'}]}


@pytest.mark.parametrize('reader', ['native', 'python'])
def test_dataset_keeps_valid_formats_and_drops_truncated_ones(tmp_path, monkeypatch, reader):
    monkeypatch.setenv('MMDET_EXT_JSON_READER', reader)
    images = tmp_path / 'img'
    images.mkdir()
    names, truncated = [], []
    for kind in sorted(KINDS):
        names.append(_write(images, kind, stem=kind).name)
        cut = images / f'{kind}_cut{KINDS[kind][0]}'
        data = (images / names[-1]).read_bytes()
        cut.write_bytes(data[:len(data) // 2])
        truncated.append(cut.name)
    ann_file = tmp_path / 'ann.json'
    ann_file.write_text(json.dumps(_coco(names + truncated, [(HEIGHT, WIDTH)] * 2 * len(names))))
    dataset = LazyCocoDataset(ann_file=str(ann_file), data_prefix={'img': str(images) + '/'},
                              metainfo={'classes': ('thing',)},
                              pipeline=[NativeLoadImageFromFile()])
    assert len(dataset) == len(names)
    reference = LoadImageFromFile()
    for index, name in enumerate(names):
        sample = dataset[index]
        assert sample['img_path'] == str(images / name)
        expected = reference({'img_path': str(images / name)})['img']
        np.testing.assert_array_equal(sample['img'], expected)
    problems = [json.loads(line) for line in
                Path(dataset.store.path + '.problems.jsonl').read_text().splitlines()]
    assert sorted(Path(p['file']).name for p in problems) == sorted(truncated)
    assert all(p['kind'] == 'image_unreadable' and p['action'] == 'drop_image' and
               'truncated' in p['reason'] for p in problems)
