"""Builds mmdet_ext and its native extension mmdet_ext._C.

    pip install --no-build-isolation -e .      (tools/install_deps.sh does this for you)
    python3 -m build --no-isolation            (an sdist and a wheel, in dist/; docs/packaging.md)

Always against the torch already installed (no build isolation): the extension is tied to the
torch it was compiled with, and the wheel requires that torch's minor version.

OpenCV and libjpeg come from the system (Debian's libopencv-dev and libjpeg62-turbo-dev, the
libjpeg OpenCV links), found with pkg-config. Both are optional: without them the extension is
built all the same, and the ops that need them (decode_image, warp_image) raise an error saying
what to install. MMDET_EXT_WITH_OPENCV / MMDET_EXT_WITH_LIBJPEG: 0 builds without the library even
when it is there, 1 fails the build when it is not, unset uses it when found.

CUDA sources (csrc/**/*.cu) are compiled only when building for CUDA: a CUDA build of torch and
nvcc in CUDA_HOME/bin (mmdet_ext/_build_choice.py). FORCE_CUDA=1 fails the build where either is
missing, FORCE_CUDA=0 builds for the CPU only. TORCH_CUDA_ARCH_LIST picks the GPU architectures
(torch's default: those of the GPUs it sees). docs/build.md has the details.
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from setuptools import find_packages, setup

try:
    import torch
    from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
except ModuleNotFoundError:
    sys.exit('mmdet_ext builds against the torch it will run with, and none is installed here. '
             'Install torch first, then build without isolation: `pip install '
             '--no-build-isolation ...` or `python3 -m build --no-isolation`.')

ROOT = Path(__file__).resolve().parent
CSRC = ROOT / 'csrc'
OPENCV_MODULES = ('opencv_core', 'opencv_imgproc', 'opencv_imgcodecs')
APT_PACKAGES = {'opencv4': 'libopencv-dev', 'libjpeg': 'libjpeg62-turbo-dev',
                'RapidJSON': 'rapidjson-dev'}
# Sources that need optional libraries: compiled only when all of theirs were found. The kernels of
# the ops built on them (io/cpu/decode_image_kernel.cpp, io/cpu/decode_images_into_kernel.cpp,
# transforms/cpu/warp_image_kernel.cpp) register one that raises instead
# (csrc/optional_libraries.h); the macros below tell them which.
SOURCES_NEEDING = {
    'csrc/io/image_decoder.cpp': ('opencv4', 'libjpeg'),
    'csrc/io/jpeg_decoder.cpp': ('opencv4', 'libjpeg'),
    'csrc/io/decode_one_planar.cpp': ('opencv4', 'libjpeg'),
    'csrc/io/cuda/nvjpeg_decode.cpp': ('nvjpeg',),
}
# Each library's environment switch, and the C++ macro defined when it is built with.
SWITCHES = {'opencv4': 'MMDET_EXT_WITH_OPENCV', 'libjpeg': 'MMDET_EXT_WITH_LIBJPEG',
            'RapidJSON': 'MMDET_EXT_WITH_RAPIDJSON', 'nvjpeg': 'MMDET_EXT_WITH_NVJPEG'}
# No FMA contraction anywhere: the kernels must be bit-exact with pycocotools, mmdet and each
# other, and contracting a*b+c into one FMA rounds once instead of twice. nvcc: --fmad=false for
# device code, -ffp-contract=off for its host compiler; C++: -ffp-contract=off, which GCC leaves
# on (=fast) for aarch64, and for x86-64 too once -march enables FMA (-march=native in CFLAGS).
NVCC_FLAGS = ['-O3', '--fmad=false', '-std=c++20', '-Xcompiler', '-ffp-contract=off']
# -O3 unless CFLAGS sets the optimisation level (the sanitizer builds take -O1, the test of a build
# without OpenCV -O0): CFLAGS come first on the command line, so an -O here would override them.
CXX_FLAGS = ['-std=c++20', '-fvisibility=hidden', '-ffp-contract=off']
if not any(flag.startswith('-O') for flag in os.environ.get('CFLAGS', '').split()):
    CXX_FLAGS.insert(0, '-O3')
# Release builds carry no debug info (Python's own CFLAGS hold -g: 29 MB of DWARF in a 0.6 MB
# extension); a -g in CFLAGS (the sanitizer builds) keeps it.
if not any(flag.startswith('-g') for flag in os.environ.get('CFLAGS', '').split()):
    CXX_FLAGS.append('-g0')
# What the installed package needs besides torch (whose range comes from the torch built against,
# torch_requirement()) and the framework. Not mmengine, mmcv or mmdet: two families install those
# import names under different distribution names (mmdet_ext/_framework.py), and requiring one
# family's names would make pip replace the other's packages. They are extras instead
# (framework_extras()), as mmdet keeps mmcv and mmengine in its own `mminstall` extra; `import
# mmdet_ext` names whatever is missing or out of range. No opencv-python either: mmengine/mmcv
# bring a cv2, and requiring this one would install a second beside opencv-python-headless.
# packaging: the import-time check compares versions with it.
INSTALL_REQUIRES = ['numpy', 'pycocotools', 'psutil', 'matplotlib', 'packaging']
# Written next to the built extension: what it was compiled against, read by
# mmdet_ext._native before loading it (refusing another torch with a clear message) and by
# python -m mmdet_ext.info.
BUILD_CONFIG_NAME = '_build_config.json'


def load_package_module(name: str):
    """``mmdet_ext/<name>.py``, loaded by path: the package cannot be imported before it is
    built (and importing it would import mmdet)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / 'mmdet_ext' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def framework_extras() -> dict[str, list[str]]:
    """One extra per family, `pip install mmdet_ext[openmmlab]` or `[onedl]`: its mmengine, mmcv
    and mmdet in the ranges the import-time check accepts (mmdet_ext/_framework.py, FAMILIES)."""
    families = load_package_module('_framework').FAMILIES
    extras = {family: [f'{dist}{spec}' for dist, spec in packages.values()]
              for family, packages in families.items()}
    # OpenMMLab's mmengine (0.10.7) imports pkg_resources, which setuptools 82 dropped, to resolve
    # `pkg::` config paths (mmdet::, mmdet_ext::); the fork's reads importlib.metadata instead.
    extras['openmmlab'].append('setuptools<82')
    return extras


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


def nvjpeg_include_dirs() -> list[Path]:
    """Where nvjpeg.h may be: the CUDA toolkit's include folders, then those of the nvidia-nvjpeg
    wheels installed beside torch (nvidia/cu13/include, nvidia/nvjpeg/include for CUDA 12)."""
    folders = []
    if CUDA_HOME:
        folders += [Path(CUDA_HOME) / 'include',
                    *sorted((Path(CUDA_HOME) / 'targets').glob('*/include'))]
    spec = importlib.util.find_spec('nvidia')
    for root in (spec.submodule_search_locations or []) if spec else []:
        folders += sorted(Path(root).glob('*/include'))
    return folders


def find_nvjpeg(with_cuda: bool) -> tuple[Optional[dict], str]:
    """The build flags for the nvJPEG decode (its header only: the library is opened with dlopen
    at run time, csrc/io/cuda/nvjpeg_decode.cpp), or None and why it is not built."""
    switch = os.environ.get(SWITCHES['nvjpeg'], '')
    if switch == '0':
        return None, f'off ({SWITCHES["nvjpeg"]}=0)'
    if not with_cuda:
        return None, 'not a CUDA build'
    found = [folder for folder in nvjpeg_include_dirs() if (folder / 'nvjpeg.h').is_file()]
    if found:
        return dict(include_dirs=[str(found[0])], library_dirs=[], libraries=['dl']), \
            str(found[0] / 'nvjpeg.h')
    why = 'no nvjpeg.h in the CUDA toolkit or an nvidia-nvjpeg wheel (pip install nvidia-nvjpeg)'
    if switch == '1':
        sys.exit(f'mmdet_ext: {SWITCHES["nvjpeg"]}=1 but nvJPEG has {why}')
    return None, why


def write_source_hash_header(build_hash) -> Path:
    """Writes build/generated/mmdet_ext_source_hash.h and returns its folder.

    A header, not a -D flag: a flag that changes with every source edit changes every compile
    command, and ninja then rebuilds every file; only bindings.cpp includes the header. It is
    rewritten only when the hash changes, so an unchanged tree rebuilds nothing.
    """
    folder = ROOT / 'build' / 'generated'
    header = folder / 'mmdet_ext_source_hash.h'
    text = ('// Written by setup.py: SHA-256 of csrc/, checked by mmdet_ext._native at import.\n'
            f'#define MMDET_EXT_SOURCE_HASH "{build_hash.source_hash(CSRC)}"\n')
    if not header.is_file() or header.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        header.write_text(text)
    return folder


def optional_libraries() -> tuple[dict, dict]:
    """The optional libraries to build with ({package: flags}) and a word on each for the log.

    libjpeg only with OpenCV: the strict JPEG decoder writes into OpenCV's cv::Mat.
    """
    found, notes = {}, {}
    # RapidJSON (header-only) streams the COCO json into the annotation store
    # (csrc/store/coco_json_reader.cpp); without it the store is built by the Python parser.
    for package in ('opencv4', 'libjpeg', 'RapidJSON'):
        flags, notes[package] = find_library(package)
        if flags is not None:
            found[package] = flags
    if 'libjpeg' in found and 'opencv4' not in found:
        del found['libjpeg']
        notes['libjpeg'] += ', unused without OpenCV'
    return found, notes


def building_for_cuda() -> tuple[bool, str]:
    """Whether to compile the CUDA sources, and why (mmdet_ext/_build_choice.py)."""
    return load_package_module('_build_choice').cuda_build(
        torch.version.cuda, CUDA_HOME, os.environ.get('FORCE_CUDA'))


def make_extension():
    build_hash = load_package_module('_build_hash')
    libraries, notes = optional_libraries()
    with_cuda, why = building_for_cuda()
    nvjpeg, notes['nvjpeg'] = find_nvjpeg(with_cuda)
    if nvjpeg is not None:
        libraries['nvjpeg'] = nvjpeg
    sources = [str(p.relative_to(ROOT)) for p in build_hash.native_sources(CSRC)]
    moved = [s for s in SOURCES_NEEDING if s not in sources]
    if moved:
        sys.exit(f'setup.py: SOURCES_NEEDING names {moved}, which are gone; update it')
    sources = [s for s in sources if set(SOURCES_NEEDING.get(s, ())) <= libraries.keys()]
    # A cuda/ folder holds what is built for CUDA only: device code (.cu, nvcc) and host code that
    # calls a CUDA library (.cpp, e.g. io/cuda/nvjpeg_decode.cpp), as in torchvision's csrc/.
    if not with_cuda:
        sources = [s for s in sources if '/cuda/' not in s]
    cpp_sources = [s for s in sources if s.endswith('.cpp')]
    cuda_sources = [s for s in sources if s.endswith('.cu')]
    macros = [(SWITCHES[package], None) for package in libraries]
    # csrc/ on the include path: sources include each other's headers as "masks/rle.h", wherever
    # they sit (a kernel in csrc/masks/cuda/ as well).
    native = dict(include_dirs=[str(CSRC), str(write_source_hash_header(build_hash))],
                  library_dirs=[], libraries=[])
    for flags in libraries.values():
        for key in native:
            native[key] += flags[key]
    cuda = (f'{why}, TORCH_CUDA_ARCH_LIST={os.environ.get("TORCH_CUDA_ARCH_LIST", "unset")}'
            if with_cuda else why)
    print(f'[mmdet_ext] building mmdet_ext._C: torch {torch.__version__}, {cuda}; '
          f'OpenCV: {notes["opencv4"]}; libjpeg: {notes["libjpeg"]}; '
          f'RapidJSON: {notes["RapidJSON"]}; nvJPEG: {notes["nvjpeg"]}; '
          f'{len(cpp_sources)} C++ + '
          f'{len(cuda_sources)} CUDA sources')
    if with_cuda:
        macros.append(('MMDET_EXT_WITH_CUDA', None))
        return CUDAExtension('mmdet_ext._C', cpp_sources + cuda_sources, define_macros=macros,
                             extra_compile_args={'cxx': CXX_FLAGS, 'nvcc': NVCC_FLAGS}, **native)
    return CppExtension('mmdet_ext._C', cpp_sources, define_macros=macros,
                        extra_compile_args={'cxx': CXX_FLAGS}, **native)


def torch_requirement() -> str:
    """The torch range this build runs with: the minor version it is compiled against.

    torch's C++ ABI changes between minor versions, so a wider range would let pip pair the
    wheel with a torch it fails to load against; the installed torch always satisfies it, so
    pip never fetches another one.
    """
    major, minor = (int(part) for part in torch.__version__.split('.')[:2])
    return f'torch>={major}.{minor},<{major}.{minor + 1}'


def build_config(with_cuda: bool) -> dict:
    """What the extension is built against, for the load-time check and mmdet_ext.info."""
    arch_flags = []
    if with_cuda:
        # Private to torch (read from 2.13): the -gencode flags BuildExtension gives nvcc.
        from torch.utils.cpp_extension import _get_cuda_arch_flags
        arch_flags = _get_cuda_arch_flags()
    return {'torch_version': torch.__version__, 'torch_cuda': torch.version.cuda,
            'with_cuda': with_cuda, 'cuda_arch_flags': arch_flags}


class BuildExtensionWithConfig(BuildExtension):
    """torch's BuildExtension, refusing an extension that carries its own libstdc++
    (mmdet_ext/_own_libstdcxx.py), and writing BUILD_CONFIG_NAME beside the built extension."""

    def run(self) -> None:
        super().run()
        own_libstdcxx = load_package_module('_own_libstdcxx')
        compiler = os.environ.get('CXX', 'c++')
        for ext in self.extensions:
            # The build and, with --inplace / -e, its copy in the package: checked once, both
            # removed when refused.
            copies = [p for p in dict.fromkeys([
                Path(self.build_lib) / self.get_ext_filename(ext.name),
                Path(self.get_ext_fullpath(ext.name))]) if p.is_file()]
            if copies and (message := own_libstdcxx.problem(copies[0], compiler)):
                for built in copies:
                    built.unlink()
                sys.exit(f'setup.py: {message}')
            target = Path(self.get_ext_fullpath(ext.name)).parent / BUILD_CONFIG_NAME
            target.write_text(json.dumps(build_config(building_for_cuda()[0]), indent=1) + '\n')


def read_version() -> str:
    namespace: dict = {}
    exec((ROOT / 'mmdet_ext' / 'version.py').read_text(), namespace)
    return namespace['__version__']


setup(
    version=read_version(),
    packages=find_packages(include=['mmdet_ext', 'mmdet_ext.*']),
    # The configs, for `mmdet_ext::` base paths (mmdet_ext/config_scope.py): mmengine reads them
    # from <package>/.mim/configs, a link to the repository's configs/ that the build copies.
    package_data={'mmdet_ext': ['.mim/model-index.yml', '.mim/configs/**/*.py']},
    ext_modules=[make_extension()],
    cmdclass={'build_ext': BuildExtensionWithConfig},
    install_requires=INSTALL_REQUIRES + [torch_requirement()],
    extras_require=framework_extras(),
    zip_safe=False,
)
