"""Pixel ops of the pipeline: ``warp_image`` (resize + flip, CPU), ``resize_part`` (the part of
a resize a crop keeps, CPU), ``average_floor`` (the mix-up's blend, CPU), ``hsv_shift`` (the
colour jitter's HSV shift, CPU), ``normalize_batch`` (CPU and CUDA), ``resize_normalize_batch``
(CPU and CUDA) (kernels: ``csrc/transforms/``)."""
import math
from typing import Optional, Sequence

import torch

from .._native import _C  # noqa: F401  (registers the schemas the fake kernels attach to)
from .._torch_compat import register_fake
from ..rounding import padded_size

# cv::InterpolationFlags by mmcv's names, and warp_image's flip codes by mmcv's direction names.
INTERPOLATIONS = {'nearest': 0, 'bilinear': 1, 'bicubic': 2, 'area': 3, 'lanczos': 4}
FLIP_CODES = {None: 0, 'horizontal': 1, 'vertical': 2, 'diagonal': 3}


def warp_image(image: torch.Tensor, out_shape: tuple[int, int], interpolation: str = 'bilinear',
               flip_direction: str | None = None,
               keep: tuple[int, int, int, int] | None = None) -> torch.Tensor:
    """Resize an image to ``out_shape``, keep a part of it, then flip it, in one native call
    with the GIL released.

    Args:
        image (Tensor[H, W, C] uint8): C <= 4, on the CPU.
        out_shape: (h, w) in px, both >= 1.
        interpolation: one of ``INTERPOLATIONS`` (mmcv's names).
        flip_direction: 'horizontal', 'vertical', 'diagonal' or None.
        keep: (y, x, kh, kw) in px, the part of the resized image kept (mmdet's ``RandomCrop``
            between the resize and the flip), inside it; None: all of it.

    Returns:
        A new channel-planar Tensor[C, kh, kw] uint8 (kh, kw = h, w without ``keep``) equal to
        ``mmcv.imflip(mmcv.imresize(img, (w, h), interpolation=...)[y:y + kh, x:x + kw],
        flip_direction)`` (cv2 backend) transposed to CHW. ``result.permute(1, 2, 0)`` is the
        HWC image, laid out so that packing it for the model copies nothing.
    """
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f'interpolation must be one of {sorted(INTERPOLATIONS)}, '
                         f'got {interpolation!r}')
    if flip_direction not in FLIP_CODES:
        raise ValueError(f'flip_direction must be horizontal, vertical, diagonal or None, '
                         f'got {flip_direction!r}')
    out_h, out_w = (int(v) for v in out_shape)
    return torch.ops.mmdet_ext.warp_image(image, out_h, out_w, INTERPOLATIONS[interpolation],
                                          FLIP_CODES[flip_direction],
                                          None if keep is None else [int(v) for v in keep])


@register_fake('mmdet_ext::warp_image')
def _warp_image_fake(image: torch.Tensor, out_height: int, out_width: int, interpolation: int,
                     flip: int, keep: list[int] | None = None) -> torch.Tensor:
    torch._check(image.dtype == torch.uint8 and image.dim() == 3)
    height, width = (out_height, out_width) if keep is None else keep[2:]
    return image.new_empty((image.shape[2], height, width))


def resize_part(image: torch.Tensor, out_shape: tuple[int, int],
                keep: tuple[int, int, int, int],
                source: Optional[tuple[int, int, int, int]] = None) -> torch.Tensor:
    """The part of an image's bilinear resize that a crop keeps, without the rest of it.

    Args:
        image (Tensor[H, W, C] uint8): C <= 4, on the CPU: the image, or with ``source`` a
            window of it.
        out_shape: (h, w) in px, both >= 1: the whole resized image's size.
        keep: (y, x, kh, kw) in px, the part kept, inside the resized image.
        source: (y, x, full_h, full_w) in px: ``image`` is the window at (y, x) of a
            full_h x full_w image, which is the one resized; it must hold every pixel the part
            reads (``source_window`` bounds them), else a RuntimeError says which window lacks
            them. None: ``image`` is the whole image.

    Returns:
        A new Tensor[kh, kw, C] uint8 equal to
        ``mmcv.imresize(img, (w, h))[y:y + kh, x:x + kw]`` (cv2 backend, bilinear) of the whole
        image: computed alone with cv::resize's fixed-point arithmetic where cv::resize takes
        that path, else (a resize to the same size, an exact halving) from the pixels under the
        part.
    """
    out_h, out_w = (int(v) for v in out_shape)
    return torch.ops.mmdet_ext.resize_part(image, out_h, out_w, [int(v) for v in keep],
                                           [] if source is None else [int(v) for v in source])


def source_window(image_shape: tuple[int, int], out_shape: tuple[int, int],
                  keep: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """(y, x, h, w): a window of an ``image_shape`` (h, w) image that holds every pixel the part
    ``keep`` of its bilinear resize to ``out_shape`` reads (``resize_part``'s ``source``). A bound,
    not the exact set: each side takes the source coordinate of the part's edge, (d + 0.5) * s -
    0.5 for the scale s, and two more pixels, beyond the one the interpolation reads next to it
    and the float rounding; ``resize_part`` checks it holds them."""
    window = []
    for size, out, start, length in zip(image_shape, out_shape, keep[:2], keep[2:]):
        scale = size / out
        first = max(0, math.floor((start + 0.5) * scale - 0.5) - 2)
        end = min(size, math.floor((start + length - 0.5) * scale - 0.5) + 4)
        window.append((first, end - first))
    (y, h), (x, w) = window
    return y, x, h, w


@register_fake('mmdet_ext::resize_part')
def _resize_part_fake(image: torch.Tensor, out_height: int, out_width: int,
                      keep: list[int], source: Sequence[int] = ()) -> torch.Tensor:
    torch._check(image.dtype == torch.uint8 and image.dim() == 3)
    return image.new_empty((keep[2], keep[3], image.shape[2]))


def average_floor(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``floor((a + b) / 2)`` of two uint8 tensors of one shape, a new contiguous tensor: what
    mmdet's ``CachedMixUp`` makes of two 8-bit images, ``(0.5 * a + 0.5 * b).astype(np.uint8)``
    (exact in float32), in one pass (CPU)."""
    return torch.ops.mmdet_ext.average_floor(a, b)


@register_fake('mmdet_ext::average_floor')
def _average_floor_fake(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch._check(a.dtype == torch.uint8 and b.dtype == torch.uint8 and a.shape == b.shape)
    return torch.empty_like(a, memory_format=torch.contiguous_format)


def hsv_shift(hsv: torch.Tensor, gains: Sequence[int]) -> torch.Tensor:
    """An 8-bit HSV image (Tensor[..., 3] uint8, OpenCV's hue range 0..179) with its hue moved
    by ``gains[0]`` round the circle, ``(h + gains[0]) % 180``, and its saturation and value by
    ``gains[1]``, ``gains[2]``, clipped to 0..255: what mmdet's ``YOLOXHSVRandomAug`` does to
    the image between its two ``cvtColor`` calls (in int16, floor modulo), in one pass (CPU).
    Each gain in -255..255; a new contiguous tensor."""
    return torch.ops.mmdet_ext.hsv_shift(hsv, [int(g) for g in gains])


@register_fake('mmdet_ext::hsv_shift')
def _hsv_shift_fake(hsv: torch.Tensor, gains: Sequence[int]) -> torch.Tensor:
    torch._check(hsv.dtype == torch.uint8 and hsv.dim() >= 1 and hsv.shape[-1] == 3)
    return torch.empty_like(hsv, memory_format=torch.contiguous_format)


def normalize_batch(images: torch.Tensor, mean: torch.Tensor, std: torch.Tensor,
                    reverse_channels: bool, image_sizes: torch.Tensor,
                    pad_value: float = 0.0) -> torch.Tensor:
    """A padded uint8 batch to the detector's float input, in one pass, on the batch's device
    (CPU, or CUDA in a CUDA build: the same bits).

    Args:
        images (Tensor[B, C, H, W] uint8): e.g. ``fast_collate``'s batch.
        mean, std (Tensor[C]): in the output's channel order (any device).
        reverse_channels: BGR -> RGB (or back) before normalising.
        image_sizes (Tensor[B, 2] int64): each image's (height, width) before padding (any
            device; read on the host).
        pad_value: what the padding holds in the output.

    Returns:
        Tensor[B, C, H, W] float32: ``(x - mean) / std`` inside each image, ``pad_value``
        outside; equal to mmdet's ``DetDataPreprocessor`` on the unpadded images.
    """
    return torch.ops.mmdet_ext.normalize_batch(images, mean, std, reverse_channels, image_sizes,
                                               float(pad_value))


@register_fake('mmdet_ext::normalize_batch')
def _normalize_batch_fake(images, mean, std, reverse_channels, image_sizes, pad_value):
    torch._check(images.dtype == torch.uint8 and images.dim() == 4)
    return images.new_empty(images.shape, dtype=torch.float32)


def resize_normalize_batch(data: torch.Tensor, image_shapes: torch.Tensor,
                           out_shapes: torch.Tensor, flips: torch.Tensor, mean: torch.Tensor,
                           std: torch.Tensor, reverse_channels: bool,
                           interpolation: str = 'bilinear', pad_size_divisor: int = 1,
                           pad_value: float = 0.0,
                           dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Decoded images to the detector's padded batch in one pass on ``data``'s device: resize,
    flip, channel order, ``(x - mean) / std``, padding (CPU, or CUDA in a CUDA build: the same
    bits).

    Args:
        data (Tensor[N] uint8): the images' channel-planar pixels (CHW, BGR as decoded and
            packed by ``PackDetInputs``), one after another.
        image_shapes (Tensor[B, 3] int64): each image's (height, width, channels); one channel
            count (1 to 4) per batch. Read on the host, any device.
        out_shapes (Tensor[B, 2] int64): each image's (height, width) after the resize.
        flips (Tensor[B] int64): ``FLIP_CODES`` of each image's flip, applied after the resize.
        mean, std (Tensor[C]): in the output's channel order (any device).
        reverse_channels: BGR -> RGB (or back) before normalising.
        interpolation: 'bilinear' or 'nearest' (cv2's arithmetic, bit for bit); the others
            mmcv offers raise ``ValueError``.
        pad_size_divisor: the batch's height and width are the largest output's, rounded up
            to a multiple of this (mmdet's ``stack_batch``).
        pad_value: what the padding holds in the output.
        dtype: float32, float16 or bfloat16 (the float32 value, rounded to nearest even).

    Returns:
        Tensor[B, C, H, W] of ``dtype``: image b is ``mmcv.imflip(mmcv.imresize(img_b,
        (w_b, h_b), interpolation=...), direction)`` (cv2 backend), channels reversed if asked,
        normalised as mmdet's ``DetDataPreprocessor`` does, in ``[:h_b, :w_b]``; ``pad_value``
        elsewhere.
    """
    if interpolation not in ('bilinear', 'nearest'):
        raise ValueError(f"resize_normalize_batch: interpolation {interpolation!r} is not "
                         "implemented (only 'bilinear' and 'nearest' reproduce cv2.resize bit "
                         "for bit here); resize such images in the workers instead")
    if pad_size_divisor < 1:
        raise ValueError(f'resize_normalize_batch: pad_size_divisor must be >= 1, got '
                         f'{pad_size_divisor}')
    sizes = out_shapes.cpu()
    height = max((int(h) for h in sizes[:, 0]), default=0)
    width = max((int(w) for w in sizes[:, 1]), default=0)
    height, width = padded_size(height, pad_size_divisor), padded_size(width, pad_size_divisor)
    return torch.ops.mmdet_ext.resize_normalize_batch(
        data, image_shapes, out_shapes, flips, INTERPOLATIONS[interpolation], mean, std,
        reverse_channels, height, width, float(pad_value), dtype)


@register_fake('mmdet_ext::resize_normalize_batch')
def _resize_normalize_batch_fake(data, image_shapes, out_shapes, flips, interpolation, mean, std,
                                 reverse_channels, batch_height, batch_width, pad_value,
                                 dtype=None):
    torch._check(data.dtype == torch.uint8 and data.dim() == 1)
    # mean has one value per channel (the kernels check it against image_shapes).
    return data.new_empty((image_shapes.shape[0], mean.numel(), batch_height, batch_width),
                          dtype=dtype or torch.float32)
