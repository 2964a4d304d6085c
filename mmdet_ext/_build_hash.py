"""Fingerprint of the C++/CUDA sources, shared by setup.py and the import-time staleness check.

Kept free of imports from the rest of the package: setup.py loads this file by path before the
extension exists.
"""
import hashlib
from pathlib import Path

NATIVE_SUFFIXES = ('.cpp', '.cu', '.h', '.hpp', '.cuh')


def native_sources(csrc_dir: Path) -> list[Path]:
    """All C++/CUDA files under ``csrc_dir``, in a stable order."""
    return sorted(p for p in csrc_dir.rglob('*') if p.suffix in NATIVE_SUFFIXES)


def source_hash(csrc_dir: Path) -> str:
    """SHA-256 over the relative paths and contents of every native source file."""
    digest = hashlib.sha256()
    for path in native_sources(csrc_dir):
        digest.update(path.relative_to(csrc_dir).as_posix().encode())
        digest.update(b'\0')
        digest.update(path.read_bytes())
    return digest.hexdigest()
