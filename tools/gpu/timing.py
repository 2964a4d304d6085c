"""Wall-clock timing and GPU memory counters that mean the same on CPU and CUDA."""
import gc
import statistics
import time
from collections.abc import Callable

import torch


def sync(device: str) -> None:
    """CUDA work is asynchronous: a timer read without this measures only the launch."""
    if device == 'cuda':
        torch.cuda.synchronize()


def median_seconds(fn: Callable[[], object], device: str, repeat: int, warmup: int) -> float:
    """Median wall time of ``fn`` over ``repeat`` runs after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def release_memory() -> None:
    """Between measurements: what one left cached must not count against the next."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def peak_bytes(fn: Callable[[], object]) -> int:
    """GPU memory ``fn`` allocates at its peak, above what was allocated before it ran."""
    release_memory()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    result = fn()
    torch.cuda.synchronize()
    del result
    return torch.cuda.max_memory_allocated() - before
