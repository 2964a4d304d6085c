"""MemoryWatchHook returns the main process's free heap to the OS only when workers are about to
fork (benchmarks/results/demo_main_memory.md: in the toy Mask R-CNN demo, a trim at every epoch
start handed back ~250 MiB that the allocator took back within the epoch, a sawtooth in the main
process's anonymous RSS that the leak rule read as growth)."""
import sys
from pathlib import Path

import pytest
from mmengine.runner import Runner
from torch.utils.data import DataLoader

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # this checkout, not an installed copy

import mmdet_ext  # noqa: E402,F401
from mmdet_ext.engine.hooks import memory_watch_hook  # noqa: E402
from mmdet_ext.engine.memory import workers_will_fork  # noqa: E402
from helpers.memory_cases import TinyModel  # noqa: E402

EPOCHS = 3


def test_workers_will_fork():
    data = list(range(8))
    assert not workers_will_fork(DataLoader(data, num_workers=0))
    transient = DataLoader(data, num_workers=1)
    assert workers_will_fork(transient)
    list(transient)
    assert workers_will_fork(transient)  # forks again at every iter()
    persistent = DataLoader(data, num_workers=1, persistent_workers=True)
    assert workers_will_fork(persistent)
    list(persistent)
    assert not workers_will_fork(persistent)  # its workers live on


@pytest.mark.parametrize('persistent, train_trims, val_trims', [
    (True, 1, 1),             # the first train epoch and the first validation fork
    (False, EPOCHS, EPOCHS),  # every epoch and every validation fork
])
def test_heap_released_only_before_a_fork(tmp_path, monkeypatch, persistent, train_trims,
                                          val_trims):
    calls = []
    monkeypatch.setattr(memory_watch_hook, 'release_free_heap', lambda: calls.append(1))

    phases = []

    class Phase(memory_watch_hook.Hook):
        priority = 'LOWEST'

        def before_train_epoch(self, runner):
            phases.append(('train', len(calls)))

        def before_val_epoch(self, runner):
            phases.append(('val', len(calls)))

    loader = dict(dataset=dict(type='NumpyDatasetFlat', length=16, num_annotations=1000),
                  batch_size=8, num_workers=1, persistent_workers=persistent,
                  sampler=dict(type='DefaultSampler', shuffle=False),
                  collate_fn=dict(type='default_collate'))
    runner = Runner(
        model=TinyModel(), work_dir=str(tmp_path), default_scope='mmdet',
        train_dataloader=loader, val_dataloader=loader,
        val_evaluator=dict(type='DumpResults', out_file_path=str(tmp_path / 'results.pkl')),
        train_cfg=dict(by_epoch=True, max_epochs=EPOCHS, val_interval=1), val_cfg=dict(),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=10)),
        custom_hooks=[dict(type='MemoryWatchHook', warmup_iters=1), Phase()])
    runner.train()
    # trims made by each phase's before-hooks (the count seen at its end minus the previous)
    trims = [b - a for (_, a), (_, b) in zip([('', 0)] + phases, phases)]
    train = sum(t for (name, _), t in zip(phases, trims) if name == 'train')
    val = sum(t for (name, _), t in zip(phases, trims) if name == 'val')
    assert (train, val) == (train_trims, val_trims), phases
