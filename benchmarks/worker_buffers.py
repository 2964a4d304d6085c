"""What sending a batch of images from DataLoader workers costs, in new shared memory per batch
(what torch's ``default_collate`` does, and ``allocate_batch`` did before) against segments the
worker reuses (``worker_buffers``, what ``allocate_batch`` does now).

Both arms do the same work otherwise: each worker writes a batch's pixels into its buffer (a
copy from photo-like images held in memory, standing in for the decode), sends it, and the
training process reads every byte of it once (a copy into a buffer of its own, standing in for
the copy to the GPU). Two batch layouts: ``fast_collate``'s padded batch of images resized to
1333x800 (``pixels_on='worker'``, the main job) and the flat buffer of 640x480 images decoded at
full size (``pixels_on='device'``). 2 workers, pinned to the same cores, steady state; samples/s
and CPU ms per sample summed over the main process and its workers, best of interleaved rounds.

    PYTHONPATH=. python3 benchmarks/worker_buffers.py [--rounds 3]
"""
import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

from benchmarks import write_report
from benchmarks.batched_fetch import cpu_seconds, shut_down
from mmdet_ext.collate import allocate_batch

LAYOUTS = {
    'padded batch, 8 x 3 x 800 x 1344 (pixels_on=worker)': (8, 3, 800, 1344),
    'flat buffer, 8 x 3 x 480 x 640 (pixels_on=device)': (8 * 3 * 480 * 640,),
}
ARMS = ('new shared memory per batch (torch)', 'reused segments (worker_buffers)')
BATCHES_PER_PASS = 64


def new_shared(shape: tuple) -> torch.Tensor:
    """What ``default_collate`` does in a worker: a new shared-memory segment per batch."""
    storage = torch.UntypedStorage._new_shared(int(np.prod(shape)))
    return torch.empty(0, dtype=torch.uint8).set_(storage).view(shape)


class Batches(Dataset):
    """Batches of ``shape`` filled from a source image block; allocated per ``reuse``."""

    def __init__(self, shape: tuple, reuse: bool) -> None:
        self.shape, self.reuse = shape, reuse
        rng = np.random.default_rng(0)
        self.source = torch.from_numpy(rng.integers(0, 256, int(np.prod(shape)), np.uint8))

    def __len__(self) -> int:
        return BATCHES_PER_PASS * 8

    def __getitems__(self, indices: list) -> dict:
        if self.reuse:
            batch = allocate_batch(self.source, self.shape, False)
        else:
            batch = new_shared(self.shape)
        batch.view(-1).copy_(self.source)
        return {'inputs': batch, 'samples': len(indices)}


def run(shape: tuple, reuse: bool, workers: int, passes: int) -> tuple[float, float]:
    loader = DataLoader(Batches(shape, reuse), batch_size=8, num_workers=workers,
                        persistent_workers=True, collate_fn=lambda batch: batch)
    destination = torch.empty(shape, dtype=torch.uint8)
    for batch in loader:  # warm-up: workers started, pools filled
        destination.copy_(batch['inputs'])
    me = psutil.Process()
    processes = [me] + me.children(recursive=True)
    cpu_before, start = cpu_seconds(processes), time.perf_counter()
    samples = 0
    for _ in range(passes):
        for batch in loader:
            destination.copy_(batch['inputs'])
            samples += batch['samples']
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(processes) - cpu_before
    shut_down(loader)
    return samples / elapsed, cpu / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--cores', default='0,1')
    parser.add_argument('--passes', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/worker_buffers.md'))
    args = parser.parse_args()
    os.sched_setaffinity(0, [int(c) for c in args.cores.split(',')])
    torch.set_num_threads(1)
    load_before = os.getloadavg()
    best = {}
    for _ in range(args.rounds):
        for layout, shape in LAYOUTS.items():
            for arm in ARMS:
                rate, cpu = run(shape, arm == ARMS[1], args.workers, args.passes)
                if rate > best.get((layout, arm), (0.0, 0.0))[0]:
                    best[layout, arm] = (rate, cpu)
    load_after = os.getloadavg()
    lines = [
        '# Sending batches of images from DataLoader workers: new shared memory or reused',
        '',
        f'Command: `PYTHONPATH=. python3 benchmarks/worker_buffers.py --workers {args.workers} '
        f'--cores {args.cores} --passes {args.passes} --rounds {args.rounds}`',
        '',
        f'Machine: {platform.machine()}, kernel {platform.release()}, pinned to CPUs '
        f'{args.cores} of {psutil.cpu_count()}, torch {torch.__version__}. Load average '
        f'before: {", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}. {args.workers} persistent workers, '
        f'{BATCHES_PER_PASS} batches of 8 per pass, {args.passes} passes after a warm-up '
        f'pass, best of {args.rounds} interleaved rounds. Each worker copies the batch into its '
        'buffer; the training process copies it out once.',
        '',
        '| batch | ' + ' | '.join(ARMS) + ' | CPU saved per sample |',
        '|---|---:|---:|---:|',
    ]
    for layout in LAYOUTS:
        (rate_new, cpu_new), (rate_reused, cpu_reused) = (best[layout, arm] for arm in ARMS)
        lines.append(f'| {layout} | {rate_new:.1f}/s ({1000 * cpu_new:.3f} ms) | '
                     f'{rate_reused:.1f}/s ({1000 * cpu_reused:.3f} ms) | '
                     f'{1000 * (cpu_new - cpu_reused):.3f} ms |')
    lines += ['', 'Cells: samples/s (CPU ms per sample, all processes).']
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
