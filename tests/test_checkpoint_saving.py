"""Atomic saving with AtomicCheckpointHook, and auto-resume past corrupt checkpoints."""
import copy
import logging
import os
import random
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
import torch
from mmengine.fileio import BaseStorageBackend, FileClient, register_backend
from mmengine.hooks import Hook
from mmengine.runner import Runner

from mmdet_ext.engine.checkpoint_discovery import find_newest_loadable_checkpoint
from mmdet_ext.engine.checkpoint_loading import CheckpointLoadError, load_checkpoint_to_cpu
from mmdet_ext.engine import checkpoint_saving
from mmdet_ext.engine.checkpoint_saving import TEMP_SUFFIX, CheckpointSaveError, atomic_write_bytes
from helpers.tiny_runner import record_mmengine_log, tiny_runner_kwargs

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


@pytest.mark.parametrize('background', [True, False])
def test_hook_arguments_keep_working(tmp_path, background):
    """max_keep_ckpts, save_best and the last_checkpoint pointer behave as in CheckpointHook,
    saved in the background or not."""
    checkpoint = dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=2,
                      save_best='mean_logit', rule='greater', background=background)
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
    (ids are kept only for a positive one); the same weights and optimizer state whether saved in
    the background or not."""
    def saved(hook: str, **options) -> dict:
        work_dir = tmp_path / f'{hook}{options}'
        _runner(work_dir, max_epochs=1,
                checkpoint=dict(type=hook, interval=1, **keep, **options)).train()
        return load_checkpoint_to_cpu(str(work_dir / 'epoch_1.pth'))

    def runtime_info(checkpoint: dict) -> dict:
        return {key: value for key, value in checkpoint['message_hub']['runtime_info'].items()
                if key not in ('last_ckpt', 'experiment_name')}

    stock, background = saved('CheckpointHook'), saved('AtomicCheckpointHook')
    blocking = saved('AtomicCheckpointHook', background=False)
    assert runtime_info(background) == runtime_info(blocking) == runtime_info(stock)
    for state in ('state_dict', 'optimizer'):
        assert _same(background[state], blocking[state]) and _same(blocking[state], stock[state])


def _same(a, b) -> bool:
    """Equal nested containers, tensors equal in dtype, shape and every bit of value."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


class _HeldWrites:
    """Holds every checkpoint write of the background writer until ``release``: the real write,
    started only then, so that a save is in flight for as long as a test needs. Records the
    order in which writes start and end."""

    def __init__(self, monkeypatch) -> None:
        self.released, self.events = threading.Event(), []
        real = checkpoint_saving.atomic_write

        def held(write, filepath):
            if os.path.basename(filepath) == 'last_checkpoint':
                return real(write, filepath)
            assert self.released.wait(120), 'a held checkpoint write was never released'
            self.events.append(('start', os.path.basename(filepath)))
            real(write, filepath)
            self.events.append(('end', os.path.basename(filepath)))
        monkeypatch.setattr(checkpoint_saving, 'atomic_write', held)


class _SeenAfterEachIter(Hook):
    """After each training iteration (before the checkpoint hook saves): the save in flight,
    the checkpoints on disk and the pointer; releases the held writes at iteration ``release``."""

    def __init__(self, work_dir, writes: _HeldWrites, release: int) -> None:
        self.work_dir, self.writes, self.release, self.seen = work_dir, writes, release, []

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        pointer = self.work_dir / 'last_checkpoint'
        in_flight = checkpoint_saving.background_writer.in_flight()
        self.seen.append((runner.iter + 1, in_flight and os.path.basename(in_flight),
                          sorted(p.name for p in self.work_dir.glob('iter_*.pth')),
                          pointer.read_text() if pointer.exists() else None))
        if runner.iter + 1 == self.release:
            self.writes.released.set()


def test_training_goes_on_while_a_save_is_written_and_the_pointer_follows_the_rename(
        tmp_path, monkeypatch):
    """iter_2.pth's write is held until iteration 4: iterations 3 and 4 train meanwhile, the
    file is not there under its name, the pointer and the pruning wait for it; iteration 4's
    save waits for it (at most one in flight), and the run's end for the last one."""
    writes = _HeldWrites(monkeypatch)
    recorder = _SeenAfterEachIter(tmp_path, writes, release=4)
    runner = _runner(tmp_path, with_val=False, custom_hooks=[recorder],
                     train_cfg=dict(by_epoch=False, max_iters=6),
                     checkpoint=dict(type='AtomicCheckpointHook', interval=2, by_epoch=False,
                                     max_keep_ckpts=1))
    runner.train()
    assert recorder.seen[2:4] == [(3, 'iter_2.pth', [], None), (4, 'iter_2.pth', [], None)]
    for _, _, on_disk, pointer in recorder.seen:  # never a pointer to a file not in place
        assert pointer is None or os.path.basename(pointer) in on_disk
    assert writes.events == [(edge, f'iter_{i}.pth') for i in (2, 4, 6) for edge in ('start',
                                                                                    'end')]
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == ['iter_6.pth']
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_6.pth')
    assert load_checkpoint_to_cpu(str(tmp_path / 'iter_6.pth'))['meta']['iter'] == 6


class _StateAfterEachIter(Hook):
    """Copies of the weights and the optimizer state after each training iteration, before the
    checkpoint hook (priority VERY_LOW) saves them."""

    def __init__(self) -> None:
        self.states = {}

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self.states[runner.iter + 1] = copy.deepcopy(dict(
            state_dict=runner.model.state_dict(), optimizer=runner.optim_wrapper.state_dict()))


def test_a_save_in_flight_holds_the_state_of_its_own_step(tmp_path, monkeypatch):
    """iter_2.pth's write is held until iteration 4 while the model and the optimizer's
    momentum change in place in iterations 3 and 4: the file still holds iteration 2's state,
    every tensor bit for bit (a save serialised later from live tensors would hold a later
    step's: Lightning's mixed-step checkpoints, #20953)."""
    writes = _HeldWrites(monkeypatch)
    recorder, states = _SeenAfterEachIter(tmp_path, writes, release=4), _StateAfterEachIter()
    _runner(tmp_path, with_val=False, custom_hooks=[recorder, states],
            train_cfg=dict(by_epoch=False, max_iters=6),
            checkpoint=dict(type='AtomicCheckpointHook', interval=2, by_epoch=False)).train()
    assert recorder.seen[3][1] == 'iter_2.pth'  # iterations 3 and 4 ran with it in flight
    for step in (2, 4, 6):
        saved = load_checkpoint_to_cpu(str(tmp_path / f'iter_{step}.pth'))
        for part in ('state_dict', 'optimizer'):
            assert _same(saved[part], states.states[step][part]), (step, part)
    assert not _same(states.states[2]['state_dict'], states.states[4]['state_dict'])


def test_the_stager_copies_storages_once_and_reuses_them(tmp_path):
    """Views of one storage stay views of one copy; the copy is not changed by what happens to
    the originals afterwards (in-place updates, containers changed); the next save reuses the
    storages of the same size; the staged checkpoint saves as the original would have."""
    weight = torch.arange(12, dtype=torch.float32)
    momentum = {'momentum_buffer': torch.ones(3, 4)}
    history = [1.0, 2.0]
    checkpoint = dict(state_dict={'w': weight.view(3, 4), 'w_tail': weight[6:]},
                      optimizer=dict(state={0: momentum}, param_groups=[dict(lr=0.1)]),
                      message_hub=dict(history=history), meta=dict(iter=7))
    path = tmp_path / 'original.pth'
    torch.save(checkpoint, path)
    stager = checkpoint_saving.CheckpointStager()
    staged = stager.stage(checkpoint)
    weight.add_(100)
    momentum['momentum_buffer'].mul_(3)
    momentum['step'] = 5
    history.append(3.0)
    checkpoint['optimizer']['param_groups'][0]['lr'] = 0.01
    assert _same(staged, torch.load(path))
    tail = staged['state_dict']['w_tail']
    assert tail.untyped_storage().data_ptr() == staged['state_dict']['w'].untyped_storage(
        ).data_ptr() and tail.storage_offset() == 6
    torch.save(staged, tmp_path / 'staged.pth')
    assert _same(torch.load(tmp_path / 'staged.pth'), torch.load(path))
    first = {t.untyped_storage().data_ptr() for t in
             (staged['state_dict']['w'], staged['optimizer']['state'][0]['momentum_buffer'])}
    again = stager.stage(checkpoint)
    assert {t.untyped_storage().data_ptr() for t in
            (again['state_dict']['w'], again['optimizer']['state'][0]['momentum_buffer'])} == first
    assert torch.equal(again['state_dict']['w'], weight.view(3, 4))
    assert again['optimizer']['state'][0]['step'] == 5


def test_the_next_save_waits_for_the_one_in_flight_and_says_so(tmp_path, monkeypatch):
    writes = _HeldWrites(monkeypatch)
    writer = checkpoint_saving.BackgroundWriter()
    published = []
    with record_mmengine_log() as records:
        writer.submit(b'first', tmp_path / 'a.pth')
        writer.then(lambda: published.append(sorted(os.listdir(tmp_path))))
        second = threading.Thread(target=writer.submit, args=(b'second', tmp_path / 'b.pth'))
        second.start()
        deadline = time.monotonic() + 60
        while not any('Waiting for' in r.getMessage() for r in records):
            assert time.monotonic() < deadline, 'the second save did not say it waits'
            time.sleep(0.01)
        assert published == [] and os.listdir(tmp_path) == []  # nothing of it in place yet
        writes.released.set()
        second.join()
        writer.wait()
    waits = [f'Waiting for the checkpoint save in flight: {tmp_path / name}'
             for name in ('a.pth', 'b.pth')]  # b's only if the last wait came before its end
    assert [r.getMessage() for r in records] in (waits[:1], waits)
    assert published == [['a.pth']]  # run after the rename, before the next save began
    assert (tmp_path / 'a.pth').read_bytes() == b'first'
    assert (tmp_path / 'b.pth').read_bytes() == b'second'
    writer.then(lambda: published.append('at once'))  # nothing in flight
    assert published[-1] == 'at once'


@pytest.mark.parametrize('step_added', ['while it writes', 'after it failed'])
def test_a_failed_background_write_is_raised_once_naming_the_file(tmp_path, monkeypatch,
                                                                  step_added):
    """Whether the step that follows a save (the pointer, the pruning) is added while the write
    is held or once it has failed, it never runs; the failure is raised once."""
    writes = _HeldWrites(monkeypatch)
    writer = checkpoint_saving.BackgroundWriter()
    blocked = tmp_path / 'not_a_directory'
    blocked.write_bytes(b'')
    writer.submit(b'state', blocked / 'epoch_1.pth')
    if step_added == 'after it failed':
        writes.released.set()
        while writer.in_flight():
            time.sleep(0.01)
    writer.then(lambda: pytest.fail('a step after a failed save ran'))
    writes.released.set()
    with pytest.raises(CheckpointSaveError, match=rf'^{blocked}/epoch_1.pth: the checkpoint '
                                                  r'was not saved: (FileExistsError|'
                                                  r'NotADirectoryError): '):
        writer.wait()
    writer.wait()  # raised once
    writer.raise_if_failed()


class _ReleaseWhenWaited(Hook):
    """Releases the held writes when the run logs that it waits for the save in flight."""

    def __init__(self, writes: _HeldWrites) -> None:
        self.handler = logging.Handler()
        self.handler.emit = lambda record: 'Waiting for the checkpoint save in flight' in \
            record.getMessage() and writes.released.set()

    def before_run(self, runner) -> None:
        runner.logger.addHandler(self.handler)


class _SignalAt(Hook):
    def __init__(self, at: int) -> None:
        self.at = at

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if runner.iter + 1 == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_signal_save_waits_for_the_save_in_flight(tmp_path, monkeypatch):
    """SIGTERM at iteration 4 while iter_3.pth is being written (held until the signal save
    says it waits for it): iter_3.pth is finished first, then iter_4.pth is written before the
    process goes on to exit; the pointer names iter_4.pth."""
    from mmdet_ext.engine.hooks import PreemptedExit
    writes = _HeldWrites(monkeypatch)
    runner = _runner(tmp_path, with_val=False,
                     custom_hooks=[_ReleaseWhenWaited(writes), _SignalAt(4),
                                   dict(type='SignalCheckpointHook')],
                     train_cfg=dict(by_epoch=False, max_iters=8),
                     checkpoint=dict(type='AtomicCheckpointHook', interval=3, by_epoch=False))
    with pytest.raises(PreemptedExit):
        runner.train()
    assert writes.events == [('start', 'iter_3.pth'), ('end', 'iter_3.pth'),
                             ('start', 'iter_4.pth'), ('end', 'iter_4.pth')]
    assert (tmp_path / 'last_checkpoint').read_text() == str(tmp_path / 'iter_4.pth')
    for step in (3, 4):
        assert load_checkpoint_to_cpu(str(tmp_path / f'iter_{step}.pth'))['meta']['iter'] == step
    assert not _temp_files(tmp_path)


def test_a_run_after_a_crash_in_the_same_process_resumes_from_its_save_in_flight(
        tmp_path, monkeypatch):
    """A run ended by an exception does not wait for its save in flight (iter_2.pth, held); the
    next run of the process waits for it before auto-resume looks (and before it clears killed
    saves' temp files), and resumes from it."""
    from helpers.tiny_runner import CrashAtIter, RunnerLogRecorder
    writes = _HeldWrites(monkeypatch)
    save = dict(type='AtomicCheckpointHook', interval=2, by_epoch=False)
    crashing = _runner(tmp_path, with_val=False, custom_hooks=[CrashAtIter(3)], checkpoint=save,
                       train_cfg=dict(by_epoch=False, max_iters=6))
    with pytest.raises(RuntimeError, match='simulated crash'):
        crashing.train()
    assert not list(tmp_path.glob('iter_*.pth'))  # still held
    release, log = _ReleaseWhenWaited(writes), RunnerLogRecorder()
    release.priority = log.priority = 'HIGHEST'  # before CpuCheckpointLoadHook chooses
    resumed = _runner(tmp_path, with_val=False, resume=True, custom_hooks=[release, log],
                      checkpoint=save, train_cfg=dict(by_epoch=False, max_iters=6))
    resumed.train()
    assert f'Auto-resume: resuming from {tmp_path / "iter_2.pth"}' in log.messages()
    assert writes.events[:2] == [('start', 'iter_2.pth'), ('end', 'iter_2.pth')]
    assert load_checkpoint_to_cpu(str(tmp_path / 'iter_6.pth'))['meta']['iter'] == 6


def test_a_failing_write_stops_the_run_naming_the_file(tmp_path):
    """A write the system refuses (no file over 4 MB may be written, as a full disk refuses
    one): the trainer's 32 MB checkpoint fails in the background, and the run stops with an
    error naming the file and the cause; nothing of it is left, and no pointer."""
    work_dir = tmp_path / 'work'

    def at_most_4_mb() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4 << 20, 4 << 20))  # python ignores SIGXFSZ

    proc = subprocess.run([sys.executable, '-c', SAVE_EVERY_ITER, str(work_dir), '5'],
                          capture_output=True, timeout=300, cwd=TESTS_DIR,
                          preexec_fn=at_most_4_mb)
    assert proc.returncode != 0
    assert f'CheckpointSaveError: {work_dir}/iter_1.pth: the checkpoint was not saved: OSError: ' \
        '[Errno 27] File too large' in proc.stderr.decode(), proc.stderr.decode()[-3000:]
    assert not list(work_dir.glob('iter_*.pth')) and not _temp_files(work_dir)
    assert not (work_dir / 'last_checkpoint').exists()


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
    Even trials kill a trainer frozen inside a checkpoint write (on the background writer:
    the default), odd ones anywhere (benchmarks/kill_trials.py runs 20 kills inside saves)."""
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
