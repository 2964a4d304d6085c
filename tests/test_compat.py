"""``mmdet_ext._compat`` against the installed mmengine, mmdet and mmcv.

Whichever family installed them (OpenMMLab's mmengine 0.10.7 / mmdet 3.3.0 / mmcv 2.1.0, or the
fork's onedl-mmengine 0.10.12 / onedl-mmdetection 3.5.1 / onedl-mmcv 2.3.6): every private
upstream name the seam records is looked up, its parameters compared with the ones read, every
upstream method we re-implement is hashed against that family's record, and every behaviour the
families do differently is measured and compared with the installed family's record; then each
wrapper is exercised on real upstream objects. A failure names the upstream name, the family and
version it was read from and the code of ours to re-check.
"""
import copy
import hashlib
import importlib
import inspect
from pathlib import Path
from typing import Any, Callable

import mmcv
import mmdet
import mmengine
import numpy as np
import pytest
import torch
from mmdet.datasets.samplers import AspectRatioBatchSampler
from mmdet.datasets.transforms import LoadAnnotations, RandomFlip, Resize
from mmdet.structures.bbox import HorizontalBoxes
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from mmengine.dataset import BaseDataset
from mmengine.model import BaseModel, ImgDataPreprocessor
from mmengine.runner import BaseLoop, IterBasedTrainLoop, Runner
from mmengine.runner.checkpoint import CheckpointLoader
from mmengine.runner.loops import _InfiniteDataloaderIterator
from torch.utils.data import DataLoader, SequentialSampler

from mmdet_ext import _compat
from mmdet_ext._framework import FAMILIES, IMPORT_NAMES, installed_family
from mmdet_ext.structures import LazyInstanceMasks
from mmdet_ext.transforms import LoadLazyAnnotations, NativeLoadResizeFlip

INSTALLED = {'mmengine': mmengine.__version__, 'mmdet': mmdet.__version__,
             'mmcv': mmcv.__version__}


def changed(name: str, what: str, recheck: str) -> str:
    """The failure message: what changed, where we read it, what to re-check."""
    package = name.split('.')[0]
    return (f'{name} {what}. mmdet_ext/_compat.py read it from {package} '
            f'{_compat.UPSTREAM_VERSIONS[package]} ({_compat.FAMILY[package]}); installed is '
            f'{package} {INSTALLED[package]}. Re-check {recheck} against the new upstream '
            'source, then update the record in mmdet_ext/_compat.py.')


def resolve(name: str) -> Any:
    """The object a dotted upstream name refers to, looked up statically (no descriptor runs)."""
    parts = name.split('.')
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:split]))
        except ImportError:
            continue
        for attr in parts[split:]:
            obj = inspect.getattr_static(obj, attr)
        return obj
    raise ImportError(name)


def undecorated(func: Callable) -> Callable:
    """The method under mmdet's ``autocast_box_type``, which wraps without ``functools.wraps``,
    or under mmcv's ``cache_randomness`` (an object whose ``__wrapped__`` is the method)."""
    func = getattr(func, '__wrapped__', func)
    while func.__closure__:
        inner = [c.cell_contents for c in func.__closure__ if inspect.isfunction(c.cell_contents)]
        if len(inner) != 1:
            break
        func = inner[0]
    return func


# ---- the records ----------------------------------------------------------------------------
@pytest.mark.parametrize('name', sorted(_compat.PRIVATE_CALLABLES))
def test_private_callable_has_the_recorded_parameters(name: str) -> None:
    record = _compat.PRIVATE_CALLABLES[name]
    try:
        func = resolve(name)
    except AttributeError:
        pytest.fail(changed(name, 'no longer exists', record.used_by))
    params = tuple(inspect.signature(func).parameters)
    assert params == record.params, changed(
        name, f'now takes {params}, not {record.params}', record.used_by)


@pytest.mark.parametrize('name', sorted(_compat.COPIED_SOURCES))
def test_reimplemented_method_is_unchanged_upstream(name: str) -> None:
    record = _compat.COPIED_SOURCES[name]
    try:
        func = undecorated(resolve(name))
    except AttributeError:
        pytest.fail(changed(name, 'no longer exists', record.copied_in))
    digest = hashlib.sha256(inspect.getsource(func).encode()).hexdigest()
    recorded = record.sha256[_compat.FAMILY[name.split('.')[0]]]
    assert digest == recorded, changed(
        name, f'has a new body (source SHA-256 {digest}, recorded {recorded})',
        f'our copy in {record.copied_in}')


def test_every_record_is_read_in_both_families() -> None:
    assert set(_compat.READ_FROM) == set(FAMILIES)
    for name, record in _compat.COPIED_SOURCES.items():
        assert set(record.sha256) == set(FAMILIES), name
    for name, record in _compat.FAMILY_DIFFERENCES.items():
        assert record.package in _compat.READ_FROM['openmmlab'], name
        assert record.openmmlab != record.onedl, f'{name}: not a difference'


def test_family_is_the_installed_distributions() -> None:
    for name in IMPORT_NAMES:
        assert _compat.FAMILY[name] == (installed_family(name) or 'openmmlab'), name


class TinyModel(BaseModel):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 1)

    def forward(self, inputs, data_samples=None, mode: str = 'tensor'):
        return self.linear(inputs)


@pytest.fixture
def make_runner(tmp_path: Path) -> Callable[..., Runner]:
    """A real Runner with a train loop configured but not built; ``Runner(**overrides)``."""
    count = iter(range(100))

    def make(**overrides) -> Runner:
        index = next(count)
        kwargs = dict(model=TinyModel(), work_dir=str(tmp_path / str(index)),
                      train_dataloader=torch.utils.data.DataLoader([0.0, 1.0], batch_size=1),
                      train_cfg=dict(by_epoch=True, max_epochs=1),
                      optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.1)), default_hooks={},
                      log_level='WARNING', experiment_name=f'{tmp_path.name}_{index}')
        return Runner(**{**kwargs, **overrides})

    return make


@pytest.mark.parametrize('name', sorted(_compat.PRIVATE_ATTRIBUTES))
def test_private_attribute_exists_on_a_real_object(name: str, make_runner) -> None:
    owner, attr = name.rsplit('.', 1)
    instances = {
        'mmengine.runner.Runner': make_runner,
        'mmengine.runner.checkpoint.CheckpointLoader': lambda: CheckpointLoader,
        'mmengine.dataset.BaseDataset': lambda: BaseDataset(ann_file='', lazy_init=True),
        'mmengine.model.ImgDataPreprocessor': ImgDataPreprocessor,
        'mmdet.datasets.samplers.AspectRatioBatchSampler':
            lambda: AspectRatioBatchSampler(SequentialSampler([0]), 1),
        'mmengine.runner.loops._InfiniteDataloaderIterator':
            lambda: _InfiniteDataloaderIterator(DataLoader([0])),
        'torch.utils.data.dataloader._MultiProcessingDataLoaderIter':
            lambda: iter(DataLoader([0], num_workers=1)),
    }
    assert hasattr(instances[owner](), attr), changed(
        name, 'no longer exists', _compat.PRIVATE_ATTRIBUTES[name])


# ---- the wrappers, on real upstream objects --------------------------------------------------
def test_runner_save_checkpoint_ends_in_the_call_we_take_over(tmp_path, make_runner) -> None:
    """``runner_saves_checkpoints_with``: the Runner's checkpoint, hooks applied, goes to the
    given function, and nothing else is written."""
    calls = []
    runner = make_runner()
    with _compat.runner_saves_checkpoints_with(
            lambda checkpoint, filepath, **options: calls.append((checkpoint, filepath))):
        runner.save_checkpoint(str(tmp_path), 'taken.pth', save_optimizer=False,
                               save_param_scheduler=False)
    assert len(calls) == 1, changed('mmengine.runner.Runner.save_checkpoint',
                                    'no longer ends in mmengine.runner.runner.save_checkpoint',
                                    'AtomicCheckpointHook (background saves)')
    checkpoint, filepath = calls[0]
    assert filepath == str(tmp_path / 'taken.pth') and not (tmp_path / 'taken.pth').exists()
    assert {'meta', 'state_dict', 'message_hub'} <= set(checkpoint)
    runner.save_checkpoint(str(tmp_path), 'written.pth', save_optimizer=False,
                           save_param_scheduler=False)
    assert (tmp_path / 'written.pth').exists()  # put back afterwards


def test_scale_size_is_what_resize_uses() -> None:
    resize = Resize(scale_factor=0.37)
    results = resize.transform({'img': np.zeros((37, 53, 3), np.uint8)})
    assert _compat.scale_size((53, 37), 0.37) == results['scale'], changed(
        'mmcv.image.geometric._scale_size', "no longer gives Resize's scale",
        'NativeLoadResizeFlip._target_size')


def test_choose_flip_direction_draws_as_random_flip() -> None:
    flip = RandomFlip(prob=0.5, direction=['horizontal', 'vertical'])
    np.random.seed(0)
    ours = [_compat.choose_flip_direction(flip) for _ in range(20)]
    np.random.seed(0)
    theirs = [flip.transform({'img': np.zeros((2, 2, 3), np.uint8)})['flip_direction']
              for _ in range(20)]
    assert ours == theirs, changed('mmdet.datasets.transforms.RandomFlip._choose_direction',
                                   'draws differently from RandomFlip.transform',
                                   'NativeLoadResizeFlip.transform')
    assert set(ours) == {None, 'horizontal', 'vertical'}


@pytest.mark.parametrize('step', [
    dict(type='RandomResize', scale=[(20, 10), (60, 40)], keep_ratio=True),
    dict(type='RandomResize', scale=(30, 20), ratio_range=(0.5, 2.0)),
    dict(type='RandomChoiceResize', scales=[(20, 10), (60, 40), (31, 17)])])
def test_draw_resize_scale_draws_as_the_random_resize(step) -> None:
    from mmcv.transforms import TRANSFORMS
    from mmengine.registry import DefaultScope
    with DefaultScope.overwrite_default_scope('mmdet'):
        step = TRANSFORMS.build(step)
    np.random.seed(0)
    ours = [(_compat.draw_resize_scale(step), step.resize.scale) for _ in range(20)]
    np.random.seed(0)
    theirs = [step.transform({'img': np.zeros((24, 32, 3), np.uint8)}) for _ in range(20)]
    assert ours == [(r.get('scale_idx'), r['scale']) for r in theirs], changed(
        f'mmcv.transforms.{type(step).__name__}', 'draws differently from its transform',
        'NativeLoadResizeFlip._steps_before_resize')
    assert len({scale for _, scale in ours}) > 1


def annotated_results(height: int = 20, width: int = 30) -> dict:
    masks = np.zeros((1, height, width), np.uint8)
    masks[0, 2:9, 3:17] = 1
    return {'img': np.zeros((height, width, 3), np.uint8),
            'gt_bboxes': HorizontalBoxes(np.array([[3., 2., 17., 9.]], np.float32)),
            'gt_masks': BitmapMasks(masks, height, width),
            'gt_seg_map': np.arange(height * width, dtype=np.uint8).reshape(height, width)}


def assert_same_annotations(ours: dict, theirs: dict, name: str, recheck: str) -> None:
    message = changed(name, 'no longer matches what its public transform does', recheck)
    assert torch.equal(ours['gt_bboxes'].tensor, theirs['gt_bboxes'].tensor), message
    assert np.array_equal(ours['gt_masks'].masks, theirs['gt_masks'].masks), message
    assert np.array_equal(ours['gt_seg_map'], theirs['gt_seg_map']), message
    assert np.array_equal(ours['homography_matrix'], theirs['homography_matrix']), message


def test_resize_annotations_and_homography_are_resize_after_its_image_step() -> None:
    resize = Resize(scale=(45, 16), keep_ratio=False)
    theirs = resize.transform(annotated_results())
    ours = annotated_results()
    ours.update({key: theirs[key] for key in
                 ('img', 'img_shape', 'scale', 'scale_factor', 'keep_ratio')})
    _compat.resize_annotations(resize, ours)
    _compat.record_homography(resize, ours)
    assert_same_annotations(ours, theirs, 'mmdet.datasets.transforms.Resize._resize_*',
                            'mmdet_ext._compat.resize_annotations, record_homography')


@pytest.mark.parametrize('direction', ['horizontal', 'vertical', 'diagonal'])
def test_record_homography_is_random_flip_after_its_image_step(direction) -> None:
    """NativeLoadResizeFlip flips the image natively, then the annotations and the homography
    (``_compat.record_homography``) as mmdet's RandomFlip._flip does."""
    native = NativeLoadResizeFlip(scale=(30, 20), prob=1.0, direction=direction)
    theirs = RandomFlip(prob=1.0, direction=direction).transform(annotated_results())
    ours = annotated_results()
    ours['img'], ours['flip_direction'] = theirs['img'], direction
    native._flip_annotations(ours, direction)
    assert_same_annotations(ours, theirs, 'mmdet.datasets.transforms.RandomFlip._flip',
                            'NativeLoadResizeFlip._flip_annotations')


def test_checkpoint_schemes_are_what_checkpoint_loader_dispatches_on() -> None:
    before = _compat.checkpoint_schemes()
    assert '' in before and all(callable(loader) for loader in before.values())
    _compat.set_checkpoint_schemes({**before, '': lambda filename, map_location=None: filename})
    try:
        loaded = CheckpointLoader.load_checkpoint('some.pth')
    finally:
        _compat.set_checkpoint_schemes(before)
    assert loaded == 'some.pth', changed(
        'mmengine.runner.checkpoint.CheckpointLoader._schemes', 'is no longer what '
        'CheckpointLoader.load_checkpoint dispatches on', 'install_cpu_checkpoint_loader')
    assert _compat.checkpoint_schemes() == before


def record_calls(runner: Runner) -> list:
    calls = []
    runner.resume = lambda path, **kwargs: calls.append(('resume', path))
    runner.load_checkpoint = lambda path, **kwargs: calls.append(('load', path))
    return calls


RESUME_RECHECK = 'CpuCheckpointLoadHook.before_run and ExactResumeHook.after_load_checkpoint'


def test_runner_resume_and_load_from_steer_load_or_resume(make_runner) -> None:
    runner = make_runner(resume=True, load_from=None)
    assert _compat.runner_resume_requested(runner) is True
    assert _compat.runner_load_from(runner) is None
    calls = record_calls(runner)
    _compat.set_runner_load_from(runner, 'chosen.pth')
    runner.load_or_resume()
    assert calls == [('resume', 'chosen.pth')], changed(
        'mmengine.runner.Runner._load_from', 'no longer steers Runner.load_or_resume',
        RESUME_RECHECK)

    runner = make_runner(resume=False, load_from='weights.pth')
    assert _compat.runner_resume_requested(runner) is False
    assert _compat.runner_load_from(runner) == 'weights.pth'
    calls = record_calls(runner)
    _compat.set_runner_resume(runner, True)
    runner.load_or_resume()
    assert calls == [('resume', 'weights.pth')], changed(
        'mmengine.runner.Runner._resume', 'no longer steers Runner.load_or_resume',
        RESUME_RECHECK)


def test_runner_loops_are_the_loops_before_and_after_they_are_built(make_runner) -> None:
    runner = make_runner()
    loops = _compat.runner_loops(runner)
    assert sorted(loops) == ['test', 'train', 'val']
    assert loops['val'] is None and loops['test'] is None
    assert isinstance(loops['train'], dict), changed(
        'mmengine.runner.Runner._train_loop', 'is no longer the config before the loop is built',
        'WorkerDefaultsHook.before_run, MemoryWatchHook._loaders')
    built = runner.train_loop
    assert isinstance(built, BaseLoop) and _compat.runner_loops(runner)['train'] is built, changed(
        'mmengine.runner.Runner._train_loop', 'is no longer where Runner.train_loop keeps the loop',
        'WorkerDefaultsHook.before_run, MemoryWatchHook._loaders')


def test_dataset_lazy_init_flag_and_indices() -> None:
    dataset = BaseDataset(ann_file='', lazy_init=True, indices=[0], serialize_data=False)
    assert _compat.dataset_fully_initialized(dataset) is False
    assert _compat.dataset_indices(dataset) == [0], changed(
        'mmengine.dataset.BaseDataset._indices', 'no longer holds the indices argument',
        'LazyCocoDataset.full_init')
    _compat.mark_dataset_fully_initialized(dataset)
    # full_init would fail (no annotation file): force_full_init must trust the flag.
    assert len(dataset) == 0, changed(
        'mmengine.dataset.BaseDataset._fully_initialized', 'is no longer what force_full_init '
        'checks', 'LazyCocoDataset.full_init, __len__, get_data_info')
    assert _compat.dataset_fully_initialized(dataset) is True


def test_preprocessor_flags() -> None:
    plain = ImgDataPreprocessor()
    assert not _compat.preprocessor_swaps_channels(plain)
    assert not _compat.preprocessor_normalizes(plain)
    full = ImgDataPreprocessor(mean=[1., 2., 3.], std=[2., 2., 2.], bgr_to_rgb=True)
    assert _compat.preprocessor_swaps_channels(full) and _compat.preprocessor_normalizes(full)
    inputs = torch.arange(3, dtype=torch.uint8).view(3, 1, 1)
    out = full({'inputs': [inputs]})['inputs'][0].view(-1)
    assert out.tolist() == [(2 - 1) / 2, (1 - 2) / 2, (0 - 3) / 2], changed(
        'mmengine.model.ImgDataPreprocessor._channel_conversion', 'no longer means "reverse '
        'channels, then normalise"', 'FastDetDataPreprocessor')


def test_load_annotations_still_dispatches_to_load_masks() -> None:
    results = {'instances': [], 'height': 4, 'width': 5}
    out = LoadLazyAnnotations(with_bbox=False, with_label=False).transform(copy.deepcopy(results))
    assert isinstance(out['gt_masks'], LazyInstanceMasks), changed(
        'mmdet.datasets.transforms.LoadAnnotations._load_masks', 'is no longer called by '
        'LoadAnnotations.transform', 'LoadLazyAnnotations._load_masks')
    assert LoadAnnotations._load_masks is not LoadLazyAnnotations._load_masks


# ---- what the families do differently: measured, against the installed family's record ------
class CallRecorder:
    """Wraps a loop's real ``dataloader_iterator`` and notes how the loop passes over batches."""

    def __init__(self, iterator: Any) -> None:
        self.iterator, self.calls = iterator, []

    def __next__(self) -> Any:
        self.calls.append('next')
        return next(self.iterator)

    def skip_iter(self, num_iters: int) -> None:
        self.calls.append(f'skip_iter({num_iters})')


NO_HOOKS = {name: None for name in ('runtime_info', 'timer', 'sampler_seed', 'logger',
                                     'param_scheduler', 'checkpoint')}


def resume_calls(make_runner, **loop_options) -> list:
    """How a real ``IterBasedTrainLoop`` at iteration 3 of 3 passes over the done batches."""
    runner = make_runner(train_cfg=dict(type='IterBasedTrainLoop', max_iters=3, **loop_options),
                         default_hooks=NO_HOOKS)
    loop = runner.train_loop
    loop._iter = 3
    recorder = loop.dataloader_iterator = CallRecorder(loop.dataloader_iterator)
    loop.run()
    return recorder.calls


def resumes_through_skip_iter(make_runner) -> bool:
    calls = resume_calls(make_runner)
    assert calls in (['next'] * 3, ['skip_iter(3)']), calls
    return calls == ['skip_iter(3)']


def fast_forward_skips_nothing(make_runner) -> bool:
    if 'fast_forward_on_resume' not in inspect.signature(IterBasedTrainLoop).parameters:
        return False
    return resume_calls(make_runner, fast_forward_on_resume=True) == []


def loop_iterator_is_lazy(make_runner) -> bool:
    return _InfiniteDataloaderIterator(DataLoader([0]))._iterator is None


def bitmap_masks_keep_the_array(make_runner) -> bool:
    pixels = np.zeros((2, 3, 4), np.uint8)
    return BitmapMasks(pixels, 3, 4).masks is pixels


def translate_takes_both(make_runner) -> bool:
    pixels = np.zeros((1, 6, 7), np.uint8)
    pixels[0, 1, 1] = 1
    try:
        moved = BitmapMasks(pixels, 6, 7).translate((6, 7), (2, 3), 'both').masks
    except AssertionError:  # mmcv.imtranslate: horizontal or vertical only
        return False
    return bool(moved[0, 4, 3]) and moved.sum() == 1


def polygon_translate_clips_both_axes(make_runner) -> bool:
    outside_below = PolygonMasks([[np.array([1.0, 1.0, 3.0, 9.0, 1.0, 9.0])]], 6, 7)
    return outside_below.translate((6, 7), 1, 'horizontal').masks[0][0][3] == 6.0


def polygon_rotate_turns_about_the_centre(make_runner) -> bool:
    point = PolygonMasks([[np.array([1.0, 1.0, 2.0, 1.0, 1.0, 2.0])]], 11, 21)
    rotated = point.rotate((11, 21), 180, center=None).masks[0][0]
    return np.allclose(rotated[:2], [19.0, 9.0])  # about ((21 - 1) / 2, (11 - 1) / 2)


PROBES = {'skip_iter_resume': resumes_through_skip_iter,
          'fast_forward_on_resume': fast_forward_skips_nothing,
          'lazy_loop_iterator': loop_iterator_is_lazy,
          'bitmap_masks_keep_array': bitmap_masks_keep_the_array,
          'translate_both': translate_takes_both,
          'polygon_translate_clips_both_axes': polygon_translate_clips_both_axes,
          'polygon_rotate_about_centre': polygon_rotate_turns_about_the_centre}


def test_every_family_difference_has_a_probe() -> None:
    assert sorted(PROBES) == sorted(_compat.FAMILY_DIFFERENCES)


@pytest.mark.parametrize('name', sorted(_compat.FAMILY_DIFFERENCES))
def test_family_difference_is_as_recorded_for_the_installed_family(name: str, make_runner,
                                                                    no_dataloader_restart_pause
                                                                    ) -> None:
    record = _compat.FAMILY_DIFFERENCES[name]
    measured = PROBES[name](make_runner)
    assert measured == _compat.family_has(name), changed(
        f'{record.package}: {record.behaviour}', f'is {measured} for the installed package, '
        f'recorded {_compat.family_has(name)} for its family', record.handled_by)


def test_resume_skip_count_is_what_the_loop_passes_over(make_runner) -> None:
    runner = make_runner(train_cfg=dict(type='IterBasedTrainLoop', max_iters=3))
    runner.train_loop._iter = 3
    assert _compat.resume_skip_count(runner.train_loop) == 3
    if _compat.family_has('fast_forward_on_resume'):
        runner = make_runner(train_cfg=dict(type='IterBasedTrainLoop', max_iters=3,
                                            fast_forward_on_resume=True))
        runner.train_loop._iter = 3
        assert _compat.resume_skip_count(runner.train_loop) == 0


def test_skip_batches_uses_skip_iter_where_there_is_one() -> None:
    numbers = iter(range(10))
    _compat.skip_batches(numbers, 3)
    assert next(numbers) == 3
    recorder = CallRecorder(iter(range(10)))
    _compat.skip_batches(recorder, 4)
    _compat.skip_batches(recorder, 0)
    assert recorder.calls == ['skip_iter(4)']


@pytest.mark.parametrize('offset', [(2, 3), (-3, 5), (9, -1), (0, 0), 4], ids=repr)
def test_translate_both_moves_and_clips_both_axes(offset) -> None:
    """The fork's ``translate(direction='both')`` (its Mosaic passes whole pixels), in either
    family: polygon points moved by (dx, dy) and clipped to the new size, bitmaps shifted with
    zeros coming in (``BitmapMasks`` first crops or zero-pads to the new size at the top left)."""
    dx, dy = offset if isinstance(offset, tuple) else (offset, offset)
    rng = np.random.default_rng([dx + 20, dy + 20])
    parts = [rng.uniform(-2, 14, 8) for _ in range(3)]
    moved = _compat.translate_masks(PolygonMasks([[p] for p in parts], 12, 10), (13, 9),
                                    offset, 'both')
    assert type(moved) is PolygonMasks and (moved.height, moved.width) == (13, 9)
    for (ours,), part in zip(moved.masks, parts):
        np.testing.assert_array_equal(ours[0::2], np.clip(part[0::2] + dx, 0, 9))
        np.testing.assert_array_equal(ours[1::2], np.clip(part[1::2] + dy, 0, 13))

    pixels = (rng.random((3, 12, 10)) > 0.6).astype(np.uint8)
    canvas = np.zeros((3, 13, 9), np.uint8)
    canvas[:, :12, :9] = pixels[:, :, :9]
    expected = np.zeros_like(canvas)
    expected[:, max(dy, 0):13 + min(dy, 0), max(dx, 0):9 + min(dx, 0)] = \
        canvas[:, max(-dy, 0):13 - max(dy, 0), max(-dx, 0):9 - max(dx, 0)]
    moved = _compat.translate_masks(BitmapMasks(pixels, 12, 10), (13, 9), offset, 'both')
    assert type(moved) is BitmapMasks and (moved.height, moved.width) == (13, 9)
    np.testing.assert_array_equal(moved.masks, expected)


def test_bitmap_masks_pixels_are_what_bitmap_masks_holds() -> None:
    pixels = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    held = BitmapMasks(pixels, 3, 4).masks
    ours = _compat.bitmap_masks_pixels(pixels)
    np.testing.assert_array_equal(ours, held)
    assert (ours is pixels) == (held is pixels)
    listed = _compat.bitmap_masks_pixels(list(pixels))
    assert listed is not pixels and np.array_equal(listed, pixels)
