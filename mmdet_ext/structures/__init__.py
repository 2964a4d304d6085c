"""Data structures: lazily rasterised instance masks."""
from .lazy_masks import (LazyBitmapMasks, LazyInstanceMasks, LazyPolygonMasks, MaskIndexError,
                         MaskInputError)
from .raster_source import RasterSource

__all__ = ['LazyBitmapMasks', 'LazyInstanceMasks', 'LazyPolygonMasks', 'MaskIndexError',
           'MaskInputError', 'RasterSource']
