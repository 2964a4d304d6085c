"""Pipeline transforms (registered in mmdet's TRANSFORMS on import)."""
from .fused_loading import NativeLoadResizeFlip
from .lazy_annotations import LoadLazyAnnotations
from .loading import ImageLoadError, NativeLoadImageFromFile

__all__ = ['ImageLoadError', 'LoadLazyAnnotations', 'NativeLoadImageFromFile',
           'NativeLoadResizeFlip']
