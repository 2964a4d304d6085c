"""The one seam between mmdet_ext and the torch features that differ between supported versions.

Read from torch 2.1.2 (the classic mmdet 3.3 stack) and torch 2.13 (CI). Each difference is one
function, chosen once at import from what the running torch has; callers never test versions.

- :func:`register_fake`: ``torch.library.register_fake`` (torch >= 2.4), ``impl_abstract``
  (2.2, 2.3); on older torch no fake kernels (the ops run eagerly as everywhere, but
  ``torch.compile`` and ``torch.library.opcheck`` cannot trace them), logged once.
- :func:`load_allowlisted`: ``torch.load(weights_only=True)`` under
  ``torch.serialization.safe_globals`` where torch has it (2.13: yes, 2.1: no); else the same
  allowlist through :mod:`mmdet_ext.allowlist_pickle`. Never by turning safety off.
- :func:`unsafe_globals_in_checkpoint`: ``torch.serialization.get_unsafe_globals_in_checkpoint``
  (torch >= 2.5), or None where torch cannot list them.
- :func:`has_dimension_names`: whether a tensor has named dimensions (``Tensor.names``: torch
  2.1 has the prototype, 2.13 has no named tensors at all).
"""
import logging
from collections.abc import Callable, Sequence
from typing import Any, Optional, Union

import torch

from .allowlist_pickle import allowlist_pickle_module

SafeGlobal = Union[Callable, tuple[Callable, str]]

logger = logging.getLogger(__name__)

_fake_registration = (getattr(torch.library, 'register_fake', None)
                      or getattr(torch.library, 'impl_abstract', None))
FAKE_KERNELS = _fake_registration is not None
_skipped_fakes: list[str] = []


def register_fake(op_name: str) -> Callable[[Callable], Callable]:
    """``@torch.library.register_fake(op_name)`` where torch has it, a no-op before torch 2.2."""
    if FAKE_KERNELS:
        return _fake_registration(op_name)

    def skip(fake: Callable) -> Callable:
        if not _skipped_fakes:
            logger.warning(
                'mmdet_ext: torch %s has no fake-kernel registration (torch.library.register_fake, '
                'torch >= 2.4, or impl_abstract, 2.2): the mmdet_ext ops run as usual, but '
                'torch.compile and torch.library.opcheck cannot trace them.', torch.__version__)
        _skipped_fakes.append(op_name)
        return fake

    return skip


def _global_name(entry: SafeGlobal) -> str:
    if isinstance(entry, tuple):
        return entry[1]
    return f'{entry.__module__}.{entry.__qualname__}'


def allowlist_table(allowed: Sequence[SafeGlobal]) -> dict[str, Any]:
    """``safe_globals``-style entries (an object, or ``(object, 'dotted.name')``) by name."""
    return {_global_name(entry): entry[0] if isinstance(entry, tuple) else entry
            for entry in allowed}


def load_with_safe_globals(filename: str, allowed: Sequence[SafeGlobal], *, mmap: bool) -> Any:
    """``torch.load`` to the CPU under ``weights_only=True`` with ``allowed`` added to torch's
    list (``torch.serialization.safe_globals``); any other global raises
    ``pickle.UnpicklingError`` before anything of it runs."""
    with torch.serialization.safe_globals(list(allowed)):
        return torch.load(filename, map_location='cpu', weights_only=True, mmap=mmap)


def load_with_allowlist_pickle(filename: str, allowed: Sequence[SafeGlobal], *,
                               mmap: bool) -> Any:
    """The same load through :mod:`mmdet_ext.allowlist_pickle`, for any torch: any other global
    raises :class:`~mmdet_ext.allowlist_pickle.RefusedGlobal` (a ``pickle.UnpicklingError``)
    before anything of it runs. ``weights_only=False`` only because torch refuses a
    ``pickle_module`` beside it: the module given is the restriction."""
    module = allowlist_pickle_module(allowlist_table(allowed), filename)
    return torch.load(filename, map_location='cpu', weights_only=False, mmap=mmap,
                      pickle_module=module)


ALLOWLISTED_LOADERS = {'safe_globals': load_with_safe_globals,
                       'allowlist_pickle': load_with_allowlist_pickle}
if not hasattr(torch.serialization, 'safe_globals'):
    del ALLOWLISTED_LOADERS['safe_globals']
# Torch's own mechanism where it has one: it follows torch's format changes by construction.
load_allowlisted = next(iter(ALLOWLISTED_LOADERS.values()))


def unsafe_globals_in_checkpoint(filename: str) -> Optional[list[str]]:
    """The globals of a zip checkpoint outside torch's own weights-only list, or None where
    torch cannot list them (torch < 2.5)."""
    lister = getattr(torch.serialization, 'get_unsafe_globals_in_checkpoint', None)
    return None if lister is None else lister(filename)


_NAMED_TENSORS = hasattr(torch.Tensor, 'names')


def has_dimension_names(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` names any of its dimensions (never, where torch has no named tensors)."""
    return _NAMED_TENSORS and any(name is not None for name in tensor.names)
