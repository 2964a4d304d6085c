"""MemoryWatchHook: every process of the job, leak/sawtooth verdicts, memory.json + memory.png."""
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.runner import BaseLoop

from ..._compat import runner_loops
from ...registry import HOOKS
from ..memory import (CUDA, LEAK, MAIN, SAWTOOTH, TOTAL, KeptGraphDetector, MemoryRecord, Verdict,
                      VerdictThresholds, memory_limit_mib, plot_record, release_free_heap,
                      workers_will_fork)
from ..memory.record import CUDA_FIELDS

# What goes to the MessageHub (and so to the log line and every visualizer backend), per kind.
_MAIN_FIELDS = ('rss', 'uss', 'pss')
_CHILD_FIELDS = ('uss', 'pss')


class MemoryWatchError(RuntimeError):
    """Raised to stop a run: a leak with ``stop_on_leak``, or the memory ceiling reached."""


@HOOKS.register_module()
class MemoryWatchHook(Hook):
    """Watch the memory of the main process, every DataLoader worker and CUDA while training.

    Every ``interval`` training iterations (every iteration at first, then less often as the
    run goes on, so that a run of a few hundred iterations has a verdict and a run of a million
    a bounded record) it samples RSS / USS / PSS / anonymous RSS of the main
    process and of each child (DataLoader workers are named ``train.w0``, ``val.w1``...), the
    job's total PSS, and CUDA allocated / reserved / peak when CUDA is in use. The figures (MiB)
    go to the MessageHub as ``train/mem/<process>_<field>``, hence to the log and to every
    visualizer backend. At each epoch end (and every ``check_interval`` iterations) each process
    gets a verdict, ``flat``, ``sawtooth``, ``leak`` or ``too short to judge`` (see
    :func:`~..memory.judge_series`), all in one log line at each epoch end; leaks and sawtooths
    are also logged as warnings naming the process and its growth rate. The series,
    verdicts and warnings are written to ``memory.json`` and drawn to ``memory.png`` in the work
    dir at each epoch end, at the end of the run, before stopping, and on demand
    (:meth:`write_report`); ``memory_rank{r}.json/png`` per rank in a distributed run.

    Args:
        interval: sample every this many training iterations at first (the first iteration of
            each epoch is sampled too). Each sample reads ``/proc/PID/smaps_rollup`` of every
            process: ~1 ms each.
        max_samples: when the record holds more samples than this, the interval doubles and
            every other sample is dropped, so the samples stay evenly spread over the run.
        check_interval: judge every this many iterations, besides every epoch end (for
            iteration-based training, whose single epoch never ends).
        warmup_iters, warmup_fraction, leak_mib_per_kiter, leak_pct_per_epoch, min_growth_mib,
            sawtooth_mib, min_samples, flat_growth_pct, min_leak_blocks: the verdict thresholds,
            see :class:`~..memory.VerdictThresholds`.
        stop_on_leak: raise :class:`MemoryWatchError` (after writing the report) when a process
            is judged a leak.
        max_memory_fraction: stop the run, with the report written, when the job's total PSS
            (main + children) exceeds this fraction of the machine's RAM (or of the container's
            cgroup limit if smaller). ``None`` disables the ceiling.
        cuda_gap_mib: warn once when the CUDA caching allocator reserves this many MiB more than
            live tensors hold and the gap is over half of what it reserves (cache, not a leak).
        check_autograd: warn once per key about tensors with autograd history that outlive
            their iteration (in the outputs) or sit in the MessageHub runtime info.
        out_dir: where to write the report; the Runner's work dir by default.
        write_every_epoch: write the report at each epoch end too, so that a job killed by the
            OOM killer still leaves one.
        release_heap_before_fork: return the main process's free heap to the OS just before
            DataLoader workers fork (a train epoch start with non-persistent workers, the first
            one with persistent workers; the same before validation): a worker's leak would
            otherwise first fill the free pages it inherited, unseen in its anonymous RSS (see
            :func:`~..memory.sampling.release_free_heap`). Only then: each trim hands back the
            free memory the allocator keeps (~250 MiB in the toy Mask R-CNN demo), which it
            takes back within the next epoch, a sawtooth in the main process's anonymous RSS
            that looks like growth (benchmarks/results/demo_main_memory.md).
    """

    priority = 'NORMAL'  # before LoggerHook (BELOW_NORMAL), so a sample is logged at once

    def __init__(self,
                 interval: int = 1,
                 max_samples: int = 400,
                 check_interval: int = 1000,
                 warmup_iters: int = 200,
                 warmup_fraction: float = 0.25,
                 leak_mib_per_kiter: Optional[float] = 10.0,
                 leak_pct_per_epoch: Optional[float] = 5.0,
                 min_growth_mib: float = 4.0,
                 sawtooth_mib: float = 32.0,
                 min_samples: int = 6,
                 flat_growth_pct: float = 5.0,
                 min_leak_blocks: int = 3,
                 stop_on_leak: bool = False,
                 max_memory_fraction: Optional[float] = None,
                 cuda_gap_mib: float = 1024.0,
                 check_autograd: bool = True,
                 out_dir: Optional[str] = None,
                 write_every_epoch: bool = True,
                 release_heap_before_fork: bool = True) -> None:
        if interval < 1 or check_interval < 1:
            raise ValueError(f'interval and check_interval must be >= 1, got {interval} and '
                             f'{check_interval}')
        if max_samples < 2 * min_samples:
            raise ValueError(f'max_samples must be >= 2 * min_samples ({2 * min_samples}), '
                             f'got {max_samples}')
        if max_memory_fraction is not None and not 0 < max_memory_fraction <= 1:
            raise ValueError(f'max_memory_fraction must be in (0, 1] or None, '
                             f'got {max_memory_fraction}')
        self.interval = interval
        self.max_samples = max_samples
        self.check_interval = check_interval
        self.thresholds = VerdictThresholds(
            warmup_iters=warmup_iters, warmup_fraction=warmup_fraction,
            leak_mib_per_kiter=leak_mib_per_kiter, leak_pct_per_epoch=leak_pct_per_epoch,
            min_growth_mib=min_growth_mib, sawtooth_mib=sawtooth_mib, min_samples=min_samples,
            flat_growth_pct=flat_growth_pct, min_leak_blocks=min_leak_blocks)
        self.stop_on_leak = stop_on_leak
        self.max_memory_fraction = max_memory_fraction
        self.cuda_gap_mib = cuda_gap_mib
        self.out_dir = out_dir
        self.write_every_epoch = write_every_epoch
        self.release_heap_before_fork = release_heap_before_fork
        self.record = MemoryRecord()
        self.warnings: List[str] = []
        self.verdicts: List[Verdict] = []
        # label -> iteration of the judgement that first named it a leak (kept, see _judge).
        self.named_leaks: Dict[str, int] = {}
        self._autograd = KeptGraphDetector() if check_autograd else None
        self._cuda_gap_warned = False
        self._limit_mib = memory_limit_mib()

    # ---- Runner callbacks -------------------------------------------------------------------
    def before_train_epoch(self, runner) -> None:
        self.record.mark_epoch(runner.epoch, runner.iter)
        self._release_heap_if_forking(runner.train_loop.dataloader)

    def before_val_epoch(self, runner) -> None:
        self._release_heap_if_forking(runner.val_loop.dataloader)

    def _release_heap_if_forking(self, loader: Any) -> None:
        if self.release_heap_before_fork and workers_will_fork(loader):
            release_free_heap()

    def after_train_iter(self, runner, batch_idx: int, data_batch: Any = None,
                         outputs: Optional[dict] = None) -> None:
        iteration = runner.iter + 1
        if self._autograd is not None:
            self._autograd.watch_outputs(iteration, outputs)
            for warning in self._autograd.check(iteration, runner.message_hub.runtime_info):
                self._warn(runner, warning)
        if batch_idx == 0 or self.every_n_train_iters(runner, self.interval):
            self._sample(runner, iteration)
            if self.record.num_samples() > self.max_samples:
                self.interval *= 2
                self.record.thin(self.interval)
        if self.every_n_train_iters(runner, self.check_interval):
            self._judge(runner, log_flat=False)

    def after_train_epoch(self, runner) -> None:
        self._judge(runner, log_flat=True)
        if self.write_every_epoch:
            self.write_report(runner)

    def after_run(self, runner) -> None:
        if self.record.series:
            self.write_report(runner)

    # ---- the work ---------------------------------------------------------------------------
    def _loaders(self, runner) -> Dict[str, Any]:
        """The dataloaders whose workers can be alive now, by name (built loops only)."""
        return {name: loop.dataloader for name, loop in runner_loops(runner).items()
                if isinstance(loop, BaseLoop)}

    def _sample(self, runner, iteration: int) -> None:
        total = self.record.sample(iteration, runner.epoch, self._loaders(runner), 'train')
        hub = runner.message_hub
        for label, s in self.record.series.items():
            if s['iter'][-1] != iteration:
                continue  # a process that was not alive at this sample
            fields = (CUDA_FIELDS if label == CUDA else ('pss',) if label == TOTAL else
                      _MAIN_FIELDS if label == MAIN else _CHILD_FIELDS)
            for field in fields:
                hub.update_scalar(f'train/mem/{label}_{field}', s[field][-1])
        self._check_cuda_gap(runner)
        if self.max_memory_fraction is not None:
            ceiling = self.max_memory_fraction * self._limit_mib
            if total > ceiling:
                self._stop(runner, f'the job uses {total:.0f} MiB (total PSS of the main process '
                           f'and its children), over the ceiling of {ceiling:.0f} MiB '
                           f'(max_memory_fraction={self.max_memory_fraction} of '
                           f'{self._limit_mib:.0f} MiB)')

    def _check_cuda_gap(self, runner) -> None:
        allocated, reserved = (self.record.last(CUDA, 'allocated'),
                               self.record.last(CUDA, 'reserved'))
        if self._cuda_gap_warned or allocated is None:
            return
        gap = reserved - allocated
        if gap >= self.cuda_gap_mib and gap >= 0.5 * reserved:
            self._cuda_gap_warned = True
            self._warn(runner, f'CUDA: the caching allocator reserves {reserved:.0f} MiB but live '
                       f'tensors hold {allocated:.0f} MiB: the {gap:.0f} MiB gap is cache, not a '
                       f'leak (nvidia-smi shows the reserved figure). torch.cuda.empty_cache() '
                       f'hands it back to other processes; PYTORCH_CUDA_ALLOC_CONF='
                       f'expandable_segments:True reduces fragmentation.')

    def _judge_now(self, iteration: int) -> List[Verdict]:
        """Judge every process; a leak, once named, is remembered so that the next judgement
        takes it back only on evidence against it (``judge_series``'s ``named_leak_at``)."""
        self.verdicts = self.record.judge(self.thresholds, self.named_leaks)
        for verdict in self.verdicts:
            if verdict.verdict == LEAK:
                self.named_leaks.setdefault(verdict.label, iteration)
            else:
                self.named_leaks.pop(verdict.label, None)
        return self.verdicts

    def _judge(self, runner, log_flat: bool) -> None:
        self._judge_now(runner.iter)
        for verdict in self.verdicts:
            if verdict.verdict in (LEAK, SAWTOOTH):
                self._warn(runner, self.record.describe(verdict), remember=False)
        if log_flat and self.verdicts:
            # Every process in one line, warned ones too: the line people read at the end.
            runner.logger.info(f'MemoryWatch after {runner.iter} iterations: '
                               + ', '.join(v.summary() for v in self.verdicts))
        leaks = [v for v in self.verdicts if v.verdict == LEAK]
        if self.stop_on_leak and leaks:
            self._stop(runner, 'stop_on_leak: ' + '; '.join(
                self.record.describe(v) for v in leaks))

    def _warn(self, runner, message: str, remember: bool = True) -> None:
        runner.logger.warning(f'MemoryWatch: {message}')
        if remember:
            self.warnings.append(message)

    def _stop(self, runner, why: str) -> None:
        self._judge_now(runner.iter)
        paths = self.write_report(runner)
        summary = '\n  '.join(self.record.describe(v) for v in self.verdicts)
        raise MemoryWatchError(f'MemoryWatch stopped the run: {why}.\n  {summary}\n'
                               f'Report: {", ".join(str(p) for p in paths)}')

    def write_report(self, runner) -> List[Path]:
        """Judge now and write ``memory.json`` and ``memory.png``; returns their paths."""
        self._judge_now(runner.iter)
        out = Path(self.out_dir or runner.work_dir)
        out.mkdir(parents=True, exist_ok=True)
        meta = dict(interval=self.interval, max_samples=self.max_samples,
                    memory_limit_mib=round(self._limit_mib, 1),
                    max_memory_fraction=self.max_memory_fraction,
                    thresholds=asdict(self.thresholds),
                    iters_per_epoch=self.record.iters_per_epoch(),
                    leaks_named_at=dict(self.named_leaks))
        # Every rank watches its own processes; in a distributed run each writes its own files.
        stem = f'memory_rank{get_rank()}' if get_world_size() > 1 else 'memory'
        json_path = self.record.write_json(out / f'{stem}.json', self.verdicts, self.warnings,
                                           meta)
        png_path = plot_record(self.record, self.verdicts, out / f'{stem}.png',
                               title=f'memory watch: {runner.experiment_name}')
        return [json_path, png_path]
