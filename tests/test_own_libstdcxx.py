"""setup.py refuses an extension carrying its own libstdc++ (mmdet_ext/_own_libstdcxx.py).

A GPU machine's default compiler linked libstdc++ statically into mmdet_ext._C, and every error
message with a number in it crashed the process. These tests build two small libraries with the
machine's g++, one linking libstdc++ as torch does and one with its own copy, and check that the
detector tells them apart, and that this checkout's extension is the shared kind.
"""
import shutil
import subprocess
from pathlib import Path

import pytest

import mmdet_ext
from mmdet_ext._own_libstdcxx import defines_own_libstdcxx, problem

SOURCE = r'''
#include <sstream>
#include <string>
extern "C" int formatted_length(long value) {
  std::ostringstream out;
  out << "value " << value;
  return static_cast<int>(out.str().size());
}
'''

needs_toolchain = pytest.mark.skipif(shutil.which('g++') is None or shutil.which('nm') is None,
                                     reason='needs g++ and binutils')


def build_library(tmp_path: Path, name: str, *flags: str) -> Path:
    source = tmp_path / 'format.cpp'
    source.write_text(SOURCE)
    library = tmp_path / f'{name}.so'
    result = subprocess.run(['g++', '-O2', '-fPIC', '-shared', *flags, str(source), '-o',
                             str(library)], capture_output=True, text=True, timeout=300)
    if result.returncode != 0 and flags:
        pytest.skip(f'this g++ cannot link libstdc++ statically: {result.stderr[-300:]}')
    assert result.returncode == 0, result.stderr
    return library


@needs_toolchain
def test_a_library_with_its_own_libstdcxx_is_found(tmp_path):
    library = build_library(tmp_path, 'own_copy', '-static-libstdc++')
    assert defines_own_libstdcxx(library) is True
    message = problem(library, '/opt/gcc/bin/g++')
    assert 'own_copy.so was linked with its own copy of libstdc++ by /opt/gcc/bin/g++' in message
    assert 'CXX=/usr/bin/g++' in message


@needs_toolchain
def test_a_library_using_the_shared_libstdcxx_passes(tmp_path):
    library = build_library(tmp_path, 'shared')
    assert defines_own_libstdcxx(library) is False
    assert problem(library, 'g++') is None


@needs_toolchain
def test_this_checkouts_extension_uses_the_shared_libstdcxx():
    extension = Path(mmdet_ext._C.__file__)
    assert defines_own_libstdcxx(extension) is False


def test_without_nm_nothing_is_claimed(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))  # an empty folder: no nm on PATH
    assert defines_own_libstdcxx(tmp_path / 'anything.so') is None
