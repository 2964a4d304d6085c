"""Chosen rows of ``batched_fetch.py`` at 640x480 -> 1333x800, their rounds interleaved: for a
before/after comparison of a few rows with more rounds than the whole benchmark can afford.

    PYTHONPATH=. python3 benchmarks/trees.py --tree before=/path/to/old --tree after=. \\
        --repeat 4 --out benchmarks/results/data_path_engine_worker_rows.md \\
        -- $PWD/benchmarks/loader_rows.py --rows 'batched, workers' 'batched, workers, dicts'

Given by an absolute path, ``trees.py`` runs this one file in every checkout, each with its own
``benchmarks/batched_fetch.py`` and extension: it uses only what that file has had since before
the batch engine (its dataset maker, its loaders and its timer). Rows: ``batched_fetch.py``'s of
the same name (its docstring says what each is).
"""
import argparse
import os
import tempfile
from pathlib import Path

from benchmarks import write_report
from benchmarks.batched_fetch import (InstancesAsDicts, loader, make_dataset, measure,
                                      our_dataset, pin_to, shut_down)
from mmdet_ext import fast_collate

SCENARIO = ('640x480 -> 1333x800', 640, 480, (1333, 800))


def contenders(root: Path, scale: tuple, batch: int, workers: int) -> dict:
    return {
        'today, deferred': lambda: loader(our_dataset(root, scale, 'device',
                                                      batched_fetch=False), batch, workers,
                                          fast_collate, True),
        'batched, workers': lambda: loader(our_dataset(root, scale, 'device'), batch, workers,
                                           fast_collate, True),
        'batched fused, workers': lambda: loader(our_dataset(root, scale, 'worker'), batch,
                                                 workers, fast_collate, True),
        'batched, workers, dicts': lambda: loader(
            our_dataset(root, scale, 'device', InstancesAsDicts), batch, workers, fast_collate,
            True),
        'batched fused, workers, dicts': lambda: loader(
            our_dataset(root, scale, 'worker', InstancesAsDicts), batch, workers, fast_collate,
            True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rows', nargs='+', required=True)
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--cores', default='0,1')
    parser.add_argument('--passes', type=int, default=5)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--out', type=Path, required=True)
    args = parser.parse_args()
    pin_to(args.cores)
    name, width, height, scale = SCENARIO
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_dataset(root, args.images, width, height, 'photos')
        makers = contenders(root, scale, args.batch_size, args.workers)
        unknown = [row for row in args.rows if row not in makers]
        if unknown:
            raise SystemExit(f'unknown rows {unknown}; known: {list(makers)}')
        best = {row: (0.0, 0.0) for row in args.rows}
        for _ in range(args.rounds):
            for row in args.rows:
                built = makers[row]()
                rate, cpu = measure(built, args.passes)
                shut_down(built)
                if rate > best[row][0]:
                    best[row] = (rate, cpu)
    write_report(args.out, [
        '# Chosen loader rows', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/loader_rows.py --rows '
        f'{" ".join(repr(row) for row in args.rows)} --images {args.images} --batch-size '
        f'{args.batch_size} --workers {args.workers} --cores {args.cores} --passes '
        f'{args.passes} --rounds {args.rounds}` (load average after: '
        f'{", ".join(f"{v:.2f}" for v in os.getloadavg())})', '',
        f'- {name}: Every row: ' + ', '.join(
            f'{row} {rate:.1f}/s ({cpu * 1e3:.2f} CPU ms)' for row, (rate, cpu) in best.items())])


if __name__ == '__main__':
    main()
