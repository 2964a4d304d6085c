"""``decode_image``: encoded file bytes to pixels (kernel: ``csrc/io/``)."""
from collections.abc import Sequence
from typing import Optional

import torch

from .._native import _C  # noqa: F401  (registers the schema the fake kernel attaches to)
from .._torch_compat import register_fake
from ..rounding import JPEG_SCALE_DENOMS
from .pixels import FLIP_CODES, INTERPOLATIONS

# cv::ImreadModes values, spelled the way mmcv's ``imfrombytes(flag=...)`` spells them.
IMREAD_FLAGS = {
    'color': 1,  # cv2.IMREAD_COLOR
    'grayscale': 0,  # cv2.IMREAD_GRAYSCALE
    'unchanged': -1,  # cv2.IMREAD_UNCHANGED
    'color_ignore_orientation': 1 | 128,  # | cv2.IMREAD_IGNORE_ORIENTATION
    'grayscale_ignore_orientation': 0 | 128,
}

SCALE_DENOMS = JPEG_SCALE_DENOMS  # libjpeg's reduced-size DCT decoding (rounding.py)


def decode_image(data: torch.Tensor, color_type: str = 'color', scale_denom: int = 1,
                 max_pixels: Optional[int] = None, planar: bool = False) -> torch.Tensor:
    """Decode an encoded image (JPEG, PNG, ...), bit-exact with ``cv2.imdecode``.

    JPEGs are decoded by libjpeg directly, with OpenCV's settings, and corrupt entropy-coded data
    (which libjpeg only warns about and OpenCV decodes into garbage) raises an error. EXIF
    orientation is applied as ``cv2.imdecode`` does: for 'color' and 'grayscale', not for the
    ``*_ignore_orientation`` types nor 'unchanged'.

    Args:
        data (Tensor[N] uint8): the file's bytes, on the CPU.
        color_type: one of ``IMREAD_FLAGS`` (mmcv's names).
        scale_denom: 1, 2, 4 or 8: decode a JPEG at 1/scale_denom of its size (each side rounded
            up), like ``cv2.IMREAD_REDUCED_COLOR_N`` / ``IMREAD_REDUCED_GRAYSCALE_N``. Other
            formats ignore it and come back at full size: read the shape of the result.
        max_pixels: refuse an image of more pixels (None: ``mmdet_ext.io.DEFAULT_MAX_PIXELS``).
            A JPEG is refused on its declared size, before anything is allocated; other formats
            after OpenCV decodes them (OpenCV itself refuses more than 2^30 before allocating).
        planar: return the channels as planes, Tensor[C, H, W] (split once in C++, as the
            decoder's rows come out interleaved): the layout ``PackDetInputs`` produces, so an
            ``img`` that is an HxWxC view of it reaches the model without another copy.

    Returns:
        Tensor[H, W, C] uint8 in BGR order (C = 1 for grayscale, 1/3/4 for 'unchanged'), or
        Tensor[C, H, W] with ``planar``.

    Raises:
        RuntimeError: empty, truncated, corrupt, undecodable or too large data.
    """
    if color_type not in IMREAD_FLAGS:
        raise ValueError(f'color_type must be one of {sorted(IMREAD_FLAGS)}, got {color_type!r}')
    if scale_denom not in SCALE_DENOMS:
        raise ValueError(f'scale_denom must be one of {SCALE_DENOMS}, got {scale_denom!r}')
    return torch.ops.mmdet_ext.decode_image(data, IMREAD_FLAGS[color_type], int(scale_denom),
                                            max_pixels, bool(planar))


@register_fake('mmdet_ext::decode_image')
def _decode_image_fake(data: torch.Tensor, flags: int, scale_denom: int = 1,
                       max_pixels: Optional[int] = None, planar: bool = False) -> torch.Tensor:
    torch._check(data.dtype == torch.uint8 and data.dim() == 1)
    ctx = torch.library.get_ctx()
    height, width = ctx.new_dynamic_size(), ctx.new_dynamic_size()
    channels = ctx.new_dynamic_size() if flags == IMREAD_FLAGS['unchanged'] else (
        1 if flags & 1 == 0 else 3)
    return data.new_empty((channels, height, width) if planar else (height, width, channels))


def decode_images_into(data: Sequence[torch.Tensor], color_type: str, scale_denoms: Sequence[int],
                       out: torch.Tensor, offsets: Sequence[int],
                       shapes: Sequence[tuple[int, int, int]], max_pixels: Optional[int] = None,
                       num_threads: int = 1,
                       warps: Optional[Sequence[tuple[int, int, Optional[str]]]] = None,
                       interpolation: str = 'bilinear',
                       slot_hw: Optional[tuple[int, int]] = None) -> None:
    """Decode a batch of images into ``out``, each as ``decode_image(..., planar=True)`` would
    (with ``warps``: as ``warp_image(decode_image(...), ...)`` would).

    Image ``i`` is written channel-planar (``shapes[i]`` = (C, H, W)) at ``out[offsets[i]:]``.
    The images are shared among ``num_threads`` native threads (the calling one included) with
    the GIL released: one call per batch, no tensor allocated per image, nothing copied after
    decoding.

    Args:
        data: each image's encoded bytes, Tensor[N_i] uint8 (contiguous, CPU).
        color_type: as ``decode_image``, one for the batch; not 'unchanged' (whose channel count
            only the decoder knows).
        scale_denoms: per image, as ``decode_image``'s ``scale_denom``.
        out (Tensor[M] uint8): contiguous, CPU; every image must fit at its offset.
        offsets, shapes: where each image goes and the (C, H, W) it must decode to.
        max_pixels, num_threads: as ``decode_image``; threads are capped at the image count.
        warps: per image (out_h, out_w, flip_direction): resize the decoded image to that size
            and flip it, bit-exact with ``warp_image``; image ``i`` is then written as
            (C, out_h, out_w). None: written as decoded.
        interpolation: the resize's, one of ``INTERPOLATIONS`` (mmcv's names); with ``warps``.
        slot_hw: (H, W) of the slots of a padded batch: image ``i`` (h x w, after its warp) is
            then written into the top left of a [C, H, W] slot at ``out[offsets[i]:]`` (its planes
            H * W bytes apart, its rows W apart); the rest of the slot is left as it is. Every
            image must fit its slot. None: each image packed, [C, h, w].

    Raises:
        RuntimeError: any image that cannot be decoded or does not decode to its shape (an EXIF
            orientation that swaps width and height, say); the message lists each one by its
            position in ``data``, and the other images are still decoded.
    """
    if color_type not in IMREAD_FLAGS or color_type == 'unchanged':
        raise ValueError('color_type must be one of '
                         f'{sorted(set(IMREAD_FLAGS) - {"unchanged"})}, got {color_type!r}')
    if any(denom not in SCALE_DENOMS for denom in scale_denoms):
        raise ValueError(f'scale_denoms must be in {SCALE_DENOMS}, got {list(scale_denoms)}')
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f'interpolation must be one of {sorted(INTERPOLATIONS)}, '
                         f'got {interpolation!r}')
    if warps is not None and any(flip not in FLIP_CODES for _, _, flip in warps):
        raise ValueError('flip directions must be horizontal, vertical, diagonal or None, '
                         f'got {[flip for _, _, flip in warps]}')
    flat_shapes = [int(v) for shape in shapes for v in shape]
    flat_warps = None if warps is None else [
        v for h, w, flip in warps for v in (int(h), int(w), FLIP_CODES[flip])]
    torch.ops.mmdet_ext.decode_images_into(list(data), IMREAD_FLAGS[color_type],
                                           [int(d) for d in scale_denoms], max_pixels, out,
                                           [int(o) for o in offsets], flat_shapes,
                                           int(num_threads), flat_warps,
                                           INTERPOLATIONS[interpolation],
                                           None if slot_hw is None else [int(v) for v in slot_hw])


@register_fake('mmdet_ext::decode_images_into')
def _decode_images_into_fake(data: list, flags: int, scale_denoms: list, max_pixels: Optional[int],
                             out: torch.Tensor, offsets: list, shapes: list,
                             num_threads: int = 1, warps: Optional[list] = None,
                             interpolation: int = 1, slot_hw: Optional[list] = None) -> None:
    torch._check(out.dtype == torch.uint8 and out.dim() == 1)
