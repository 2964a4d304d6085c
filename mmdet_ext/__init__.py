"""mmdet_ext: a leak-free, copy-safe data and checkpoint layer for MMDetection training.

``import mmdet_ext`` (or ``custom_imports = dict(imports=['mmdet_ext'])`` in a config) loads the
native extension, which registers ``torch.ops.mmdet_ext.*``, and registers the plugin's
transforms, datasets and hooks into mmdet's registries.
"""
from ._native import load_extension
from .version import __version__

_C = load_extension()

from . import ops  # noqa: E402  (needs _C loaded: registers fake kernels)
from .collate import fast_collate  # noqa: E402
from .datasets import AnnotationStore, LazyCocoDataset, StoreError  # noqa: E402
from .engine import (  # noqa: E402
    AtomicCheckpointHook, CheckpointLoadError, CpuCheckpointLoadHook, ExactResumeHook,
    MemoryWatchError, MemoryWatchHook, WorkerDefaultsHook, load_checkpoint_to_cpu)
from .models import FastDetDataPreprocessor  # noqa: E402
from .structures import LazyInstanceMasks  # noqa: E402
from .transforms import (  # noqa: E402
    ImageLoadError, LoadLazyAnnotations, NativeLoadImageFromFile, NativeLoadResizeFlip)

__all__ = [
    '__version__', 'ops', 'AnnotationStore', 'AtomicCheckpointHook', 'CheckpointLoadError',
    'CpuCheckpointLoadHook', 'ExactResumeHook', 'FastDetDataPreprocessor', 'ImageLoadError',
    'LazyCocoDataset', 'LazyInstanceMasks', 'LoadLazyAnnotations', 'MemoryWatchError',
    'MemoryWatchHook', 'NativeLoadImageFromFile', 'NativeLoadResizeFlip', 'StoreError',
    'WorkerDefaultsHook', 'fast_collate', 'load_checkpoint_to_cpu'
]
