"""Where a training sample's time goes today, stage by stage, beside the decode ceiling (issue 30).

One DataLoader worker process (a real one: ``fast_collate`` allocates its batch in shared memory
there, as in training), one thread, warm page cache, photo-like JPEGs
(``deferred_pipeline.photo_like``) with the toy COCO annotations. For each of today's pipelines
(``LoadLazyAnnotations`` + ``NativeLoadResizeFlip`` fused or deferred + ``PackDetInputs``, then
``fast_collate``) it times per sample:

- ``get_data_info``: the store record to mmdet's ``data_info`` dict;
- each transform of the pipeline (``Compose`` run by hand, the same calls in the same order);
- ``fast_collate``, per batch, divided by the batch size;
- the worker-to-main transfer: ``ForkingPickler.dumps`` of the collated batch, which is what a
  DataLoader worker does to put it on its queue (the pixel batch is already in shared memory;
  other tensors move there);

and the ceiling: reading the file and ``cv2.imdecode`` at full size. The sum of the stages is what a
worker spends per sample; everything but the decode is what a batch-native path would amortise.

    PYTHONPATH=. python3 benchmarks/per_sample_breakdown.py [--images 64] [--batch-size 8]
        [--out benchmarks/results/per_sample_breakdown.md]
"""
import argparse
import os
import platform
import statistics
import tempfile
import time
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import cv2
import numpy as np
import torch
from mmengine.registry import init_default_scope
from torch.utils.data import DataLoader

import mmdet_ext  # noqa: F401  (registers the transforms)
from mmdet.datasets.transforms import PackDetInputs
from benchmarks import write_report
from benchmarks.deferred_pipeline import make_dataset, our_dataset
from mmdet_ext import fast_collate
from mmdet_ext.ops import decode_image

SCENARIOS = [('640x480 -> 1333x800', 640, 480, (1333, 800)),
             ('2560x1920 -> 1333x800', 2560, 1920, (1333, 800))]


def stage_times(dataset, batch_size: int, passes: int) -> dict[str, float]:
    """Median over ``passes`` of each stage's total time over the dataset, in ms per sample."""
    names = ['get_data_info'] + [type(t).__name__ for t in dataset.pipeline.transforms] + [
        'fast_collate', 'transfer (ForkingPickler.dumps of the batch)']
    runs = {name: [] for name in names}
    for _ in range(passes + 1):  # the first pass warms up and is dropped
        totals = dict.fromkeys(names, 0.0)
        batch = []
        for index in range(len(dataset)):
            start = time.perf_counter()
            data = dataset.get_data_info(index)
            totals['get_data_info'] += time.perf_counter() - start
            for transform in dataset.pipeline.transforms:
                start = time.perf_counter()
                data = transform(data)
                totals[type(transform).__name__] += time.perf_counter() - start
            batch.append(data)
            if len(batch) == batch_size or index == len(dataset) - 1:
                start = time.perf_counter()
                collated = fast_collate(batch)
                middle = time.perf_counter()
                ForkingPickler.dumps(collated)
                totals['fast_collate'] += middle - start
                totals['transfer (ForkingPickler.dumps of the batch)'] += (
                    time.perf_counter() - middle)
                batch = []
        for name in names:
            runs[name].append(totals[name])
    return {name: 1e3 * statistics.median(times[1:]) / len(dataset)
            for name, times in runs.items()}


def decode_and_pack(paths: list[str], planar: bool, passes: int) -> float:
    """ms per image to read, decode (``decode_image``, interleaved or ``planar``) and
    ``PackDetInputs`` the image: the deferred path's pixel handling before and after the planar
    decode, measured side by side."""
    pack = PackDetInputs(meta_keys=())
    runs = []
    for _ in range(passes + 1):
        start = time.perf_counter()
        for path in paths:
            with open(path, 'rb') as f:
                encoded = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
            image = decode_image(encoded, planar=planar)
            img = image.numpy().transpose(1, 2, 0) if planar else image.numpy()
            pack(dict(img=img))
        runs.append(time.perf_counter() - start)
    return 1e3 * statistics.median(runs[1:]) / len(paths)


def in_a_worker(function, *args):
    """``function(*args)`` run inside a real DataLoader worker process, its result returned."""
    loader = DataLoader([None], batch_size=1, num_workers=1,
                        collate_fn=lambda _: function(*args))
    return next(iter(loader))


def decode_ceiling(paths: list[str], passes: int) -> float:
    """ms per image to read the file and decode it with cv2 at full size."""
    runs = []
    for _ in range(passes + 1):
        start = time.perf_counter()
        for path in paths:
            with open(path, 'rb') as f:
                cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR)
        runs.append(time.perf_counter() - start)
    return 1e3 * statistics.median(runs[1:]) / len(paths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--passes', type=int, default=3)
    parser.add_argument('--out', type=Path,
                        default=Path('benchmarks/results/per_sample_breakdown.md'))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(0)
    init_default_scope('mmdet')
    load_before = os.getloadavg()[0]
    tables, layouts = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, width, height, scale in SCENARIOS:
            root = Path(tmp) / f'{width}x{height}'
            paths = make_dataset(root, args.images, width, height)
            ceiling = decode_ceiling(paths, args.passes)
            layouts.append((name, decode_and_pack(paths, False, args.passes),
                            decode_and_pack(paths, True, args.passes)))
            for pixels_on in ('worker', 'device'):
                stages = in_a_worker(stage_times, our_dataset(root, scale, pixels_on),
                                     args.batch_size, args.passes)
                tables.append((name, pixels_on, stages, ceiling))
    lines = [
        '# Where a training sample\'s time goes today (one worker process, one thread)', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/per_sample_breakdown.py --images '
        f'{args.images} --batch-size {args.batch_size} --passes {args.passes}`', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python '
        f'{platform.python_version()}, torch {torch.__version__}; 1-minute load average '
        f'{load_before:.1f} before, {os.getloadavg()[0]:.1f} after. {args.images} photo-like '
        f'JPEGs (quality 90) per scenario, toy COCO annotations (polygons and crowd RLEs), '
        f'batch {args.batch_size}; median of {args.passes} passes after a warm-up pass. '
        '`NativeLoadResizeFlip` includes the decode (reduced-size where the target allows: at '
        '2560x1920 it decodes at 1/2, so it can beat the full-size ceiling).', '',
    ]
    for name, pixels_on, stages, ceiling in tables:
        total = sum(stages.values())
        lines += [f'## {name}, pixels_on={pixels_on!r}', '',
                  '| stage | ms / sample | share |', '|---|---:|---:|']
        lines += [f'| {stage} | {ms:.3f} | {100 * ms / total:.0f}% |'
                  for stage, ms in stages.items()]
        lines += [f'| **total** | **{total:.2f}** | 100% |',
                  f'| decode ceiling (read + cv2.imdecode, full size) | {ceiling:.2f} | '
                  f'{ceiling / total:.2f}x of the total |', '']
    lines += ['## The deferred path\'s pixels: decoded interleaved or channel-planar', '',
              'Read + `decode_image` (full size) + `PackDetInputs` of the image, ms per image, '
              'both layouts in this run. Planar: `PackDetInputs` receives an HxWxC view of CxHxW '
              'memory and copies nothing (what `NativeLoadResizeFlip(pixels_on=\'device\')` '
              'does); interleaved: it copies HWC to CHW.', '',
              '| scenario | interleaved | planar | planar / interleaved |', '|---|---:|---:|---:|']
    lines += [f'| {name} | {interleaved:.3f} | {planar:.3f} | {planar / interleaved:.2f}x |'
              for name, interleaved, planar in layouts]
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
