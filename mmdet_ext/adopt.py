"""Adopt mmdet_ext in any mmdet config with one line: ``adopt(globals())``, the config's last line.

    _base_ = 'mmdet::mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'
    from mmdet_ext.adopt import adopt  # noqa: E402  (after _base_: mmengine reads it first)
    adopt(globals())

Why a call and not a second base config: mmengine refuses two bases that define the same key, and
a base cannot see (or change) what another base defines; a Python config can read its ``_base_``.
The call takes the config as defined so far (the bases, then the lines above it), and sets:

- ``custom_imports``: adds ``mmdet_ext``;
- datasets: ``CocoDataset`` -> ``LazyCocoDataset``, inside dataset wrappers too;
- pipelines: ``LoadImageFromFile`` -> ``NativeLoadImageFromFile`` (when this build has OpenCV),
  ``LoadAnnotations`` -> ``LoadLazyAnnotations`` (same ``with_mask``), ``CachedMosaic``,
  ``CachedMixUp``, ``YOLOXHSVRandomAug``, ``Pad`` -> ``FastCachedMosaic``, ``FastCachedMixUp``,
  ``FastYOLOXHSVRandomAug``, ``FastPad`` (mmdet's results, less work), ``PackDetInputs`` ->
  ``FastPackDetInputs`` (the same inputs, made planar by OpenCV), a resize then a
  ``RandomCrop`` -> ``ResizeCrop`` of the two (only the kept part resized; a ``CachedMosaic``
  right before them goes in too: only the part of its canvas the resize reads is painted) where
  the resize does not follow the loading steps (there the batch engine plans them); the pipeline a
  ``PipelineSwitchHook`` switches to as well;
- ``batch_sampler``: ``AspectRatioBatchSampler`` -> ``FastAspectRatioBatchSampler`` (same
  batches, the images' sizes read in bulk);
- ``collate_fn``: ``fast_collate`` (padding as the model's preprocessor), where the dataloader
  used mmengine's default and its pipeline ends in ``PackDetInputs``;
- ``model.data_preprocessor``: ``DetDataPreprocessor`` -> ``FastDetDataPreprocessor``;
- hooks: the ``custom_hooks`` of ``mmdet_ext::_base_/mmdet_ext_runtime.py`` added to the config's
  own (none dropped), and ``AtomicCheckpointHook`` as the checkpoint hook (its settings kept).

Everything else (arguments, schedules, models) is left as it was. The result is an ordinary config:
``Config.fromfile(...).pretty_text`` shows every swapped type.
"""
import copy
import types
from pathlib import Path
from typing import Any, Optional

from mmengine.config import Config

from ._native import build_info

DATASET_TYPES = {'CocoDataset': 'LazyCocoDataset'}
# The image loader is swapped only in builds with OpenCV (build_info()); without it the native
# decoder raises, so mmcv's stays.
IMAGE_LOADER_TYPES = {'LoadImageFromFile': 'NativeLoadImageFromFile'}
ANNOTATION_LOADER_TYPES = {'LoadAnnotations': 'LoadLazyAnnotations'}
# The same results as mmdet's, without its redundant copies (transforms/mix_augment.py).
MIX_AUGMENT_TYPES = {'CachedMosaic': 'FastCachedMosaic', 'CachedMixUp': 'FastCachedMixUp',
                     'YOLOXHSVRandomAug': 'FastYOLOXHSVRandomAug', 'Pad': 'FastPad'}
# The same inputs as mmdet's, made planar by OpenCV's deinterleave (transforms/packing.py).
PACK_TYPES = {'PackDetInputs': 'FastPackDetInputs'}
PREPROCESSOR_TYPES = {'DetDataPreprocessor': 'FastDetDataPreprocessor'}
BATCH_SAMPLER_TYPES = {'AspectRatioBatchSampler': 'FastAspectRatioBatchSampler'}
# A resize then a RandomCrop become one ResizeCrop (only the kept part resized), unless the resize
# comes straight after the loading steps, where the batch engine plans the pair itself.
RESIZE_TYPES = ('Resize', 'RandomResize', 'RandomChoiceResize')
LOADING_TYPES = tuple(name for table in (IMAGE_LOADER_TYPES, ANNOTATION_LOADER_TYPES)
                      for pair in table.items() for name in pair)
DEFAULT_COLLATES = (None, 'pseudo_collate')
RUNTIME_CONFIG = Path(__file__).resolve().parent / '.mim' / 'configs' / '_base_' / \
    'mmdet_ext_runtime.py'
DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')


def _swapped(type_name: Any, table: dict[str, str]) -> Any:
    """``table``'s replacement for ``type_name`` (also as ``mmdet.Name``), else ``type_name``."""
    if not isinstance(type_name, str):
        return type_name
    return table.get(type_name.removeprefix('mmdet.'), type_name)


def _adopt_pipeline(pipeline: list, transform_types: dict[str, str]) -> list:
    adopted = []
    for transform in pipeline:
        transform = dict(transform)
        new_type = _swapped(transform.get('type'), transform_types)
        if new_type == 'LoadLazyAnnotations':
            # mmdet's LoadAnnotations loads no masks unless asked; ours does by default.
            transform['with_mask'] = transform.get('with_mask', False)
        transform['type'] = new_type
        if _type_name(transform) == 'RandomCrop' and adopted and \
                _type_name(adopted[-1]) in RESIZE_TYPES and \
                (len(adopted) < 2 or _type_name(adopted[-2]) not in LOADING_TYPES):
            transform = dict(type='ResizeCrop', resize=adopted.pop(), crop=transform)
            if adopted and _type_name(adopted[-1]) == 'FastCachedMosaic':
                transform['mosaic'] = adopted.pop()  # its canvas painted where the resize reads
        adopted.append(transform)
    return adopted


def _type_name(transform: dict) -> Any:
    name = transform.get('type')
    return name.removeprefix('mmdet.') if isinstance(name, str) else name


def _adopt_dataset(dataset: dict, transform_types: dict[str, str]) -> dict:
    """The dataset with our types, through wrappers (``dataset=`` / ``datasets=[...]``)."""
    dataset = dict(dataset)
    dataset['type'] = _swapped(dataset.get('type'), DATASET_TYPES)
    if isinstance(dataset.get('pipeline'), list):
        dataset['pipeline'] = _adopt_pipeline(dataset['pipeline'], transform_types)
    if isinstance(dataset.get('dataset'), dict):
        dataset['dataset'] = _adopt_dataset(dataset['dataset'], transform_types)
    if isinstance(dataset.get('datasets'), list):
        dataset['datasets'] = [_adopt_dataset(d, transform_types) for d in dataset['datasets']]
    return dataset


def _innermost_pipeline(dataset: dict) -> Optional[list]:
    while 'pipeline' not in dataset and isinstance(dataset.get('dataset'), dict):
        dataset = dataset['dataset']
    return dataset.get('pipeline')


def _adopt_dataloader(dataloader: dict, transform_types: dict[str, str]) -> dict:
    dataloader = copy.deepcopy(dict(dataloader))
    dataloader['dataset'] = _adopt_dataset(dataloader['dataset'], transform_types)
    if isinstance(dataloader.get('batch_sampler'), dict):
        batch_sampler = dataloader['batch_sampler']
        batch_sampler['type'] = _swapped(batch_sampler.get('type'), BATCH_SAMPLER_TYPES)
    collate_type = dataloader.get('collate_fn', {}).get('type')
    pipeline = _innermost_pipeline(dataloader['dataset']) or [{}]
    if collate_type in DEFAULT_COLLATES and _type_name(pipeline[-1]) in PACK_TYPES.values():
        # No divisor here: the model's preprocessor has the one (WorkerDefaultsHook hands it
        # to the datasets, whose batched fetch pads to it).
        dataloader['collate_fn'] = dict(type='fast_collate')
    return dataloader


def _runtime_hooks() -> tuple[list, str]:
    """The custom hooks and the checkpoint hook type of our runtime config (the one place)."""
    runtime = Config.fromfile(str(RUNTIME_CONFIG))
    return runtime.custom_hooks, runtime.default_hooks.checkpoint.type


def adopt(config_globals: dict) -> None:
    """Rewrite the config being read (its ``globals()``) to use mmdet_ext; see the module doc.

    Call it as the config's last line: lines after it replace what it set.
    """
    if '_base_' not in config_globals:
        raise ValueError('adopt(globals()) must be called in a config file that has a _base_')
    own = {key: value for key, value in config_globals.items()
           if key != '_base_' and not key.startswith('__')
           and not isinstance(value, (types.FunctionType, types.ModuleType, type))}
    config = Config(copy.deepcopy(dict(config_globals['_base_'])))
    # A copy: merge_from_dict pops each `_delete_` it applies from the dicts it is given, and
    # these are the file's own, which mmengine merges over the base after this call.
    config.merge_from_dict(copy.deepcopy(own))

    transform_types = dict(ANNOTATION_LOADER_TYPES, **MIX_AUGMENT_TYPES, **PACK_TYPES)
    if build_info()['opencv_version'] is not None:
        transform_types.update(IMAGE_LOADER_TYPES)
    model = config.get('model', {})
    preprocessor = model.get('data_preprocessor', {})
    adopted: dict[str, Any] = {}
    for name in DATALOADERS:
        if config.get(name) and config[name].get('dataset'):
            # The whole resolved dataloader, standing for the base's (`_delete_`): merged over
            # the base, a key the file's own `_delete_` removed would come back.
            adopted[name] = dict(_delete_=True, **_adopt_dataloader(config[name], transform_types))
    if preprocessor:
        adopted['model'] = _merged_into(own.get('model'), dict(data_preprocessor=dict(
            type=_swapped(preprocessor.get('type'), PREPROCESSOR_TYPES))))

    imports = list(config.get('custom_imports', {}).get('imports', []))
    adopted['custom_imports'] = dict(imports=imports + ['mmdet_ext'] * ('mmdet_ext' not in imports),
                                     allow_failed_imports=False)
    runtime_hooks, checkpoint_type = _runtime_hooks()
    hooks = list(config.get('custom_hooks', []))
    present = {hook.get('type') for hook in hooks}
    adopted['custom_hooks'] = [_adopt_hook(hook, transform_types) for hook in hooks] + [
        h for h in runtime_hooks if h['type'] not in present]
    if 'checkpoint' in config.get('default_hooks', {}):
        adopted['default_hooks'] = _merged_into(own.get('default_hooks'),
                                                dict(checkpoint=dict(type=checkpoint_type)))
    config_globals.update(adopted)


def _adopt_hook(hook: dict, transform_types: dict[str, str]) -> dict:
    """``hook``, with the pipeline a ``PipelineSwitchHook`` switches to adopted as the dataset's
    (RTMDet's second stage)."""
    if _type_name(hook) == 'PipelineSwitchHook' and isinstance(hook.get('switch_pipeline'), list):
        hook = dict(hook, switch_pipeline=_adopt_pipeline(hook['switch_pipeline'], transform_types))
    return hook


def _merged_into(own_value: Any, change: dict) -> dict:
    """The file's own value of a key (a dict, or None where it set none) with ``change``
    merged in: what the file set stays (its ``_delete_`` too), as mmengine would merge it."""
    merged = copy.deepcopy(dict(own_value)) if isinstance(own_value, dict) else {}
    for key, value in change.items():
        merged[key] = _merged_into(merged.get(key), value) if isinstance(value, dict) else value
    return merged
