"""Atomic saving with AtomicCheckpointHook, and auto-resume past corrupt checkpoints."""
import logging
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from mmengine.fileio import BaseStorageBackend, FileClient, register_backend
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mmdet_ext.engine.checkpoint_discovery import find_newest_loadable_checkpoint
from mmdet_ext.engine.checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu
from mmdet_ext.engine.checkpoint_saving import TEMP_SUFFIX, atomic_write_bytes
from helpers.tiny_runner import tiny_runner_kwargs

# The trainers' cwd: `python -c` puts it on sys.path, and helpers/ lives in tests/.
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))

_experiments = iter(range(10**6))


def _runner(work_dir, **kwargs) -> Runner:
    return Runner(**tiny_runner_kwargs(str(work_dir), experiment_name=f'save{next(_experiments)}',
                                       **kwargs))


def _warnings(runner: Runner, level: int = logging.WARNING) -> list[logging.LogRecord]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level=level)
    handler.emit = records.append
    runner.logger.addHandler(handler)
    return records


def test_atomic_write_replaces_and_leaves_no_temp_file(tmp_path):
    target = tmp_path / 'sub' / 'file.bin'
    atomic_write_bytes(b'old', target)
    atomic_write_bytes(b'new', target)
    assert target.read_bytes() == b'new'
    assert os.listdir(target.parent) == ['file.bin']


def test_hook_arguments_keep_working(tmp_path):
    """max_keep_ckpts, save_best and the last_checkpoint pointer behave as in CheckpointHook."""
    checkpoint = dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=2,
                      save_best='mean_logit', rule='greater')
    _runner(tmp_path, max_epochs=3, checkpoint=checkpoint).train()
    names = sorted(os.listdir(tmp_path))
    assert 'epoch_1.pth' not in names and {'epoch_2.pth', 'epoch_3.pth'} <= set(names)
    assert any(name.startswith('best_mean_logit_epoch_') for name in names)
    assert not any(name.endswith(TEMP_SUFFIX) for name in names)
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'epoch_3.pth')
    resumed = load_checkpoint_to_cpu(str(tmp_path / 'epoch_3.pth'))
    assert resumed['message_hub']['runtime_info']['keep_ckpt_ids'] == [2, 3]


class _CheckpointsPresentAtEachSave(Hook):
    """Records, inside each save (the runner calls it before writing), the checkpoints on disk."""

    def __init__(self, work_dir) -> None:
        self.work_dir, self.seen = work_dir, []

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        self.seen.append(sorted(p.name for p in self.work_dir.glob('epoch_*.pth')))


@pytest.mark.parametrize('hook', ['AtomicCheckpointHook', 'CheckpointHook'])
def test_the_previous_checkpoint_stays_until_the_next_one_is_saved(tmp_path, hook):
    """With max_keep_ckpts=1 the stock hook deletes the only checkpoint before it writes the
    next (a kill then leaves none); ours deletes it after. The stock run is the control."""
    recorder = _CheckpointsPresentAtEachSave(tmp_path)
    _runner(tmp_path, max_epochs=3, custom_hooks=[recorder],
            checkpoint=dict(type=hook, interval=1, max_keep_ckpts=1)).train()
    if hook == 'AtomicCheckpointHook':
        assert recorder.seen == [[], ['epoch_1.pth'], ['epoch_2.pth']]
    else:
        assert recorder.seen == [[], [], []]
    assert sorted(p.name for p in tmp_path.glob('epoch_*.pth')) == ['epoch_3.pth']


@pytest.mark.parametrize('keep', [{}, dict(max_keep_ckpts=0), dict(max_keep_ckpts=2)],
                         ids=['default', 'zero', 'two'])
def test_a_checkpoint_holds_what_the_stock_hooks_holds(tmp_path, keep):
    """Same runtime information in the file as CheckpointHook's, whatever max_keep_ckpts says
    (ids are kept only for a positive one)."""
    def runtime_info(hook: str) -> dict:
        work_dir = tmp_path / hook
        _runner(work_dir, max_epochs=1, checkpoint=dict(type=hook, interval=1, **keep)).train()
        info = load_checkpoint_to_cpu(str(work_dir / 'epoch_1.pth'))['message_hub']
        return {key: value for key, value in info['runtime_info'].items()
                if key not in ('last_ckpt', 'experiment_name')}

    assert runtime_info('AtomicCheckpointHook') == runtime_info('CheckpointHook')


def _train_two_epochs(work_dir) -> None:
    _runner(work_dir, max_epochs=2).train()


def test_auto_resume_skips_a_truncated_latest_checkpoint(tmp_path):
    _train_two_epochs(tmp_path)
    latest = tmp_path / 'epoch_2.pth'
    latest.write_bytes(latest.read_bytes()[:3000])  # as a non-atomic save killed midway
    runner = _runner(tmp_path, max_epochs=3, resume=True)
    warnings = _warnings(runner, logging.INFO)
    runner.train()
    assert any(f'skipping {latest}' in w.getMessage() for w in warnings)
    assert f'Auto-resume: resuming from {tmp_path / "epoch_1.pth"}' in \
        [w.getMessage() for w in warnings]
    assert load_checkpoint_to_cpu(str(tmp_path / 'epoch_3.pth'))['meta']['epoch'] == 3
    assert load_checkpoint_to_cpu(str(tmp_path / 'epoch_2.pth'))['meta']['epoch'] == 2  # rerun


def test_auto_resume_with_nothing_loadable_starts_fresh(tmp_path):
    _train_two_epochs(tmp_path)
    for name in ('epoch_1.pth', 'epoch_2.pth'):
        (tmp_path / name).write_bytes(b'PK\x03\x04 not a checkpoint')
    (tmp_path / 'last_checkpoint').write_text('')  # as a stock pointer write killed midway
    runner = _runner(tmp_path, max_epochs=1, resume=True)
    warnings = _warnings(runner)
    runner.train()
    assert any('training starts from scratch' in w.getMessage() for w in warnings)
    assert load_checkpoint_to_cpu(str(tmp_path / 'epoch_1.pth'))['meta']['epoch'] == 1


def test_explicit_corrupt_resume_is_an_error_naming_it(tmp_path):
    _train_two_epochs(tmp_path)
    latest = tmp_path / 'epoch_2.pth'
    latest.write_bytes(latest.read_bytes()[:3000])
    with pytest.raises(CheckpointLoadError, match=f'{latest}.*truncated or corrupt'):
        _runner(tmp_path, max_epochs=3, resume=True, load_from=str(latest)).train()


SAVE_EVERY_ITER = textwrap.dedent('''
    import sys

    import torch
    import torch.nn as nn
    from mmengine.runner import Runner

    from helpers.tiny_runner import TinyConvNet, tiny_runner_kwargs

    class BallastNet(TinyConvNet):
        """TinyConvNet plus 8 M frozen floats (32 MB), so that every save takes a while."""

        def __init__(self):
            super().__init__()
            self.ballast = nn.Parameter(torch.zeros(8_000_000), requires_grad=False)

    kwargs = tiny_runner_kwargs(sys.argv[1], with_val=False, model=BallastNet(), resume=True,
                                checkpoint=dict(type='AtomicCheckpointHook', interval=1,
                                                by_epoch=False, max_keep_ckpts=1))
    kwargs['train_cfg'] = dict(by_epoch=False, max_iters=int(sys.argv[2]))
    Runner(**kwargs).train()
''')


def _newest_iter(work_dir) -> int:
    return max((int(p.stem.split('_')[1]) for p in work_dir.glob('iter_*.pth')), default=0)


def _temp_files(work_dir) -> set[str]:
    return {n for n in os.listdir(work_dir) if n.endswith(TEMP_SUFFIX)} if work_dir.exists() \
        else set()


def _freeze_inside_a_write(proc: subprocess.Popen, work_dir, old: set[str],
                           deadline: float) -> None:
    """SIGSTOP ``proc`` while one of its checkpoint writes is open: a temp file not in ``old``
    still exists once the kernel shows it stopped. A write that ends before the stop is let go
    and the next one is tried, so the kill that follows lands inside a write on any machine."""
    process = psutil.Process(proc.pid)
    while True:
        while not _temp_files(work_dir) - old:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, 'trainer wrote no temp file in 120 s'
            time.sleep(0.002)
        process.suspend()
        while process.status() != psutil.STATUS_STOPPED:
            time.sleep(0.001)
        if _temp_files(work_dir) - old:
            return
        process.resume()


def test_kill_9_during_saving_always_leaves_a_resumable_checkpoint(tmp_path):
    """max_keep_ckpts=1 is the hard case: the stock hook deletes the old file before saving.
    Even trials kill a trainer frozen inside a checkpoint write, odd ones anywhere."""
    rng = random.Random(1234)
    work_dir = tmp_path / 'work'
    trials, killed_mid_save = 8, 0
    for trial in range(trials):
        before, old = _newest_iter(work_dir), _temp_files(work_dir)
        proc = subprocess.Popen([sys.executable, '-c', SAVE_EVERY_ITER, str(work_dir), '1000000'],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=TESTS_DIR)
        try:
            deadline = time.monotonic() + 120
            while _newest_iter(work_dir) <= before:  # wait until this trainer is saving
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, 'trainer made no checkpoint in 120 s'
                time.sleep(0.02)
            if trial % 2:  # anywhere in the training loop
                time.sleep(rng.uniform(0.0, 1.0))
            else:
                _freeze_inside_a_write(proc, work_dir, old, time.monotonic() + 120)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        inside = bool(_temp_files(work_dir) - old)
        assert inside or trial % 2, f'trial {trial}: the kill missed the write it was frozen in'
        killed_mid_save += inside
        newest = find_newest_loadable_checkpoint(str(work_dir), load_checkpoint_to_cpu)
        assert newest is not None, f'trial {trial}: no loadable checkpoint left'
        assert load_checkpoint_to_cpu(newest)['meta']['iter'] > before
    assert killed_mid_save >= trials // 2
    print(f'{killed_mid_save} of {trials} kills landed while a checkpoint was being written')
    # The real Runner resumes from what the kills left and trains one more iteration.
    last = _newest_iter(work_dir)
    subprocess.run([sys.executable, '-c', SAVE_EVERY_ITER, str(work_dir), str(last + 1)],
                   check=True, timeout=300, capture_output=True, cwd=TESTS_DIR)
    assert _newest_iter(work_dir) == last + 1
    assert not any(n.endswith(TEMP_SUFFIX) for n in os.listdir(work_dir))


class _ObjectStore(BaseStorageBackend):
    """A remote store as mmengine's storage backends register one (by URL prefix)."""

    def __init__(self, **kwargs) -> None:
        self.objects = {}

    def get(self, filepath):
        return self.objects[filepath]

    def get_text(self, filepath, encoding='utf-8'):
        return self.get(filepath).decode(encoding)

    def join_path(self, filepath, *filepaths):
        return '/'.join([filepath.rstrip('/'), *filepaths])


def test_a_remote_destination_keeps_its_own_backend(tmp_path):
    """Object stores' put is already all-or-nothing: only a local directory is made atomic."""
    from mmdet_ext.engine.hooks import AtomicCheckpointHook
    register_backend('mmdet_ext_test_store', _ObjectStore, force=True, prefixes='teststore')
    FileClient.register_backend('mmdet_ext_test_store', _ObjectStore, force=True,
                                prefixes='teststore')  # the stock hook also asks FileClient
    hook = AtomicCheckpointHook(interval=1, out_dir='teststore://bucket/checkpoints')
    hook.before_train(_runner(tmp_path, max_epochs=1))
    assert hook.backend_args is None and isinstance(hook.file_backend, _ObjectStore)
