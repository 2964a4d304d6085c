"""Datasets backed by the memory-mapped annotation store (registered in mmdet's DATASETS), and
the batch sampler that reads their images' sizes in bulk (in mmdet's DATA_SAMPLERS)."""
from .annotation_store import AnnotationStore, StoreError, open_store
from .aspect_ratio_sampler import FastAspectRatioBatchSampler
from .bad_samples import BadSampleError, BadSampleHandler, TooManyBadSamplesError
from .lazy_coco import LazyCocoDataset
from .lazy_lvis import LazyLVISV1Dataset
from .validation import (DEFAULT_POLICY, AnnotationFileError, DataValidationError,
                         DuplicateIdError, MissingImagesError, Problem, validate_coco)

__all__ = ['DEFAULT_POLICY', 'AnnotationFileError', 'AnnotationStore', 'BadSampleError',
           'BadSampleHandler', 'DataValidationError', 'DuplicateIdError',
           'FastAspectRatioBatchSampler', 'LazyCocoDataset', 'LazyLVISV1Dataset',
           'MissingImagesError', 'Problem', 'StoreError', 'TooManyBadSamplesError',
           'open_store', 'validate_coco']
