"""mmdet_ext: a leak-free, copy-safe data and checkpoint layer for MMDetection training.

``import mmdet_ext`` (or ``custom_imports = dict(imports=['mmdet_ext'])`` in a config) loads the
native extension, which registers ``torch.ops.mmdet_ext.*``, and registers the plugin's
transforms, datasets and hooks into mmdet's registries. Before that it checks, from package
metadata, that mmengine, mmcv and mmdet are installed in a range it supports, from either family
(OpenMMLab's or the onedl fork's; ``mmdet_ext/_framework.py``): one out of range, installed by
both families or by an unsupported distribution is an ImportError naming it.

``mmdet_ext.ops`` and ``mmdet_ext._native`` need torch only: where mmdet is missing or mmcv's
compiled ops fail to import (an mmcv CUDA build that failed), importing them still works, with
a warning; the registering half is then absent, and using any of its names raises the
original ImportError.
"""
import warnings
from typing import Any, Optional

from . import ops
from ._framework import require_framework
from ._native import _C, build_info
from .version import __version__

_UPSTREAM_MISSING: Optional[ImportError] = None
try:
    require_framework()  # first: every import below imports mmengine, mmcv or mmdet
    from .config_scope import register_config_scope
    from .collate import fast_collate
    from .datasets import AnnotationStore, LazyCocoDataset, LazyLVISV1Dataset, StoreError
    from .engine import (AtomicCheckpointHook, CheckpointLoadError, CpuCheckpointLoadHook,
                         ExactResumeHook, MemoryWatchError, MemoryWatchHook, WorkerDefaultsHook,
                         load_checkpoint_to_cpu)
    from .evaluation import RLECocoMetric, RLELVISMetric
    from .models import FastDetDataPreprocessor, RLEFCNMaskHead
    from .structures import LazyInstanceMasks
    from .transforms import (ImageLoadError, LoadLazyAnnotations, NativeLoadImageFromFile,
                             NativeLoadResizeFlip)
except ImportError as err:
    if (err.name or '').split('.')[0] not in ('mmdet', 'mmcv', 'mmengine'):
        raise
    _UPSTREAM_MISSING = err
    warnings.warn(f'mmdet_ext: registered nothing into mmdet ({err}); only mmdet_ext.ops works',
                  RuntimeWarning, stacklevel=2)
else:
    register_config_scope()

__all__ = [
    '__version__', 'ops', 'AnnotationStore', 'AtomicCheckpointHook', 'CheckpointLoadError',
    'CpuCheckpointLoadHook', 'ExactResumeHook', 'FastDetDataPreprocessor', 'ImageLoadError',
    'LazyCocoDataset', 'LazyInstanceMasks', 'LazyLVISV1Dataset', 'LoadLazyAnnotations',
    'MemoryWatchError', 'MemoryWatchHook', 'NativeLoadImageFromFile', 'NativeLoadResizeFlip',
    'RLECocoMetric', 'RLEFCNMaskHead', 'RLELVISMetric', 'StoreError', 'WorkerDefaultsHook', 'build_info', 'fast_collate', 'load_checkpoint_to_cpu'
]


def __getattr__(name: str) -> Any:
    if _UPSTREAM_MISSING is not None and name in __all__:
        raise ImportError(f'mmdet_ext.{name} needs mmdet and mmcv\'s compiled ops, which did not '
                          f'import: {_UPSTREAM_MISSING}') from _UPSTREAM_MISSING
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
