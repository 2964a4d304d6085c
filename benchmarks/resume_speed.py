"""Time from ``--resume`` to the first new iteration, at iteration N: stock mmengine vs ours.

    PYTHONPATH=. python3 tools/make_toy_coco.py
    PYTHONPATH=. python3 benchmarks/resume_speed.py [--iters 25 100 200 400] [--repeats 2]
        [--out benchmarks/results]

The data side is the real one: the toy COCO config's train pipeline (``LazyCocoDataset``,
``LoadLazyAnnotations``, ``NativeLoadResizeFlip``, ``PackDetInputs``, ``fast_collate``), batch
size 4, 2 persistent DataLoader workers, ``InfiniteSampler``, ``IterBasedTrainLoop`` (the loop
where mmengine replays the skipped batches). The model is a one-convolution probe behind mmdet's
data preprocessor (``FastDetDataPreprocessor``): what is measured is the data skipping, which
does not depend on the model, and a probe lets one run train the N_max iterations to checkpoint.

One training run saves a checkpoint every 25 iterations (``ExactResumeHook`` on, so the
checkpoints carry the data position). Then, for each N and repeat, a fresh process resumes from
``iter_N.pth`` twice, in alternating order:

* stock: ``CpuCheckpointLoadHook`` only (it is needed to load any checkpoint under torch >= 2.6,
  and does not touch data): mmengine's ``IterBasedTrainLoop`` calls ``next()`` on the DataLoader
  N times, loading every skipped batch;
* ours: with ``ExactResumeHook``: the DataLoader starts at batch N, the skipped batches are
  drawn as indices only.

The time is from just before ``Runner(...)`` is constructed (imports done) to
``before_train_iter`` of the first new iteration, measured in the child process. Writes
``<out>/resume_speed.md``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA_ROOT = REPO / 'data' / 'toy_coco'
INTERVAL = 25


def child(work_dir: str, mode: str, max_iters: int, result: str) -> None:
    """Train ``max_iters`` (mode 'train'), or resume from ``iter_<max_iters>.pth`` (mode 'stock' /
    'ours') and write the time to the first new iteration to ``result``."""
    import torch
    import torch.nn as nn
    from mmengine.config import Config
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner
    from mmdet.registry import MODELS

    import mmdet_ext  # noqa: F401  (registers the plugin's datasets, transforms and hooks)

    class ProbeDetector(BaseModel):
        """conv(3->4) on the batch; the loss is its mean square (enough for an optimizer step)."""

        def __init__(self) -> None:
            super().__init__(data_preprocessor=MODELS.build(
                dict(type='FastDetDataPreprocessor')))
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, inputs: torch.Tensor, data_samples=None, mode: str = 'tensor'):
            out = self.conv(inputs)
            return dict(loss=out.pow(2).mean()) if mode == 'loss' else [out]

    class FirstNewIteration(Hook):
        def __init__(self, start: float) -> None:
            self.start = start

        def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
            if mode != 'train':
                Path(result).write_text(json.dumps(dict(
                    seconds=time.perf_counter() - self.start, iter=runner.iter)))
                raise SystemExit(0)

    init_default_scope('mmdet')
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/toy_coco_instance.py'))
    loader = cfg.train_dataloader.to_dict()
    loader['dataset']['data_root'] = f'{DATA_ROOT}/'
    loader['sampler'] = dict(type='InfiniteSampler', shuffle=True)
    hooks = [dict(type='CpuCheckpointLoadHook')]
    if mode != 'stock':
        hooks.append(dict(type='ExactResumeHook'))
    start = time.perf_counter()
    runner = Runner(
        model=ProbeDetector(), work_dir=work_dir, default_scope='mmdet',
        train_dataloader=loader,
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=max_iters + (mode != 'train')),
        default_hooks=dict(logger=dict(type='LoggerHook', interval=50),
                           checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False,
                                           interval=INTERVAL, max_keep_ckpts=-1)),
        custom_hooks=[*hooks, FirstNewIteration(start)],
        randomness=dict(seed=0), resume=mode != 'train',
        load_from=None if mode == 'train' else f'{work_dir}/iter_{max_iters}.pth',
        log_level='WARNING')
    runner.train()


def run_child(work_dir: str, mode: str, iters: int) -> dict:
    with tempfile.NamedTemporaryFile(suffix='.json', delete=False) as f:
        result = f.name
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(REPO), os.environ.get('PYTHONPATH',
                                                                                    '')])}
    proc = subprocess.run([sys.executable, __file__, '--child', work_dir, mode, str(iters),
                           result], env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f'{mode} {iters}: exit {proc.returncode}\n{proc.stderr[-3000:]}')
    data = json.loads(Path(result).read_text()) if mode != 'train' else {}
    os.unlink(result)
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--iters', type=int, nargs='+', default=[25, 100, 200, 400])
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--out', default=str(REPO / 'benchmarks' / 'results'))
    args = parser.parse_args()
    if any(n % INTERVAL for n in args.iters):
        parser.error(f'--iters must be multiples of {INTERVAL} (the checkpoint interval)')
    if not (DATA_ROOT / 'annotations' / 'instances_train.json').is_file():
        sys.exit(f'{DATA_ROOT} has no toy data: run PYTHONPATH=. python3 tools/make_toy_coco.py')
    work_dir = tempfile.mkdtemp(prefix='resume_speed_')
    t0 = time.perf_counter()
    run_child(work_dir, 'train', max(args.iters))
    print(f'trained {max(args.iters)} iterations in {time.perf_counter() - t0:.0f} s', flush=True)
    times: dict[tuple[str, int], list[float]] = {}
    for n in args.iters:
        for repeat in range(args.repeats):
            for mode in (('stock', 'ours') if repeat % 2 == 0 else ('ours', 'stock')):
                got = run_child(work_dir, mode, n)
                assert got['iter'] == n, got  # the first new iteration is iteration N
                times.setdefault((mode, n), []).append(got['seconds'])
                print(f'N={n} {mode}: {got["seconds"]:.2f} s', flush=True)
    rows = ['| N (resume at iteration) | stock mmengine (s) | ours (s) | stock / ours |',
            '| ---: | ---: | ---: | ---: |']
    for n in args.iters:
        stock, ours = (statistics.median(times[(m, n)]) for m in ('stock', 'ours'))
        rows.append(f'| {n} | {stock:.2f} | {ours:.2f} | {stock / ours:.1f}x |')
    command = 'PYTHONPATH=. python3 benchmarks/resume_speed.py ' + ' '.join(
        ['--iters', *map(str, args.iters), '--repeats', str(args.repeats)])
    report = '\n'.join([
        '# Resume speed: time from `--resume` to the first new iteration', '',
        f'Command: `{command}` (after `PYTHONPATH=. python3 tools/make_toy_coco.py`).', '',
        'Toy COCO train pipeline (real transforms), batch 4, 2 persistent workers, '
        '`InfiniteSampler`, `IterBasedTrainLoop`, one-convolution probe model; CPU, '
        f'{os.cpu_count()} cores (shared with other jobs). Median of {args.repeats} '
        'fresh processes per cell, stock and ours alternating. Seconds from just before '
        '`Runner(...)` (imports done) to `before_train_iter` of iteration N.', '',
        *rows, '',
        'Stock: mmengine 0.10.7 replays N batches through the pipeline (`next()` N times). '
        'Ours: `ExactResumeHook` starts the DataLoader at batch N; the skipped batches are '
        'drawn from the sampler as indices only.', ''])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / 'resume_speed.md').write_text(report)
    print(report)


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == '--child':
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
