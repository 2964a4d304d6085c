"""Which family installed mmengine, mmcv and mmdet, and whether mmdet_ext can run with them.

Two families install the same import names under different distribution names: OpenMMLab's
(``mmengine``, ``mmcv``, ``mmdet``) and the maintained fork's (``onedl-mmengine``, ``onedl-mmcv``,
``onedl-mmdetection``). Neither is a hard requirement of the wheel (pip would replace the other
family's packages); each is an extra, ``mmdet_ext[openmmlab]`` or ``mmdet_ext[onedl]``, and
``import mmdet_ext`` calls :func:`require_framework` before anything imports them, so a missing or
out-of-range package is named in one message rather than failing somewhere inside mmdet.

This is the part of the compat seam (``_compat.py``) that has to run before the frameworks are
imported: it reads package metadata only, imports none of them, and needs nothing beyond the
standard library and ``packaging``. ``setup.py`` reads :data:`FAMILIES` for the extras, so the
extras and the check cannot disagree.
"""
import functools
import importlib.metadata
import importlib.util
import os
import warnings
from typing import NamedTuple, Optional

# import name -> (distribution name, version range) for each family. openmmlab: the ranges mmdet
# 3.3 itself accepts (its mminstall extra); onedl: the fork's releases the plugin was checked with.
FAMILIES: dict[str, dict[str, tuple[str, str]]] = {
    'openmmlab': {'mmengine': ('mmengine', '>=0.7.1,<1.0.0'),
                  'mmcv': ('mmcv', '>=2.0.0rc4,<2.2.0'),
                  'mmdet': ('mmdet', '>=3.3.0,<3.4')},
    'onedl': {'mmengine': ('onedl-mmengine', '>=0.10.12,<0.11'),
              'mmcv': ('onedl-mmcv', '>=2.3.6,<2.4'),
              'mmdet': ('onedl-mmdetection', '>=3.5.1,<3.6')},
}
IMPORT_NAMES = ('mmengine', 'mmcv', 'mmdet')
# Set to 1, a failed check warns instead of refusing the import (trying a release not yet listed).
SKIP_CHECK_VARIABLE = 'MMDET_EXT_SKIP_FRAMEWORK_CHECK'


class Provider(NamedTuple):
    """The installed distribution behind an import name; ``family`` None when it is in neither."""
    distribution: str
    version: str
    family: Optional[str]


def _family_of(distribution: str) -> Optional[str]:
    canonical = distribution.lower().replace('_', '-')
    return next((family for family, packages in FAMILIES.items()
                 if any(dist == canonical for dist, _ in packages.values())), None)


def _metadata_version(distribution: str) -> Optional[str]:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def find_providers(import_name: str) -> list[Provider]:
    """Every installed distribution that installs the top-level package ``import_name``.

    The families' distribution names are looked up directly (cheap); only when none is installed
    is ``importlib.metadata.packages_distributions()`` asked (a scan of every installed
    distribution), to name some other provider (``mmcv-lite``, say). Empty when no distribution
    provides it: not installed, or a source tree on ``sys.path``.
    """
    found = []
    for packages in FAMILIES.values():
        distribution = packages[import_name][0]
        version = _metadata_version(distribution)
        if version is not None:
            found.append(Provider(distribution, version, _family_of(distribution)))
    if found:
        return found
    for distribution in importlib.metadata.packages_distributions().get(import_name, []):
        version = _metadata_version(distribution)
        if version is not None:
            found.append(Provider(distribution, version, _family_of(distribution)))
    return found


def _install_hint(import_name: str) -> str:
    return ' or '.join(f"pip install 'mmdet_ext[{family}]' ({dist}{spec})"
                       for family, packages in FAMILIES.items()
                       for dist, spec in [packages[import_name]])


def problems(providers: dict[str, list[Provider]], importable: dict[str, bool]) -> list[str]:
    """What stops mmdet_ext from running with these providers, one sentence each ([]: none).

    ``providers``: :func:`find_providers` of each import name; ``importable``: whether Python
    finds the package at all (a source tree on ``sys.path`` has no distribution and is accepted).
    """
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    found = []
    for name in IMPORT_NAMES:
        listed = providers.get(name, [])
        if not listed:
            if not importable.get(name, False):
                found.append(f'{name} is not installed: {_install_hint(name)}')
            continue
        if len(listed) > 1:
            both = ' and '.join(f'{p.distribution} {p.version}' for p in listed)
            found.append(f'{name} is installed by both {both}, whose files overwrite each other: '
                         f'pip uninstall {" ".join(p.distribution for p in listed)}, then '
                         f'install one family: {_install_hint(name)}')
            continue
        provider = listed[0]
        if provider.family is None:
            found.append(f'{name} comes from {provider.distribution} {provider.version}, which '
                         f'mmdet_ext does not support: {_install_hint(name)}')
            continue
        spec = FAMILIES[provider.family][name][1]
        try:
            in_range = Version(provider.version) in SpecifierSet(spec, prereleases=True)
        except InvalidVersion:
            in_range = False
        if not in_range:
            found.append(f'{provider.distribution} {provider.version} is outside the range '
                         f'mmdet_ext supports ({provider.distribution}{spec}): '
                         f"pip install '{provider.distribution}{spec}'")
    return found


@functools.cache
def installed_providers() -> dict[str, tuple[Provider, ...]]:
    """:func:`find_providers` of mmengine, mmcv and mmdet, read once per process."""
    return {name: tuple(find_providers(name)) for name in IMPORT_NAMES}


def installed_family(import_name: str) -> Optional[str]:
    """'openmmlab' or 'onedl': the family whose distribution installed ``import_name`` (None:
    no distribution, an unsupported one, or both families at once)."""
    listed = installed_providers()[import_name]
    return listed[0].family if len(listed) == 1 else None


def require_framework() -> None:
    """Raise ImportError naming every framework package that is missing or out of range.

    With ``MMDET_EXT_SKIP_FRAMEWORK_CHECK=1`` the same message is a warning instead.
    """
    found = problems({name: list(listed) for name, listed in installed_providers().items()},
                     {name: importlib.util.find_spec(name) is not None for name in IMPORT_NAMES})
    if not found:
        return
    message = ('mmdet_ext runs on mmengine, mmcv and mmdet from OpenMMLab '
               "(pip install 'mmdet_ext[openmmlab]') or from the onedl fork "
               "(pip install 'mmdet_ext[onedl]'):\n  " + '\n  '.join(found))
    if os.environ.get(SKIP_CHECK_VARIABLE) == '1':
        warnings.warn(f'{message}\n({SKIP_CHECK_VARIABLE}=1: importing all the same)',
                      stacklevel=2)
        return
    text = f'{message}\n(Set {SKIP_CHECK_VARIABLE}=1 to import all the same.)'
    missing = [name for name in IMPORT_NAMES if not installed_providers()[name]
               and importlib.util.find_spec(name) is None]
    if missing and len(missing) == len(found):
        # Only absent packages: a ModuleNotFoundError naming the first, so that mmdet_ext.ops,
        # which needs none of them, still imports (mmdet_ext/__init__.py).
        raise ModuleNotFoundError(text, name=missing[0])
    raise ImportError(text)
