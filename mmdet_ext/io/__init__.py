"""Cheap checks on encoded files before anything is decoded or allocated."""
from .image_header import (
    DEFAULT_MAX_PIXELS,
    ImageHeader,
    ImageHeaderError,
    is_jpeg_or_png,
    read_image_header,
)
from .local_files import (NotRegularFileError, file_state, open_regular_file,
                          read_regular_file)

__all__ = ['DEFAULT_MAX_PIXELS', 'ImageHeader', 'ImageHeaderError', 'NotRegularFileError',
           'file_state', 'is_jpeg_or_png', 'open_regular_file', 'read_image_header',
           'read_regular_file']
