"""Snapshots of every random number generator a CPU training step draws from.

Stored with plain Python types and tensors only, so checkpoints that carry them still load under
``weights_only=True`` with no extra allowlist entries.
"""
import random
from typing import Any

import numpy as np
import torch


def capture_rng_state() -> dict[str, Any]:
    """The state of python ``random``, numpy's global ``RandomState`` and torch's generators."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state: dict[str, Any] = {
        'python': random.getstate(),
        'numpy': (kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss,
                  cached_gaussian),
        'torch': torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state['cuda'] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`; CUDA states only where this process has GPUs."""
    version, internal, gauss_next = state['python']
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, cached_gaussian = state['numpy']
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state['torch'])
    if 'cuda' in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state['cuda'])
