"""Mask R-CNN R50-FPN training through mmengine's Runner on the real data path, stock vs adopted.

What a user's training run sees, data loading included: mmdet's own zoo config
(``mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py``, loaded with ``Config.fromfile``) pointed at
generated data: photo-like 640x480 quality-90 JPEGs (random crops of real photographs,
benchmarks/photos.py) with COCO-like polygon instances (~7 an image, 1% crowd RLEs), written by
``benchmarks/batched_fetch.make_dataset``. The config's own loader settings (mmdet's: 2 persistent
workers, batch 2, ``Resize`` to 1333x800, ``RandomFlip``) unless ``--workers``/``--batch-size``.

- stock: the config as it is;
- adopted: the same config file ending in ``adopt(globals())`` (mmdet_ext/adopt.py), as a user
  writes it.

Both then get the same run settings: random weights (``model.backbone.init_cfg=None``: nothing
downloads), seed 0, ``IterBasedTrainLoop`` of ``--iters`` iterations, no validation or test, no
checkpoint, a log line per iteration. Each variant runs ``Runner.from_cfg(cfg).train()`` in its
own process (clean GPU peak counters). Measured: mmengine's own per-iteration ``time`` and
``data_time`` (``IterTimerHook``, read from the message hub by a hook that runs right after it),
medians over the iterations after ``--warmup``; samples/s = batch size / median time; the most
GPU memory allocated during the run; the first iteration's losses. A variant that fails gets its
error in its row.

    python3 tools/gpu/train_data_path.py [--images 32] [--iters 25] [--warmup 5] [--workers N]
        [--batch-size N] [--output FILE]
    python3 tools/gpu/train_data_path.py --smoke   # CPU, tiny sizes: checks the code path only
"""
import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.runner import Runner

from harness import REPO, mmcv_ops_status
from report import environment_lines, markdown_table, mib

sys.path.insert(0, str(REPO))  # the data set is benchmarks/batched_fetch.py's
from benchmarks.batched_fetch import make_dataset  # noqa: E402
from benchmarks.photos import photo_source  # noqa: E402

ZOO_CONFIG = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
VARIANTS = ('stock', 'adopted')
WIDTH, HEIGHT = 640, 480
SMOKE = dict(images=4, iters=3, warmup=1, scale=(320, 192))
ANN_FILE = 'annotations/instances_train.json'
RESULT_PREFIX = 'RESULT '
ADOPT_LINES = '''from mmdet_ext.adopt import adopt  # noqa: E402
adopt(globals())
'''


def config_text(data_root: Path, batch_size: int | None, workers: int | None) -> str:
    """The stock variant's config file: the zoo config on the generated data (its classes)."""
    categories = json.loads((data_root / ANN_FILE).read_text())['categories']
    classes = tuple(c['name'] for c in categories)
    loader = ''.join([f'batch_size={batch_size}, ' if batch_size else '',
                      f'num_workers={workers}, ' if workers is not None else ''])
    return f'''_base_ = '{ZOO_CONFIG}'
train_dataloader = dict({loader}dataset=dict(
    data_root='{data_root}/', ann_file='{ANN_FILE}', data_prefix=dict(img='train/'),
    metainfo=dict(classes={classes!r})))
'''


def run_settings(cfg: Config, work_dir: Path, iters: int, scale: tuple | None) -> None:
    """What both variants share beyond the user's file: random weights, a short iteration-based
    run, nothing but training. ``scale``: the ``Resize`` size instead of the config's (the smoke
    run). Set on the loaded config, not in the file: ``adopt`` (as of this script) drops the
    file's own ``model`` and ``default_hooks`` lines and the ``_delete_`` of its other dicts."""
    cfg.work_dir = str(work_dir)
    cfg.model.backbone.init_cfg = None  # no pretrained download
    cfg.randomness = dict(seed=0)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters)
    for stage in ('val', 'test'):
        cfg[f'{stage}_dataloader'] = cfg[f'{stage}_cfg'] = cfg[f'{stage}_evaluator'] = None
    cfg.default_hooks.checkpoint.update(by_epoch=False, interval=iters + 1, save_last=False)
    cfg.default_hooks.logger.interval = 1
    cfg.log_processor.by_epoch = False
    if scale is not None:
        for transform in cfg.train_dataloader.dataset.pipeline:
            if 'scale' in transform:
                transform.scale = scale


class IterationProbe(Hook):
    """Each training iteration's ``time`` and ``data_time`` as ``IterTimerHook`` (NORMAL) has
    just recorded them, and the first iteration's losses."""

    priority = 'LOW'

    def __init__(self) -> None:
        self.times: list[float] = []
        self.data_times: list[float] = []
        self.first_losses: dict[str, float] = {}

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        hub = runner.message_hub
        self.times.append(hub.get_scalar('train/time').current())
        self.data_times.append(hub.get_scalar('train/data_time').current())
        if not self.first_losses:
            self.first_losses = {k: float(v) for k, v in outputs.items()
                                 if k.startswith('loss')}


def train(variant: str, data_root: Path, work_dir: Path, args) -> dict:
    """One variant's run in this process: its measurements and what its data path was."""
    work_dir.mkdir(parents=True)
    text = config_text(data_root, args.batch_size, args.workers)
    path = work_dir / f'{variant}.py'
    path.write_text(text + ADOPT_LINES if variant == 'adopted' else text)
    cfg = Config.fromfile(str(path))
    run_settings(cfg, work_dir, args.iters, tuple(args.scale) if args.scale else None)
    loader = cfg.train_dataloader
    runner = Runner.from_cfg(cfg)
    probe = IterationProbe()
    runner.register_hook(probe)
    start = time.perf_counter()
    runner.train()
    on_cuda = next(runner.model.parameters()).is_cuda
    built = runner.train_dataloader  # as the hooks left it (WorkerDefaultsHook sets workers)
    return dict(
        times=probe.times, data_times=probe.data_times, first_losses=probe.first_losses,
        peak=torch.cuda.max_memory_allocated() if on_cuda else None,
        seconds=time.perf_counter() - start, batch_size=loader.batch_size,
        workers=built.num_workers, persistent=built.persistent_workers,
        pinned=built.pin_memory, samples=len(built.dataset),
        path=[t.type for t in loader.dataset.pipeline[:2]] + [
            loader.get('collate_fn', {}).get('type', 'pseudo_collate'),
            cfg.model.data_preprocessor.type])


def child(variant: str, data_root: Path, work_dir: Path, args, timeout: float,
          env: dict) -> dict:
    """Run ``variant`` in a fresh process (its own session: a timeout ends it and its
    DataLoader workers); its result, ``{'error': ...}`` when it failed."""
    command = [sys.executable, __file__, '--child', variant, '--data-root', str(data_root),
               '--work-dir', str(work_dir), '--iters', str(args.iters)]
    for flag, value in (('--batch-size', args.batch_size), ('--workers', args.workers)):
        if value is not None:
            command += [flag, str(value)]
    if args.scale:
        command += ['--scale', *map(str, args.scale)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env}, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        output += f'\ntimed out after {timeout:.0f} s'
    lines = output.splitlines()
    results = [json.loads(t[len(RESULT_PREFIX):]) for t in lines if t.startswith(RESULT_PREFIX)]
    if not results:
        last = next((t for t in reversed(lines) if t.strip()), f'exit status {proc.returncode}')
        results = [dict(error=last.strip())]
    if 'error' in results[-1]:
        print(f'--- {variant} failed; the last lines of its output: ---', *lines[-40:],
              sep='\n', file=sys.stderr)
    return results[-1]


def row(variant: str, result: dict, warmup: int) -> list[str]:
    """The table's cells for one variant."""
    if 'error' in result:
        return [variant, '-', '-', '-', '-', '-', f'fails: {result["error"][:300]}']
    times, data_times = result['times'][warmup:], result['data_times'][warmup:]
    if not times:
        return [variant, '-', '-', '-', '-', '-',
                f'only {len(result["times"])} iterations, none after {warmup} warm-up']
    seconds, data_seconds = statistics.median(times), statistics.median(data_times)
    losses = ', '.join(f'{k} {v:.4f}' for k, v in result['first_losses'].items())
    return [variant, f'{seconds * 1e3:,.1f} ms', f'{data_seconds * 1e3:,.1f} ms',
            f'{data_seconds / seconds:.1%}', f'{result["batch_size"] / seconds:.1f}',
            mib(result['peak']) if result['peak'] is not None else '-',
            f'{" + ".join(result["path"])}; batch {result["batch_size"]}, '
            f'{result["workers"]} workers'
            + ''.join(f', {name}' for name in ('persistent', 'pinned') if result[name])
            + f'; {result["samples"]} images; '
            f'median of {len(times)} iterations; run {result["seconds"]:.0f} s; '
            f'first iteration: {losses}']


def table(rows: list[list[str]]) -> str:
    return markdown_table(['variant', 'time / iter', 'data_time / iter', 'data_time / time',
                           'samples/s', 'peak GPU memory', 'data path; notes'], rows,
                          numbers=set(range(1, 6)))


def measure(args) -> tuple[list[str], list[list[str]]]:
    """Environment and data lines, and a row per variant."""
    _, _, ops_text = mmcv_ops_status()
    lines = environment_lines(ops_text)
    source = photo_source()
    content = 'photos' if source is not None else 'synthetic'
    hide_gpu = {'CUDA_VISIBLE_DEVICES': ''} if args.smoke else {}
    with tempfile.TemporaryDirectory(prefix='train_data_path_') as tmp:
        data_root = Path(tmp) / 'data'
        paths = make_dataset(data_root, args.images, WIDTH, HEIGHT, content)
        coco = json.loads((data_root / ANN_FILE).read_text())
        lines.append(
            f'Data: {len(paths)} {WIDTH}x{HEIGHT} quality-90 JPEGs, '
            + (f'crops of the photographs in {source.name if source.suffix else source}'
               if source is not None else
               'synthetic photo-like content (no scikit-image photographs found)')
            + f', {len(coco["annotations"])} COCO-like instances; {ZOO_CONFIG}, random weights, '
            f'{args.iters} iterations, medians after {args.warmup} warm-up iterations')
        results = {variant: child(variant, data_root, Path(tmp) / variant, args, args.timeout,
                                  hide_gpu) for variant in VARIANTS}
    return lines, [row(variant, result, args.warmup) for variant, result in results.items()]


def markdown(lines: list[str], rows: list[list[str]], command: str) -> str:
    today = datetime.date.today().isoformat()
    return '\n'.join([
        '# Mask R-CNN R50-FPN training on the real data path: stock vs adopted', '',
        f'Command: `{command}` (from the repository root), {today}.', '',
        *[f'- {line}' for line in lines], '', table(rows), '',
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=32, help='JPEGs generated')
    parser.add_argument('--iters', type=int, default=25, help='training iterations a variant')
    parser.add_argument('--warmup', type=int, default=5, help='first iterations left out')
    parser.add_argument('--workers', type=int, help="DataLoader workers (default: the config's)")
    parser.add_argument('--batch-size', type=int, help="default: the config's")
    parser.add_argument('--timeout', type=float, default=240, help='seconds a variant may run')
    parser.add_argument('--output', type=Path, help='markdown file to write the table to')
    parser.add_argument('--smoke', action='store_true',
                        help=f'on the CPU, {SMOKE["images"]} images, {SMOKE["iters"]} '
                        f'iterations at {SMOKE["scale"]}: checks the code path; numbers mean '
                        'nothing and are never written')
    # A variant's own process (child()): where the data and its work directory are.
    parser.add_argument('--child', choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument('--data-root', type=Path, help=argparse.SUPPRESS)
    parser.add_argument('--work-dir', type=Path, help=argparse.SUPPRESS)
    parser.add_argument('--scale', type=int, nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        try:
            result = train(args.child, args.data_root, args.work_dir, args)
        except Exception as err:  # reported in the variant's row, not a reason to stop
            traceback.print_exc()
            message = str(err).strip().splitlines()
            result = dict(error=f'{type(err).__name__}: {message[0] if message else ""}')
        print(RESULT_PREFIX + json.dumps(result), flush=True)
        return
    if args.smoke and args.output:
        parser.error('--smoke numbers mean nothing; they are not written (drop --output)')
    if args.smoke:
        args.images, args.iters, args.warmup = SMOKE['images'], SMOKE['iters'], SMOKE['warmup']
        args.scale = SMOKE['scale']

    lines, rows = measure(args)
    if args.smoke:
        lines.insert(0, 'SMOKE RUN: on the CPU at tiny sizes; not results')
    print('\n'.join(lines))
    print(table(rows))
    if args.output is not None:
        command = 'python3 tools/gpu/train_data_path.py' + ''.join(f' {a}' for a in sys.argv[1:])
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(markdown(lines, rows, command))
        print(f'written: {args.output}')


if __name__ == '__main__':
    main()
