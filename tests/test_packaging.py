"""The package as a user installs it: the wheel built from the sdist, in a clean virtual env.

``python -m build --no-isolation`` makes the sdist and builds the wheel from it (so the sdist is
complete); the wheel goes into a fresh venv, and an import and a short smoke test run from a
directory outside the checkout. The venv sees the system's site-packages for the heavy stack
(torch, mmcv with its compiled ops, mmdet: rebuilding mmcv alone takes 10+ minutes), but mmdet_ext
itself must come from the wheel, which the smoke test checks. Also: the refusal of a torch the
extension was not built against, and ``python -m mmdet_ext.info``.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path
from site import getsitepackages

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import mmdet_ext
from mmdet_ext._framework import FAMILIES, Provider, problems
from mmdet_ext._native import BUILD_CONFIG

REPO_ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict:
    """The environment without the checkout on the path."""
    return {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'PYTHONHOME')}


@pytest.fixture(scope='module')
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """sdist + wheel from ``python -m build --no-isolation`` of the checkout."""
    out = tmp_path_factory.mktemp('dist')
    result = subprocess.run([sys.executable, '-m', 'build', '--no-isolation', '--outdir',
                             str(out)], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    sdists, wheels = list(out.glob('*.tar.gz')), list(out.glob('*.whl'))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return dict(sdist=sdists[0], wheel=wheels[0], log=result.stdout)


def test_wheel_declares_its_dependencies(built):
    with zipfile.ZipFile(built['wheel']) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith('.dist-info/METADATA'))
        requires = [line.split(':', 1)[1].strip() for line in
                    wheel.read(metadata).decode().splitlines() if line.startswith('Requires-Dist')]
    hard = [r for r in requires if 'extra ==' not in r]
    names = {r.split('<')[0].split('>')[0].split('=')[0].strip() for r in hard}
    assert {'torch', 'numpy', 'pycocotools', 'psutil', 'packaging'} <= names
    # Neither family's framework, nor a cv2 distribution: pip would replace the user's.
    assert not names & {'mmdet', 'mmcv', 'mmengine', 'onedl-mmdetection', 'onedl-mmcv',
                        'onedl-mmengine', 'opencv-python'}
    major, minor = torch.__version__.split('.')[:2]
    assert f'torch<{major}.{int(minor) + 1},>={major}.{minor}' in requires
    extras = {}
    for requirement in map(Requirement, requires):
        for family in FAMILIES:
            if requirement.marker is not None and requirement.marker.evaluate({'extra': family}):
                extras.setdefault(family, set()).add(f'{requirement.name}{requirement.specifier}')
    expected = {family: {f'{dist}{SpecifierSet(spec)}' for dist, spec in packages.values()}
                for family, packages in FAMILIES.items()}
    expected['openmmlab'].add('setuptools<82')  # OpenMMLab's mmengine imports pkg_resources
    assert extras == expected


def test_wheel_carries_configs_and_build_record_but_no_debug_info(built, tmp_path):
    with zipfile.ZipFile(built['wheel']) as wheel:
        names = wheel.namelist()
        wheel.extractall(tmp_path)
    assert 'mmdet_ext/.mim/configs/_base_/mmdet_ext_runtime.py' in names
    assert 'mmdet_ext/.mim/model-index.yml' in names
    assert 'mmdet_ext/_build_config.json' in names
    record = json.loads((tmp_path / 'mmdet_ext/_build_config.json').read_text())
    assert record['torch_version'] == torch.__version__
    extension = next((tmp_path / 'mmdet_ext').glob('_C*.so'))
    sections = subprocess.run(['readelf', '-S', '-W', str(extension)], capture_output=True,
                              text=True, check=True).stdout
    assert '.debug_info' not in sections


SMOKE = r'''
import importlib.metadata, json, sys
from pathlib import Path
from packaging.requirements import Requirement
import torch
import mmdet_ext
from mmdet_ext import _C
from mmdet_ext._framework import installed_family
from mmdet_ext.info import collect_env
from mmengine.config import Config
from mmdet.registry import DATASETS
from mmengine.registry import DefaultScope

# The hard requirements and the extra of the family installed here.
unmet = [str(r) for r in map(Requirement, importlib.metadata.requires('mmdet_ext'))
         if (r.marker is None or r.marker.evaluate({'extra': installed_family('mmdet')}))
         and not r.specifier.contains(importlib.metadata.version(r.name), prereleases=True)]
mask = torch.zeros(4, 5, dtype=torch.uint8)
mask[1:3, 2:4] = 1
counts = torch.ops.mmdet_ext.rle_encode(mask)
DefaultScope.get_instance('smoke', scope_name='mmdet')
cfg = Config.fromfile('config.py')
dataset = DATASETS.build(cfg.train_dataloader.dataset)
sample = dataset[0]['data_samples']
print(json.dumps({
    'package': mmdet_ext.__file__, 'extension': _C.__file__, 'prefix': sys.prefix,
    'distribution': str(importlib.metadata.distribution('mmdet_ext').locate_file('')),
    'unmet': unmet, 'env': collect_env(),
    'rle_roundtrip': torch.equal(torch.ops.mmdet_ext.rle_decode(counts, 4, 5), mask),
    'dataset': type(dataset).__name__, 'masks': type(sample.gt_instances.masks).__name__,
}))
'''


def test_wheel_in_a_clean_venv_imports_and_runs(built, tmp_path, toy_coco_root):
    env_dir = tmp_path / 'venv'
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / 'bin' / 'python'
    # The new venv sees the running environment's packages, and only those: the base
    # interpreter's (system_site_packages) would add a second framework family when the suite
    # runs in a venv of its own (tools/compat/). addsitedir also runs their .pth files, as
    # system_site_packages would.
    site_dir = env_dir / 'lib' / f'python{sys.version_info[0]}.{sys.version_info[1]}'
    (site_dir / 'site-packages' / 'running_environment.pth').write_text(
        f'import site; list(map(site.addsitedir, {getsitepackages()!r}))\n')
    install = subprocess.run(
        [str(python), '-m', 'pip', 'install', '--no-index', '--no-deps', '--quiet',
         '--disable-pip-version-check', str(built['wheel'])],
        env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    work = tmp_path / 'elsewhere'
    work.mkdir()
    (work / 'config.py').write_text(f'''_base_ = 'mmdet_ext::_base_/datasets/toy_coco_instance.py'
train_dataloader = dict(dataset=dict(data_root='{toy_coco_root}/'))
''')
    # -c, not a script in the checkout; the cwd holds only the user's config.
    smoke = subprocess.run([str(python), '-c', SMOKE], cwd=work, env=_clean_env(),
                           capture_output=True, text=True, timeout=600)
    assert smoke.returncode == 0, smoke.stderr[-5000:]
    result = json.loads(smoke.stdout.strip().splitlines()[-1])
    site = Path(result['prefix'])
    assert site == env_dir
    # mmdet_ext, its extension and its metadata all from the wheel, none from the checkout.
    for key in ('package', 'extension', 'distribution'):
        assert Path(result[key]).is_relative_to(env_dir), (key, result[key])
    assert result['unmet'] == []
    assert result['rle_roundtrip']
    # mmdet's default poly2mask=True: the lazy masks are a BitmapMasks (docs/compatibility.md).
    assert (result['dataset'], result['masks']) == ('LazyCocoDataset', 'LazyBitmapMasks')
    assert result['env']['torch (built against)'] == torch.__version__

    info = subprocess.run([str(python), '-m', 'mmdet_ext.info'], cwd=work, env=_clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert info.returncode == 0, info.stderr[-3000:]
    assert str(env_dir) in info.stdout and 'torch (running)' in info.stdout


def _package_copy_with_record(tmp_path: Path, record: dict) -> Path:
    """mmdet_ext and this checkout's extension, with setup.py's build record replaced."""
    package = tmp_path / 'copy'
    shutil.copytree(Path(mmdet_ext.__file__).parent, package / 'mmdet_ext',
                    ignore=shutil.ignore_patterns('__pycache__', '.mim', BUILD_CONFIG.name))
    (package / 'mmdet_ext' / BUILD_CONFIG.name).write_text(json.dumps(record))
    return package


@pytest.mark.parametrize('record, message', [
    (dict(torch_version='2.99.0', torch_cuda=None, with_cuda=False),
     f'compiled against torch 2.99.0, but torch {torch.__version__} is running'),
    (dict(torch_version=torch.__version__, torch_cuda='12.8', with_cuda=True),
     'compiled with CUDA 12.8 kernels, but torch'),
], ids=['other_torch_minor', 'cuda_build_on_cpu_torch'])
def test_import_refuses_a_torch_the_extension_was_not_built_for(tmp_path, record, message):
    if record['with_cuda'] and torch.version.cuda is not None:
        pytest.skip('this torch has CUDA')
    package = _package_copy_with_record(tmp_path, record)
    probe = subprocess.run([sys.executable, '-c', 'import mmdet_ext'], cwd=package,
                           env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert probe.returncode != 0
    last_line = probe.stderr.strip().splitlines()[-1]
    assert last_line.startswith('ImportError: mmdet_ext: the extension in ')
    assert message in last_line and 'rebuild it against that torch' in last_line


def test_info_reports_the_running_build():
    result = subprocess.run([sys.executable, '-m', 'mmdet_ext.info'], capture_output=True,
                            text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = _info_lines(result.stdout)
    info = mmdet_ext.build_info()
    assert lines['mmdet_ext'] == f'{mmdet_ext.__version__} ({Path(mmdet_ext.__file__).parent})'
    assert lines['torch (running)'].startswith(torch.__version__)
    if info['opencv_version']:
        assert lines['OpenCV'] == info['opencv_version']
    else:
        assert lines['OpenCV'].startswith('not built')
    assert lines['source hash'] == info['source_hash']
    assert lines['mmdet'].startswith(('3.3', '3.5'))  # and names the distribution behind it


def _info_lines(stdout: str) -> dict:
    """``python -m mmdet_ext.info``'s table, from its first row on: importing mmdet may print
    before it (the onedl fork's mmdet prints ``Could not import OneDL...``)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('mmdet_ext '))
    return dict(re.fullmatch(r'(.+?) {2,}(.*)', line).groups() for line in lines[start:])


# -- which family installed the framework: fast, from metadata only ------------------------------
def _providers(family: str, **versions: str) -> dict:
    return {name: [Provider(FAMILIES[family][name][0], version, family)]
            for name, version in versions.items()}


@pytest.mark.parametrize('family, versions', [
    ('openmmlab', dict(mmengine='0.10.7', mmcv='2.1.0', mmdet='3.3.0')),
    ('onedl', dict(mmengine='0.10.12', mmcv='2.3.6', mmdet='3.5.1')),
])
def test_framework_check_accepts_either_family(family, versions):
    assert problems(_providers(family, **versions), {}) == []


def test_framework_check_names_what_is_missing_out_of_range_or_installed_twice():
    providers = _providers('onedl', mmcv='2.4.0', mmdet='3.5.1')
    providers['mmdet'].append(Provider('mmdet', '3.3.0', 'openmmlab'))
    found = problems(providers, {'mmengine': False})
    assert len(found) == 3
    assert found[0].startswith('mmengine is not installed: ')
    assert "'mmdet_ext[openmmlab]' (mmengine>=0.7.1,<1.0.0)" in found[0]
    assert "'mmdet_ext[onedl]' (onedl-mmengine>=0.10.12,<0.11)" in found[0]
    assert found[1].startswith('onedl-mmcv 2.4.0 is outside the range mmdet_ext supports '
                               '(onedl-mmcv>=2.3.6,<2.4)')
    assert found[2].startswith('mmdet is installed by both onedl-mmdetection 3.5.1 and mmdet '
                               '3.3.0')
    unsupported = problems({'mmcv': [Provider('mmcv-lite', '2.1.0', None)]},
                           {'mmengine': True, 'mmdet': True})  # source trees: accepted
    assert unsupported == ["mmcv comes from mmcv-lite 2.1.0, which mmdet_ext does not support: "
                           "pip install 'mmdet_ext[openmmlab]' (mmcv>=2.0.0rc4,<2.2.0) or pip "
                           "install 'mmdet_ext[onedl]' (onedl-mmcv>=2.3.6,<2.4)"]


def _fork_like_site(tmp_path: Path, versions: dict) -> Path:
    """A site directory whose mmengine, mmcv and mmdet are this machine's packages under the
    fork's distribution names (upstream's dist-info left out), with a .pth that prints to
    stdout at startup as the fork's mmdet does on import."""
    import mmcv
    import mmdet
    import mmengine
    site = tmp_path / 'site'
    site.mkdir()
    for module in (mmengine, mmcv, mmdet):
        (site / module.__name__).symlink_to(Path(module.__file__).parent)
        dist = FAMILIES['onedl'][module.__name__][0]
        info = site / f'{dist.replace("-", "_")}-{versions[module.__name__]}.dist-info'
        info.mkdir()
        (info / 'METADATA').write_text(f'Metadata-Version: 2.1\nName: {dist}\n'
                                       f'Version: {versions[module.__name__]}\n')
        (info / 'top_level.txt').write_text(f'{module.__name__}\n')
    (site / 'onedl_print.pth').write_text(
        "import sys; print('Could not import OneDL. Skipping OneDL datasets.')\n")
    return site


FORK_PROBE = r'''
import site, sys
# The fork-like site first on sys.path; OpenMMLab's distributions, installed on this machine,
# reported absent, as in a venv holding only the fork.
import importlib.metadata as metadata
real = metadata.distribution
def distribution(name):
    if name in ('mmengine', 'mmcv', 'mmdet'):
        raise metadata.PackageNotFoundError(name)
    return real(name)
metadata.distribution = distribution
site.addsitedir(sys.argv[1])
sys.path.remove(sys.argv[1]); sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import runpy
sys.argv = ['mmdet_ext.info']
runpy.run_module('mmdet_ext.info', run_name='__main__')
'''


@pytest.mark.parametrize('mmcv_version, ok', [('2.3.6', True), ('2.4.0', False)])
def test_info_and_check_under_the_forks_distribution_names(tmp_path, mmcv_version, ok):
    """The fork installs the same import names under onedl-* names: the check accepts its
    releases and names one out of range; info reports the fork's distributions; stray stdout
    printed on import does not break the table."""
    site = _fork_like_site(tmp_path, dict(mmengine='0.10.12', mmcv=mmcv_version, mmdet='3.5.1'))
    result = subprocess.run([sys.executable, '-c', FORK_PROBE, str(site), str(REPO_ROOT)],
                            capture_output=True, text=True, timeout=300, env=_clean_env())
    if not ok:
        assert result.returncode != 0
        assert (f'onedl-mmcv {mmcv_version} is outside the range mmdet_ext supports'
                in result.stderr), result.stderr[-3000:]
        return
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith('Could not import OneDL.')
    lines = _info_lines(result.stdout)
    assert lines['mmengine'] == '0.10.12 (onedl-mmengine, onedl)'
    assert lines['mmcv'] == '2.3.6 (onedl-mmcv, onedl)'
    assert lines['mmdet'] == '3.5.1 (onedl-mmdetection, onedl)'
