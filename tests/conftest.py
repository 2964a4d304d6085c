"""Shared fixtures: a small toy COCO dataset on disk, running the main job on it, and clean
checkpoint loaders per test."""
import gc
import subprocess
import sys
from pathlib import Path
from typing import Callable

import psutil
import pytest

from mmdet_ext._compat import checkpoint_schemes, set_checkpoint_schemes
from mmdet_ext.toy_data import make_toy_coco


@pytest.fixture(scope='session')
def toy_coco_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Root of a 8-train / 4-val toy COCO dataset (320x240 JPEGs)."""
    root = tmp_path_factory.mktemp('toy_coco')
    make_toy_coco(root, num_train=8, num_val=4, seed=0)
    return root


@pytest.fixture
def no_dataloader_restart_pause(monkeypatch):
    """mmengine sleeps 2 s each time an iteration-based loop restarts a DataLoader that ran out."""
    import mmengine.runner.loops
    monkeypatch.setattr(mmengine.runner.loops.time, 'sleep', lambda seconds: None)


@pytest.fixture(autouse=True)
def _restore_checkpoint_schemes():
    """A Runner that raises skips ``after_run``; keep mmengine's checkpoint loaders clean."""
    schemes = checkpoint_schemes()
    yield
    set_checkpoint_schemes(schemes)


@pytest.fixture(autouse=True)
def _end_forked_workers():
    """A Runner (or a DataLoader iterator) that a test leaves in a reference cycle keeps its
    persistent workers alive until the cycle is collected: up to 10 of them were still running
    when the suite ended, and pytest then waited about 50 s for their shutdown at exit. When a
    test leaves forked children of this process, collect the cycles so the workers end now."""
    yield
    me = psutil.Process()
    forks = [child for child in me.children() if _is_live_fork(child, me)]
    if forks:
        gc.collect()


def _is_live_fork(child: psutil.Process, parent: psutil.Process) -> bool:
    try:
        return child.status() != psutil.STATUS_ZOMBIE and child.cmdline() == parent.cmdline()
    except psutil.Error:  # it ended meanwhile
        return False


@pytest.fixture(scope='session')
def stock_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint written by stock mmengine (``CheckpointHook``, no plugin hook)."""
    from mmengine.runner import Runner

    from helpers.tiny_runner import tiny_runner_kwargs

    work_dir = tmp_path_factory.mktemp('stock')
    kwargs = tiny_runner_kwargs(str(work_dir), max_epochs=1,
                                checkpoint=dict(type='CheckpointHook', interval=1),
                                experiment_name='stock')
    kwargs['custom_hooks'] = []
    Runner(**kwargs).train()
    return str(work_dir / 'epoch_1.pth')


REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_CONFIG = REPO_ROOT / 'configs' / 'mask-rcnn_r18_fpn_toy-coco.py'


def _train_toy(data_root: Path, work_dir: Path, max_epochs: int, *extra: str,
               options: tuple = (), config: Path = TOY_CONFIG) -> str:
    """Run tools/train.py on the toy config, or ``config`` (one based on it), with small
    batches and val every 2 epochs; its output."""
    cfg_options = [
        f'train_dataloader.dataset.data_root={data_root}/',
        f'val_dataloader.dataset.data_root={data_root}/',
        f'val_evaluator.ann_file={data_root}/annotations/instances_val.json',
        f'train_cfg.max_epochs={max_epochs}',
        'train_cfg.val_interval=2',
        'train_dataloader.batch_size=2',
        'default_hooks.logger.interval=1',
        *options,
    ]
    cmd = [sys.executable, 'tools/train.py', str(config), '--work-dir', str(work_dir),
           *extra, '--cfg-options', *cfg_options]
    result = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout + result.stderr


@pytest.fixture
def train_toy() -> Callable[..., str]:
    """``train_toy(data_root, work_dir, max_epochs, *train_py_args, options=(cfg overrides),
    config=TOY_CONFIG)``."""
    return _train_toy
