"""The torch version seam (mmdet_ext/_torch_compat.py) and the allowlist unpickler it falls back
to where torch has no ``safe_globals`` (torch 2.1). Both loaders run wherever torch has them, so
CI's torch checks the fallback against torch's own mechanism on real mmengine checkpoints."""
import os
import pickle

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer

from mmdet_ext import _torch_compat
from mmdet_ext.allowlist_pickle import RefusedGlobal
from mmdet_ext.engine.checkpoint_loading import (CheckpointLoadError, checkpoint_safe_globals,
                                                 load_checkpoint_to_cpu)

LOADERS = sorted(_torch_compat.ALLOWLISTED_LOADERS)


def _load(loader: str, path, mmap: bool = False):
    return _torch_compat.ALLOWLISTED_LOADERS[loader](str(path), checkpoint_safe_globals(),
                                                     mmap=mmap)


def _assert_same(a, b) -> None:
    """Equal values of the same types, tensors by value, HistoryBuffers by their data."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.device == b.device and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, HistoryBuffer):
        _assert_same(a.data, b.data)
        assert a.mean() == b.mean()  # its pickled statistics methods came back bound
    else:
        assert a == b


def test_the_running_torch_uses_its_own_mechanism_where_it_has_one():
    has_safe_globals = hasattr(torch.serialization, 'safe_globals')
    assert ('safe_globals' in LOADERS) == has_safe_globals
    expected = (_torch_compat.load_with_safe_globals if has_safe_globals
                else _torch_compat.load_with_allowlist_pickle)
    assert _torch_compat.load_allowlisted is expected


@pytest.mark.parametrize('mmap', [False, True])
def test_allowlist_pickle_loads_what_mmengine_writes(stock_checkpoint, mmap):
    """A real mmengine checkpoint (model, optimizer, message hub history, numpy metadata)."""
    checkpoint = _load('allowlist_pickle', stock_checkpoint, mmap=mmap)
    assert isinstance(checkpoint['message_hub']['log_scalars']['train/loss'], HistoryBuffer)
    assert checkpoint['state_dict'] and all(
        t.device.type == 'cpu' for t in checkpoint['state_dict'].values())
    for loader in LOADERS:
        _assert_same(_load(loader, stock_checkpoint), checkpoint)


@pytest.mark.parametrize('loader', LOADERS)
def test_legacy_and_numpy_checkpoints_load(tmp_path, loader):
    """The pre-zip format (pickle_module.load and Unpickler both) and numpy values in meta."""
    value = {'meta': {'score': np.float64(0.5), 'hist': np.arange(3.0), 'shape': torch.Size([2])},
             'state_dict': {'w': torch.arange(6, dtype=torch.float16).reshape(2, 3)}}
    path = tmp_path / 'legacy.pth'
    torch.save(value, path, _use_new_zipfile_serialization=False)
    _assert_same(_load(loader, path), value)


class _RunsCode:
    def __init__(self, marker) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f'touch {self.marker}',))


class _ReachesIntoNumpy:
    def __reduce__(self):
        return (getattr, (np.ndarray, 'tofile'))


@pytest.mark.parametrize('zip_format', [True, False])
def test_allowlist_pickle_refuses_code_naming_file_and_global(tmp_path, zip_format):
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'x': _RunsCode(marker)}, path,
               _use_new_zipfile_serialization=zip_format)
    with pytest.raises(RefusedGlobal) as refused:
        _load('allowlist_pickle', path)
    assert refused.value.global_name == f'{os.system.__module__}.system'  # posix.system
    assert str(path) in str(refused.value) and 'posix.system' in str(refused.value)
    assert isinstance(refused.value, pickle.UnpicklingError)  # what torch's own refusal raises
    assert not marker.exists()


def test_allowlist_pickle_limits_getattr_to_history_buffer(tmp_path):
    path = tmp_path / 'getattr.pth'
    torch.save({'x': _ReachesIntoNumpy()}, path)
    with pytest.raises(pickle.UnpicklingError, match='tofile'):
        _load('allowlist_pickle', path)


def test_load_checkpoint_to_cpu_names_file_and_global(tmp_path):
    """Whichever loader the running torch uses, the error names the file and the global."""
    marker = tmp_path / 'pwned'
    path = tmp_path / 'evil.pth'
    torch.save({'meta': {}, 'x': _RunsCode(marker)}, path)
    with pytest.raises(CheckpointLoadError, match=r'evil\.pth holds .*posix\.system'):
        load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_extra_globals_reach_the_allowlist_pickle(tmp_path):
    path = tmp_path / 'custom.pth'
    torch.save({'meta': {'custom': torch.nn.Identity}}, path)
    with pytest.raises(RefusedGlobal, match='torch.nn.modules.linear.Identity'):
        _load('allowlist_pickle', path)
    loaded = _torch_compat.load_with_allowlist_pickle(
        str(path), [*checkpoint_safe_globals(), torch.nn.Identity], mmap=False)
    assert loaded['meta']['custom'] is torch.nn.Identity


@pytest.mark.skipif(not _torch_compat.FAKE_KERNELS,
                    reason=f'torch {torch.__version__} has no fake-kernel registration')
def test_every_op_has_a_fake_kernel():
    """register_fake reached torch for every op the extension defines."""
    import mmdet_ext.ops  # noqa: F401  (registers the fake kernels)

    ops = [name for name in torch._C._dispatch_get_all_op_names()
           if name.startswith('mmdet_ext::')]
    assert len(ops) > 10
    for name in ops:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, 'Meta'), name
