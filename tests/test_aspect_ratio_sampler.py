"""FastAspectRatioBatchSampler against mmdet's AspectRatioBatchSampler on real datasets with
portrait and square images among landscape ones, directly and through mmengine's dataset
wrappers; the store's sizes are read without ``get_data_info``."""
import json
import shutil
import sys
from itertools import islice

import cv2
import numpy as np
import pytest
from mmdet.datasets import CocoDataset
from mmdet.datasets.samplers import AspectRatioBatchSampler
from mmengine.config import Config
from mmengine.dataset import (ClassBalancedDataset, ConcatDataset, DefaultSampler,
                              InfiniteSampler, RepeatDataset)
from mmengine.registry import DefaultScope
from mmengine.runner import Runner

from mmdet_ext.datasets import FastAspectRatioBatchSampler, LazyCocoDataset
from mmdet_ext.datasets.aspect_ratio_sampler import image_sizes
from mmdet_ext.datasets.sample_seeds import install_resumable_loading

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')


@pytest.fixture(autouse=True)
def mmdet_scope():
    """The Runner's default scope for mmdet configs, where the batch samplers are built."""
    yield DefaultScope.get_instance(f'test_aspect_ratio_{id(object())}', scope_name='mmdet')


@pytest.fixture(scope='module')
def square_coco_root(mixed_coco_root, tmp_path_factory):
    """``mixed_coco_root`` plus a square image (width == height goes with the landscape ones)."""
    root = tmp_path_factory.mktemp('square_coco')
    shutil.copytree(mixed_coco_root, root, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns('*.mdxstore*'))
    path = root / 'annotations' / 'instances_train.json'
    coco = json.loads(path.read_text())
    image_id = max(image['id'] for image in coco['images']) + 1
    cv2.imwrite(str(root / 'train' / 'square.jpg'), np.full((64, 64, 3), 120, np.uint8))
    coco['images'].append(dict(id=image_id, file_name='square.jpg', width=64, height=64))
    coco['annotations'].append(dict(
        id=max(ann['id'] for ann in coco['annotations']) + 1, image_id=image_id, category_id=1,
        bbox=[16, 16, 32, 32], area=1024.0, iscrowd=0, segmentation=[[16, 16, 48, 16, 48, 48]]))
    path.write_text(json.dumps(coco))
    return root


def _dataset(root, cls=LazyCocoDataset, **kwargs):
    return cls(data_root=str(root), ann_file='annotations/instances_train.json',
               data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES), pipeline=[],
               **kwargs)


def _sampler(dataset, seed, epoch):
    sampler = DefaultSampler(dataset, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    return sampler


def _both(dataset, batch_size, drop_last, seed, epoch, reference=None):
    """(ours, mmdet's) (batches, length) of one epoch; mmdet's over ``reference`` if given."""
    return [(list(batches), len(batches)) for batches in (
        FastAspectRatioBatchSampler(_sampler(dataset, seed, epoch), batch_size, drop_last),
        AspectRatioBatchSampler(_sampler(reference or dataset, seed, epoch), batch_size,
                                drop_last))]


class _Calls:
    """Counts calls of ``LazyCocoDataset.get_data_info`` (whoever makes them) while active."""

    def __init__(self):
        self.count = 0

    def __enter__(self):
        code = LazyCocoDataset.get_data_info.__code__

        def profile(frame, event, arg):
            if event == 'call' and frame.f_code is code:
                self.count += 1
        sys.setprofile(profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


def test_batches_are_mmdets_over_coco_dataset(square_coco_root):
    """Same batches, order and length as mmdet's sampler over mmdet's own CocoDataset, for
    several seeds, epochs, batch sizes and drop_last both ways; the case where drop_last drops a
    full last batch (mmdet's rest handling) is among them."""
    full_rest_dropped = regrouped = 0
    for filter_cfg in (None, dict(filter_empty_gt=True)):  # 12 images, 11 images
        ours = _dataset(square_coco_root, filter_cfg=filter_cfg)
        theirs = _dataset(square_coco_root, CocoDataset, filter_cfg=filter_cfg)
        infos = [ours.get_data_info(i) for i in range(len(ours))]
        assert 0 < sum(info['width'] < info['height'] for info in infos) < len(ours)
        for seed, epoch in ((0, 0), (0, 1), (1, 2), (7, 0)):
            for batch_size in (2, 3, 4, 5):
                for drop_last in (False, True):
                    (mine, my_len), (mmdet, mmdet_len) = _both(
                        ours, batch_size, drop_last, seed, epoch, reference=theirs)
                    assert mine == mmdet and my_len == mmdet_len
                    full_rest_dropped += drop_last and len(mmdet) < mmdet_len
                    regrouped += sum(mine, []) != list(_sampler(ours, seed, epoch))
    assert full_rest_dropped and regrouped


def test_sizes_come_from_the_store_without_get_data_info(mixed_coco_root):
    dataset = _dataset(mixed_coco_root)
    sampler = DefaultSampler(dataset, shuffle=True, seed=3)
    with _Calls() as calls:
        mine = list(FastAspectRatioBatchSampler(sampler, batch_size=2))
    assert calls.count == 0
    with _Calls() as calls:
        mmdet = list(AspectRatioBatchSampler(sampler, batch_size=2))
    assert calls.count == len(dataset) and mine == mmdet
    widths, heights = image_sizes(dataset, list(range(len(dataset))))
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert widths.tolist() == [info['width'] for info in infos]
    assert heights.tolist() == [info['height'] for info in infos]


class _SquareDataset(LazyCocoDataset):
    """Every image reported square: a get_data_info of its own, which the store cannot know."""

    def get_data_info(self, idx):
        info = super().get_data_info(idx)
        info['height'] = info['width']
        return info


def test_a_subclass_with_its_own_get_data_info_is_asked_per_index(mixed_coco_root):
    dataset = _dataset(mixed_coco_root, _SquareDataset)
    assert dataset.image_sizes([0]) is None
    (mine, _), (mmdet, _) = _both(dataset, 3, False, seed=0, epoch=0)
    assert mine == mmdet
    order = list(DefaultSampler(dataset, seed=0))
    assert sum(mine, []) == order  # all square: one bucket, the sampler's order


@pytest.mark.parametrize('wrap', [
    lambda root: RepeatDataset(_dataset(root), times=3),
    lambda root: ClassBalancedDataset(_dataset(root), oversample_thr=0.5),
    lambda root: ConcatDataset([_dataset(root),
                                _dataset(root, filter_cfg=dict(filter_empty_gt=True))]),
], ids=['repeat', 'class_balanced', 'concat'])
def test_batches_are_mmdets_through_wrappers(mixed_coco_root, wrap):
    dataset = wrap(mixed_coco_root)
    for seed, epoch, drop_last in ((0, 0, False), (5, 1, True)):
        with _Calls() as calls:
            ours = FastAspectRatioBatchSampler(_sampler(dataset, seed, epoch), 3, drop_last)
            mine = list(ours)
        assert calls.count == 0
        mmdet = AspectRatioBatchSampler(_sampler(dataset, seed, epoch), 3, drop_last)
        assert mine == list(mmdet) and len(ours) == len(mmdet)
    widths, heights = image_sizes(dataset, list(range(len(dataset))))
    infos = [dataset.get_data_info(i) for i in range(len(dataset))]
    assert widths.tolist() == [info['width'] for info in infos]
    assert heights.tolist() == [info['height'] for info in infos]


def test_concat_with_a_dataset_without_sizes_asks_get_data_info(mixed_coco_root):
    dataset = ConcatDataset([_dataset(mixed_coco_root),
                             _dataset(mixed_coco_root, CocoDataset)])
    assert image_sizes(dataset, list(range(len(dataset)))) is None
    (mine, _), (mmdet, _) = _both(dataset, 4, False, seed=2, epoch=1)
    assert mine == mmdet


def test_infinite_sampler_batches_are_mmdets(mixed_coco_root):
    """InfiniteSampler (iteration-based configs) never ends and its iterators share one index
    stream: indices are drawn as mmdet draws them, so a second iterator (after the first was
    left, a full bucket behind) continues the stream where mmdet's does."""
    dataset = _dataset(mixed_coco_root)
    batches = []
    for cls in (FastAspectRatioBatchSampler, AspectRatioBatchSampler):
        batch_sampler = cls(InfiniteSampler(dataset, seed=4), batch_size=3)
        # Both iterators kept open: closing one closes the sampler's stream.
        iterators = [iter(batch_sampler), iter(batch_sampler)]
        batches.append([list(islice(it, count)) for it, count in zip(iterators, (1500, 7))])
    assert batches[0] == batches[1] and len(batches[0][1]) == 7


def test_an_abandoned_iterator_leaves_mmdets_buckets(mixed_coco_root):
    """ExactResumeHook clears ``_aspect_ratio_buckets`` when it restarts an iterator; they hold
    what mmdet's would, and a cleared sampler gives the epoch again."""
    dataset = _dataset(mixed_coco_root)
    samplers = [cls(DefaultSampler(dataset, seed=1), batch_size=2)
                for cls in (FastAspectRatioBatchSampler, AspectRatioBatchSampler)]
    for count in (1, 3):
        first = [list(islice(iter(s), count)) for s in samplers]
        assert first[0] == first[1]
        assert samplers[0]._aspect_ratio_buckets == samplers[1]._aspect_ratio_buckets
        for sampler in samplers:
            sampler._aspect_ratio_buckets = [[] for _ in sampler._aspect_ratio_buckets]
    assert list(samplers[0]) == list(samplers[1])


def test_exact_resume_skip_draws_its_batches(mixed_coco_root):
    """ResumableBatchSampler over ours: a skip gives the rest of the uninterrupted epoch."""
    dataset = _dataset(mixed_coco_root)
    loader = Runner.build_dataloader(dict(
        batch_size=3, num_workers=0, dataset=dataset,
        sampler=dict(type='DefaultSampler', shuffle=True),
        batch_sampler=dict(type='FastAspectRatioBatchSampler'),
        collate_fn=dict(type='pseudo_collate')), seed=5)
    assert type(loader.batch_sampler) is FastAspectRatioBatchSampler
    batches = install_resumable_loading(loader, seed=5, rank=0)
    batches.sampler.set_epoch(1)
    full = list(batches)
    assert [[key.index for key in batch] for batch in full] == list(
        AspectRatioBatchSampler(batches.sampler, batch_size=3))
    batches.skip_next(2)
    assert list(batches) == full[2:]


def test_adopt_puts_it_in_place(tmp_path, toy_coco_root):
    path = tmp_path / 'adopted.py'
    path.write_text(f'''_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
train_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(
    data_root='{toy_coco_root}/', metainfo=dict(classes={CLASSES!r}),
    ann_file='annotations/instances_train.json', data_prefix=dict(img='train/')))
from mmdet_ext.adopt import adopt  # noqa: E402
adopt(globals())
''')
    cfg = Config.fromfile(str(path))
    assert cfg.train_dataloader.batch_sampler.type == 'FastAspectRatioBatchSampler'
    loader = Runner.build_dataloader(cfg.train_dataloader.to_dict(), seed=0)
    assert type(loader.batch_sampler) is FastAspectRatioBatchSampler
    assert len(list(loader.batch_sampler)) == len(loader.batch_sampler)
