"""mmdet's own train pipeline, as an adopted config keeps it, loaded sample by sample and batched.

``adopt(globals())`` keeps mmdet's loading steps: ``NativeLoadImageFromFile``,
``LoadLazyAnnotations``, ``Resize`` (``RandomChoiceResize`` in mmdet's multi-scale configs),
``RandomFlip(0.5)``, ``PackDetInputs``, with ``fast_collate``. The batched fetch plans those steps
as one loader (``fused_mmdet_loading.py``) and decodes, resizes and flips each batch in one native
call at full size (exactly the per-sample pixels). Contenders, measured as in
``batched_fetch.py`` (same machinery: pinned cores, persistent workers, seeded batches, best of
interleaved rounds, CPU seconds of every process):

- mmdet best: ``LoadImageFromFile(imdecode_backend='turbojpeg')`` + ``LoadAnnotations(
  poly2mask=False)`` + the same resize and flip, ``pseudo_collate``, workers swept;
- adopted, per sample: the adopted pipeline with ``batched_fetch=False``;
- adopted, batched, workers / threads: the same pipeline batched, 2 workers or ``num_workers=0``
  (a decode thread per pinned core);
- ceiling: read + ``decode_images_into`` at full size with the same resizes on the threads: the
  native work of this path and nothing else.

The first batches of the per-sample and batched loaders are asserted identical before timing.

    PYTHONPATH=. python3 benchmarks/adopted_pipeline.py [--images 64] [--batch-size 8]
        [--cores 0,1] [--passes 3] [--rounds 3]
"""
import os
import platform
import tempfile
from pathlib import Path

import psutil
import torch
from mmengine.dataset import pseudo_collate

import mmdet_ext
from benchmarks import write_report
from benchmarks.batched_fetch import (SCENARIOS, DecodeOnThreads, assert_same_batches, loader,
                                      loader_arguments, make_dataset, measure, mmdet_dataset,
                                      pin_to, shut_down)
from mmdet_ext import LazyCocoDataset, fast_collate
from mmdet_ext.datasets.sample_seeds import PerSampleSeedDataset

MMDET_BEST_WORKERS = (2, 3, 4)
# mmdet's multi-scale Mask R-CNN (mask-rcnn_r50_fpn_ms-poly-3x_coco.py) without its RLE detail.
MULTI_SCALE = dict(type='RandomChoiceResize', keep_ratio=True,
                   scales=[(1333, 640), (1333, 672), (1333, 704), (1333, 736), (1333, 768),
                           (1333, 800)])


def adopted_dataset(root: Path, resize: dict, **kwargs) -> PerSampleSeedDataset:
    """The pipeline ``adopt`` makes of mmdet's Mask R-CNN train pipeline (``resize`` its step)."""
    return PerSampleSeedDataset(LazyCocoDataset(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=[dict(type='NativeLoadImageFromFile'),
                  dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                  resize, dict(type='RandomFlip', prob=0.5), dict(type='PackDetInputs')],
        **kwargs))


def run_scenario(root: Path, paths: list[str], scale: tuple, args, cores: int) -> dict:
    batch, workers = args.batch_size, args.workers
    fixed = dict(type='Resize', scale=scale, keep_ratio=True)
    contenders = {
        'adopted, per sample': lambda: loader(adopted_dataset(root, fixed, batched_fetch=False),
                                              batch, workers, fast_collate, True),
        'adopted, batched, workers': lambda: loader(adopted_dataset(root, fixed), batch,
                                                    workers, fast_collate, True),
        'adopted, batched, threads': lambda: loader(adopted_dataset(root, fixed),
                                                    batch, 0, fast_collate, True),
        'multi-scale, per sample': lambda: loader(adopted_dataset(root, MULTI_SCALE,
                                                                  batched_fetch=False),
                                                  batch, workers, fast_collate, True),
        'multi-scale, batched, workers': lambda: loader(adopted_dataset(root, MULTI_SCALE),
                                                        batch, workers, fast_collate, True),
        'ceiling': lambda: DecodeOnThreads(paths, batch, cores, scale, reduced_decode=False),
    }
    for count in MMDET_BEST_WORKERS:
        contenders[f'mmdet best, {count} workers'] = (
            lambda w=count: loader(mmdet_dataset(root, scale, False, 'turbojpeg'), batch, w,
                                   pseudo_collate, False))
    assert_same_batches(contenders['adopted, per sample'](),
                        contenders['adopted, batched, workers'](),
                        contenders['adopted, batched, threads']())
    assert_same_batches(contenders['multi-scale, per sample'](),
                        contenders['multi-scale, batched, workers']())
    result = {name: (0.0, 0.0) for name in contenders}
    for _ in range(args.rounds):
        for name, make in contenders.items():
            ld = make()
            rate, cpu = measure(ld, args.passes)
            shut_down(ld)
            if rate > result[name][0]:
                result[name] = (rate, cpu)
    return result


def report(rows, args, cores, load_before, load_after) -> list[str]:
    order = ['mmdet best', 'adopted, per sample', 'adopted, batched, workers',
             'adopted, batched, threads', 'multi-scale, per sample',
             'multi-scale, batched, workers', 'ceiling']
    lines = [
        "# mmdet's own train pipeline (an adopted config): per sample and batched (issue 30)",
        '',
        f'Command: `PYTHONPATH=. python3 benchmarks/adopted_pipeline.py --images {args.images} '
        f'--batch-size {args.batch_size} --workers {args.workers} --cores {args.cores} '
        f'--passes {args.passes} --rounds {args.rounds}`',
        '',
        f'Machine: {platform.machine()}, pinned to CPUs {cores} of {psutil.cpu_count()}, '
        f'Python {platform.python_version()}, torch {torch.__version__}, mmdet_ext '
        f'{mmdet_ext.__version__}. Load average (1, 5, 15 min) before: '
        f'{", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}. {args.images} real photographs '
        '(benchmarks/photos.py) per scenario as quality-90 JPEGs, COCO-like annotations, batch '
        f'{args.batch_size}, {args.workers} workers unless said, persistent; best of '
        f'{args.rounds} interleaved rounds of one warm-up pass + {args.passes} timed passes.',
        '',
        '| scenario | ' + ' | '.join(order) + ' | batched / per sample | batched / mmdet best '
        '| batched / ceiling | multi-scale batched / per sample |',
        '|---|' + '---:|' * (len(order) + 4),
    ]
    details = []
    for name, result in rows:
        best = max((v for k, v in result.items() if k.startswith('mmdet best')),
                   key=lambda v: v[0])
        best_workers = [k for k, v in result.items() if v == best][0].split(', ')[1]
        batched = max(result['adopted, batched, workers'], result['adopted, batched, threads'],
                      key=lambda v: v[0])
        cells = {**result, 'mmdet best': best}
        row = [f'{cells[k][0]:.1f} ({1000 * cells[k][1]:.1f})' for k in order]
        ratios = [batched[0] / result['adopted, per sample'][0], batched[0] / best[0],
                  batched[0] / result['ceiling'][0],
                  result['multi-scale, batched, workers'][0] /
                  result['multi-scale, per sample'][0]]
        lines.append(f'| {name} | ' + ' | '.join(row) + ' | ' +
                     ' | '.join(f'{r:.2f}x' for r in ratios) + ' |')
        details.append(f'- {name}: mmdet best with {best_workers}. Every row: ' + ', '.join(
            f'{k} {v[0]:.1f}/s ({1000 * v[1]:.1f} CPU ms)' for k, v in result.items()) + '.')
    lines += ['', 'Cells: samples/s (CPU ms per sample, every process). "batched" is the better '
              'of the workers and threads rows. The ceiling decodes at full size, as this path '
              'must to give the per-sample pixels (no reduced decode).', '', *details]
    return lines


def main() -> None:
    parser = loader_arguments(__doc__.split('\n')[0], 'benchmarks/results/adopted_pipeline.md', 3)
    args = parser.parse_args()
    cores = pin_to(args.cores)
    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, width, height, scale in SCENARIOS:
            root = Path(tmp) / f'{width}x{height}'
            paths = make_dataset(root, args.images, width, height, 'photos')
            rows.append((name, run_scenario(root, paths, scale, args, len(cores))))
            print(name, rows[-1][1], flush=True)
    load_after = os.getloadavg()
    write_report(args.out, report(rows, args, cores, load_before, load_after))


if __name__ == '__main__':
    main()
