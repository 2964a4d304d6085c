"""Each case in its own process, with a timeout: a hang or a crash is a result, not a stuck CI.

The parent imports torch, mmdet and the plugin once; each case runs in a ``fork`` of it (cheap:
no re-import), in its own process group so that a hung case and anything it started are killed
together. The child writes its result as json to a pipe; a child that dies by a signal or exits
without a result is a crash, one still running at the deadline a hang. A child may grow its address
space by ``MEMORY_HEADROOM`` only (a loader reading ``/dev/zero`` to the end fails with
``MemoryError`` instead of taking the machine's memory).
"""
import json
import os
import resource
import signal
import time
from typing import Callable

MEMORY_HEADROOM = 2 << 30  # bytes of address space a case may add to the forked parent's


def _limit_memory() -> None:
    with open('/proc/self/status') as status:
        vm_kib = next(int(line.split()[1]) for line in status if line.startswith('VmSize:'))
    limit = vm_kib * 1024 + MEMORY_HEADROOM
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_isolated(job: Callable[[], dict], timeout: float) -> dict:
    """``job()``'s result, or ``{'status': 'hang' | 'crash', ...}``."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(read_fd)
        os.setpgid(0, 0)
        try:
            _limit_memory()
            payload = json.dumps(job()).encode()
        except BaseException as err:  # noqa: BLE001 -- reported to the parent
            payload = json.dumps({'status': 'crash',
                                  'message': f'{type(err).__name__}: {err}'}).encode()
        with os.fdopen(write_fd, 'wb') as pipe:
            pipe.write(payload)
        os._exit(0)
    os.close(write_fd)
    os.set_blocking(read_fd, False)
    chunks, deadline, status = [], time.monotonic() + timeout, None
    while True:
        try:
            chunk = os.read(read_fd, 1 << 16)
            if chunk:
                chunks.append(chunk)
        except BlockingIOError:
            chunk = None
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            with_group_killed(pid)
            os.waitpid(pid, 0)
            os.close(read_fd)
            return {'status': 'hang', 'message': f'no result after {timeout:g} s'}
        if chunk is None:
            time.sleep(0.005)
    os.set_blocking(read_fd, True)
    while chunk := os.read(read_fd, 1 << 16):  # the rest, up to end of file
        chunks.append(chunk)
    os.close(read_fd)
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        return {'status': 'crash', 'message': f'killed by {name}'}
    data = b''.join(chunks)
    if not data:
        return {'status': 'crash', 'message': f'exit status {os.WEXITSTATUS(status)}, no result'}
    return json.loads(data)


def with_group_killed(pid: int) -> None:
    """SIGKILL the case's process group (the case and every process it started)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
