"""Training-engine pieces: checkpoint I/O, memory watch and hooks."""
from .checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu
from .checkpoint_saving import AtomicLocalBackend, CheckpointSaveError, atomic_write_bytes
from .device_streams import CudaStreams, DeviceStreams, RecordingStreams, streams_for
from .hooks import (AtomicCheckpointHook, CpuCheckpointLoadHook, DevicePrefetcher,
                    DevicePrefetchHook, ExactResumeHook, MemoryWatchError, MemoryWatchHook,
                    WorkerDefaultsHook)

__all__ = [
    'AtomicCheckpointHook', 'AtomicLocalBackend', 'CheckpointLoadError', 'CheckpointSaveError',
    'CpuCheckpointLoadHook',
    'CudaStreams', 'DevicePrefetchHook', 'DevicePrefetcher', 'DeviceStreams', 'RecordingStreams',
    'streams_for',
    'ExactResumeHook', 'MemoryWatchError', 'MemoryWatchHook', 'atomic_write_bytes',
    'WorkerDefaultsHook', 'load_checkpoint_to_cpu'
]
