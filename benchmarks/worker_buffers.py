"""What sending a batch's tensors from DataLoader workers costs the way torch sends them (a new
shared-memory segment per tensor storage, its file descriptor fetched over a socket) against
``worker_buffers`` (what ``allocate_batch`` does now): images in segments the worker reuses,
small tensors inside the pickle; with the training process mapping each segment afresh for every
batch (as until the mappings were kept), and keeping its mappings (as now).

Both arms do the same work otherwise: each worker writes a batch into its tensors (a copy from
data held in memory, standing in for the decode), sends it, and the training process reads
every byte of the images once (a copy into a buffer of its own, standing in for the copy to the
GPU). Three batches: ``fast_collate``'s padded batch of images resized to 1333x800
(``pixels_on='worker'``, the main job), the flat buffer of 640x480 images decoded at full size
(``pixels_on='device'``), and the small tensors of a batch of 8 COCO samples (two storages of
boxes and labels, as ``share_instance_tensors`` makes them, and the three shape tensors of a
deferred batch). 2 workers, pinned to the same cores, steady state; samples/s and CPU ms per
sample summed over the main process and its workers, best of interleaved rounds.

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
from mmdet_ext import worker_buffers
from mmdet_ext.collate import allocate_batch

# name: [(dtype, shape) of each tensor of the batch]; the first one is read by the main process
# when it is an image batch (uint8).
LAYOUTS = {
    'padded batch, 8 x 3 x 800 x 1344 (pixels_on=worker)': [(torch.uint8, (8, 3, 800, 1344))],
    'flat buffer, 8 x 3 x 480 x 640 (pixels_on=device)': [(torch.uint8, (8 * 3 * 480 * 640,))],
    'small tensors: boxes 58 x 4, labels 58, 3 shape tensors 8 x 3': [
        (torch.float32, (58, 4)), (torch.int64, (58,))] + [(torch.int64, (8, 3))] * 3,
}
ARMS = ('as torch sends them', 'worker_buffers, mapped per batch',
        'worker_buffers, mappings kept')
BATCHES_PER_PASS = 64


def new_shared(dtype: torch.dtype, shape: tuple) -> torch.Tensor:
    """What ``default_collate`` does in a worker for a batch: a new shared-memory segment."""
    nbytes = int(np.prod(shape)) * torch.empty(0, dtype=dtype).element_size()
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


class Batches(Dataset):
    """Batches of ``layout`` filled from source tensors; allocated per ``ours``."""

    def __init__(self, layout: list, ours: bool) -> None:
        self.layout, self.ours = layout, ours
        rng = np.random.default_rng(0)
        self.sources = [torch.from_numpy(rng.integers(0, 100, shape).astype(
            torch.empty(0, dtype=dtype).numpy().dtype)) for dtype, shape in layout]

    def __len__(self) -> int:
        return BATCHES_PER_PASS * 8

    def __getitems__(self, indices: list) -> dict:
        tensors = []
        for source in self.sources:
            if self.ours:
                tensor = allocate_batch(source, tuple(source.shape))
            elif source.numel() >= 1 << 20:  # images: what default_collate does
                tensor = new_shared(source.dtype, tuple(source.shape))
            else:  # small tensors: made in the worker, sent by torch's reducer
                tensor = torch.empty_like(source)
            tensors.append(tensor.copy_(source))
        return {'tensors': tensors, 'samples': len(indices)}


def run(layout: list, arm: str, workers: int, passes: int) -> tuple[float, float]:
    ours = arm != ARMS[0]
    # Read by the training process only: with it off, each send comes with its file descriptor.
    worker_buffers.KEEP_MAPPINGS = arm == ARMS[2]
    loader = DataLoader(Batches(layout, ours), batch_size=8, num_workers=workers,
                        persistent_workers=True, collate_fn=lambda batch: batch)
    first = layout[0]
    destination = torch.empty(first[1], dtype=first[0]) if first[0] == torch.uint8 else None
    for batch in loader:  # warm-up: workers started, pools filled
        pass
    me = psutil.Process()
    processes = [me] + me.children(recursive=True)
    cpu_before, start = cpu_seconds(processes), time.perf_counter()
    samples = 0
    for _ in range(passes):
        for batch in loader:
            if destination is not None:
                destination.copy_(batch['tensors'][0])
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
        for layout, tensors in LAYOUTS.items():
            for arm in ARMS:
                rate, cpu = run(tensors, arm, args.workers, args.passes)
                if rate > best.get((layout, arm), (0.0, 0.0))[0]:
                    best[layout, arm] = (rate, cpu)
    load_after = os.getloadavg()
    lines = [
        '# Sending a batch from DataLoader workers: as torch does, or through worker_buffers',
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
        'tensors; the training process copies the images out once. As torch sends them: a new '
        'shared-memory segment per storage (images allocated as default_collate does). '
        'worker_buffers: images in reused segments, small tensors inside the pickle; mapped per '
        'batch: the training process maps each segment it receives afresh (its file descriptor '
        'fetched from the worker each time); mappings kept: once per segment.',
        '',
        '| batch | ' + ' | '.join(ARMS) + ' | CPU saved per sample, kept vs torch | '
        'kept vs mapped per batch |',
        '|---|---:|---:|---:|---:|---:|',
    ]
    for layout in LAYOUTS:
        cells = [best[layout, arm] for arm in ARMS]
        saved = [1000 * (cells[i][1] - cells[2][1]) for i in (0, 1)]
        lines.append(f'| {layout} | ' + ' | '.join(f'{rate:.1f}/s ({1000 * cpu:.3f} ms)'
                                                    for rate, cpu in cells) +
                     f' | {saved[0]:.3f} ms | {saved[1]:.3f} ms |')
    lines += ['', 'Cells: samples/s (CPU ms per sample, all processes).']
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
