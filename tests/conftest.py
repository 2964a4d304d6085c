"""Shared fixtures: a small toy COCO dataset on disk, running the main job on it, and clean
checkpoint loaders per test.

Imported for every test, so at the top it needs only numpy and pytest: OpenCV, psutil and
mmengine/mmcv/mmdet (through ``mmdet_ext._compat``) are imported by the fixtures that use them,
so that the tests of the native ops run where only torch is installed (a lent GPU machine;
tests/test_torch_only.py holds it)."""
import gc
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

# What ``mmdet_ext._compat`` imports: the framework, and cv2, which mmcv itself needs.
UPSTREAM = ('mmengine', 'mmcv', 'mmdet', 'cv2')


@pytest.fixture(scope='session')
def toy_coco_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Root of a 8-train / 4-val toy COCO dataset (the mix of sizes and kinds of
    ``mmdet_ext.toy_data.IMAGE_KINDS``)."""
    from mmdet_ext.toy_data import make_toy_coco

    root = tmp_path_factory.mktemp('toy_coco')
    make_toy_coco(root, num_train=8, num_val=4, seed=0)
    return root


# Added to a copy of the toy train split so that the dataset filters have something to remove:
# (file, width, height, category ids of its rectangles). min(36, 48) < 40 <= min(50, 60) < 64.
MIXED_EXTRA_IMAGES = (('small.jpg', 36, 48, (2,)), ('portrait.jpg', 50, 60, (1,)),
                      ('empty.jpg', 320, 240, ()))


@pytest.fixture(scope='session')
def mixed_coco_root(toy_coco_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy set with ``MIXED_EXTRA_IMAGES`` (img_ids 9, 10, 11) added to its train split: two
    small images for ``min_size`` and one without annotations for ``filter_empty_gt``."""
    import cv2

    root = tmp_path_factory.mktemp('mixed_coco')
    shutil.copytree(toy_coco_root, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns('*.mdxstore*'))
    path = root / 'annotations' / 'instances_train.json'
    coco = json.loads(path.read_text())
    for file_name, width, height, categories in MIXED_EXTRA_IMAGES:
        image_id = max(image['id'] for image in coco['images']) + 1
        image = np.full((height, width, 3), 90, np.uint8)
        x0, y0, x1, y1 = width // 4, height // 4, 3 * width // 4, 3 * height // 4
        for category in categories:
            image[y0:y1, x0:x1] = 200
            coco['annotations'].append(dict(
                id=max(ann['id'] for ann in coco['annotations']) + 1, image_id=image_id,
                category_id=category, bbox=[x0, y0, x1 - x0, y1 - y0],
                area=float((x1 - x0) * (y1 - y0)), iscrowd=0,
                segmentation=[[x0, y0, x1, y0, x1, y1, x0, y1]]))
        cv2.imwrite(str(root / 'train' / file_name), image)
        coco['images'].append(dict(id=image_id, file_name=file_name, width=width, height=height))
    path.write_text(json.dumps(coco))
    return root


@pytest.fixture
def usable_cpus(request):
    """Parametrized indirectly with a CPU count: for the test, this thread may run on that many
    of its CPUs (the affinity a container or ``taskset`` gives; the threads it starts inherit
    it), which is what the batched fetch's thread count follows. ``None``: unchanged."""
    count, before = request.param, os.sched_getaffinity(0)
    if count is not None:
        if len(before) < count:
            pytest.skip(f'needs {count} usable CPUs, this process has {len(before)}')
        os.sched_setaffinity(0, sorted(before)[:count])
    try:
        yield count
    finally:
        os.sched_setaffinity(0, before)


@pytest.fixture
def no_dataloader_restart_pause(monkeypatch):
    """mmengine sleeps 2 s each time an iteration-based loop restarts a DataLoader that ran out."""
    import mmengine.runner.loops
    monkeypatch.setattr(mmengine.runner.loops.time, 'sleep', lambda seconds: None)


@pytest.fixture(autouse=True)
def _restore_checkpoint_schemes():
    """A Runner that raises skips ``after_run``; keep mmengine's checkpoint loaders clean
    (where mmengine is installed: without it there are none)."""
    try:
        from mmdet_ext._compat import checkpoint_schemes, set_checkpoint_schemes
    except ImportError as err:
        if (err.name or '').split('.')[0] not in UPSTREAM:
            raise
        yield
        return
    schemes = checkpoint_schemes()
    yield
    set_checkpoint_schemes(schemes)


@pytest.fixture(autouse=True)
def _end_forked_workers():
    """A Runner (or a DataLoader iterator) that a test leaves in a reference cycle keeps its
    persistent workers alive until the cycle is collected: up to 10 of them were still running
    when the suite ended, and pytest then waited about 50 s for their shutdown at exit. When a
    test leaves forked children of this process, collect the cycles so the workers end now
    (without psutil, after every test)."""
    yield
    try:
        import psutil
    except ImportError:
        gc.collect()
        return
    me = psutil.Process()
    if any(_is_live_fork(child, me) for child in me.children()):
        gc.collect()


def _is_live_fork(child, parent) -> bool:
    """Whether ``child`` (a ``psutil.Process``) runs and is a fork of ``parent``."""
    import psutil

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
