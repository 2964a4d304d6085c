"""The registries mmdet_ext registers into.

Our classes go into mmdet's registries (configs run with ``default_scope='mmdet'``), whose parents
are mmengine's, so they are found from mmdet configs and from plain mmengine ones alike. Collate
functions go into mmengine's FUNCTIONS, where ``Runner.build_dataloader`` looks them up (mmdet
has no FUNCTIONS registry of its own).
"""
from mmdet.registry import DATASETS, HOOKS, MODELS, TRANSFORMS
from mmengine.registry import FUNCTIONS

__all__ = ['DATASETS', 'FUNCTIONS', 'HOOKS', 'MODELS', 'TRANSFORMS']
