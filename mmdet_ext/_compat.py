"""The one seam between mmdet_ext and the private parts of mmengine, mmdet and mmcv.

Any private upstream call (a ``_name`` function, method or attribute of mmengine, mmdet or mmcv)
goes through here; the rest of the package uses only the functions below. Everything was read from
both families that install these import names (``_framework.FAMILIES``): OpenMMLab's mmengine
0.10.7, mmdet 3.3.0, mmcv 2.1.0 and the maintained fork's onedl-mmengine 0.10.12,
onedl-mmdetection 3.5.1, onedl-mmcv 2.3.6 (:data:`READ_FROM`). Which family installed each package
is read once, at import (:data:`FAMILY`); callers never test versions themselves.

Four tables record what we rely on, and ``tests/test_compat.py`` checks each against the installed
packages, so an upgrade that renames, removes or reshapes one fails there, naming it:

- :data:`PRIVATE_CALLABLES`: private functions/methods we call or override, with their parameters;
- :data:`PRIVATE_ATTRIBUTES`: private attributes we read or write;
- :data:`COPIED_SOURCES`: upstream methods whose body we re-implement (a method override, or the
  tail of one), with the SHA-256 of ``inspect.getsource`` of the upstream method as read in
  each family;
- :data:`FAMILY_DIFFERENCES`: behaviour we depend on that the two families do differently (the
  fork's ``skip_iter`` resume, its mask API), what each family does, and the code that copes.
"""
import bisect
import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Union

import cv2
import numpy as np
from mmcv.image.geometric import _scale_size, cv2_interp_codes
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from mmengine.runner import runner as runner_module
from mmengine.runner.checkpoint import CheckpointLoader

from ._framework import IMPORT_NAMES, installed_family

if TYPE_CHECKING:
    from mmdet.datasets.transforms import RandomFlip, Resize

# The versions each family's records were read from.
READ_FROM = {'openmmlab': {'mmengine': '0.10.7', 'mmdet': '3.3.0', 'mmcv': '2.1.0'},
             'onedl': {'mmengine': '0.10.12', 'mmdet': '3.5.1', 'mmcv': '2.3.6'}}
# The family whose records hold for each installed package. A package no distribution installed
# (a source tree on sys.path) or installed by both families is taken for OpenMMLab's, and
# tests/test_compat.py says so if its behaviour is the fork's.
FAMILY = {name: installed_family(name) or 'openmmlab' for name in IMPORT_NAMES}
UPSTREAM_VERSIONS = {name: READ_FROM[FAMILY[name]][name] for name in IMPORT_NAMES}


class PrivateCallable(NamedTuple):
    """A private upstream function or method: its parameter names as read, and who uses it."""
    params: tuple[str, ...]
    used_by: str


class CopiedSource(NamedTuple):
    """An upstream method we re-implement: SHA-256 of its source as read in each family
    (``{family: digest}``), and where our copy is."""
    sha256: dict[str, str]
    copied_in: str


class FamilyDifference(NamedTuple):
    """Behaviour mmdet_ext depends on that differs between the families: the package, what it
    is, whether each family (as read) has it, and the code of ours that copes with both."""
    package: str
    behaviour: str
    openmmlab: bool
    onedl: bool
    handled_by: str


PRIVATE_CALLABLES: dict[str, PrivateCallable] = {
    'mmcv.image.geometric._scale_size': PrivateCallable(
        ('size', 'scale'), '_compat.scale_size (NativeLoadResizeFlip)'),
    'mmdet.datasets.transforms.RandomFlip._choose_direction': PrivateCallable(
        ('self',), '_compat.choose_flip_direction (NativeLoadResizeFlip)'),
    'mmcv.transforms.RandomResize._random_scale': PrivateCallable(
        ('self',), '_compat.draw_resize_scale (NativeLoadResizeFlip.scale_step)'),
    'mmcv.transforms.RandomChoiceResize._random_select': PrivateCallable(
        ('self',), '_compat.draw_resize_scale (NativeLoadResizeFlip.scale_step)'),
    'mmdet.datasets.transforms.RandomFlip._record_homography_matrix': PrivateCallable(
        ('self', 'results'), '_compat.record_homography (NativeLoadResizeFlip)'),
    'mmdet.datasets.transforms.Resize._resize_bboxes': PrivateCallable(
        ('self', 'results'), '_compat.resize_annotations (NativeLoadResizeFlip)'),
    'mmdet.datasets.transforms.Resize._resize_masks': PrivateCallable(
        ('self', 'results'), '_compat.resize_annotations (NativeLoadResizeFlip)'),
    'mmdet.datasets.transforms.Resize._resize_seg': PrivateCallable(
        ('self', 'results'), '_compat.resize_annotations (NativeLoadResizeFlip)'),
    'mmdet.datasets.transforms.Resize._record_homography_matrix': PrivateCallable(
        ('self', 'results'), '_compat.record_homography (NativeLoadResizeFlip)'),
    'mmengine.dataset.InfiniteSampler._indices_of_rank': PrivateCallable(
        ('self',), '_compat.restart_infinite_iterator (ExactResumeHook)'),
    **{f'mmengine.dataset.{wrapper}._get_ori_dataset_idx': PrivateCallable(
        ('self', 'idx'), 'datasets.wrapper_fetch.fetch_batch, '
                         'datasets.aspect_ratio_sampler.image_sizes')
       for wrapper in ('RepeatDataset', 'ClassBalancedDataset', 'ConcatDataset')},
    # Overridden (a method override has to keep the private name):
    'mmdet.datasets.transforms.LoadAnnotations._load_masks': PrivateCallable(
        ('self', 'results'), 'mmdet_ext.transforms.LoadLazyAnnotations._load_masks'),
    'mmengine.hooks.CheckpointHook._save_checkpoint_with_step': PrivateCallable(
        ('self', 'runner', 'step', 'meta'),
        'mmdet_ext.engine.hooks.AtomicCheckpointHook._save_checkpoint_with_step'),
    'mmengine.hooks.CheckpointHook._save_best_checkpoint': PrivateCallable(
        ('self', 'runner', 'metrics'),
        'mmdet_ext.engine.hooks.AtomicCheckpointHook._save_best_checkpoint'),
}

PRIVATE_ATTRIBUTES: dict[str, str] = {
    'mmengine.runner.checkpoint.CheckpointLoader._schemes':
        '_compat.checkpoint_schemes, set_checkpoint_schemes (install_cpu_checkpoint_loader)',
    'mmengine.runner.Runner._resume': '_compat.runner_resume_requested, set_runner_resume '
                                      '(CpuCheckpointLoadHook, ExactResumeHook)',
    'mmengine.runner.Runner._load_from':
        '_compat.runner_load_from, set_runner_load_from (CpuCheckpointLoadHook)',
    **{f'mmengine.runner.Runner._{name}_loop':
       '_compat.runner_loops (WorkerDefaultsHook, MemoryWatchHook)'
       for name in ('train', 'val', 'test')},
    'mmengine.runner.loops._InfiniteDataloaderIterator._epoch':
        '_compat.infinite_iterator_epoch, data_epoch, restart_infinite_iterator '
        '(ExactResumeHook, DevicePrefetcher)',
    'mmengine.runner.loops._InfiniteDataloaderIterator._dataloader':
        '_compat.restart_infinite_iterator (ExactResumeHook)',
    'mmengine.runner.loops._InfiniteDataloaderIterator._iterator':
        '_compat.restart_infinite_iterator (ExactResumeHook)',
    'mmdet.datasets.samplers.AspectRatioBatchSampler._aspect_ratio_buckets':
        '_compat.restart_infinite_iterator (ExactResumeHook), FastAspectRatioBatchSampler',
    'mmengine.dataset.BaseDataset._fully_initialized':
        '_compat.dataset_fully_initialized, mark_dataset_fully_initialized (LazyCocoDataset)',
    'mmengine.dataset.BaseDataset._indices': '_compat.dataset_indices (LazyCocoDataset)',
    'mmengine.model.ImgDataPreprocessor._channel_conversion':
        '_compat.preprocessor_swaps_channels (FastDetDataPreprocessor)',
    'mmengine.model.ImgDataPreprocessor._enable_normalize':
        '_compat.preprocessor_normalizes (FastDetDataPreprocessor)',
    # torch (read from torch 2.13): a DataLoader iterator's worker processes.
    'torch.utils.data.dataloader._MultiProcessingDataLoaderIter._workers':
        '_compat.dataloader_worker_processes (HangWatchdogHook)',
    'torch.utils.data.dataloader._MultiProcessingDataLoaderIter._shutdown':
        '_compat.dataloader_worker_processes (HangWatchdogHook)',
}

# SHA-256 of ``inspect.getsource`` of the method itself (under mmdet's ``autocast_box_type``,
# which wraps without ``functools.wraps``, that is the wrapped method, not the wrapper; under
# mmcv's ``cache_randomness``, its ``__wrapped__``). The fork left every body as it was
# (onedl-mmengine 0.10.12, onedl-mmdetection 3.5.1, onedl-mmcv 2.3.6).
def _same_in_both(digest: str) -> dict[str, str]:
    return {family: digest for family in READ_FROM}


COPIED_SOURCES: dict[str, CopiedSource] = {
    'mmengine.hooks.CheckpointHook._save_checkpoint_with_step': CopiedSource(
        _same_in_both('cdbc1b54c7c88d9525ab025a9d51a3d3be6e6e36396c0f1151ecf51281fd3482'),
        'mmdet_ext.engine.hooks.AtomicCheckpointHook._save_checkpoint_with_step'),
    'mmdet.datasets.transforms.Resize.transform': CopiedSource(
        _same_in_both('f3de4fd27795b13c8057a40e0e4c019bdabd69a950240d806a7ce536f9a70f44'),
        'mmdet_ext.transforms.NativeLoadResizeFlip.transform'),
    'mmdet.datasets.transforms.RandomFlip._flip': CopiedSource(
        _same_in_both('90087eb768fb57f13ac28188b4b0ed8e95908e4ea092364462829f3d21e0b12a'),
        'mmdet_ext.transforms.NativeLoadResizeFlip._flip_annotations'),
    'mmcv.transforms.RandomFlip._choose_direction': CopiedSource(
        _same_in_both('7435829fdf4044609d361cb52c0f7dc0e693919d1a354dfd3fb45b2dfcf9bced'),
        'mmdet_ext._compat.choose_flip_direction (its draw)'),
    'mmdet.datasets.transforms.Resize._resize_bboxes': CopiedSource(
        _same_in_both('4e65b1052dbf6ba9d92cd461b3e464db93b9865a7a8676d823f0af31a2ca9a6a'),
        'mmdet_ext.transforms.box_geometry.rescale_and_clip'),
    'mmdet.structures.bbox.HorizontalBoxes.rescale_': CopiedSource(
        _same_in_both('97e528ad0c3447e97493e0cf2b9b09046408bfb26ccd46ddf81ac74171ce6745'),
        'mmdet_ext.transforms.box_geometry.rescale_and_clip'),
    'mmdet.structures.bbox.HorizontalBoxes.clip_': CopiedSource(
        _same_in_both('ad2e5aa38751b8981f53544da7f0294b6a54b641a07eea6e946990f9383fe1ee'),
        'mmdet_ext.transforms.box_geometry.rescale_and_clip'),
    'mmdet.structures.bbox.HorizontalBoxes.flip_': CopiedSource(
        _same_in_both('cc2e1eeda398ee337d71e0abc43154b3aad04ffd2d86d026022a1cdfe002616c'),
        'mmdet_ext.transforms.box_geometry.flip_boxes'),
    'mmdet.models.data_preprocessors.DetDataPreprocessor.forward': CopiedSource(
        _same_in_both('faacb6a74fa6137af0236da464c635279d816c8cd473929f469f0f85edaa3f15'),
        'mmdet_ext.models.FastDetDataPreprocessor._finish'),
}


FAMILY_DIFFERENCES: dict[str, FamilyDifference] = {
    'skip_iter_resume': FamilyDifference(
        'mmengine', 'IterBasedTrainLoop resumes through dataloader_iterator.skip_iter(n)',
        False, True, 'PrepaidIterator.skip_iter, DevicePrefetcher.skip_iter (OpenMMLab: n next() '
                     'calls, which both answer as well)'),
    'fast_forward_on_resume': FamilyDifference(
        'mmengine', 'IterBasedTrainLoop(fast_forward_on_resume=True) skips nothing on resume',
        False, True, '_compat.resume_skip_count (ExactResumeHook prepays nothing then; the data '
                     'continues at the saved position all the same)'),
    'lazy_loop_iterator': FamilyDifference(
        'mmengine', '_InfiniteDataloaderIterator makes iter(dataloader) on its first batch',
        False, True, '_compat.restart_infinite_iterator makes it at once in both families: '
                     'ResumableBatchSampler reads the data epoch when its iterator is made, '
                     'before DistSamplerSeedHook resets the sampler epoch'),
    'bitmap_masks_keep_array': FamilyDifference(
        'mmdet', 'BitmapMasks(ndarray) holds the array given, not a copy',
        False, True, '_compat.bitmap_masks_pixels (LazyBitmapMasks.__init__)'),
    'translate_both': FamilyDifference(
        'mmdet', "mask translate(direction='both', offset=(dx, dy))",
        False, True, '_compat.translate_masks (LazyInstanceMasks.translate)'),
    'polygon_translate_clips_both_axes': FamilyDifference(
        'mmdet', 'PolygonMasks.translate clips both axes whatever the direction',
        False, True, "LazyInstanceMasks.translate (the installed PolygonMasks' arithmetic)"),
    'polygon_rotate_about_centre': FamilyDifference(
        'mmdet', 'PolygonMasks.rotate(center=None) turns about the centre of out_shape (OpenMMLab: '
                 'about the origin)',
        False, True, "LazyInstanceMasks.rotate (the installed PolygonMasks' arithmetic)"),
}


def family_has(difference: str) -> bool:
    """Whether the installed family has the behaviour ``difference`` (a key of
    :data:`FAMILY_DIFFERENCES`)."""
    record = FAMILY_DIFFERENCES[difference]
    return getattr(record, FAMILY[record.package])


# ---- mmcv / mmdet transforms ----------------------------------------------------------------
def scale_size(size: tuple[int, int],
               scale_factor: Union[float, tuple[float, float]]) -> tuple[int, int]:
    """(w, h) scaled and rounded as ``Resize`` does: ``mmcv.image.geometric._scale_size``."""
    return _scale_size(size, scale_factor)


def choose_flip_direction(flip: 'RandomFlip') -> Optional[str]:
    """A flip direction (None: no flip) drawn as ``RandomFlip._choose_direction`` draws it.

    Why not call it: ``np.random.choice(directions, p=probabilities)`` checks and converts its
    arguments on every call, about 40 us per sample inside a batched fetch. For mmcv's own
    ``_choose_direction`` (not overridden, no cached draw) with probabilities numpy accepts, the
    same draw is one ``np.random.random_sample()`` -- the double ``choice`` takes from the same
    global ``RandomState`` -- looked up in the cumulative probabilities ``choice`` computes
    (``cdf.searchsorted(u, side='right')`` is ``bisect_right``). Anything else: mmcv's call.
    """
    table = _flip_draw_table(flip)
    if table is None:
        return flip._choose_direction()
    directions, cdf = table
    return directions[bisect.bisect_right(cdf, np.random.random_sample())]


# (type, direction, prob) -> (directions, cumulative probabilities) or None: mmcv's call.
_flip_draw_tables: dict = {}


def _flip_draw_table(flip: 'RandomFlip') -> Optional[tuple[list, list[float]]]:
    if getattr(flip, '_cache_enabled', False) or hasattr(flip, '_cache'):
        return None  # cache_random_params: the decorator's cache decides (and clears)
    direction, prob = flip.direction, flip.prob
    try:
        key = (type(flip), direction if isinstance(direction, str) else tuple(direction),
               prob if isinstance(prob, float) else tuple(prob))
        table = _flip_draw_tables.get(key, False)
    except TypeError:  # unhashable: mmcv's call
        return None
    if table is False:
        if len(_flip_draw_tables) >= 64:  # a probability changed every step: keep it small
            _flip_draw_tables.clear()
        table = _flip_draw_tables[key] = _new_flip_draw_table(type(flip), direction, prob)
    return table


def _new_flip_draw_table(flip_type: type, direction: Any, prob: Any
                         ) -> Optional[tuple[list, list[float]]]:
    """``_choose_direction``'s directions and ``choice``'s cumulative probabilities, or None
    where its outcome is not that lookup."""
    from mmcv.transforms import RandomFlip as MmcvRandomFlip
    chosen_by = next((k for k in flip_type.__mro__ if '_choose_direction' in vars(k)), None)
    if chosen_by is not MmcvRandomFlip:
        return None  # overridden
    # _choose_direction's lists (each case its own branch: any other input is left to it).
    if isinstance(direction, str):
        directions = [direction, None]
    elif isinstance(direction, Sequence):
        directions = list(direction) + [None]
    else:
        return None
    if isinstance(prob, list):
        probabilities = prob + [1 - sum(prob)]
    elif isinstance(prob, float):
        single = prob / (len(directions) - 1)
        probabilities = [single] * (len(directions) - 1) + [1. - prob]
    else:
        return None
    p = np.array(probabilities, dtype=np.float64)
    # choice refuses NaN, negatives and a sum off 1 by more than sqrt(eps): left to it, as is
    # a sum near that bound (its compensated sum might decide otherwise).
    if p.ndim != 1 or not np.isfinite(p).all() or (p < 0).any() or abs(p.sum() - 1) > 1e-12:
        return None
    cdf = p.cumsum()
    cdf /= cdf[-1]
    return directions, cdf.tolist()


def draw_resize_scale(step: Any) -> Optional[int]:
    """Draw the scale of a ``RandomResize`` or ``RandomChoiceResize`` as its ``transform`` does
    (``_random_scale`` / ``_random_select``, same RNG use) and set it on the ``Resize`` it holds;
    returns ``scale_idx`` for a ``RandomChoiceResize``, else None."""
    if hasattr(step, '_random_select'):
        step.resize.scale, scale_idx = step._random_select()
        return scale_idx
    step.resize.scale = step._random_scale()
    return None


def resize_annotations(resize: 'Resize', results: dict, boxes: bool = True) -> None:
    """Boxes (unless ``boxes`` is False), masks, seg map of ``results`` resized to
    ``scale_factor`` (``Resize._resize_*``)."""
    if boxes:
        resize._resize_bboxes(results)
    resize._resize_masks(results)
    resize._resize_seg(results)


def record_homography(transform: Union['Resize', 'RandomFlip'], results: dict) -> None:
    """Compose ``transform``'s step into ``results['homography_matrix']`` (its private recorder)."""
    transform._record_homography_matrix(results)


# ---- mmdet instance masks ------------------------------------------------------------------
def bitmap_masks_pixels(masks: Union[np.ndarray, list]) -> np.ndarray:
    """ndarray[N, H, W] that ``BitmapMasks(masks, H, W)`` of the installed mmdet holds: the
    fork keeps an ndarray as given, OpenMMLab stacks a copy (a list is stacked in both)."""
    if isinstance(masks, np.ndarray) and family_has('bitmap_masks_keep_array'):
        return masks
    return np.stack(masks)


def translate_masks(masks: Union[BitmapMasks, PolygonMasks], out_shape: tuple[int, int],
                    offset: Union[float, tuple[float, float]], direction: str = 'horizontal',
                    border_value: Any = 0,
                    interpolation: str = 'bilinear') -> Union[BitmapMasks, PolygonMasks]:
    """``masks.translate(...)``, with the fork's ``direction='both'`` (``offset`` (dx, dy) in
    px, or one number for both axes; its ``Mosaic`` uses it) also where the installed mmdet
    lacks it (OpenMMLab's ``PolygonMasks`` ignores it, its ``BitmapMasks`` refuses it).

    There, polygons move and are clipped axis after axis, the fork's arithmetic exactly;
    bitmaps move in one warp, as the fork's: two would round the interpolated pixels twice.
    """
    if direction != 'both' or family_has('translate_both'):
        return masks.translate(out_shape, offset, direction, border_value, interpolation)
    dx, dy = offset if isinstance(offset, (tuple, list)) else (offset, offset)
    if isinstance(masks, PolygonMasks):
        return masks.translate(out_shape, dx, 'horizontal', border_value).translate(
            out_shape, dy, 'vertical', border_value)
    height, width = out_shape
    pixels = np.zeros((len(masks), height, width), dtype=masks.masks.dtype)
    rows, columns = min(height, masks.height), min(width, masks.width)
    pixels[:, :rows, :columns] = masks.masks[:, :rows, :columns]
    if len(pixels):
        moved = cv2.warpAffine(pixels.transpose(1, 2, 0), np.float32([[1, 0, dx], [0, 1, dy]]),
                               (width, height), borderValue=(border_value,) * 3,
                               flags=cv2_interp_codes[interpolation])
        pixels = moved.reshape(height, width, -1).transpose(2, 0, 1).astype(masks.masks.dtype)
    return BitmapMasks(pixels, height, width)


# ---- mmengine checkpoint loading ------------------------------------------------------------
def checkpoint_schemes() -> dict[str, Callable]:
    """A copy of ``CheckpointLoader._schemes`` (prefix -> loader): it has no public getter."""
    return dict(CheckpointLoader._schemes)


def set_checkpoint_schemes(schemes: dict[str, Callable]) -> None:
    """Replace ``CheckpointLoader._schemes`` wholesale: ``register_scheme`` cannot unregister."""
    CheckpointLoader._schemes = OrderedDict(schemes)


# ---- mmengine Runner ------------------------------------------------------------------------
@contextlib.contextmanager
def runner_saves_checkpoints_with(save: Callable) -> Iterator[None]:
    """Meanwhile, ``Runner.save_checkpoint`` ends in ``save(checkpoint, filepath,
    file_client_args=..., backend_args=...)`` instead of mmengine's ``save_checkpoint``.

    Why: both families' ``Runner.save_checkpoint`` builds the checkpoint dict, calls the
    ``before_save_checkpoint`` hooks, then hands it to ``mmengine.runner.checkpoint.
    save_checkpoint`` under the name the runner module imported, which serialises it on the
    calling thread. Taking over only that last call keeps everything before it the Runner's
    own (``tests/test_compat.py`` checks that the call is still there).
    """
    original = runner_module.save_checkpoint
    runner_module.save_checkpoint = save
    try:
        yield
    finally:
        runner_module.save_checkpoint = original


def runner_resume_requested(runner: Any) -> bool:
    """``runner._resume``: the config's ``resume``, which the Runner exposes nowhere publicly."""
    return runner._resume


def set_runner_resume(runner: Any, flag: bool) -> None:
    """Set ``runner._resume``, which ``Runner.load_or_resume`` reads, before it runs."""
    runner._resume = flag


def runner_load_from(runner: Any) -> Optional[str]:
    """``runner._load_from``: the checkpoint ``load_or_resume`` will load or resume from."""
    return runner._load_from


def set_runner_load_from(runner: Any, path: Optional[str]) -> None:
    """Set ``runner._load_from``, so ``Runner.load_or_resume`` resumes from ``path`` explicitly."""
    runner._load_from = path


def runner_loops(runner: Any) -> dict[str, Any]:
    """``runner._{train,val,test}_loop`` by name: the built loop, its config dict, or None.

    Why not ``runner.train_loop``: that property builds the loop (and its DataLoader) on access.
    """
    return {'train': runner._train_loop, 'val': runner._val_loop, 'test': runner._test_loop}


def infinite_iterator_epoch(iterator: Any) -> int:
    """``_InfiniteDataloaderIterator._epoch``: how often an iteration-based loop's DataLoader
    has run out and been restarted (the sampler epoch it set); 0 for any other iterator."""
    return getattr(iterator, '_epoch', 0)


def data_epoch(iterator: Any) -> int:
    """The data epoch of the batch ``iterator`` handed out last: a wrapper's own
    ``data_epoch`` (``PrepaidIterator``, ``DevicePrefetcher``, which may have drawn further
    ahead), else :func:`infinite_iterator_epoch`."""
    epoch = getattr(iterator, 'data_epoch', None)
    return infinite_iterator_epoch(iterator) if epoch is None else epoch


def restart_infinite_iterator(iterator: Any, epoch: int, batches: Any = None,
                              skip: int = 0) -> None:
    """Restart an iteration-based loop's DataLoader iterator at sampler epoch ``epoch``, its
    ``ResumableBatchSampler`` ``batches`` (if given) skipping the epoch's first ``skip``.

    Why: ``IterBasedTrainLoop`` builds its ``_InfiniteDataloaderIterator`` -- which calls
    ``iter(dataloader)`` at once -- before any hook runs; after the DataLoader's sampling
    changes, the iterator has to be made again. The fork's iterator would make it on its first
    batch; it is made here all the same (``lazy_loop_iterator`` in :data:`FAMILY_DIFFERENCES`).
    """
    loader = iterator._dataloader
    sampler = getattr(loader.batch_sampler, 'sampler', None) or loader.sampler
    if hasattr(sampler, 'set_epoch'):
        sampler.set_epoch(epoch)
    if hasattr(sampler, '_indices_of_rank'):
        # InfiniteSampler makes its one index stream at construction and every iterator reads
        # that; the one made with the loop (workers prefetch from it) has drawn from it already,
        # and closing that iterator closes the stream. A new stream, from the (restored) seed.
        sampler.indices = sampler._indices_of_rank()
    inner = getattr(loader.batch_sampler, 'batch_sampler', loader.batch_sampler)
    if hasattr(inner, '_aspect_ratio_buckets'):
        # mmdet's AspectRatioBatchSampler keeps its buckets on the instance; that iterator left
        # a full one behind (suspended at its yield), which the next iterator would overfill --
        # it then never yields, since it tests len(bucket) == batch_size.
        inner._aspect_ratio_buckets = [[] for _ in inner._aspect_ratio_buckets]
    if batches is not None:
        batches.skip_next(skip)
    iterator._epoch = epoch
    iterator._iterator = iter(loader)


def resume_skip_count(loop: Any) -> int:
    """How many batches ``IterBasedTrainLoop.run`` passes over before its first batch on resume:
    ``loop.iter`` (OpenMMLab: that many ``next()`` calls; the fork: one ``skip_iter``), none
    where the fork's ``fast_forward_on_resume`` is set."""
    return 0 if getattr(loop, 'fast_forward_on_resume', False) else loop.iter


def skip_batches(iterator: Any, count: int) -> None:
    """Pass over ``count`` batches of ``iterator``: its ``skip_iter`` where it has one (the
    fork's ``_InfiniteDataloaderIterator`` skips indices without loading them; called before
    its first batch, as the fork's loop does: it counts from the start of the run), else
    ``count`` ``next()`` calls."""
    if count <= 0:
        return
    if hasattr(iterator, 'skip_iter'):
        iterator.skip_iter(count)
        return
    for _ in range(count):
        next(iterator)


def discard_dataloader_iterator(loader: Any) -> None:
    """Shut down a DataLoader's persistent workers (torch's ``DataLoader._iterator``), if any,
    so that the next ``iter(loader)`` starts workers with the loader's current dataset."""
    iterator = getattr(loader, '_iterator', None)
    if iterator is not None and hasattr(iterator, '_shutdown_workers'):
        iterator._shutdown_workers()
    loader._iterator = None


# ---- mmengine datasets and data preprocessors -----------------------------------------------
def dataset_fully_initialized(dataset: Any) -> bool:
    """``BaseDataset._fully_initialized``: whether ``full_init`` ran (mmengine's lazy_init)."""
    return dataset._fully_initialized


def mark_dataset_fully_initialized(dataset: Any) -> None:
    """Set ``BaseDataset._fully_initialized``, which mmengine's ``force_full_init`` checks."""
    dataset._fully_initialized = True


def dataset_indices(dataset: Any) -> Any:
    """``BaseDataset._indices``: the ``indices`` argument (subset to keep), not stored publicly."""
    return dataset._indices


def preprocessor_swaps_channels(preprocessor: Any) -> bool:
    """``ImgDataPreprocessor._channel_conversion``: ``bgr_to_rgb`` or ``rgb_to_bgr`` was set."""
    return preprocessor._channel_conversion


def dataloader_worker_processes() -> list[tuple[int, Any]]:
    """``(worker_id, multiprocessing.Process)`` of every live multi-process DataLoader iterator.

    Why a scan of the garbage collector's objects: an epoch-based loop keeps its iterator in a
    local variable of ``run_epoch``, out of reach; the iterator (torch's
    ``_MultiProcessingDataLoaderIter``) keeps its workers in ``_workers`` and has no public
    accessor. Called once, when a hang is being reported, not per iteration.
    """
    import gc

    from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter
    found = []
    for obj in gc.get_objects():
        # type(), not isinstance: isinstance on torch's deprecated proxy objects warns.
        if type(obj) is _MultiProcessingDataLoaderIter and not obj._shutdown:
            found.extend(enumerate(obj._workers))
    return found


def preprocessor_normalizes(preprocessor: Any) -> bool:
    """``ImgDataPreprocessor._enable_normalize``: ``mean`` and ``std`` were given."""
    return preprocessor._enable_normalize

