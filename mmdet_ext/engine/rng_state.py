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
        # The current device's generator only: each rank trains on its own device, and the
        # other visible GPUs (none, one or all of the machine's) are no part of its state.
        state['cuda'] = torch.cuda.get_rng_state(torch.cuda.current_device())
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Inverse of :func:`capture_rng_state`; the CUDA state goes to the current device, and
    only where this process has GPUs.

    Checkpoints written before it saved one device carry a list, one state per GPU that
    process saw; the current device's entry is taken (the device a rank uses has the same
    index on every run of the same launch), none when that process saw fewer GPUs.
    """
    version, internal, gauss_next = state['python']
    random.setstate((version, tuple(internal), gauss_next))
    kind, keys, pos, has_gauss, cached_gaussian = state['numpy']
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached_gaussian))
    torch.set_rng_state(state['torch'])
    if 'cuda' not in state or not torch.cuda.is_available():
        return
    device, cuda = torch.cuda.current_device(), state['cuda']
    if isinstance(cuda, (list, tuple)):
        if device >= len(cuda):
            return
        cuda = cuda[device]
    torch.cuda.set_rng_state(cuda, device)
