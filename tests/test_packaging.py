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

import pytest
import torch

import mmdet_ext
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
    names = {r.split('<')[0].split('>')[0].split('=')[0].strip() for r in requires}
    assert {'mmdet', 'mmcv', 'mmengine', 'torch', 'numpy', 'pycocotools', 'psutil'} <= names
    major, minor = torch.__version__.split('.')[:2]
    assert f'torch<{major}.{int(minor) + 1},>={major}.{minor}' in requires


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
from mmdet_ext.info import collect_env
from mmengine.config import Config
from mmdet.registry import DATASETS
from mmengine.registry import DefaultScope

unmet = [str(r) for r in map(Requirement, importlib.metadata.requires('mmdet_ext'))
         if not r.specifier.contains(importlib.metadata.version(r.name), prereleases=True)]
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
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / 'bin' / 'python'
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
    lines = dict(re.fullmatch(r'(.+?) {2,}(.*)', line).groups()
                 for line in result.stdout.splitlines())
    info = mmdet_ext.build_info()
    assert lines['mmdet_ext'] == f'{mmdet_ext.__version__} ({Path(mmdet_ext.__file__).parent})'
    assert lines['torch (running)'].startswith(torch.__version__)
    if info['opencv_version']:
        assert lines['OpenCV'] == info['opencv_version']
    else:
        assert lines['OpenCV'].startswith('not built')
    assert lines['source hash'] == info['source_hash']
