"""Image loading through the native decoder."""
from typing import Optional

import numpy as np
import torch
from mmcv.transforms import LoadImageFromFile
from mmengine import fileio

from ..io import (DEFAULT_MAX_PIXELS, ImageHeader, ImageHeaderError, image_format,
                  read_image_header, read_whole_regular_file)
from ..ops import decode_image
from ..registry import TRANSFORMS


class ImageLoadError(RuntimeError):
    """An image file that cannot be read or decoded; the message names the file."""


class ImageFileNotFoundError(ImageLoadError, FileNotFoundError):
    """No image file at the path; also a ``FileNotFoundError``, as mmcv's ``LoadImageFromFile``
    raises, so code catching that catches this."""

    def __init__(self, message: str) -> None:
        super().__init__(message)  # OSError's (errno, strerror) form would hide the message

    def __str__(self) -> str:
        return self.args[0]


def read_image_bytes(filename: str, backend_args: Optional[dict],
                     max_pixels: int) -> tuple[torch.Tensor, Optional[ImageHeader]]:
    """The file's bytes as Tensor[N] uint8, and its header when its format is one
    ``read_image_header`` reads (JPEG, PNG, BMP, WebP, TIFF, PNM, JPEG 2000).

    Such a file whose header declares more than ``max_pixels`` pixels, or that is truncated, is
    refused here, before anything is decoded or allocated (decompression bombs). Other formats
    go to the decoder as they are (OpenCV's own pixel limit bounds them). Errors are
    ``ImageLoadError``s that name the file.
    """
    try:
        if '://' in filename or backend_args:
            img_bytes = fileio.get(filename, backend_args=backend_args)
        else:  # never blocks on a pipe, never reads a device or a directory
            img_bytes = read_whole_regular_file(filename)
        header = read_image_header(img_bytes, max_pixels) if image_format(img_bytes) else None
    except FileNotFoundError as err:
        raise ImageFileNotFoundError(f'cannot load {filename}: no such file') from err
    except (OSError, ImageHeaderError) as err:
        raise ImageLoadError(f'cannot load {filename}: {err}') from err
    encoded = torch.frombuffer(bytearray(img_bytes), dtype=torch.uint8) if img_bytes \
        else torch.empty(0, dtype=torch.uint8)
    return encoded, header


def decode_file_bytes(encoded: torch.Tensor, filename: str, color_type: str,
                      scale_denom: int = 1, max_pixels: int = DEFAULT_MAX_PIXELS,
                      planar: bool = False) -> torch.Tensor:
    """Decode a file's bytes to Tensor[H, W, C] uint8; errors name the file.

    ``scale_denom`` > 1 decodes a JPEG at 1/scale_denom of its size (other formats: full size);
    an image of more than ``max_pixels`` pixels is refused (the same limit as the header check).
    ``planar``: the pixels lie channel-planar in memory (the result is an HxWxC view of CxHxW).
    """
    try:
        if planar:
            return decode_image(encoded, color_type, scale_denom, max_pixels,
                                planar=True).permute(1, 2, 0)
        return decode_image(encoded, color_type, scale_denom, max_pixels)
    except NotImplementedError:
        raise  # a build without OpenCV: the build's fault, not the file's (never a bad sample)
    except RuntimeError as err:
        raise ImageLoadError(f'cannot load {filename}: {err}') from err


def load_image(filename: str, color_type: str, backend_args: Optional[dict],
               max_pixels: int) -> torch.Tensor:
    """Read and decode ``filename`` to Tensor[H, W, C] uint8; errors name the file."""
    encoded, _ = read_image_bytes(filename, backend_args, max_pixels)
    return decode_file_bytes(encoded, filename, color_type, max_pixels=max_pixels)


def as_mmcv_image(image: torch.Tensor, to_float32: bool) -> np.ndarray:
    """Tensor[H, W, C] uint8 -> what mmcv returns: HxWx3 (or HxW for grayscale) uint8/float32."""
    img = image.numpy()
    if img.shape[2] == 1:  # mmcv returns grayscale images as HxW
        img = img[:, :, 0]
    return img.astype(np.float32) if to_float32 else img


@TRANSFORMS.register_module()
class NativeLoadImageFromFile(LoadImageFromFile):
    """Drop-in for mmcv's ``LoadImageFromFile`` that decodes with ``torch.ops.mmdet_ext``.

    Same arguments and outputs (``img`` as HxWx3 BGR uint8 or float32, ``img_shape``,
    ``ori_shape``). ``imdecode_backend`` is accepted for config compatibility and ignored: decoding
    always goes through ``decode_image`` (libjpeg for JPEG, OpenCV's C++ API otherwise, bit-exact
    with ``cv2.imdecode``) with the GIL released. Unlike mmcv, a file that cannot be decoded raises
    an error naming the file and the cause (unless ``ignore_empty``), and so does a JPEG whose
    entropy-coded data libjpeg finds corrupt (mmcv returns garbage pixels for it); an image (JPEG,
    PNG, BMP, WebP, TIFF, PNM, JPEG 2000) whose header declares more than ``max_pixels`` pixels
    is refused before anything is allocated (decompression bombs), as is a truncated one.
    """

    def __init__(self, *args, max_pixels: int = DEFAULT_MAX_PIXELS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_pixels = max_pixels

    def transform(self, results: dict) -> Optional[dict]:
        filename = results['img_path']
        try:
            image = load_image(filename, self.color_type, self.backend_args, self.max_pixels)
        except ImageLoadError as err:
            if self.ignore_empty:
                return None
            raise type(err)(f'NativeLoadImageFromFile: {err}') from err  # keeps the subclass
        img = as_mmcv_image(image, self.to_float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results
