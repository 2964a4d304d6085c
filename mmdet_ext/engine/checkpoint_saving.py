"""Crash-proof checkpoint writes: temp file, fsync, atomic rename, fsync the directory; in the
background, so that training goes on while the bytes reach the disk.

Why atomic: mmengine's ``LocalBackend.put`` opens the final path with ``'wb'`` and writes in
place, so a job killed mid-save leaves a truncated ``epoch_N.pth`` (and, with
``max_keep_ckpts=1``, nothing else). It also makes memory-mapped loading unsafe: a file truncated
in place under a live mapping raises SIGBUS. Writing a sibling temp file and ``os.replace``-ing it
means a reader sees either the old complete file or the new complete file, and a mapping keeps
its old inode.

Why in the background: a save is a copy of the state that the next step cannot change, then
the serialisation, the write, the fsyncs and the rename. mmengine does the copy and the
serialisation at once (``torch.save`` into a ``BytesIO``, in the training thread). Here the
training thread only copies the checkpoint's tensors into buffers kept from one save to the next
(``CheckpointStager``: one memory copy into pages already mapped) and everything else in it (the
message hub, the optimizer's per-parameter dicts) by ``copy.deepcopy``; ``torch.save`` to the
file runs on a thread while training goes on (CPython releases the GIL in ``write`` and
``fsync``). A thread, not a process: the staged state needs no second copy into shared memory,
and a writer never outlives the job that made its checkpoint.
"""
import copy
import logging
import os
import os.path as osp
import tempfile
import threading
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator, Optional, Union

import torch
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


Writer = Callable[[BinaryIO], None]


def _bytes_writer(data: Union[bytes, memoryview]) -> Writer:
    return lambda f: f.write(data)


def atomic_write_bytes(data: Union[bytes, memoryview], filepath: Union[str, Path]) -> None:
    """Write ``data`` to ``filepath`` so that a crash at any point leaves the old or the new file
    (:func:`atomic_write`)."""
    atomic_write(_bytes_writer(data), filepath)


def atomic_write(write: Writer, filepath: Union[str, Path]) -> None:
    """``write(f)`` into ``filepath`` so that a crash at any point leaves the old or the new file.

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
            write(f)
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

    def submit(self, data: Union[bytes, memoryview, Writer], filepath: Union[str, Path]) -> None:
        """Write ``data`` (bytes, or a ``write(f)`` that writes the file) to ``filepath``."""
        self.wait()
        if not callable(data):
            data = data if isinstance(data, bytes) else bytes(data)  # nothing the caller changes
            data = _bytes_writer(data)
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

    def _write(self, write: Writer, path: str) -> None:
        try:
            atomic_write(write, path)
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


class CheckpointStager:
    """A copy of a checkpoint that the next training step cannot change, made cheaply.

    Tensors are copied storage by storage (views of one storage stay views of one copy, as
    ``torch.save`` would write them) into storages kept from the previous save where one of the
    same size is free: a copy into pages already mapped costs a fraction of a fresh allocation's
    page faults (benchmarks/results/checkpoint_stall.md). Everything else is ``copy.deepcopy``'d.
    The kept storages are the last checkpoint's size, held from one save to the next; they are
    reused only once the save that wrote them is done (the caller waits for it).
    """

    def __init__(self) -> None:
        self._kept: list[torch.UntypedStorage] = []

    def stage(self, checkpoint: Any) -> Any:
        free: dict[int, list[torch.UntypedStorage]] = {}
        for storage in self._kept:
            free.setdefault(storage.nbytes(), []).append(storage)
        copies: dict[tuple[int, int], torch.UntypedStorage] = {}
        memo: dict[int, Any] = {}
        for tensor in _tensors_in(checkpoint):
            if id(tensor) in memo:
                continue
            if tensor.device.type != 'cpu' or tensor.layout != torch.strided or \
                    tensor.is_quantized or tensor.is_conj() or tensor.is_neg():
                memo[id(tensor)] = tensor.detach().clone()  # what a storage does not say
                continue
            source = tensor.untyped_storage()
            key = (source.data_ptr(), source.nbytes())
            if key not in copies:
                same_size = free.get(source.nbytes())
                staged = same_size.pop() if same_size else torch.UntypedStorage(source.nbytes())
                staged.copy_(source)
                copies[key] = staged
            memo[id(tensor)] = torch.empty(0, dtype=tensor.dtype).set_(
                copies[key], tensor.storage_offset(), tensor.size(), tensor.stride())
        self._kept = list(copies.values())
        return copy.deepcopy(checkpoint, memo)


def _tensors_in(obj: Any) -> Iterator[torch.Tensor]:
    """The tensors in ``obj``'s dicts, lists and tuples (any others ``deepcopy`` copies)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors_in(value)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors_in(value)


checkpoint_stager = CheckpointStager()


def save_in_background(checkpoint: dict, filepath: str, file_client_args: Any = None,
                       backend_args: Optional[dict] = None) -> None:
    """``mmengine.runner.checkpoint.save_checkpoint`` for the ``atomic_local_background``
    backend: the checkpoint staged (:class:`CheckpointStager`), then serialised, written and
    renamed into place on ``background_writer``'s thread."""
    background_writer.wait()  # the save in flight done: its staged storages are free again
    staged = checkpoint_stager.stage(checkpoint)
    background_writer.submit(lambda f: torch_save_to(staged, f), filepath)


def torch_save_to(obj: Any, f: BinaryIO) -> None:
    """``torch.save(obj, f)``; a failed write raises its own ``OSError`` (``File too large``,
    ``No space left on device``), which torch's writer would report only as ``unexpected pos``."""
    sink = _WritesKeepingTheError(f)
    try:
        torch.save(obj, sink)
    except Exception as err:
        if sink.error is None:
            raise
        raise sink.error from err


class _WritesKeepingTheError:
    """``f``'s ``write``, keeping the first ``OSError`` it raised."""

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.error = f, None

    def write(self, data: Any) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.f.flush()


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
