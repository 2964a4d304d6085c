"""A pickle module for ``torch.load`` that rebuilds tensors and allowlisted globals, nothing else.

Why: ``torch.load(weights_only=True)`` takes extra allowed globals only since torch 2.4
(``torch.serialization.safe_globals``); before that its list is fixed, and mmengine's checkpoints
(``HistoryBuffer``, numpy arrays) fall outside it. Given to ``torch.load`` as ``pickle_module``,
this module keeps the same guarantee on any torch: every global a pickle names goes through
``find_class`` (the Python docs' "restricting globals"), which returns only what torch's own
weights-only unpickler allows (tensors, storages, dtypes, containers: its list for the running
version) and the caller's allowlist, and refuses anything else, naming the file and the global.
"""
import _codecs
import _compat_pickle
import collections
import pickle
import types
from collections.abc import Mapping
from typing import Any, BinaryIO

import torch._weights_only_unpickler


# Plain data types that torch's later lists allow and torch 2.1's lacks, found in mmengine's
# checkpoints: LR schedulers keep a Counter (MultiStepLR's milestones); protocol-2 pickles
# (torch.save's default) spell bytes, e.g. a numpy array's data, as _codecs.encode(text, 'latin1').
_PLAIN_DATA = {
    '_codecs.encode': _codecs.encode,
    'builtins.bytearray': bytearray,
    'builtins.complex': complex,
    'builtins.set': set,
    'builtins.frozenset': frozenset,
    'collections.Counter': collections.Counter,
    'collections.OrderedDict': collections.OrderedDict,
}


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global outside the allowlist; nothing of it was called."""

    def __init__(self, filename: str, global_name: str) -> None:
        super().__init__(f'{filename}: global {global_name} is not in the checkpoint allowlist')
        self.filename = filename
        self.global_name = global_name


def _python3_name(module: str, name: str) -> str:
    """The Python 3 spelling of a global that a protocol < 3 pickle may name the Python 2 way
    (``__builtin__.set``, ``copy_reg._reconstructor``), as pickle's own ``find_class`` maps it."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    else:
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
    return f'{module}.{name}'


def allowlist_pickle_module(allowed: Mapping[str, Any], filename: str) -> types.ModuleType:
    """A ``pickle_module`` for ``torch.load`` that unpickles only tensors and ``allowed``.

    Args:
        allowed: dotted global name (``'mmengine.logging.history_buffer.HistoryBuffer'``) -> the
            object to return for it (which may be a restricted stand-in, e.g. for ``getattr``).
        filename: named in the error of a refused global.

    Returns:
        A module with ``Unpickler`` and ``load``, what ``torch.load`` uses of ``pickle``.
        Unpickling raises :class:`RefusedGlobal` at the first global outside the allowlist.
    """
    table = {**_PLAIN_DATA, **torch._weights_only_unpickler._get_allowed_globals()}
    table.update((_python3_name(*name.rsplit('.', 1)), obj) for name, obj in allowed.items())

    class AllowlistUnpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            full_name = _python3_name(module, name)
            if full_name not in table:
                raise RefusedGlobal(filename, full_name)
            return table[full_name]

    def load(file: BinaryIO, **kwargs: Any) -> Any:
        return AllowlistUnpickler(file, **kwargs).load()

    module = types.ModuleType('mmdet_ext_allowlist_pickle')
    module.Unpickler = AllowlistUnpickler
    module.load = load
    return module
