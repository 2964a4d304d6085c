"""Run only the dataloader of a config and find which process, and which sample field, grows.

The by-hand routine for a data path whose memory grows (drop the model, watch the loader with
``ps``, comment sample fields out until the growth stops), automated: the dataloader alone for
N iterations with K workers, every process sampled; then, optionally, the same run again with
one sample field dropped at a time (before collate, in the workers), to see which field carries
the growth.
"""
import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from mmengine.registry import DATASETS, DefaultScope
from mmengine.runner import Runner
from mmengine.structures import BaseDataElement

from .record import MemoryRecord
from .sampling import release_free_heap, workers_will_fork
from .verdict import LEAK, Verdict, VerdictThresholds

COPY_ONLY = '(copy only)'
# A field whose removal leaves at most this share of the baseline growth carries the growth.
CARRIES = 1 / 3


def list_fields(sample: Any, prefix: str = '', depth: int = 0) -> List[str]:
    """Dotted paths of the leaves of a sample: dict keys and data fields of mmengine data
    elements (``data_samples.gt_instances.masks``), up to three levels deep."""
    if depth < 3 and isinstance(sample, dict):
        items = sample.items()
    elif depth < 3 and isinstance(sample, BaseDataElement):
        items = sorted(sample.items(), key=lambda kv: kv[0])  # its fields are a set: fix an order
    else:
        return [prefix] if prefix else []
    paths = []
    for key, value in items:
        paths += list_fields(value, f'{prefix}.{key}' if prefix else str(key), depth + 1)
    return paths


def drop_field(sample: Any, path: str) -> Any:
    """A copy of ``sample`` without the field at dotted ``path``; containers on the path are
    copied shallowly, so neither the dataset's objects nor other fields are touched."""
    key, _, rest = path.partition('.')
    if isinstance(sample, dict):
        out = dict(sample)
        if key in out:
            if rest:
                out[key] = drop_field(out[key], rest)
            else:
                del out[key]
        return out
    if isinstance(sample, BaseDataElement):
        out = sample.new()
        if key in out:
            if rest:
                out.set_field(drop_field(out.get(key), rest), key)
            else:
                delattr(out, key)
        return out
    return sample


class DroppingCollate:
    """Wraps a collate function: each sample loses ``path`` (or, with ``path=None``, is only
    shallow-copied, the control run) before the real collate sees it."""

    def __init__(self, collate_fn, path: Optional[str]) -> None:
        self.collate_fn = collate_fn
        self.path = path

    def __call__(self, samples: Sequence[Any]) -> Any:
        if self.path is None:
            return self.collate_fn([copy.copy(s) for s in samples])
        return self.collate_fn([drop_field(s, self.path) for s in samples])


@dataclass
class DataloaderRun:
    """One dataloader-only run.

    Attributes:
        name: ``baseline``, ``(copy only)`` or ``without <field>``.
        verdicts: one per process.
        growth_mib_per_kiter: the sum of the positive leak slopes of all processes (MiB / 1000
            iterations): what a field must take away to carry the growth.
        error: why the run failed, when dropping a field broke the pipeline or collate.
    """

    name: str
    record: MemoryRecord
    verdicts: List[Verdict]
    error: Optional[str] = None

    @property
    def growth_mib_per_kiter(self) -> float:
        return sum(max(0.0, v.slope_mib_per_kiter) for v in self.verdicts)


def run_dataloader(dataloader_cfg: dict, iters: int, workers: Optional[int] = None,
                   interval: int = 1, drop: Optional[str] = '',
                   thresholds: VerdictThresholds = VerdictThresholds(),
                   name: str = 'baseline', default_scope: str = 'mmdet') -> DataloaderRun:
    """Build the dataloader (and a fresh dataset) from ``dataloader_cfg`` and iterate it
    ``iters`` times, restarting it at the end of each epoch, sampling every ``interval``.

    Args:
        dataloader_cfg: e.g. ``cfg.train_dataloader``.
        iters: iterations (batches) to run, > 0.
        workers: override ``num_workers``.
        drop: ``''`` for the plain run, ``None`` for the copy-only control, else a dotted field.
        default_scope: registry scope the dataset, sampler and collate types are looked up in.
    """
    if iters < 1 or interval < 1:
        raise ValueError(f'iters and interval must be >= 1, got {iters} and {interval}')
    cfg = copy.deepcopy(dataloader_cfg)
    if workers is not None:
        if workers < 0:
            raise ValueError(f'workers must be >= 0, got {workers}')
        cfg['num_workers'] = workers
        if workers == 0:  # PyTorch allows neither without worker processes
            cfg['persistent_workers'] = False
            cfg['timeout'] = 0
    with DefaultScope.overwrite_default_scope(default_scope):
        loader = Runner.build_dataloader(cfg)
    if drop != '':
        loader.collate_fn = DroppingCollate(loader.collate_fn, drop)
    record = MemoryRecord()
    iteration, epoch = 0, 0
    while iteration < iters:
        record.mark_epoch(epoch, iteration)
        if workers_will_fork(loader):
            release_free_heap()  # before the workers fork, as MemoryWatchHook does
        for batch_idx, _ in enumerate(loader):
            iteration += 1
            if batch_idx == 0 or iteration % interval == 0:
                record.sample(iteration, epoch, {'train': loader}, 'train')
            if iteration >= iters:
                break
        epoch += 1
    del loader  # shuts the workers down before the next run forks its own
    return DataloaderRun(name, record, record.judge(thresholds))


@dataclass
class Bisection:
    """The runs of a field bisection and what they show."""

    baseline: DataloaderRun
    control: DataloaderRun
    runs: Dict[str, DataloaderRun] = field(default_factory=dict)

    @property
    def culprits(self) -> List[str]:
        """Fields whose removal takes away most of the growth (empty if none or no growth)."""
        base = self.baseline.growth_mib_per_kiter
        if not any(v.verdict == LEAK for v in self.baseline.verdicts) or self.aliasing:
            return []
        return [f for f, run in self.runs.items()
                if run.error is None and run.growth_mib_per_kiter <= CARRIES * base]

    @property
    def aliasing(self) -> bool:
        """Copying the sample dicts alone removes the growth: the dataset hands out its own
        objects and something downstream (a collate function, a transform) changes them in
        place."""
        base = self.baseline.growth_mib_per_kiter
        return (any(v.verdict == LEAK for v in self.baseline.verdicts)
                and self.control.growth_mib_per_kiter <= CARRIES * base)


def bisect_fields(dataloader_cfg: dict, iters: int, workers: Optional[int] = None,
                  interval: int = 1, fields: Optional[Sequence[str]] = None,
                  thresholds: VerdictThresholds = VerdictThresholds(),
                  default_scope: str = 'mmdet') -> Bisection:
    """Run the dataloader plain, with copied samples, then once per dropped field.

    Args:
        fields: dotted fields to try; by default every leaf of the dataset's first sample.
        The others: see :func:`run_dataloader`.
    """
    if fields is None:
        with DefaultScope.overwrite_default_scope(default_scope):
            dataset = DATASETS.build(copy.deepcopy(dataloader_cfg['dataset']))
        fields = list_fields(dataset[0])
        del dataset
    if not fields:
        raise ValueError('no fields to drop: the first sample is not a dict or data element')
    args = (dataloader_cfg, iters, workers, interval)
    kwargs = dict(thresholds=thresholds, default_scope=default_scope)
    result = Bisection(run_dataloader(*args, drop='', **kwargs),
                       run_dataloader(*args, drop=None, name=COPY_ONLY, **kwargs))
    for path in fields:
        name = f'without {path}'
        try:
            result.runs[path] = run_dataloader(*args, drop=path, name=name, **kwargs)
        except Exception as err:  # noqa: BLE001  (a field the collate needs: report, go on)
            last_line = (str(err).strip().splitlines() or [''])[-1]
            result.runs[path] = DataloaderRun(name, MemoryRecord(), [],
                                              f'{type(err).__name__}: {last_line}')
    return result


def format_run(run: DataloaderRun) -> str:
    """A table: one row per process with its verdict and growth."""
    rows = [f'{run.name}: growth {run.growth_mib_per_kiter:.1f} MiB/1000 iter in all',
            f'  {"process":<14}{"verdict":<19}{"anon MiB/1k it":>15}{"USS first":>11}'
            f'{"USS last":>10}{"copied":>8}']
    for v in run.verdicts:
        s = run.record.series[v.label]
        uss = s.get('uss') or s.get('allocated')
        copied = f'{v.copied_mib:8.1f}' if v.copied_mib is not None else f'{"-":>8}'
        rows.append(f'  {v.label:<14}{v.verdict:<19}{v.slope_mib_per_kiter:15.1f}'
                    f'{uss[0]:11.1f}{uss[-1]:10.1f}{copied}')
    return '\n'.join(rows)


def format_bisection(result: Bisection) -> str:
    """The growth of every run and the conclusion, as printed by tools/memcheck.py."""
    base = result.baseline.growth_mib_per_kiter
    leaks = any(v.verdict == LEAK for v in result.baseline.verdicts)
    runs = [result.baseline, result.control, *result.runs.values()]
    width = max(len(run.name) for run in runs) + 2
    lines = ['field bisection (growth = sum of positive allocated-memory slopes, '
             'MiB/1000 iter' + (', share of the baseline):' if leaks else '):')]
    for run in runs:
        if run.error is not None:
            lines.append(f'  {run.name:<{width}}    failed: the field is needed ({run.error})')
            continue
        # Shares of a baseline that does not leak would only compare noise.
        share = f'{run.growth_mib_per_kiter / base:6.0%}' if leaks else ''
        lines.append(f'  {run.name:<{width}}{run.growth_mib_per_kiter:10.1f} {share}')
    if not leaks:
        lines.append('no process leaks in the baseline run: nothing to attribute')
    elif result.aliasing:
        lines.append('copying each sample alone removes the growth: the dataset returns its own '
                     'objects and something downstream (a collate function, a transform) '
                     'modifies them in place, so they keep what it adds; return copies from '
                     '__getitem__')
    elif result.culprits:
        lines.append('the growth is carried by: ' + ', '.join(result.culprits))
    else:
        lines.append('no single field carries the growth: it happens before the sample is '
                     'returned (in __getitem__ or the pipeline), see the per-process verdicts')
    return '\n'.join(lines)
