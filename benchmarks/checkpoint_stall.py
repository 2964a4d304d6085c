"""Training stall per checkpoint save: mmengine's ``CheckpointHook`` against
``AtomicCheckpointHook``, blocking and in the background (its default).

Each run is its own process: a real mmengine Runner trains a small model that carries a frozen
ballast of random float32 tensors (200 of them, as a detector's state dict has hundreds), so that
its checkpoint is SIZE MiB; it saves every ``--interval`` iterations. Before each saving iteration
the run waits, untimed, until no save is in flight (as when saves are an epoch apart), so that
every save is measured alone. Per save, the stall: that iteration's time minus the median of
the iterations that do not save. Also per run: how long the run's end waits for the last save,
and the peak extra host memory (the process's peak RSS minus its RSS before the first save).

Targets: a directory on the local disk, and (``--slow-python``) a FUSE mount over another one
whose writes are paced to ``--slow-mb-per-s`` (``throttled_fs.py``: this machine has no
device-mapper for ``dm-delay``). Mounting needs root and /dev/fuse.

    PYTHONPATH=. python3 benchmarks/checkpoint_stall.py --sizes-mib 340 2048 \\
        --slow-python ~/.cache/mmdet_ext/venvs/fuse/bin/python --out RESULT.md
"""
import argparse
import json
import os
import os.path as osp
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CONTENDERS = {
    'stock CheckpointHook': dict(type='CheckpointHook'),
    'AtomicCheckpointHook, blocking': dict(type='AtomicCheckpointHook', background=False),
    'AtomicCheckpointHook, background (default)': dict(type='AtomicCheckpointHook'),
}


def rss_mib(field: str = 'VmRSS') -> float:
    with open('/proc/self/status') as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 1024


def child(work_dir: str, size_mib: int, contender: str, interval: int, saves: int) -> dict:
    """One run; returns its measurements."""
    import torch
    import torch.nn as nn
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel
    from mmengine.runner import Runner
    from torch.utils.data import Dataset

    import mmdet_ext  # noqa: F401  (registers AtomicCheckpointHook)
    from mmdet_ext.engine.checkpoint_saving import background_writer

    class BallastNet(BaseModel):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.Linear(512, 512)
            numel = size_mib * 2**20 // 4 // 200
            generator = torch.Generator().manual_seed(0)
            self.ballast = nn.ParameterList(
                nn.Parameter(torch.randn(numel, generator=generator), requires_grad=False)
                for _ in range(200))

        def forward(self, inputs, mode='tensor'):
            out = inputs
            for _ in range(8):
                out = torch.tanh(self.layer(out))
            return dict(loss=out.square().mean()) if mode == 'loss' else out

    class Inputs(Dataset):
        def __len__(self) -> int:
            return 4096

        def __getitem__(self, index: int):
            return dict(inputs=torch.full((512, ), float(index % 7)))

    class StallProbe(Hook):
        priority = 'LOWEST'  # its after_train_iter comes after the checkpoint hook's

        def __init__(self) -> None:
            self.times, self.rss_before, self.start, self.last_end = [], None, 0.0, 0.0
            self.end_wait = 0.0

        def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
            if (runner.iter + 1) % interval == 0:
                while background_writer.in_flight():
                    time.sleep(0.01)
                if self.rss_before is None:
                    self.rss_before = rss_mib()
            self.start = time.perf_counter()

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
            self.last_end = time.perf_counter()
            self.times.append((runner.iter + 1, self.last_end - self.start))

        def after_run(self, runner) -> None:
            self.end_wait = time.perf_counter() - self.last_end

    probe = StallProbe()
    checkpoint = dict(CONTENDERS[contender], interval=interval, by_epoch=False, max_keep_ckpts=1)
    runner = Runner(
        model=BallastNet(), work_dir=work_dir, default_scope='mmdet',
        train_dataloader=dict(dataset=Inputs(), batch_size=256, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=False),
                              collate_fn=dict(type='default_collate')),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01, momentum=0.9)),
        train_cfg=dict(by_epoch=False, max_iters=interval * saves),
        default_hooks=dict(checkpoint=checkpoint, logger=dict(type='LoggerHook', interval=1000)),
        custom_hooks=[probe], log_level='WARNING')
    runner.train()
    saving = [t for i, t in probe.times if i % interval == 0]
    normal = statistics.median(t for i, t in probe.times if i % interval)
    file_mib = osp.getsize(osp.join(work_dir, f'iter_{interval * saves}.pth')) / 2**20
    return dict(stalls=[t - normal for t in saving], normal=normal, end_wait=probe.end_wait,
                peak_extra_mib=rss_mib('VmHWM') - probe.rss_before, file_mib=file_mib)


def mount_slow(python: str, mb_per_s: float, scratch: str) -> tuple[subprocess.Popen, str]:
    backing, mountpoint = osp.join(scratch, 'backing'), osp.join(scratch, 'slow')
    os.makedirs(backing), os.makedirs(mountpoint)
    server = subprocess.Popen([python, osp.join(osp.dirname(__file__), 'throttled_fs.py'),
                               backing, mountpoint, str(mb_per_s)])
    deadline = time.monotonic() + 30
    while not osp.ismount(mountpoint):
        assert server.poll() is None and time.monotonic() < deadline, 'the FUSE mount failed'
        time.sleep(0.1)
    return server, mountpoint


def table(rows: list, arguments: str, saves: int, interval: int) -> str:
    """The results as markdown: ``rows`` of (target, size, contender, ``child``'s result)."""
    lines = [f'Command: `PYTHONPATH=. python3 benchmarks/checkpoint_stall.py {arguments}`', '',
             f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, '
             f'load average after: {", ".join(f"{v:.2f}" for v in os.getloadavg())}. '
             f'{saves} saves per run, every {interval} iterations, each measured alone (the run '
             'waits, untimed, for no save to be in flight before a saving iteration). Iteration: '
             'the median of those that do not save (in the background mode they run while a '
             'write is in flight).', '',
             '| target | checkpoint | hook | stall per save, s (each) | median | vs stock | '
             'iteration, s | end of run waits, s | peak extra RSS, MiB |',
             '|---|---:|---|---|---:|---:|---:|---:|---:|']
    for target, size, contender, result in rows:
        stock = next(r for t, s, c, r in rows
                     if (t, s) == (target, size) and c.startswith('stock'))
        median, stock_median = statistics.median(result['stalls']), statistics.median(
            stock['stalls'])
        lines.append(f'| {target} | {result["file_mib"]:.0f} MiB | {contender} | '
                     f'{", ".join(f"{v:.3f}" for v in result["stalls"])} | {median:.3f} | '
                     f'{median / stock_median:.2f}x | {result["normal"]:.3f} | '
                     f'{result["end_wait"]:.2f} | {result["peak_extra_mib"]:.0f} |')
    return '\n'.join(lines) + '\n'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes-mib', type=int, nargs='+', default=[340, 2048])
    parser.add_argument('--interval', type=int, default=4)
    parser.add_argument('--saves', type=int, default=3)
    parser.add_argument('--local-dir', default=None, help='default: a temp dir on /tmp\'s disk')
    parser.add_argument('--slow-python', help='a python with fusepy: adds the slow target')
    parser.add_argument('--slow-mb-per-s', type=float, default=50.0)
    parser.add_argument('--child', nargs=3, metavar=('WORK_DIR', 'SIZE', 'CONTENDER'))
    parser.add_argument('--out')
    args = parser.parse_args()
    if args.child:
        work_dir, size, contender = args.child
        print(json.dumps(child(work_dir, int(size), contender, args.interval, args.saves)))
        return
    scratch = tempfile.mkdtemp(prefix='checkpoint_stall_', dir=args.local_dir)
    targets = {'local disk': osp.join(scratch, 'local')}
    server = None
    if args.slow_python:
        server, targets[f'FUSE, writes paced to {args.slow_mb_per_s:g} MB/s'] = mount_slow(
            args.slow_python, args.slow_mb_per_s, scratch)
    rows = []
    try:
        for target, directory in targets.items():
            for size in args.sizes_mib:
                for contender in CONTENDERS:
                    work_dir = osp.join(directory, 'run')
                    proc = subprocess.run(
                        [sys.executable, __file__, '--child', work_dir, str(size), contender,
                         '--interval', str(args.interval), '--saves', str(args.saves)],
                        capture_output=True, text=True, check=False)
                    shutil.rmtree(work_dir, ignore_errors=True)
                    if proc.returncode:
                        sys.exit(f'{target} {size} {contender}: {proc.stderr[-3000:]}')
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    rows.append((target, size, contender, result))
                    print(target, size, contender, result, flush=True)
    finally:
        if server is not None:
            subprocess.run(['fusermount', '-u', targets[next(reversed(targets))]], check=False)
            server.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)
    text = table(rows, ' '.join(sys.argv[1:]), args.saves, args.interval)
    print(text)
    if args.out:
        with open(args.out, 'w') as f:
            f.write(text)


if __name__ == '__main__':
    main()
