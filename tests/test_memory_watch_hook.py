"""MemoryWatchHook inside the real mmengine Runner, with real DataLoader worker processes.

Three datasets with known behaviour (tests/helpers/memory_cases.py) are trained for three short
epochs with two non-persistent workers; the verdicts must be: list of dicts -> sawtooth
(copy-on-write), appending -> leak, numpy -> flat, and the main process flat throughout.
"""
import json
import re
import sys
from pathlib import Path

import matplotlib.image
import pytest
import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # this checkout, not an installed copy

import mmdet_ext  # noqa: E402
from mmdet_ext.engine.memory import KeptGraphDetector, read_process_memory  # noqa: E402
from mmdet_ext.engine.memory.sampling import read_cuda_memory  # noqa: E402
from helpers.memory_cases import TinyModel  # noqa: E402

EPOCHS = 3
LENGTH = 320  # 40 iterations of 8 per epoch
# A bare torch worker copies 10-15 MiB just by running; the list-of-dicts case ~75 MiB. The
# default 200-iteration warm-up would leave the main process of these 120-iteration runs unknown.
HOOK = dict(type='MemoryWatchHook', interval=1, sawtooth_mib=32, warmup_iters=20)


def _runner(work_dir: Path, dataset: dict, hook: dict = HOOK, extra_hooks=(), epochs=EPOCHS,
            persistent_workers: bool = False) -> Runner:
    return Runner(
        model=TinyModel(),
        work_dir=str(work_dir),
        experiment_name=work_dir.name,
        default_scope='mmdet',
        train_dataloader=dict(
            dataset=dataset, batch_size=8, num_workers=2, persistent_workers=persistent_workers,
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate')),
        train_cfg=dict(by_epoch=True, max_epochs=epochs),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=10)),
        custom_hooks=[hook, *extra_hooks],
    )


def _verdicts(work_dir: Path) -> dict:
    report = json.loads((work_dir / 'memory.json').read_text())
    return {v['label']: v for v in report['verdicts']}


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """Train once per dataset; returns name -> (work_dir, runner)."""
    out = {}
    for name, dataset in (('cow', dict(type='ListOfDictsDataset', length=LENGTH)),
                          # 256 KiB per access: a slope several times the allocator's noise
                          # (at 64 KiB a full-suite run once judged it 'too short to judge').
                          ('leak', dict(type='AppendingDataset', length=LENGTH, leak_kib=256)),
                          ('flat', dict(type='NumpyDatasetFlat', length=LENGTH))):
        work_dir = tmp_path_factory.mktemp(name)
        runner = _runner(work_dir, dataset)
        runner.train()
        out[name] = (work_dir, runner)
    return out


# A flat worker's lives here are 40 iterations: one allocator step of ~5 MiB in the middle of
# two of them (a full-suite CI run on 2026-11-29 saw one) leaves a leak rate inside the slope's
# range, and 'too short to judge' is then the right answer (tests/test_memory_verdict.py checks
# that rule on given samples). Which one a run gets depends on the allocator, so either is
# accepted; a flat dataset is never a leak nor a sawtooth, and the cow and leak cases are exact.
_ACCEPTED = {'sawtooth': ('sawtooth',), 'leak': ('leak',), 'flat': ('flat', 'too short to judge')}


@pytest.mark.parametrize('name, expected', [('cow', 'sawtooth'), ('leak', 'leak'),
                                            ('flat', 'flat')])
def test_each_dataset_gets_its_verdict(runs, name, expected):
    work_dir, _ = runs[name]
    verdicts = _verdicts(work_dir)
    assert {'main', 'train.w0', 'train.w1'} <= set(verdicts)
    for worker in ('train.w0', 'train.w1'):
        assert verdicts[worker]['verdict'] in _ACCEPTED[expected], verdicts[worker]['reason']
        assert verdicts[worker]['lives'] == EPOCHS  # non-persistent: one pid per epoch
    # The main process is never blamed for the workers. Whether 120 iterations are enough to
    # call it flat depends on how its allocator moved in this run (tests/test_memory_verdict.py
    # checks that rule on given samples); a leak it never is.
    assert verdicts['main']['verdict'] in ('flat', 'too short to judge'), \
        verdicts['main']['reason']


def test_verdicts_are_separated_with_margin(runs):
    cow, leak, flat = (_verdicts(runs[n][0])['train.w0'] for n in ('cow', 'leak', 'flat'))
    assert cow['copied_mib'] > 2 * flat['copied_mib']
    assert cow['slope_mib_per_kiter'] < 10 < leak['slope_mib_per_kiter'] / 5
    assert flat['slope_mib_per_kiter'] < 10


def test_warnings_name_the_process_in_the_log(runs):
    for name, word in (('cow', 'SAWTOOTH'), ('leak', 'LEAK')):
        work_dir, runner = runs[name]
        log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text()
        assert f'MemoryWatch: train.w0 {word}:' in log
        assert re.search(rf'MemoryWatch after 120 iterations: main (flat|too short to judge) '
                         rf'\(.*train.w0 {word.lower()} \(', log)
    work_dir, runner = runs['flat']
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text()
    last = [line for line in log.splitlines() if 'MemoryWatch after' in line][-1]
    flat = '(flat|too short to judge)'  # see _ACCEPTED
    assert re.search(rf'main {flat} \(.*\), train.w0 {flat} \(.*\), train.w1 {flat} \(',
                     last), last


def test_samples_reach_message_hub_log_and_visualizer(runs):
    work_dir, runner = runs['flat']
    scalars = runner.message_hub.log_scalars
    for key in ('main_rss', 'main_uss', 'main_pss', 'train.w0_uss', 'train.w1_pss', 'total_pss'):
        assert f'train/mem/{key}' in scalars
    worker, total = (scalars[f'train/mem/{k}'].current() for k in ('train.w0_uss', 'total_pss'))
    assert 0 < worker < total
    vis = [json.loads(line) for line in
           Path(runner.log_dir, 'vis_data', 'scalars.json').read_text().splitlines()]
    assert any('mem/train.w1_uss' in entry for entry in vis)


def test_report_json_and_png(runs):
    work_dir, _ = runs['cow']
    report = json.loads((work_dir / 'memory.json').read_text())
    assert report['unit'] == 'MiB'
    assert report['epoch_starts'] == {'0': 0, '1': 40, '2': 80}
    w0 = report['series']['train.w0']
    assert len(set(w0['pid'])) == EPOCHS
    assert len(w0['iter']) == len(w0['uss']) == len(w0['anon']) == EPOCHS * LENGTH // 8
    image = matplotlib.image.imread(work_dir / 'memory.png')
    assert image.shape[0] > 400 and image.shape[1] > 800
    assert image[..., :3].std() > 0.05  # not a blank canvas


def _children_already_running() -> set:
    """Labels of this process's children from before a test (earlier tests in the same pytest
    process may leave some, e.g. multiprocessing's resource tracker); the hook rightly reports
    them as ``child.<pid>``."""
    import psutil
    return {f'child.{child.pid}' for child in psutil.Process().children()}


def test_persistent_workers_are_named_exactly(tmp_path):
    earlier_children = _children_already_running()
    runner = _runner(tmp_path, dict(type='NumpyDatasetFlat', length=160), epochs=2,
                     persistent_workers=True)
    runner.train()
    verdicts = _verdicts(tmp_path)
    for worker in ('train.w0', 'train.w1'):
        assert verdicts[worker]['lives'] == 1
    assert not any(label.startswith('child.') for label in set(verdicts) - earlier_children)


class KeepLossesHook(Hook):
    """The mistake under test: keeping every loss tensor, graph and all."""

    def __init__(self) -> None:
        self.losses = []

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None) -> None:
        self.losses.append(outputs['loss'])


def test_kept_loss_tensor_is_flagged(tmp_path):
    runner = _runner(tmp_path, dict(type='NumpyDatasetFlat', length=80), epochs=1,
                     extra_hooks=[KeepLossesHook()])
    runner.train()
    warnings = json.loads((tmp_path / 'memory.json').read_text())['warnings']
    kept = [w for w in warnings if w.startswith('outputs.loss from iteration')]
    assert len(kept) == 1, warnings  # once per key, not once per iteration
    assert 'loss.item()' in kept[0]


def test_clean_run_has_no_kept_graph_warning(runs):
    _, runner = runs['flat']
    hook = next(h for h in runner.hooks if type(h).__name__ == 'MemoryWatchHook')
    assert hook.warnings == []


def test_detector_flags_runtime_info_and_spares_dead_tensors():
    detector = KeptGraphDetector()
    w = torch.ones(2, requires_grad=True)
    detector.watch_outputs(1, dict(loss=(w * 2).sum()))  # dies at once: nothing holds it
    assert detector.check(5, {}) == []
    kept = (w * 3).sum()
    warnings = detector.check(6, {'train/last_loss': kept, 'lr': 0.1})
    assert len(warnings) == 1 and "runtime_info['train/last_loss']" in warnings[0]
    assert detector.check(7, {'train/last_loss': kept}) == []  # once per key
    with pytest.raises(ValueError, match='grace_iters'):
        KeptGraphDetector(grace_iters=0)


def test_ceiling_stops_the_run_with_the_report(tmp_path):
    hook = dict(HOOK, max_memory_fraction=1e-6)
    runner = _runner(tmp_path, dict(type='NumpyDatasetFlat', length=80), hook=hook, epochs=1)
    with pytest.raises(mmdet_ext.MemoryWatchError, match='over the ceiling') as err:
        runner.train()
    assert 'main' in str(err.value) and 'memory.json' in str(err.value)
    assert (tmp_path / 'memory.json').is_file() and (tmp_path / 'memory.png').is_file()


def test_stop_on_leak(tmp_path):
    hook = dict(HOOK, stop_on_leak=True)
    runner = _runner(tmp_path, dict(type='AppendingDataset', length=LENGTH), hook=hook)
    with pytest.raises(mmdet_ext.MemoryWatchError, match='stop_on_leak: train.w'):
        runner.train()
    assert runner.epoch < EPOCHS


@pytest.mark.parametrize('kwargs, message', [
    (dict(interval=0), 'interval'),
    (dict(max_memory_fraction=1.5), 'max_memory_fraction'),
    (dict(leak_mib_per_kiter=-1.0), 'leak_mib_per_kiter'),
])
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        mmdet_ext.MemoryWatchHook(**kwargs)


def test_base_runtime_config_enables_the_hook():
    from mmengine.config import Config
    cfg = Config.fromfile(REPO_ROOT / 'configs/_base_/mmdet_ext_runtime.py')
    types = [h['type'] for h in cfg.custom_hooks]
    assert 'MemoryWatchHook' in types


def test_process_reading_is_consistent():
    import psutil
    mem = read_process_memory(psutil.Process())
    assert 0 < mem.uss <= mem.pss <= mem.rss
    assert 0 < mem.anon <= mem.rss


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs CUDA')
def test_cuda_figures():
    x = torch.ones(1 << 20, device='cuda')
    cuda = read_cuda_memory()
    assert cuda['allocated'] >= 4.0 and cuda['reserved'] >= cuda['allocated']
    del x


def test_other_children_are_not_taken_for_workers(tmp_path):
    import multiprocessing
    manager = multiprocessing.Manager()  # an older child, like a Manager list shared by workers
    try:
        earlier_children = _children_already_running() - {f'child.{manager._process.pid}'}
        runner = _runner(tmp_path, dict(type='NumpyDatasetFlat', length=80), epochs=1)
        runner.train()
        labels = set(json.loads((tmp_path / 'memory.json').read_text())['series'])
        assert labels - earlier_children == {'main', 'total', 'train.w0', 'train.w1',
                          f'child.{manager._process.pid}'}
    finally:
        manager.shutdown()


def test_plot_draws_cuda_and_marks_verdicts(tmp_path):
    from mmdet_ext.engine.memory import MemoryRecord, VerdictThresholds, plot_record
    iters = list(range(1, 61))
    series = dict(
        main=dict(iter=iters, epoch=[0] * 60, pid=[1] * 60, rss=[500.0] * 60, uss=[90.0] * 60,
                  pss=[200.0] * 60, anon=[300.0 + i for i in iters]),
        cuda=dict(iter=iters, epoch=[0] * 60, pid=[0] * 60, allocated=[100.0] * 60,
                  reserved=[900.0] * 60, peak=[300.0] * 60))
    record = MemoryRecord.from_dict(dict(series=series, epoch_starts={'0': 0}))
    verdicts = {v.label: v.verdict for v in record.judge(VerdictThresholds(warmup_iters=5))}
    assert verdicts == {'main': 'leak', 'cuda': 'flat'}
    path = plot_record(record, record.judge(VerdictThresholds()), tmp_path / 'm.png')
    image = matplotlib.image.imread(path)
    assert image.shape[0] >= 600 and image[..., :3].std() > 0.05  # two panels: main, CUDA


def test_worker_leak_is_named_once_it_lasted_and_stays_named(tmp_path):
    # Persistent workers keeping 32 KiB per sample: 128 MiB/1000 iter each, a leak by the default
    # thresholds (10 MiB/1000 iter) that the rule still must not name in the first epochs. With
    # the default 200-iteration warm-up and 200-iteration epochs, it cannot name it before 3
    # epochs past the warm-up (iteration 800); the run goes on to 1000 for a margin. The leak is
    # large beside the allocator's steps on purpose: the heap grows when its free space runs out,
    # and how much free space a worker has (pickling buffers, batches run ahead) varies with the
    # load. At 4 and 8 KiB (16, 32 MiB/1000 iter), loaded CI runs left the 99% range's low end
    # under 10 at 1000 iterations ("too short to judge"); how soon a slow leak is named on such
    # data is the detector benchmark's question (benchmarks/results/memory_detector.md), not a
    # pass/fail one. What the hook says before 800 depends on the samples, so only "not a leak"
    # is asserted there. The hook's defaults: every iteration sampled at first, the record
    # thinned as it fills.
    hook = dict(type='MemoryWatchHook', sawtooth_mib=32)
    runner = _runner(tmp_path, dict(type='AppendingDataset', length=1600, leak_kib=32),
                     hook=hook, epochs=5, persistent_workers=True)
    runner.train()
    log = Path(runner.log_dir, f'{runner.timestamp}.log').read_text()
    lines = [line for line in log.splitlines() if 'MemoryWatch after' in line]
    assert [line.split('MemoryWatch after ')[1].split(' ')[0] for line in lines] == [
        '200', '400', '600', '800', '1000']
    for early in lines[:3]:
        assert ' leak (' not in early, early
    assert 'train.w0 leak' in lines[-1] and 'train.w1 leak' in lines[-1], lines[-1]
    assert not re.search(r'main leak \(', lines[-1]), lines[-1]
    report = json.loads((tmp_path / 'memory.json').read_text())
    verdicts = {v['label']: v for v in report['verdicts']}
    assert verdicts['train.w0']['slope_mib_per_kiter'] == pytest.approx(128, rel=0.25)
    assert verdicts['train.w0']['lives'] == 1
    assert set(report['meta']['leaks_named_at']) == {'train.w0', 'train.w1'}
    # 1000 iterations fit in 400 samples: the interval doubled, the samples span the whole run.
    main = report['series']['main']['iter']
    assert report['meta']['interval'] >= 2 and 200 <= len(main) <= 400
    assert main[0] == 1 and main[-1] == 1000


def test_a_named_leak_is_not_taken_back_by_the_next_judgement():
    # The hook remembers what it named. A steady 100 MiB/1000 iter climb is named a leak after
    # 120 iterations; then the samples start to swing by +-30 MiB around the same climb. A
    # fresh judgement of all 240 would want a growth of 3x that noise before naming it, but a
    # leak rate still fits the samples: the named leak stays named.
    from mmdet_ext.engine.memory import MemoryRecord
    hook = mmdet_ext.MemoryWatchHook(warmup_iters=10, min_samples=6)
    iters = list(range(1, 241))
    anon = [300.0 + 0.1 * i + (0.0 if i <= 120 else 30.0 if i % 2 else -30.0) for i in iters]

    def record_until(last: int) -> MemoryRecord:
        values = anon[:last]
        return MemoryRecord.from_dict(dict(series=dict(main=dict(
            iter=iters[:last], epoch=[0] * last, pid=[1] * last, rss=values, uss=values,
            pss=values, anon=values)), epoch_starts={'0': 0}))

    hook.record = record_until(120)
    assert [v.verdict for v in hook._judge_now(120)] == ['leak']
    assert hook.named_leaks == {'main': 120}
    hook.record = record_until(240)
    fresh = hook.record.judge(hook.thresholds)[0]
    assert fresh.verdict == 'too short to judge', fresh.reason
    kept = hook._judge_now(240)[0]
    assert kept.verdict == 'leak' and 'called a leak at iteration 120' in kept.reason, kept
    assert hook.named_leaks == {'main': 120}
