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

A verdict is given only when the samples support it: ``flat`` when even the high end of the
slope's 95% range is not a leak (or would add less than ``flat_growth_pct`` of the process over
the judged window), ``too short to judge`` while the samples allow both, and ``leak`` only on
evidence that lasts. Memory samples taken one iteration apart are not independent (an allocator
that grew keeps its size for a while), so the range is widened by the samples' serial
correlation; and the growth must be seen over ``min_leak_blocks`` blocks of the run (epochs,
worker lives, or ``warmup_iters``-long spans without epochs) and must already have been a leak
one block earlier. A growth that one epoch shows and the next takes back is never named.
"""
from dataclasses import asdict, dataclass
from typing import Callable, NamedTuple, Optional, Sequence

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
# A leak is named only when the low end of the 99% range is a leak rate: a run is judged at every
# epoch end, and each look is another chance for noise to pass a 95% gate.
LEAK_CONFIDENCE_Z = 2.58
# Serial correlation beyond this is taken as this: the range widens at most sqrt(99) ~ 10x.
MAX_AUTOCORRELATION = 0.98


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
        min_leak_blocks: a leak is named only when its growth spans at least this many blocks
            of the judged window (a block is an epoch; a life for restarted workers; a span of
            ``warmup_iters`` iterations for runs without epochs) and the samples up to the
            start of the last block were already a leak: the verdict of one block is confirmed
            by the next before it is said.
    """

    warmup_iters: int = 200
    warmup_fraction: float = 0.25
    leak_mib_per_kiter: Optional[float] = 10.0
    leak_pct_per_epoch: Optional[float] = 5.0
    min_growth_mib: float = 4.0
    sawtooth_mib: float = 64.0
    min_samples: int = 6
    flat_growth_pct: float = 5.0
    min_leak_blocks: int = 3

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
        if self.min_leak_blocks < 2:
            raise ValueError(f'min_leak_blocks must be >= 2 (a leak is confirmed one block '
                             f'later), got {self.min_leak_blocks}')


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
                    groups: Optional[Sequence[int]] = None,
                    z: float = CONFIDENCE_Z) -> tuple[float, float, float]:
    """Theil-Sen slope with Sen's range: ``(slope, low, high)`` in units of y per unit of x
    (95% for the default ``z``).

    The slope is the median of pairwise slopes ``(y_j - y_i) / (x_j - x_i)``, robust to a few
    outliers; the range is given by the pairwise slopes' order statistics at Kendall's variance
    (summed over groups), inflated by ``(1 + r) / (1 - r)`` where ``r`` is the lag-1
    autocorrelation of the residuals (clipped to [0, MAX_AUTOCORRELATION]): N samples that move
    together carry the information of fewer independent ones (the correction Hamed and Rao give
    for the Mann-Kendall test under AR(1) noise), and without it an allocator's slow swing reads
    as a narrow, confident slope.

    Args:
        x, y: equally long sequences (N,), x increasing within each group.
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
    slope = float(np.median(slopes))
    n_g = np.unique(g, return_counts=True)[1].astype(np.float64)
    variance = np.sum(n_g * (n_g - 1) * (2 * n_g + 5)) / 18.0
    r = _lag1_autocorrelation(y - slope * x, g)
    spread = z * np.sqrt(variance * (1.0 + r) / (1.0 - r))
    n = len(slopes)
    low = int(np.clip(np.floor((n - spread) / 2.0), 0, n - 1))
    high = int(np.clip(np.ceil((n + spread) / 2.0), 0, n - 1))
    return slope, float(slopes[low]), float(slopes[high])


def _lag1_autocorrelation(residual: np.ndarray, groups: np.ndarray) -> float:
    """Lag-1 autocorrelation of residuals, each group centred on its median and only
    neighbours within one group paired; clipped to [0, MAX_AUTOCORRELATION] (0 when it cannot
    be measured)."""
    centred = residual.astype(np.float64).copy()
    for group in np.unique(groups):
        in_group = groups == group
        centred[in_group] -= np.median(centred[in_group])
    same = groups[1:] == groups[:-1]
    denominator = float(np.sum(centred ** 2))
    if not same.any() or denominator <= 1e-12:
        return 0.0
    r = float(np.sum(centred[1:][same] * centred[:-1][same])) / denominator
    return float(np.clip(r, 0.0, MAX_AUTOCORRELATION))


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


class _Fit(NamedTuple):
    """The slope of the leak metric over some samples (MiB per 1000 iterations, with its 95%
    range and the low end of its 99% range), the iterations it spans (summed over lives), the
    growth it implies over them (MiB), the noise around it (MiB) and the low end of the blocks'
    99% slope range (see :func:`_fit`)."""

    slope: float
    low: float
    high: float
    leak_low: float
    span: float
    growth: float
    noise: float
    block_low: float


def _median_abs_residual(x: np.ndarray, y: np.ndarray, slope_per_iter: float,
                         groups: np.ndarray) -> float:
    """Median distance from the fitted line, each group with its own intercept (MiB)."""
    residual = y - slope_per_iter * x
    for group in np.unique(groups):
        residual[groups == group] -= np.median(residual[groups == group])
    return float(np.median(np.abs(residual))) if len(residual) else 0.0


def _fit(iters: np.ndarray, values: np.ndarray, lives: np.ndarray, blocks: np.ndarray,
         mask: np.ndarray) -> _Fit:
    """Theil-Sen over the masked samples (pairs within one life only), and over the levels of
    their blocks: each block's median value at its median iteration.

    The block levels say whether the growth lasted block after block: a handful of levels has a
    wide slope range, whose low end is a leak rate only when nearly every later block sits above
    every earlier one. Their scatter around their own line is the slow wander of the level (an
    allocator that grew holds its size for a while), which the sample-to-sample noise misses:
    the larger of the two is the noise a leak must rise above. Restarted workers' blocks are
    their lives, whose levels reset: there the block figures are the samples' own.
    """
    it, a, life, block = iters[mask], values[mask], lives[mask], blocks[mask]
    slope, low, high = (v * 1000.0 for v in theil_sen_range(it, a, life))
    leak_low = theil_sen_range(it, a, life, LEAK_CONFIDENCE_Z)[1] * 1000.0
    span = float(sum(np.ptp(it[life == one]) for one in np.unique(life)))
    noise = _median_abs_residual(it, a, slope / 1000.0, life)
    block_low = leak_low
    if len(it) and life[-1] == life[0]:
        levels = [(np.median(it[block == b]), np.median(a[block == b])) for b in np.unique(block)]
        bx, by = (np.array(column, dtype=np.float64) for column in zip(*levels))
        block_slope, block_low, _ = theil_sen_range(bx, by, z=LEAK_CONFIDENCE_Z)
        block_low *= 1000.0
        noise = max(noise, _median_abs_residual(bx, by, block_slope, np.zeros(len(bx))))
    return _Fit(slope, low, high, leak_low, span, slope * span / 1000.0, noise, block_low)


def _count(n: int, unit: str) -> str:
    """``3 epochs``, ``1 worker life``, ``2 worker lives``."""
    if n == 1:
        return f'1 {unit}'
    return f'{n} {unit[:-2]}ves' if unit.endswith('life') else f'{n} {unit}s'


def _blocks(iters: np.ndarray, lives: np.ndarray, keep: np.ndarray,
            iters_per_epoch: Optional[float], t: 'VerdictThresholds') -> tuple[np.ndarray, str]:
    """Block index per sample, and what a block is: a life for restarted workers, else an
    epoch (counted from the first judged sample), else ``warmup_iters`` iterations."""
    if lives[-1] > 0:
        return lives.copy(), 'worker life'
    length, unit = ((iters_per_epoch, 'epoch') if iters_per_epoch else
                    (float(max(1, t.warmup_iters)), f'{max(1, t.warmup_iters)}-iteration span'))
    first = iters[keep][0] if keep.any() else iters[0]
    return np.floor((iters - first) / length).astype(np.int64), unit


def judge_series(label: str,
                 iters: Sequence[int],
                 pids: Sequence[int],
                 anon: Sequence[float],
                 uss: Optional[Sequence[float]] = None,
                 iters_per_epoch: Optional[float] = None,
                 thresholds: VerdictThresholds = VerdictThresholds(),
                 named_leak_at: Optional[int] = None) -> Verdict:
    """Judge one series of samples, all in MiB, taken at the given iterations.

    Args:
        label: name of the series, used in the reason.
        iters: global iteration of each sample (N,), increasing.
        pids: process id at each sample (N,); a change starts a new life (worker restart).
        anon: the leak metric (N,): anonymous RSS for processes, allocated memory for CUDA.
        uss: USS (N,) for processes that can copy on write (workers); ``None`` otherwise.
        iters_per_epoch: iterations per epoch, for the % per epoch figure (optional).
        thresholds: see :class:`VerdictThresholds`.
        named_leak_at: the iteration at which an earlier judgement of this series named it a
            leak, if one did. A named leak stays named while a leak rate is still inside the
            slope's range: the gates that name a leak (growth above the noise, confirmation)
            sit at a threshold that the next samples may cross back and forth, and a warning
            should not be taken back on less evidence than gave it.
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
    blocks, unit = _blocks(it, lives, keep, iters_per_epoch, t)
    level = float(np.median(a[keep])) if keep.any() else float(a[-1])

    def pct(rate: float) -> Optional[float]:
        return (rate * iters_per_epoch / 1000.0 / level * 100.0
                if iters_per_epoch and level > 0 else None)

    def is_leak_rate(rate: float) -> bool:
        return ((t.leak_mib_per_kiter is not None and rate >= t.leak_mib_per_kiter)
                or (t.leak_pct_per_epoch is not None and pct(rate) is not None
                    and pct(rate) >= t.leak_pct_per_epoch))

    def grows_at_leak_rate(fit: _Fit) -> bool:
        return is_leak_rate(fit.leak_low) and fit.growth >= max(t.min_growth_mib, 3.0 * fit.noise)

    def lasts(fit: _Fit) -> bool:
        return grows_at_leak_rate(fit) and is_leak_rate(fit.block_low)

    fit = _fit(it, a, lives, blocks, keep)
    slope, low, high, span = fit.slope, fit.low, fit.high, fit.span
    copied = _copied(np.asarray(uss, dtype=np.float64), a, lives) if uss is not None else None

    def verdict(name: str, reason: str) -> Verdict:
        return Verdict(label, name, slope, pct(slope), fit.growth, copied, n_lives,
                       float(a[-1]), reason, low, high, span)

    if keep.sum() < t.min_samples:
        return verdict(UNKNOWN, f'only {int(keep.sum())} samples after warm-up '
                                f'(need {t.min_samples})')
    per_epoch = f' ({pct(slope):+.1f}%/epoch)' if pct(slope) is not None else ''
    if named_leak_at is not None and is_leak_rate(high):
        return verdict(LEAK, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch} '
                             f'after warm-up (range {low:+.1f}..{high:+.1f}): called a leak at '
                             f'iteration {named_leak_at}, and a leak rate still fits')
    if grows_at_leak_rate(fit):
        if not may_leak:
            return verdict(UNKNOWN, f'still growing {slope:+.1f} MiB/1000 iter{per_epoch} '
                                    f'{it[-1] - it[0]:.0f} iterations in, within the '
                                    f'{t.warmup_iters}-iteration warm-up: growth there may be '
                                    f'caches filling up, not a leak')
        n_blocks = len(np.unique(blocks[keep]))
        before = keep & (blocks < blocks[keep].max())
        if (n_blocks >= t.min_leak_blocks and span >= t.warmup_iters
                and before.sum() >= t.min_samples
                and lasts(fit) and lasts(_fit(it, a, lives, blocks, before))):
            where = (f'within each of {n_lives} lives, so it is not copy-on-write'
                     if n_lives > 1 else f'and keeps growing over {_count(n_blocks, unit)}')
            return verdict(LEAK, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch}'
                                 f' after warm-up {where}: +{fit.growth:.1f} MiB fitted')
        return verdict(UNKNOWN, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch} '
                                f'over {span:.0f} iterations after warm-up '
                                f'({_count(n_blocks, unit)}); it is called a leak once the growth '
                                f'spans {_count(t.min_leak_blocks, unit)} and at least '
                                f'{t.warmup_iters} iterations (the warm-up\'s length), lasting '
                                f'from one {unit} to the next')
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
                                else '')
                             + (f'; called a leak at iteration {named_leak_at}, which the '
                                f'longer run does not bear out' if named_leak_at is not None
                                else ''))
    if is_leak_rate(low):
        needed = max(t.min_growth_mib, 3 * fit.noise)
        why = (f'only {fit.growth:+.1f} MiB over {span:.0f} iterations after warm-up (a leak '
               f'must show {needed:.1f} MiB)' if fit.growth < needed else
               f'its 99% range reaches down to {fit.leak_low:+.1f} MiB/1000 iter')
        return verdict(UNKNOWN, f'allocated memory grows {slope:+.1f} MiB/1000 iter{per_epoch}, '
                                f'but {why}; a longer run will tell')
    return verdict(UNKNOWN, f'allocated memory {slope:+.1f} MiB/1000 iter over {span:.0f} '
                            f'iterations after warm-up, range {low:+.1f}..{high:+.1f}: both a '
                            f'leak and none fit the samples; a longer run will tell')
