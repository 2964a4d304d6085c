"""Builds mmdet_ext and its native extension mmdet_ext._C.

    pip install --no-build-isolation -e .      (tools/install_deps.sh does this for you)

OpenCV and libjpeg come from the system (Debian's libopencv-dev and libjpeg62-turbo-dev, the
libjpeg OpenCV links), found with pkg-config. CUDA sources (csrc/**/*.cu) are compiled only when
building for CUDA: FORCE_CUDA=1, or a CUDA build of torch with nvcc available.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
import torch

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / 'csrc'
OPENCV_MODULES = ('opencv_core', 'opencv_imgproc', 'opencv_imgcodecs')


def load_build_hash_module():
    spec = importlib.util.spec_from_file_location('_build_hash', ROOT / 'mmdet_ext' / '_build_hash.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


APT_PACKAGES = {'opencv4': 'libopencv-dev', 'libjpeg': 'libjpeg62-turbo-dev'}


def pkg_config(*args: str, package: str = 'opencv4') -> list[str]:
    try:
        out = subprocess.run(['pkg-config', *args, package], check=True, capture_output=True,
                             text=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError) as err:
        sys.exit(f'mmdet_ext needs {package} for C++ found by pkg-config ({err}). '
                 f'On Debian/Ubuntu: apt-get install {APT_PACKAGES[package]} pkg-config')
    return out.split()


def native_build_flags() -> dict:
    include_dirs = [flag[2:] for flag in pkg_config('--cflags-only-I')]
    library_dirs = [flag[2:] for flag in pkg_config('--libs-only-L')]
    available = {flag[2:] for flag in pkg_config('--libs-only-l')}
    missing = [m for m in OPENCV_MODULES if m not in available]
    if missing:
        sys.exit(f'OpenCV found by pkg-config lacks {missing}; install libopencv-dev')
    # libjpeg(-turbo): decode_image decodes JPEGs with it directly (csrc/io/jpeg_decoder.cpp)
    include_dirs += [flag[2:] for flag in pkg_config('--cflags-only-I', package='libjpeg')]
    library_dirs += [flag[2:] for flag in pkg_config('--libs-only-L', package='libjpeg')]
    libraries = [*OPENCV_MODULES,
                 *(flag[2:] for flag in pkg_config('--libs-only-l', package='libjpeg'))]
    return dict(include_dirs=include_dirs, library_dirs=library_dirs, libraries=libraries)


def building_for_cuda() -> bool:
    if os.environ.get('FORCE_CUDA') == '1':
        if torch.version.cuda is None:
            sys.exit('FORCE_CUDA=1 but this torch is a CPU build; install a CUDA torch first')
        return True
    return torch.version.cuda is not None and CUDA_HOME is not None


def make_extension():
    build_hash = load_build_hash_module()
    sources = build_hash.native_sources(CSRC)
    cpp_sources = [str(p.relative_to(ROOT)) for p in sources if p.suffix == '.cpp']
    cuda_sources = [str(p.relative_to(ROOT)) for p in sources if p.suffix == '.cu']
    with_cuda = building_for_cuda()
    native = native_build_flags()
    macros = [('MMDET_EXT_SOURCE_HASH', f'"{build_hash.source_hash(CSRC)}"')]
    cxx_flags = ['-O3', '-std=c++20', '-fvisibility=hidden']
    libjpeg_version = pkg_config('--modversion', package='libjpeg')[0]
    print(f'[mmdet_ext] torch {torch.__version__}, OpenCV {pkg_config("--modversion")[0]} '
          f'({", ".join(OPENCV_MODULES)}), libjpeg {libjpeg_version}, {len(cpp_sources)} C++ '
          f'sources, {len(cuda_sources)} CUDA sources, CUDA build: {with_cuda} '
          f'(torch.version.cuda={torch.version.cuda}, CUDA_HOME={CUDA_HOME})')
    if with_cuda:
        macros.append(('MMDET_EXT_WITH_CUDA', None))
        return CUDAExtension('mmdet_ext._C', cpp_sources + cuda_sources, define_macros=macros,
                             extra_compile_args={'cxx': cxx_flags, 'nvcc': ['-O3']}, **native)
    return CppExtension('mmdet_ext._C', cpp_sources, define_macros=macros,
                        extra_compile_args={'cxx': cxx_flags}, **native)


def read_version() -> str:
    namespace: dict = {}
    exec((ROOT / 'mmdet_ext' / 'version.py').read_text(), namespace)
    return namespace['__version__']


setup(
    name='mmdet_ext',
    version=read_version(),
    description='Leak-free, copy-safe data and checkpoint layer for MMDetection training',
    packages=find_packages(include=['mmdet_ext', 'mmdet_ext.*']),
    ext_modules=[make_extension()],
    cmdclass={'build_ext': BuildExtension},
    python_requires='>=3.10',
    zip_safe=False,
)
