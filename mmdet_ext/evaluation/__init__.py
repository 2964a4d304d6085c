"""Evaluation pieces (registered in mmdet's METRICS on import)."""
from .rle_coco_metric import RLECocoMetric

__all__ = ['RLECocoMetric']
