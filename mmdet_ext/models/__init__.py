"""Model-side pieces (registered in mmdet's MODELS on import)."""
from .data_preprocessor import FastDetDataPreprocessor
from .rle_mask_head import RLEFCNMaskHead

__all__ = ['FastDetDataPreprocessor', 'RLEFCNMaskHead']
