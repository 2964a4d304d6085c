"""Importing the plugin: registration, the toy config, and refusing missing or stale builds."""
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from mmengine.config import Config

import mmdet_ext
from mmdet_ext.registry import HOOKS, TRANSFORMS

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_CONFIG = REPO_ROOT / 'configs' / 'mask-rcnn_r18_fpn_toy-coco.py'


def test_import_registers_plugin_classes_in_mmdet_registries():
    assert TRANSFORMS.get('NativeLoadImageFromFile') is mmdet_ext.NativeLoadImageFromFile
    assert HOOKS.get('CpuCheckpointLoadHook') is mmdet_ext.CpuCheckpointLoadHook
    assert hasattr(mmdet_ext._C, 'source_hash')
    assert torch._C._dispatch_has_kernel_for_dispatch_key('mmdet_ext::decode_image', 'CPU')


def test_toy_config_imports_the_plugin_the_way_a_user_config_does():
    cfg = Config.fromfile(str(TOY_CONFIG))
    assert cfg.custom_imports == dict(imports=['mmdet_ext'], allow_failed_imports=False)
    assert cfg.model.backbone.depth == 18 and cfg.model.backbone.init_cfg is None
    assert [t.type for t in cfg.train_dataloader.dataset.pipeline] == [
        'LoadLazyAnnotations', 'NativeLoadResizeFlip', 'PackDetInputs']
    assert cfg.train_dataloader.collate_fn.type == 'fast_collate'
    assert cfg.model.data_preprocessor.type == 'FastDetDataPreprocessor'
    assert {'CpuCheckpointLoadHook', 'WorkerDefaultsHook'} <= {h.type for h in cfg.custom_hooks}
    assert cfg.val_evaluator.metric == ['bbox', 'segm']


def _copy_package(dest: Path, with_extension: bool) -> None:
    shutil.copytree(REPO_ROOT / 'csrc', dest / 'csrc')
    ignore = None if with_extension else shutil.ignore_patterns('*.so')
    shutil.copytree(REPO_ROOT / 'mmdet_ext', dest / 'mmdet_ext', ignore=ignore)


# An editable install adds a finder that would resolve mmdet_ext._C to the checkout's own build;
# drop it so the copy under test is all the interpreter can see.
IMPORT_COPY = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
               "if '__editable__' not in getattr(f, '__module__', '')]; import mmdet_ext")


def _import_in_subprocess(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-c', IMPORT_COPY], cwd=path, capture_output=True,
                          text=True, timeout=300)


def test_missing_extension_says_how_to_rebuild(tmp_path):
    _copy_package(tmp_path, with_extension=False)
    result = _import_in_subprocess(tmp_path)
    assert result.returncode != 0
    assert 'compiled extension mmdet_ext._C is missing' in result.stderr
    assert 'pip install --no-build-isolation -e .' in result.stderr


def test_stale_extension_is_refused(tmp_path):
    _copy_package(tmp_path, with_extension=True)
    assert _import_in_subprocess(tmp_path).returncode == 0, 'the copied build should be current'
    with open(tmp_path / 'csrc' / 'library.cpp', 'a') as source:
        source.write('\n// edited after the build\n')
    result = _import_in_subprocess(tmp_path)
    assert result.returncode != 0
    assert 'is stale' in result.stderr and 'pip install --no-build-isolation -e .' in result.stderr


def test_ops_import_without_mmdet_and_mmcv_ops(tmp_path):
    """Where mmcv's compiled ops fail to import (a failed mmcv CUDA build) or mmdet is missing,
    the kernels stay usable (and their tests collectable); the registering names say why they
    are absent."""
    script = textwrap.dedent('''
        import sys, warnings

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name == 'mmdet' or name.startswith(('mmdet.', 'mmcv.ops', 'mmcv._ext')):
                    raise ModuleNotFoundError(f'No module named {name!r}', name=name)

        sys.meta_path.insert(0, Refuse())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter('always')
            import torch
            from mmdet_ext import ops
            from mmdet_ext._native import _C
        assert any('registered nothing' in str(w.message) for w in caught), caught
        assert ops.rle_area(ops.rle_encode(torch.ones(3, 2, dtype=torch.uint8))) == 6
        import mmdet_ext
        try:
            mmdet_ext.LazyCocoDataset
        except ImportError as err:
            assert 'needs mmdet' in str(err), err
        else:
            raise AssertionError('LazyCocoDataset without mmdet')
        assert not any(name.startswith(('mmdet.', 'mmcv.ops')) for name in sys.modules)
        print('ok')
    ''')
    out = subprocess.run([sys.executable, '-c', script], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, 'PYTHONPATH': str(REPO_ROOT)})
    assert out.returncode == 0 and out.stdout.strip().endswith('ok'), out.stderr
