"""A seconds-fast mmengine Runner setup for checkpoint tests: tiny net, tiny in-memory data.

It draws randomness the way a detection job does -- dropout (torch RNG), a random flip (numpy's
global RNG) and a random scale (python ``random``) in ``__getitem__`` (main process with
``num_workers=0``), a shuffling ``DefaultSampler`` -- so a resumed run only repeats an
uninterrupted one if all of that state comes back.
"""
import contextlib
import json
import logging
import random
import re
from typing import Any, Iterator, Optional, Sequence

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.evaluator import BaseMetric, Evaluator
from mmengine.hooks import Hook
from mmengine.logging import MMLogger
from mmengine.model import BaseModel
from mmengine.runner import Runner
from torch.utils.data import Dataset

import mmdet_ext  # noqa: F401  (registers the hooks these Runner settings name)
from mmdet_ext.engine.checkpoint_saving import background_writer
from mmdet_ext._compat import family_has


class TinyFlipDataset(Dataset):
    """``length`` fixed 2x4x4 float images with binary labels, randomly flipped and scaled."""

    metainfo = dict(classes=('negative', 'positive'))

    def __init__(self, length: int = 16, loads_file: Optional[str] = None) -> None:
        self.loads_file = loads_file  # if set, one line per sample loaded (any process)
        rng = np.random.default_rng(0)
        self.images = rng.standard_normal((length, 2, 4, 4)).astype(np.float32)
        self.labels = (rng.random(length) > 0.5).astype(np.float32)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.loads_file is not None:
            with open(self.loads_file, 'a') as f:
                f.write(f'{index}\n')
        image = self.images[index]
        if np.random.rand() < 0.5:
            image = image[:, :, ::-1]
        image = np.ascontiguousarray(image) * random.uniform(0.8, 1.2)
        return dict(inputs=torch.from_numpy(image.astype(np.float32)),
                    labels=torch.tensor(self.labels[index]))


class TinyConvNet(BaseModel):
    """conv(2->4, 3x3) -> ReLU -> dropout(0.3) -> linear(64->1); BCE loss on the logit."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.dropout = nn.Dropout(0.3)
        self.head = nn.Linear(64, 1)

    def init_weights(self) -> None:
        """Draw the weights here, when the Runner calls it after seeding, not at construction."""
        self.conv.reset_parameters()
        self.head.reset_parameters()

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor, mode: str = 'tensor') -> Any:
        logits = self.head(self.dropout(torch.relu(self.conv(inputs))).flatten(1)).squeeze(1)
        if mode == 'loss':
            return dict(loss=nn.functional.binary_cross_entropy_with_logits(logits, labels))
        return [logits]


class TinyLogitMetric(BaseMetric):
    """Mean predicted logit: just enough evaluation for a val loop to run."""

    def process(self, data_batch: Any, data_samples: Sequence) -> None:
        self.results.extend(float(v) for logits in data_samples for v in logits)

    def compute_metrics(self, results: list) -> dict[str, float]:
        return dict(mean_logit=float(np.mean(results)))


class LossRecorderHook(Hook):
    """Appends ``{"iter": i, "loss": x}`` per training iteration to a JSON-lines file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        with open(self.path, 'a') as f:
            f.write(json.dumps(dict(iter=runner.iter, loss=float(outputs['loss']))) + '\n')


@contextlib.contextmanager
def record_mmengine_log() -> Iterator[list[logging.LogRecord]]:
    """Collect what mmengine logs (``print_log(logger='current')``, runner.logger) meanwhile."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = MMLogger.get_current_instance()
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


class RunnerLogRecorder(Hook):
    """Collects what ``runner.logger`` logs from ``before_run`` on (a Runner makes its own
    logger, so :func:`record_mmengine_log` entered before it was built does not see it)."""

    def __init__(self) -> None:
        self.records: list[logging.LogRecord] = []
        self._handler = logging.Handler()
        self._handler.emit = self.records.append

    def before_run(self, runner) -> None:
        runner.logger.addHandler(self._handler)

    def after_run(self, runner) -> None:
        runner.logger.removeHandler(self._handler)

    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]


def read_losses(path: str) -> dict[int, float]:
    """Iteration -> loss from a :class:`LossRecorderHook` file (a rerun iteration: last wins)."""
    with open(path) as f:
        return {row['iter']: row['loss'] for row in map(json.loads, f)}


def tiny_runner_kwargs(work_dir: str, *, max_epochs: int = 4, seed: Optional[int] = 7,
                       custom_hooks: Sequence = (), with_val: bool = True,
                       checkpoint: Optional[dict] = None, **overrides: Any) -> dict[str, Any]:
    """Keyword arguments for ``mmengine.runner.Runner``: the plugin's hooks selected by name."""
    loader = dict(batch_size=4, num_workers=0, collate_fn=dict(type='default_collate'))
    kwargs: dict[str, Any] = dict(
        model=TinyConvNet(),
        work_dir=work_dir,
        default_scope='mmdet',
        train_dataloader=dict(dataset=TinyFlipDataset(),
                              sampler=dict(type='DefaultSampler', shuffle=True), **loader),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1, momentum=0.9)),
        param_scheduler=dict(type='MultiStepLR', milestones=[2], gamma=0.5),
        train_cfg=dict(by_epoch=True, max_epochs=max_epochs, val_interval=1),
        default_hooks=dict(checkpoint=checkpoint or dict(type='AtomicCheckpointHook',
                                                         interval=1)),
        custom_hooks=[dict(type='CpuCheckpointLoadHook'), dict(type='ExactResumeHook'),
                      *custom_hooks],
        randomness=dict(seed=seed),
        env_cfg=dict(dist_cfg=dict(backend='gloo')),
    )
    if with_val:
        kwargs.update(
            val_dataloader=dict(dataset=TinyFlipDataset(8),
                                sampler=dict(type='DefaultSampler', shuffle=False), **loader),
            val_cfg=dict(), val_evaluator=Evaluator(TinyLogitMetric()))
    kwargs.update(overrides)
    return kwargs


class CrashAtIter(Hook):
    """Dies at the start of iteration ``at`` (0-based), after the iterations before it saved."""

    def __init__(self, at: int) -> None:
        self.at = at

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        if runner.iter == self.at:
            raise RuntimeError('simulated crash')


# The fork's IterBasedTrainLoop(fast_forward_on_resume=True) skips nothing on resume.
needs_fast_forward_on_resume = pytest.mark.skipif(
    not family_has('fast_forward_on_resume'),
    reason="IterBasedTrainLoop has no fast_forward_on_resume (OpenMMLab's mmengine; the fork's "
           'onedl-mmengine has it: tools/compat/fork.sh runs this)')


def run_iter_based(work_dir, name: str, *, hooks: Sequence = (), save_every: int = 100,
                   loop_options: Optional[dict] = None, **overrides: Any) -> None:
    """14 iterations of an ``IterBasedTrainLoop`` (more options: ``loop_options``) over 8-batch
    data epochs (``DefaultSampler``: mmengine restarts the DataLoader after each), a checkpoint
    every ``save_every`` iterations, losses in ``work_dir/losses.jsonl``."""
    loader = dict(dataset=TinyFlipDataset(32), batch_size=4, num_workers=0,
                  sampler=dict(type='DefaultSampler', shuffle=True),
                  collate_fn=dict(type='default_collate'))
    kwargs = tiny_runner_kwargs(
        str(work_dir), experiment_name=name, with_val=False, train_dataloader=loader,
        train_cfg=dict(type='IterBasedTrainLoop', max_iters=14, val_interval=100,
                       **(loop_options or {})),
        custom_hooks=[*hooks, LossRecorderHook(str(work_dir / 'losses.jsonl'))], **overrides)
    kwargs['default_hooks'] = dict(checkpoint=dict(type='AtomicCheckpointHook',
                                                   interval=save_every, by_epoch=False))
    kwargs['param_scheduler'] = dict(type='MultiStepLR', milestones=[6], gamma=0.5,
                                     by_epoch=False)
    Runner(**kwargs).train()


def assert_iter_based_resume_repeats_the_run(tmp_path, save_at: int, hooks: Sequence = (),
                                            loop_options: Optional[dict] = None) -> None:
    """Uninterrupted, then saved after iteration ``save_at``, crashed, resumed: same losses."""
    full, cut = tmp_path / 'full', tmp_path / 'cut'
    run_iter_based(full, 'full', hooks=hooks, loop_options=loop_options)
    with pytest.raises(RuntimeError, match='simulated crash'):
        run_iter_based(cut, 'cut', save_every=save_at, hooks=[*hooks, CrashAtIter(save_at + 1)],
                       loop_options=loop_options)
    # The crashed run's last save may still be written in the background (a process ending
    # with that exception would finish it before it exits).
    background_writer.wait()
    assert (cut / 'last_checkpoint').read_text().endswith(f'iter_{save_at}.pth')
    log = RunnerLogRecorder()
    run_iter_based(cut, 'resumed', resume=True, seed=None, hooks=[*hooks, log],
                   loop_options=loop_options)
    expected, got = read_losses(str(full / 'losses.jsonl')), read_losses(str(cut / 'losses.jsonl'))
    assert sorted(got) == sorted(expected) == list(range(14))
    assert got == expected
    said = [m for m in log.messages() if m.startswith('ExactResumeHook: data continues at batch ')]
    assert len(said) == 1 and re.fullmatch(
        r"ExactResumeHook: data continues at batch \d+ of data epoch \d+; (mmengine's skip of "
        r'\d+ batches is answered without loading them|fast_forward_on_resume is set, and this '
        r'costs nothing)', said[0]), said
