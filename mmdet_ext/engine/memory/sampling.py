"""Reading memory: the main process, every DataLoader worker (by dataloader), CUDA.

All figures are MiB. USS and PSS come from ``/proc/PID/smaps_rollup`` through psutil's
``memory_full_info()``; anonymous RSS is ``rss - shared`` (``RssAnon``), the memory a process
allocated itself, which copy-on-write does not change.
"""
import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import psutil
import torch

MIB = float(1 << 20)


@dataclass(frozen=True)
class ProcessMemory:
    """One reading of one process, in MiB.

    Attributes:
        pid: process id.
        rss: resident set size, shared pages included (what ``top``/``ps`` show).
        uss: unique set size: pages only this process maps (freed if it exits).
        pss: proportional set size: shared pages divided among their sharers; summing PSS over
            processes gives their true joint footprint.
        anon: anonymous resident memory (heap, arenas, tensors the process allocated).
    """

    pid: int
    rss: float
    uss: float
    pss: float
    anon: float


def read_process_memory(proc: psutil.Process) -> Optional[ProcessMemory]:
    """Read one process; ``None`` if it exited meanwhile or cannot be read."""
    try:
        info = proc.memory_full_info()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    return ProcessMemory(pid=proc.pid, rss=info.rss / MIB, uss=info.uss / MIB,
                         pss=info.pss / MIB, anon=(info.rss - info.shared) / MIB)


def _persistent_workers(loaders: Mapping[str, Any]) -> Dict[int, str]:
    """pid -> ``{name}.w{worker_id}`` for loaders that keep their iterator (persistent workers).

    Only a persistent DataLoader keeps its iterator (``_iterator``), whose ``_workers`` are in
    worker-id order.
    """
    known = {}
    for name, loader in loaders.items():
        iterator = getattr(loader, '_iterator', None)
        for worker_id, worker in enumerate(getattr(iterator, '_workers', None) or []):
            if worker.pid is not None:
                known[worker.pid] = f'{name}.w{worker_id}'
    return known


def label_children(loaders: Mapping[str, Any], active: Optional[str] = None,
                   main: Optional[psutil.Process] = None) -> Dict[str, psutil.Process]:
    """Name every live child of the main process.

    Workers of persistent dataloaders are named exactly from their iterator. The iterator of a
    non-persistent one is a local of the loop that runs it, out of reach; its workers are the
    newest children, started together when the loop began: the ``num_workers`` newest children
    not named otherwise are given to the ``active`` dataloader, in creation (= worker-id) order.

    Args:
        loaders: name -> DataLoader (e.g. ``{'train': ..., 'val': ...}``).
        active: the name of the dataloader being iterated now, if any.
        main: the main process (this one by default).

    Returns:
        label -> process: ``{name}.w{worker_id}`` for DataLoader workers, ``child.{pid}`` for
        any other child (a ``Manager``, a compile pool...).
    """
    main = main or psutil.Process()
    try:
        children = main.children(recursive=False)
    except psutil.NoSuchProcess:
        return {}
    known = _persistent_workers(loaders)
    labels = {known[c.pid]: c for c in children if c.pid in known}
    unnamed = []
    for child in children:
        if child.pid not in known:
            try:
                unnamed.append((child.create_time(), child.pid, child))
            except psutil.NoSuchProcess:
                continue
    unnamed.sort(key=lambda t: t[:2])
    loader = loaders.get(active) if active is not None else None
    num_workers = getattr(loader, 'num_workers', 0) or 0
    if num_workers and not any(label.startswith(f'{active}.w') for label in labels):
        newest = unnamed[-num_workers:]
        unnamed = unnamed[:-num_workers]
        labels.update({f'{active}.w{i}': child for i, (_, _, child) in enumerate(newest)})
    labels.update({f'child.{pid}': child for _, pid, child in unnamed})
    return labels


def read_cuda_memory() -> Optional[Dict[str, float]]:
    """CUDA caching-allocator figures of the current device in MiB, if CUDA is in use.

    Returns:
        ``allocated`` (held by live tensors), ``reserved`` (held by the allocator, what
        ``nvidia-smi`` shows, minus the context) and ``peak`` (max allocated since start), or
        ``None`` when CUDA is unavailable or was never initialised by this process.
    """
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    return dict(allocated=torch.cuda.memory_allocated() / MIB,
                reserved=torch.cuda.memory_reserved() / MIB,
                peak=torch.cuda.max_memory_allocated() / MIB)


def workers_will_fork(loader: Any) -> bool:
    """Whether iterating ``loader`` now starts DataLoader worker processes.

    A loader without workers never forks; one with non-persistent workers forks at every
    ``iter()``; one with persistent workers only at the first (afterwards it keeps its
    ``_iterator`` and resets it).
    """
    if not getattr(loader, 'num_workers', 0):
        return False
    if not getattr(loader, 'persistent_workers', False):
        return True
    return getattr(loader, '_iterator', None) is None


def release_free_heap() -> bool:
    """Give the main process's free malloc memory back to the OS (glibc ``malloc_trim(0)``).

    Called just before workers fork: a forked worker inherits the parent's free heap pages as
    resident memory, and a leak in the worker would fill those first, invisible in its
    anonymous RSS. Returns False where there is no glibc.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6')
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim(0)
    return True


def memory_limit_mib() -> float:
    """Memory this job may use, in MiB: physical RAM, or a smaller cgroup (container) limit."""
    limit = psutil.virtual_memory().total
    for path in ('/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/memory/memory.limit_in_bytes'):
        try:
            with open(path) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit():
            limit = min(limit, int(value))
    return limit / MIB
