"""CPU-first, allowlisted checkpoint loading, through the real mmengine Runner."""
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import torch
from mmengine.logging import HistoryBuffer
from mmengine.runner import Runner
from mmengine.runner.checkpoint import _load_checkpoint

from mmdet_ext.engine.checkpoint_loading import (CheckpointLoadError, checkpoint_safe_globals,
                                                 load_checkpoint_to_cpu)
from helpers.tiny_runner import TinyConvNet, record_mmengine_log, tiny_runner_kwargs

_experiments = iter(range(10**6))


def _runner(work_dir, **kwargs) -> Runner:
    return Runner(**tiny_runner_kwargs(str(work_dir), experiment_name=f'load{next(_experiments)}',
                                       **kwargs))


def _allowed_names() -> set:
    return {entry[1] if isinstance(entry, tuple) else f'{entry.__module__}.{entry.__qualname__}'
            for entry in checkpoint_safe_globals()}


@pytest.mark.skipif(not hasattr(torch.serialization, 'get_unsafe_globals_in_checkpoint'),
    reason=f'torch {torch.__version__} cannot list a checkpoint\'s globals (torch >= 2.5), nor '
    'refuses them by default (2.6)')
def test_allowlist_covers_what_mmengine_writes(stock_checkpoint):
    found = set(torch.serialization.get_unsafe_globals_in_checkpoint(stock_checkpoint))
    assert 'mmengine.logging.history_buffer.HistoryBuffer' in found
    assert found <= _allowed_names(), found - _allowed_names()
    with pytest.raises(pickle.UnpicklingError):  # why stock resume fails on torch >= 2.6
        torch.load(stock_checkpoint)


def test_stock_checkpoint_loads_to_cpu(stock_checkpoint):
    checkpoint = load_checkpoint_to_cpu(stock_checkpoint)
    assert isinstance(checkpoint['message_hub']['log_scalars']['train/loss'], HistoryBuffer)
    assert all(t.device.type == 'cpu' for t in checkpoint['state_dict'].values())


def test_numpy1_names_load(tmp_path):
    """Checkpoints written under numpy 1.x name ``numpy.core.multiarray``; they must still load."""
    path = tmp_path / 'numpy1.pth'
    torch.save({'meta': {'score': np.float64(0.5), 'hist': np.arange(3.0)}}, path)
    with zipfile.ZipFile(path) as archive:
        entries = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            if name.endswith('data.pkl'):
                data = data.replace(b'numpy._core.multiarray', b'numpy.core.multiarray')
            archive.writestr(name, data)
    meta = load_checkpoint_to_cpu(str(path), mmap=False)['meta']
    assert meta['score'] == 0.5 and meta['hist'].tolist() == [0.0, 1.0, 2.0]


CRAFT_CUDA1 = textwrap.dedent('''
    import sys, torch
    from helpers.tiny_runner import TinyConvNet
    # Tag every storage for cuda:1 while pickling, as a save on a GPU machine's second card does.
    torch.serialization.register_package(-100, lambda storage: 'cuda:1', lambda obj, loc: None)
    torch.manual_seed(3)
    torch.save({'meta': {'epoch': 0, 'iter': 0}, 'state_dict': TinyConvNet().state_dict()},
               sys.argv[1])
''')


@pytest.fixture(scope='module')
def cuda1_checkpoint(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp('cuda1') / 'cuda1.pth')
    # cwd: `python -c` puts it on sys.path, and helpers/ lives in tests/
    subprocess.run([sys.executable, '-c', CRAFT_CUDA1, path], check=True, timeout=120,
                   cwd=os.path.dirname(os.path.abspath(__file__)))
    return path


def test_cuda1_checkpoint_fails_in_plain_mmengine(cuda1_checkpoint):
    with zipfile.ZipFile(cuda1_checkpoint) as archive:
        pickled = archive.read(next(n for n in archive.namelist() if n.endswith('data.pkl')))
    assert b'cuda:1' in pickled
    with pytest.raises(RuntimeError, match='CUDA'):
        _load_checkpoint(cuda1_checkpoint)  # CheckpointLoader's default: no map_location


def test_cuda1_checkpoint_loads_to_cpu_through_the_hook(cuda1_checkpoint, tmp_path):
    from mmengine.hooks import Hook

    seen = set()
    loaded = {}

    class RecordDevicesAndWeights(Hook):
        def after_load_checkpoint(self, runner, checkpoint):
            seen.update(t.device.type for t in checkpoint['state_dict'].values())

        def before_train(self, runner):  # after load_from, before the first step
            loaded.update({k: v.detach().clone() for k, v in runner.model.state_dict().items()})

    runner = _runner(tmp_path, max_epochs=1, load_from=cuda1_checkpoint,
                     custom_hooks=[RecordDevicesAndWeights()])
    runner.train()
    assert seen == {'cpu'}
    torch.manual_seed(3)
    expected = TinyConvNet().state_dict()
    assert loaded.keys() == expected.keys()
    for key, weight in expected.items():  # what training started from: the checkpoint's values
        assert loaded[key].device.type == 'cpu' and torch.equal(loaded[key], weight), key
    saved = load_checkpoint_to_cpu(str(tmp_path / 'epoch_1.pth'))['state_dict']
    assert not all(torch.equal(saved[k], expected[k]) for k in expected)  # and it trained on


class _RunsCode:
    def __reduce__(self):
        return (os.system, (f'touch {self.marker}',))


def test_malicious_checkpoint_is_refused(tmp_path):
    marker = tmp_path / 'pwned'
    payload = _RunsCode()
    payload.marker = marker
    path = tmp_path / 'evil.pth'
    torch.save({'meta': {}, 'state_dict': {}, 'x': payload}, path)
    with pytest.raises(CheckpointLoadError, match=r'posix\.system.*extra_safe_globals'):
        load_checkpoint_to_cpu(str(path))
    with pytest.raises(CheckpointLoadError, match='evil.pth'):
        _runner(tmp_path / 'run', max_epochs=1, load_from=str(path)).train()
    assert not marker.exists()


class _ReachesIntoNumpy:
    def __reduce__(self):
        return (getattr, (np.ndarray, 'tofile'))


def test_getattr_is_limited_to_history_buffer_methods(tmp_path):
    path = tmp_path / 'getattr.pth'
    torch.save({'meta': {}, 'x': _ReachesIntoNumpy()}, path)
    with pytest.raises(CheckpointLoadError) as info:
        load_checkpoint_to_cpu(str(path))
    assert str(info.value).startswith(
        f"checkpoint {path} holds objects outside the safe allowlist: getattr(<class "
        "'numpy.ndarray'>, 'tofile') is not allowed in a checkpoint; only "
        "HistoryBuffer.{current, max, mean, min} are. If you trust this file, ")


def test_a_refusal_without_torchs_wording_is_named_by_its_first_line():
    from mmdet_ext.engine.checkpoint_loading import _unpickler_reason
    assert _unpickler_reason(pickle.UnpicklingError('invalid load key, 0x1f.\nmore')) == \
        'invalid load key, 0x1f.'


def test_a_text_file_is_named_with_its_first_sixteen_bytes(tmp_path):
    path = tmp_path / 'mask_rcnn.pth'
    path.write_text('<html><head><title>404 Not Found</title></head></html>')
    with pytest.raises(CheckpointLoadError) as info:
        load_checkpoint_to_cpu(str(path))
    assert str(info.value) == (
        f"checkpoint {path} is not a PyTorch checkpoint (neither a zip archive nor a pickle; it "
        "starts with b'<html><head><tit'): a text file or a download error page?")


def test_extra_safe_globals_allows_a_named_class(tmp_path):
    path = tmp_path / 'custom.pth'
    torch.save({'meta': {'custom': torch.nn.Identity}}, path)
    with pytest.raises(CheckpointLoadError) as info:
        load_checkpoint_to_cpu(str(path))
    assert str(info.value) == (
        f'checkpoint {path} holds objects outside the safe allowlist: '
        'torch.nn.modules.linear.Identity. If you trust this file, allow them deliberately in '
        "custom_hooks: dict(type='CpuCheckpointLoadHook', extra_safe_globals=["
        "'torch.nn.modules.linear.Identity']) keeps weights_only loading, or "
        'allow_unsafe_globals=True disables it (runs any pickled code).')
    assert load_checkpoint_to_cpu(str(path), extra_safe_globals=[torch.nn.Identity])[
        'meta']['custom'] is torch.nn.Identity


def test_allow_unsafe_globals_loads_and_warns(tmp_path):
    marker = tmp_path / 'ran'
    payload = _RunsCode()
    payload.marker = marker
    path = tmp_path / 'trusted.pth'
    torch.save({'x': payload}, path)
    with record_mmengine_log() as records:
        load_checkpoint_to_cpu(str(path), allow_unsafe_globals=True)
    assert marker.exists()
    assert any(r.levelno == logging.WARNING and 'weights_only=False' in r.getMessage()
               for r in records)


def test_truncated_explicit_checkpoint_is_an_error_naming_it(stock_checkpoint, tmp_path):
    path = tmp_path / 'epoch_9.pth'
    with open(stock_checkpoint, 'rb') as f:
        path.write_bytes(f.read()[:5000])
    with pytest.raises(CheckpointLoadError, match='epoch_9.pth.*truncated or corrupt'):
        _runner(tmp_path / 'run', max_epochs=1, load_from=str(path), resume=True).train()


STORAGE_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.float16, torch.bfloat16,
                  torch.int32, torch.float32, torch.int64, torch.float64, torch.complex64,
                  torch.complex128]


def test_every_storage_type_loads_as_saved_through_the_size_check(tmp_path):
    """The storage size check knows each storage type's item size: a checkpoint holding every
    one (and an untyped storage) loads, mapped, equal to what was saved."""
    saved = {str(dtype): torch.arange(5).to(dtype) for dtype in STORAGE_DTYPES}
    saved['untyped'] = torch.UntypedStorage(7)
    saved['untyped'].fill_(3)
    path = tmp_path / 'dtypes.pth'
    torch.save(saved, path)
    loaded = load_checkpoint_to_cpu(str(path))
    for dtype in STORAGE_DTYPES:
        assert loaded[str(dtype)].dtype == dtype and torch.equal(loaded[str(dtype)],
                                                                 saved[str(dtype)])
    assert bytes(loaded['untyped']) == bytes([3] * 7)


@pytest.mark.parametrize('dtype', STORAGE_DTYPES + ['untyped'], ids=str)
def test_a_storage_entry_shorter_than_its_tensor_is_refused_before_it_is_mapped(tmp_path, dtype):
    """A zip that is itself intact but holds one byte less for a storage than the pickle claims:
    mapped, the tensor would read whatever follows in the file."""
    path, short = tmp_path / 'whole.pth', tmp_path / 'short.pth'
    value = torch.UntypedStorage(16) if dtype == 'untyped' else torch.arange(16).to(dtype)
    nbytes = 16 * (1 if dtype == 'untyped' else dtype.itemsize)
    torch.save({'w': value}, path)
    with zipfile.ZipFile(path) as whole, zipfile.ZipFile(short, 'w') as out:
        entries = [info for info in whole.infolist() if '/data/' in info.filename]
        assert len(entries) == 1
        for info in whole.infolist():
            data = whole.read(info)
            out.writestr(info, data[:-1] if info is entries[0] else data)
    key = entries[0].filename.rpartition('/')[2]
    with pytest.raises(CheckpointLoadError) as info:
        load_checkpoint_to_cpu(str(short))
    assert str(info.value) == (f'checkpoint {short} is truncated or corrupt: storage {key} '
                               f'claims {nbytes} bytes, the file holds {nbytes - 1} for it')


@pytest.mark.skipif(not os.path.exists('/proc/self/maps'), reason='reads /proc/self/maps (Linux)')
def test_weights_are_mapped_from_the_file_by_default_and_read_when_asked(tmp_path):
    """The default maps the storages (no second copy of the weights in memory while they are
    copied into the model); ``mmap=False`` reads them."""
    path = tmp_path / 'mapped.pth'
    torch.save({'w': torch.arange(16.0)}, path)

    def mapped() -> bool:
        with open('/proc/self/maps') as f:
            return str(path) in f.read()

    loaded = load_checkpoint_to_cpu(str(path))
    assert mapped()
    del loaded
    assert not mapped()
    loaded = load_checkpoint_to_cpu(str(path), mmap=False)
    assert not mapped() and torch.equal(loaded['w'], torch.arange(16.0))


@pytest.mark.parametrize('options', [{}, dict(allow_unsafe_globals=True),
                                     dict(extra_safe_globals=['torch.nn.modules.linear.Identity'])],
                         ids=['default', 'allow_unsafe_globals', 'extra_safe_globals'])
def test_the_hooks_options_reach_load_from(tmp_path, options):
    """A checkpoint holding a class outside the allowlist: refused by default, loaded when the
    hook in the config says so."""
    path = tmp_path / 'custom.pth'
    torch.manual_seed(5)
    torch.save({'meta': {'custom': torch.nn.Identity}, 'state_dict': TinyConvNet().state_dict()},
               path)
    kwargs = tiny_runner_kwargs(str(tmp_path / 'run'), max_epochs=1, load_from=str(path),
                                experiment_name=f'load{next(_experiments)}')
    kwargs['custom_hooks'] = [dict(hook, **options) if hook['type'] == 'CpuCheckpointLoadHook'
                              else hook for hook in kwargs['custom_hooks']]
    if not options:
        with pytest.raises(CheckpointLoadError, match='torch.nn.modules.linear.Identity'):
            Runner(**kwargs).train()
        return
    Runner(**kwargs).train()
    assert load_checkpoint_to_cpu(str(tmp_path / 'run' / 'epoch_1.pth'))['meta']['epoch'] == 1
