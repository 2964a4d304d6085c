"""Mask R-CNN mask targets of one batch: mmdet's BitmapMasks and PolygonMasks vs LazyInstanceMasks.

Why: with mmdet's default ``LoadAnnotations(poly2mask=True)`` every instance is a full-image
bitmap, and on a GPU ``BitmapMasks.crop_and_resize`` copies the assigned bitmaps there and turns
them into floats for ``roi_align``: a [num_rois, H, W] float32 temporary per image (521 MiB at
128 ROIs and 1333x800), the GPU memory growth users report. ``poly2mask=False`` avoids it but
rasterises on the CPU. ``LazyInstanceMasks`` keeps polygons and rasterises only the crops.

Timed per image as mmdet's ``mask_target_single`` does it: the positive proposals and their
assigned instance indices start on the device, go to numpy, and the targets end as a float32
[num_rois, 28, 28] tensor on the device::

    masks.crop_and_resize(bboxes, (28, 28), inds, device=device).to_tensor(torch.float32, device)

Every variant's targets are compared pixel by pixel with those of mmdet's two paths on the CPU:
BitmapMasks (full-image raster, then roi_align) and PolygonMasks (polygons cropped and scaled,
then rasterised at 28x28) do not agree with each other exactly.
"""
import functools

import numpy as np
import torch
from mmdet.structures.mask import BitmapMasks, PolygonMasks
from pycocotools import mask as mask_utils

from coco_like import AnnotatedImage, coco_like_images, positive_rois
from mmdet_ext.ops import pack_polygons, polygons_crop_and_resize
from mmdet_ext.structures import LazyInstanceMasks
from report import NO_CUDA, Row, mib, skipped
from timing import median_seconds, peak_bytes

MEASUREMENT = 'b. mask targets'
OUT_SHAPE = (28, 28)


def bitmap_masks(image: AnnotatedImage) -> BitmapMasks:
    """What ``LoadAnnotations(poly2mask=True)`` hands the model: full-image uint8 bitmaps."""
    h, w = image.height, image.width
    bitmaps = [mask_utils.decode(mask_utils.merge(mask_utils.frPyObjects(
        [part.tolist() for part in parts], h, w))) for parts in image.polygons]
    return BitmapMasks(np.stack(bitmaps), h, w)


def polygon_masks(image: AnnotatedImage) -> PolygonMasks:
    """What ``LoadAnnotations(poly2mask=False)`` hands the model."""
    return PolygonMasks(image.polygons, image.height, image.width)


def lazy_masks(image: AnnotatedImage) -> LazyInstanceMasks:
    """What ``LoadLazyAnnotations`` hands the model for polygon annotations."""
    return LazyInstanceMasks(image.polygons, image.height, image.width)


BITMAP = 'BitmapMasks (poly2mask=True, default)'
POLYGON = 'PolygonMasks (poly2mask=False)'
STRUCTURES = {
    BITMAP: bitmap_masks,
    POLYGON: polygon_masks,
    'LazyInstanceMasks': lazy_masks,
}


class Batch:
    """``num_images`` images with ``rois`` positives each; masks of every structure built once."""

    def __init__(self, num_images: int, rois: int, height: int, width: int,
                 devices: list[str]) -> None:
        images = coco_like_images(num_images, height, width)
        self.masks = {name: [build(image) for image in images]
                      for name, build in STRUCTURES.items()}
        # As the mask head has them: proposals and assigned indices on the training device.
        rois_np = [positive_rois(image, rois, seed=k) for k, image in enumerate(images)]
        self.rois = {d: [(torch.from_numpy(b).to(d), torch.from_numpy(i).to(d))
                         for b, i in rois_np] for d in devices}
        self.packed = {d: [[t.to(d) for t in pack_polygons(image.polygons)] for image in images]
                       for d in devices}

    def kernel_targets(self, device: str) -> list[torch.Tensor]:
        """The same targets from ``polygons_crop_and_resize`` alone, its inputs already on
        ``device`` (the packed polygons made once, as a device-resident store would hold
        them): what the native kernel costs there, without ``crop_and_resize``'s ndarray."""
        return [polygons_crop_and_resize(*packed, boxes, inds, OUT_SHAPE).to(torch.float32)
                for packed, (boxes, inds) in zip(self.packed[device], self.rois[device])]

    def targets(self, structure: str, device: str) -> list[torch.Tensor]:
        """The mask head's targets for every image, as ``mask_target`` computes them."""
        out = []
        for masks, (boxes, inds) in zip(self.masks[structure], self.rois[device]):
            boxes_np, inds_np = boxes.cpu().numpy(), inds.cpu().numpy()
            out.append(masks.crop_and_resize(boxes_np, OUT_SHAPE, inds_np, device=device)
                       .to_tensor(torch.float32, device))
        return out


def _agreement(targets: list[torch.Tensor], references: dict[str, list[torch.Tensor]]) -> str:
    """Pixel agreement with each reference: mmdet's two paths rasterise differently."""
    parts = []
    for name, reference in references.items():
        differ = sum(int((t.cpu() != r).sum()) for t, r in zip(targets, reference))
        total = sum(r.numel() for r in reference)
        parts.append(f'= {name}' if differ == 0 else
                     f'{100 * differ / total:.2f}% of pixels differ from {name}')
    return ', '.join(parts)


def measure(num_images: int = 8, rois: int = 128, height: int = 800, width: int = 1333,
            repeat: int = 7, warmup: int = 2, mmcv_cuda_ops: bool = False) -> list[Row]:
    """One row per structure and device; CUDA rows say why when they cannot run."""
    has_cuda = torch.cuda.is_available()
    batch = Batch(num_images, rois, height, width, ['cpu', 'cuda'] if has_cuda else ['cpu'])
    references = {f'{structure.split()[0]} (CPU)': batch.targets(structure, 'cpu')
                  for structure in (BITMAP, POLYGON)}
    size = f'{num_images}x{rois} ROIs, {width}x{height}'
    rows = []
    for structure in STRUCTURES:
        for device in ('cuda', 'cpu'):
            variant = f'{structure}, device={device}'
            if device == 'cuda' and not has_cuda:
                rows.append(Row(MEASUREMENT, variant, notes=NO_CUDA))
                continue
            if device == 'cuda' and structure == BITMAP and not mmcv_cuda_ops:
                rows.append(skipped(MEASUREMENT, variant, 'mmcv ops not built with CUDA '
                                    '(its roi_align runs this path on the GPU)'))
                continue
            fn = functools.partial(batch.targets, structure, device)
            seconds = median_seconds(fn, device, repeat, warmup)
            outputs = fn()
            wrong_device = [t.device.type for t in outputs if t.device.type != device]
            notes = _agreement(outputs, references) + (
                f'; targets returned on {wrong_device[0]}' if wrong_device else '')
            memory = mib(peak_bytes(fn)) if device == 'cuda' else '-'
            rows.append(Row(MEASUREMENT, variant, f'{seconds / num_images * 1e3:,.3f} ms/img',
                            memory, f'{size}; {notes}'))
    for device in ('cuda', 'cpu'):
        variant = f'polygons_crop_and_resize kernel alone, device={device}'
        if device == 'cuda' and not has_cuda:
            rows.append(Row(MEASUREMENT, variant, notes=NO_CUDA))
            continue
        fn = functools.partial(batch.kernel_targets, device)
        seconds = median_seconds(fn, device, repeat, warmup)
        memory = mib(peak_bytes(fn)) if device == 'cuda' else '-'
        rows.append(Row(MEASUREMENT, variant, f'{seconds / num_images * 1e3:,.3f} ms/img',
                        memory, f'{size}; inputs already on the device; '
                                f'{_agreement(fn(), references)}'))
    return rows
