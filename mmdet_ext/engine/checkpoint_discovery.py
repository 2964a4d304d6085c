"""Finding the newest checkpoint in a work_dir that actually opens, for auto-resume.

Why: mmengine's ``find_latest_checkpoint`` trusts the ``last_checkpoint`` pointer blindly; if the
file it names was cut short by a crash (or the pointer itself is empty), ``resume=True`` dies
instead of falling back to the previous good checkpoint.
"""
import logging
import os
import os.path as osp
import re
import zipfile
from typing import Callable, Optional

from mmengine.logging import print_log

from .checkpoint_loading import CheckpointLoadError

# mmengine CheckpointHook's default names (``filename_tmpl`` 'epoch_{}.pth' / 'iter_{}.pth');
# ``best_*`` and published ``*-<sha>.pth`` files hold no optimizer state, so they are not resumed.
_RESUMABLE_NAME = re.compile(r'^(epoch|iter)_\d+\.pth$')


def read_last_checkpoint_pointer(work_dir: str) -> Optional[str]:
    """The path stored in ``work_dir/last_checkpoint``, or None if absent or empty."""
    pointer = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(pointer):
        return None
    with open(pointer) as f:
        target = f.read().strip()
    return target or None


def resume_candidates(work_dir: str) -> list[str]:
    """Checkpoints auto-resume may use, newest (modification time) first.

    The ``last_checkpoint`` target plus ``epoch_N.pth`` / ``iter_N.pth`` files next to it and in
    ``work_dir``. Newest by mtime rather than pointer first: an atomic save that finished just
    before the crash may not have updated the pointer yet, and it is complete.
    """
    pointed = read_last_checkpoint_pointer(work_dir)
    dirs = {work_dir} | ({osp.dirname(pointed)} if pointed else set())
    found = {pointed} if pointed and osp.isfile(pointed) else set()
    for dirname in dirs:
        if osp.isdir(dirname):
            found.update(osp.join(dirname, name) for name in os.listdir(dirname)
                         if _RESUMABLE_NAME.match(name))
    return sorted(found, key=lambda path: (osp.getmtime(path), path), reverse=True)


def check_checkpoint_opens(filename: str, load: Callable[[str], object]) -> None:
    """Raise :class:`CheckpointLoadError` unless ``filename`` is a complete, loadable checkpoint.

    The zip central directory sits at the end of the file, so reading it catches truncation for
    free; ``load`` (the memory-mapped loader: reads only the pickle, not the tensor data) then
    catches a damaged pickle or records pointing past the end.
    """
    try:
        with zipfile.ZipFile(filename) as archive:
            archive.namelist()
    except (OSError, zipfile.BadZipFile) as err:
        raise CheckpointLoadError(f'checkpoint {filename} is truncated or corrupt: {err}') from err
    checkpoint = load(filename)
    if not isinstance(checkpoint, dict) or 'meta' not in checkpoint:
        raise CheckpointLoadError(f'checkpoint {filename} has no "meta": not a Runner checkpoint')


def find_newest_loadable_checkpoint(work_dir: str,
                                    load: Callable[[str], object]) -> Optional[str]:
    """The newest of :func:`resume_candidates` that passes :func:`check_checkpoint_opens`.

    Logs a warning naming every skipped file and why; returns None when none opens.
    """
    for candidate in resume_candidates(work_dir):
        try:
            check_checkpoint_opens(candidate, load)
        except (CheckpointLoadError, OSError) as err:
            print_log(f'Auto-resume: skipping {candidate}: {err}', logger='current',
                      level=logging.WARNING)
            continue
        return candidate
    return None
