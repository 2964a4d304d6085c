"""Skip marks for tests that need an optional part of the build (docs/build.md)."""
import pytest

from mmdet_ext._native import _C

_DECODES = _C.build_info()['opencv_version'] is not None and _C.build_info()['libjpeg'] is not None

# NativeLoadImageFromFile / NativeLoadResizeFlip decode with the C++ OpenCV and libjpeg; a build
# without them (a GPU machine lacking libopencv-dev) raises NotImplementedError there.
needs_native_decoding = pytest.mark.skipif(
    not _DECODES, reason='mmdet_ext._C was built without OpenCV/libjpeg (docs/build.md)')
