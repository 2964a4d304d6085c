"""Whether setup.py compiles the CUDA sources, and why: one answer for setup.py, tools/gpu/run.sh
and the tests.

Kept free of imports from the rest of the package: setup.py loads this file by path before the
extension exists. ``python3 mmdet_ext/_build_choice.py`` prints the answer for this machine.
"""
import re
import subprocess
from pathlib import Path
from typing import Optional


def nvcc_release(nvcc: Path) -> Optional[str]:
    """The CUDA release ``nvcc --version`` reports (``'13.0'``), None where it cannot tell."""
    try:
        out = subprocess.run([str(nvcc), '--version'], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'release (\d+\.\d+)', out)
    return match.group(1) if match else None


def cuda_build(torch_cuda: Optional[str], cuda_home: Optional[str],
               force_cuda: Optional[str]) -> tuple[bool, str]:
    """(build the CUDA sources?, why), from ``torch.version.cuda``, torch's ``CUDA_HOME`` and
    the ``FORCE_CUDA`` environment variable.

    A CUDA build needs a CUDA torch and nvcc of its CUDA major version in ``CUDA_HOME/bin``
    (the registry's torch 2.1.2 is CUDA 12.1; a machine's nvcc may be 13): torch resolves
    ``CUDA_HOME`` to ``/usr/local/cuda`` whenever that exists, also on runtime-only images
    without a compiler. ``FORCE_CUDA=1`` fails (SystemExit) where either is missing,
    ``FORCE_CUDA=0`` asks for a CPU-only build, unset (or empty) decides from what is there.
    """
    if force_cuda not in (None, '', '0', '1'):
        raise SystemExit(f'FORCE_CUDA must be 0 or 1 (or unset), got {force_cuda!r}')
    if force_cuda == '0':
        return False, 'CPU only: FORCE_CUDA=0'
    if torch_cuda is None:
        why = 'torch is a CPU build'
    elif cuda_home is None:
        why = 'no CUDA toolkit found (CUDA_HOME unset, no nvcc on PATH, no /usr/local/cuda)'
    elif not (Path(cuda_home) / 'bin' / 'nvcc').is_file():
        why = f'CUDA_HOME={cuda_home} has no bin/nvcc (a runtime-only CUDA image?)'
    elif (release := nvcc_release(Path(cuda_home) / 'bin' / 'nvcc')) is not None and (
            release.split('.')[0] != torch_cuda.split('.')[0]):
        # torch's BuildExtension refuses it too, with a message that does not say what to do.
        why = (f'nvcc in {cuda_home} is CUDA {release}, torch was built with CUDA {torch_cuda} '
               '(torch compiles CUDA code only with its own major version)')
    else:
        forced = ', FORCE_CUDA=1' if force_cuda == '1' else ''
        return True, f'CUDA {torch_cuda} (nvcc in {cuda_home}{forced})'
    if force_cuda == '1':
        raise SystemExit(f'FORCE_CUDA=1 but {why}')
    return False, f'CPU only: {why}'


if __name__ == '__main__':
    import os

    import torch
    from torch.utils.cpp_extension import CUDA_HOME

    print(cuda_build(torch.version.cuda, CUDA_HOME, os.environ.get('FORCE_CUDA'))[1])
