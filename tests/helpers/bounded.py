"""Run a test's statements in a child process under a CPU-time and an address-space limit.

Why: a test named for a cost bound ("the work follows the boxes, not the image") that checks
only the result passes while the bound is lost; the loss shows up as a CI run that hangs for an
hour or runs out of memory. Under these limits the child is killed (SIGXCPU) or its allocation
refused, and the test fails. Each limit is orders of magnitude above the bounded cost and far
below the unbounded one, so a failure means the bound was lost, not that the machine was busy
(CPU time, not wall time, is limited).
"""
import os
import subprocess
import sys
import textwrap

# The child's setup: the extension imported, then the limits set on top of what that took.
_PREAMBLE = '''
import resource
import numpy as np
import torch
import mmdet_ext
from mmdet_ext import ops
OPS = torch.ops.mmdet_ext
used = resource.getrusage(resource.RUSAGE_SELF)
cpu = int(used.ru_utime + used.ru_stime) + {cpu_seconds}
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
with open('/proc/self/status') as status:
    vm_kib = next(int(line.split()[1]) for line in status if line.startswith('VmSize:'))
space = vm_kib * 1024 + {extra_address_space}
resource.setrlimit(resource.RLIMIT_AS, (space, space))
'''


def run_bounded(statements: str, cpu_seconds: int, extra_address_space: int) -> None:
    """Run ``statements`` (with ``np``, ``torch``, ``ops`` and ``OPS`` defined) in a child that
    may use ``cpu_seconds`` of CPU and ``extra_address_space`` bytes of address space more than
    importing took; fail the test if it does not finish cleanly."""
    code = _PREAMBLE.format(cpu_seconds=cpu_seconds, extra_address_space=extra_address_space)
    code += textwrap.dedent(statements)
    result = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                            env={'OMP_NUM_THREADS': '1', **os.environ})
    assert result.returncode == 0, (
        f'over {cpu_seconds} CPU s or {extra_address_space >> 20} MiB more address space '
        f'(exit {result.returncode}): {result.stderr[-2000:]}')
