"""mmdet_ext: a leak-free, copy-safe data and checkpoint layer for MMDetection training.

``import mmdet_ext`` (or ``custom_imports = dict(imports=['mmdet_ext'])`` in a config) loads the
native extension, which registers ``torch.ops.mmdet_ext.*``, and registers the plugin's
transforms, datasets and hooks into mmdet's registries. First of all it checks, from package
metadata, that mmengine, mmcv and mmdet are installed in a range it supports, from either family
(OpenMMLab's or the onedl fork's; ``mmdet_ext/_framework.py``).
"""
# The check first: every import below imports mmengine, mmcv or mmdet.
from ._framework import require_framework

require_framework()

from . import ops
from ._native import _C, build_info
from .config_scope import register_config_scope
from .collate import fast_collate
from .datasets import AnnotationStore, LazyCocoDataset, LazyLVISV1Dataset, StoreError
from .engine import (AtomicCheckpointHook, CheckpointLoadError, CpuCheckpointLoadHook,
                     ExactResumeHook, MemoryWatchError, MemoryWatchHook, WorkerDefaultsHook,
                     load_checkpoint_to_cpu)
from .models import FastDetDataPreprocessor
from .structures import LazyInstanceMasks
from .transforms import (ImageLoadError, LoadLazyAnnotations, NativeLoadImageFromFile,
                         NativeLoadResizeFlip)
from .version import __version__

register_config_scope()

__all__ = [
    '__version__', 'ops', 'AnnotationStore', 'AtomicCheckpointHook', 'CheckpointLoadError',
    'CpuCheckpointLoadHook', 'ExactResumeHook', 'FastDetDataPreprocessor', 'ImageLoadError',
    'LazyCocoDataset', 'LazyInstanceMasks', 'LazyLVISV1Dataset', 'LoadLazyAnnotations',
    'MemoryWatchError', 'MemoryWatchHook', 'NativeLoadImageFromFile', 'NativeLoadResizeFlip',
    'StoreError', 'WorkerDefaultsHook', 'build_info', 'fast_collate', 'load_checkpoint_to_cpu'
]
