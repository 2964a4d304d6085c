"""Predicted masks as COCO RLE dicts, encoded where they are.

mmdet's metrics copy each image's boolean masks to the host (``pred['masks'].detach().cpu()
.numpy()``: 100 detections at 1333x800 are 104 MiB) and encode them one by one with pycocotools.
``rle_encode_batch`` encodes the whole tensor on its own device (on a GPU only the RLE counts come
back) into the same dicts, bit for bit.
"""
from typing import Optional

import torch

from ..ops import rle_encode_batch, to_coco_rles


def predicted_masks_as_rles(pred) -> Optional[list]:
    """``pred['masks']`` as the list of RLE dicts ``encode_mask_results`` makes of it.

    Boolean mask tensors are encoded; a list (masks a head such as ``RLEFCNMaskHead`` already
    encoded) is returned as it is. ``None`` when there are no masks or they have no exact RLE form
    here (soft uint8 masks): the caller leaves those to mmdet.
    """
    masks = pred['masks'] if 'masks' in pred else None
    if isinstance(masks, list):
        return masks
    if isinstance(masks, torch.Tensor) and masks.dtype == torch.bool:
        height, width = masks.shape[-2:]
        return to_coco_rles(*rle_encode_batch(masks.detach().contiguous()), height, width)
    return None


def without_masks(pred) -> dict:
    """A shallow copy of the predictions (an ``InstanceData`` or a dict) without ``masks``."""
    return {key: value for key, value in pred.items() if key != 'masks'}
