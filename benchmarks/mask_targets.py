"""Mask R-CNN mask targets: LazyInstanceMasks.crop_and_resize against mmdet's mask structures.

Per image, mmdet's ``mask_target_single`` calls ``gt_masks.crop_and_resize(proposals, (28, 28),
inds).to_ndarray()`` on the positive ROIs (128 with the default sampler) after clipping them to
the image. This times that call on COCO-like images of 1067x800 (a 640x480 COCO image after the
1333x800 resize) for:

- mmdet ``BitmapMasks`` (``LoadAnnotations(poly2mask=True)``): roi_align on full-image bitmaps
  (the decoding to bitmaps, done earlier in the pipeline, is not timed);
- mmdet ``PolygonMasks`` (``poly2mask=False``): polygons moved into each box in Python, then
  rasterised at 28x28 by pycocotools; images without RLE only, since mmdet drops RLE masks there;
- ``LazyInstanceMasks`` before the native crop path (``PolygonMasks`` arithmetic for polygons,
  then one native rasterisation; one ``BitmapMasks`` per box for RLEs) and after it (one native
  call per mask kind per image).

The two mmdet structures give different pixels (roi_align on a bitmap is not rasterising a moved
polygon); LazyInstanceMasks gives PolygonMasks' for polygons and BitmapMasks' for RLEs, and the
script asserts that before and after are identical and equal to those, before timing.

    PYTHONPATH=. python benchmarks/mask_targets.py [--images 20] [--repeat 5] [--threads 1]
        [--device cpu] [--out benchmarks/results/mask_targets.md]
"""
import argparse
import os
import platform
import sys
from pathlib import Path

import numpy as np
import torch
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from pycocotools import mask as mask_utils

import mmdet_ext  # noqa: F401  (registers torch.ops.mmdet_ext)
from benchmarks import write_report
from benchmarks.mask_decode import best_times
from mmdet_ext.structures import LazyInstanceMasks, RasterSource

HEIGHT, WIDTH = 800, 1067
ROIS, OUT_SHAPE = 128, (28, 28)
BITMAP_ROW = 'mmdet BitmapMasks (poly2mask=True)'


def coco_like_polygon(rng) -> list[np.ndarray]:
    """One instance: 1 part (85 %) or 2-4, each a smooth star of 8 + size / 8 points (+-40 %),
    sizes log-uniform in 16-500 px, coordinates inside the image, in float64 like a resized
    COCO annotation."""
    size = float(np.exp(rng.uniform(np.log(16), np.log(500))))
    centre = rng.uniform([size / 2, size / 2], [WIDTH - size / 2, HEIGHT - size / 2])
    parts = []
    for _ in range(1 if rng.random() < 0.85 else int(rng.integers(2, 5))):
        k = int(np.clip((8 + size / 8) * rng.uniform(0.6, 1.4), 4, 300))
        angles = np.sort(rng.uniform(0, 2 * np.pi, k))
        wobble = 1 + 0.3 * np.sin(3 * angles + rng.uniform(0, 2 * np.pi))
        radii = size / 2 * wobble * rng.uniform(0.8, 1.0, k) / (1 + 0.5 * (len(parts) > 0))
        offset = rng.normal(0, size / 4, 2) if parts else 0
        xy = centre + offset + np.stack([radii * np.cos(angles), radii * np.sin(angles)], 1)
        parts.append(np.clip(xy, 0, [WIDTH, HEIGHT]).ravel())
    return parts


def crowd_rle(rng) -> dict:
    """A crowd-like RLE instance: the union of 3-6 overlapping ellipses (a group of people)."""
    rows, cols = np.mgrid[:HEIGHT, :WIDTH]
    mask = np.zeros((HEIGHT, WIDTH), dtype=bool)
    centre = rng.uniform([150, 150], [WIDTH - 150, HEIGHT - 150])
    for _ in range(int(rng.integers(3, 7))):
        cx, cy = centre + rng.normal(0, 80, 2)
        ax, ay = rng.uniform(20, 90, 2)
        mask |= ((cols - cx) / ax) ** 2 + ((rows - cy) / ay) ** 2 <= 1
    return mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))


def positive_rois(rng, gt_boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ROIS proposals around the ground-truth boxes (each coordinate moved by up to 10 % of the
    box size, as positives with IoU > 0.5 are), clipped to the image as mask_target_single does;
    float32 like the model's proposals. Returns (boxes [ROIS, 4], inds [ROIS])."""
    inds = rng.integers(0, len(gt_boxes), ROIS)
    gt = gt_boxes[inds]
    w, h = gt[:, 2] - gt[:, 0], gt[:, 3] - gt[:, 1]
    boxes = gt + rng.uniform(-0.1, 0.1, (ROIS, 4)) * np.stack([w, h, w, h], axis=1)
    boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2] + 1)
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, WIDTH)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, HEIGHT)
    return boxes.astype(np.float32), inds


def make_images(num_images: int, with_rle: bool, seed: int = 0) -> list[dict]:
    """4-10 polygon instances per image (7 on average, as COCO), plus one crowd-like RLE instance
    in every second image when `with_rle`; ROIS positive ROIs over all of them."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(num_images):
        polygons = [coco_like_polygon(rng) for _ in range(int(rng.integers(4, 11)))]
        rles = [crowd_rle(rng)] if with_rle and i % 2 == 0 else []
        bitmaps = np.stack(
            [mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(
                [p.tolist() for p in parts], HEIGHT, WIDTH))) for parts in polygons] +
            [mask_utils.decode(rle) for rle in rles])
        items = polygons + [RasterSource('rle', rle['counts'].decode('ascii'), HEIGHT, WIDTH)
                            for rle in rles]
        gt_boxes = BitmapMasks(bitmaps, HEIGHT, WIDTH).get_bboxes('hbox').numpy()
        boxes, inds = positive_rois(rng, gt_boxes)
        images.append({'boxes': boxes, 'inds': inds, 'bitmaps': BitmapMasks(bitmaps, HEIGHT, WIDTH),
                       'polygons': None if rles else PolygonMasks(polygons, HEIGHT, WIDTH),
                       'lazy': LazyInstanceMasks(items, HEIGHT, WIDTH)})
    return images


def lazy_before(masks: LazyInstanceMasks, boxes: np.ndarray, inds: np.ndarray,
                device: str) -> np.ndarray:
    """LazyInstanceMasks.crop_and_resize(...).to_ndarray() as it was before the native crop path:
    polygons through PolygonMasks' coordinate arithmetic then one native rasterisation, rasters
    one BitmapMasks.crop_and_resize per box."""
    results: list = [None] * len(boxes)
    polygon_boxes = [i for i, ind in enumerate(inds)
                     if not isinstance(masks.items[ind], RasterSource)]
    if polygon_boxes:
        polygons = PolygonMasks([masks.items[ind] for ind in inds[polygon_boxes]], masks.height,
                                masks.width)
        cropped = polygons.crop_and_resize(boxes[polygon_boxes], OUT_SHAPE,
                                           np.arange(len(polygon_boxes)), device)
        for box, polygon in zip(polygon_boxes, cropped.masks):
            results[box] = polygon
    decoded: dict = {}
    for box, ind in enumerate(inds):
        item = masks.items[ind]
        if isinstance(item, RasterSource):
            if ind not in decoded:
                decoded[ind] = item.bitmaps()
            crop = decoded[ind].crop_and_resize(boxes[box:box + 1], OUT_SHAPE, np.zeros(1, int),
                                                device)
            results[box] = RasterSource.from_bitmap(crop.masks[0])
    return LazyInstanceMasks(results, *OUT_SHAPE).to_ndarray()


def check_equal(images: list[dict], device: str) -> None:
    """after == before == PolygonMasks' pixels for polygon ROIs and BitmapMasks' for RLE ROIs."""
    for image in images:
        boxes, inds, lazy = image['boxes'], image['inds'], image['lazy']
        after = lazy.crop_and_resize(boxes, OUT_SHAPE, inds, device).to_ndarray()
        np.testing.assert_array_equal(after, lazy_before(lazy, boxes, inds, device))
        rle_rows = [i for i, ind in enumerate(inds) if isinstance(lazy.items[ind], RasterSource)]
        np.testing.assert_array_equal(after[rle_rows], image['bitmaps'].crop_and_resize(
            boxes[rle_rows], OUT_SHAPE, inds[rle_rows], device).to_ndarray())
        if image['polygons'] is not None:
            np.testing.assert_array_equal(after, image['polygons'].crop_and_resize(
                boxes, OUT_SHAPE, inds, device).to_ndarray())


def ms_per_image(images: list[dict], repeat: int, device: str) -> dict:
    """Best-pass milliseconds per image of each implementation (absent where it does not apply).
    BitmapMasks runs one pass: it takes about a second per image (roi_align reads a full-image
    float copy of the mask for every ROI), a thousand times the others."""
    def call(name):
        return lambda image: image[name].crop_and_resize(image['boxes'], OUT_SHAPE, image['inds'],
                                                         device).to_ndarray()

    fns = {'LazyInstanceMasks before': lambda image: lazy_before(
               image['lazy'], image['boxes'], image['inds'], device),
           'LazyInstanceMasks after': call('lazy')}
    if all(image['polygons'] is not None for image in images):
        fns['mmdet PolygonMasks (poly2mask=False)'] = call('polygons')
    seconds = dict(zip(fns, best_times(list(fns.values()), images, repeat)))
    seconds[BITMAP_ROW] = best_times([call('bitmaps')], images, 1)[0]
    return {name: 1000 * s / len(images) for name, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=20, help='images per data set')
    parser.add_argument('--repeat', type=int, default=5, help='timed passes; the best is kept')
    parser.add_argument('--threads', type=int, default=1, help='torch intra-op threads')
    parser.add_argument('--device', default='cpu', help='device the ROIs and masks are on')
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/mask_targets.md'))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    columns = {'polygons only': make_images(args.images, with_rle=False),
               'polygons + RLE': make_images(args.images, with_rle=True, seed=1)}
    timings = {}
    for column, images in columns.items():
        check_equal(images, args.device)
        timings[column] = ms_per_image(images, args.repeat, args.device)
    names = [BITMAP_ROW, 'mmdet PolygonMasks (poly2mask=False)',
             'LazyInstanceMasks before', 'LazyInstanceMasks after']

    def cell(column, name):
        value = timings[column].get(name)
        return 'n/a (drops RLE)' if value is None else f'{value:.3f}'

    rle_rois = sum(isinstance(image['lazy'].items[ind], RasterSource)
                   for image in columns['polygons + RLE'] for ind in image['inds'])
    instances = {column: np.mean([len(image['lazy']) for image in images])
                 for column, images in columns.items()}
    lines = [
        '# Mask R-CNN mask targets: LazyInstanceMasks vs mmdet',
        '',
        f'Command: `PYTHONPATH=. python {" ".join(sys.argv)}` (from the repository root; '
        'PYTHONPATH picks this checkout over an installed mmdet_ext)',
        '',
        f'Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs (load '
        f'average {os.getloadavg()[0]:.1f} after the run), device {args.device}, '
        f'{torch.get_num_threads()} torch thread(s), Python {platform.python_version()}, '
        f'torch {torch.__version__}, numpy {np.__version__}. {args.images} images of '
        f'{WIDTH}x{HEIGHT} per column, {ROIS} positive ROIs each, {OUT_SHAPE[0]}x{OUT_SHAPE[1]} '
        f'targets; best of {args.repeat} passes (BitmapMasks: 1). Instances per image: '
        f'{instances["polygons only"]:.1f} (polygons only), {instances["polygons + RLE"]:.1f} '
        f'(polygons + RLE: one crowd-like RLE in every second image, {rle_rois} of the ROIs on '
        'RLEs). '
        'Outputs checked identical first: LazyInstanceMasks before and after, PolygonMasks on '
        'polygon ROIs, BitmapMasks on RLE ROIs.',
        '',
        'Milliseconds per image of `crop_and_resize(boxes, (28, 28), inds).to_ndarray()`:',
        '',
        '| implementation | ' + ' | '.join(columns) + ' |',
        '|---|' + '---:|' * len(columns),
    ]
    for name in names:
        lines.append(f'| {name} | ' + ' | '.join(cell(c, name) for c in columns) + ' |')
    speedups = ' | '.join(f'{t["LazyInstanceMasks before"] / t["LazyInstanceMasks after"]:.1f}x'
                          for t in timings.values())
    lines.append(f'| speed-up, after vs before | {speedups} |')
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
