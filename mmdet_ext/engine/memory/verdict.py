"""Verdicts on a memory series: flat, sawtooth (bounded, copy-on-write) or leak.

Pure functions over numbers, so the rule can be unit-tested on synthetic series and explained in
one log line. Two measurements carry the decision (see ``docs/memory_watch.md``):

* **anonymous RSS** (``rss - shared``, MiB) is memory the process itself allocated. A page a forked
  worker copies on write was already counted in its anonymous RSS (inherited from the parent), so
  copy-on-write does not move it; a leak does. A robust slope of it, after a warm-up, is the leak
  test.
* **USS** (unique set size, MiB) also counts pages copied from the parent. A forked worker starts
  with almost none; the USS it holds beyond its own anonymous growth was copied on write:
  bounded by what the worker inherited, and gone when the worker restarts (non-persistent
  workers): the sawtooth.
"""
from dataclasses import asdict, dataclass
from typing import Optional, Sequence

import numpy as np

# Theil-Sen looks at all N^2/2 pairs; beyond this many points the series is thinned evenly.
MAX_FIT_POINTS = 400

FLAT = 'flat'
SAWTOOTH = 'sawtooth'
LEAK = 'leak'
UNKNOWN = 'unknown'


@dataclass(frozen=True)
class VerdictThresholds:
    """When growth counts as a leak or a sawtooth.

    Args:
        warmup_iters: iterations skipped at the start of each process life before the leak slope
            is fitted (caches, allocator pools and imports fill up there). For restarted
            workers at most a quarter of each life is skipped, so short epochs leave samples.
        leak_mib_per_kiter: anonymous-RSS slope (MiB per 1000 iterations) above which a process
            leaks. ``None`` disables this criterion.
        leak_pct_per_epoch: the same slope as a percentage of the process's anonymous RSS per
            epoch; either criterion suffices. ``None`` disables it.
        min_growth_mib: the fitted growth over the observed post-warm-up iterations must also
            reach this many MiB, and three times the residual noise, so that a short, noisy run
            is not called a leak.
        sawtooth_mib: private memory a worker copied from the main process on write (MiB, median
            over its lives) from which it is called a sawtooth. A bare torch worker copies
            10-15 MiB just by running.
        min_samples: post-warm-up samples needed before any verdict other than ``unknown``.
    """

    warmup_iters: int = 200
    leak_mib_per_kiter: Optional[float] = 10.0
    leak_pct_per_epoch: Optional[float] = 5.0
    min_growth_mib: float = 4.0
    sawtooth_mib: float = 64.0
    min_samples: int = 6

    def __post_init__(self) -> None:
        if self.warmup_iters < 0:
            raise ValueError(f'warmup_iters must be >= 0, got {self.warmup_iters}')
        if self.leak_mib_per_kiter is None and self.leak_pct_per_epoch is None:
            raise ValueError('set leak_mib_per_kiter or leak_pct_per_epoch (or both); '
                             'with neither no leak could ever be reported')
        for name in ('leak_mib_per_kiter', 'leak_pct_per_epoch'):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f'{name} must be > 0 or None, got {value}')
        if self.min_growth_mib < 0 or self.sawtooth_mib <= 0:
            raise ValueError('min_growth_mib must be >= 0 and sawtooth_mib > 0, got '
                             f'{self.min_growth_mib} and {self.sawtooth_mib}')
        if self.min_samples < 2:
            raise ValueError(f'min_samples must be >= 2, got {self.min_samples}')


@dataclass(frozen=True)
class Verdict:
    """The judgement on one process (or on CUDA memory), with the numbers behind it.

    Attributes:
        label: the process, e.g. ``main``, ``train.w0``, ``cuda``.
        verdict: ``flat``, ``sawtooth``, ``leak`` or ``unknown``.
        slope_mib_per_kiter: robust slope of the leak metric after warm-up (MiB / 1000 iter).
        pct_per_epoch: that slope as % of the metric's level per epoch (``None`` if unknown).
        fitted_growth_mib: slope times the post-warm-up iterations observed (MiB).
        copied_mib: median over lives of the USS copied from the parent on write (MiB),
            ``None`` when the series has no USS (main process, CUDA).
        lives: how many lives (pids) the series spans; > 1 means workers were restarted.
        last_mib: the last value of the leak metric (MiB).
        reason: one sentence saying why.
    """

    label: str
    verdict: str
    slope_mib_per_kiter: float
    pct_per_epoch: Optional[float]
    fitted_growth_mib: float
    copied_mib: Optional[float]
    lives: int
    last_mib: float
    reason: str

    def to_dict(self) -> dict:
        return asdict(self)


def theil_sen_slope(x: Sequence[float], y: Sequence[float],
                    groups: Optional[Sequence[int]] = None) -> float:
    """Median of pairwise slopes ``(y_j - y_i) / (x_j - x_i)``: robust to a few outliers.

    Args:
        x, y: equally long sequences (N,).
        groups: optional group id per point (N,); only pairs inside one group are used, so
            drops between groups (worker restarts) do not pull the slope down.

    Returns:
        The slope in units of y per unit of x; 0.0 when there is no pair with distinct x.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f'x and y must be 1-D and equally long, got {x.shape} and {y.shape}')
    g = np.zeros(len(x), dtype=np.int64) if groups is None else np.asarray(groups)
    if g.shape != x.shape:
        raise ValueError(f'groups must be as long as x, got {g.shape} and {x.shape}')
    if len(x) > MAX_FIT_POINTS:
        thin = np.linspace(0, len(x) - 1, MAX_FIT_POINTS).round().astype(np.int64)
        x, y, g = x[thin], y[thin], g[thin]
    i, j = np.triu_indices(len(x), k=1)
    keep = (g[i] == g[j]) & (x[i] != x[j])
    if not keep.any():
        return 0.0
    i, j = i[keep], j[keep]
    return float(np.median((y[j] - y[i]) / (x[j] - x[i])))


def _lives(pids: np.ndarray) -> np.ndarray:
    """Life index per sample: a new life starts whenever the pid changes (worker restart)."""
    changes = np.concatenate([[0], (pids[1:] != pids[:-1]).astype(np.int64)])
    return np.cumsum(changes)


def _post_warmup(iters: np.ndarray, lives: np.ndarray, warmup_iters: int) -> np.ndarray:
    """Mask of samples past the warm-up of their life.

    A process seen in one life (the main process, persistent workers, CUDA) gets the full
    warm-up: its memory can climb for hundreds of iterations as allocator caches meet new
    shapes, and a short run is better left ``unknown`` than called a leak. Restarted workers
    live one epoch each, possibly shorter than the warm-up: each life skips at most a quarter.
    """
    keep = np.zeros(len(iters), dtype=bool)
    restarted = lives[-1] > 0
    for life in np.unique(lives):
        idx = np.flatnonzero(lives == life)
        start, end = iters[idx[0]], iters[idx[-1]]
        skip = min(warmup_iters, 0.25 * (end - start)) if restarted else warmup_iters
        keep[idx] = iters[idx] >= start + skip
    return keep


def _copied(uss: np.ndarray, anon: np.ndarray, lives: np.ndarray) -> Optional[float]:
    """Median over lives of the late USS not explained by the life's own allocations (MiB).

    A forked worker starts with almost no private pages; whatever private memory it has late in
    its life that is not anonymous growth was copied from the parent on write. Late levels are
    medians of the last quarter of the life, robust to a batch in flight. This also counts the
    few MiB any worker copies just by running (10-15 MiB for a bare torch worker).
    """
    copied = []
    for life in np.unique(lives):
        idx = np.flatnonzero(lives == life)
        late = idx[-max(1, len(idx) // 4):]
        anon_growth = max(0.0, float(np.median(anon[late]) - anon[idx[0]]))
        copied.append(float(np.median(uss[late])) - anon_growth)
    return float(np.median(copied)) if copied else None


def judge_series(label: str,
                 iters: Sequence[int],
                 pids: Sequence[int],
                 anon: Sequence[float],
                 uss: Optional[Sequence[float]] = None,
                 iters_per_epoch: Optional[float] = None,
                 thresholds: VerdictThresholds = VerdictThresholds()) -> Verdict:
    """Judge one series of samples, all in MiB, taken at the given iterations.

    Args:
        label: name of the series, used in the reason.
        iters: global iteration of each sample (N,), increasing.
        pids: process id at each sample (N,); a change starts a new life (worker restart).
        anon: the leak metric (N,): anonymous RSS for processes, allocated memory for CUDA.
        uss: USS (N,) for processes that can copy on write (workers); ``None`` otherwise.
        iters_per_epoch: iterations per epoch, for the % per epoch figure (optional).
        thresholds: see :class:`VerdictThresholds`.
    """
    it = np.asarray(iters, dtype=np.float64)
    pid = np.asarray(pids)
    a = np.asarray(anon, dtype=np.float64)
    if not len(it) == len(pid) == len(a) or (uss is not None and len(uss) != len(it)):
        raise ValueError(f'{label}: iters, pids, anon (and uss) must be equally long')
    if len(it) == 0:
        return Verdict(label, UNKNOWN, 0.0, None, 0.0, None, 0, 0.0, 'no samples yet')
    lives = _lives(pid)
    n_lives = int(lives[-1]) + 1
    keep = _post_warmup(it, lives, thresholds.warmup_iters)
    slope = theil_sen_slope(it[keep], a[keep], lives[keep]) * 1000.0
    span = sum(np.ptp(it[keep & (lives == life)]) for life in np.unique(lives[keep]))
    fitted = slope * span / 1000.0
    level = float(np.median(a[keep])) if keep.any() else float(a[-1])
    pct = (slope * iters_per_epoch / 1000.0 / level * 100.0
           if iters_per_epoch and level > 0 else None)
    copied = _copied(np.asarray(uss, dtype=np.float64), a, lives) if uss is not None else None
    args = (label, slope, pct, fitted, copied, n_lives, float(a[-1]))

    if keep.sum() < thresholds.min_samples:
        return Verdict(label, UNKNOWN, *args[1:],
                       f'only {int(keep.sum())} samples after warm-up '
                       f'(need {thresholds.min_samples})')
    # Residuals around the fitted line, each life with its own intercept (restarts reset).
    residual = a[keep] - slope / 1000.0 * it[keep]
    for life in np.unique(lives[keep]):
        in_life = lives[keep] == life
        residual[in_life] -= np.median(residual[in_life])
    noise = float(np.median(np.abs(residual)))
    fast = ((thresholds.leak_mib_per_kiter is not None
             and slope >= thresholds.leak_mib_per_kiter)
            or (thresholds.leak_pct_per_epoch is not None and pct is not None
                and pct >= thresholds.leak_pct_per_epoch))
    if fast and fitted >= max(thresholds.min_growth_mib, 3.0 * noise):
        per_epoch = f' ({pct:+.1f}%/epoch)' if pct is not None else ''
        where = (f'within each of {n_lives} lives, so it is not copy-on-write'
                 if n_lives > 1 else 'and keeps growing')
        return Verdict(label, LEAK, *args[1:],
                       f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch} after '
                       f'warm-up {where}: +{fitted:.1f} MiB fitted')
    if copied is not None and copied >= thresholds.sawtooth_mib:
        reset = (f'and resets when the worker restarts ({n_lives} lives seen)' if n_lives > 1
                 else 'and stays as long as this worker lives')
        return Verdict(label, SAWTOOTH, *args[1:],
                       f'{copied:.1f} MiB of its USS are pages copied from the main process on '
                       f'write (allocated memory flat): copy-on-write, bounded, {reset}')
    return Verdict(label, FLAT, *args[1:],
                   f'allocated memory {slope:+.1f} MiB/1000 iter after warm-up'
                   + (f', {copied:.1f} MiB copied on write' if copied is not None else ''))

