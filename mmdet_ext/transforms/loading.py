"""Image loading through the native decoder."""
from typing import Optional

import numpy as np
import torch
from mmcv.transforms import LoadImageFromFile
from mmengine import fileio

from ..io import DEFAULT_MAX_PIXELS, ImageHeaderError, is_jpeg_or_png, read_image_header
from ..ops import decode_image
from ..registry import TRANSFORMS


@TRANSFORMS.register_module()
class NativeLoadImageFromFile(LoadImageFromFile):
    """Drop-in for mmcv's ``LoadImageFromFile`` that decodes with ``torch.ops.mmdet_ext``.

    Same arguments and outputs (``img`` as HxWx3 BGR uint8 or float32, ``img_shape``,
    ``ori_shape``). ``imdecode_backend`` is accepted for config compatibility and ignored: decoding
    always goes through ``decode_image`` (libjpeg for JPEG, OpenCV's C++ API otherwise, bit-exact
    with ``cv2.imdecode``) with the GIL released. Unlike mmcv, a file that cannot be decoded raises
    an error naming the file and the cause (unless ``ignore_empty``), and so does a JPEG whose
    entropy-coded data libjpeg finds corrupt (mmcv returns garbage pixels for it); a JPEG/PNG whose
    header declares more than ``max_pixels`` pixels is refused before anything is allocated
    (decompression bombs), as is a truncated one.
    """

    def __init__(self, *args, max_pixels: int = DEFAULT_MAX_PIXELS, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.max_pixels = max_pixels

    def transform(self, results: dict) -> Optional[dict]:
        filename = results['img_path']
        try:
            img_bytes = fileio.get(filename, backend_args=self.backend_args)
            if is_jpeg_or_png(img_bytes):
                read_image_header(img_bytes, self.max_pixels)
            encoded = torch.frombuffer(bytearray(img_bytes), dtype=torch.uint8) if img_bytes \
                else torch.empty(0, dtype=torch.uint8)
            img = decode_image(encoded, self.color_type).numpy()
        except (OSError, RuntimeError, ImageHeaderError) as err:
            if self.ignore_empty:
                return None
            raise RuntimeError(f'NativeLoadImageFromFile: cannot load {filename}: {err}') from err
        if img.shape[2] == 1:  # mmcv returns grayscale images as HxW
            img = img[:, :, 0]
        if self.to_float32:
            img = img.astype(np.float32)
        results['img'] = img
        results['img_shape'] = img.shape[:2]
        results['ori_shape'] = img.shape[:2]
        return results
