"""``CocoMetric`` without full-size masks on the host.

mmdet's ``CocoMetric.process`` copies each image's predicted masks to the host
(``pred['masks'].detach().cpu().numpy()``: 100 detections at 1333x800 are 104 MiB) and encodes
them one by one with pycocotools. ``RLECocoMetric`` encodes boolean mask tensors with
``rle_encode_batch`` where they are (on a GPU only the RLE counts come back) and takes RLE
predictions (``RLEFCNMaskHead``) as they are; the results, the gathering across ranks (RLE bytes
only) and every reported number are ``CocoMetric``'s.
"""
from typing import Sequence

import torch
from mmdet.evaluation.metrics import CocoMetric

from ..ops import rle_encode_batch, to_coco_rles
from ..registry import METRICS


@METRICS.register_module()
class RLECocoMetric(CocoMetric):
    """``CocoMetric`` (same arguments and results) that encodes predicted masks natively.

    Boolean mask tensors become the RLE dicts ``encode_mask_results`` makes (bit for bit, see
    ``rle_encode_batch``); other masks (soft uint8 masks, already-encoded RLEs) go to
    ``CocoMetric`` unchanged.
    """

    def process(self, data_batch: dict, data_samples: Sequence[dict]) -> None:
        for data_sample in data_samples:
            pred = data_sample['pred_instances']
            masks = pred['masks'] if 'masks' in pred else None
            if isinstance(masks, torch.Tensor) and masks.dtype == torch.bool:
                height, width = masks.shape[-2:]
                encoded = to_coco_rles(*rle_encode_batch(masks.detach().contiguous()), height,
                                       width)
                data_sample['pred_instances'] = {**dict(pred.items()), 'masks': encoded}
        super().process(data_batch, data_samples)
