"""build_info() describes the build; a build without OpenCV imports and says what it lacks."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
import torch

import mmdet_ext
from mmdet_ext import _C
from mmdet_ext._build_hash import source_hash

REPO_ROOT = Path(__file__).resolve().parents[1]


def _pkg_config_version(package: str) -> Optional[str]:
    """The version pkg-config reports for the C++ ``package`` (not the cv2 wheel's), or None."""
    try:
        return subprocess.run(['pkg-config', '--modversion', package], check=True,
                              capture_output=True, text=True).stdout.strip()
    except (FileNotFoundError, subprocess.CalledProcessError):
        return None


def test_build_info_describes_this_build():
    info = mmdet_ext.build_info()
    assert set(info) == {'with_cuda', 'cuda_version', 'torch_version', 'opencv_version',
                         'libjpeg', 'rapidjson', 'nvjpeg', 'source_hash'}
    assert info['with_cuda'] is _C.with_cuda()
    if info['with_cuda']:  # torch refuses to build with an nvcc of another major version
        assert info['cuda_version'].split('.')[0] == torch.version.cuda.split('.')[0]
    else:
        assert info['cuda_version'] is None
    if torch.version.cuda is None:
        assert info['with_cuda'] is False
    assert info['torch_version'] == torch.__version__.split('+')[0] == _C.torch_version()
    # setup.py builds with what pkg-config finds, so this checkout's build has exactly that.
    assert info['opencv_version'] == _pkg_config_version('opencv4') == _C.opencv_version()
    assert info['libjpeg'] == (_pkg_config_version('libjpeg') if info['opencv_version'] else None)
    assert info['rapidjson'] is (_pkg_config_version('RapidJSON') is not None)
    if not info['with_cuda']:  # nvJPEG is built only into CUDA builds
        assert info['nvjpeg'] is False
        assert 'no CUDA' in _C.nvjpeg_load_error()
    assert info['source_hash'] == source_hash(REPO_ROOT / 'csrc') == _C.source_hash()


# The parts CI's build must have (.ci/run sets MMDET_EXT_REQUIRE_NATIVE=1 after
# tools/install_deps.sh has installed them): without them ~540 tests that need them skip, and a
# degraded build would pass. Elsewhere (a GPU machine without a C++ OpenCV, docs/gpu.md) they
# stay optional.
REQUIRE_NATIVE = 'MMDET_EXT_REQUIRE_NATIVE'
NATIVE_PARTS = {'opencv_version': 'libopencv-dev', 'libjpeg': 'libjpeg62-turbo-dev',
                'rapidjson': 'rapidjson-dev'}


def missing_native_parts(info: dict) -> list[str]:
    """The keys of ``NATIVE_PARTS`` that ``info`` (a ``build_info()``) reports absent."""
    return [part for part in NATIVE_PARTS if not info[part]]


def _native_parts_required() -> bool:
    value = os.environ.get(REQUIRE_NATIVE, '')
    if value not in ('', '0', '1'):
        raise ValueError(f'{REQUIRE_NATIVE} must be 0 or 1, not {value!r}')
    return value == '1'


@pytest.mark.skipif(not _native_parts_required(),
                    reason=f'{REQUIRE_NATIVE} is not 1: native parts optional on this machine')
def test_a_build_required_complete_has_every_native_part():
    missing = missing_native_parts(mmdet_ext.build_info())
    assert not missing, (
        f'{REQUIRE_NATIVE}=1 but this build of mmdet_ext._C lacks {missing}: the tests needing '
        f'them would only skip. apt-get install {" ".join(NATIVE_PARTS[m] for m in missing)} '
        'pkg-config, then rebuild (docs/build.md)')


# Run in a package copy holding the build under test; an editable install's finder would resolve
# mmdet_ext._C to the checkout's own build, so it is dropped first.
PROBE = r'''
import json, sys
sys.meta_path[:] = [f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')]
import torch
import mmdet_ext
from mmdet_ext import _C


def error_of(call):
    try:
        call()
    except Exception as err:  # noqa: BLE001 -- the type is what the test checks
        return [type(err).__name__, isinstance(err, RuntimeError), str(err)]
    return None


mask = torch.zeros(3, 3, dtype=torch.uint8)
mask[1, 1] = 1
counts = torch.ops.mmdet_ext.rle_encode(mask)
_C.set_opencv_num_threads(1)
print(json.dumps({
    'file': mmdet_ext.__file__,
    'info': mmdet_ext.build_info(),
    'opencv_num_threads': _C.opencv_num_threads(),
    'decode_image': error_of(lambda: torch.ops.mmdet_ext.decode_image(
        torch.tensor([0xFF, 0xD8, 0xFF, 0xD9], dtype=torch.uint8), 1)),
    'warp_image': error_of(lambda: torch.ops.mmdet_ext.warp_image(
        torch.zeros(4, 4, 3, dtype=torch.uint8), 2, 2, 1, 0)),
    'rle_counts': counts.tolist(),
    'rle_roundtrip': torch.equal(torch.ops.mmdet_ext.rle_decode(counts, 3, 3), mask),
}))
'''


@pytest.fixture(scope='module')
def no_opencv_probe(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Build the extension with MMDET_EXT_WITH_OPENCV=0 out of tree, import it, probe it."""
    out = tmp_path_factory.mktemp('no_opencv_build')
    # -O0 -g0: what is tested is what gets built and registered, and it halves the build time.
    env = {**os.environ, 'MMDET_EXT_WITH_OPENCV': '0', 'CFLAGS': '-O0 -g0'}
    build = subprocess.run(
        [sys.executable, 'setup.py', 'build_ext', '--build-temp', str(out / 'temp'),
         '--build-lib', str(out / 'lib')], cwd=REPO_ROOT, env=env, capture_output=True,
        text=True, timeout=1200)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    assert 'OpenCV: off (MMDET_EXT_WITH_OPENCV=0)' in build.stdout
    package = out / 'package'
    shutil.copytree(REPO_ROOT / 'csrc', package / 'csrc')  # the stale-build check runs as well
    shutil.copytree(REPO_ROOT / 'mmdet_ext', package / 'mmdet_ext',
                    ignore=shutil.ignore_patterns('*.so', '__pycache__'))
    for built in (out / 'lib' / 'mmdet_ext').glob('_C*.so'):
        shutil.copy2(built, package / 'mmdet_ext')
    probe = subprocess.run([sys.executable, '-c', PROBE], cwd=package, capture_output=True,
                           text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-5000:]
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(result['file']).is_relative_to(package), 'the probe imported another mmdet_ext'
    return result


def test_build_without_opencv_imports_and_says_so(no_opencv_probe):
    info = no_opencv_probe['info']
    assert info['opencv_version'] is None and info['libjpeg'] is None
    assert info['source_hash'] == source_hash(REPO_ROOT / 'csrc')
    assert no_opencv_probe['opencv_num_threads'] is None  # and set_opencv_num_threads is a no-op


@pytest.mark.parametrize('op', ['decode_image', 'warp_image'])
def test_ops_needing_opencv_raise_naming_it(no_opencv_probe, op):
    error_type, is_runtime_error, message = no_opencv_probe[op]
    assert error_type == 'NotImplementedError' and is_runtime_error
    assert message.startswith(f'{op}: this build of mmdet_ext has no OpenCV')
    assert 'apt-get install libopencv-dev libjpeg62-turbo-dev' in message
    assert 'pip install --no-build-isolation -e .' in message


def test_the_completeness_check_names_what_a_build_without_opencv_lacks(no_opencv_probe):
    assert missing_native_parts(no_opencv_probe['info']) == ['opencv_version', 'libjpeg']


def test_rle_ops_work_without_opencv(no_opencv_probe):
    assert no_opencv_probe['rle_counts'] == [4, 1, 4]  # column-major: 4 zeros, the centre, 4 zeros
    assert no_opencv_probe['rle_roundtrip']


def test_cuda_build_needs_a_cuda_torch_and_nvcc(tmp_path):
    """setup.py's choice (mmdet_ext/_build_choice.py): /usr/local/cuda without nvcc (a runtime
    image, where torch still resolves CUDA_HOME) builds for the CPU and says why; FORCE_CUDA=0
    is a CPU-only request; FORCE_CUDA=1 fails where a CUDA build cannot be made."""
    from mmdet_ext._build_choice import cuda_build
    runtime_only, toolkit = tmp_path / 'runtime', tmp_path / 'toolkit'
    runtime_only.mkdir()
    (toolkit / 'bin').mkdir(parents=True)
    (toolkit / 'bin' / 'nvcc').write_text('')
    assert cuda_build('12.8', str(toolkit), None) == (
        True, f'CUDA 12.8 (nvcc in {toolkit})')
    assert cuda_build('12.8', str(toolkit), '1')[0] is True
    assert cuda_build('12.8', str(runtime_only), None) == (
        False, f'CPU only: CUDA_HOME={runtime_only} has no bin/nvcc (a runtime-only CUDA image?)')
    assert cuda_build('12.8', None, '') == (False, 'CPU only: no CUDA toolkit found (CUDA_HOME '
                                            'unset, no nvcc on PATH, no /usr/local/cuda)')
    assert cuda_build(None, str(toolkit), None) == (False, 'CPU only: torch is a CPU build')
    assert cuda_build('12.8', str(toolkit), '0') == (False, 'CPU only: FORCE_CUDA=0')
    with pytest.raises(SystemExit, match='FORCE_CUDA=1 but .* has no bin/nvcc'):
        cuda_build('12.8', str(runtime_only), '1')
    with pytest.raises(SystemExit, match='FORCE_CUDA=1 but torch is a CPU build'):
        cuda_build(None, str(toolkit), '1')
    with pytest.raises(SystemExit, match="FORCE_CUDA must be 0 or 1"):
        cuda_build('12.8', str(toolkit), 'yes')


def test_cuda_build_needs_nvcc_of_torchs_cuda_major(tmp_path):
    """torch 2.1.2 from the registry is CUDA 12.1; with nvcc 13 torch refuses to build, so the
    automatic choice is a CPU build that says why, and FORCE_CUDA=1 fails naming both."""
    from mmdet_ext._build_choice import cuda_build
    nvcc = tmp_path / 'bin' / 'nvcc'
    nvcc.parent.mkdir()
    nvcc.write_text('#!/bin/sh\necho "Cuda compilation tools, release 13.0, V13.0.48"\n')
    nvcc.chmod(0o755)
    assert cuda_build('12.1', str(tmp_path), None) == (
        False, f'CPU only: nvcc in {tmp_path} is CUDA 13.0, torch was built with CUDA 12.1 '
               '(torch compiles CUDA code only with its own major version)')
    assert cuda_build('13.2', str(tmp_path), None) == (True, f'CUDA 13.2 (nvcc in {tmp_path})')
    with pytest.raises(SystemExit, match='FORCE_CUDA=1 but nvcc in .* is CUDA 13.0, torch was '
                                         'built with CUDA 12.1'):
        cuda_build('12.1', str(tmp_path), '1')
