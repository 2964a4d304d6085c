"""Memory watch: sample every process of a training job, judge leak vs sawtooth, plot it.

See ``docs/memory_watch.md`` for how to read the verdicts and memory.png.
"""
from .autograd_check import KeptGraphDetector
from .plot import plot_record
from .record import CUDA, MAIN, TOTAL, MemoryRecord
from .sampling import (ProcessMemory, label_children, memory_limit_mib, read_process_memory,
                       release_free_heap, workers_will_fork)
from .verdict import (FLAT, LEAK, SAWTOOTH, UNKNOWN, Verdict, VerdictThresholds, judge_series,
                      theil_sen_slope)

__all__ = [
    'CUDA', 'FLAT', 'LEAK', 'MAIN', 'SAWTOOTH', 'TOTAL', 'UNKNOWN', 'KeptGraphDetector',
    'MemoryRecord', 'ProcessMemory', 'Verdict', 'VerdictThresholds', 'judge_series',
    'label_children', 'memory_limit_mib', 'plot_record', 'read_process_memory',
    'release_free_heap', 'theil_sen_slope', 'workers_will_fork'
]
