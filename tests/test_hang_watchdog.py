"""HangWatchdogHook on a real Runner whose DataLoader worker really hangs loading one sample."""
import gc
import os
import os.path as osp
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from mmengine.runner import Runner

from mmdet_ext._compat import dataloader_worker_processes
from mmdet_ext.datasets.inflight import InflightRecord
from mmdet_ext.engine.hooks import HangDetected, HangWatchdogHook
from helpers.manual_clock import ManualClock, SetAfterIteration, wait_for_file
from helpers.tiny_runner import TinyFlipDataset, TinyLogitMetric, tiny_runner_kwargs

HANG_INDEX = 9  # batch 2 (indices 8-11, no shuffle): worker 0 loads it after batch 0


def block_until_released(release_file: str) -> None:
    """The planted hang: a worker stays here until ``release_file`` exists (maybe never).
    ``<release_file>.hung`` tells the test clock that the hang is real."""
    open(f'{release_file}.hung', 'w').close()
    while not osp.exists(release_file):
        time.sleep(0.05)


class HangingDataset(TinyFlipDataset):
    """TinyFlipDataset that keeps in-flight records and blocks on sample ``HANG_INDEX``."""

    def __init__(self, work_dir: str, release_file: str) -> None:
        super().__init__(16)
        self.inflight = InflightRecord(work_dir)
        self.release_file = release_file

    def __getitem__(self, index: int):
        self.inflight.begin(f'sample {index} (img_id={1000 + index}, '
                            f'img_path=images/{index:04d}.jpg)')
        if index == HANG_INDEX:
            block_until_released(self.release_file)
        item = super().__getitem__(index)
        self.inflight.end()
        return item


def make_runner(work_dir: str, on_hang: str, with_val: bool = False) -> Runner:
    """The watchdog's clock stands still (however slow the machine: no early report) until the
    hang is real -- 2 iterations done and seen by the watchdog, the worker blocked on sample 9 --
    then jumps past the bound once."""
    # timeout: if the watchdog never fires, the DataLoader gives up after 60 s and the test
    # fails instead of hanging CI.
    release = osp.join(work_dir, 'release')
    loader = dict(batch_size=4, num_workers=2, timeout=60,
                  collate_fn=dict(type='default_collate'),
                  dataset=HangingDataset(work_dir, release),
                  sampler=dict(type='DefaultSampler', shuffle=False))
    two_done = threading.Event()
    clock = ManualClock(jump_when=lambda: two_done.is_set() and osp.exists(f'{release}.hung'))
    kwargs = tiny_runner_kwargs(
        work_dir, max_epochs=1, with_val=with_val, train_dataloader=loader,
        custom_hooks=[dict(type='WorkerDefaultsHook'),  # keeps the loader's timeout
                      HangWatchdogHook(min_timeout=3, on_hang=on_hang, dump_wait=60.0,
                                       clock=clock),
                      SetAfterIteration(2, two_done)],
        log_level='WARNING', experiment_name=f'hang_{on_hang}_{os.getpid()}')
    return Runner(**kwargs)


def check_report(work_dir: str) -> str:
    with open(osp.join(work_dir, 'hang_report.txt')) as f:
        report = f.read()
    # The hung worker: its pid, alive, its sample and the blocking function in its stack.
    workers, main = report.split('== main process: Python stacks of all threads ==')
    sections = workers.split('-- worker ')[1:]
    assert len(sections) == 2, report
    hung = [s for s in sections if 'loading sample 9' in s]
    assert len(hung) == 1, report
    match = re.match(r'(\d), pid (\d+), alive: loading sample 9 '
                     r'\(img_id=1009, img_path=images/0009.jpg\)\n(.*)', hung[0], re.S)
    assert match, report
    stack = match.group(3)
    assert 'block_until_released' in stack and 'test_hang_watchdog.py' in stack, report
    assert int(match.group(2)) != os.getpid()
    # The main process's stacks were dumped: the watchdog thread and the waiting main thread.
    assert 'Current thread' in main and 'in _watch' in main, report
    assert 'training iterations done: 2' in report, report
    return match.group(2)


def test_raise_writes_report_naming_stuck_worker_and_ends_run(tmp_path) -> None:
    work_dir = str(tmp_path)
    runner = make_runner(work_dir, 'raise')
    # What Ctrl-C did before the run (a shell's background job starts with it ignored).
    sigint_before = signal.getsignal(signal.SIGINT)
    with pytest.raises(HangDetected, match='hang_report.txt') as error:
        runner.train()
    try:
        pid = check_report(work_dir)
        assert f'worker pid {pid}' in str(error.value)
        assert 'sample 9' in str(error.value)
        # The in-flight record of the stuck worker is kept as evidence; Ctrl-C works as before.
        assert osp.exists(osp.join(work_dir, f'inflight_{pid}.txt'))
        assert signal.getsignal(signal.SIGINT) is sigint_before
    finally:
        # The traceback holds the DataLoader iterator; dropping it shuts the workers down (in a
        # real job the process ends here), also when an assertion above failed, so that the
        # next test sees no worker of this run.
        del error
        gc.collect()
    assert not dataloader_worker_processes()


def test_wait_reports_once_and_lets_the_run_finish_when_the_sample_comes(tmp_path) -> None:
    work_dir = str(tmp_path)
    runner = make_runner(work_dir, 'wait', with_val=True)  # validation runs under the watchdog
    report = osp.join(work_dir, 'hang_report.txt')
    hook = next(h for h in runner.hooks if isinstance(h, HangWatchdogHook))

    def release_after_report() -> None:
        # The report appears whole (renamed into place). The hang then lasts three more polls
        # (one clock read each), in which a second report would be written. No report: nothing
        # is released and the DataLoader's timeout fails the run.
        if wait_for_file(report):
            hook.clock.wait_for_reads(3)
            open(osp.join(work_dir, 'release'), 'w').close()

    releaser = threading.Thread(target=release_after_report, daemon=True)
    releaser.start()
    runner.train()  # returns: the watchdog waited instead of raising
    releaser.join(timeout=5)
    with open(osp.join(runner.log_dir, f'{runner.timestamp}.log')) as f:
        reports = [line for line in f if 'HangWatchdogHook: ' in line and ' - ERROR - ' in line]
    assert len(reports) == 1, reports
    check_report(work_dir)
    assert runner.iter == 4
    assert hook._thread is None  # stopped with the run
    assert not any(name.startswith('worker_stack_') for name in os.listdir(work_dir))


def test_bound_is_floor_until_enough_iterations_then_k_times_median() -> None:
    hook = HangWatchdogHook(k=20, min_timeout=3, min_iters=3)
    assert hook.bound() == 3
    hook._durations.extend([0.5, 0.1, 0.2])
    assert hook.bound() == pytest.approx(4.0)  # 20 x 0.2
    with pytest.raises(ValueError):
        HangWatchdogHook(on_hang='ignore')


TWO_RANKS = textwrap.dedent('''
    import os, sys, threading
    import torch.distributed as dist
    from mmengine.hooks import Hook
    from mmengine.runner import Runner
    from helpers.manual_clock import ManualClock, SetAfterIteration, wait_for_file
    from helpers.tiny_runner import tiny_runner_kwargs
    from mmdet_ext.engine.hooks import HangWatchdogHook
    from mmdet_ext.engine.hooks.hang_watchdog_hook import read_progress
    from mmdet_ext.engine.process_exit import run_and_exit

    work_dir = sys.argv[1]
    rank = int(os.environ['RANK'])
    at_hang = threading.Event()

    class StallRank1(Hook):
        """Rank 1 stalls after iteration index 2 (before its watchdog counts it) until both
        ranks have written their reports."""
        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            if rank == 1 and runner.iter == 2:
                at_hang.set()
                for name in ('hang_report.txt', 'hang_report_rank1.txt'):
                    assert wait_for_file(os.path.join(work_dir, name)), name

    def hang_is_real():
        """This rank at its stall (rank 0: 3 iterations done, waiting in the all-reduce of the
        4th; rank 1: in StallRank1) and each rank's published progress shows it."""
        if not at_hang.is_set():
            return False
        progress = read_progress(work_dir, 2)
        return [p and p[0] for p in progress.values()] == [3, 2]

    hooks = [StallRank1(), HangWatchdogHook(min_timeout=3, on_hang='wait',
                                            clock=ManualClock(jump_when=hang_is_real))]
    if rank == 0:
        hooks.append(SetAfterIteration(3, at_hang))
    dist.init_process_group('gloo')  # as tests/test_checkpoint_distributed.py (CPU torch)
    kwargs = tiny_runner_kwargs(
        work_dir, max_epochs=3, with_val=False, launcher='pytorch',
        cfg=dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel', device_ids=None)),
        custom_hooks=hooks, log_level='WARNING')
    run_and_exit(Runner(**kwargs).train)  # as tools/train.py ends a rank: never SIGABRT at exit
''')


def test_two_ranks_report_names_the_rank_behind(tmp_path) -> None:
    work_dir = tmp_path / 'work'
    script = tmp_path / 'two_ranks.py'
    script.write_text(TWO_RANKS)
    tests_dir = osp.dirname(osp.abspath(__file__))
    env = {**os.environ, 'OMP_NUM_THREADS': '1',
           'PYTHONPATH': os.pathsep.join([tests_dir, os.environ.get('PYTHONPATH', '')])}
    proc = subprocess.run(
        [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
         '--master_port', str(30500 + os.getpid() % 1000), str(script), str(work_dir)],
        env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = (work_dir / 'hang_report.txt').read_text()
    assert 'rank 0 of 2' in report
    assert re.search(r'rank 0 \(this rank\): 3 training iterations done', report), report
    assert re.search(r'rank 1: 2 training iterations done \(updated \d+ s ago\)  <- BEHIND',
                     report), report
    assert 'ranks behind: rank 1 at 2 iterations (this rank waits for them)' in report
    # Rank 0's main thread is shown waiting in DDP's backward (the gradient all-reduce).
    assert 'in backward' in report.split('== main process')[1], report
    # Rank 1's own report says it is the one behind.
    rank1 = (work_dir / 'hang_report_rank1.txt').read_text()
    assert 'rank 1 of 2' in rank1 and 'ranks behind: rank 1 at 2 iterations\n' in rank1, rank1
    # The run went on and finished: the progress files are gone.
    assert not list(work_dir.glob('progress_rank*.txt'))


class SlowEvaluationMetric(TinyLogitMetric):
    """An evaluation that takes longer than the watchdog's bound, as COCO/LVIS evaluation can:
    the watchdog's clock jumps past the bound, and the watchdog thread looks at it twice (a full
    check with the jumped time) before the evaluation ends."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock

    def compute_metrics(self, results: list) -> dict[str, float]:
        self.clock.advance()
        self.clock.wait_for_reads(2)
        return super().compute_metrics(results)


def test_a_long_evaluation_is_not_a_hang(tmp_path) -> None:
    from mmengine.evaluator import Evaluator
    work_dir = str(tmp_path)
    clock = ManualClock()
    kwargs = tiny_runner_kwargs(
        work_dir, max_epochs=1, with_val=True,
        custom_hooks=[HangWatchdogHook(min_timeout=2, on_hang='raise', clock=clock)],
        log_level='WARNING', experiment_name=f'slow_eval_{os.getpid()}')
    kwargs['val_evaluator'] = Evaluator(SlowEvaluationMetric(clock))
    Runner(**kwargs).train()
    assert not osp.exists(osp.join(work_dir, 'hang_report.txt'))
