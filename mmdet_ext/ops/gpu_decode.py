"""Encoded images decoded on the training device: nvJPEG on a GPU where it may, the CPU decoder
for the rest (kernel: ``csrc/io/cuda/nvjpeg_decode.cpp``; what nvJPEG may take:
``csrc/io/jpeg_frame.h``).

Why: with ``NativeLoadResizeFlip(decode_on='device')`` the DataLoader workers read the files and
do the geometry only; the JPEG bytes (a tenth of the decoded pixels) go to the training process,
which decodes the whole batch on the GPU before ``resize_normalize_batch``
(docs/deferred_pixels.md).
"""
import ctypes
import functools
import importlib.util
import itertools
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import torch

from .._native import _C
from .._torch_compat import register_fake
from .devices import has_kernel
from .image import decode_images_into


def decode_jpegs_into(data: Sequence[torch.Tensor], out: torch.Tensor, offsets: Sequence[int],
                      shapes: Sequence[tuple[int, int, int]]) -> torch.Tensor:
    """Decode on ``out``'s GPU, with nvJPEG, the images it may take; leave the others alone.

    Args:
        data: each image's encoded bytes, Tensor[N_i] uint8 on the CPU.
        out (Tensor[M] uint8): contiguous, on a CUDA device.
        offsets, shapes: where image ``i`` goes and the (3, H, W) it must decode to; it is written
            channel-planar, B, G, R planes, as ``decode_image(..., planar=True)`` lays it out.

    Returns:
        Tensor[len(data)] bool (CPU): which images were decoded. nvJPEG takes baseline 8-bit
        3-component JPEGs of their planned size without EXIF rotation, Adobe segment or RGB
        component names, ending with EOI (``_C.jpeg_gpu_decode_refusal`` says why not); a batch
        it fails on comes back all False. Its pixels are not cv2's bit for bit (its own IDCT and
        chroma upsampling): measured on a GPU only, ``tests/test_gpu_decode.py``.

    Raises:
        RuntimeError: bad arguments; nvJPEG not loadable (``nvjpeg_problem``).
    """
    return torch.ops.mmdet_ext.decode_jpegs_into(list(data), out, [int(o) for o in offsets],
                                                 [int(v) for shape in shapes for v in shape])


@register_fake('mmdet_ext::decode_jpegs_into')
def _decode_jpegs_into_fake(data: list, out: torch.Tensor, offsets: list,
                            shapes: list) -> torch.Tensor:
    torch._check(out.dtype == torch.uint8 and out.dim() == 1)
    return torch.empty(len(data), dtype=torch.bool)


@functools.lru_cache(maxsize=None)
def nvjpeg_problem() -> Optional[str]:
    """Why this process cannot decode with nvJPEG (this build has none, the library is not
    found), or None when it can. An nvidia-nvjpeg wheel's library is loaded first when one is
    installed: pip puts it where the dynamic loader does not look."""
    if _C.build_info()['nvjpeg']:
        for library in _wheel_libraries():
            try:
                ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
    return _C.nvjpeg_load_error()


def _wheel_libraries() -> list[Path]:
    """libnvjpeg.so.<CUDA major> in the installed nvidia-* wheels (nvidia/cu13/lib for CUDA 13,
    nvidia/nvjpeg/lib for CUDA 12)."""
    spec = importlib.util.find_spec('nvidia')
    major = (torch.version.cuda or '0').split('.')[0]
    roots = spec.submodule_search_locations if spec and spec.submodule_search_locations else []
    return [library for root in roots
            for library in sorted(Path(root).glob(f'*/lib/libnvjpeg.so.{major}'))]


def gpu_decodes_on(device: torch.device) -> bool:
    """Whether ``decode_encoded_batch`` uses nvJPEG on ``device``."""
    return device.type == 'cuda' and has_kernel('decode_jpegs_into', device) and \
        nvjpeg_problem() is None


def decode_encoded_batch(data: torch.Tensor, sizes: Sequence[int],
                         shapes: Sequence[tuple[int, int, int]], device: torch.device,
                         names: Optional[Sequence[str]] = None,
                         max_pixels: Optional[int] = None) -> torch.Tensor:
    """The encoded images of ``data``, one after another, decoded to their pixels on ``device``.

    Args:
        data (Tensor[N] uint8): the files' bytes back to back, on the CPU.
        sizes: each file's byte count.
        shapes: each image's (3, H, W) as ``decode_image(color_type='color', planar=True)``
            decodes it (EXIF orientation applied).
        device: where the pixels go. On a GPU with nvJPEG (``gpu_decodes_on``), the JPEGs it
            may take are decoded there; every other image on the CPU, with ``decode_image``'s
            decoder (cv2's pixels bit for bit) on as many threads as this process may use.
        names: each image's file, for the error.
        max_pixels: as ``decode_image``'s.

    Returns:
        Tensor[sum(C * H * W)] uint8 on ``device``: the images channel-planar (B, G, R), back to
        back, as ``fast_collate`` packs images decoded in the workers.

    Raises:
        RuntimeError: an image that does not decode, or not to its shape, named.
    """
    if any(int(shape[0]) != 3 for shape in shapes):
        raise ValueError(f'decode_encoded_batch: color images only, (3, H, W), got {list(shapes)}')
    starts = list(itertools.accumulate((int(s) for s in sizes), initial=0))
    if starts[-1] != data.numel():
        raise ValueError(f'decode_encoded_batch: the sizes add up to {starts[-1]} bytes, data has '
                         f'{data.numel()}')
    encoded = [data[start:end] for start, end in zip(starts, starts[1:])]
    pixels = [math.prod(shape) for shape in shapes]
    offsets = list(itertools.accumulate(pixels, initial=0))
    out = torch.empty(offsets[-1], dtype=torch.uint8, device=device)
    left = list(range(len(encoded)))
    if gpu_decodes_on(out.device):
        decoded = decode_jpegs_into(encoded, out, offsets[:-1], shapes)
        left = [i for i in left if not bool(decoded[i])]
    if not left:
        return out
    on_cpu = out if out.device.type == 'cpu' else torch.empty(
        sum(pixels[i] for i in left), dtype=torch.uint8,
        pin_memory=torch.cuda.is_available())
    cpu_offsets = [offsets[i] for i in left] if on_cpu is out else \
        list(itertools.accumulate((pixels[i] for i in left[:-1]), initial=0))
    try:
        decode_images_into([encoded[i] for i in left], 'color', [1] * len(left), on_cpu,
                           cpu_offsets, [shapes[i] for i in left], max_pixels,
                           len(os.sched_getaffinity(0)))
    except RuntimeError as err:
        listed = ', '.join(f'{position}: {names[i]}' for position, i in enumerate(left)) \
            if names is not None else 'not named'
        raise RuntimeError(f'decode_encoded_batch: {err} (images by position: {listed})') from err
    if on_cpu is not out:
        for i, start in zip(left, cpu_offsets):
            out[offsets[i]:offsets[i] + pixels[i]].copy_(on_cpu[start:start + pixels[i]],
                                                         non_blocking=True)
    return out
