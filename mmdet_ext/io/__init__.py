"""Cheap checks on encoded files before anything is decoded or allocated."""
from .image_header import (
    DEFAULT_MAX_PIXELS,
    ImageHeader,
    ImageHeaderError,
    is_jpeg_or_png,
    read_image_header,
)

__all__ = ['DEFAULT_MAX_PIXELS', 'ImageHeader', 'ImageHeaderError', 'is_jpeg_or_png',
           'read_image_header']
