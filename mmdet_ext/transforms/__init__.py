"""Pipeline transforms (registered in mmdet's TRANSFORMS on import)."""
from .fused_loading import DEFERRED_META_KEYS, NativeLoadResizeFlip
from .lazy_annotations import LoadLazyAnnotations
from .loading import ImageLoadError, NativeLoadImageFromFile
from .resize_crop import ResizeCrop
from .mix_augment import FastCachedMixUp, FastCachedMosaic, FastPad, FastYOLOXHSVRandomAug
from .packing import FastPackDetInputs

__all__ = ['DEFERRED_META_KEYS', 'FastCachedMixUp', 'FastCachedMosaic', 'FastPackDetInputs',
           'FastPad', 'FastYOLOXHSVRandomAug', 'ImageLoadError', 'LoadLazyAnnotations',
           'NativeLoadImageFromFile', 'NativeLoadResizeFlip', 'ResizeCrop']
