"""Test-time instance masks to COCO RLE: mmdet's path against paste_masks_to_rle, on the CPU.

mmdet's path is what one image's masks go through in a CPU evaluation:
``FCNMaskHead._predict_by_feat_single`` (each box's 28 x 28 probabilities pasted into a full-size
boolean mask with ``_do_paste_mask(skip_empty=True)``, then ``>= mask_thr_binary``), then
``CocoMetric.process``'s ``encode_mask_results`` (pycocotools ``encode`` of each Fortran-ordered
copy). Ours: ``paste_masks_to_rle`` (the same RLEs, no full-size masks) and ``to_coco_rles`` (the
same dicts with compressed strings). A third row keeps mmdet's pasting but encodes with
``rle_encode_batch``, and a second table times the encoders alone on the same full-size masks.
The sigmoid is left out of every row (all take the same probabilities).

Per image: 100 detections, box sides log-uniform from 8 px to 70 % of the image's short side,
clipped to the image as mmdet's bbox head does, masks smooth blobs with noise. Times: median of
--repeat calls, the paths alternating, at 1 and 2 torch threads. Memory: how far one call lifts
the peak RSS (Linux's VmHWM, reset before the call), each path in a fresh process after a warm-up
call on a 64x64 image. Outputs are checked identical (the RLE strings) before timing.

    PYTHONPATH=. python benchmarks/predicted_masks.py [--repeat 7]
        [--out benchmarks/results/predicted_masks.md]
"""
import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from mmdet.models.roi_heads.mask_heads.fcn_mask_head import FCNMaskHead
from mmdet.structures.mask import encode_mask_results
from mmengine.config import ConfigDict

from benchmarks import write_report
from mmdet_ext import ops

SIZES = [(480, 640), (800, 1333)]
DETECTIONS = 100
THRESHOLD = 0.5
HEAD = FCNMaskHead(num_convs=0, num_classes=1, class_agnostic=True)


def detections(height: int, width: int, count: int = DETECTIONS, seed: int = 0):
    """(probabilities [N, 28, 28] float32, boxes [N, 4] float32) of one image."""
    rng = np.random.default_rng(seed)
    side = np.exp(rng.uniform(np.log(8), np.log(0.7 * min(height, width)), (count, 2)))
    x1, y1 = rng.uniform(-0.1 * width, width, count), rng.uniform(-0.1 * height, height, count)
    boxes = np.stack([x1, y1, x1 + side[:, 0], y1 + side[:, 1]], 1)
    boxes = boxes.clip(0, [width, height, width, height])
    yy, xx = np.meshgrid(np.linspace(-1, 1, 28), np.linspace(-1, 1, 28), indexing='ij')
    logits = (8 * (1 - (xx**2 + yy**2) * rng.uniform(0.6, 1.8, (count, 1, 1))) +
              rng.normal(0, 1.5, (count, 28, 28)))
    probs = torch.from_numpy(logits.astype(np.float32)).sigmoid()
    return probs, torch.from_numpy(boxes.astype(np.float32))


def mmdet_masks(probs, boxes, height, width) -> torch.Tensor:
    """_predict_by_feat_single on the CPU, probabilities in (activate_map), scale factor 1."""
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # activate_map copies with new_tensor, which warns
        return HEAD._predict_by_feat_single(
            probs[:, None], boxes.clone(), torch.zeros(len(boxes), dtype=torch.long),
            {'ori_shape': (height, width), 'scale_factor': (1.0, 1.0)},
            ConfigDict(mask_thr_binary=THRESHOLD), rescale=True, activate_map=True)


def mmdet_path(probs, boxes, height, width) -> list[dict]:
    return encode_mask_results(mmdet_masks(probs, boxes, height, width).numpy())


def mmdet_paste_native_encode(probs, boxes, height, width) -> list[dict]:
    masks = mmdet_masks(probs, boxes, height, width)
    return ops.to_coco_rles(*ops.rle_encode_batch(masks), height, width)


def fused(probs, boxes, height, width) -> list[dict]:
    counts, run_counts = ops.paste_masks_to_rle(probs, boxes, height, width, THRESHOLD)
    return ops.to_coco_rles(counts, run_counts, height, width)


def fused_op_only(probs, boxes, height, width):
    return ops.paste_masks_to_rle(probs, boxes, height, width, THRESHOLD)


PATHS = {
    'mmdet (_predict_by_feat_single + encode_mask_results)': mmdet_path,
    'mmdet paste + rle_encode_batch': mmdet_paste_native_encode,
    'paste_masks_to_rle + to_coco_rles': fused,
    'paste_masks_to_rle alone (packed counts)': fused_op_only,
}


# Encoding alone, of the full-size masks mmdet pasted ([N, H, W] bool).
ENCODERS = {
    'encode_mask_results (pycocotools per mask)': lambda masks: encode_mask_results(
        masks.numpy()),
    'rle_encode_batch + to_coco_rles': lambda masks: ops.to_coco_rles(
        *ops.rle_encode_batch(masks), *masks.shape[1:]),
    'rle_encode_batch alone (packed counts)': ops.rle_encode_batch,
}


def median_times(paths: dict, inputs: tuple, repeat: int) -> dict[str, float]:
    times = {name: [] for name in paths}
    for _ in range(repeat):
        for name, fn in paths.items():
            start = time.perf_counter()
            fn(*inputs)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def peak_rss_rise_mib(name: str, height: int, width: int) -> float:
    """Run in a fresh process: how far one call of path `name` lifts the peak RSS above the
    RSS before it (Linux's resettable VmHWM)."""
    out = subprocess.run([sys.executable, __file__, '--memory-of', name, '--size',
                          f'{height}x{width}'], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])['mib']


def rss_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (the peak since the last reset) of this process, in KiB."""
    return int(re.search(rf'{field}:\s+(\d+)', Path('/proc/self/status').read_text()).group(1))


def measure_memory(name: str, size: str) -> None:
    height, width = map(int, size.split('x'))
    torch.set_num_threads(1)
    fn = PATHS[name]
    fn(*detections(64, 64, 2), 64, 64)  # first-call allocations out of the measurement
    inputs = (*detections(height, width), height, width)
    before = rss_kib('VmRSS')
    Path('/proc/self/clear_refs').write_text('5')  # Linux: the peak (VmHWM) restarts from now
    fn(*inputs)
    print(json.dumps({'mib': (rss_kib('VmHWM') - before) / 1024}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeat', type=int, default=7, help='timed calls; the median is kept')
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/predicted_masks.md'))
    parser.add_argument('--memory-of', help=argparse.SUPPRESS)
    parser.add_argument('--size', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_of:
        measure_memory(args.memory_of, args.size)
        return

    load_before = os.getloadavg()
    results = {}
    for height, width in SIZES:
        inputs = (*detections(height, width), height, width)
        expected = mmdet_path(*inputs)
        for name in ('mmdet paste + rle_encode_batch', 'paste_masks_to_rle + to_coco_rles'):
            assert PATHS[name](*inputs) == expected, name
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results[(height, width, threads)] = median_times(PATHS, inputs, args.repeat)
        torch.set_num_threads(1)
        masks = mmdet_masks(*inputs)
        results[(height, width, 'encode')] = median_times(ENCODERS, (masks, ), args.repeat)
        full_size_mib = DETECTIONS * height * width / 2**20
        memory = {name: peak_rss_rise_mib(name, height, width) for name in PATHS}
        results[(height, width, 'memory')] = (memory, full_size_mib)
    load_after = os.getloadavg()

    baseline = next(iter(PATHS))
    lines = [
        '# Test-time masks to COCO RLE: mmdet vs paste_masks_to_rle (CPU)',
        '',
        f'Command: `PYTHONPATH=. nice -n 15 python {" ".join(sys.argv)}` (from the repository '
        'root; PYTHONPATH picks this checkout over an installed mmdet_ext)',
        '',
        f'Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python '
        f'{platform.python_version()}, torch {torch.__version__}, numpy {np.__version__}. '
        f'**Shared and loaded**: other work (a test suite, demo trainings) ran on the same CPUs '
        f'throughout; load average (1, 5, 15 min) {tuple(round(x, 2) for x in load_before)} '
        f'before, {tuple(round(x, 2) for x in load_after)} after. Absolute times are therefore '
        'pessimistic and noisy; the paths alternate call by call, so their ratios are fairer.',
        '',
        f'Per image: {DETECTIONS} detections (boxes 8 px to 70 % of the short side, clipped to '
        f'the image; smooth 28 x 28 probability blobs), threshold {THRESHOLD}. Median of '
        f'{args.repeat} calls. All paths produce the same RLE dicts (checked). Speed-up: the '
        'mmdet row\'s time over the row\'s.',
        '',
        'Where the CPUs are already busy (see the load above), the 2-thread rows measure '
        'oversubscription more than parallelism: torch runs each of the many small tensor ops '
        'mmdet issues per box as an OpenMP region that waits for its second thread, which the '
        'load keeps descheduled; paste_masks_to_rle is one parallel region per call. Compare '
        'the paths at 1 thread.',
        '',
        '| image | threads | path | ms / image | speed-up |',
        '|---|---:|---|---:|---:|',
    ]
    for height, width in SIZES:
        for threads in (1, 2):
            times = results[(height, width, threads)]
            for name, seconds in times.items():
                lines.append(f'| {width}x{height} | {threads} | {name} | {seconds * 1e3:.1f} | '
                             f'{times[baseline] / seconds:.1f}x |')
    lines += [
        '',
        'Encoding alone: the same full-size masks (those mmdet pasted above), 1 thread.',
        '',
        '| image | encoder | ms / image | speed-up |',
        '|---|---|---:|---:|',
    ]
    for height, width in SIZES:
        times = results[(height, width, 'encode')]
        reference = next(iter(ENCODERS))
        for name, seconds in times.items():
            lines.append(f'| {width}x{height} | {name} | {seconds * 1e3:.1f} | '
                         f'{times[reference] / seconds:.1f}x |')
    lines += [
        '',
        'Peak host memory: how far one call lifts the process\'s peak RSS above its RSS '
        'before the call (Linux VmHWM, reset just before; 1 thread, a fresh process per row, '
        'after a warm-up call on a 64x64 image). "full-size masks" is the N x H x W boolean '
        'tensor mmdet holds.',
        '',
        '| image | path | peak RSS rise (MiB) | full-size masks (MiB) |',
        '|---|---|---:|---:|',
    ]
    for height, width in SIZES:
        memory, full_size_mib = results[(height, width, 'memory')]
        for name, mib in memory.items():
            lines.append(f'| {width}x{height} | {name} | {mib:.1f} | {full_size_mib:.1f} |')
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
