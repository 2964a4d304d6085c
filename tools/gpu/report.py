"""The harness's one table, and the machine/software lines printed above it."""
import os
import platform
import subprocess
from dataclasses import dataclass
from importlib import metadata

import torch

NO_CUDA = 'no CUDA device'
MIB = 2 ** 20


@dataclass
class Row:
    """One line of the table. ``time`` and ``memory`` carry their units; '-' when not measured."""

    measurement: str
    variant: str
    time: str = '-'
    memory: str = '-'
    notes: str = ''


def skipped(measurement: str, variant: str, reason: str) -> Row:
    return Row(measurement, variant, notes=f'skipped: {reason}')


def mib(num_bytes: float) -> str:
    return f'{num_bytes / MIB:,.1f} MiB'


def table(rows: list[Row]) -> str:
    """A markdown table, readable as plain text too."""
    return markdown_table(['measurement', 'variant', 'time', 'peak GPU memory', 'notes'],
                          [[r.measurement, r.variant, r.time, r.memory, r.notes] for r in rows],
                          numbers={2, 3})


def markdown_table(header: list[str], cells: list[list[str]], numbers: set[int]) -> str:
    """``cells`` under ``header`` as a markdown table padded to read as plain text; the columns
    ``numbers`` right-aligned."""
    widths = [max(len(c[i]) for c in [header, *cells]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return '| ' + ' | '.join(cell.rjust(w) if i in numbers else cell.ljust(w)
                                 for i, (cell, w) in enumerate(zip(row, widths))) + ' |'

    rule = '|' + '|'.join('-' * (w + 1) + ':' if i in numbers else '-' * (w + 2)
                          for i, w in enumerate(widths)) + '|'
    return '\n'.join([line(header), rule, *map(line, cells)])


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return 'absent'


def _cpu_name() -> str:
    try:
        with open('/proc/cpuinfo') as f:
            for text in f:
                if text.startswith('model name'):
                    return text.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _driver() -> str:
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                             capture_output=True, text=True, timeout=30, check=False).stdout.strip()
        return out.splitlines()[0] if out else 'unknown'
    except (OSError, subprocess.SubprocessError):
        return 'unknown'


def device_name() -> str:
    if not torch.cuda.is_available():
        return NO_CUDA
    props = torch.cuda.get_device_properties(0)
    return f'{props.name}, {props.total_memory / 2 ** 30:.0f} GiB, driver {_driver()}'


def environment_lines(mmcv_ops: str) -> list[str]:
    """Device and software, one fact a line: what a reader needs to compare two runs."""
    return [
        f'Device: {device_name()}',
        f'CPU: {_cpu_name()}, {os.cpu_count()} logical cores',
        (f'Python {platform.python_version()}, torch {torch.__version__} '
         f'(CUDA {torch.version.cuda or "none"}), mmengine {_version("mmengine")}, '
         f'mmcv {_version("mmcv")} ({mmcv_ops}), mmdet {_version("mmdet")}, '
         f'numpy {_version("numpy")}'),
    ]
