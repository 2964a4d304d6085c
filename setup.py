"""Builds mmdet_ext and its native extension mmdet_ext._C.

    pip install --no-build-isolation -e .      (tools/install_deps.sh does this for you)

OpenCV and libjpeg come from the system (Debian's libopencv-dev and libjpeg62-turbo-dev, the
libjpeg OpenCV links), found with pkg-config. Both are optional: without them the extension is
built all the same, and the ops that need them (decode_image, warp_image) raise an error saying
what to install. MMDET_EXT_WITH_OPENCV / MMDET_EXT_WITH_LIBJPEG: 0 builds without the library even
when it is there, 1 fails the build when it is not, unset uses it when found.

CUDA sources (csrc/**/*.cu) are compiled only when building for CUDA: FORCE_CUDA=1, or a CUDA
build of torch with nvcc available. TORCH_CUDA_ARCH_LIST picks the GPU architectures (torch's
default: those of the GPUs it sees). docs/build.md has the details.
"""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from setuptools import find_packages, setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
import torch

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / 'csrc'
OPENCV_MODULES = ('opencv_core', 'opencv_imgproc', 'opencv_imgcodecs')
APT_PACKAGES = {'opencv4': 'libopencv-dev', 'libjpeg': 'libjpeg62-turbo-dev'}
# Sources that need optional libraries: compiled only when all of theirs were found. The files that
# register the ops built on them (io/decode_image.cpp, transforms/warp_image.cpp) register a kernel
# that raises instead (csrc/optional_libraries.h); the macros below tell them which.
SOURCES_NEEDING = {
    'csrc/io/image_decoder.cpp': ('opencv4', 'libjpeg'),
    'csrc/io/jpeg_decoder.cpp': ('opencv4', 'libjpeg'),
    'csrc/io/exif_orientation.cpp': ('opencv4', 'libjpeg'),
}
# Each library's environment switch, and the C++ macro defined when it is built with.
SWITCHES = {'opencv4': 'MMDET_EXT_WITH_OPENCV', 'libjpeg': 'MMDET_EXT_WITH_LIBJPEG'}
# nvcc: --fmad=false because the CUDA mask kernels must be bit-exact with the CPU ones, and
# contracting a*b+c into one FMA rounds once instead of twice.
NVCC_FLAGS = ['-O3', '--fmad=false', '-std=c++20']
# -O3 unless CFLAGS sets the optimisation level (the sanitizer builds take -O1, the test of a build
# without OpenCV -O0): CFLAGS come first on the command line, so an -O here would override them.
CXX_FLAGS = ['-std=c++20', '-fvisibility=hidden']
if not any(flag.startswith('-O') for flag in os.environ.get('CFLAGS', '').split()):
    CXX_FLAGS.insert(0, '-O3')


def load_build_hash_module():
    spec = importlib.util.spec_from_file_location('_build_hash', ROOT / 'mmdet_ext' / '_build_hash.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pkg_config(package: str, *args: str) -> Optional[list[str]]:
    """pkg-config's answer for `package`, split; None when pkg-config or the package is missing."""
    try:
        out = subprocess.run(['pkg-config', *args, package], check=True, capture_output=True,
                             text=True).stdout
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None
    return out.split()


def find_library(package: str) -> tuple[Optional[dict], str]:
    """The build flags and version of a pkg-config `package`, or None and why it is not used.

    Its switch (SWITCHES) set to 0 leaves it out; set to 1, a missing library fails the build.
    """
    switch = os.environ.get(SWITCHES[package], '')
    if switch == '0':
        return None, f'off ({SWITCHES[package]}=0)'
    version = pkg_config(package, '--modversion')
    if version is None:
        why = f'not found by pkg-config (apt-get install {APT_PACKAGES[package]} pkg-config)'
    else:
        flags = dict(include_dirs=[f[2:] for f in pkg_config(package, '--cflags-only-I')],
                     library_dirs=[f[2:] for f in pkg_config(package, '--libs-only-L')],
                     libraries=[f[2:] for f in pkg_config(package, '--libs-only-l')])
        if package != 'opencv4':
            return flags, version[0]
        missing = [m for m in OPENCV_MODULES if m not in flags['libraries']]
        if not missing:
            flags['libraries'] = list(OPENCV_MODULES)
            return flags, version[0]
        why = f'{version[0]} lacks {missing} (apt-get install {APT_PACKAGES[package]})'
    if switch == '1':
        sys.exit(f'mmdet_ext: {SWITCHES[package]}=1 but {package} is {why}')
    return None, why


def optional_libraries() -> tuple[dict, dict]:
    """The optional libraries to build with ({package: flags}) and a word on each for the log.

    libjpeg only with OpenCV: the strict JPEG decoder writes into OpenCV's cv::Mat.
    """
    found, notes = {}, {}
    for package in ('opencv4', 'libjpeg'):
        flags, notes[package] = find_library(package)
        if flags is not None:
            found[package] = flags
    if 'libjpeg' in found and 'opencv4' not in found:
        del found['libjpeg']
        notes['libjpeg'] += ', unused without OpenCV'
    return found, notes


def building_for_cuda() -> bool:
    if os.environ.get('FORCE_CUDA') == '1':
        if torch.version.cuda is None:
            sys.exit('FORCE_CUDA=1 but this torch is a CPU build; install a CUDA torch first')
        return True
    return torch.version.cuda is not None and CUDA_HOME is not None


def make_extension():
    build_hash = load_build_hash_module()
    libraries, notes = optional_libraries()
    sources = [str(p.relative_to(ROOT)) for p in build_hash.native_sources(CSRC)]
    moved = [s for s in SOURCES_NEEDING if s not in sources]
    if moved:
        sys.exit(f'setup.py: SOURCES_NEEDING names {moved}, which are gone; update it')
    sources = [s for s in sources if set(SOURCES_NEEDING.get(s, ())) <= libraries.keys()]
    cpp_sources = [s for s in sources if s.endswith('.cpp')]
    cuda_sources = [s for s in sources if s.endswith('.cu')]
    with_cuda = building_for_cuda()
    macros = [('MMDET_EXT_SOURCE_HASH', f'"{build_hash.source_hash(CSRC)}"')]
    macros += [(SWITCHES[package], None) for package in libraries]
    # csrc/ on the include path: sources include each other's headers as "masks/rle.h", wherever
    # they sit (a kernel in csrc/masks/cuda/ as well).
    native = dict(include_dirs=[str(CSRC)], library_dirs=[], libraries=[])
    for flags in libraries.values():
        for key in native:
            native[key] += flags[key]
    cuda = (f'CUDA {torch.version.cuda} (CUDA_HOME={CUDA_HOME}, TORCH_CUDA_ARCH_LIST='
            f'{os.environ.get("TORCH_CUDA_ARCH_LIST", "unset")})' if with_cuda else 'CPU only')
    print(f'[mmdet_ext] building mmdet_ext._C: torch {torch.__version__}, {cuda}; '
          f'OpenCV: {notes["opencv4"]}; libjpeg: {notes["libjpeg"]}; {len(cpp_sources)} C++ + '
          f'{len(cuda_sources)} CUDA sources')
    if with_cuda:
        macros.append(('MMDET_EXT_WITH_CUDA', None))
        return CUDAExtension('mmdet_ext._C', cpp_sources + cuda_sources, define_macros=macros,
                             extra_compile_args={'cxx': CXX_FLAGS, 'nvcc': NVCC_FLAGS}, **native)
    return CppExtension('mmdet_ext._C', cpp_sources, define_macros=macros,
                        extra_compile_args={'cxx': CXX_FLAGS}, **native)


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
