"""Whether a built extension carries its own copy of libstdc++: one answer for setup.py and the
tests.

torch, and everything else in the process, uses the one shared libstdc++. A toolchain that links
libstdc++ statically (its libstdc++.so missing, or -static-libstdc++ in its specs) gives
mmdet_ext._C a private copy whose std::locale facets are not the process's, so streaming a number
into a string fails: the number goes missing, or the process crashes. Seen on a GPU machine whose
default compiler (/opt/gcc/bin/g++) did this: every error message with a number in it (a
TORCH_CHECK naming a size) was a segmentation fault instead of a RuntimeError.

Kept free of imports from the rest of the package: setup.py loads this file by path.
"""
import shutil
import subprocess
from pathlib import Path
from typing import Optional

# std::locale::classic(): every copy of libstdc++ defines it; code that uses the shared library
# only refers to it.
MARKER = '_ZNSt6locale7classicEv'


def defines_own_libstdcxx(library: Path) -> Optional[bool]:
    """True when ``library`` defines libstdc++'s ``std::locale::classic()`` itself (in its
    dynamic or its full symbol table: a copy linked with hidden symbols too), False when not,
    None when binutils' ``nm`` is not there to tell."""
    nm = shutil.which('nm')
    if nm is None:
        return None
    for table in (['-D'], []):
        out = subprocess.run([nm, *table, '--defined-only', str(library)], capture_output=True,
                             text=True, timeout=120).stdout
        if any(line.split()[-1:] == [MARKER] for line in out.splitlines()):
            return True
    return False


def problem(library: Path, compiler: str) -> Optional[str]:
    """The error setup.py stops with when ``library`` carries its own libstdc++, else None."""
    if not defines_own_libstdcxx(library):
        return None
    return (f'{library.name} was linked with its own copy of libstdc++ by {compiler}, whose '
            'toolchain links libstdc++ statically. torch uses the shared libstdc++, and with two '
            'copies in one process mmdet_ext\'s error messages crash the process instead of '
            'raising. Build with a compiler that links libstdc++ as a shared library, e.g. the '
            "distribution's: CC=/usr/bin/gcc CXX=/usr/bin/g++ pip install --no-build-isolation "
            '-e . (the build was removed)')
