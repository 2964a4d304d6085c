"""Soak: many samples through a real DataLoader; does any process keep growing after warm-up?

    PYTHONPATH=. python benchmarks/soak_dataloader.py [--samples 100000] [--workers 2]
        [--pipelines ours mmdet] [--warmup-samples 5000] [--out benchmarks/results]

Each pipeline runs in a fresh process on the toy COCO data (``mmdet_ext.toy_data``, 96 train
images of 320x240), repeated (mmengine ``RepeatDataset``) to epochs of ``--epoch-samples``
samples, through one ``DataLoader`` with ``--workers`` persistent workers, batch size 4, no
shuffle, until ``--samples`` samples have been loaded:

- ``ours``: the toy config's fast pipeline: ``LazyCocoDataset`` + ``LoadLazyAnnotations`` +
  ``NativeLoadResizeFlip`` + ``PackDetInputs``, collated by ``fast_collate``;
- ``mmdet``: mmdet's ``CocoDataset`` + ``LoadImageFromFile`` + ``LoadAnnotations(with_mask=True)``
  + ``Resize`` + ``RandomFlip`` + ``PackDetInputs``, collated by ``pseudo_collate``.

Memory is read with ``MemoryWatchHook``'s sampler (``MemoryRecord.sample``: the main process and
each worker, named from the persistent iterator) every ``--sample-every`` batches. Growth after
warm-up = median of the last 5% of the samples minus the median of the first 5% after
``--warmup-samples``; the Theil-Sen slope over the same window is given too, as MiB per 100k
samples. Writes ``<out>/soak_dataloader.md`` and the raw series as ``soak_dataloader.json``.
"""
import argparse
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
SCALE = (320, 240)
BATCH_SIZE = 4


def _pipeline(name: str) -> tuple[dict, object]:
    """The dataset config and the collate function of one pipeline."""
    if name == 'ours':
        from mmdet_ext import fast_collate
        steps = [dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                 dict(type='NativeLoadResizeFlip', scale=SCALE, keep_ratio=True, prob=0.5),
                 dict(type='PackDetInputs')]
        return dict(type='LazyCocoDataset', pipeline=steps), fast_collate
    if name == 'mmdet':
        from mmengine.dataset import pseudo_collate
        steps = [dict(type='LoadImageFromFile'),
                 dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
                 dict(type='Resize', scale=SCALE, keep_ratio=True),
                 dict(type='RandomFlip', prob=0.5),
                 dict(type='PackDetInputs')]
        return dict(type='CocoDataset', pipeline=steps), pseudo_collate
    raise ValueError(f'unknown pipeline {name!r}; use ours or mmdet')


def run_soak(name: str, root: str, samples: int, workers: int, epoch_samples: int,
             sample_every: int, max_seconds: float = float('inf')) -> dict:
    """Runs in a fresh process: the soak of one pipeline; returns the memory series.

    Stops early, saying so in the result, when ``max_seconds`` have passed.
    """
    from mmengine.registry import init_default_scope
    from torch.utils.data import DataLoader

    import mmdet_ext  # noqa: F401  (registers the plugin's types)
    from mmdet.registry import DATASETS
    from mmdet_ext.engine.memory import MemoryRecord, release_free_heap

    init_default_scope('mmdet')
    dataset_cfg, collate = _pipeline(name)
    dataset_cfg.update(data_root=root, ann_file='annotations/instances_train.json',
                       data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
                       filter_cfg=dict(filter_empty_gt=True, min_size=8))
    base = DATASETS.build(dataset_cfg)
    times = max(1, math.ceil(epoch_samples / len(base)))
    dataset = DATASETS.build(dict(type='RepeatDataset', dataset=dataset_cfg, times=times))
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=workers,
                        persistent_workers=True, shuffle=False, collate_fn=collate)
    record = MemoryRecord()
    release_free_heap()  # as the hook does before workers fork
    done = batches = epoch = 0
    start = time.perf_counter()
    out_of_time = False
    while done < samples and not out_of_time:
        record.mark_epoch(epoch, batches)
        for batch in loader:
            done += len(batch['data_samples'])
            batches += 1
            if batches == 1 or batches % sample_every == 0:
                record.sample(done, epoch, {'train': loader}, 'train')
            if batches % 1000 == 0:
                print(f'{name}: {done} samples, {time.perf_counter() - start:.0f} s', flush=True)
            del batch
            out_of_time = time.perf_counter() - start > max_seconds
            if done >= samples or out_of_time:
                break
        epoch += 1
    record.sample(done, epoch, {'train': loader}, 'train')
    seconds = time.perf_counter() - start
    return dict(pipeline=name, samples=done, batches=batches, epochs=epoch, seconds=seconds,
                dataset_len=len(dataset), stopped_by_time=out_of_time, series=record.series)


def growth(series: dict, field: str, warmup: int) -> dict:
    """Growth of ``field`` after ``warmup`` samples: late median - early median, and slope."""
    from mmdet_ext.engine.memory import theil_sen_slope
    x = np.asarray(series['iter'], dtype=np.float64)
    y = np.asarray(series[field], dtype=np.float64)
    keep = x >= warmup
    x, y = x[keep], y[keep]
    if len(x) < 4:
        return dict(start=float('nan'), end=float('nan'), growth=float('nan'),
                    slope_per_100k=float('nan'), n=len(x))
    k = max(1, len(x) // 20)
    first, last = float(np.median(y[:k])), float(np.median(y[-k:]))
    return dict(start=first, end=last, growth=last - first,
                slope_per_100k=theil_sen_slope(x, y) * 100_000, n=int(len(x)))


def _goal(results: list[dict], warmup: int) -> list[str]:
    """Per pipeline: the largest growth of any process after warm-up, against the 1 MB goal
    (main RSS, worker USS; the larger of the two estimates, growth and fitted slope)."""
    lines = []
    for result in results:
        worst, where = 0.0, '-'
        for label, series in result['series'].items():
            if label == 'total':
                continue
            g = growth(series, 'rss' if label == 'main' else 'uss', warmup)
            scale = (result['samples'] - warmup) / 100_000
            size = max(g['growth'], g['slope_per_100k'] * scale)
            if size > worst:
                worst, where = size, label
        mb = worst * 1.048576
        goal = (f"goal <= 1 MB per process: {'met' if mb <= 1.0 else 'NOT met'}"
                if result['pipeline'] == 'ours' else 'the baseline, for comparison')
        lines.append(f"- {result['pipeline']}: largest growth after warm-up {worst:+.2f} MiB "
                     f"({mb:+.2f} MB, {where}); {goal}")
    return lines


def _child(args: argparse.Namespace) -> None:
    budget = float('inf') if args.max_minutes is None else 60.0 * args.max_minutes
    result = run_soak(args.child, args.root, args.samples, args.workers, args.epoch_samples,
                      args.sample_every, budget)
    Path(args.result).write_text(json.dumps(result))


def _table(results: list[dict], warmup: int) -> list[str]:
    rows = ['| pipeline | process | metric | after warm-up (MiB) | at end (MiB) | growth (MiB) '
            '| Theil-Sen slope (MiB / 100k samples) | samples read |',
            '| --- | --- | --- | --- | --- | --- | --- | --- |']
    for result in results:
        for label, series in sorted(result['series'].items()):
            if label == 'total':
                continue
            field = 'rss' if label == 'main' else 'uss'
            for metric in (field, 'anon'):
                g = growth(series, metric, warmup)
                rows.append(f"| {result['pipeline']} | {label} | {metric.upper()} "
                            f"| {g['start']:.1f} | {g['end']:.1f} | {g['growth']:+.2f} "
                            f"| {g['slope_per_100k']:+.2f} | {g['n']} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=100_000)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--pipelines', nargs='+', default=['ours', 'mmdet'])
    parser.add_argument('--epoch-samples', type=int, default=960,
                        help='samples per epoch (the toy set repeated); workers persist')
    parser.add_argument('--warmup-samples', type=int, default=5000)
    parser.add_argument('--sample-every', type=int, default=25, help='batches between reads')
    parser.add_argument('--max-minutes', type=float,
                        help='stop each pipeline after this long (the count run is reported)')
    parser.add_argument('--concurrent', action='store_true',
                        help='run the pipelines at the same time (memory figures are per '
                             'process; throughput then means little)')
    parser.add_argument('--out', default=str(REPO / 'benchmarks' / 'results'))
    parser.add_argument('--from-json', help='only rewrite the report from a soak_dataloader.json')
    parser.add_argument('--child', help=argparse.SUPPRESS)
    parser.add_argument('--root', help=argparse.SUPPRESS)
    parser.add_argument('--result', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child(args)
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        return _write_report(saved['results'], argparse.Namespace(**saved['args']),
                             saved['command'], Path(args.out))

    from mmdet_ext.toy_data import make_toy_coco
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = str(Path(tmp, 'toy_coco'))
        make_toy_coco(root, 96, 24, 0, 320, 240)
        procs = []
        for name in args.pipelines:
            result_path = Path(tmp, f'{name}.json')
            cmd = [sys.executable, __file__, '--child', name, '--root', root + '/',
                   '--result', str(result_path), '--samples', str(args.samples),
                   '--workers', str(args.workers), '--epoch-samples', str(args.epoch_samples),
                   '--sample-every', str(args.sample_every)]
            if args.max_minutes is not None:
                cmd += ['--max-minutes', str(args.max_minutes)]
            procs.append((name, result_path, subprocess.Popen(cmd, cwd=REPO)))
            if not args.concurrent:
                procs[-1][2].wait()
        for name, result_path, proc in procs:
            if proc.wait() != 0:
                raise SystemExit(f'{name}: the soak process failed (exit code {proc.returncode})')
            result = json.loads(result_path.read_text())
            print(f"{name}: {result['samples']} samples in {result['seconds']:.0f} s "
                  f"({result['samples'] / result['seconds']:.0f} samples/s)", flush=True)
            results.append(result)

    command = ' '.join(['PYTHONPATH=. python3 benchmarks/soak_dataloader.py',
                        *sys.argv[1:]])
    _write_report(results, args, command, Path(args.out))


def _write_report(results: list[dict], args: argparse.Namespace, command: str, out: Path) -> None:
    """soak_dataloader.md (the tables) and soak_dataloader.json (the series) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    counts = ', '.join(f"{r['pipeline']} {r['samples']}" for r in results)
    lines = [f'# DataLoader soak: {counts} samples, {args.workers} persistent workers, batch '
             f'{BATCH_SIZE}, toy COCO repeated ({args.epoch_samples} samples per epoch)', '',
             f'Command: `{command}`', '',
             f'Machine: {platform.processor() or platform.machine()}, shared with other jobs; '
             f'memory read every {args.sample_every} batches with MemoryWatchHook\'s sampler. '
             f'Warm-up: the first {args.warmup_samples} samples. Growth = median of the last 5% '
             'of the reads minus the median of the first 5% after warm-up (1 MiB = 1.049 MB).',
             '']
    for result in results:
        stopped = (f" (stopped by --max-minutes before the {args.samples} asked)"
                   if result['stopped_by_time'] else '')
        lines.append(f"- {result['pipeline']}: {result['samples']} samples{stopped}, "
                     f"{result['batches']} batches, {result['epochs']} epochs over a "
                     f"{result['dataset_len']}-sample dataset, {result['seconds']:.0f} s "
                     f"({result['samples'] / result['seconds']:.0f} samples/s"
                     f"{', both pipelines at once' if args.concurrent else ''})")
    lines += [''] + _goal(results, args.warmup_samples)
    lines += [''] + _table(results, args.warmup_samples) + ['']
    (out / 'soak_dataloader.md').write_text('\n'.join(lines))
    (out / 'soak_dataloader.json').write_text(json.dumps(
        dict(args=vars(args), command=command, results=results)))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
