"""COCO evaluation with every evaluator backend of ``RLECocoMetric``, side by side, run as
mmdet's ``CocoMetric`` runs its evaluator: mmdet's ``COCO`` of the ground truth json, ``loadRes``
of the result list (segm results without their boxes, as mmdet pops them), params as
``CocoMetric`` sets them (maxDets 100/300/1000), then ``evaluate``, ``accumulate``,
``summarize``; every statistic compared with pycocotools'.

    PYTHONPATH=. python3 benchmarks/coco_eval_speed.py --out benchmarks/results/cocoeval_backends.md
    PYTHONPATH=. python3 benchmarks/coco_eval_speed.py --sets 'val2017-sized 1333x800' \
        'dense 640x480' --backends ultrafast_pycocotools native:ultrafast_pycocotools hotcoco \
        native:hotcoco faster_coco_eval native:faster_coco_eval vernier \
        --out benchmarks/results/cocoeval_native.md

``native:NAME`` is the package as its own README has it, not through our adapter: its ``COCO``
of the ground truth file, its ``loadRes`` of the result list, its ``COCOeval`` with the same
params, its own ``summarize`` (the peers' evaluators as ultralytics and rf-detr call them).

Each backend runs in a process of its own (its peak RSS is its own): wall and CPU seconds
(every thread) of the evaluation (construction to summary), then the same again on the same
ground truth object (the next validation's), and of ``loadRes`` before it as
``RLECocoMetric`` runs it with that backend (``cocoeval_parity.load_results``: pycocotools' but
for hotcoco, whose results hotcoco's own ``loadRes`` makes inside the evaluation), and the two
together; and, apart, what a backend makes of the ground truth before its first evaluation
(hotcoco's copy of mmdet's ``COCO``; a ``native:`` package's own ``COCO`` of the file).
Sets: val2017-sized (5,000 images, about 7 ground truth instances and 100 detections each,
80 classes; the first detections jittered copies of the ground truth, the rest spurious; masks
as COCO RLE made by ``paste_masks_to_rle`` from smooth 28x28 blobs, as Mask R-CNN's are) at
640x480 and at 1333x800, and a dense set (200 images, 100 ground truth instances and 300
detections each).
"""
import argparse
import contextlib
import importlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from pycocotools import mask as mask_utils

from benchmarks import write_report
from mmdet_ext import ops


def star(rng, cx, cy, radius, points):
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radii = radius * rng.uniform(0.4, 1.0, points)
    return np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).ravel()


def synthetic_images(rng, images: int, dets: int, height: int, width: int,
                     gt_range: tuple = (2, 13)):
    """Yields one image at a time: (image info, ground truth annotations, detections), the
    detections as Mask R-CNN's mask head has them: boxes [N, 4] xyxy float32, category ids,
    28x28 mask logits [N, 28, 28] float32, scores."""
    for img_id in range(1, images + 1):
        image = dict(id=img_id, height=height, width=width, file_name=f'{img_id}.jpg')
        annotations, boxes, labels = [], [], []
        for _ in range(rng.integers(*gt_range)):
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
        boxes, labels = boxes[:dets], labels[:dets]
        spurious = dets - len(boxes)
        x1 = rng.uniform(0, width - 10, spurious)
        y1 = rng.uniform(0, height - 10, spurious)
        sizes = rng.uniform(8, 0.5 * min(height, width), (spurious, 2))
        boxes = np.concatenate([np.array(boxes).reshape(-1, 4) +
                                rng.normal(0, 3, (len(boxes), 4)),
                                np.stack([x1, y1, x1 + sizes[:, 0], y1 + sizes[:, 1]], 1)])
        boxes = np.clip(boxes, 0, [width, height, width, height]).astype(np.float32)
        labels = labels + rng.integers(1, 81, spurious).tolist()
        yy, xx = np.mgrid[0:28, 0:28] / 27.0 - 0.5
        logits = 8 - 30 * (xx ** 2 + yy ** 2) + rng.normal(0, 1, (dets, 1, 1))
        scores = rng.uniform(0.05, 1.0, dets)
        yield image, annotations, (boxes, labels, logits.astype(np.float32), scores)


def categories() -> list:
    return [dict(id=i + 1, name=f'c{i}') for i in range(80)]


def make_dataset(rng, images: int, dets: int, height: int, width: int,
                 gt_range: tuple) -> tuple[dict, list]:
    """(ground truth json, detection results list); masks as COCO RLE made by
    ``paste_masks_to_rle``."""
    gt = dict(images=[], annotations=[], categories=categories())
    results = []
    for image, annotations, (boxes, labels, logits, scores) in synthetic_images(
            rng, images, dets, height, width, gt_range):
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


NATIVE = 'native:'  # a package through its own COCO, loadRes and COCOeval, as its README says
NATIVE_CLASSES = {  # backend name: (module, its COCO, its COCOeval)
    'ultrafast_pycocotools': ('ultrafast_pycocotools', 'COCO', 'COCOeval'),
    'hotcoco': ('hotcoco', 'COCO', 'COCOeval'),
    'faster_coco_eval': ('faster_coco_eval', 'COCO', 'COCOeval_faster'),
}


def _classes(backend: str) -> tuple:
    """(COCO, COCOeval) that ``backend`` evaluates with: mmdet's COCO and our backend's
    evaluator, or (``native:NAME``) the package's own two classes."""
    if backend.startswith(NATIVE):
        module, coco, evaluator = NATIVE_CLASSES[backend[len(NATIVE):]]
        module = importlib.import_module(module)
        return getattr(module, coco), getattr(module, evaluator)
    from mmdet.datasets.api_wrappers import COCO

    from mmdet_ext.evaluation.cocoeval_backend import BACKENDS
    return COCO, BACKENDS[backend].evaluator


def child(backend: str, gt_path: str, results_path: str, iou_type: str) -> None:
    """One evaluation in this process, as CocoMetric runs it; prints one json line."""
    from mmdet_ext.evaluation.cocoeval_parity import IOU_THRESHOLDS, MMDET_MAX_DETS, load_results

    # The peak RSS (VmHWM) restarts here: a forked child starts with its parent's (the sets).
    Path('/proc/self/clear_refs').write_text('5')
    COCO, evaluator_type = _classes(backend)
    native = backend.startswith(NATIVE)
    def predictions() -> list:
        loaded = json.loads(Path(results_path).read_text())
        for prediction in loaded:
            prediction.pop('bbox' if iou_type == 'segm' else 'segmentation')
        return loaded

    def evaluated(dt):
        evaluator = evaluator_type(gt, dt, iou_type)
        evaluator.params.catIds = sorted(gt.getCatIds())
        evaluator.params.imgIds = sorted(gt.getImgIds())
        evaluator.params.maxDets = list(MMDET_MAX_DETS)
        evaluator.params.iouThrs = IOU_THRESHOLDS
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
        return evaluator

    def load(results: list):
        return gt.loadRes(results) if native else load_results(evaluator_type, gt, results)

    with contextlib.redirect_stdout(io.StringIO()):
        wall = time.perf_counter()
        gt = COCO(gt_path)
        gt_wall = time.perf_counter() - wall if native else 0.0
        if backend == 'hotcoco':  # the adapter's copy of mmdet's COCO, made before timing
            import hotcoco

            from mmdet_ext.evaluation.cocoeval_backend import (_collection_paused,
                                                               _hotcoco_ground_truth)
            wall = time.perf_counter()
            with _collection_paused():  # as the adapter makes it, inside its evaluation
                _hotcoco_ground_truth(gt, hotcoco.COCO)
            gt_wall = time.perf_counter() - wall
        results = predictions()
        wall, cpu = time.perf_counter(), time.process_time()
        dt = load(results)
        load_wall, load_cpu = time.perf_counter() - wall, time.process_time() - cpu
        before_mib = vm_mib('VmRSS')
        wall, cpu = time.perf_counter(), time.process_time()
        evaluator = evaluated(dt)
        eval_wall, eval_cpu = time.perf_counter() - wall, time.process_time() - cpu
        stats, peak_mib = [float(v) for v in evaluator.stats], vm_mib('VmHWM')
        # The next validation: new results, the same ground truth object (CocoMetric's).
        del evaluator, dt, results
        results = predictions()
        wall = time.perf_counter()
        again = evaluated(load(results))
        again_wall = time.perf_counter() - wall
        assert [float(v) for v in again.stats] == stats
    print(json.dumps(dict(
        stats=stats, gt_wall=gt_wall, load_wall=load_wall, load_cpu=load_cpu, eval_wall=eval_wall,
        eval_cpu=eval_cpu, again_wall=again_wall, before_mib=before_mib, peak_mib=peak_mib)))


def vm_mib(field: str) -> float:
    """VmRSS (now) or VmHWM (the peak since the last reset) of this process, in MiB."""
    status = Path('/proc/self/status').read_text()
    return int(re.search(rf'{field}:\s+(\d+)', status).group(1)) / 1024


def run_child(backend: str, gt_path: Path, results_path: Path, iou_type: str) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, '--child', backend, str(gt_path), str(results_path), iou_type],
        check=True, capture_output=True, text=True, env={**os.environ, 'PYTHONPATH': str(
            Path(__file__).resolve().parents[1])}).stdout
    return json.loads(output.strip().splitlines()[-1])


SETS = {
    'val2017-sized 640x480': dict(images=5000, dets=100, height=480, width=640, gt_range=(2, 13)),
    'val2017-sized 1333x800': dict(images=5000, dets=100, height=800, width=1333,
                                   gt_range=(2, 13)),
    'dense 640x480': dict(images=200, dets=300, height=480, width=640, gt_range=(100, 101)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--sets', nargs='+', default=list(SETS), choices=list(SETS))
    parser.add_argument('--scale', type=float, default=1.0,
                        help='fraction of each set\'s images (a quick try)')
    parser.add_argument('--backends', nargs='+',
                        help='backends to time (default: every installed one); pycocotools, the '
                        'reference, is always timed; NATIVE:NAME (' + ', '.join(NATIVE_CLASSES) +
                        ') is that package through its own classes')
    parser.add_argument('--out', type=Path)
    parser.add_argument('--child', nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    from mmdet_ext.evaluation.cocoeval_backend import BACKENDS
    import importlib.metadata as metadata

    torch.set_num_threads(1)
    installed = [name for name, backend in BACKENDS.items() if backend.installed()]
    backends = ['pycocotools', *[name for name in args.backends or installed
                                 if name != 'pycocotools']]
    versions = ', '.join(f'{BACKENDS[name].package} {metadata.version(BACKENDS[name].package)}'
                         for name in installed)
    started, load_before = time.perf_counter(), os.getloadavg()
    rows, notes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for set_name in args.sets:
            spec = dict(SETS[set_name])
            spec['images'] = max(1, int(spec['images'] * args.scale))
            gt, results = make_dataset(np.random.default_rng(0), **spec)
            gt_path, results_path = Path(tmp) / 'gt.json', Path(tmp) / 'results.json'
            gt_path.write_text(json.dumps(gt))
            results_path.write_text(json.dumps(results))
            label = (f'{set_name}: {spec["images"]} images, {len(gt["annotations"])} ground '
                     f'truth, {len(results)} detections')
            for iou_type in ('bbox', 'segm'):
                measured = {name: run_child(name, gt_path, results_path, iou_type)
                            for name in backends}
                reference = np.asarray(measured['pycocotools']['stats'])
                for name in backends:
                    got = measured[name]
                    stats = np.asarray(got['stats'])
                    same = [round(v, 3) for v in stats] == [round(v, 3) for v in reference]
                    both = got['load_wall'] + got['eval_wall']
                    reference_both = (measured['pycocotools']['load_wall'] +
                                      measured['pycocotools']['eval_wall'])
                    first = got['gt_wall'] + both
                    rows.append(
                        f'| {label} | {iou_type} | {name} | {got["eval_wall"]:.2f} | '
                        f'{got["eval_cpu"]:.2f} | '
                        f'{measured["pycocotools"]["eval_wall"] / got["eval_wall"]:.1f}x | '
                        f'{got["load_wall"]:.2f} | {both:.2f} | {reference_both / both:.1f}x | '
                        f'{got["gt_wall"]:.2f} | {first:.2f} | {reference_both / first:.1f}x | '
                        f'{got["again_wall"]:.2f} | '
                        f'{measured["pycocotools"]["again_wall"] / got["again_wall"]:.1f}x | '
                        f'{got["peak_mib"]:.0f} '
                        f'(+{max(0.0, got["peak_mib"] - got["before_mib"]):.0f}) | '
                        f'{"yes" if same else "NO"} | '
                        f'{float(np.max(np.abs(stats - reference))):.1e} |')
                    label = ''
    load_after = os.getloadavg()
    lines = [
        '# COCO evaluation: every backend of RLECocoMetric side by side (issue 54)', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/coco_eval_speed.py'
        f'{" --sets " + " ".join(repr(s) for s in args.sets) if args.sets != list(SETS) else ""}'
        f'{f" --scale {args.scale}" if args.scale != 1 else ""}'
        f'{" --backends " + " ".join(args.backends) if args.backends else ""}` '
        f'({time.perf_counter() - started:.0f} s wall).', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python '
        f'{platform.python_version()}; {versions}. Load average (1, 5, 15 min) before: '
        f'{", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}.', '',
        'Each evaluation runs in a process of its own, the backends one after the other '
        'on the same files. "evaluate": construction, `evaluate`, `accumulate`, `summarize` '
        '(wall and CPU seconds of every thread); "loadRes": what `loadRes` runs before it with '
        'that backend in RLECocoMetric (pycocotools\' `loadRes`, but for hotcoco: its adapter '
        'only checks the list, and hotcoco\'s own `loadRes` makes the results inside '
        '"evaluate"; `native:` rows: the package\'s own `loadRes`); "both": loadRes + evaluate, '
        'and its speed-up over pycocotools\'; "ground truth": what the backend makes of the '
        'ground truth file before its first evaluation, beyond mmdet\'s `COCO` of it that '
        'CocoMetric makes for every backend (untimed): for the hotcoco adapter its copy of '
        'that `COCO` (`_hotcoco_ground_truth`, kept for the later evaluations), for `native:` '
        'rows the package\'s own `COCO` of the file (in place of mmdet\'s), for the rest '
        'nothing (they read mmdet\'s); "first": ground truth + both, and its speed-up over '
        'pycocotools\' both; "again": loadRes + evaluate of the same results '
        'once more in the same process, on the same ground truth object (CocoMetric\'s next '
        'validation, or its segm after its bbox: what a backend keeps of the ground truth is '
        'kept), and its speed-up over pycocotools\' again; peak RSS: the process\'s (VmHWM, '
        'reset when it starts) over the first evaluation, imports and loading included; in '
        'brackets, above its RSS when the evaluation started. '
        '"reported": the 12 statistics rounded to 3 decimals, as CocoMetric reports them, equal '
        'to pycocotools\'; then the largest difference unrounded.', '',
        '| set | iouType | backend | evaluate s | evaluate CPU s | speed-up | loadRes s | '
        'both s | both speed-up | ground truth s | first s | first speed-up | again s | '
        'again speed-up | peak RSS MiB | reported = pycocotools | max abs diff |',
        '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|',
        *rows, *notes,
    ]
    if args.out:
        write_report(args.out, lines)
    else:
        print('\n'.join(lines))


if __name__ == '__main__':
    main()
