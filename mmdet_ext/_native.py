"""Loads the compiled extension ``mmdet_ext._C`` and refuses a missing or stale build.

Every module that needs the extension imports it from here (``from .._native import _C``), so
it is loaded and checked exactly once, whatever is imported first.
"""
import json
from pathlib import Path
from types import ModuleType
from typing import Any, Optional, Union

from ._build_hash import source_hash

REBUILD_HINT = ('Rebuild it from the repository root with `pip install --no-build-isolation -e .` '
                '(or `bash tools/install_deps.sh`).')
# Written by setup.py beside the extension: the torch (and CUDA) it was compiled against.
BUILD_CONFIG = Path(__file__).resolve().parent / '_build_config.json'


def read_build_config() -> Optional[dict[str, Any]]:
    """setup.py's record of what the extension was built against; None for builds without one."""
    if not BUILD_CONFIG.is_file():
        return None
    return json.loads(BUILD_CONFIG.read_text())


def _minor_version(version: str) -> str:
    return '.'.join(version.split('+')[0].split('.')[:2])


def check_torch_matches_build(torch_version: str, torch_cuda: Optional[str]) -> None:
    """Refuse, naming both, a torch the extension cannot load against, before it fails to link.

    torch's C++ ABI changes between minor versions: the extension of one fails on another with
    an undefined-symbol error that names neither. A CUDA build needs torch's CUDA libraries.
    """
    built = read_build_config()
    if built is None:
        return
    fix = ('Install the mmdet_ext wheel built for the torch you run, or rebuild it against '
           'that torch (`pip install --no-build-isolation .`, docs/packaging.md).')
    if _minor_version(built['torch_version']) != _minor_version(torch_version):
        raise ImportError(f'mmdet_ext: the extension in {BUILD_CONFIG.parent} was compiled against '
                          f'torch {built["torch_version"]}, but torch {torch_version} is running; '
                          f'torch\'s C++ ABI differs between minor versions. {fix}')
    if built['with_cuda'] and torch_cuda is None:
        raise ImportError(f'mmdet_ext: the extension in {BUILD_CONFIG.parent} was compiled with '
                          f'CUDA {built["torch_cuda"]} kernels, but torch {torch_version} is a '
                          f'CPU-only build. {fix}')


def load_extension() -> ModuleType:
    """Import ``mmdet_ext._C`` (which registers ``torch.ops.mmdet_ext``) and check it is current.

    The check compares the source hash baked in at build time with the ``csrc/`` tree next to the
    package, when there is one (a source checkout): an extension compiled from older sources would
    otherwise run silently with old behaviour.
    """
    import torch  # the extension links against libtorch; load it first

    check_torch_matches_build(torch.__version__, torch.version.cuda)
    try:
        from . import _C
    except ImportError as err:
        raise ImportError(f'mmdet_ext: the compiled extension mmdet_ext._C is missing or was '
                          f'built against another torch/OpenCV ({err}). {REBUILD_HINT}') from err

    csrc_dir = Path(__file__).resolve().parent.parent / 'csrc'
    if csrc_dir.is_dir() and _C.source_hash() != source_hash(csrc_dir):
        raise ImportError(f'mmdet_ext: the compiled extension {_C.__file__} is stale: the sources '
                          f'in {csrc_dir} changed after it was built. {REBUILD_HINT}')
    return _C


_C = load_extension()


def build_info() -> dict[str, Optional[Union[bool, str]]]:
    """What the loaded extension was built with (``setup.py`` prints the same when building).

    Keys: ``with_cuda`` (bool: CUDA kernels compiled in), ``cuda_version`` (the CUDA runtime
    headers compiled against, e.g. ``'13.0'``; None without CUDA), ``torch_version`` (the torch
    headers compiled against, e.g. ``'2.13.0'``), ``opencv_version`` (e.g. ``'4.6.0'``; None when
    built without OpenCV, and then ``decode_image`` and ``warp_image`` raise
    ``NotImplementedError``), ``libjpeg`` (libjpeg-turbo's version, e.g. ``'2.1.5'``; None when
    built without it, and then ``decode_image`` raises), ``rapidjson`` (True when the native
    json reader of the annotation store is built in; else stores are built by ``json.loads``),
    ``nvjpeg`` (True when a CUDA build has the nvJPEG decode of ``decode_on='device'``; the
    library itself is loaded when first used, ``mmdet_ext.ops.nvjpeg_problem``),
    ``source_hash`` (SHA-256 of the
    ``csrc/`` sources). docs/build.md says how to get the optional parts.
    """
    return _C.build_info()
