"""COCO evaluation: pycocotools' COCOeval beside faster-coco-eval's, on COCO-val-like synthetic
detections; every summary number compared, then the time of each.

    PYTHONPATH=. python3 benchmarks/coco_eval_speed.py --images 500 \
        --out benchmarks/results/coco_eval_speed.md

faster-coco-eval is not a dependency of mmdet_ext: run this where it is installed (for example
in a venv with ``--system-site-packages`` and ``pip install faster-coco-eval``). Ground truth:
about 7 polygon instances per image of 80 classes, some crowd RLEs; detections: ``--dets`` per
image (the first ones jittered copies of the ground truth, the rest spurious), masks as COCO
RLE made by ``paste_masks_to_rle`` from smooth 28x28 blobs, as Mask R-CNN's would be.
"""
import argparse
import contextlib
import io
import os
import platform
import time
from pathlib import Path

import numpy as np
import torch
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from benchmarks import write_report
from mmdet_ext import ops


def star(rng, cx, cy, radius, points):
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * rng.uniform(0.4, 1.0, points)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).ravel()


def synthetic_images(rng, images: int, dets: int, height: int, width: int):
    """Yields one image at a time: (image info, ground truth annotations, detections), the
    detections as Mask R-CNN's mask head has them: boxes [N, 4] xyxy float32, category ids,
    28x28 mask logits [N, 28, 28] float32, scores."""
    for img_id in range(1, images + 1):
        image = dict(id=img_id, height=height, width=width, file_name=f'{img_id}.jpg')
        annotations, boxes, labels = [], [], []
        for _ in range(rng.integers(2, 13)):
            radius = float(np.exp(rng.uniform(np.log(6), np.log(0.35 * min(height, width)))))
            cx, cy = rng.uniform(radius, width - radius), rng.uniform(radius, height - radius)
            poly = star(rng, cx, cy, radius, int(rng.integers(8, 60)))
            rle = mask_utils.merge(mask_utils.frPyObjects([poly.tolist()], height, width))
            crowd = int(rng.random() < 0.01)
            x, y, w, h = mask_utils.toBbox(rle).tolist()
            category = int(rng.integers(1, 81))
            segmentation = ({'size': rle['size'], 'counts': rle['counts'].decode()} if crowd
                            else [poly.tolist()])
            annotations.append(dict(image_id=img_id, category_id=category, bbox=[x, y, w, h],
                                    area=float(mask_utils.area(rle)), iscrowd=crowd,
                                    segmentation=segmentation))
            boxes.append([x, y, x + w, y + h])
            labels.append(category)
        spurious = dets - len(boxes)
        x1 = rng.uniform(0, width - 10, spurious)
        y1 = rng.uniform(0, height - 10, spurious)
        sizes = rng.uniform(8, 0.5 * min(height, width), (spurious, 2))
        boxes = np.concatenate([np.array(boxes) + rng.normal(0, 3, (len(boxes), 4)),
                                np.stack([x1, y1, x1 + sizes[:, 0], y1 + sizes[:, 1]], 1)])
        boxes = np.clip(boxes, 0, [width, height, width, height]).astype(np.float32)
        labels = labels + rng.integers(1, 81, spurious).tolist()
        yy, xx = np.mgrid[0:28, 0:28] / 27.0 - 0.5
        logits = 8 - 30 * (xx ** 2 + yy ** 2) + rng.normal(0, 1, (dets, 1, 1))
        scores = rng.uniform(0.05, 1.0, dets)
        yield image, annotations, (boxes, labels, logits.astype(np.float32), scores)


def categories() -> list:
    return [dict(id=i + 1, name=f'c{i}') for i in range(80)]


def make_dataset(rng, images: int, dets: int, height: int, width: int) -> tuple[dict, list]:
    """(ground truth json, detection results list); masks as COCO RLE made by
    ``paste_masks_to_rle``."""
    gt = dict(images=[], annotations=[], categories=categories())
    results = []
    for image, annotations, (boxes, labels, logits, scores) in synthetic_images(
            rng, images, dets, height, width):
        gt['images'].append(image)
        for annotation in annotations:
            gt['annotations'].append(dict(id=len(gt['annotations']) + 1, **annotation))
        probabilities = torch.from_numpy(1 / (1 + np.exp(-logits.astype(np.float64))))
        counts, run_counts = ops.paste_masks_to_rle(
            probabilities.float(), torch.from_numpy(boxes), height, width, 0.5)
        rles = ops.to_coco_rles(counts, run_counts, height, width)
        for box, label, rle, score in zip(boxes.tolist(), labels, rles, scores.tolist()):
            results.append(dict(image_id=image['id'], category_id=label, score=score,
                                bbox=[box[0], box[1], box[2] - box[0], box[3] - box[1]],
                                segmentation={'size': rle['size'],
                                              'counts': rle['counts'].decode()}))
    return gt, results


def evaluate(coco_cls, eval_cls, gt: dict, results: list, iou_type: str):
    """(stats, printed summary, seconds) of loading the results, evaluate, accumulate, summarize."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        coco_gt = coco_cls()
        coco_gt.dataset = {k: list(v) for k, v in gt.items()}
        coco_gt.createIndex()
        start = time.perf_counter()
        coco_dt = coco_gt.loadRes([dict(r) for r in results])
        evaluator = eval_cls(coco_gt, coco_dt, iou_type)
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
        seconds = time.perf_counter() - start
    summary = [line for line in printed.getvalue().splitlines() if line.startswith(' Average')]
    return np.asarray(evaluator.stats[:12]), summary, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', type=int, default=500)
    parser.add_argument('--dets', type=int, default=100)
    parser.add_argument('--height', type=int, default=480)
    parser.add_argument('--width', type=int, default=640)
    parser.add_argument('--out', type=Path)
    args = parser.parse_args()
    from faster_coco_eval import COCO as FasterCOCO
    from faster_coco_eval import COCOeval_faster
    import faster_coco_eval
    torch.set_num_threads(1)
    gt, results = make_dataset(np.random.default_rng(0), args.images, args.dets, args.height,
                               args.width)
    load_before = os.getloadavg()
    lines = [
        '# COCO evaluation: pycocotools vs faster-coco-eval', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/coco_eval_speed.py --images {args.images} '
        f'--dets {args.dets}` (faster-coco-eval {faster_coco_eval.__version__} in a venv with '
        'the system site packages).', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, 1-minute load average '
        f'{load_before[0]:.1f} before the runs (shared with other work: times are noisy; each '
        'evaluation runs once, the two evaluators one after the other).', '',
        f'{args.images} images of {args.width}x{args.height}, {len(gt["annotations"])} ground '
        f'truth instances, {len(results)} detections ({args.dets} per image).', '',
        '| iouType | pycocotools COCOeval, s | faster-coco-eval, s | speed-up | '
        'all 12 stats equal | printed summaries equal |',
        '|---|---:|---:|---:|---|---|',
    ]
    for iou_type in ('bbox', 'segm'):
        ours = evaluate(COCO, COCOeval, gt, results, iou_type)
        faster = evaluate(FasterCOCO, COCOeval_faster, gt, results, iou_type)
        same_stats = bool(np.array_equal(ours[0], faster[0]))
        printed_ours = [line.split('=')[-1].strip() for line in ours[1]]
        printed_faster = [f'{value:0.3f}' for value in faster[0]]
        lines.append(f'| {iou_type} | {ours[2]:.1f} | {faster[2]:.1f} | '
                     f'{ours[2] / faster[2]:.1f}x | {same_stats} | '
                     f'{printed_ours == printed_faster} |')
        if not same_stats:
            diff = np.abs(ours[0] - faster[0])
            lines.append(f'|  | largest difference {diff.max():.2e} at stat {int(diff.argmax())} '
                         '|  |  |  |  |')
    write_report(args.out, lines) if args.out else print('\n'.join(lines))


if __name__ == '__main__':
    main()
