"""Resume on another number of ranks: the interrupted epoch continues with exactly the samples
it had not trained on, each augmented as it would have been. The sampler-level cases emulate
ranks with mmengine's own ``DefaultSampler``; the Runner cases are real gloo jobs of 2 and 1
ranks (2 -> 1 and 1 -> 2), compared with uninterrupted runs by sample id."""
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter

import pytest
import torch
from mmengine.dataset import DefaultSampler
from mmengine.hooks import Hook
from torch.utils.data import BatchSampler

from helpers.tiny_runner import TinyFlipDataset
from mmdet_ext.datasets.sample_seeds import (ResumableBatchSampler, SeededKey, merge_unconsumed,
                                             share_of)
from mmdet_ext.datasets.seeded_rngs import sample_seed
from mmdet_ext.engine.hooks import PREEMPTED_EXIT_CODE

SEED, EPOCH = 3, 1


def _rank_sampler(dataset, rank: int, world: int) -> DefaultSampler:
    """mmengine's DefaultSampler as rank ``rank`` of ``world`` builds it (it reads the rank and
    the world size from torch.distributed at construction; set here as it would set them)."""
    sampler = DefaultSampler(dataset, shuffle=True, seed=SEED)
    sampler.rank, sampler.world_size = rank, world
    sampler.num_samples = math.ceil(len(dataset) / world)
    sampler.total_size = sampler.num_samples * world
    sampler.set_epoch(EPOCH)
    return sampler


def _cut(make_batches, world: int, consumed: int):
    """Every rank draws ``consumed`` batches and one more (a look-ahead), then is saved: its
    trained keys and its ``unconsumed`` part."""
    trained, parts = [], []
    for rank in range(world):
        batches = make_batches(rank, world)
        drawn = iter(batches)
        trained += [key for _ in range(consumed) for key in next(drawn)]
        next(drawn)
        parts.append(batches.unconsumed(consumed))
    return trained, parts


def _keys(batches: ResumableBatchSampler) -> list[SeededKey]:
    return [key for batch in batches for key in batch]


def _check_seeds(keys_by_rank: list[list[SeededKey]], first_seeds: dict[int, int]) -> None:
    """Each key is seeded by its identity; a first occurrence gets the uninterrupted run's."""
    for keys in keys_by_rank:
        seen: Counter = Counter()
        for key in keys:
            assert key.seed == sample_seed(SEED, EPOCH, key.index, seen[key.index])
            if seen[key.index] == 0:
                assert key.seed == first_seeds[key.index]
            seen[key.index] += 1


def test_share_of_deals_as_default_sampler_and_evens_the_ranks_out():
    rest = [10, 11, 12, 13, 14]
    assert [share_of(rest, r, 3) for r in range(3)] == [[10, 13], [11, 14], [12, 10]]
    assert [share_of(rest, r, 3, round_up=False) for r in range(3)] == [[10, 13], [11, 14], [12]]
    assert [share_of([7], r, 3) for r in range(3)] == [[7], [7], [7]]
    assert share_of([], 0, 2) == []
    # The merge puts rank r's stream position p at p * world + r, as DefaultSampler dealt it.
    assert merge_unconsumed([([1, 2], [20, 40]), ([0, 2], [11, 51])]) == [11, 20, 40, 51]


@pytest.mark.parametrize('new_world', [1, 3])
def test_an_epoch_cut_on_two_ranks_continues_with_exactly_its_rest(new_world):
    data = list(range(27))  # odd: DefaultSampler repeats one sample to give both ranks 14

    def make(rank: int, world: int) -> ResumableBatchSampler:
        return ResumableBatchSampler(BatchSampler(_rank_sampler(data, rank, world), 3, False),
                                     SEED, rank)

    uninterrupted = [_keys(make(rank, 2)) for rank in range(2)]
    full = [key.index for keys in uninterrupted for key in keys]
    assert len(full) == 28
    trained, parts = _cut(make, 2, consumed=2)
    rest = merge_unconsumed(parts)
    assert Counter(key.index for key in trained) + Counter(rest) == Counter(full)
    resumed = []
    for rank in range(new_world):
        batches = make(rank, new_world)
        batches.continue_epoch(EPOCH, share_of(rest, rank, new_world))
        assert len(batches) == math.ceil(len(share_of(rest, rank, new_world)) / 3)
        resumed.append(_keys(batches))
        # The rest stays in place for every iterator of that epoch, and only for it.
        assert _keys(batches) == resumed[-1]
        batches.sampler.set_epoch(EPOCH + 1)
        next_epoch = _rank_sampler(data, rank, new_world)
        next_epoch.set_epoch(EPOCH + 1)
        assert [k.index for k in _keys(batches)] == list(next_epoch)
    repeated = -len(rest) % new_world
    assert Counter(key.index for keys in resumed for key in keys) == \
        Counter(rest) + Counter(rest[:repeated])
    assert len({len(keys) for keys in resumed}) == 1  # every rank as many samples
    first_seeds = {key.index: key.seed for keys in uninterrupted for key in keys}
    _check_seeds(resumed, first_seeds)
    _check_seeds([trained], first_seeds)


def test_aspect_ratio_batches_cut_on_two_ranks_continue_on_one(mixed_coco_root):
    """mmdet's AspectRatioBatchSampler regroups each rank's stream, so what a rank trained on
    is not a prefix of it; the rest is what it did not yield, and mmdet's sampler batches the
    rest on the new rank."""
    from mmdet.datasets.samplers import AspectRatioBatchSampler

    from test_preemption_resume import _toy_train_loader
    dataset = _toy_train_loader(mixed_coco_root, batch_size=2).dataset

    def make(rank: int, world: int) -> ResumableBatchSampler:
        return ResumableBatchSampler(
            AspectRatioBatchSampler(_rank_sampler(dataset, rank, world), batch_size=2),
            SEED, rank)

    uninterrupted = [_keys(make(rank, 2)) for rank in range(2)]
    trained, parts = _cut(make, 2, consumed=1)
    # On some rank the batch trained was regrouped: what is left is not the stream's tail.
    assert any(positions[:2] != [2, 3] for positions, _ in parts)
    rest = merge_unconsumed(parts)
    batches = make(0, 1)
    batches.continue_epoch(EPOCH, share_of(rest, 0, 1))
    resumed = _keys(batches)
    full = Counter(key.index for keys in uninterrupted for key in keys)
    assert Counter(key.index for key in trained + resumed) == full
    first_seeds = {key.index: key.seed for keys in uninterrupted for key in keys}
    _check_seeds([resumed], first_seeds)


class IndexedFlipDataset(TinyFlipDataset):
    """TinyFlipDataset whose samples also carry their index (``SampleRecorder`` takes it out
    before the model sees the batch)."""

    def __getitem__(self, index: int) -> dict:
        return dict(super().__getitem__(index), index=torch.tensor(index))


class SampleRecorder(Hook):
    """Per trained batch: the epoch, the sample ids and a digest of each augmented input."""
    priority = 'HIGHEST'

    def __init__(self, path: str) -> None:
        self.path = path

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        ids = data_batch.pop('index').tolist()
        digests = [hashlib.sha1(image.numpy().tobytes()).hexdigest()
                   for image in data_batch['inputs']]
        with open(self.path, 'a') as f:
            f.write(json.dumps(dict(epoch=runner.epoch, ids=ids, digests=digests)) + '\n')


class SignalAt(Hook):
    def __init__(self, at: int) -> None:
        self.at = at

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if runner.iter == self.at:
            os.kill(os.getpid(), signal.SIGUSR1)


RANKS = textwrap.dedent('''
    import os, sys
    import torch.distributed as dist
    from mmengine.runner import Runner
    import test_world_size_resume as t
    from helpers.tiny_runner import tiny_runner_kwargs
    from mmdet_ext.engine.process_exit import run_and_exit

    work_dir, name, signal_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = int(os.environ['RANK'])
    dist.init_process_group('gloo')
    hooks = [dict(type='SignalCheckpointHook'),
             t.SampleRecorder(f'{work_dir}/{name}.samples{rank}.jsonl')]
    if signal_at >= 0 and rank == 0:
        hooks.append(t.SignalAt(signal_at))
    loader = dict(dataset=t.IndexedFlipDataset(32), batch_size=4, num_workers=0,
                  sampler=dict(type='DefaultSampler', shuffle=True),
                  collate_fn=dict(type='default_collate'))
    kwargs = tiny_runner_kwargs(
        work_dir, experiment_name=name, launcher='pytorch', max_epochs=2, with_val=False,
        train_dataloader=loader, custom_hooks=hooks, resume=name == 'resumed',
        cfg=dict(model_wrapper_cfg=dict(type='MMDistributedDataParallel', device_ids=None)))
    run_and_exit(Runner(**kwargs).train)
''')


def _ranks(work_dir, name: str, world: int, signal_at: int = -1) -> list[int]:
    """A gloo job of ``world`` ranks as plain processes (as torchrun starts them); exit codes."""
    work_dir.mkdir(exist_ok=True)
    script = work_dir / 'ranks.py'
    script.write_text(RANKS)
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'WORLD_SIZE': str(world),
           'LOCAL_WORLD_SIZE': str(world), 'MASTER_ADDR': '127.0.0.1',
           'MASTER_PORT': str(20000 + (os.getpid() + 7) % 20000),
           'PYTHONPATH': os.pathsep.join([tests_dir, os.environ.get('PYTHONPATH', '')])}
    procs = [subprocess.Popen([sys.executable, str(script), str(work_dir), name, str(signal_at)],
                              env={**env, 'RANK': str(r), 'LOCAL_RANK': str(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:  # a hung rank must not outlive the test
        for p in procs:
            p.kill()
    (work_dir / f'{name}.out').write_text('\n'.join(outputs))
    return [p.returncode for p in procs]


def _trained(work_dir, names: list[str], epoch: int) -> list[tuple[int, str]]:
    """(sample id, digest of its augmented input) of every sample trained in ``epoch``."""
    samples = []
    for path in sorted(p for name in names for p in work_dir.glob(f'{name}.samples*.jsonl')):
        for row in map(json.loads, path.read_text().splitlines()):
            if row['epoch'] == epoch:
                samples += zip(row['ids'], row['digests'])
    return samples


@pytest.mark.parametrize('saved_world, resumed_world', [(2, 1), (1, 2)])
def test_resume_on_another_number_of_ranks_trains_each_sample_of_the_epoch_once(
        tmp_path, saved_world, resumed_world):
    full, cut = tmp_path / 'full', tmp_path / 'cut'
    assert _ranks(full, 'full', saved_world) == [0] * saved_world
    # 32 samples, 4 per rank and batch; the signal lands in iteration 2 (3 batches trained).
    assert _ranks(cut, 'cut', saved_world, signal_at=2) == [PREEMPTED_EXIT_CODE] * saved_world
    assert (cut / 'last_checkpoint').read_text().endswith('iter_3.pth')
    assert _ranks(cut, 'resumed', resumed_world) == [0] * resumed_world
    log = (cut / 'resumed.out').read_text()
    left = 32 - 3 * 4 * saved_world
    assert f'epoch 1 continues with the {left} samples of it not yet trained on' in log
    assert f'the global batch is 4 x {resumed_world} (was 4 x {saved_world})' in log
    for epoch in (0, 1):
        expected = _trained(full, ['full'], epoch)
        assert sorted(i for i, _ in expected) == list(range(32))
        got = _trained(cut, ['cut', 'resumed'], epoch)
        # Every sample once, augmented exactly as in the uninterrupted run.
        assert sorted(got) == sorted(expected)
    assert len(_trained(cut, ['resumed'], 0)) == left
