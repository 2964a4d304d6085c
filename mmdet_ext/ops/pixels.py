"""Pixel ops of the pipeline: ``warp_image`` (resize + flip, CPU), ``normalize_batch`` (CPU and
CUDA) (kernels: ``csrc/transforms/``)."""
import torch

from .._native import _C  # noqa: F401  (registers the schemas the fake kernels attach to)

# cv::InterpolationFlags by mmcv's names, and warp_image's flip codes by mmcv's direction names.
INTERPOLATIONS = {'nearest': 0, 'bilinear': 1, 'bicubic': 2, 'area': 3, 'lanczos': 4}
FLIP_CODES = {None: 0, 'horizontal': 1, 'vertical': 2, 'diagonal': 3}


def warp_image(image: torch.Tensor, out_shape: tuple[int, int], interpolation: str = 'bilinear',
               flip_direction: str | None = None) -> torch.Tensor:
    """Resize an image to ``out_shape``, then flip it, in one native call with the GIL released.

    Args:
        image (Tensor[H, W, C] uint8): C <= 4, on the CPU.
        out_shape: (h, w) in px, both >= 1.
        interpolation: one of ``INTERPOLATIONS`` (mmcv's names).
        flip_direction: 'horizontal', 'vertical', 'diagonal' or None.

    Returns:
        A new channel-planar Tensor[C, h, w] uint8 equal to
        ``mmcv.imflip(mmcv.imresize(img, (w, h), interpolation=...), flip_direction)`` (cv2
        backend) transposed to CHW. ``result.permute(1, 2, 0)`` is the HWC image, laid out so
        that packing it for the model copies nothing.
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


@torch.library.register_fake('mmdet_ext::normalize_batch')
def _normalize_batch_fake(images, mean, std, reverse_channels, image_sizes, pad_value):
    torch._check(images.dtype == torch.uint8 and images.dim() == 4)
    return images.new_empty(images.shape, dtype=torch.float32)
