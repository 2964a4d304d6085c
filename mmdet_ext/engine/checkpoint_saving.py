"""Crash-proof checkpoint writes: temp file, fsync, atomic rename, fsync the directory.

Why: mmengine's ``LocalBackend.put`` opens the final path with ``'wb'`` and writes in place, so a
job killed mid-save leaves a truncated ``epoch_N.pth`` (and, with ``max_keep_ckpts=1``, nothing
else). It also makes memory-mapped loading unsafe: a file truncated in place under a live mapping
raises SIGBUS. Writing a sibling temp file and ``os.replace``-ing it means a reader sees either the
old complete file or the new complete file, and a mapping keeps its old inode.
"""
import os
import os.path as osp
import tempfile
from pathlib import Path
from typing import Union

from mmengine.fileio import LocalBackend, register_backend

# Temp files are hidden (leading dot) and carry this suffix, so no checkpoint glob matches them.
TEMP_SUFFIX = '.mmdet_ext-tmp'


def _fsync_dir(dirname: str) -> None:
    fd = os.open(dirname, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(data: Union[bytes, memoryview], filepath: Union[str, Path]) -> None:
    """Write ``data`` to ``filepath`` so that a crash at any point leaves the old or the new file.

    The temp file lives in the same directory (``os.replace`` is only atomic within one file
    system); it is fsynced before the rename and the directory after it, so the rename itself
    survives a power cut.
    """
    filepath = os.fspath(filepath)
    dirname = osp.dirname(osp.abspath(filepath))
    os.makedirs(dirname, exist_ok=True)
    fd, tmp_path = tempfile.mkstemp(prefix=f'.{osp.basename(filepath)}.', suffix=TEMP_SUFFIX,
                                    dir=dirname)
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, filepath)
    except BaseException:
        if osp.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    _fsync_dir(dirname)


def remove_stale_temp_files(dirname: str) -> list[str]:
    """Delete temp files a killed save left in ``dirname``; returns the removed paths."""
    if not osp.isdir(dirname):
        return []
    removed = []
    for name in os.listdir(dirname):
        if name.startswith('.') and name.endswith(TEMP_SUFFIX):
            os.unlink(osp.join(dirname, name))
            removed.append(osp.join(dirname, name))
    return removed


@register_backend('atomic_local')
class AtomicLocalBackend(LocalBackend):
    """``LocalBackend`` whose ``put``/``put_text`` replace the target atomically.

    Selected with ``backend_args=dict(backend='atomic_local')``; :class:`AtomicCheckpointHook`
    does that for local checkpoint directories, so every ``runner.save_checkpoint`` it triggers
    (regular, best, ``max_keep_ckpts`` bookkeeping) is crash-proof.
    """

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        atomic_write_bytes(obj, filepath)

    def put_text(self, obj: str, filepath: Union[str, Path], encoding: str = 'utf-8') -> None:
        atomic_write_bytes(obj.encode(encoding), filepath)
