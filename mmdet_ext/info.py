"""What this installation of mmdet_ext is: ``python -m mmdet_ext.info``.

Prints the version and location, the torch the extension was compiled against next to the one
running (importing mmdet_ext refuses another minor version with a message naming both), the CUDA
kernels and architectures compiled in, the optional parts (OpenCV, libjpeg) built with, and the
distribution (and family) that installed mmengine, mmcv and mmdet: ``mmcv`` under OpenMMLab,
``onedl-mmcv`` under the fork, both installing the import name ``mmcv``.
"""
import importlib.util
import sys
from pathlib import Path

import torch

from . import __version__
from ._framework import IMPORT_NAMES, installed_providers
from ._native import build_info, read_build_config


def _installed(import_name: str) -> str:
    """The version and distribution behind ``import_name``, whichever family installed it."""
    providers = installed_providers()[import_name]
    if providers:
        return ', '.join(f'{p.version} ({p.distribution}'
                         f'{f", {p.family}" if p.family else ", unsupported"})'
                         for p in providers)
    spec = importlib.util.find_spec(import_name)
    if spec is None or spec.origin is None:
        return 'not installed'
    return f'no distribution metadata ({spec.origin})'


def collect_env() -> dict[str, str]:
    """The facts above as ``{name: text}``, in the order printed (mmengine's env report's form)."""
    info = build_info()
    built = read_build_config() or {}
    cuda = (f'CUDA {info["cuda_version"]}, '
            f'{" ".join(built.get("cuda_arch_flags") or []) or "architectures not recorded"}'
            if info['with_cuda'] else 'no (CPU kernels only; GPU tensors take torch\'s path)')
    missing = 'not built (decode_image, warp_image raise NotImplementedError; docs/build.md)'
    env = {
        'mmdet_ext': f'{__version__} ({Path(__file__).resolve().parent})',
        'torch (built against)': built.get('torch_version', info['torch_version']),
        'torch (running)': f'{torch.__version__} (CUDA {torch.version.cuda})',
        'CUDA kernels': cuda,
        'OpenCV': info['opencv_version'] or missing,
        'libjpeg': info['libjpeg'] or missing,
        'rapidjson': ('yes (native json reader for the annotation store)' if info.get('rapidjson')
                      else 'not built (stores are built by json.loads; docs/annotation_store.md)'),
        'nvJPEG': ('built (loaded when first used)' if info.get('nvjpeg')
                   else 'not built (decode_on=\'device\' decodes on the CPU)'),
        'source hash': info['source_hash'],
    }
    env.update({name: _installed(name) for name in IMPORT_NAMES})
    env['python'] = sys.version.split()[0]
    return env


def main() -> None:
    width = max(map(len, collect_env()))
    for name, value in collect_env().items():
        print(f'{name:<{width}}  {value}')


if __name__ == '__main__':
    main()
