"""Full-resolution instance-mask decoding: mmdet_ext's native ops against pycocotools.

The pycocotools side is what mmdet's LoadAnnotations(poly2mask=True) does per instance:
``decode(merge(frPyObjects(polygons, h, w)))`` for polygons, ``decode(rle)`` for compressed RLE
and ``decode(frPyObjects(rle, h, w))`` for uncompressed RLE. The native side decodes all the
instances of one image in one call (``polygons_to_masks`` / ``rle_decode_batch``) into a
(N, H, W) uint8 tensor; its timing includes packing the Python annotations into tensors, and the
"pre-packed" rows show the same call on tensors an annotation store would already hold. Both
sides run on one thread and produce identical pixels (checked before timing).

    PYTHONPATH=. python benchmarks/mask_decode.py [--images 100] [--repeat 5] [--out benchmarks/results/mask_decode.md]
"""
import argparse
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from pycocotools import mask as mask_utils

from benchmarks import write_report
import mmdet_ext  # noqa: F401  (registers torch.ops.mmdet_ext)
from mmdet_ext import ops
from mmdet_ext.toy_data import make_toy_coco

HEIGHT, WIDTH = 480, 640


def toy_images(num_images: int) -> list[dict]:
    """Images of the toy COCO dataset at 640x480: polygons and compressed crowd RLE."""
    with tempfile.TemporaryDirectory() as root:
        summary = make_toy_coco(root, num_train=num_images, num_val=0, width=WIDTH,
                                height=HEIGHT)
        data = json.loads(Path(summary['train']['json']).read_text())
    images = defaultdict(lambda: {'polygons': [], 'rles': []})
    for ann in data['annotations']:
        seg = ann['segmentation']
        if isinstance(seg, list):
            images[ann['image_id']]['polygons'].append(seg)
        else:
            images[ann['image_id']]['rles'].append(seg)
    return list(images.values())


def synthetic_images(num_images: int, seed: int = 0) -> list[dict]:
    """COCO-like polygons: 2-12 instances per image, 1-3 parts of 8-80 vertices, 10-300 px."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(num_images):
        polygons = []
        for _ in range(int(rng.integers(2, 13))):
            size = rng.uniform(10, 300)
            centre = rng.uniform([0, 0], [WIDTH, HEIGHT])
            parts = []
            for _ in range(int(rng.integers(1, 4))):
                k = int(rng.integers(8, 81))
                angles = np.sort(rng.uniform(0, 2 * np.pi, k))
                radii = size / 2 * rng.uniform(0.5, 1.0, k)
                offset = rng.normal(0, size / 4, 2)
                xy = centre + offset + np.stack([radii * np.cos(angles),
                                                 radii * np.sin(angles)], 1)
                parts.append(np.round(xy, 2).ravel().tolist())
            polygons.append(parts)
        # every polygon instance also as compressed and uncompressed RLE
        rles = [mask_utils.merge(mask_utils.frPyObjects(p, HEIGHT, WIDTH)) for p in polygons]
        uncompressed = [{'size': [HEIGHT, WIDTH],
                         'counts': ops.rle_from_string(r['counts'], HEIGHT, WIDTH).tolist()}
                        for r in rles]
        images.append({'polygons': polygons, 'rles': rles, 'uncompressed': uncompressed})
    return images


# ----------------------------------------------------------------------------- decoders
def coco_polygons(image: dict) -> list[np.ndarray]:
    return [mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(p, HEIGHT, WIDTH)))
            for p in image['polygons']]


def native_polygons(image: dict) -> torch.Tensor:
    return ops.polygons_to_masks(*ops.pack_polygons(image['polygons']), HEIGHT, WIDTH)


def coco_rles(image: dict) -> list[np.ndarray]:
    return [mask_utils.decode(r) for r in image['rles']]


def native_rles(image: dict) -> torch.Tensor:
    counts = [ops.rle_from_string(r['counts'], HEIGHT, WIDTH) for r in image['rles']]
    return ops.rle_decode_batch(*ops.pack_counts(counts), HEIGHT, WIDTH)


def coco_uncompressed(image: dict) -> list[np.ndarray]:
    return [mask_utils.decode(mask_utils.frPyObjects(r, HEIGHT, WIDTH))
            for r in image['uncompressed']]


def native_uncompressed(image: dict) -> torch.Tensor:
    # np.asarray converts a list of Python ints about twice as fast as torch.tensor
    counts = [torch.from_numpy(np.asarray(r['counts'], dtype=np.int32))
              for r in image['uncompressed']]
    return ops.rle_decode_batch(*ops.pack_counts(counts), HEIGHT, WIDTH)


def best_times(fns, items, repeat: int) -> list[float]:
    """Best wall time of one pass over items, per function; passes alternate between the
    functions so that both see the same load on a shared machine."""
    best = [float('inf')] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            for item in items:
                fn(item)
            best[k] = min(best[k], time.perf_counter() - start)
    return best


def check_equal(coco_fn, native_fn, images: list[dict]) -> None:
    for image in images:
        expected = coco_fn(image)
        got = native_fn(image).numpy()
        assert got.shape == (len(expected), HEIGHT, WIDTH)
        for mask, ref in zip(got, expected):
            np.testing.assert_array_equal(mask, ref)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=100, help='images per dataset')
    parser.add_argument('--repeat', type=int, default=5, help='timed passes; the best is kept')
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/mask_decode.md'))
    args = parser.parse_args()
    torch.set_num_threads(1)

    toy = toy_images(args.images)
    synthetic = synthetic_images(args.images)
    pre_packed_polygons = [ops.pack_polygons(image['polygons']) for image in synthetic]
    pre_packed_rles = [ops.pack_counts([torch.tensor(r['counts'], dtype=torch.int32)
                                        for r in image['uncompressed']]) for image in synthetic]
    cases = [
        ('toy COCO polygons', toy, coco_polygons, native_polygons, 'polygons'),
        ('toy COCO crowd RLE (compressed)', [i for i in toy if i['rles']], coco_rles,
         native_rles, 'rles'),
        ('synthetic polygons', synthetic, coco_polygons, native_polygons, 'polygons'),
        ('synthetic RLE (compressed)', synthetic, coco_rles, native_rles, 'rles'),
        ('synthetic RLE (uncompressed)', synthetic, coco_uncompressed, native_uncompressed,
         'uncompressed'),
    ]
    rows = []
    for name, images, coco_fn, native_fn, key in cases:
        check_equal(coco_fn, native_fn, images)
        instances = sum(len(image[key]) for image in images)
        coco_s, native_s = best_times([coco_fn, native_fn], images, args.repeat)
        rows.append((name, len(images), instances, instances / coco_s, instances / native_s))
    for name, packed, fn, coco_fn in [
        ('synthetic polygons, pre-packed', pre_packed_polygons,
         lambda p: ops.polygons_to_masks(*p, HEIGHT, WIDTH), coco_polygons),
        ('synthetic RLE, pre-packed counts', pre_packed_rles,
         lambda p: ops.rle_decode_batch(*p, HEIGHT, WIDTH), coco_uncompressed),
    ]:
        instances = sum(len(p[-1]) for p in packed)
        coco_s, native_s = best_times([lambda i: coco_fn(synthetic[i]), lambda i: fn(packed[i])],
                                      range(len(packed)), args.repeat)
        rows.append((name, len(packed), instances, instances / coco_s, instances / native_s))

    lines = [
        '# Full-resolution mask decoding: native vs pycocotools',
        '',
        f'Command: `PYTHONPATH=. python {" ".join(sys.argv)}` (from the repository root; '
        'PYTHONPATH picks this checkout over an installed mmdet_ext)',
        '',
        f'Machine: {platform.processor() or platform.machine()}, '
        f'{torch.get_num_threads()} torch thread, Python {platform.python_version()}, '
        f'torch {torch.__version__}, numpy {np.__version__}. Images {WIDTH}x{HEIGHT}; '
        f'best of {args.repeat} passes; outputs checked pixel-identical first.',
        '',
        'pycocotools = what mmdet LoadAnnotations does per instance '
        '(`decode(merge(frPyObjects(...)))`, `decode(rle)`); native = one call per image '
        'returning (N, H, W) uint8, including packing the Python annotations into tensors '
        '(except the pre-packed rows: tensors as an annotation store would hold them, against '
        'pycocotools on the same polygons / uncompressed RLE).',
        '',
        '| data | images | instances | pycocotools inst/s | native inst/s | speed-up |',
        '|---|---:|---:|---:|---:|---:|',
    ]
    for name, num_images, instances, coco_rate, native_rate in rows:
        lines.append(f'| {name} | {num_images} | {instances} | {coco_rate:,.0f} | '
                     f'{native_rate:,.0f} | {native_rate / coco_rate:.1f}x |')
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
