"""The ``mmdet_ext::`` config scope: ``_base_ = 'mmdet_ext::_base_/mmdet_ext_runtime.py'``.

mmengine (read from 0.10.7, ``Config._get_cfg_path``) resolves ``pkg::path`` base configs only for
the names in ``mmengine.config.utils.MODULE2PACKAGE``, as ``<package dir>/.mim/configs/<path>``,
where the package dir is found from the name mapped to. ``import mmdet_ext`` adds ours, so any
config read after it (``tools/train.py`` imports the plugin before reading its config) can inherit
from the configs shipped inside the package, whatever the working directory.

Base configs read through the scope get ``_scope_='mmdet_ext'`` on their dicts; the registries of
that scope (mmdet_ext/registry.py) resolve them.
"""
from mmengine.config.utils import MODULE2PACKAGE

SCOPE = 'mmdet_ext'
# Why this module's name and not the distribution's: mmengine looks a distribution up by name and
# takes its install location, which is site-packages even for an editable install whose code lives
# in a checkout; a name with no distribution falls through to importlib's spec of the module,
# whose folder is the mmdet_ext package actually imported (wheel, editable install or checkout).
LOOKUP_MODULE = f'{SCOPE}.config_scope'


def register_config_scope() -> None:
    """Let mmengine resolve ``mmdet_ext::`` base config paths (idempotent)."""
    MODULE2PACKAGE.setdefault(SCOPE, LOOKUP_MODULE)
