"""What sending a batch's instance tensors from a DataLoader worker costs, one storage per tensor
(as mmdet's pipeline makes them) against views of one shared storage per dtype
(``share_instance_tensors``, what ``LazyCocoDataset``'s batch fetch does in a worker).

The samples are real: ``LazyCocoDataset`` + ``LoadLazyAnnotations`` + ``NativeLoadResizeFlip`` +
``PackDetInputs`` on COCO-like annotations (``make_scale_coco``), their ``DetDataSample``s as the
model receives them, without the pixels (sent the same way in both arms). A replaying dataset
hands out deep copies of them per batch, then shares their tensors or not; 2 workers, pinned to
the same cores, steady state; samples/s and CPU ms per sample summed over the main process and
its workers, best of interleaved rounds.

    PYTHONPATH=. python3 benchmarks/shared_instance_tensors.py [--rounds 3]
"""
import argparse
import copy
import os
import platform
import tempfile
from pathlib import Path

import psutil
import torch
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope
from torch.utils.data import DataLoader, Dataset

from benchmarks import write_report
from benchmarks.batched_fetch import make_dataset, measure, our_dataset, shut_down
from mmdet_ext.datasets.shared_instance_tensors import share_instance_tensors

SAMPLES_PER_PASS = 2048


class Replay(Dataset):
    """Deep copies of real samples, per batch; their instance tensors shared or not."""

    def __init__(self, samples: list, shared: bool) -> None:
        self.samples, self.shared = samples, shared

    def __len__(self) -> int:
        return SAMPLES_PER_PASS

    def __getitems__(self, indices: list) -> list:
        batch = [copy.deepcopy(self.samples[i % len(self.samples)]) for i in indices]
        if self.shared:
            share_instance_tensors(batch)
        return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--cores', default='0,1')
    parser.add_argument('--passes', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--out', type=Path,
                        default=Path('benchmarks/results/shared_instance_tensors.md'))
    args = parser.parse_args()
    os.sched_setaffinity(0, [int(c) for c in args.cores.split(',')])
    torch.set_num_threads(1)
    init_default_scope('mmdet')
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / 'coco'
        make_dataset(root, 64, 640, 480, 'synthetic')
        dataset = our_dataset(root, (1333, 800), 'worker', batched_fetch=False).dataset
        samples = [{'data_samples': dataset[i]['data_samples']} for i in range(len(dataset))]
    tensors = sum(len(s['data_samples'].gt_instances) for s in samples) / len(samples)
    load_before = os.getloadavg()
    best = {}
    for _ in range(args.rounds):
        for shared in (False, True):
            loader = DataLoader(Replay(samples, shared), batch_size=args.batch_size,
                                num_workers=args.workers, persistent_workers=True,
                                collate_fn=pseudo_collate)
            rate, cpu = measure(loader, args.passes)
            shut_down(loader)
            if rate > best.get(shared, (0.0, 0.0))[0]:
                best[shared] = (rate, cpu)
    load_after = os.getloadavg()
    lines = [
        '# Sending instance tensors from DataLoader workers: one storage each, or shared',
        '',
        f'Command: `PYTHONPATH=. python3 benchmarks/shared_instance_tensors.py --batch-size '
        f'{args.batch_size} --workers {args.workers} --cores {args.cores} --passes '
        f'{args.passes} --rounds {args.rounds}`',
        '',
        f'Machine: {platform.machine()}, pinned to CPUs {args.cores} of {psutil.cpu_count()}, '
        f'torch {torch.__version__}. Load average before: '
        f'{", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}. {len(samples)} real DetDataSamples '
        f'(COCO-like, {tensors:.1f} instances each; gt and ignored boxes and labels: 4 tensors '
        f'per sample), replayed as deep copies, {SAMPLES_PER_PASS} per pass, batch '
        f'{args.batch_size}, persistent workers, best of {args.rounds} interleaved rounds.',
        '',
        '| instance tensors | samples/s | CPU ms per sample (all processes) |',
        '|---|---:|---:|',
        f'| one storage each (mmdet) | {best[False][0]:.1f} | {1000 * best[False][1]:.3f} |',
        f'| views of one shared storage per dtype | {best[True][0]:.1f} | '
        f'{1000 * best[True][1]:.3f} |',
        '',
        f'Saved: {1000 * (best[False][1] - best[True][1]):.3f} CPU ms per sample.',
    ]
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
