"""Evaluation pieces (registered in mmdet's METRICS on import)."""
from .rle_coco_metric import RLECocoMetric
from .rle_lvis_metric import RLELVISMetric

__all__ = ['RLECocoMetric', 'RLELVISMetric']
