"""Data structures: lazily rasterised instance masks."""
from .lazy_masks import LazyInstanceMasks
from .raster_source import RasterSource

__all__ = ['LazyInstanceMasks', 'RasterSource']
