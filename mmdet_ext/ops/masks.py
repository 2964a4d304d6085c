"""COCO instance masks, RLE and polygons, bit-exact with pycocotools (kernels: ``csrc/masks/``).

counts: Tensor[K] int32/int64, COCO run lengths, column-major, zeros first (returned as int32).
A batch of RLEs is packed: counts [sum K_i] + run_counts [N]; a batch of polygon instances is
coords float64 [2 * points] + part_lengths [P] (coordinates per part) + part_counts [N] (parts
per instance); ``pack_counts`` / ``pack_polygons`` build them from COCO-style Python objects.
Masks come back as Tensor[..., H, W] uint8 in {0, 1}, row-major.

Devices: every op runs on the CPU. The ops that run in a training step also have CUDA kernels,
used when their data (``counts``/``coords``, and ``boxes``) are on a GPU, bit-identical to the
CPU ones: ``rle_decode``, ``rle_decode_batch`` (and ``_into``), ``rle_crop_and_resize``,
``polygons_to_masks`` (and ``_into``), ``polygons_crop_and_resize``; so do the test-time
encoders ``rle_encode_batch`` and ``paste_masks_to_rle`` (kernels: ``csrc/masks/cpu/``,
``csrc/masks/cuda/``). Their index tensors (``run_counts``,
``part_lengths``, ``part_counts``, ``inds``) are checked on the host and may be on either
device; results are on the data's device. Checking reads the data on the host, so data on a GPU
is read back (the host waits for the stream): ``rle_decode_batch_into`` and
``polygons_to_masks_into`` take the data on the host and run where their ``out`` is, which is
how ``LazyInstanceMasks.to_tensor`` makes masks on a GPU without a wait. ``has_kernel`` tells
what a build has.

Every wrapper returns what its op returns except two, which return the Python types their
pycocotools counterparts return: ``rle_to_string`` gives ``bytes`` (the op: Tensor[L] uint8) and
``rle_area`` an ``int`` (the op: a 0-dim int64 tensor).
"""
from collections.abc import Sequence

import numpy as np
import torch

from .._native import _C  # noqa: F401  (registers the schemas the fake kernels attach to)
from .._torch_compat import register_fake


def _dynamic_1d(like: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A fake 1-D result whose length is only known after running the op."""
    return like.new_empty((torch.library.get_ctx().new_dynamic_size(), ), dtype=dtype)


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


@register_fake('mmdet_ext::rle_encode')
def _rle_encode_fake(mask: torch.Tensor) -> torch.Tensor:
    torch._check(mask.dim() == 2)
    return _dynamic_1d(mask, torch.int32)


def rle_encode_batch(masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """COCO RLEs of N masks in one call, packed: what ``encode_mask_results`` makes of them.

    Mask i's runs equal pycocotools' ``mask.encode(np.asfortranarray(masks[i]))`` (for 0/1
    masks; here any non-zero byte is foreground), read from the row-major masks without the
    transposed copy pycocotools needs.

    Args:
        masks (Tensor[N, H, W] uint8/bool): on the CPU, or on a GPU (then only the counts come
            back to the host, not the masks; reading the result's size waits for the stream).

    Returns:
        counts (Tensor[sum K_i] int32), run_counts (Tensor[N] int64), on the masks' device.
    """
    return torch.ops.mmdet_ext.rle_encode_batch(masks)


@register_fake('mmdet_ext::rle_encode_batch')
def _rle_encode_batch_fake(masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(masks.dim() == 3)
    return _dynamic_1d(masks, torch.int32), masks.new_empty((masks.shape[0], ),
                                                            dtype=torch.int64)


def to_coco_rles(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                 width: int) -> list[dict]:
    """N packed RLEs as the dicts pycocotools' ``mask.encode`` returns (and ``CocoMetric``
    stores): ``{'size': [height, width], 'counts': bytes}`` with the compressed counts string."""
    counts, run_counts = counts.cpu(), run_counts.cpu()
    return [{'size': [height, width], 'counts': rle_to_string(rle)}
            for rle in torch.split(counts, run_counts.tolist())]


def rle_decode(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Decode one RLE, like ``mask.decode`` but row-major: Tensor[H, W] uint8 in {0, 1}."""
    return torch.ops.mmdet_ext.rle_decode(counts, height, width)


@register_fake('mmdet_ext::rle_decode')
def _rle_decode_fake(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((height, width), dtype=torch.uint8)


def rle_decode_batch(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                     width: int) -> torch.Tensor:
    """Decode N packed RLEs of one image size in one call: Tensor[N, H, W] uint8."""
    return torch.ops.mmdet_ext.rle_decode_batch(counts, run_counts, height, width)


@register_fake('mmdet_ext::rle_decode_batch')
def _rle_decode_batch_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                           width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1 and run_counts.dim() == 1)
    return counts.new_empty((run_counts.shape[0], height, width), dtype=torch.uint8)


def rle_to_string(counts: torch.Tensor) -> bytes:
    """COCO's compressed counts string (what ``mask.encode`` puts in ``'counts'``).

    Returns ``bytes`` (ASCII 48-111), as pycocotools does; the op itself returns them as
    Tensor[L] uint8.
    """
    return bytes(torch.ops.mmdet_ext.rle_to_string(counts).numpy())


def rle_decode_batch_into(counts: torch.Tensor, run_counts: torch.Tensor,
                          out: torch.Tensor) -> None:
    """``rle_decode_batch`` written into ``out`` (Tensor[N, H, W] uint8, contiguous), which
    decides where the kernel runs: packed counts on the host and ``out`` on a GPU decode there
    with nothing read back from the device."""
    torch.ops.mmdet_ext.rle_decode_batch_into(counts, run_counts, out)


@register_fake('mmdet_ext::rle_decode_batch_into')
def _rle_decode_batch_into_fake(counts: torch.Tensor, run_counts: torch.Tensor,
                                out: torch.Tensor) -> None:
    torch._check(counts.dim() == 1 and run_counts.dim() == 1 and out.dim() == 3)


@register_fake('mmdet_ext::rle_to_string')
def _rle_to_string_fake(counts: torch.Tensor) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return _dynamic_1d(counts, torch.uint8)


def rle_from_string(data: bytes | str, height: int, width: int) -> torch.Tensor:
    """Counts (Tensor[K] int32) of a compressed COCO counts string of a (height, width) mask."""
    raw = data.encode('ascii') if isinstance(data, str) else bytes(data)
    # np.frombuffer, unlike torch.frombuffer, accepts an empty buffer (the RLE of a 0-pixel mask)
    return torch.ops.mmdet_ext.rle_from_string(
        torch.from_numpy(np.frombuffer(bytearray(raw), dtype=np.uint8)), height, width)


@register_fake('mmdet_ext::rle_from_string')
def _rle_from_string_fake(data: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(data.dim() == 1 and data.dtype == torch.uint8)
    return _dynamic_1d(data, torch.int32)


def rle_merge(counts: torch.Tensor, run_counts: torch.Tensor, height: int, width: int,
              intersect: bool = False) -> torch.Tensor:
    """Union (or intersection) of N packed RLEs, like ``mask.merge``: Tensor[K] int32."""
    return torch.ops.mmdet_ext.rle_merge(counts, run_counts, height, width, intersect)


@register_fake('mmdet_ext::rle_merge')
def _rle_merge_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int, width: int,
                    intersect: bool = False) -> torch.Tensor:
    torch._check(counts.dim() == 1 and run_counts.dim() == 1)
    return _dynamic_1d(counts, torch.int32)


def rle_area(counts: torch.Tensor) -> int:
    """Number of foreground pixels, like ``mask.area``.

    Returns an ``int``, as pycocotools does; the op itself returns a 0-dim int64 tensor.
    """
    return int(torch.ops.mmdet_ext.rle_area(counts))


@register_fake('mmdet_ext::rle_area')
def _rle_area_fake(counts: torch.Tensor) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((), dtype=torch.int64)


def rle_to_bbox(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Tight box (x, y, w, h) in px as Tensor[4] float64, like ``mask.toBbox``."""
    return torch.ops.mmdet_ext.rle_to_bbox(counts, height, width)


@register_fake('mmdet_ext::rle_to_bbox')
def _rle_to_bbox_fake(counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(counts.dim() == 1)
    return counts.new_empty((4, ), dtype=torch.float64)


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


@register_fake('mmdet_ext::rle_crop_and_resize')
def _rle_crop_and_resize_fake(counts: torch.Tensor, run_counts: torch.Tensor, height: int,
                              width: int, boxes: torch.Tensor, inds: torch.Tensor,
                              out_height: int, out_width: int) -> torch.Tensor:
    torch._check(boxes.dim() == 2 and boxes.shape[1] == 4)
    return counts.new_empty((boxes.shape[0], out_height, out_width), dtype=torch.uint8)


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


@register_fake('mmdet_ext::rle_from_polygons')
def _rle_from_polygons_fake(coords: torch.Tensor, part_lengths: torch.Tensor, height: int,
                            width: int) -> torch.Tensor:
    torch._check(coords.dim() == 1 and part_lengths.dim() == 1)
    return _dynamic_1d(part_lengths, torch.int32)


def polygons_to_masks(coords: torch.Tensor, part_lengths: torch.Tensor,
                      part_counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Rasterise N packed polygon instances at full size: Tensor[N, H, W] uint8.

    Instance i equals ``mask.decode(rle_from_polygons(its parts))``.
    """
    return torch.ops.mmdet_ext.polygons_to_masks(coords, part_lengths, part_counts, height,
                                                 width)


@register_fake('mmdet_ext::polygons_to_masks')
def _polygons_to_masks_fake(coords: torch.Tensor, part_lengths: torch.Tensor,
                            part_counts: torch.Tensor, height: int, width: int) -> torch.Tensor:
    torch._check(coords.dim() == 1 and part_counts.dim() == 1)
    return coords.new_empty((part_counts.shape[0], height, width), dtype=torch.uint8)


def polygons_to_masks_into(coords: torch.Tensor, part_lengths: torch.Tensor,
                           part_counts: torch.Tensor, out: torch.Tensor) -> None:
    """``polygons_to_masks`` written into ``out`` (Tensor[N, H, W] uint8, contiguous), which
    decides where the kernel runs: packed polygons on the host and ``out`` on a GPU rasterise
    there with nothing read back from the device."""
    torch.ops.mmdet_ext.polygons_to_masks_into(coords, part_lengths, part_counts, out)


@register_fake('mmdet_ext::polygons_to_masks_into')
def _polygons_to_masks_into_fake(coords: torch.Tensor, part_lengths: torch.Tensor,
                                 part_counts: torch.Tensor, out: torch.Tensor) -> None:
    torch._check(coords.dim() == 1 and part_counts.dim() == 1 and out.dim() == 3)


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


@register_fake('mmdet_ext::polygons_crop_and_resize')
def _polygons_crop_and_resize_fake(coords: torch.Tensor, part_lengths: torch.Tensor,
                                   part_counts: torch.Tensor, boxes: torch.Tensor,
                                   inds: torch.Tensor, out_height: int,
                                   out_width: int) -> torch.Tensor:
    torch._check(boxes.dim() == 2 and boxes.shape[1] == 4)
    return coords.new_empty((boxes.shape[0], out_height, out_width), dtype=torch.uint8)


def paste_masks_to_rle(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int,
                       threshold: float, skip_empty: bool = True) -> tuple[torch.Tensor,
                                                                             torch.Tensor]:
    """mmdet's test-time instance masks as packed COCO RLEs, never made at full size.

    Mask i's runs equal pycocotools' ``mask.encode`` of mmdet 3.3's full-size mask: what
    ``FCNMaskHead._predict_by_feat_single`` makes of it (``_do_paste_mask`` of ``masks[i]`` into
    ``boxes[i]`` on a height x width image, then ``>= threshold``) and ``encode_mask_results``
    encodes. Only the pixels the box samples are computed, column by column, so the work and
    memory follow the boxes, not the image. ``rle_decode_batch`` gives the masks back.

    ``skip_empty``: True reproduces mmdet's CPU path (each box pasted alone into its own box
    widened by a pixel, the pixels beyond left 0), False its GPU path (every pixel of the image
    sampled). Their thresholded masks differ (tests/test_predicted_masks.py shows both): for
    boxes of zero width or height at any threshold (mmdet zeroes the infinite grid values, which
    then sample the mask's middle across the whole image on the GPU path, across two pixels on
    the CPU path), and at a threshold t < 0.5 for boxes wider or taller than 1.5 M / (0.5 - t)
    px (bilinear sampling still reaches the mask's edge cells beyond the CPU path's span). At
    mmdet's 0.5 only the first happens. Where mmdet's CPU path raises (a box more than a pixel
    outside the image, or one with x2 < x1 by more than about two pixels), the mask is empty.

    The arithmetic is that of torch's x86-64 AVX2/AVX512 ``grid_sample`` (float32, with its
    fused multiply-adds; csrc/masks/paste_mask.h), bit for bit; torch's scalar CPU kernel and
    its CUDA kernel may round a value near the threshold differently. The CUDA kernel of this
    op computes the same bits as its CPU kernel.

    Args:
        masks (Tensor[N, M_h, M_w] float32): mask probabilities, the sigmoid already applied as
            ``_predict_by_feat_single`` does (the op does not take logits: matching torch's
            vectorised sigmoid bit for bit would mean reproducing its exp), with the class's
            channel picked.
        boxes (Tensor[N, 4] float32): x1, y1, x2, y2 in output pixels (after ``rescale``), finite.
        height, width: the output image size (``ori_shape`` when rescaling).
        threshold: mmdet's ``mask_thr_binary`` (> 0; compared in float32 as mmdet does).
        skip_empty: see above.

    Returns:
        counts (Tensor[sum K_i] int32), run_counts (Tensor[N] int64), on the masks' device.
    """
    return torch.ops.mmdet_ext.paste_masks_to_rle(masks, boxes, height, width, threshold,
                                                  skip_empty)


@register_fake('mmdet_ext::paste_masks_to_rle')
def _paste_masks_to_rle_fake(masks: torch.Tensor, boxes: torch.Tensor, height: int, width: int,
                             threshold: float,
                             skip_empty: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    torch._check(masks.dim() == 3 and boxes.dim() == 2)
    return _dynamic_1d(masks, torch.int32), masks.new_empty((masks.shape[0], ),
                                                            dtype=torch.int64)
