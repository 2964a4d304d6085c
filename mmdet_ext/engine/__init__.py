"""Training-engine pieces: checkpoint I/O, memory watch and hooks."""
from .checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu
from .checkpoint_saving import AtomicLocalBackend, atomic_write_bytes
from .hooks import (AtomicCheckpointHook, CpuCheckpointLoadHook, ExactResumeHook,
                    MemoryWatchError, MemoryWatchHook, WorkerDefaultsHook)

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'CheckpointLoadError', 'CpuCheckpointLoadHook',
    'ExactResumeHook', 'MemoryWatchError', 'MemoryWatchHook', 'atomic_write_bytes',
    'WorkerDefaultsHook', 'load_checkpoint_to_cpu'
]
