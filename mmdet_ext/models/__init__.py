"""Model-side pieces (registered in mmdet's MODELS on import)."""
from .data_preprocessor import FastDetDataPreprocessor

__all__ = ['FastDetDataPreprocessor']
