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

A verdict is given only when the samples support it: ``leak`` when even the low end of the
slope's 95% range is a leak, ``flat`` when even its high end is not (or would add less than
``flat_growth_pct`` of the process over the judged window), and ``too short to judge`` in
between, with the numbers that say how far the run got.
"""
from dataclasses import asdict, dataclass
from typing import Callable, Optional, Sequence

import numpy as np

# Theil-Sen looks at all N^2/2 pairs; beyond this many points the series is thinned evenly.
MAX_FIT_POINTS = 400

FLAT = 'flat'
SAWTOOTH = 'sawtooth'
LEAK = 'leak'
# Not enough samples, or samples that allow both a leak and none; the log says which.
UNKNOWN = 'too short to judge'
# Share of the pairwise slopes' spread kept as the slope's range (Sen's 95% interval).
CONFIDENCE_Z = 1.96


@dataclass(frozen=True)
class VerdictThresholds:
    """When growth counts as a leak or a sawtooth.

    Args:
        warmup_iters: iterations at the start of each process life in which growth is not yet
            called a leak (caches, allocator pools and imports fill up there). A life observed
            for less than ``warmup_iters`` is judged after its first ``warmup_fraction``: it can
            be called flat (or sawtooth) but, still growing, only ``too short to judge``. For
            restarted workers (one life per epoch) at most ``warmup_fraction`` of each life is
            skipped, so short epochs leave samples.
        warmup_fraction: the share of a short life skipped as warm-up (see above).
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
        min_samples: post-warm-up samples needed before any verdict other than
            ``too short to judge``.
        flat_growth_pct: a process observed past its warm-up whose slope's range holds both a
            leak rate and none is also ``flat`` when the high end of the range would add less
            than this percentage of its size (or ``min_growth_mib``, whichever is more) over the
            judged window: no growth this run could see. A longer run
            narrows the range, so a slow leak is named once the run is long enough.
    """

    warmup_iters: int = 200
    warmup_fraction: float = 0.25
    leak_mib_per_kiter: Optional[float] = 10.0
    leak_pct_per_epoch: Optional[float] = 5.0
    min_growth_mib: float = 4.0
    sawtooth_mib: float = 64.0
    min_samples: int = 6
    flat_growth_pct: float = 5.0

    def __post_init__(self) -> None:
        if self.warmup_iters < 0:
            raise ValueError(f'warmup_iters must be >= 0, got {self.warmup_iters}')
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f'warmup_fraction must be in [0, 1), got {self.warmup_fraction}')
        if self.flat_growth_pct < 0:
            raise ValueError(f'flat_growth_pct must be >= 0, got {self.flat_growth_pct}')
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
        verdict: ``flat``, ``sawtooth``, ``leak`` or ``too short to judge``.
        slope_mib_per_kiter: robust slope of the leak metric after warm-up (MiB / 1000 iter).
        pct_per_epoch: that slope as % of the metric's level per epoch (``None`` if unknown).
        fitted_growth_mib: slope times the post-warm-up iterations observed (MiB).
        copied_mib: median over lives of the USS copied from the parent on write (MiB),
            ``None`` when the series has no USS (main process, CUDA).
        lives: how many lives (pids) the series spans; > 1 means workers were restarted.
        last_mib: the last value of the leak metric (MiB).
        reason: one sentence saying why.
        slope_low_mib_per_kiter, slope_high_mib_per_kiter: the slope's 95% range.
        judged_iters: the post-warm-up iterations the slope was fitted over (summed over lives).
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
    slope_low_mib_per_kiter: float = 0.0
    slope_high_mib_per_kiter: float = 0.0
    judged_iters: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        """A few words for the one-line summary of all processes, e.g. ``main flat (+0.4 MiB/1k
        it)``."""
        if self.judged_iters <= 0 or (self.verdict == UNKNOWN and self.reason.startswith('only')):
            return f'{self.label} {self.verdict} ({self.reason})'
        return (f'{self.label} {self.verdict} ({self.slope_mib_per_kiter:+.1f} MiB/1k it, '
                f'range {self.slope_low_mib_per_kiter:+.1f}..{self.slope_high_mib_per_kiter:+.1f},'
                f' over {self.judged_iters:.0f} it)')


def theil_sen_range(x: Sequence[float], y: Sequence[float],
                    groups: Optional[Sequence[int]] = None) -> tuple[float, float, float]:
    """Theil-Sen slope with Sen's 95% range: ``(slope, low, high)`` in units of y per unit of x.

    The slope is the median of pairwise slopes ``(y_j - y_i) / (x_j - x_i)``, robust to a few
    outliers; the range is given by the pairwise slopes' order statistics at Kendall's variance
    (summed over groups). Samples of a memory series are not independent, so the range is a
    guide, not a guarantee; ``judge_series`` asks for a real growth on top of it.

    Args:
        x, y: equally long sequences (N,).
        groups: optional group id per point (N,); only pairs inside one group are used, so
            drops between groups (worker restarts) do not pull the slope down.

    Returns:
        ``(0.0, 0.0, 0.0)`` when there is no pair with distinct x.
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
        return 0.0, 0.0, 0.0
    i, j = i[keep], j[keep]
    slopes = np.sort((y[j] - y[i]) / (x[j] - x[i]))
    n_g = np.unique(g, return_counts=True)[1].astype(np.float64)
    spread = CONFIDENCE_Z * np.sqrt(np.sum(n_g * (n_g - 1) * (2 * n_g + 5)) / 18.0)
    n = len(slopes)
    low = int(np.clip(np.floor((n - spread) / 2.0), 0, n - 1))
    high = int(np.clip(np.ceil((n + spread) / 2.0), 0, n - 1))
    return float(np.median(slopes)), float(slopes[low]), float(slopes[high])


def theil_sen_slope(x: Sequence[float], y: Sequence[float],
                    groups: Optional[Sequence[int]] = None) -> float:
    """Median of pairwise slopes (see :func:`theil_sen_range`); 0.0 without a usable pair."""
    return theil_sen_range(x, y, groups)[0]


def _lives(pids: np.ndarray) -> np.ndarray:
    """Life index per sample: a new life starts whenever the pid changes (worker restart)."""
    changes = np.concatenate([[0], (pids[1:] != pids[:-1]).astype(np.int64)])
    return np.cumsum(changes)


def _post_warmup(iters: np.ndarray, lives: np.ndarray, skip_of: Callable[[float], float]
                 ) -> np.ndarray:
    """Mask of samples past the warm-up of their life; ``skip_of(life span)`` is its length."""
    keep = np.zeros(len(iters), dtype=bool)
    for life in np.unique(lives):
        idx = np.flatnonzero(lives == life)
        start = iters[idx[0]]
        keep[idx] = iters[idx] >= start + skip_of(iters[idx[-1]] - start)
    return keep


def _judged_window(iters: np.ndarray, lives: np.ndarray, t: 'VerdictThresholds'
                   ) -> tuple[np.ndarray, bool]:
    """The samples to judge, and whether a leak may be named from them.

    A process seen in one life (the main process, persistent workers, CUDA) can climb for
    hundreds of iterations as allocator caches meet new shapes: it gets the full warm-up when
    it has been observed past it with ``min_samples`` samples. A shorter life is judged after its
    first ``warmup_fraction``: enough to call it flat, not to call growth there a leak.
    Restarted workers live one epoch each, possibly shorter than the warm-up: each life skips at
    most ``warmup_fraction`` of itself, and a leak may be named (growth within each of several
    lives is no warm-up).
    """
    def short(span: float) -> float:
        return min(t.warmup_iters, t.warmup_fraction * span)

    if lives[-1] > 0:
        return _post_warmup(iters, lives, short), True
    full = _post_warmup(iters, lives, lambda span: t.warmup_iters)
    if full.sum() >= t.min_samples:
        return full, True
    return _post_warmup(iters, lives, short), False


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
    t = thresholds
    lives = _lives(pid)
    n_lives = int(lives[-1]) + 1
    keep, may_leak = _judged_window(it, lives, t)
    slope, low, high = (v * 1000.0 for v in theil_sen_range(it[keep], a[keep], lives[keep]))
    span = float(sum(np.ptp(it[keep & (lives == life)]) for life in np.unique(lives[keep])))
    fitted = slope * span / 1000.0
    level = float(np.median(a[keep])) if keep.any() else float(a[-1])

    def pct(rate: float) -> Optional[float]:
        return (rate * iters_per_epoch / 1000.0 / level * 100.0
                if iters_per_epoch and level > 0 else None)

    def is_leak_rate(rate: float) -> bool:
        return ((t.leak_mib_per_kiter is not None and rate >= t.leak_mib_per_kiter)
                or (t.leak_pct_per_epoch is not None and pct(rate) is not None
                    and pct(rate) >= t.leak_pct_per_epoch))

    copied = _copied(np.asarray(uss, dtype=np.float64), a, lives) if uss is not None else None

    def verdict(name: str, reason: str) -> Verdict:
        return Verdict(label, name, slope, pct(slope), fitted, copied, n_lives, float(a[-1]),
                       reason, low, high, span)

    if keep.sum() < t.min_samples:
        return verdict(UNKNOWN, f'only {int(keep.sum())} samples after warm-up '
                                f'(need {t.min_samples})')
    # Residuals around the fitted line, each life with its own intercept (restarts reset).
    residual = a[keep] - slope / 1000.0 * it[keep]
    for life in np.unique(lives[keep]):
        in_life = lives[keep] == life
        residual[in_life] -= np.median(residual[in_life])
    noise = float(np.median(np.abs(residual)))
    per_epoch = f' ({pct(slope):+.1f}%/epoch)' if pct(slope) is not None else ''
    if is_leak_rate(low) and fitted >= max(t.min_growth_mib, 3.0 * noise):
        if not may_leak:
            return verdict(UNKNOWN, f'still growing {slope:+.1f} MiB/1000 iter{per_epoch} '
                                    f'{it[-1] - it[0]:.0f} iterations in, within the '
                                    f'{t.warmup_iters}-iteration warm-up: growth there may be '
                                    f'caches filling up, not a leak')
        where = (f'within each of {n_lives} lives, so it is not copy-on-write'
                 if n_lives > 1 else 'and keeps growing')
        return verdict(LEAK, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch} '
                             f'after warm-up {where}: +{fitted:.1f} MiB fitted')
    high_growth = max(0.0, high) * span / 1000.0
    tolerance = max(t.min_growth_mib, t.flat_growth_pct / 100.0 * level)
    # The tolerance is for noisy samples whose range holds both a leak rate and none, past the
    # warm-up: inside it, or at a rate that is surely a leak rate, a small growth may be the start
    # of a large one.
    if not is_leak_rate(high) or (may_leak and not is_leak_rate(low)
                                  and high_growth < tolerance):
        bound = (f'at most {high:+.1f} MiB/1000 iter' if not is_leak_rate(high) else
                 f'at most +{high_growth:.1f} MiB over those {span:.0f} iterations')
        if copied is not None and copied >= t.sawtooth_mib:
            reset = (f'and resets when the worker restarts ({n_lives} lives seen)'
                     if n_lives > 1 else 'and stays as long as this worker lives')
            return verdict(SAWTOOTH, f'{copied:.1f} MiB of its USS are pages copied from the '
                                     f'main process on write (allocated memory flat, {bound}): '
                                     f'copy-on-write, bounded, {reset}')
        return verdict(FLAT, f'allocated memory {slope:+.1f} MiB/1000 iter over {span:.0f} '
                             f'iterations after warm-up ({bound})'
                             + (f', {copied:.1f} MiB copied on write' if copied is not None
                                else ''))
    if is_leak_rate(low):
        return verdict(UNKNOWN, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch}, '
                                f'but only {fitted:+.1f} MiB over {span:.0f} iterations after '
                                f'warm-up (a leak must show {max(t.min_growth_mib, 3 * noise):.1f}'
                                f' MiB); a longer run will tell')
    return verdict(UNKNOWN, f'allocated memory {slope:+.1f} MiB/1000 iter over {span:.0f} '
                            f'iterations after warm-up, range {low:+.1f}..{high:+.1f}: both a '
                            f'leak and none fit the samples; a longer run will tell')
