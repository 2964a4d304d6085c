"""The ``mmdet_ext::`` config scope and ``adopt(globals())`` on mmdet 3.3's own zoo configs.

Configs are read from another working directory, as a user's would be, and the datasets they
describe are built on the toy COCO set with mmdet's registry.
"""
import os
from pathlib import Path

import pytest
from mmdet.datasets import CocoDataset
from mmdet.registry import DATASETS
from mmdet.structures import DetDataSample
from mmengine.config import Config
from mmengine.hub import get_config
from mmengine.registry import HOOKS, DefaultScope

import mmdet_ext
from mmdet_ext import LazyCocoDataset, LazyInstanceMasks

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
ZOO_CONFIGS = [
    'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py',
    'mmdet::cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py',
    'mmdet::solov2/solov2_r50_fpn_1x_coco.py',
]


@pytest.fixture
def elsewhere(tmp_path: Path):
    """Run the test from a directory with no configs in it."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(cwd)


@pytest.fixture(autouse=True)
def mmdet_scope():
    """The Runner's default scope for mmdet configs, so mmdet's registries are the ones asked."""
    scope = DefaultScope.get_instance(f'test_adopt_{id(object())}', scope_name='mmdet')
    yield scope


def _write_adopted_config(directory: Path, zoo_config: str, data_root: Path) -> Path:
    """The README's three lines, with the toy data in place of COCO."""
    path = directory / 'adopted.py'
    path.write_text(f'''_base_ = '{zoo_config}'
toy = dict(data_root='{data_root}/', metainfo=dict(classes={TOY_CLASSES!r}))
train_dataloader = dict(dataset=dict(ann_file='annotations/instances_train.json',
                                     data_prefix=dict(img='train/'), **toy))
val_dataloader = dict(dataset=dict(ann_file='annotations/instances_val.json',
                                   data_prefix=dict(img='val/'), **toy))
test_dataloader = val_dataloader
from mmdet_ext.adopt import adopt  # noqa: E402
adopt(globals())
''')
    return path


@pytest.mark.parametrize('zoo_config', ZOO_CONFIGS)
def test_adopted_zoo_config_builds_its_datasets_with_our_types(zoo_config, elsewhere,
                                                              toy_coco_root):
    cfg = Config.fromfile(str(_write_adopted_config(elsewhere, zoo_config, toy_coco_root)))

    assert 'mmdet_ext' in cfg.custom_imports.imports
    assert cfg.model.data_preprocessor.type == 'FastDetDataPreprocessor'
    assert cfg.default_hooks.checkpoint.type == 'AtomicCheckpointHook'
    hook_types = [hook.type for hook in cfg.custom_hooks]
    assert hook_types == ['CpuCheckpointLoadHook', 'ExactResumeHook', 'MemoryWatchHook',
                          'WorkerDefaultsHook', 'InflightCleanupHook', 'SignalCheckpointHook',
                          'HangWatchdogHook']
    for name in ('train_dataloader', 'val_dataloader', 'test_dataloader'):
        loader = cfg[name]
        transform_types = [t.type for t in loader.dataset.pipeline]
        assert transform_types[0] == 'NativeLoadImageFromFile'
        assert 'LoadLazyAnnotations' in transform_types
        assert 'LoadAnnotations' not in transform_types and 'LoadImageFromFile' not in \
            transform_types
        assert loader.collate_fn == dict(type='fast_collate')
        # The config's own settings survive: the toy data it set before adopt().
        assert loader.dataset.data_root == f'{toy_coco_root}/'

    train_set = DATASETS.build(cfg.train_dataloader.dataset)
    val_set = DATASETS.build(cfg.val_dataloader.dataset)
    assert isinstance(train_set, LazyCocoDataset) and isinstance(val_set, LazyCocoDataset)
    # The toy set's image without annotations and its image under min_size=32 are filtered out.
    assert len(train_set) == _stock_length(cfg.train_dataloader.dataset) == 6
    assert len(val_set) == _stock_length(cfg.val_dataloader.dataset) == 4
    sample = train_set[0]['data_samples']
    assert isinstance(sample, DetDataSample)
    assert isinstance(sample.gt_instances.masks, LazyInstanceMasks)
    assert sample.gt_instances.masks.height == sample.img_shape[0]


def test_adopt_keeps_the_configs_own_hooks_and_mask_choice(elsewhere, toy_coco_root):
    path = elsewhere / 'own_hooks.py'
    path.write_text('''_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
custom_hooks = [dict(type='EMAHook'), dict(type='MemoryWatchHook', interval=7)]
val_dataloader = dict(dataset=dict(pipeline=[
    dict(type='LoadImageFromFile'), dict(type='LoadAnnotations', with_bbox=True),
    dict(type='PackDetInputs')]))
from mmdet_ext.adopt import adopt  # noqa: E402
adopt(globals())
''')
    cfg = Config.fromfile(str(path))
    assert [(h.type, h.get('interval')) for h in cfg.custom_hooks] == [
        ('EMAHook', None), ('MemoryWatchHook', 7), ('CpuCheckpointLoadHook', None),
        ('ExactResumeHook', None), ('WorkerDefaultsHook', None), ('InflightCleanupHook', None),
        ('SignalCheckpointHook', None), ('HangWatchdogHook', None)]
    # mmdet's LoadAnnotations loads no masks unless asked; the swap keeps that.
    assert cfg.val_dataloader.dataset.pipeline[1] == dict(
        type='LoadLazyAnnotations', with_bbox=True, with_mask=False)
    assert cfg.default_hooks.checkpoint.interval == 1  # mmdet's setting, only the type changed


def test_adopt_outside_a_config_with_a_base_is_an_error():
    from mmdet_ext.adopt import adopt
    with pytest.raises(ValueError, match='_base_'):
        adopt({'model': {}})


def test_scope_resolves_to_the_configs_inside_the_package(elsewhere):
    path = elsewhere / 'from_pieces.py'
    path.write_text('''_base_ = [
    'mmdet::_base_/models/mask-rcnn_r50_fpn.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet_ext::_base_/mmdet_ext_runtime.py',
]
''')
    cfg = Config.fromfile(str(path))
    package_configs = Path(mmdet_ext.__file__).parent / '.mim' / 'configs'
    # One place for the configs: the package's folder is the repository's configs/.
    assert (package_configs / '_base_' / 'mmdet_ext_runtime.py').samefile(
        REPO_ROOT / 'configs' / '_base_' / 'mmdet_ext_runtime.py')
    # Dicts read through the scope carry it, and its registries build them.
    assert {hook._scope_ for hook in cfg.custom_hooks} == {'mmdet_ext'}
    built = [type(HOOKS.build(hook)).__name__ for hook in cfg.custom_hooks]
    assert built == ['CpuCheckpointLoadHook', 'ExactResumeHook', 'MemoryWatchHook',
                     'WorkerDefaultsHook', 'InflightCleanupHook', 'SignalCheckpointHook',
                     'HangWatchdogHook']
    assert type(HOOKS.build(cfg.default_hooks.checkpoint)).__name__ == 'AtomicCheckpointHook'


def _stock_length(dataset_cfg) -> int:
    """How many images mmdet's own CocoDataset keeps with these arguments."""
    kwargs = {key: value for key, value in dataset_cfg.items()
              if key not in ('type', '_scope_', 'pipeline')}
    return len(CocoDataset(**kwargs, pipeline=[]))


def test_scoped_toy_dataset_config_builds_its_dataset(elsewhere, toy_coco_root):
    path = elsewhere / 'toy.py'
    path.write_text(f'''_base_ = 'mmdet_ext::_base_/datasets/toy_coco_instance.py'
train_dataloader = dict(dataset=dict(data_root='{toy_coco_root}/'))
''')
    cfg = Config.fromfile(str(path))
    dataset = DATASETS.build(cfg.train_dataloader.dataset)
    assert isinstance(dataset, LazyCocoDataset)
    assert len(dataset) == _stock_length(cfg.train_dataloader.dataset) == 7  # one has no objects


def test_unknown_scoped_config_names_the_path(elsewhere):
    path = elsewhere / 'missing.py'
    path.write_text("_base_ = 'mmdet_ext::_base_/no_such_runtime.py'\n")
    with pytest.raises(FileNotFoundError, match='no_such_runtime.py'):
        Config.fromfile(str(path))


def test_adopt_keeps_what_the_config_file_set_before_it(elsewhere):
    """The file's own `model`, `default_hooks` and `_delete_` lines survive the call (each was
    lost before: the first two replaced by what adopt set, the third popped by the merge)."""
    path = elsewhere / 'own_lines.py'
    path.write_text('''_base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
model = dict(backbone=dict(init_cfg=None), data_preprocessor=dict(pad_size_divisor=64))
default_hooks = dict(logger=dict(interval=1))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=5)
train_dataloader = dict(_delete_=True, batch_size=3, num_workers=0,
                        sampler=dict(type='DefaultSampler', shuffle=False),
                        dataset=dict(type='CocoDataset', data_root='d/', ann_file='a.json',
                                     pipeline=[dict(type='LoadImageFromFile'),
                                               dict(type='PackDetInputs')]))
from mmdet_ext.adopt import adopt  # noqa: E402
adopt(globals())
''')
    cfg = Config.fromfile(str(path))
    stock = get_config('mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py')
    assert cfg.model.backbone.init_cfg is None
    assert cfg.model.backbone.depth == stock.model.backbone.depth  # the rest of the base kept
    assert cfg.model.data_preprocessor.type == 'FastDetDataPreprocessor'
    assert cfg.model.data_preprocessor.pad_size_divisor == 64
    assert cfg.model.data_preprocessor.mean == stock.model.data_preprocessor.mean
    assert cfg.default_hooks.logger.interval == 1
    assert cfg.default_hooks.checkpoint.type == 'AtomicCheckpointHook'
    assert cfg.default_hooks.checkpoint.interval == stock.default_hooks.checkpoint.interval
    assert cfg.train_cfg == dict(type='IterBasedTrainLoop', max_iters=5)
    # The file's dataloader replaced the base's (no persistent_workers, no aspect-ratio
    # batch_sampler come back from it), and was adopted.
    assert 'persistent_workers' not in cfg.train_dataloader
    assert 'batch_sampler' not in cfg.train_dataloader
    assert cfg.train_dataloader.batch_size == 3
    assert cfg.train_dataloader.dataset.type == 'LazyCocoDataset'
    assert cfg.train_dataloader.collate_fn == dict(type='fast_collate')


def _train_types(pipeline: list) -> list:
    return [t['type'] for t in pipeline]


def test_adopt_gives_rtmdets_chain_its_exact_fast_steps_and_leaves_lsj_to_the_engine(
        elsewhere, toy_coco_root):
    """RTMDet-Ins: mmdet's mosaic, mix-up, colour jitter and pad swapped, the mosaic and the
    resize and crop after it made one ResizeCrop, the second stage's pipeline
    (PipelineSwitchHook) adopted too. The LSJ strong baseline: its resize and crop, straight
    after the loading steps, stay two steps (the batch engine plans them there), and its batches
    are still planned."""
    rtmdet = Config.fromfile(str(_write_adopted_config(
        elsewhere, 'mmdet::rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py', toy_coco_root)))
    assert _train_types(rtmdet.train_dataloader.dataset.pipeline) == [
        'NativeLoadImageFromFile', 'LoadLazyAnnotations', 'ResizeCrop',
        'FastYOLOXHSVRandomAug', 'RandomFlip', 'FastPad', 'FastCachedMixUp',
        'FilterAnnotations', 'FastPackDetInputs']
    resize_crop = rtmdet.train_dataloader.dataset.pipeline[2]
    assert (resize_crop['mosaic']['type'], resize_crop['resize']['type'],
            resize_crop['crop']['type']) == ('FastCachedMosaic', 'RandomResize', 'RandomCrop')
    switch, = [h for h in rtmdet.custom_hooks if h['type'] == 'PipelineSwitchHook']
    assert _train_types(switch['switch_pipeline']) == [
        'NativeLoadImageFromFile', 'LoadLazyAnnotations', 'RandomResize', 'RandomCrop',
        'FilterAnnotations', 'FastYOLOXHSVRandomAug', 'RandomFlip', 'FastPad',
        'FastPackDetInputs']

    lsj = Config.fromfile(str(_write_adopted_config(
        elsewhere, 'mmdet::strong_baselines/mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_'
        'lsj-100e_coco.py', toy_coco_root)))
    dataset_cfg = lsj.train_dataloader.dataset
    while 'pipeline' not in dataset_cfg:
        dataset_cfg = dataset_cfg['dataset']
    assert 'ResizeCrop' not in _train_types(dataset_cfg['pipeline'])
    dataset_cfg.update(data_root=f'{toy_coco_root}/', metainfo=dict(classes=TOY_CLASSES),
                       ann_file='annotations/instances_train.json',
                       data_prefix=dict(img='train/'))  # the RepeatDataset's inside
    dataset = DATASETS.build(dataset_cfg)
    assert dataset.batch_engine is not None
