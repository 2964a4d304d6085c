"""The memory time series of one run: what is sampled, stored, judged and written to memory.json."""
import json
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Union

import psutil

from .sampling import label_children, read_cuda_memory, read_process_memory
from .verdict import Verdict, VerdictThresholds, judge_series

MAIN = 'main'
CUDA = 'cuda'
TOTAL = 'total'
PROCESS_FIELDS = ('rss', 'uss', 'pss', 'anon')
CUDA_FIELDS = ('allocated', 'reserved', 'peak')


class MemoryRecord:
    """Per-process memory series over iterations, all values in MiB.

    ``series[label]`` holds equally long lists ``iter``, ``epoch``, ``pid`` and the fields of its
    kind: ``rss/uss/pss/anon`` for processes (``main``, ``train.w0``, ...), ``allocated/reserved/
    peak`` for ``cuda``, ``pss`` for ``total`` (main + all children: the job's real footprint).
    """

    def __init__(self) -> None:
        self.series: Dict[str, Dict[str, list]] = {}
        self.epoch_starts: Dict[int, int] = {}
        self._main = psutil.Process()

    def _append(self, label: str, iteration: int, epoch: int, pid: int,
                values: Mapping[str, float]) -> None:
        s = self.series.setdefault(label, dict(iter=[], epoch=[], pid=[]))
        s['iter'].append(int(iteration))
        s['epoch'].append(int(epoch))
        s['pid'].append(int(pid))
        for key, value in values.items():
            s.setdefault(key, []).append(round(float(value), 3))

    def mark_epoch(self, epoch: int, iteration: int) -> None:
        """Remember that ``epoch`` (0-based) starts at global ``iteration``."""
        self.epoch_starts[int(epoch)] = int(iteration)

    def sample(self, iteration: int, epoch: int, loaders: Mapping[str, Any],
               active: Optional[str] = None) -> float:
        """Read the main process, each of its children and CUDA; returns the total PSS (MiB).

        Args:
            iteration: global iteration the sample belongs to.
            epoch: 0-based epoch.
            loaders: name -> DataLoader, to name the workers (see :func:`label_children`).
            active: the name of the dataloader being iterated now.
        """
        total = 0.0
        procs = {MAIN: self._main, **label_children(loaders, active, self._main)}
        for label, proc in procs.items():
            mem = read_process_memory(proc)
            if mem is None:
                continue
            total += mem.pss
            self._append(label, iteration, epoch, mem.pid,
                         {k: getattr(mem, k) for k in PROCESS_FIELDS})
        self._append(TOTAL, iteration, epoch, self._main.pid, dict(pss=total))
        cuda = read_cuda_memory()
        if cuda is not None:
            self._append(CUDA, iteration, epoch, 0, cuda)
        return total

    def num_samples(self) -> int:
        """How many times the record was sampled (and not thinned away since)."""
        return len(self.series.get(TOTAL, {}).get('iter', []))

    def thin(self, stride: int) -> None:
        """Keep only the samples at iterations divisible by ``stride`` (and the first sample of
        each process life, which the copy-on-write figure starts from).

        Doubling ``stride`` whenever the record is full keeps it evenly spread over the whole
        run, whatever the run's length, in bounded memory.
        """
        for s in self.series.values():
            pids = s['pid']
            keep = [i for i, it in enumerate(s['iter'])
                    if it % stride == 0 or i == 0 or pids[i] != pids[i - 1]]
            for key, values in s.items():
                s[key] = [values[i] for i in keep]

    def last(self, label: str, field: str) -> Optional[float]:
        """The latest value of ``field`` for ``label`` (MiB), if any."""
        values = self.series.get(label, {}).get(field)
        return values[-1] if values else None

    def iters_per_epoch(self) -> Optional[float]:
        """Median length of the completed epochs seen so far, in iterations."""
        starts = sorted(self.epoch_starts.values())
        lengths = sorted(b - a for a, b in zip(starts, starts[1:]) if b > a)
        return float(lengths[len(lengths) // 2]) if lengths else None

    def judge(self, thresholds: VerdictThresholds,
              named_leaks: Optional[Mapping[str, int]] = None) -> List[Verdict]:
        """A verdict for every process and for CUDA (``total`` is reported, not judged).

        The main process is judged on anonymous RSS only: its USS also grows when workers copy
        pages away from it, which is the workers' doing.

        Args:
            thresholds: see :class:`VerdictThresholds`.
            named_leaks: label -> iteration at which an earlier judgement named it a leak (see
                ``judge_series``'s ``named_leak_at``).
        """
        named_leaks = named_leaks or {}
        per_epoch = self.iters_per_epoch()
        verdicts = []
        for label, s in self.series.items():
            if label == TOTAL:
                continue
            metric, uss = ((s['allocated'], None) if label == CUDA else
                           (s['anon'], None if label == MAIN else s['uss']))
            verdicts.append(judge_series(label, s['iter'], s['pid'], metric, uss, per_epoch,
                                         thresholds, named_leaks.get(label)))
        return verdicts

    def describe(self, verdict: Verdict) -> str:
        """One log line: the verdict, why, and where the process stands now."""
        now = []
        for field in ('uss', 'pss', 'allocated', 'reserved'):
            value = self.last(verdict.label, field)
            if value is not None:
                now.append(f'{field.upper() if len(field) == 3 else field} {value:.1f} MiB')
        pid = self.last(verdict.label, 'pid')
        if pid:
            now.append(f'pid {pid}')
        return f'{verdict.label} {verdict.verdict.upper()}: {verdict.reason} (now {", ".join(now)})'

    def to_dict(self, verdicts: List[Verdict], warnings: List[str],
                meta: Optional[dict] = None) -> dict:
        """Everything as plain JSON types (the memory.json layout)."""
        return dict(unit='MiB', meta=meta or {},
                    epoch_starts={str(k): v for k, v in sorted(self.epoch_starts.items())},
                    verdicts=[v.to_dict() for v in verdicts], warnings=list(warnings),
                    series=self.series)

    def write_json(self, path: Union[str, Path], verdicts: List[Verdict], warnings: List[str],
                   meta: Optional[dict] = None) -> Path:
        """Write memory.json atomically (a reader never sees half a file)."""
        path = Path(path)
        tmp = path.with_name(path.name + '.tmp')
        tmp.write_text(json.dumps(self.to_dict(verdicts, warnings, meta), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def from_dict(cls, data: dict) -> 'MemoryRecord':
        """Rebuild a record from :meth:`to_dict` output (e.g. a loaded memory.json)."""
        record = cls()
        record.series = {k: {f: list(v) for f, v in s.items()} for k, s in data['series'].items()}
        record.epoch_starts = {int(k): int(v) for k, v in data.get('epoch_starts', {}).items()}
        return record
