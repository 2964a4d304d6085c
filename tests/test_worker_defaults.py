"""WorkerDefaultsHook: capped workers, OpenCV threads off inside them, seeding kept, timeout."""
import random

import cv2
import numpy as np
import pytest
import torch
from mmdet.datasets.transforms import PackDetInputs
from mmengine.dataset import RepeatDataset
from mmengine.hooks import Hook
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mmdet_ext import (LazyCocoDataset, LoadLazyAnnotations, NativeLoadResizeFlip,
                       WorkerDefaultsHook, _C)
from mmdet_ext.models import FastDetDataPreprocessor
from mmdet_ext.datasets.wrapper_fetch import wrapped_datasets
from mmdet_ext.engine.hooks.worker_defaults_hook import DEFAULT_TIMEOUT_S, usable_cpu_count
from mmdet_ext import moved_settings
from helpers.tiny_runner import (LossRecorderHook, read_losses, record_mmengine_log,
                                 tiny_runner_kwargs)


class WorkerProbe(Dataset):
    """Reports, from inside the worker, OpenCV's thread counts and a draw from numpy's RNG."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([cv2.getNumThreads(), _C.opencv_num_threads(),
                             np.random.randint(1 << 30), random.randint(0, 1 << 30)])


def _seed_worker(worker_id: int) -> None:
    np.random.seed(1000 + worker_id)
    random.seed(1000 + worker_id)


def test_caps_workers_disables_opencv_threads_and_keeps_the_init_fn():
    loader = DataLoader(WorkerProbe(), batch_size=1, num_workers=usable_cpu_count() + 3,
                        worker_init_fn=_seed_worker)
    WorkerDefaultsHook().apply(loader)
    assert loader.num_workers == usable_cpu_count()
    assert loader.timeout == DEFAULT_TIMEOUT_S
    assert loader.pin_memory == torch.cuda.is_available()
    loader.num_workers = 2  # keep the test light on a 2-core machine
    rows = torch.cat(list(loader)).tolist()
    assert all(row[0] == 1 and row[1] == 1 for row in rows)  # 1 = no parallel threads
    # The configured init fn still seeded each worker: worker w's first draws are seed 1000 + w's.
    first_draws = {row[2] for row in rows[:2]}
    np.random.seed(1000)
    expected_0 = np.random.randint(1 << 30)
    np.random.seed(1001)
    expected_1 = np.random.randint(1 << 30)
    assert first_draws == {expected_0, expected_1}
    WorkerDefaultsHook().apply(loader)  # applying twice does not wrap twice
    assert loader.worker_init_fn.keywords['previous'] is _seed_worker


def test_the_dataloaders_own_settings_are_kept():
    """pin_memory and timeout have one home, the dataloader's config: the hook fills in only
    what it leaves unset (without the config, False and 0 count as unset)."""
    def loader(**settings):
        return DataLoader(WorkerProbe(), batch_size=1, num_workers=1, **settings)

    kept, filled = loader(timeout=0), loader(timeout=0)
    WorkerDefaultsHook().apply(kept, config=dict(timeout=0, pin_memory=False))
    WorkerDefaultsHook().apply(filled, config=dict())
    assert (kept.timeout, kept.pin_memory) == (0, False)
    assert (filled.timeout, filled.pin_memory) == (DEFAULT_TIMEOUT_S, torch.cuda.is_available())
    own = loader(timeout=30, pin_memory=True)
    WorkerDefaultsHook().apply(own, config=dict(timeout=30, pin_memory=True))
    assert (own.timeout, own.pin_memory) == (30, True)


def test_the_old_arguments_keep_working_with_a_warning_once(monkeypatch):
    monkeypatch.setattr(moved_settings, '_warned', set())
    with record_mmengine_log() as records:
        hook = WorkerDefaultsHook(max_workers=1, timeout=30, pin_memory=False)
        WorkerDefaultsHook(timeout=0)
    warnings = [r.getMessage() for r in records if 'WorkerDefaultsHook(' in r.getMessage()]
    assert warnings == ["WorkerDefaultsHook(max_workers=1, timeout=30, pin_memory=False): set "
                        "the dataloader's own num_workers, pin_memory and timeout instead (the "
                        'hook fills in only what a dataloader leaves unset); the old arguments '
                        'keep working; logged once']
    capped = DataLoader(WorkerProbe(), batch_size=1, num_workers=2, pin_memory=True)
    hook.apply(capped, config=dict(pin_memory=True))
    assert (capped.num_workers, capped.timeout, capped.pin_memory) == (1, 30, False)
    with pytest.raises(TypeError, match='takes no arguments.*workers'):
        WorkerDefaultsHook(workers=1)


def test_runner_applies_it_before_the_first_batch(tmp_path):
    """In the real Runner: one worker more than the usable CPUs, capped to them, mmengine's
    seeding unchanged (same losses as a run configured with that many workers), and the
    config's own timeout=0 kept (the Runner's dataloader config is where the hook reads it)."""
    losses, cap = {}, usable_cpu_count()
    for name, workers, hooks in (('plain', cap, []),
                                 ('hook', cap + 1, [dict(type='WorkerDefaultsHook')])):
        path = str(tmp_path / f'{name}.jsonl')
        kwargs = tiny_runner_kwargs(str(tmp_path / name), max_epochs=1, with_val=False,
                                    custom_hooks=[*hooks, LossRecorderHook(path)])
        kwargs['train_dataloader'].update(num_workers=workers, persistent_workers=True,
                                          timeout=0 if hooks else 5)
        runner = Runner(**kwargs)
        runner.train()
        assert runner.train_dataloader.num_workers == cap
        assert runner.train_dataloader.timeout == (0 if hooks else 5)
        losses[name] = read_losses(path)
    assert losses['plain'] == losses['hook'] and losses['plain']


def test_iteration_based_loops_get_it_from_the_first_batch(tmp_path):
    """IterBasedTrainLoop starts its DataLoader iterator (and workers) when it is built, before
    any hook runs: that iterator is made again with the capped workers."""
    kwargs = tiny_runner_kwargs(str(tmp_path), with_val=False,
                                train_cfg=dict(type='IterBasedTrainLoop', max_iters=2))
    # Alone: ExactResumeHook remakes the iterator too (for its own reasons).
    kwargs['custom_hooks'] = [dict(type='WorkerDefaultsHook')]
    kwargs['train_dataloader'].update(num_workers=usable_cpu_count() + 1,
                                      sampler=dict(type='InfiniteSampler'))
    kwargs['default_hooks'] = dict(checkpoint=dict(type='CheckpointHook', interval=100,
                                                   by_epoch=False, save_last=False))
    kwargs['param_scheduler'] = None
    runner = Runner(**kwargs)
    runner.train()
    assert runner.train_loop.dataloader_iterator._iterator._num_workers == usable_cpu_count()


class _PixelMean(BaseModel):
    """A model of one weight whose loss reads the preprocessed batch: enough for a real run."""

    def __init__(self, data_preprocessor) -> None:
        super().__init__(data_preprocessor=data_preprocessor)
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, inputs, data_samples=None, mode='tensor'):
        if mode == 'loss':
            return dict(loss=(inputs.float().mean() * self.weight).abs())
        return [inputs]


class _BatchShapes(Hook):
    """Records each training batch's input shape as the model's preprocessor sees it."""

    def __init__(self) -> None:
        self.shapes = []

    def before_train_iter(self, runner, batch_idx, data_batch=None) -> None:
        self.shapes.append((tuple(data_batch['inputs'].shape), data_batch['input_shapes']))


def test_the_models_divisor_sizes_the_batches_the_dataset_fetches(tmp_path, toy_coco_root):
    """The divisor is set once, on the model's preprocessor: the hook hands it to the
    LazyCocoDataset under the loader's wrappers, whose batched fetch then pads the batch to it,
    and fast_collate (divisor 1) sends that batch as it is."""
    seen = _BatchShapes()
    dataset = RepeatDataset(LazyCocoDataset(
        data_root=str(toy_coco_root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'), metainfo=dict(classes=('circle', 'rectangle')),
        pipeline=[LoadLazyAnnotations(with_bbox=True, with_mask=True),
                  NativeLoadResizeFlip(scale=(150, 100), keep_ratio=True), PackDetInputs()]),
        times=1)
    kwargs = tiny_runner_kwargs(str(tmp_path), max_epochs=1, with_val=False,
                                custom_hooks=[dict(type='WorkerDefaultsHook'), seen])
    kwargs['model'] = _PixelMean(FastDetDataPreprocessor(pad_size_divisor=96))
    kwargs['train_dataloader'] = dict(dataset=dataset, batch_size=3, num_workers=0,
                                      sampler=dict(type='DefaultSampler', shuffle=False),
                                      collate_fn=dict(type='fast_collate'))
    kwargs['param_scheduler'] = None
    runner = Runner(**kwargs)
    runner.train()
    # The Runner's copy of the dataset, under its wrappers.
    inner, = wrapped_datasets(runner.train_dataloader.dataset)
    assert isinstance(inner, LazyCocoDataset) and inner.pad_size_divisor == 96
    # The toy images differ in size (toy_data.IMAGE_KINDS): each batch is padded from its largest
    # image up to a multiple of 96 (fast_collate alone would send the largest image's size; the
    # preprocessor would pad that batch once more).
    assert any(len(set(sizes)) > 1 for _, sizes in seen.shapes)
    for shape, sizes in seen.shapes:
        assert shape[2:] == tuple(-(-max(sides) // 96) * 96 for sides in zip(*sizes))
