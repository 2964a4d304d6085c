"""Which devices an op runs on in this build: the dispatcher's answer.

A CPU-only build (no nvcc, or ``torch.version.cuda`` None at build time) has no CUDA kernels, yet
its users may train on a GPU; callers with a torch fallback ask here instead of branching on
the device type, so a CUDA build uses its kernels with no change to the caller.
"""
import torch

from .._native import _C  # noqa: F401  (registers the ops asked about)

DISPATCH_KEYS = {'cpu': 'CPU', 'cuda': 'CUDA'}


def has_kernel(op_name: str, device: torch.device | str) -> bool:
    """Whether ``torch.ops.mmdet_ext.<op_name>`` has a kernel for tensors on ``device``."""
    key = DISPATCH_KEYS.get(torch.device(device).type)
    # torch offers no public query; tests/test_cuda_kernels.py pins this one's behaviour.
    return key is not None and torch._C._dispatch_has_kernel_for_dispatch_key(
        f'mmdet_ext::{op_name}', key)


def deferred_pixels_device(model_device: torch.device | str) -> torch.device:
    """Where ``resize_normalize_batch`` runs for a model on ``model_device``: there when this
    build has a kernel for it, else the CPU (a CPU-only build on a GPU machine). Copying the
    uint8 pixels anywhere else would only have them copied back."""
    device = torch.device(model_device)
    return device if has_kernel('resize_normalize_batch', device) else torch.device('cpu')
