"""Clocks for tests of time-bound code (``HangWatchdogHook(clock=...)``): time moves only when
the test says so, never because the machine is slow."""
import os.path as osp
import threading
import time
from typing import Callable, Optional

from mmengine.hooks import Hook

JUMP = 1e6  # seconds: past any bound a test sets


class ManualClock:
    """Seconds that stand still until :meth:`advance`; counts reads from threads other than the
    main thread, so a test can wait until a watchdog thread has looked at the advanced time.

    ``jump_when``: advance by ``JUMP``, once, on the first read that finds it true (a planted hang
    that has really happened); the time then stays advanced, as a real clock would.
    """

    def __init__(self, jump_when: Optional[Callable[[], bool]] = None) -> None:
        self.now = 1000.0
        self.jump_when = jump_when
        self.jumped = False
        self.other_thread_reads = 0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            if threading.current_thread() is not threading.main_thread():
                self.other_thread_reads += 1
            if self.jump_when is not None and not self.jumped and self.jump_when():
                self.jumped = True
                self.now += JUMP
            return self.now

    def advance(self, seconds: float = JUMP) -> None:
        with self._lock:
            self.now += seconds

    def wait_for_reads(self, count: int, timeout: float = 120.0) -> None:
        """Block until ``count`` more reads came from other threads; fail after ``timeout`` s
        (real time: a safety net that fails a test, never passes one)."""
        with self._lock:
            target = self.other_thread_reads + count
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if self.other_thread_reads >= target:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f'no {count} clock reads from another thread in {timeout} s')
            time.sleep(0.05)


class SetAfterIteration(Hook):
    """Sets ``event`` once ``iterations`` training iterations are done and every hook of higher
    priority has seen it (register it after ``HangWatchdogHook``: same priority, runs after)."""

    priority = 'LOWEST'

    def __init__(self, iterations: int, event: threading.Event) -> None:
        self.iterations = iterations
        self.event = event

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if runner.iter + 1 == self.iterations:
            self.event.set()


def wait_for_file(path: str, timeout: float = 120.0) -> bool:
    """True once ``path`` exists; False after ``timeout`` s of real time (the caller fails)."""
    deadline = time.monotonic() + timeout
    while not osp.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
