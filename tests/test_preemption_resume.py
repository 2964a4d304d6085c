"""Save on a signal, then resume mid-epoch: the losses equal the uninterrupted run's, and the
resumed run loads only the samples it trains on. Real Runner, real signals, real workers;
the two-rank case under torchrun with gloo."""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mmengine.hooks import Hook
from mmengine.runner import Runner

from helpers.tiny_runner import LossRecorderHook, TinyFlipDataset, read_losses, tiny_runner_kwargs
from mmdet_ext.engine.hooks import PREEMPTED_EXIT_CODE, PreemptedExit

REPO = Path(__file__).resolve().parents[1]


class SignalSelfAt(Hook):
    """Sends ``signum`` to this process during iteration ``at`` (0-based), as a scheduler would."""
    priority = 'HIGHEST'

    def __init__(self, at: int, signum: int = signal.SIGTERM) -> None:
        self.at, self.signum = at, signum

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if runner.iter == self.at:
            os.kill(os.getpid(), self.signum)


def _loader(workers: int, persistent: bool, loads_file=None, sampler='DefaultSampler') -> dict:
    return dict(dataset=TinyFlipDataset(32, loads_file=loads_file), batch_size=4,
                num_workers=workers, persistent_workers=persistent,
                sampler=dict(type=sampler, shuffle=True), collate_fn=dict(type='default_collate'))


def _run(work_dir, name: str, *, workers: int, persistent: bool = False, hooks=(),
         iter_based: bool = False, **kwargs) -> None:
    loads = str(work_dir / f'{name}.loads')
    train_cfg = dict(type='IterBasedTrainLoop', max_iters=14, val_interval=100) if iter_based \
        else dict(by_epoch=True, max_epochs=3, val_interval=1)
    loader = _loader(workers, persistent, loads,
                     'InfiniteSampler' if iter_based else 'DefaultSampler')
    runner_kwargs = tiny_runner_kwargs(
        str(work_dir), experiment_name=name, with_val=not iter_based, train_dataloader=loader,
        train_cfg=train_cfg, custom_hooks=[dict(type='SignalCheckpointHook'), *hooks,
                                           LossRecorderHook(str(work_dir / 'losses.jsonl'))],
        **kwargs)
    if iter_based:
        runner_kwargs['default_hooks'] = dict(checkpoint=dict(
            type='AtomicCheckpointHook', interval=100, by_epoch=False))
        runner_kwargs['param_scheduler'] = dict(type='MultiStepLR', milestones=[6], gamma=0.5,
                                                by_epoch=False)
    Runner(**runner_kwargs).train()


def _loaded(work_dir, name: str) -> int:
    return len((work_dir / f'{name}.loads').read_text().split())


@pytest.mark.parametrize('iter_based', [False, True], ids=['epoch-based', 'iter-based'])
def test_signal_save_and_mid_epoch_resume_repeat_the_run(tmp_path, iter_based):
    full, cut = tmp_path / 'full', tmp_path / 'cut'
    # Reference without workers; the interrupted run with 2 persistent workers; the resumed one
    # with 1: per-sample seeds make the data independent of who loads it. Epoch-based: 8 batches
    # an epoch, so the signal lands at batch 6 of the second epoch (a position counted from an
    # epoch's start, not from the run's); iteration-based: in the first data epoch.
    at = 5 if iter_based else 13
    _run(full, 'full', workers=0, iter_based=iter_based)
    with pytest.raises(PreemptedExit) as stop:
        _run(cut, 'cut', workers=2, persistent=True, iter_based=iter_based,
             hooks=[SignalSelfAt(at)])
    assert stop.value.code == PREEMPTED_EXIT_CODE
    assert (cut / 'last_checkpoint').read_text().endswith(f'iter_{at + 1}.pth')
    _run(cut, 'resumed', workers=1, persistent=True, iter_based=iter_based, resume=True,
         seed=None)
    expected, got = read_losses(str(full / 'losses.jsonl')), read_losses(str(cut / 'losses.jsonl'))
    assert sorted(got) == sorted(expected) and len(expected) in (14, 24)
    assert got == expected
    # Loads nothing twice: the resumed epoch-based run loaded exactly the samples it trained on.
    # The iteration-based one also what its worker prefetched (prefetch_factor 2 x 4 samples)
    # past the last iteration and into the iterator mmengine builds with the loop, before any
    # hook runs; a constant, where mmengine's replay would load all 6 skipped batches.
    trained = 4 * (len(expected) - (at + 1))
    assert trained <= _loaded(cut, 'resumed') <= trained + (16 if iter_based else 0)


TWO_RANKS = textwrap.dedent('''
    import os, signal, sys
    import torch.distributed as dist
    from mmengine.runner import Runner
    import test_preemption_resume as t
    from helpers.tiny_runner import LossRecorderHook, tiny_runner_kwargs
    from mmdet_ext.engine.process_exit import run_and_exit

    work_dir, name, signal_rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = int(os.environ['RANK'])
    # As in test_checkpoint_distributed.py: gloo set up here, DDP without device_ids (CPU).
    dist.init_process_group('gloo')
    hooks = [dict(type='SignalCheckpointHook'),
             LossRecorderHook(f'{work_dir}/losses{rank}.jsonl')]
    if rank == signal_rank:  # only this rank is signalled: the other must stop with it
        hooks.append(t.SignalSelfAt(2, signal.SIGUSR1))
    kwargs = tiny_runner_kwargs(
        work_dir, experiment_name=name, launcher='pytorch', max_epochs=2,
        train_dataloader=t._loader(0, False), custom_hooks=hooks, resume=name == 'resumed',
        cfg=dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel', device_ids=None)))
    run_and_exit(Runner(**kwargs).train)  # exit status 0 or 75, as tools/train.py ends a rank
''')


def _two_ranks(work_dir, name: str, signal_rank: int = -1) -> list[int]:
    """Both ranks of a gloo job as plain processes (as torchrun starts them); their exit codes.

    Without DataLoader workers: the single-process tests above cover those, and persistent
    workers add ~5 s to every exit (torch joins them with a 5 s timeout).
    """
    work_dir.mkdir(exist_ok=True)
    script = work_dir / 'two_ranks.py'
    script.write_text(TWO_RANKS)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'WORLD_SIZE': '2', 'LOCAL_WORLD_SIZE': '2',
           'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': str(20000 + os.getpid() % 20000),
           'PYTHONPATH': os.pathsep.join([tests_dir, os.environ.get('PYTHONPATH', '')])}
    procs = [subprocess.Popen([sys.executable, str(script), str(work_dir), name, str(signal_rank)],
                              env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in (0, 1)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    (work_dir / f'{name}.out').write_text('\n'.join(outputs))
    return [p.returncode for p in procs]


def test_two_ranks_agree_save_on_one_ranks_signal_and_resume_exactly(tmp_path):
    full, cut = tmp_path / 'full', tmp_path / 'cut'
    assert _two_ranks(full, 'full') == [0, 0]
    # 32 samples, 2 ranks x 4: 4 batches an epoch; rank 1 alone gets SIGUSR1 in iteration 2.
    assert _two_ranks(cut, 'cut', signal_rank=1) == [PREEMPTED_EXIT_CODE] * 2
    log = (cut / 'cut.out').read_text()
    assert 'SIGUSR1 received (this rank: no, another rank)' in log
    assert (cut / 'last_checkpoint').read_text().endswith('iter_3.pth')
    assert _two_ranks(cut, 'resumed') == [0, 0]
    assert 'continues at batch 4' in (cut / 'resumed.out').read_text()
    for rank in (0, 1):
        expected = read_losses(str(full / f'losses{rank}.jsonl'))
        assert sorted(expected) == list(range(8))
        assert read_losses(str(cut / f'losses{rank}.jsonl')) == expected
    assert read_losses(str(full / 'losses0.jsonl')) != read_losses(str(full / 'losses1.jsonl'))


def test_skip_draws_aspect_ratio_batches_exactly(mixed_coco_root):
    """mmdet's AspectRatioBatchSampler regroups indices: the skip draws its batches (indices
    only) instead of slicing the index list, so the rest of the epoch is the same batches.
    mixed_coco_root has portrait images among landscape ones, so the regrouping shows."""
    from mmdet.datasets.samplers import AspectRatioBatchSampler

    from mmdet_ext.datasets.sample_seeds import install_resumable_loading
    loader = _toy_train_loader(mixed_coco_root, batch_size=3)
    assert type(loader.batch_sampler) is AspectRatioBatchSampler
    batches = install_resumable_loading(loader, seed=5, rank=0)
    sampler = loader.batch_sampler.sampler
    sampler.set_epoch(1)
    full = list(batches)
    order = list(sampler)
    mmdet = list(AspectRatioBatchSampler(sampler, batch_size=3))
    assert [[key.index for key in batch] for batch in full] == mmdet
    sliced = [order[i:i + 3] for i in range(0, len(order), 3)]
    assert len(full) >= 3 and mmdet[2:] != sliced[2:]  # a skip by slicing would differ
    batches.skip_next(2)
    # Same keys (index and seed) as the uninterrupted epoch's, for every iterator of the epoch.
    assert list(batches) == full[2:] and list(batches) == full[2:]
    assert len(batches) == len(batches.batch_sampler) - 2
    batches.skip_next(0)
    assert list(batches) == full


def test_assignments_to_the_wrapped_dataset_reach_the_dataset(toy_coco_root):
    """mmdet's PipelineSwitchHook assigns ``train_dataloader.dataset.pipeline`` (RTMDet's second
    stage): through the per-sample-seed wrapper it must reach the dataset the workers load."""
    from mmcv.transforms import Compose

    from mmdet_ext.datasets.sample_seeds import install_resumable_loading
    loader = _toy_train_loader(toy_coco_root, batch_size=2)
    inner = loader.dataset
    install_resumable_loading(loader, seed=5, rank=0)
    assert loader.dataset is not inner
    switched = Compose([dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=False),
                        dict(type='PackDetInputs')])
    loader.dataset.pipeline = switched
    assert inner.pipeline is switched
    batch = next(iter(loader))
    assert 'gt_masks' not in batch['data_samples'][0].gt_instances


def _toy_train_loader(toy_coco_root, batch_size: int):
    """The toy config's train DataLoader (mmdet's AspectRatioBatchSampler), no workers."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    init_default_scope('mmdet')
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/toy_coco_instance.py'))
    loader_cfg = cfg.train_dataloader.to_dict()
    loader_cfg['dataset']['data_root'] = f'{toy_coco_root}/'
    loader_cfg.update(batch_size=batch_size, num_workers=0, persistent_workers=False, timeout=0)
    return Runner.build_dataloader(loader_cfg, seed=5)
