"""Typed Python wrappers of the native ops in ``torch.ops.mmdet_ext``, and their fake kernels.

The fake (meta) kernels let ``torch.compile`` and ``torch.library.opcheck`` reason about the ops
without running them.
"""
from collections.abc import Sequence

import numpy as np
import torch

# cv::ImreadModes values, spelled the way mmcv's ``imfrombytes(flag=...)`` spells them.
IMREAD_FLAGS = {
    'color': 1,  # cv2.IMREAD_COLOR
    'grayscale': 0,  # cv2.IMREAD_GRAYSCALE
    'unchanged': -1,  # cv2.IMREAD_UNCHANGED
    'color_ignore_orientation': 1 | 128,  # | cv2.IMREAD_IGNORE_ORIENTATION
    'grayscale_ignore_orientation': 0 | 128,
}


SCALE_DENOMS = (1, 2, 4, 8)  # libjpeg's reduced-size DCT decoding, cv2.IMREAD_REDUCED_*_N


def decode_image(data: torch.Tensor, color_type: str = 'color',
                 scale_denom: int = 1) -> torch.Tensor:
    """Decode an encoded image (JPEG, PNG, ...), bit-exact with ``cv2.imdecode``.

    JPEGs are decoded by libjpeg directly, with OpenCV's settings, and corrupt entropy-coded data
    (which libjpeg only warns about and OpenCV decodes into garbage) raises an error. EXIF
    orientation is applied as ``cv2.imdecode`` does: for 'color' and 'grayscale', not for the
    ``*_ignore_orientation`` types nor 'unchanged'.

    Args:
        data (Tensor[N] uint8): the file's bytes.
        color_type: one of ``IMREAD_FLAGS`` (mmcv's names).
        scale_denom: 1, 2, 4 or 8: decode a JPEG at 1/scale_denom of its size (each side rounded
            up), like ``cv2.IMREAD_REDUCED_COLOR_N`` / ``IMREAD_REDUCED_GRAYSCALE_N``. Other
            formats ignore it and come back at full size: read the shape of the result.

    Returns:
        Tensor[H, W, C] uint8 in BGR order (C = 1 for grayscale, 1/3/4 for 'unchanged').

    Raises:
        RuntimeError: empty, truncated, corrupt or undecodable data.
    """
    if color_type not in IMREAD_FLAGS:
        raise ValueError(f'color_type must be one of {sorted(IMREAD_FLAGS)}, got {color_type!r}')
    if scale_denom not in SCALE_DENOMS:
        raise ValueError(f'scale_denom must be one of {SCALE_DENOMS}, got {scale_denom!r}')
    return torch.ops.mmdet_ext.decode_image(data, IMREAD_FLAGS[color_type], int(scale_denom))


@torch.library.register_fake('mmdet_ext::decode_image')
def _decode_image_fake(data: torch.Tensor, flags: int, scale_denom: int = 1) -> torch.Tensor:
    torch._check(data.dtype == torch.uint8 and data.dim() == 1)
    ctx = torch.library.get_ctx()
    height, width = ctx.new_dynamic_size(), ctx.new_dynamic_size()
    channels = ctx.new_dynamic_size() if flags == IMREAD_FLAGS['unchanged'] else (
        1 if flags & 1 == 0 else 3)
    return data.new_empty((height, width, channels))


# cv::InterpolationFlags by mmcv's names, and warp_image's flip codes by mmcv's direction names.
INTERPOLATIONS = {'nearest': 0, 'bilinear': 1, 'bicubic': 2, 'area': 3, 'lanczos': 4}
FLIP_CODES = {None: 0, 'horizontal': 1, 'vertical': 2, 'diagonal': 3}


def warp_image(image: torch.Tensor, out_shape: tuple[int, int], interpolation: str = 'bilinear',
               flip_direction: str | None = None) -> torch.Tensor:
    """Resize ``image`` (Tensor[H, W, C] uint8) to ``out_shape`` = (h, w), then flip it.

    Returns a new channel-planar Tensor[C, h, w] uint8 equal to
    ``mmcv.imflip(mmcv.imresize(img, (w, h), interpolation=...), flip_direction)`` (cv2 backend)
    transposed to CHW, in one native call with the GIL released. ``result.permute(1, 2, 0)`` is
    the HWC image, laid out so that packing it for the model copies nothing.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f'interpolation must be one of {sorted(INTERPOLATIONS)}, '
                         f'got {interpolation!r}')
    if flip_direction not in FLIP_CODES:
        raise ValueError(f'flip_direction must be horizontal, vertical, diagonal or None, '
                         f'got {flip_direction!r}')
    out_h, out_w = (int(v) for v in out_shape)
    return torch.ops.mmdet_ext.warp_image(image, out_h, out_w, INTERPOLATIONS[interpolation],
                                          FLIP_CODES[flip_direction])


@torch.library.register_fake('mmdet_ext::warp_image')
def _warp_image_fake(image: torch.Tensor, out_height: int, out_width: int, interpolation: int,
                     flip: int) -> torch.Tensor:
    torch._check(image.dtype == torch.uint8 and image.dim() == 3)
    return image.new_empty((image.shape[2], out_height, out_width))


def normalize_batch(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                    reverse_channels: bool, image_sizes: torch.Tensor,
                    pad_value: float = 0.0) -> torch.Tensor:
    """A padded uint8 batch to the detector's float input, in one pass.

    Args:
        images (Tensor[B, C, H, W] uint8): e.g. ``fast_collate``'s batch.
        mean, std (Tensor[C]): in the output's channel order.
        reverse_channels: BGR -> RGB (or back) before normalising.
        image_sizes (Tensor[B, 2] int64): each image's (height, width) before padding.
        pad_value: what the padding holds in the output.

    Returns:
        Tensor[B, C, H, W] float32, equal to mmdet's ``DetDataPreprocessor`` on the images.
    """
    return torch.ops.mmdet_ext.normalize_batch(images, mean, std, reverse_channels, image_sizes,
                                               float(pad_value))


@torch.library.register_fake('mmdet_ext::normalize_batch')
def _normalize_batch_fake(images, mean, std, reverse_channels, image_sizes, pad_value):
    torch._check(images.dtype == torch.uint8 and images.dim() == 4)
    return images.new_empty(images.shape, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# Instance masks: COCO RLE and polygons, bit-exact with pycocotools (csrc/masks/).
#
# counts: Tensor[K] int32/int64, COCO run lengths, column-major, zeros first (returned as int32).
# A batch of RLEs is packed: counts [sum K_i] + run_counts [N]; a batch of polygon instances is
# coords float64 [2 * points] + part_lengths [P] (coordinates per part) + part_counts [N] (parts
# per instance); ``pack_counts`` / ``pack_polygons`` build them from COCO-style Python objects.
# ---------------------------------------------------------------------------------------------

Polygon = Sequence[float] | np.ndarray  # one part: x0, y0, x1, y1, ... in px


def pack_counts(rles: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Pack N RLE count tensors into (counts [sum K_i] int32, run_counts [N] int64)."""
    run_counts = torch.tensor([len(c) for c in rles], dtype=torch.int64)
    counts = torch.cat([c.to(torch.int32) for c in rles]) if rles else torch.zeros(
        0, dtype=torch.int32)
    return counts, run_counts


def pack_polygons(
        instances: Sequence[Sequence[Polygon]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack COCO polygon instances (each a list of parts) into the flat batch form.

    Returns:
        coords (Tensor[2 * points] float64), part_lengths (Tensor[P] int64),
        part_counts (Tensor[N] int64).
    """
    parts = [np.asarray(part, dtype=np.float64).ravel() for inst in instances for part in inst]
    coords = torch.from_numpy(np.concatenate(parts)) if parts else torch.zeros(
        0, dtype=torch.float64)
    part_lengths = torch.tensor([len(p) for p in parts], dtype=torch.int64)
    part_counts = torch.tensor([len(inst) for inst in instances], dtype=torch.int64)
    return coords, part_lengths, part_counts


def rle_encode(mask: torch.Tensor) -> torch.Tensor:
    """COCO RLE of a (H, W) uint8/bool mask (non-zero = foreground), like ``mask.encode``.

    Returns:
        Tensor[K] int32 counts.
    """
    return torch.ops.mmdet_ext.rle_encode(mask)


def rle_decode(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Decode one RLE, like ``mask.decode`` but row-major: Tensor[H, W] uint8 in {0, 1}."""
    return torch.ops.mmdet_ext.rle_decode(counts, height, width)


def rle_decode_batch(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                     width: int) -> torch.Tensor:
    """Decode N packed RLEs of one image size in one call: Tensor[N, H, W] uint8."""
    return torch.ops.mmdet_ext.rle_decode_batch(counts, run_counts, height, width)


def rle_to_string(counts: torch.Tensor) -> bytes:
    """COCO's compressed counts string (what ``mask.encode`` puts in ``'counts'``)."""
    return bytes(torch.ops.mmdet_ext.rle_to_string(counts).numpy())


def rle_from_string(data: bytes | str, height: int, width: int) -> torch.Tensor:
    """Counts (Tensor[K] int32) of a compressed COCO counts string of a (height, width) mask."""
    raw = data.encode('ascii') if isinstance(data, str) else bytes(data)
    # np.frombuffer, unlike torch.frombuffer, accepts an empty buffer (the RLE of a 0-pixel mask)
    return torch.ops.mmdet_ext.rle_from_string(
        torch.from_numpy(np.frombuffer(bytearray(raw), dtype=np.uint8)), height, width)


def rle_merge(counts: torch.Tensor, run_counts: torch.Tensor, height: int, width: int,
              intersect: bool = False) -> torch.Tensor:
    """Union (or intersection) of N packed RLEs, like ``mask.merge``: Tensor[K] int32."""
    return torch.ops.mmdet_ext.rle_merge(counts, run_counts, height, width, intersect)


def rle_area(counts: torch.Tensor) -> int:
    """Number of foreground pixels, like ``mask.area``."""
    return int(torch.ops.mmdet_ext.rle_area(counts))


def rle_to_bbox(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Tight box (x, y, w, h) in px as Tensor[4] float64, like ``mask.toBbox``."""
    return torch.ops.mmdet_ext.rle_to_bbox(counts, height, width)


def rle_crop_and_resize(counts: torch.Tensor, run_counts: torch.Tensor, height: int, width: int,
                        boxes: torch.Tensor, inds: torch.Tensor,
                        out_shape: tuple[int, int]) -> torch.Tensor:
    """mmdet ``BitmapMasks.crop_and_resize(boxes, out_shape, inds).to_ndarray()`` on RLEs.

    Only the runs inside each box are decoded; the result equals mmcv's CPU ``roi_align``
    (aligned, adaptive sampling, average) on the full bitmap followed by ``>= 0.5``.

    Args:
        counts, run_counts: N packed RLEs of (height, width) masks.
        boxes (Tensor[M, 4] float32/float64): x1, y1, x2, y2 in px, x2 >= x1, y2 >= y1.
        inds (Tensor[M] int): box i crops mask inds[i].
        out_shape: (out_h, out_w).

    Returns:
        Tensor[M, out_h, out_w] uint8 in {0, 1}.
    """
    return torch.ops.mmdet_ext.rle_crop_and_resize(counts, run_counts, height, width, boxes,
                                                   inds, *out_shape)


def rle_from_polygons(coords: torch.Tensor, part_lengths: torch.Tensor, height: int,
                      width: int) -> torch.Tensor:
    """RLE of one polygon instance, like ``mask.merge(mask.frPyObjects(parts, h, w))``.

    Parts of 1 or 2 points rasterise to nothing, as in pycocotools' ``frPoly`` (``frPyObjects``
    itself would read a leading 4-number part as a box; mmdet drops such parts beforehand).
    No parts gives the empty mask.

    Returns:
        Tensor[K] int32 counts.
    """
    return torch.ops.mmdet_ext.rle_from_polygons(coords, part_lengths, height, width)


def polygons_to_masks(coords: torch.Tensor, part_lengths: torch.Tensor,
                      part_counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Rasterise N packed polygon instances at full size: Tensor[N, H, W] uint8.

    Instance i equals ``mask.decode(rle_from_polygons(its parts))``.
    """
    return torch.ops.mmdet_ext.polygons_to_masks(coords, part_lengths, part_counts, height,
                                                 width)


def polygons_crop_and_resize(coords: torch.Tensor, part_lengths: torch.Tensor,
                             part_counts: torch.Tensor, boxes: torch.Tensor, inds: torch.Tensor,
                             out_shape: tuple[int, int]) -> torch.Tensor:
    """mmdet ``PolygonMasks.crop_and_resize(boxes, out_shape, inds).to_ndarray()``, natively.

    Each polygon is shifted by (-x1, -y1) and scaled by out_w / max(x2 - x1, 1),
    out_h / max(y2 - y1, 1) in the boxes' dtype, as mmdet does under numpy >= 2, then
    rasterised at out_shape by pycocotools' algorithm.

    Args:
        coords, part_lengths, part_counts: N packed polygon instances.
        boxes (Tensor[M, 4] float32/float64): x1, y1, x2, y2 in px.
        inds (Tensor[M] int): box i crops instance inds[i].
        out_shape: (out_h, out_w).

    Returns:
        Tensor[M, out_h, out_w] uint8 in {0, 1}.
    """
    return torch.ops.mmdet_ext.polygons_crop_and_resize(coords, part_lengths, part_counts, boxes,
                                                        inds, *out_shape)


def _dynamic_1d(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return like.new_empty((torch.library.get_ctx().new_dynamic_size(), ), dtype=dtype)


@torch.library.register_fake('mmdet_ext::rle_encode')
def _rle_encode_fake(mask: torch.Tensor) -> torch.Tensor:
    torch._check(mask.dim() == 2)
    return _dynamic_1d(mask, torch.int32)


@torch.library.register_fake('mmdet_ext::rle_decode')
def _rle_decode_fake(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((height, width), dtype=torch.uint8)


@torch.library.register_fake('mmdet_ext::rle_decode_batch')
def _rle_decode_batch_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                           width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1 and run_counts.dim() == 1)
    return counts.new_empty((run_counts.shape[0], height, width), dtype=torch.uint8)


@torch.library.register_fake('mmdet_ext::rle_to_string')
def _rle_to_string_fake(counts: torch.Tensor) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return _dynamic_1d(counts, torch.uint8)


@torch.library.register_fake('mmdet_ext::rle_from_string')
def _rle_from_string_fake(data: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(data.dim() == 1 and data.dtype == torch.uint8)
    return _dynamic_1d(data, torch.int32)


@torch.library.register_fake('mmdet_ext::rle_merge')
def _rle_merge_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int, width: int,
                    intersect: bool = False) -> torch.Tensor:
    torch._check(counts.dim() == 1 and run_counts.dim() == 1)
    return _dynamic_1d(counts, torch.int32)


@torch.library.register_fake('mmdet_ext::rle_area')
def _rle_area_fake(counts: torch.Tensor) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((), dtype=torch.int64)


@torch.library.register_fake('mmdet_ext::rle_to_bbox')
def _rle_to_bbox_fake(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((4, ), dtype=torch.float64)


@torch.library.register_fake('mmdet_ext::rle_crop_and_resize')
def _rle_crop_and_resize_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                              width: int, boxes: torch.Tensor, inds: torch.Tensor,
                              out_height: int, out_width: int) -> torch.Tensor:
    torch._check(boxes.dim() == 2 and boxes.shape[1] == 4)
    return counts.new_empty((boxes.shape[0], out_height, out_width), dtype=torch.uint8)


@torch.library.register_fake('mmdet_ext::rle_from_polygons')
def _rle_from_polygons_fake(coords: torch.Tensor, part_lengths: torch.Tensor, height: int,
                            width: int) -> torch.Tensor:
    torch._check(coords.dim() == 1 and part_lengths.dim() == 1)
    return _dynamic_1d(part_lengths, torch.int32)


@torch.library.register_fake('mmdet_ext::polygons_to_masks')
def _polygons_to_masks_fake(coords: torch.Tensor, part_lengths: torch.Tensor,
                            part_counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(coords.dim() == 1 and part_counts.dim() == 1)
    return coords.new_empty((part_counts.shape[0], height, width), dtype=torch.uint8)


@torch.library.register_fake('mmdet_ext::polygons_crop_and_resize')
def _polygons_crop_and_resize_fake(coords: torch.Tensor, part_lengths: torch.Tensor,
                                   part_counts: torch.Tensor, boxes: torch.Tensor,
                                   inds: torch.Tensor, out_height: int,
                                   out_width: int) -> torch.Tensor:
    torch._check(boxes.dim() == 2 and boxes.shape[1] == 4)
    return coords.new_empty((boxes.shape[0], out_height, out_width), dtype=torch.uint8)
