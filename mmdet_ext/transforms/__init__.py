"""Pipeline transforms (registered in mmdet's TRANSFORMS on import)."""
from .lazy_annotations import LoadLazyAnnotations
from .loading import NativeLoadImageFromFile

__all__ = ['LoadLazyAnnotations', 'NativeLoadImageFromFile']
