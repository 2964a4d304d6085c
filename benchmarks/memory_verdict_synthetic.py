"""The leak rule on synthetic series: how often is allocator wander named a leak, how soon is a
real leak named, and is a named leak ever taken back?

    PYTHONPATH=. python benchmarks/memory_verdict_synthetic.py [--seeds 30] [--out DIR]

A main process like the toy demo's (700 MiB, +80 MiB in the first 25 iterations) plus AR(1)
noise of 25 MiB standard deviation whose lag-1 correlation ``rho`` sets how slowly it wanders
(0: independent; 0.9: ~10 iterations; 0.99: ~100 iterations, a random walk within an epoch),
plus a planted leak (MiB per 1000 iterations). Each series is judged at every epoch end as
``MemoryWatchHook`` would (record thinned to <= 400 samples, the named-leak memory carried from
one judgement to the next), at the default thresholds. Two run shapes: the demo's (288
iterations, 24 per epoch) and a longer one (2000 iterations, 100 per epoch). Writes
``<out>/memory_verdict_synthetic.md``.
"""
import argparse
from pathlib import Path

import numpy as np

from mmdet_ext.engine.memory import LEAK, VerdictThresholds, judge_series

SHAPES = ((288, 24), (2000, 100))
RHOS = (0.0, 0.9, 0.99)
LEAKS = (0.0, 20.0, 100.0)


def wandering_main(n_iters: int, rho: float, leak: float, seed: int) -> np.ndarray:
    """Anonymous RSS (MiB) at iterations 1..n_iters."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0, 25 * np.sqrt(1 - rho ** 2), n_iters)
    noise = np.empty(n_iters)
    noise[0] = rng.normal(0, 25)
    for k in range(1, n_iters):
        noise[k] = rho * noise[k - 1] + steps[k]
    iters = np.arange(1, n_iters + 1)
    return 700 + 80 * np.minimum(iters, 25) / 25 + noise + leak * iters / 1000


def judge_run(anon: np.ndarray, per_epoch: int) -> list:
    """The verdicts at every epoch end, as the hook gives them."""
    iters = np.arange(1, len(anon) + 1)
    pids = np.full(len(anon), 7)
    named, verdicts = None, []
    for end in range(per_epoch, len(anon) + 1, per_epoch):
        stride = 1
        while end // stride > 400:
            stride *= 2
        idx = np.flatnonzero((iters[:end] % stride == 0) | (iters[:end] == 1))
        v = judge_series('main', iters[idx], pids[idx], anon[idx], None,
                         per_epoch if end > per_epoch else None, VerdictThresholds(), named)
        if v.verdict == LEAK and named is None:
            named = end
        verdicts.append((end, v.verdict))
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--seeds', type=int, default=30)
    parser.add_argument('--out', type=Path, default=Path(__file__).parent / 'results')
    args = parser.parse_args()
    rows = ['| iterations (per epoch) | rho | planted leak (MiB/1000 it) | runs named a leak '
            '| taken back after naming | first named (median) |', '|---|---:|---:|---:|---:|---:|']
    for n_iters, per_epoch in SHAPES:
        for rho in RHOS:
            for leak in LEAKS:
                named, taken_back, firsts = 0, 0, []
                for seed in range(args.seeds):
                    verdicts = judge_run(wandering_main(n_iters, rho, leak, seed), per_epoch)
                    labels = [v for _, v in verdicts]
                    if LEAK in labels:
                        named += 1
                        first = labels.index(LEAK)
                        firsts.append(verdicts[first][0])
                        taken_back += any(v != LEAK for v in labels[first:])
                first = str(int(np.median(firsts))) if firsts else '-'
                rows.append(f'| {n_iters} ({per_epoch}) | {rho} | {leak:.0f} | '
                            f'{named}/{args.seeds} | {taken_back} | {first} |')
                print(rows[-1], flush=True)
    text = '\n'.join([
        '# The leak rule on synthetic series', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/memory_verdict_synthetic.py --seeds '
        f'{args.seeds}`', '', __doc__.split('\n\n', 2)[2].strip(), '', *rows, ''])
    path = args.out / 'memory_verdict_synthetic.md'
    path.write_text(text)
    print(f'wrote {path}')


if __name__ == '__main__':
    main()
