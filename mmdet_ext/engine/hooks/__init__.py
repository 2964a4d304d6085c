"""Runner hooks (registered in mmdet's HOOKS on import)."""
from .atomic_checkpoint_hook import AtomicCheckpointHook
from .cpu_checkpoint_load_hook import CpuCheckpointLoadHook
from .device_prefetch_hook import DevicePrefetcher, DevicePrefetchHook
from .exact_resume_hook import ExactResumeHook
from .hang_watchdog_hook import HangDetected, HangWatchdogHook
from .inflight_cleanup_hook import InflightCleanupHook
from .memory_watch_hook import MemoryWatchError, MemoryWatchHook
from .signal_checkpoint_hook import PREEMPTED_EXIT_CODE, PreemptedExit, SignalCheckpointHook
from .worker_defaults_hook import WorkerDefaultsHook

__all__ = [
    'AtomicCheckpointHook', 'CpuCheckpointLoadHook', 'DevicePrefetchHook', 'DevicePrefetcher',
    'ExactResumeHook', 'HangDetected', 'HangWatchdogHook', 'InflightCleanupHook',
    'MemoryWatchError', 'MemoryWatchHook', 'PREEMPTED_EXIT_CODE', 'PreemptedExit',
    'SignalCheckpointHook', 'WorkerDefaultsHook'
]
