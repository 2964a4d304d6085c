"""The registries mmdet_ext registers into, and those of its config scope.

Our classes go into mmdet's registries (configs run with ``default_scope='mmdet'``), whose parents
are mmengine's, so they are found from mmdet configs and from plain mmengine ones alike. Collate
functions go into mmengine's FUNCTIONS, where ``Runner.build_dataloader`` looks them up (mmdet
has no FUNCTIONS registry of its own).

A dict read from an ``mmdet_ext::`` base config carries ``_scope_='mmdet_ext'``; mmengine then
imports this module and builds from the registry of that scope. Each of mmdet's registries gets
an empty ``mmdet_ext`` child, which finds everything through its parent: mmdet's types, ours
(registered into mmdet's), mmengine's.
"""
from mmdet import registry as mmdet_registry
from mmdet.registry import DATA_SAMPLERS, DATASETS, HOOKS, METRICS, MODELS, TRANSFORMS
from mmengine.registry import FUNCTIONS, Registry

from .config_scope import SCOPE

SCOPE_REGISTRIES = {
    name: Registry(parent.name, parent=parent, scope=SCOPE, locations=['mmdet_ext'])
    for name, parent in vars(mmdet_registry).items() if isinstance(parent, Registry)
}

__all__ = ['DATA_SAMPLERS', 'DATASETS', 'FUNCTIONS', 'HOOKS', 'METRICS', 'MODELS',
           'SCOPE_REGISTRIES', 'TRANSFORMS']
