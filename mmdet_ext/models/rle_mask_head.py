"""Mask R-CNN's test-time masks as COCO RLEs, never pasted at full size.

mmdet's ``FCNMaskHead`` pastes every detection's M x M probabilities into a full-image mask
(100 detections at 1333x800: 104 MiB per image), which ``CocoMetric`` then copies to the host and
encodes mask by mask with pycocotools. ``RLEFCNMaskHead`` gives the same masks as the RLE dicts
``encode_mask_results`` would have made of them (``paste_masks_to_rle``: only the pixels each
box samples are computed), so the metric receives them ready to use.
"""
import numpy as np
import torch
from mmdet.models.roi_heads.mask_heads import FCNMaskHead

from ..ops import paste_masks_to_rle, to_coco_rles
from ..registry import MODELS


@MODELS.register_module()
class RLEFCNMaskHead(FCNMaskHead):
    """``FCNMaskHead`` whose predictions carry ``masks`` as a list of COCO RLE dicts
    (``{'size': [h, w], 'counts': bytes}``), equal to ``encode_mask_results`` of mmdet's masks.

    Training is unchanged (the class only overrides the test-time paste). mmdet's CPU path
    (``skip_empty=True``) is reproduced on the CPU and its GPU path on a GPU, bit for bit on x86-64
    CPUs; a ``mask_thr_binary`` <= 0 (all-true or soft uint8 masks, for debugging) keeps mmdet's
    full-size tensors. Consumers of ``pred_instances.masks`` must accept RLEs: mmdet's
    ``CocoMetric``, ``RLECocoMetric`` and ``RLELVISMetric`` do (mmdet's
    ``LVISMetric`` does not); drawing predicted masks needs mmdet's own head.
    """

    def _predict_by_feat_single(self, mask_preds: torch.Tensor, bboxes: torch.Tensor,
                                labels: torch.Tensor, img_meta: dict, rcnn_test_cfg,
                                rescale: bool = False, activate_map: bool = False):
        threshold = rcnn_test_cfg.mask_thr_binary
        if threshold <= 0:
            return super()._predict_by_feat_single(mask_preds, bboxes, labels, img_meta,
                                                   rcnn_test_cfg, rescale, activate_map)
        # As mmdet: probabilities (augmented tests pass them already activated), boxes in the
        # original image when rescaling (in place: the results' boxes move with them), else
        # the size of the resized image.
        probabilities = bboxes.new_tensor(mask_preds) if activate_map else mask_preds.sigmoid()
        scale = bboxes.new_tensor(img_meta['scale_factor']).repeat((1, 2))
        height, width = img_meta['ori_shape'][:2]
        if rescale:
            bboxes /= scale
        else:
            height = int(np.round(height * scale[0, 1].item()))
            width = int(np.round(width * scale[0, 0].item()))
        rows = torch.arange(len(probabilities), device=probabilities.device)
        channels = torch.zeros_like(labels) if self.class_agnostic else labels
        counts, run_counts = paste_masks_to_rle(
            probabilities[rows, channels].float().contiguous(), bboxes.float().contiguous(),
            height, width, float(threshold), skip_empty=bboxes.device.type == 'cpu')
        return to_coco_rles(counts, run_counts, height, width)
