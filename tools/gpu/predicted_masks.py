"""Test-time instance masks to COCO RLE on the GPU: mmdet's path against ``paste_masks_to_rle``.

mmdet's path on a GPU: ``FCNMaskHead._predict_by_feat_single`` pastes each detection's 28 x 28
probabilities into a full-size mask (``_do_paste_mask(skip_empty=False)``, in chunks), compares
with ``mask_thr_binary``, and ``CocoMetric.process`` copies the [N, H, W] bool masks to the host
and encodes each with ``encode_mask_results``. Ours: ``paste_masks_to_rle(skip_empty=False)`` on
the device (the RLE runs only, no full-size mask), then ``to_coco_rles`` on the host.

Per image: 100 detections (``benchmarks/predicted_masks.py``'s: boxes log-uniform from 8 px to 70%
of the short side, smooth blobs with noise), at 640x480 and 1333x800. Time: median of --repeat
calls, synchronised, to the RLE dicts on the host. Peak GPU memory: above what was allocated
before the call. The RLE strings of both paths are compared before timing.
"""
import functools

import torch
from mmdet.structures.mask import encode_mask_results

from benchmarks.predicted_masks import THRESHOLD, detections, mmdet_masks
from mmdet_ext import ops
from report import NO_CUDA, Row, mib
from timing import median_seconds, peak_bytes

MEASUREMENT = 'd. predicted masks to RLE'
SIZES = [(480, 640), (800, 1333)]


def stock(probs, boxes, height, width) -> list[dict]:
    return encode_mask_results(mmdet_masks(probs, boxes, height, width).cpu().numpy())


def plugin(probs, boxes, height, width) -> list[dict]:
    counts, run_counts = ops.paste_masks_to_rle(probs, boxes, height, width, THRESHOLD,
                                                skip_empty=probs.device.type == 'cpu')
    return ops.to_coco_rles(counts, run_counts, height, width)


PATHS = {'stock (_predict_by_feat_single + encode_mask_results)': stock,
         'plugin (paste_masks_to_rle + to_coco_rles)': plugin}


def _differing(ours: list[dict], theirs: list[dict]) -> int:
    return sum(a['counts'] != b['counts'] for a, b in zip(ours, theirs)) + abs(len(ours) -
                                                                              len(theirs))


def measure(device: str, repeat: int = 7, warmup: int = 2, sizes=SIZES) -> list[Row]:
    """One row per path and size; the plugin's notes say how many masks differ from stock's."""
    if device == 'cuda' and not torch.cuda.is_available():
        return [Row(MEASUREMENT, name, notes=NO_CUDA) for name in PATHS]
    rows = []
    for height, width in sizes:
        probs, boxes = (t.to(device) for t in detections(height, width))
        calls = {name: functools.partial(fn, probs, boxes, height, width)
                 for name, fn in PATHS.items()}
        reference = calls[next(iter(PATHS))]()
        for name, call in calls.items():
            seconds = median_seconds(call, device, repeat, warmup)
            memory = mib(peak_bytes(call)) if device == 'cuda' else '-'
            differ = _differing(call(), reference)
            rows.append(Row(MEASUREMENT, f'{name}, device={device}',
                            f'{seconds * 1e3:,.2f} ms/img', memory,
                            f'{len(probs)} detections, {width}x{height}; RLE strings '
                            + ('= stock' if differ == 0 else f'of {differ} masks differ')))
    return rows
