"""Skip markers for tests of torch features that the oldest supported torch (2.1) lacks."""
import pytest
import torch

from mmdet_ext._torch_compat import FAKE_KERNELS

requires_opcheck = pytest.mark.skipif(
    not (FAKE_KERNELS and hasattr(torch.library, 'opcheck')),
    reason=f'torch {torch.__version__} has no torch.library.opcheck (torch >= 2.4) and the ops '
           'have no fake kernels there (mmdet_ext/_torch_compat.py)')
