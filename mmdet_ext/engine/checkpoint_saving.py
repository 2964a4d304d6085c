"""Crash-proof checkpoint writes: temp file, fsync, atomic rename, fsync the directory; in the
background, so that training goes on while the bytes reach the disk.

Why atomic: mmengine's ``LocalBackend.put`` opens the final path with ``'wb'`` and writes in
place, so a job killed mid-save leaves a truncated ``epoch_N.pth`` (and, with
``max_keep_ckpts=1``, nothing else). It also makes memory-mapped loading unsafe: a file truncated
in place under a live mapping raises SIGBUS. Writing a sibling temp file and ``os.replace``-ing it
means a reader sees either the old complete file or the new complete file, and a mapping keeps
its old inode.

Why in the background: mmengine serialises the checkpoint into memory (``torch.save`` into a
``BytesIO``) and hands the bytes to the backend's ``put``. Those bytes are already a copy of the
state -- the next step cannot change them -- so only the write, the fsyncs and the rename are left,
and a thread does them while the training thread goes on (CPython releases the GIL in
``write`` and ``fsync``). A thread, not a process: the bytes need no second copy into shared
memory, and a writer never outlives the job that made its checkpoint.
"""
import logging
import os
import os.path as osp
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Union

from mmengine.fileio import LocalBackend, register_backend
from mmengine.logging import print_log

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


class CheckpointSaveError(RuntimeError):
    """A checkpoint written in the background was not saved; the message names the file and the
    cause."""


class BackgroundWriter:
    """Writes checkpoints atomically on a thread, one save at a time.

    ``submit`` waits for the save in flight (saying so), then starts writing the next one.
    ``then`` runs a step once the save in flight is renamed into place (the ``last_checkpoint``
    pointer, pruning), on the writer thread, in order; with no save in flight, at once; never
    after a save that failed.
    ``wait`` waits for the save in flight and raises its failure; ``settle`` waits and returns
    it; ``raise_if_failed`` raises a failure without waiting. A failure is reported once, as a
    :class:`CheckpointSaveError`.
    The thread is not a daemon: a process that ends normally, or by an exception, first finishes
    the save in flight.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._path = ''
        self._then: list[Callable[[], None]] = []
        self._failure: Optional[tuple[str, BaseException]] = None

    def submit(self, data: Union[bytes, memoryview], filepath: Union[str, Path]) -> None:
        self.wait()
        data = data if isinstance(data, bytes) else bytes(data)  # nothing the caller may change
        self._path = os.fspath(filepath)
        self._thread = threading.Thread(target=self._write, args=(data, self._path),
                                        name='mmdet_ext checkpoint writer')
        self._thread.start()

    def then(self, step: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is not None:
                self._then.append(step)
                return
            if self._failure is not None:
                return  # the save it follows failed (already): never a pointer to nothing
        step()

    def in_flight(self) -> Optional[str]:
        """The file being written, or None."""
        with self._lock:
            return self._path if self._thread is not None else None

    def wait(self) -> None:
        failure = self.settle()
        if failure is not None:
            raise failure

    def settle(self) -> Optional[CheckpointSaveError]:
        thread = self._thread
        if thread is not None:
            if thread.is_alive():
                print_log(f'Waiting for the checkpoint save in flight: {self._path}',
                          logger='current', level=logging.INFO)
            thread.join()
        return self._take_failure()

    def raise_if_failed(self) -> None:
        failure = self._take_failure()
        if failure is not None:
            raise failure

    def _take_failure(self) -> Optional[CheckpointSaveError]:
        with self._lock:
            failure, self._failure = self._failure, None
        if failure is None:
            return None
        path, err = failure
        error = CheckpointSaveError(f'{path}: the checkpoint was not saved: '
                                    f'{type(err).__name__}: {err}')
        error.__cause__ = err
        return error

    def _write(self, data: bytes, path: str) -> None:
        try:
            atomic_write_bytes(data, path)
            while True:
                with self._lock:
                    if not self._then:
                        self._thread = None
                        return
                    step = self._then.pop(0)
                step()
        except BaseException as err:  # noqa: BLE001 -- raised in the training thread instead
            with self._lock:
                self._failure = (path, err)
                self._then.clear()
                self._thread = None


# This process's writer: every background save goes through it.
background_writer = BackgroundWriter()


def settle_saves_of_earlier_runs(logger: Any) -> None:
    """Before a run looks at its checkpoint directory: wait for a save an earlier run of this
    process left in flight (a run ended by an exception does not wait for it), so that it is
    neither missed by auto-resume nor taken for a killed save's temp file; its failure is
    logged on ``logger``."""
    failure = background_writer.settle()
    if failure is not None:
        logger.error(f'A save of an earlier run failed: {failure}')


@register_backend('atomic_local_background')
class BackgroundAtomicLocalBackend(AtomicLocalBackend):
    """``AtomicLocalBackend`` whose ``put`` returns once the write has started on
    ``background_writer`` (the save in flight before it finished first).

    Selected by :class:`AtomicCheckpointHook` (``background=True``, its default).
    """

    def put(self, obj: bytes, filepath: Union[str, Path]) -> None:
        background_writer.submit(obj, filepath)
