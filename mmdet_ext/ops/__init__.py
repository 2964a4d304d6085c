"""Typed Python wrappers of the native ops in ``torch.ops.mmdet_ext``, with their fake kernels.

One module per subject, mirroring ``csrc/``: ``image`` (decoding, ``csrc/io/``; on the GPU with
nvJPEG: ``gpu_decode``), ``pixels`` (resize/flip and batch normalisation, ``csrc/transforms/``),
``masks`` (COCO RLE and polygons, ``csrc/masks/``); ``devices`` says which devices an op has
kernels for in this build. In each, an op's wrapper comes first and its fake kernel right after
it; the wrapper's docstring is the op's contract (shapes, dtypes, units, reference), and the
schema in ``csrc/library.cpp`` points to it. The fake kernels let ``torch.compile`` and
``torch.library.opcheck`` reason about the ops without running them.
"""
from .devices import deferred_pixels_device, has_kernel
from .gpu_decode import decode_encoded_batch, decode_jpegs_into, gpu_decodes_on, nvjpeg_problem
from .image import IMREAD_FLAGS, SCALE_DENOMS, decode_image, decode_images_into
from .masks import (Polygon, pack_counts, pack_polygons, paste_masks_to_rle,
                    polygons_crop_and_resize, polygons_to_masks, polygons_to_masks_into, rle_area,
                    rle_crop_and_resize, rle_decode, rle_decode_batch, rle_decode_batch_into,
                    rle_encode, rle_encode_batch, rle_from_polygons, rle_from_string, rle_merge,
                    rle_to_bbox, rle_to_string, to_coco_rles)
from .pixels import (FLIP_CODES, INTERPOLATIONS, average_floor, hsv_shift, normalize_batch,
                     resize_normalize_batch, resize_part, source_window, warp_image)

__all__ = [
    'FLIP_CODES', 'IMREAD_FLAGS', 'INTERPOLATIONS', 'SCALE_DENOMS', 'Polygon', 'average_floor',
    'decode_image',
    'decode_encoded_batch', 'decode_images_into', 'decode_jpegs_into', 'gpu_decodes_on',
    'nvjpeg_problem',
    'deferred_pixels_device', 'has_kernel', 'hsv_shift',
    'normalize_batch', 'pack_counts', 'pack_polygons', 'paste_masks_to_rle',
    'polygons_crop_and_resize', 'polygons_to_masks', 'polygons_to_masks_into', 'rle_area',
    'rle_crop_and_resize', 'rle_decode', 'rle_decode_batch', 'rle_decode_batch_into',
    'rle_encode', 'rle_encode_batch', 'rle_from_polygons', 'rle_from_string', 'rle_merge',
    'rle_to_bbox',
    'resize_normalize_batch', 'resize_part', 'rle_to_string', 'source_window', 'to_coco_rles',
    'warp_image'
]
