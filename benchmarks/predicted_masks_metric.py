"""Test-time masks from the mask head to the metric's numbers, per stage, on the CPU: mmdet's
``FCNMaskHead`` + ``CocoMetric`` (and ``LVISMetric``) against ``RLEFCNMaskHead`` +
``RLECocoMetric`` (``RLELVISMetric``), over a whole synthetic validation set.

    PYTHONPATH=. python3 benchmarks/predicted_masks_metric.py [--images 500]
        [--out benchmarks/results/predicted_masks_metric.md]

Scenarios: ``--images`` images x 100 detections at 640x480 and at 1333x800 (COCO), and x 300
detections at 640x480 (LVIS-like: LVIS' 300 detections per image, evaluated by the lvis
package's LVISEval, and by ``RLELVISMetric`` with the lvis package and with its default 'auto').
Ground truth and detections: ``benchmarks/coco_eval_speed.synthetic_images`` (about 7 polygon
instances per image of 80 classes; detections jittered copies of them plus spurious ones, their
28x28 mask logits smooth blobs).

Stages, per image then summed over the set:
- **paste**: the head's ``_predict_by_feat_single`` (sigmoid, paste, threshold; ours pastes
  straight to RLE), mmdet's CPU form (``skip_empty=True``);
- **transfer**: none on the CPU (``.cpu()`` of a host tensor is the tensor itself; on a GPU
  mmdet copies the full-size masks, ours the RLE counts: GPU numbers only from a GPU);
- **encode**: the metric's ``process`` (mmdet: ``encode_mask_results`` of each mask; ours takes the
  RLEs as they are);
- **gather**: what ``collect_results`` sends between ranks: the pickled results (the same bytes on
  both sides, since mmdet's metric holds RLEs after ``process`` too), pickled and unpickled once;
- **evaluate**: ``compute_metrics`` (results to json, loadRes, COCOeval or LVISEval, bbox and segm)
  with pycocotools (both), mmdet's ``use_mp_eval=True`` (COCOevalMP: processes over
  the CPUs) and ours with pycocotools and with its default, ``cocoeval_backend='auto'`` (the
  fastest installed backend that agrees with pycocotools).

Paste and encode run in a fresh process per path, 1 torch thread (both sides; mmdet's many small
per-box ops oversubscribe a busy machine at 2), and report the peak RSS rise over the loop (Linux
VmHWM, reset before it): mmdet holds one image's full-size masks at a time, both hold the
accumulated RLE results. Every evaluator's numbers are checked equal before the table is written.
"""
import argparse
import contextlib
import io
import json
import os
import pickle
import platform
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from mmengine.config import ConfigDict

from benchmarks import write_report
from benchmarks.coco_eval_speed import categories, synthetic_images

SCENARIOS = {  # name: (height, width, detections per image, metric family)
    'COCO 640x480, 100 det/img': (480, 640, 100, 'coco'),
    'COCO 1333x800, 100 det/img': (800, 1333, 100, 'coco'),
    'LVIS-like 640x480, 300 det/img': (480, 640, 300, 'lvis'),
}
THRESHOLD = 0.5


def ground_truth(scenario: str, images: int, path: Path) -> None:
    """Writes the scenario's annotation json (COCO, or LVIS v1 without crowd instances)."""
    height, width, dets, family = SCENARIOS[scenario]
    gt = dict(info={}, licenses=[], images=[], annotations=[], categories=categories())
    for image, annotations, _ in synthetic_images(np.random.default_rng(0), images, dets,
                                                  height, width):
        if family == 'lvis':
            image = {**image, 'neg_category_ids': [], 'not_exhaustive_category_ids': []}
            annotations = [a for a in annotations if not a['iscrowd']]
        gt['images'].append(image)
        for annotation in annotations:
            gt['annotations'].append(dict(id=len(gt['annotations']) + 1, **annotation))
    if family == 'lvis':
        gt['categories'] = [{**c, 'frequency': 'rcf'[i % 3], 'synset': f"{c['name']}.n.01"}
                            for i, c in enumerate(gt['categories'])]
    path.write_text(json.dumps(gt))


def metric_types(family: str, side: str) -> type:
    import mmdet_ext  # noqa: F401  (registers the metrics)
    from mmdet.evaluation.metrics import CocoMetric, LVISMetric
    from mmdet_ext import RLECocoMetric, RLELVISMetric
    return {('coco', 'mmdet'): CocoMetric, ('coco', 'ours'): RLECocoMetric,
            ('lvis', 'mmdet'): LVISMetric, ('lvis', 'ours'): RLELVISMetric}[(family, side)]


def vm_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (the peak since the last reset) of this process, in KiB."""
    return int(re.search(rf'{field}:\s+(\d+)', Path('/proc/self/status').read_text()).group(1))


def ordered_boxes(boxes: np.ndarray) -> torch.Tensor:
    """x1 <= x2 and y1 <= y2, as a bbox head's boxes (the jittered copies of tiny ground truth
    boxes can come out inverted, which mmdet's paste refuses)."""
    return torch.from_numpy(np.concatenate([np.minimum(boxes[:, :2], boxes[:, 2:]),
                                            np.maximum(boxes[:, :2], boxes[:, 2:])], 1))


def one_image(head, metric, img_id: int, detections: tuple, height: int, width: int) -> tuple:
    """The head's paste and the metric's process of one image: (paste s, encode s)."""
    boxes, labels, logits, scores = detections
    boxes = ordered_boxes(boxes)
    logits = torch.from_numpy(logits)[:, None]
    labels = torch.tensor(labels) - 1
    img_meta = dict(ori_shape=(height, width), scale_factor=(1.0, 1.0))
    start = time.perf_counter()
    masks = head._predict_by_feat_single(logits, boxes, labels, img_meta,
                                         ConfigDict(mask_thr_binary=THRESHOLD), rescale=True)
    middle = time.perf_counter()
    metric.process({}, [dict(img_id=img_id, ori_shape=(height, width), pred_instances=dict(
        bboxes=boxes, scores=torch.from_numpy(scores).float(), labels=labels, masks=masks))])
    return middle - start, time.perf_counter() - middle


def run_head_and_process(scenario: str, side: str, images: int, ann_file: str,
                         out: Path) -> None:
    """In a fresh process: the head and the metric's process over every image; writes the times,
    the peak RSS rise and the metric's results."""
    from mmdet.models.roi_heads.mask_heads import FCNMaskHead

    from mmdet_ext import RLEFCNMaskHead
    torch.set_num_threads(1)
    height, width, dets, family = SCENARIOS[scenario]
    head_type = RLEFCNMaskHead if side == 'ours' else FCNMaskHead
    head = head_type(num_convs=0, num_classes=1, class_agnostic=True)
    metric_type, metric_args = metric_types(family, side), dict(ann_file=ann_file,
                                                                metric=['bbox', 'segm'])
    inputs = [(image['id'], detections) for image, _, detections in synthetic_images(
        np.random.default_rng(0), images, dets, height, width)]
    # Warm-up (lazy imports, first allocations), out of the measurement.
    one_image(head, metric_type(**metric_args), *inputs[0], height, width)
    metric = metric_type(**metric_args)
    paste_s = encode_s = 0.0
    before = vm_kib('VmRSS')
    Path('/proc/self/clear_refs').write_text('5')  # Linux: the peak (VmHWM) restarts from now
    for img_id, detections in inputs:
        paste, encode = one_image(head, metric, img_id, detections, height, width)
        paste_s, encode_s = paste_s + paste, encode_s + encode
    peak_mib = (vm_kib('VmHWM') - before) / 1024
    with open(out, 'wb') as f:
        pickle.dump(dict(paste_s=paste_s, encode_s=encode_s, peak_mib=peak_mib,
                         results=metric.results), f)


def head_and_process(scenario: str, side: str, images: int, ann_file: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / 'out.pkl'
        subprocess.run([sys.executable, __file__, '--child', scenario, '--side', side,
                        '--images', str(images), '--ann-file', ann_file, '--child-out', str(out)],
                       check=True)
        with open(out, 'rb') as f:
            return pickle.load(f)


def gather_cost(results: list) -> tuple[float, float]:
    """(MiB, seconds) of pickling and unpickling the results once, as collect_results does."""
    start = time.perf_counter()
    blob = pickle.dumps(results, protocol=pickle.HIGHEST_PROTOCOL)
    pickle.loads(blob)
    return len(blob) / 2**20, time.perf_counter() - start


def evaluate(scenario: str, side: str, ann_file: str, results: list, **kwargs) -> tuple:
    """(reported numbers, seconds) of one compute_metrics call on a copy of the results."""
    family = SCENARIOS[scenario][3]
    metric = metric_types(family, side)(ann_file=ann_file, metric=['bbox', 'segm'], **kwargs)
    metric.dataset_meta = dict(classes=tuple(c['name'] for c in categories()))
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter('ignore')
        start = time.perf_counter()
        numbers = metric.compute_metrics(pickle.loads(pickle.dumps(results)))
        return numbers, time.perf_counter() - start


def evaluators(family: str) -> dict:
    """name: (side, CocoMetric keyword arguments) of each evaluation to time."""
    from mmdet_ext.evaluation.cocoeval_backend import resolve_backend, resolve_lvis_backend
    if family == 'lvis':
        with contextlib.redirect_stdout(io.StringIO()):
            chosen = resolve_lvis_backend('auto').name
        return {'mmdet LVISMetric': ('mmdet', {}),
                'RLELVISMetric (lvis)': ('ours', dict(cocoeval_backend='lvis')),
                f"RLELVISMetric cocoeval_backend='auto' ({chosen})": ('ours', {})}
    choices = {'mmdet CocoMetric (pycocotools)': ('mmdet', {}),
               'mmdet CocoMetric use_mp_eval=True': ('mmdet', dict(use_mp_eval=True)),
               'RLECocoMetric (pycocotools)': ('ours', dict(cocoeval_backend='pycocotools'))}
    with contextlib.redirect_stdout(io.StringIO()):
        chosen = resolve_backend('auto', use_mp_eval=False).name
    choices[f"RLECocoMetric cocoeval_backend='auto' ({chosen})"] = ('ours', {})
    return choices


def measure(scenario: str, images: int, tmp: Path) -> dict:
    family = SCENARIOS[scenario][3]
    ann_file = str(tmp / 'gt.json')
    ground_truth(scenario, images, Path(ann_file))
    sides = {side: head_and_process(scenario, side, images, ann_file)
             for side in ('mmdet', 'ours')}
    assert _same_results(sides['mmdet']['results'], sides['ours']['results']), scenario
    gather = gather_cost(sides['ours']['results'])
    evaluations = {}
    for name, (side, kwargs) in evaluators(family).items():  # warm-up: imports, pools
        evaluate(scenario, side, ann_file, sides[side]['results'][:5], **kwargs)
    for name, (side, kwargs) in evaluators(family).items():
        evaluations[name] = evaluate(scenario, side, ann_file, sides[side]['results'], **kwargs)
    reported = [numbers for numbers, _ in evaluations.values()]
    assert all(numbers == reported[0] for numbers in reported), (scenario, reported)
    return dict(sides=sides, gather=gather, evaluations=evaluations, numbers=reported[0])


def _same_results(mmdet_results: list, our_results: list) -> bool:
    """The (gt, result) pairs are equal: numpy arrays compared by value, the RLE dicts exactly."""
    for (gt_a, res_a), (gt_b, res_b) in zip(mmdet_results, our_results, strict=True):
        if gt_a != gt_b or res_a.keys() != res_b.keys() or res_a['masks'] != res_b['masks']:
            return False
        if not all(np.array_equal(res_a[k], res_b[k]) for k in res_a if k != 'masks'):
            return False
    return True


def report(measured: dict, args, load: tuple) -> list:
    lines = [
        '# Predicted masks, head to metric: mmdet vs RLEFCNMaskHead + RLECocoMetric (CPU)', '',
        f'Command: `PYTHONPATH=. python3 {" ".join(sys.argv)}`', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python '
        f'{platform.python_version()}, torch {torch.__version__}. 1-minute load average '
        f'{load[0]:.1f} before, {load[1]:.1f} after (see the note under the tables).', '',
        f'{args.images} images per scenario. Paste and encode: 1 torch thread, a fresh process '
        'per path. Evaluate: one `compute_metrics` call each (bbox and segm). The reported '
        'numbers of every evaluator of a scenario were checked equal (all keys, every digit), and '
        'mmdet\'s and our metric results (boxes, scores, labels, RLE dicts) equal.', '',
        '## Per stage, whole set', '',
        '| scenario | stage | mmdet, s | ours, s | ours / mmdet |', '|---|---|---:|---:|---:|',
    ]
    for scenario, m in measured.items():
        mm, us = m['sides']['mmdet'], m['sides']['ours']
        evals = {name: seconds for name, (_, seconds) in m['evaluations'].items()}
        names = list(evals)
        mmdet_eval, our_eval = evals[names[0]], evals[[n for n in names if 'mmdet' not in n][-1]]
        rows = [('paste (head)', mm['paste_s'], us['paste_s']),
                ('transfer', 0.0, 0.0),
                ('encode (metric.process)', mm['encode_s'], us['encode_s']),
                ('gather (pickle + unpickle)', m['gather'][1], m['gather'][1]),
                (f'evaluate ({names[0]} vs {names[-1]})', mmdet_eval, our_eval)]
        for stage, a, b in rows:
            ratio = f'{b / a:.3f}x' if a else 'n/a'
            lines.append(f'| {scenario} | {stage} | {a:.2f} | {b:.2f} | {ratio} |')
        total_mmdet = sum(a for _, a, _ in rows)
        total_ours = sum(b for _, _, b in rows)
        lines.append(f'| {scenario} | **total** | **{total_mmdet:.1f}** | **{total_ours:.1f}** | '
                     f'**{total_ours / total_mmdet:.3f}x** |')
    lines += ['', '## Per image and memory', '',
              'Peak RSS rise over the whole loop of 500 images. Both sides hold the accumulated '
              'results (RLE dicts, about the size of their pickle), and glibc keeps some freed '
              'memory, so this is the whole process\'s cost of the stage, not the masks alone. '
              'The masks alone (one image, one call, a fresh process) are in '
              '[predicted_masks.md](predicted_masks.md): 29.4 MiB (mmdet) vs 0.1 MiB (ours) at '
              '640x480, 104.1 vs 0.1 MiB at 1333x800.', '',
              '| scenario | mmdet ms/img (paste + encode) | ours ms/img | mmdet peak RSS rise, MiB '
              '| ours, MiB | ours / mmdet | full-size masks of one image, MiB | results held '
              '(pickled), MiB |', '|---|---:|---:|---:|---:|---:|---:|---:|']
    for scenario, m in measured.items():
        mm, us = m['sides']['mmdet'], m['sides']['ours']
        height, width, dets, _ = SCENARIOS[scenario]
        per = [1e3 * (s['paste_s'] + s['encode_s']) / args.images for s in (mm, us)]
        lines.append(f'| {scenario} | {per[0]:.1f} | {per[1]:.1f} | {mm["peak_mib"]:.1f} | '
                     f'{us["peak_mib"]:.1f} | {us["peak_mib"] / mm["peak_mib"]:.3f}x | '
                     f'{dets * height * width / 2**20:.1f} | {m["gather"][0]:.1f} |')
    lines += ['', '## Evaluators, whole set', '',
              '| scenario | evaluator | s | s / image | vs the first |', '|---|---|---:|---:|---:|']
    for scenario, m in measured.items():
        first = next(iter(m['evaluations'].values()))[1]
        for name, (_, seconds) in m['evaluations'].items():
            lines.append(f'| {scenario} | {name} | {seconds:.2f} | '
                         f'{1e3 * seconds / args.images:.1f} ms | {seconds / first:.2f}x |')
    lines += ['', '## Totals against mmdet\'s strongest CPU setting', '',
              'mmdet\'s strongest CPU setting: the faster of its evaluators, pycocotools or '
              '`use_mp_eval=True` (COCOevalMP: processes over the CPUs); there is no faster paste '
              'or encode to choose. Ours: the faster of our evaluators.', '',
              '| scenario | mmdet best total, s | ours best total, s | ours / mmdet best |',
              '|---|---:|---:|---:|']
    for scenario, m in measured.items():
        mm, us = m['sides']['mmdet'], m['sides']['ours']
        evals = {name: seconds for name, (_, seconds) in m['evaluations'].items()}
        best_mmdet = min(s for n, s in evals.items() if 'mmdet' in n)
        best_ours = min(s for n, s in evals.items() if 'mmdet' not in n)
        base = m['gather'][1]
        a = mm['paste_s'] + mm['encode_s'] + base + best_mmdet
        b = us['paste_s'] + us['encode_s'] + base + best_ours
        lines.append(f'| {scenario} | {a:.1f} | {b:.1f} | {b / a:.3f}x |')
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', type=int, default=500)
    parser.add_argument('--scenarios', nargs='*', default=list(SCENARIOS))
    parser.add_argument('--out', type=Path,
                        default=Path('benchmarks/results/predicted_masks_metric.md'))
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--side', help=argparse.SUPPRESS)
    parser.add_argument('--ann-file', help=argparse.SUPPRESS)
    parser.add_argument('--child-out', type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # lvis 0.5.3 (PyPI's latest) accumulates with np.float, removed in numpy 1.24: mmdet's
    # LVISMetric cannot evaluate on numpy 2 without the alias.
    np.float = float
    if args.child:
        return run_head_and_process(args.child, args.side, args.images, args.ann_file,
                                    args.child_out)
    load_before = os.getloadavg()[0]
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in args.scenarios:
            print(f'{scenario} ...', flush=True)
            measured[scenario] = measure(scenario, args.images, Path(tmp))
    write_report(args.out, report(measured, args, (load_before, os.getloadavg()[0])))


if __name__ == '__main__':
    main()
