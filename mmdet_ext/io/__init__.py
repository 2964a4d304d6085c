"""Cheap checks on encoded files before anything is decoded or allocated."""
from .image_header import (
    DEFAULT_MAX_PIXELS,
    ImageHeader,
    ImageHeaderError,
    image_format,
    read_image_header,
)
from .image_formats import BytesNotRead, FileBytes
from .local_files import (NotRegularFileError, file_state, open_regular_file,
                          read_regular_file, read_whole_regular_file)

__all__ = ['DEFAULT_MAX_PIXELS', 'BytesNotRead', 'FileBytes', 'ImageHeader', 'ImageHeaderError',
           'NotRegularFileError', 'file_state', 'image_format', 'open_regular_file',
           'read_image_header', 'read_regular_file', 'read_whole_regular_file']
