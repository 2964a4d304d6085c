"""Which sample each loading process is on, kept in a tiny file so a dead worker can be named.

Why: a DataLoader worker killed by a segfault in a decoder or by the OOM killer only leaves
"DataLoader worker (pid 1234) is killed by signal" in the main process -- no Python exception,
so no file name. Each process keeps ``inflight_<pid>.txt`` (one fixed-size record rewritten in
place with ``pwrite``: no open/close per sample) saying what it is loading; ``dead_worker_samples``
turns the pids in such an error message into the samples they were on.

The records are evidence, not output: ``InflightCleanupHook`` deletes them when the run ends
normally (``remove_inflight_records``), so only a run that died or hung leaves them behind.
"""
import glob
import os
import os.path as osp
import re
from typing import Optional

# Fixed size, so a shorter record overwrites a longer one completely; room for a batch decode,
# which names every file of its batch (batched_fetch.py).
RECORD_BYTES = 4096
_PIDS = re.compile(r'pid(?:\(s\))? ([\d, ]+)')


def inflight_path(directory: str, pid: int) -> str:
    return osp.join(directory, f'inflight_{pid}.txt')


class InflightRecord:
    """Per-process "currently loading" record under ``directory`` (None: record nothing)."""

    def __init__(self, directory: Optional[str]) -> None:
        self.directory = directory
        self._fd: Optional[int] = None
        self._pid: Optional[int] = None
        self._background: Optional[str] = None
        self._last = 'idle'

    def __getstate__(self) -> dict:
        return {'directory': self.directory, '_fd': None, '_pid': None, '_background': None,
                '_last': 'idle'}

    @property
    def background(self) -> Optional[str]:
        """What this process loads besides the sample ``begin`` names (the images its decode
        threads are on, ``batch_decoder.py``), written before it; None: nothing."""
        return self._background

    @background.setter
    def background(self, text: Optional[str]) -> None:
        self._background = text
        self._write(self._last)

    def _write(self, text: str) -> None:
        if self.directory is None:
            return
        if self._pid != os.getpid():  # first use in this process (or after a fork)
            os.makedirs(self.directory, exist_ok=True)
            self._fd = os.open(inflight_path(self.directory, os.getpid()),
                               os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            self._pid = os.getpid()
        self._last = text
        if self._background is not None:
            text = f'{self._background}; {text}'
        data = text.encode()[:RECORD_BYTES - 1] + b'\n'
        os.pwrite(self._fd, data.ljust(RECORD_BYTES, b' '), 0)

    def begin(self, description: str) -> None:
        """Record that this process starts loading ``description`` (a sample)."""
        self._write(f'loading {description}')

    def end(self) -> None:
        self._write('idle')


def remove_inflight_records(directory: str) -> list[str]:
    """Delete every ``inflight_<pid>.txt`` under ``directory``; return the paths deleted."""
    removed = []
    for path in sorted(glob.glob(osp.join(glob.escape(directory), 'inflight_*.txt'))):
        try:
            os.remove(path)
            removed.append(path)
        except FileNotFoundError:  # another rank sharing the directory was first
            pass
    return removed


def dead_worker_samples(message: str, directory: str) -> list[str]:
    """For each pid in a DataLoader worker-death ``message``: what that worker was loading."""
    match = _PIDS.search(message)
    if match is None:
        return []
    notes = []
    for pid in (p.strip() for p in match.group(1).split(',')):
        path = inflight_path(directory, int(pid)) if pid.isdigit() else ''
        if pid.isdigit() and osp.exists(path):
            with open(path) as f:
                notes.append(f'worker pid {pid} was {f.read().strip()}')
    return notes
