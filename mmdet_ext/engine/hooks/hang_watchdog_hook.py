"""``HangWatchdogHook``: a run that stops making progress writes ``hang_report.txt``, then raises.

A daemon thread in the main process watches the time since the last completed iteration (train,
or val while validating). When it passes the bound -- ``k`` x the median training iteration time,
never below ``min_timeout`` seconds -- the thread writes ``hang_report.txt`` in the work dir:

- the stall (seconds, bound, last completed iteration);
- every DataLoader worker of the process: pid, alive or dead (exit code), the sample it is on
  (its ``inflight_<pid>.txt`` record, ``datasets/inflight.py``) and its Python stack;
- the main process's Python stacks, all threads (``faulthandler.dump_traceback``).

Worker stacks: every worker registers ``faulthandler`` on SIGUSR2 (``worker_init_fn`` wrapper
installed by this hook) writing to ``worker_stack_<pid>.txt`` in the work dir; the watchdog sends
SIGUSR2 to each worker that registered, waits until the dumps are written (at most
``dump_wait`` seconds) and copies them in.

Distributed: each rank's watchdog thread keeps ``progress_rank<R>.txt`` (iterations done) in
the shared work dir; a stalled rank's report (rank R > 0: ``hang_report_rank<R>.txt``) lists
every rank's progress and names the ranks behind.

Then ``on_hang='raise'`` (default) stops the run with :class:`HangDetected` raised in the main
thread, so the job fails and a scheduler can restart it (``--resume``); ``'wait'`` keeps waiting
after the report (written once per stall).
"""
import faulthandler
import functools
import os
import os.path as osp
import signal
import socket
import statistics
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from mmengine.hooks import Hook
from mmengine.logging import print_log

from ..._compat import dataloader_worker_processes, runner_loops
from ...datasets.inflight import inflight_path
from ...registry import HOOKS
from .inflight_cleanup_hook import inflight_directories

REPORT_NAME = 'hang_report.txt'
_WORKER_STACK_FILES: list = []  # the open dump files of this (worker) process: kept alive


class HangDetected(RuntimeError):
    """Raised in the main thread by :class:`HangWatchdogHook` (``on_hang='raise'``)."""


def progress_path(directory: str, rank: int) -> str:
    return osp.join(directory, f'progress_rank{rank}.txt')


def report_name(rank: int, world_size: int) -> str:
    """``hang_report.txt`` (rank 0 or a single process), ``hang_report_rank<R>.txt`` otherwise."""
    return REPORT_NAME if rank == 0 or world_size == 1 else f'hang_report_rank{rank}.txt'


def write_progress(directory: str, rank: int, iterations: int) -> None:
    """Atomically replace this rank's ``progress_rank<R>.txt``: iterations done, wall time."""
    path = progress_path(directory, rank)
    tmp = f'{path}.{os.getpid()}.tmp'
    with open(tmp, 'w') as f:
        f.write(f'{iterations} {time.time():.3f}\n')
    os.replace(tmp, path)


def read_progress(directory: str, world_size: int) -> dict[int, Optional[tuple[int, float]]]:
    """Rank -> (iterations done, wall time written), None where a rank wrote nothing."""
    progress: dict[int, Optional[tuple[int, float]]] = {}
    for rank in range(world_size):
        try:
            with open(progress_path(directory, rank)) as f:
                done, stamp = f.read().split()
            progress[rank] = (int(done), float(stamp))
        except (OSError, ValueError):
            progress[rank] = None
    return progress


def ranks_behind(progress: dict[int, Optional[tuple[int, float]]]) -> list[int]:
    """Ranks with fewer iterations done than the furthest one, or with no progress file."""
    known = [p[0] for p in progress.values() if p is not None]
    if not known:
        return []
    front = max(known)
    return [r for r, p in sorted(progress.items()) if p is None or p[0] < front]


def worker_stack_path(directory: str, pid: int) -> str:
    return osp.join(directory, f'worker_stack_{pid}.txt')


def _init_worker(worker_id: int, directory: str, previous: Optional[Callable]) -> None:
    """In a DataLoader worker: SIGUSR2 dumps every thread's Python stack to the worker's file."""
    try:
        stack_file = open(worker_stack_path(directory, os.getpid()), 'w')
        faulthandler.register(signal.SIGUSR2, file=stack_file, all_threads=True, chain=False)
        _WORKER_STACK_FILES.append(stack_file)
    except (OSError, AttributeError, ValueError):  # no such signal, unwritable dir: no stack
        pass
    if previous is not None:  # WorkerDefaultsHook's / mmengine's seeding, unchanged
        previous(worker_id)


def install_worker_stack_dumps(loader: Any, directory: str) -> None:
    """Wrap ``loader.worker_init_fn`` (once) so its workers dump their stacks on SIGUSR2."""
    previous = getattr(loader, 'worker_init_fn', None)
    if getattr(loader, 'num_workers', 0) == 0 or (
            isinstance(previous, functools.partial) and previous.func is _init_worker):
        return
    loader.worker_init_fn = functools.partial(_init_worker, directory=directory,
                                              previous=previous)


@HOOKS.register_module()
class HangWatchdogHook(Hook):
    """Report (and by default end) a run whose iterations stop completing.

    Args:
        k: the bound is ``k`` x the median of the last ``window`` training iteration times.
        min_timeout: seconds; the bound is never lower, and until ``min_iters`` iterations were
            timed it is the bound. Default 600: above a slow first iteration (workers starting,
            cudnn benchmark, a cold file system), a checkpoint save and a val iteration of a big
            detector, so a healthy job is not killed; a real hang costs at most 10 minutes.
        on_hang: ``'raise'`` (report, then :class:`HangDetected` in the main thread: the job
            fails and a scheduler restarts it from the last checkpoint) or ``'wait'`` (report
            once per stall, keep waiting).
        dump_wait: the longest wait (seconds) for the workers' stack dumps after SIGUSR2; the
            report is written as soon as every dump is complete.
        poll: seconds between the watchdog thread's checks (default: bound-dependent, <= 1 s);
            real time, whatever ``clock`` is.
        clock: the clock stalls and iteration times are measured on, in seconds (default
            :func:`time.monotonic`). For tests and simulation: a clock that only moves when told
            to makes the hang decision independent of the machine's speed. Real time still
            paces the thread (``poll``, ``dump_wait``) and stamps the report and progress files.
    """

    priority = 'LOWEST'  # a training iteration counts as done after its checkpoint save

    def __init__(self, k: float = 20, min_timeout: float = 600, on_hang: str = 'raise',
                 min_iters: int = 5, window: int = 100, dump_wait: float = 10.0,
                 poll: Optional[float] = None,
                 clock: Optional[Callable[[], float]] = None) -> None:
        if on_hang not in ('raise', 'wait'):
            raise ValueError(f"on_hang must be 'raise' or 'wait', got {on_hang!r}")
        if min_timeout <= 0 or k <= 0:
            raise ValueError('min_timeout and k must be positive')
        self.k = k
        self.min_timeout = min_timeout
        self.on_hang = on_hang
        self.min_iters = min_iters
        self.dump_wait = dump_wait
        self.poll = poll if poll is not None else min(1.0, min_timeout / 10)
        self.clock = clock if clock is not None else time.monotonic
        self._durations: deque = deque(maxlen=window)
        self._last_tick = self.clock()
        self._last_iter: Optional[int] = None
        self._reported_tick: Optional[float] = None
        self._evaluating = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._train_frame: Any = None
        self._hang_message: Optional[str] = None
        self._previous_sigint: Any = None
        self.report_path: Optional[str] = None
        self._written_progress: Optional[int] = None

    # ---- hooks ---------------------------------------------------------------------------
    def before_run(self, runner) -> None:
        for loop in runner_loops(runner).values():
            loader = getattr(loop, 'dataloader', None)
            if loader is not None and not isinstance(loader, dict):
                install_worker_stack_dumps(loader, runner.work_dir)

    def before_train(self, runner) -> None:
        install_worker_stack_dumps(runner.train_loop.dataloader, runner.work_dir)
        if threading.current_thread() is not threading.main_thread():
            runner.logger.warning('HangWatchdogHook: not in the main thread; the watchdog is off')
            return
        self.report_path = osp.join(runner.work_dir, report_name(runner.rank, runner.world_size))
        self._train_frame = self._find_train_frame(runner)
        self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
        self._stop.clear()
        self._tick(runner, timed=False)
        self._thread = threading.Thread(target=self._watch, args=(runner,),
                                        name='HangWatchdog', daemon=True)
        self._thread.start()

    def before_val(self, runner) -> None:
        # The val loop is built on first use, after before_run: wrap its workers' init here.
        install_worker_stack_dumps(runner.val_loop.dataloader, runner.work_dir)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._tick(runner, timed=True)

    def after_val_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._tick(runner, timed=False)
        try:
            last = batch_idx + 1 >= len(runner.val_loop.dataloader)
        except TypeError:  # an iterable dataset without a length: no pause
            last = False
        if last:
            # The evaluator runs next (COCO or LVIS evaluation: minutes, no iteration ends):
            # not a hang. The clock restarts in after_val_epoch.
            with self._lock:
                self._evaluating = True

    def after_val_epoch(self, runner, metrics=None) -> None:
        with self._lock:
            self._evaluating = False
        self._tick(runner, timed=False)

    def after_train(self, runner) -> None:
        self._shutdown()

    def after_run(self, runner) -> None:
        self._shutdown()
        if runner.world_size > 1:
            try:
                os.remove(progress_path(runner.work_dir, runner.rank))
            except OSError:
                pass
        for pid in self._worker_stack_pids(runner.work_dir):
            try:
                os.remove(worker_stack_path(runner.work_dir, pid))
            except OSError:
                pass

    # ---- the clock -----------------------------------------------------------------------
    def _tick(self, runner, timed: bool) -> None:
        now = self.clock()
        with self._lock:
            if timed:
                self._durations.append(now - self._last_tick)
            self._last_tick = now
            # after_train_iter runs before the loop counts the iteration: runner.iter + 1 done.
            self._last_iter = runner.iter + 1 if timed else runner.iter
            self._reported_tick = None

    def bound(self) -> float:
        """Seconds without a completed iteration after which the run counts as hung."""
        with self._lock:
            durations = list(self._durations)
        if len(durations) < self.min_iters:
            return float(self.min_timeout)
        return max(float(self.min_timeout), self.k * statistics.median(durations))

    def _shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        self._train_frame = None
        self._restore_sigint()

    def _restore_sigint(self) -> None:
        if self._previous_sigint is not None and \
                threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) == self._on_sigint:
                signal.signal(signal.SIGINT, self._previous_sigint)
            self._previous_sigint = None

    @staticmethod
    def _find_train_frame(runner) -> Any:
        """The frame of ``runner.train()``: while it is on the main thread's stack, the run runs."""
        frame = sys._getframe()
        found = None
        while frame is not None:
            if frame.f_code.co_name == 'train' and frame.f_locals.get('self') is runner:
                found = frame
            frame = frame.f_back
        return found

    def _training_still_running(self) -> bool:
        """False once ``runner.train()`` has left (also by an exception: no ``after_train``)."""
        if self._train_frame is None:
            return True
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None:
            if frame is self._train_frame:
                return True
            frame = frame.f_back
        return False

    # ---- the watchdog thread -------------------------------------------------------------
    def _watch(self, runner) -> None:
        while not self._stop.wait(self.poll):
            if not self._training_still_running():
                self._train_frame = None
                return
            if runner.world_size > 1:
                self._publish_progress(runner)
            bound = self.bound()
            with self._lock:
                stalled = self.clock() - self._last_tick
                tick, last_iter = self._last_tick, self._last_iter
                already = self._reported_tick == tick
                evaluating = self._evaluating
            if stalled < bound or already or evaluating:
                continue
            with self._lock:
                self._reported_tick = tick
            try:
                summary = self.write_report(runner, stalled, bound, last_iter)
            except Exception as error:  # the report must not kill the watchdog
                summary = f'HangWatchdogHook: writing {self.report_path} failed: {error!r}'
            print_log(summary, logger='current', level=40)  # logging.ERROR
            if self.on_hang == 'raise':
                self._hang_message = (f'{summary}\nThe run is stopped (on_hang="raise"); '
                                      f'details in {self.report_path}')
                self._stop.set()
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return

    def _publish_progress(self, runner) -> None:
        """This rank's iterations done, for the other ranks' reports (written by the thread:
        a rank stuck in the training loop still publishes its true count)."""
        with self._lock:
            done = self._last_iter
        if done is None or done == self._written_progress:
            return
        try:
            write_progress(runner.work_dir, runner.rank, done)
            self._written_progress = done
        except OSError:
            pass

    def _on_sigint(self, signum: int, frame: Any) -> None:
        message, self._hang_message = self._hang_message, None
        if message is not None:
            self._restore_sigint()
            raise HangDetected(message)
        previous = self._previous_sigint
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # a job started with Ctrl-C ignored keeps ignoring it
            signal.default_int_handler(signum, frame)

    # ---- the report ----------------------------------------------------------------------
    def _wait_for_dumps(self, paths: list[str]) -> None:
        """Until every dump file has stopped growing after its first bytes, at most
        ``dump_wait`` seconds: a loaded machine may take a while to run a worker's handler, and
        a fixed wait would then copy an empty stack."""
        deadline = time.monotonic() + self.dump_wait
        sizes = {path: -1 for path in paths}
        while paths and time.monotonic() < deadline:
            time.sleep(0.05)
            now = {path: osp.getsize(path) if osp.exists(path) else 0 for path in paths}
            if all(size > 0 and size == sizes[path] for path, size in now.items()):
                return
            sizes = now

    def _worker_stack_pids(self, directory: str) -> list[int]:
        pids = []
        prefix = 'worker_stack_'
        try:
            names = os.listdir(directory)
        except OSError:
            return pids
        for name in names:
            if name.startswith(prefix) and name.endswith('.txt') and \
                    name[len(prefix):-4].isdigit():
                pids.append(int(name[len(prefix):-4]))
        return pids

    def _inflight_record(self, runner, pid: int) -> str:
        directories = {runner.work_dir}
        try:
            directories |= inflight_directories(runner)
        except Exception:
            pass
        for directory in directories:
            path = inflight_path(directory, pid)
            if osp.exists(path):
                with open(path) as f:
                    return f.read().strip()
        return '(no in-flight record)'

    def write_report(self, runner, stalled: float, bound: float,
                     last_iter: Optional[int]) -> str:
        """Write ``hang_report.txt``; return the one-paragraph summary that is logged."""
        workers = [(wid, proc.pid, proc.is_alive(), proc.exitcode)
                   for wid, proc in dataloader_worker_processes()]
        dumped = {}
        registered = set(self._worker_stack_pids(runner.work_dir))
        signalled = []
        for _, pid, alive, _ in workers:
            if alive and pid in registered:
                path = worker_stack_path(runner.work_dir, pid)
                try:
                    with open(path, 'r+') as f:  # only this dump in the file
                        f.truncate(0)
                    os.kill(pid, signal.SIGUSR2)
                    signalled.append(pid)
                except OSError:
                    pass
        self._wait_for_dumps([worker_stack_path(runner.work_dir, pid) for pid in signalled])
        for pid in signalled:
            with open(worker_stack_path(runner.work_dir, pid)) as f:
                dumped[pid] = f.read().strip('\0\n')

        with self._lock:
            durations = list(self._durations)
        median = statistics.median(durations) if durations else None
        head = (f'no iteration completed for {stalled:.1f} s (bound {bound:.1f} s = '
                f'max(min_timeout {self.min_timeout} s, k {self.k} x median iteration '
                + (f'{median:.3f} s over {len(durations)}' if median is not None else 'n/a')
                + f' iterations)); training iterations done: {last_iter}')
        lines = ['HANG WATCHDOG REPORT (mmdet_ext HangWatchdogHook)',
                 f'time: {time.strftime("%Y-%m-%d %H:%M:%S %Z")}',
                 f'host {socket.gethostname()}, rank {runner.rank} of {runner.world_size}, '
                 f'main process pid {os.getpid()}',
                 head]
        if runner.world_size > 1:
            self._publish_progress(runner)
            progress = read_progress(runner.work_dir, runner.world_size)
            behind = ranks_behind(progress)
            lines += ['', f'== ranks (progress_rank<R>.txt in {runner.work_dir}) ==']
            for rank, entry in progress.items():
                mark = '  <- BEHIND' if rank in behind else ''
                own = ' (this rank)' if rank == runner.rank else ''
                if entry is None:
                    lines.append(f'rank {rank}{own}: no progress file{mark}')
                else:
                    age = time.time() - entry[1]
                    lines.append(f'rank {rank}{own}: {entry[0]} training iterations done '
                                 f'(updated {age:.0f} s ago){mark}')
            if behind:
                note = 'ranks behind: ' + ', '.join(
                    f'rank {r} at ' + (f'{progress[r][0]} iterations' if progress[r] else
                                       'no progress') for r in behind)
                if runner.rank not in behind:
                    note += ' (this rank waits for them)'
                lines.append(note)
                head += '; ' + note
        lines += ['', f'== DataLoader workers ({len(workers)}) ==']
        summaries = []
        for wid, pid, alive, exitcode in workers:
            state = 'alive' if alive else f'dead (exit code {exitcode})'
            record = self._inflight_record(runner, pid)
            lines.append(f'-- worker {wid}, pid {pid}, {state}: {record}')
            if record.startswith('loading'):
                summaries.append(f'worker pid {pid} ({state}) {record}')
            if pid in dumped:
                stack = dumped[pid] or '(empty stack dump)'
            elif alive:
                stack = '(no stack: the worker did not register the SIGUSR2 dump)'
            else:
                stack = '(no stack: the worker is dead)'
            lines += ['    ' + line if line else '' for line in stack.splitlines()]
        if not workers:
            lines.append('(none: no multi-process DataLoader iterator is open)')
        lines += ['', '== main process: Python stacks of all threads ==', '']
        # Written aside, then renamed: whoever sees the report (a person, a scheduler) sees it
        # whole.
        partial = f'{self.report_path}.{os.getpid()}.tmp'
        with open(partial, 'w') as f:
            f.write('\n'.join(lines) + '\n')
            f.flush()
            faulthandler.dump_traceback(file=f, all_threads=True)
        os.replace(partial, self.report_path)
        summary = f'HangWatchdogHook: {head}. Report: {self.report_path}'
        if summaries:
            summary += '. ' + '; '.join(summaries)
        return summary
