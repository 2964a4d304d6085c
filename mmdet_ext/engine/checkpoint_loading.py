"""CPU-first, allowlisted loading of mmengine/mmdet checkpoints.

Why: ``torch.load`` without ``map_location`` restores every tensor onto the device it was saved
from, and mmengine's ``Runner.resume`` maps to ``'cuda'`` (the current device), so after
``load_from``/``resume`` every rank's copy can pile onto one GPU and run it out of memory.
And since torch 2.6
``torch.load`` defaults to ``weights_only=True``, which refuses mmengine's ``HistoryBuffer`` and
numpy arrays, so stock mmengine 0.10.7 cannot resume at all; the usual "fix" turns safety off.
Here every load goes to CPU (memory-mapped when the file allows it) through
``weights_only=True`` with an explicit allowlist of what these checkpoints legitimately contain.
"""
import importlib
import io
import logging
import os
import pickle
import struct
import zipfile
from typing import Any, Callable, Sequence

import numpy as np
import torch
from mmengine.logging import HistoryBuffer, print_log
from mmengine.runner.checkpoint import CheckpointLoader

from .._compat import checkpoint_schemes, set_checkpoint_schemes
from .._torch_compat import (SafeGlobal, allowlist_table, load_allowlisted,
                             unsafe_globals_in_checkpoint)
from ..allowlist_pickle import RefusedGlobal
from ..io import open_regular_file

try:
    from numpy._core import multiarray  # numpy >= 1.26; numpy 2 deprecates numpy.core
except ImportError:
    from numpy.core import multiarray

# What ``HistoryBuffer`` pickles besides itself: its statistics methods, as
# ``getattr(HistoryBuffer, 'mean')`` (pickle's way of naming a method by qualified name).
_HISTORY_BUFFER_METHODS = frozenset({'min', 'max', 'current', 'mean'})


class CheckpointLoadError(RuntimeError):
    """A checkpoint file that cannot be loaded safely: truncated, corrupt, or not allowlisted."""


def _history_buffer_getattr(obj: Any, name: str) -> Any:
    """Stands in for ``builtins.getattr`` while unpickling: only HistoryBuffer's statistics.

    A general ``getattr`` would let a pickle reach any attribute of any allowlisted class.
    """
    if obj is HistoryBuffer and name in _HISTORY_BUFFER_METHODS:
        return getattr(obj, name)
    raise pickle.UnpicklingError(
        f'getattr({obj!r}, {name!r}) is not allowed in a checkpoint; only '
        f'HistoryBuffer.{{{", ".join(sorted(_HISTORY_BUFFER_METHODS))}}} are')


def checkpoint_safe_globals() -> list[SafeGlobal]:
    """Non-tensor globals that mmengine/mmdet checkpoints contain, allowed under weights_only.

    Found with ``torch.serialization.get_unsafe_globals_in_checkpoint`` on checkpoints written by
    mmengine 0.10.7's ``CheckpointHook`` (message hub history, numpy scalars in runtime info).
    numpy >= 2 pickles ``numpy._core.multiarray.*``; numpy 1.x wrote ``numpy.core.multiarray.*``,
    which existing checkpoints still carry, so both names map to the same functions.
    """
    numpy_dtype_classes = [type(np.dtype(code)) for code in '?bBhHiIlLqQefdgFDGUSO']
    return [
        HistoryBuffer,  # message_hub's log history
        (_history_buffer_getattr, 'builtins.getattr'),
        (_history_buffer_getattr, '__builtin__.getattr'),  # protocol-2 spelling
        np.ndarray,
        np.dtype,
        *numpy_dtype_classes,
        (multiarray._reconstruct, 'numpy._core.multiarray._reconstruct'),
        (multiarray._reconstruct, 'numpy.core.multiarray._reconstruct'),
        (multiarray.scalar, 'numpy._core.multiarray.scalar'),
        (multiarray.scalar, 'numpy.core.multiarray.scalar'),
    ]


def resolve_safe_globals(names: Sequence[str]) -> list[Callable]:
    """Import dotted names (``'my_pkg.module.MyClass'``) for :func:`load_checkpoint_to_cpu`.

    Raises:
        ValueError: a name that is not ``module.attribute`` or cannot be imported.
    """
    resolved = []
    for name in names:
        module_name, _, attr = name.rpartition('.')
        try:
            resolved.append(getattr(importlib.import_module(module_name), attr))
        except (ImportError, AttributeError, ValueError) as err:
            raise ValueError(f'extra_safe_globals: cannot import {name!r}: {err}') from err
    return resolved


def _disallowed_globals(filename: str, extra: Sequence[SafeGlobal],
                        err: pickle.UnpicklingError, is_zip: bool) -> list[str]:
    """The globals of the file outside the allowlist: the one the allowlist unpickler stopped
    at, or all of them where torch lists them (zip checkpoints, torch >= 2.5); else none."""
    if isinstance(err, RefusedGlobal):
        return [err.global_name]
    found = unsafe_globals_in_checkpoint(filename) if is_zip else None
    if found is None:
        return []
    allowed = allowlist_table([*checkpoint_safe_globals(), *extra])
    return [name for name in found if name not in allowed]


def _unpickler_reason(err: pickle.UnpicklingError) -> str:
    """The line of torch's long weights_only message that says what was refused."""
    message = str(err)
    reason = message.partition('WeightsUnpickler error:')[2].partition('Check the documentation')[0]
    return ' '.join(reason.split()) or message.splitlines()[0]


# torch.save writes a zip archive; before torch 1.6 (and with _use_new_zipfile_serialization=False)
# a pickle stream of protocol >= 2, which starts with the PROTO opcode.
_CHECKPOINT_MAGICS = (b'PK\x03\x04', b'\x80')


def check_checkpoint_file(filename: str) -> None:
    """Refuse, naming the file, what cannot be a checkpoint before ``torch.load`` reads it.

    Why: ``torch.load`` on a text file fails with ``KeyError``/``IndexError`` from inside the
    unpickler, and on a named pipe it blocks forever.

    Raises:
        FileNotFoundError: nothing at ``filename``.
        CheckpointLoadError: a directory, pipe, socket or device; empty; not a zip or pickle.
    """
    try:
        fd = open_regular_file(filename)
    except FileNotFoundError:
        raise FileNotFoundError(f'checkpoint {filename} does not exist') from None
    except OSError as err:
        raise CheckpointLoadError(f'checkpoint {filename} {err.strerror}') from err
    with os.fdopen(fd, 'rb') as f:
        head = f.read(64)
    if not head:
        raise CheckpointLoadError(f'checkpoint {filename} is empty (zero bytes)')
    if not head.startswith(_CHECKPOINT_MAGICS):
        raise CheckpointLoadError(
            f'checkpoint {filename} is not a PyTorch checkpoint (neither a zip archive nor a '
            f'pickle; it starts with {head[:16]!r}): a text file or a download error page?')


def load_checkpoint_to_cpu(filename: str, *, allow_unsafe_globals: bool = False,
                           extra_safe_globals: Sequence[Callable] = (),
                           mmap: bool = True) -> Any:
    """Load a checkpoint file onto the CPU, refusing pickled code that is not allowlisted.

    Args:
        filename: a local checkpoint path (``~`` expanded).
        allow_unsafe_globals: load with ``weights_only=False`` (runs arbitrary pickled code; only
            for checkpoints you trust). Logs a warning each time.
        extra_safe_globals: classes/functions to allow on top of :func:`checkpoint_safe_globals`
            (e.g. your own dataclass kept in ``meta``), still under ``weights_only=True``.
        mmap: memory-map the tensor storages (private, copy-on-write mapping) instead of reading
            them into RAM; zip-format checkpoints only, older formats are read normally.

    Raises:
        FileNotFoundError: ``filename`` does not exist.
        CheckpointLoadError: the file is not a checkpoint (text, empty, a pipe or a directory),
            is truncated/corrupt, or holds a global outside the allowlist (the message names it
            and how to allow it).
    """
    filename = os.path.expanduser(filename)
    check_checkpoint_file(filename)
    is_zip = zipfile.is_zipfile(filename)
    use_mmap = mmap and is_zip
    if is_zip:
        check_zip_storage_sizes(filename)
    if allow_unsafe_globals:
        print_log(f'Loading {filename} with weights_only=False (allow_unsafe_globals=True): any '
                  'code pickled in it runs now. Only do this for checkpoints you trust.',
                  logger='current', level=logging.WARNING)
        return torch.load(filename, map_location='cpu', weights_only=False, mmap=use_mmap)
    try:
        checkpoint = load_allowlisted(filename, [*checkpoint_safe_globals(), *extra_safe_globals],
                                      mmap=use_mmap)
    except pickle.UnpicklingError as err:
        offending = _disallowed_globals(filename, extra_safe_globals, err, is_zip)
        what = ', '.join(offending) if offending else _unpickler_reason(err)
        example = offending[0] if offending else 'module.Class'
        raise CheckpointLoadError(
            f'checkpoint {filename} holds objects outside the safe allowlist: {what}. If you '
            f'trust this file, allow them deliberately in custom_hooks: '
            f"dict(type='CpuCheckpointLoadHook', extra_safe_globals=['{example}']) keeps "
            "weights_only loading, or allow_unsafe_globals=True disables it (runs any pickled "
            'code).') from err
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError, KeyError, IndexError,
            TypeError, AttributeError, struct.error) as err:  # what a damaged stream raises
        raise CheckpointLoadError(
            f'checkpoint {filename} is truncated or corrupt and cannot be read: {err}') from err
    return checkpoint


class _RecordingUnpickler(pickle.Unpickler):
    """Reads a checkpoint's ``data.pkl`` only for its storage records; runs nothing.

    Every global becomes an inert placeholder (so no pickled code can run), and every persistent
    id (torch's storage reference) is recorded instead of loaded.
    """

    def __init__(self, file) -> None:
        super().__init__(file)
        self.storages: list[tuple] = []

    def find_class(self, module: str, name: str) -> type:
        return type(name, (_Inert,), {})

    def persistent_load(self, pid: Any) -> Any:
        self.storages.append(tuple(pid) if isinstance(pid, (tuple, list)) else (pid,))
        return _Inert()


class _Inert:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:  # OrderedDict and friends
        pass

    def append(self, value: Any) -> None:
        pass

    def extend(self, values: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> '_Inert':
        return _Inert()


_STORAGE_ITEM_BYTES = {'UntypedStorage': 1, 'ByteStorage': 1, 'CharStorage': 1, 'BoolStorage': 1,
                       'ShortStorage': 2, 'HalfStorage': 2, 'BFloat16Storage': 2,
                       'IntStorage': 4, 'FloatStorage': 4, 'LongStorage': 8, 'DoubleStorage': 8,
                       'ComplexFloatStorage': 8, 'ComplexDoubleStorage': 16}


def check_zip_storage_sizes(filename: str) -> None:
    """Raise ``CheckpointLoadError`` if a storage claims more bytes than the file stores for it.

    Why: with ``mmap`` torch maps each storage at its entry's offset with the size the pickle
    claims, so a short entry is not noticed: the tensor reads whatever follows it in the file.
    """
    try:
        with zipfile.ZipFile(filename) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith('data.pkl') and n.count('/') == 1]
            if not pickles:
                raise CheckpointLoadError(f'checkpoint {filename} is a zip archive without a '
                                          'data.pkl: not a PyTorch checkpoint')
            prefix = pickles[0][:-len('data.pkl')]
            unpickler = _RecordingUnpickler(io.BytesIO(archive.read(pickles[0])))
            unpickler.load()
            sizes = {info.filename: info.file_size for info in archive.infolist()}
    except CheckpointLoadError:
        raise
    except Exception as err:  # noqa: BLE001 -- any failure here is a damaged file
        raise CheckpointLoadError(
            f'checkpoint {filename} is truncated or corrupt and cannot be read: '
            f'{type(err).__name__}: {err}') from err
    for record in unpickler.storages:
        if len(record) != 5 or record[0] != 'storage':
            continue
        _, storage_type, key, _, numel = record
        item = _STORAGE_ITEM_BYTES.get(type(storage_type).__name__ if isinstance(
            storage_type, _Inert) else getattr(storage_type, '__name__', ''))
        entry = f'{prefix}data/{key}'
        if item is None or not isinstance(numel, int):
            continue
        held = sizes.get(entry)
        if held is None or numel * item > held:
            raise CheckpointLoadError(
                f'checkpoint {filename} is truncated or corrupt: storage {key} claims '
                f'{numel * item} bytes, the file holds {held or 0} for it')


def install_cpu_checkpoint_loader(*, allow_unsafe_globals: bool = False,
                                  extra_safe_globals: Sequence[Callable] = (),
                                  mmap: bool = True) -> dict[str, Callable]:
    """Make every checkpoint load through mmengine's ``CheckpointLoader`` land on the CPU.

    ``load_from``, ``resume`` (explicit or auto) and pretrained ``init_cfg`` all go through
    ``CheckpointLoader``, so overriding its schemes covers them without touching mmengine's
    source. Local files use :func:`load_checkpoint_to_cpu`; remote schemes (``http://``,
    ``torchvision://``, ``open-mmlab://``, ...) keep their loader but get ``map_location='cpu'``.
    The ``map_location`` mmengine asks for (``'cuda'`` on resume) is ignored on purpose: the
    Runner copies weights into parameters that already live on each rank's device, and
    ``Optimizer.load_state_dict`` moves state to its parameter's device.

    Returns:
        The schemes registered before, for :func:`restore_checkpoint_loader`.
    """
    previous = checkpoint_schemes()

    def load_from_local_to_cpu(filename: str, map_location: Any = None) -> Any:
        return load_checkpoint_to_cpu(filename, allow_unsafe_globals=allow_unsafe_globals,
                                      extra_safe_globals=extra_safe_globals, mmap=mmap)

    def remote_to_cpu(loader: Callable) -> Callable:
        def load_from_remote_to_cpu(filename: str, map_location: Any = None) -> Any:
            return loader(filename, map_location='cpu')

        return load_from_remote_to_cpu

    for prefix, loader in previous.items():
        new_loader = load_from_local_to_cpu if prefix == '' else remote_to_cpu(loader)
        CheckpointLoader.register_scheme(prefixes=prefix, loader=new_loader, force=True)
    return previous


def restore_checkpoint_loader(previous: dict[str, Callable]) -> None:
    """Put back the schemes returned by :func:`install_cpu_checkpoint_loader`."""
    set_checkpoint_schemes(previous)
