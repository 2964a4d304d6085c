"""Runtime bad-sample policy: clear errors under 'raise', skip-count-log under 'skip', no hangs."""
import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from mmengine.config import Config
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from mmdet_ext.datasets import BadSampleError, LazyCocoDataset, TooManyBadSamplesError
from mmdet_ext.datasets.inflight import dead_worker_samples
from mmdet_ext.engine.hooks.worker_defaults_hook import DEFAULT_TIMEOUT_S, WorkerDefaultsHook
from mmdet_ext.engine.memory.memcheck import run_dataloader
from mmdet_ext.registry import TRANSFORMS

REPO = Path(__file__).resolve().parents[1]
METAINFO = dict(classes=('circle', 'rectangle', 'triangle', 'ring'))
PIPELINE = [dict(type='NativeLoadImageFromFile'),
            dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
            dict(type='PackDetInputs')]


@TRANSFORMS.register_module()
class SleepForever:
    """A pipeline step stuck for good, as a worker blocked on a dead network mount would be."""

    def __call__(self, results: dict) -> dict:
        while True:
            time.sleep(60)


@TRANSFORMS.register_module()
class KillOnImage:
    """A pipeline step that kills its own process on one image, as a decoder segfault would."""

    def __init__(self, img_id: int) -> None:
        self.img_id = img_id

    def __call__(self, results: dict) -> dict:
        if results['img_id'] == self.img_id:
            os.kill(os.getpid(), signal.SIGKILL)
        return results


@pytest.fixture
def bad_root(toy_coco_root: Path, tmp_path: Path) -> Path:
    """Toy train split with image 2 truncated and image 4 zero bytes (validation off to reach
    the pipeline)."""
    root = tmp_path / 'bad'
    shutil.copytree(toy_coco_root / 'train', root / 'train')
    shutil.copytree(toy_coco_root / 'annotations', root / 'annotations')
    data = (root / 'train' / '000001.jpg').read_bytes()
    (root / 'train' / '000001.jpg').write_bytes(data[:len(data) // 3])
    (root / 'train' / '000003.jpg').write_bytes(b'')
    return root


def _dataset(root: Path, **kwargs) -> LazyCocoDataset:
    init_default_scope('mmdet')
    return LazyCocoDataset(data_root=str(root), ann_file='annotations/instances_train.json',
                           data_prefix=dict(img='train/'), validate=False, metainfo=METAINFO,
                           **{'pipeline': PIPELINE, **kwargs})


def test_raise_names_sample_image_file_and_cause(bad_root):
    dataset = _dataset(bad_root)
    path = bad_root / 'train' / '000001.jpg'
    with pytest.raises(BadSampleError, match=rf'cannot load sample 1 \(img_id=2, img_path={path}'
                                             r'\): ImageLoadError: .*truncated JPEG'):
        dataset[1]
    with pytest.raises(BadSampleError, match=r'img_id=4.*empty'):
        dataset[3]


def test_skip_replaces_logs_once_and_records(bad_root, toy_coco_root, tmp_path):
    shutil.copy(toy_coco_root / 'train' / '000003.jpg', bad_root / 'train' / '000003.jpg')
    work_dir = tmp_path / 'work'
    dataset = _dataset(bad_root, on_bad_sample='skip', max_bad_fraction=1.0,
                       work_dir=str(work_dir))
    for _ in range(3):
        sample = dataset[1]
        assert sample['data_samples'].img_id != 2
    records = [json.loads(line) for line in
               (work_dir / 'bad_samples.jsonl').read_text().splitlines()]
    assert [(r['sample_idx'], r['img_id']) for r in records] == [(1, 2)]
    assert 'truncated JPEG' in records[0]['error']
    assert dataset.bad_samples.bad_count >= 3  # a refetch may draw sample 1 again


def test_too_many_bad_samples_stop_with_a_summary(bad_root, tmp_path):
    for path in (bad_root / 'train').iterdir():
        path.write_bytes(b'')
    dataset = _dataset(bad_root, on_bad_sample='skip', max_bad_fraction=0.25,
                       work_dir=str(tmp_path))
    with pytest.raises(TooManyBadSamplesError, match=r'4 of the 4 samples this process tried '
                                                     r'were bad \(> max_bad_fraction=0.25\)'):
        dataset[0]


def test_skip_in_test_mode_still_fails_clearly(bad_root):
    dataset = _dataset(bad_root, on_bad_sample='skip', test_mode=True)
    with pytest.raises(Exception, match='should not get `None`'):
        dataset[1]


def test_worker_loader_keeps_going_under_skip(bad_root, tmp_path):
    """An epoch through the config's DataLoader (2 workers) yields a full batch count."""
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/toy_coco_instance.py'))
    loader_cfg = cfg.train_dataloader.to_dict()
    loader_cfg['dataset'].update(
        data_root=str(bad_root), pipeline=PIPELINE, validate=False, on_bad_sample='skip',
        max_bad_fraction=1.0, work_dir=str(tmp_path))
    loader_cfg.update(batch_size=2, persistent_workers=False)
    init_default_scope('mmdet')
    loader = Runner.build_dataloader(loader_cfg, seed=0)
    batches = list(loader)
    assert sum(len(b['inputs']) for b in batches) == len(loader.dataset)
    ids = {s.img_id for b in batches for s in b['data_samples']}
    assert not ids & {2, 4}
    recorded = {json.loads(line)['img_id'] for line in
                (tmp_path / 'bad_samples.jsonl').read_text().splitlines()}
    assert recorded == {2, 4}  # each unreadable image, none left out


def test_stuck_worker_times_out_instead_of_hanging(toy_coco_root):
    """The shipped configs give a DataLoader with workers a timeout (the runtime config's
    WorkerDefaultsHook, where the dataloader sets none); a stuck worker then raises."""
    runtime = Config.fromfile(str(REPO / 'configs/_base_/mmdet_ext_runtime.py'))
    assert dict(type='WorkerDefaultsHook') in runtime.custom_hooks
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/toy_coco_instance.py'))
    loader_cfg = cfg.train_dataloader.to_dict()
    loader_cfg['dataset'].update(data_root=str(toy_coco_root),
                                 pipeline=[dict(type='SleepForever')])
    loader_cfg.update(num_workers=1, persistent_workers=False)
    init_default_scope('mmdet')
    loader = Runner.build_dataloader(loader_cfg, seed=0)
    WorkerDefaultsHook().apply(loader, config=loader_cfg)
    assert loader.timeout == DEFAULT_TIMEOUT_S
    loader.timeout = 5  # the same, sooner
    with pytest.raises(RuntimeError, match='DataLoader timed out after 5 seconds'):
        next(iter(loader))


def test_dead_worker_is_named_with_its_sample(toy_coco_root, tmp_path):
    init_default_scope('mmdet')
    dataset = LazyCocoDataset(data_root=str(toy_coco_root),
                              ann_file='annotations/instances_train.json',
                              data_prefix=dict(img='train/'), work_dir=str(tmp_path),
                              pipeline=[dict(type='KillOnImage', img_id=3)])
    loader = Runner.build_dataloader(dict(
        dataset=dataset, batch_size=1, num_workers=1, timeout=30, persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=False)), seed=0)
    with pytest.raises(RuntimeError, match='DataLoader worker') as info:
        list(loader)
    path = toy_coco_root / 'train' / '000002.jpg'
    (note,) = dead_worker_samples(str(info.value), str(tmp_path))
    pid = note.split()[2]
    assert pid in str(info.value)
    assert note == f'worker pid {pid} was loading sample 2 (img_id=3, img_path={path})'


@pytest.mark.parametrize('size', [[24, 32], [40000, 40000]])
def test_rle_of_the_wrong_size_is_refused_before_decoding(toy_coco_root, tmp_path, size):
    coco = json.loads((toy_coco_root / 'annotations' / 'instances_train.json').read_text())
    coco['annotations'][0]['segmentation'] = {'size': size, 'counts': [size[0] * size[1]]}
    (tmp_path / 'ann.json').write_text(json.dumps(coco))
    init_default_scope('mmdet')
    dataset = LazyCocoDataset(data_root=str(toy_coco_root), ann_file=str(tmp_path / 'ann.json'),
                              data_prefix=dict(img='train/'), validate=False, metainfo=METAINFO,
                              pipeline=PIPELINE)
    with pytest.raises(BadSampleError, match=rf'img_id=1.*an RLE mask is {size[0]}x{size[1]} '
                                             r'\(h x w\) but the image is 240x320'):
        dataset[0]


def test_memcheck_without_workers_drops_the_config_timeout(toy_coco_root):
    """PyTorch refuses timeout > 0 with num_workers=0; memcheck's --workers 0 must still run."""
    cfg = Config.fromfile(str(REPO / 'configs/_base_/datasets/toy_coco_instance.py'))
    loader_cfg = cfg.train_dataloader.to_dict()
    loader_cfg['dataset'].update(data_root=str(toy_coco_root), pipeline=PIPELINE)
    loader_cfg['timeout'] = 900  # a config's own timeout, set for its workers
    run = run_dataloader(loader_cfg, iters=2, workers=0)
    assert run.record.series['total']['iter'] == [1, 2]  # both iterations ran
    assert not [label for label in run.record.series if label.startswith('train.')]  # no workers


def test_runner_training_keeps_going_under_skip(bad_root, toy_coco_root, tmp_path, train_toy):
    """The main job (tools/train.py, real Runner, 2 workers) with two unreadable train images:
    they are skipped and recorded, and training, evaluation and checkpointing finish."""
    shutil.copytree(toy_coco_root / 'val', bad_root / 'val')
    work_dir = tmp_path / 'work'
    train_toy(bad_root, work_dir, 2, options=(
        'train_dataloader.dataset.validate=False', 'train_dataloader.dataset.on_bad_sample=skip',
        'train_dataloader.dataset.max_bad_fraction=1.0'))
    assert (work_dir / 'epoch_2.pth').is_file()
    (records_file,) = work_dir.glob('*/bad_samples.jsonl')
    recorded = {json.loads(line)['img_id'] for line in records_file.read_text().splitlines()}
    assert recorded == {2, 4}  # each unreadable image, none left out
