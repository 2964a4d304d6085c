"""memcheck: the dataloader alone, per-process growth, and the field bisection on a planted leak.

The planted case (tests/helpers/memory_cases.py): FieldsDataset yields img / boxes / masks and
``mask_keeping_collate`` keeps every ``masks`` array it collates, in the workers.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mmengine.structures import InstanceData

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # this checkout, not an installed copy

from mmdet_ext.engine.memory import VerdictThresholds  # noqa: E402
from mmdet_ext.engine.memory.memcheck import (bisect_fields, drop_field,  # noqa: E402
                                              format_bisection, list_fields, run_dataloader)

PLANTED = dict(
    batch_size=8, num_workers=2, persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='mask_keeping_collate'),
    dataset=dict(type='FieldsDataset', length=960, size=128))  # 120 iterations: one epoch
THRESHOLDS = VerdictThresholds(warmup_iters=10)


@pytest.fixture(autouse=True)
def _registered():
    import helpers.memory_cases  # noqa: F401  (registers the planted case)


def test_bisection_names_the_planted_field():
    # 120 iterations past a 10-iteration warm-up: eleven 10-iteration spans of a ~256 MiB/1000
    # iter leak per worker, far past the three a leak needs (and its confirmation one span
    # earlier), however the samples fall on a loaded machine. At 60 iterations (five spans) one
    # loaded CI run of three still said `too short to judge`.
    result = bisect_fields(PLANTED, iters=120, interval=1, thresholds=THRESHOLDS)
    verdicts = {v.label: v.verdict for v in result.baseline.verdicts}
    reasons = {v.label: v.reason for v in result.baseline.verdicts}
    assert verdicts['train.w0'] == verdicts['train.w1'] == 'leak', reasons
    assert set(result.runs) == {'img', 'boxes', 'masks'}
    assert result.culprits == ['masks']
    assert not result.aliasing
    assert result.runs['masks'].growth_mib_per_kiter < 0.2 * result.baseline.growth_mib_per_kiter
    assert 'the growth is carried by: masks' in format_bisection(result)


def test_in_place_modification_of_the_dataset_is_diagnosed():
    cfg = dict(PLANTED, collate_fn=dict(type='in_place_decode_collate'),
               dataset=dict(type='CachedDictDataset', length=320))
    # 120 iterations, as the bisection above: at 40 (three spans) the verdict is one loaded
    # machine's noise away from 'too short to judge' (audit D1).
    result = bisect_fields(cfg, iters=120, interval=1, fields=['img', 'mask_value'],
                           thresholds=THRESHOLDS)
    assert any(v.verdict == 'leak' for v in result.baseline.verdicts)
    assert result.aliasing and result.culprits == []
    report = format_bisection(result)
    assert 'modifies them in place, so they keep what it adds' in report
    # The collate needs 'img': that run fails, is reported, and the bisection goes on.
    assert result.runs['img'].error.startswith('KeyError')
    assert "without img" in report and 'failed: the field is needed (KeyError' in report


def test_without_a_leak_nothing_is_attributed():
    cfg = dict(PLANTED, collate_fn=dict(type='default_collate'))
    result = bisect_fields(cfg, iters=30, interval=1, fields=['masks'], thresholds=THRESHOLDS)
    assert all(v.verdict != 'leak' for v in result.baseline.verdicts)
    assert result.culprits == []
    assert 'nothing to attribute' in format_bisection(result)


def test_fields_of_dicts_and_data_elements():
    gt = InstanceData(bboxes=torch.zeros(2, 4), masks=np.zeros((2, 4, 4)))
    sample = dict(inputs=torch.zeros(3), data_samples=dict(gt_instances=gt))
    assert list_fields(sample) == ['inputs', 'data_samples.gt_instances.bboxes',
                                   'data_samples.gt_instances.masks']
    dropped = drop_field(sample, 'data_samples.gt_instances.masks')
    assert list_fields(dropped) == ['inputs', 'data_samples.gt_instances.bboxes']
    assert 'masks' in gt and 'gt_instances' in sample['data_samples']  # the original is intact
    assert drop_field(sample, 'no.such.field') == sample


def test_bad_run_arguments_are_rejected():
    with pytest.raises(ValueError, match='iters'):
        run_dataloader(PLANTED, iters=0)
    with pytest.raises(ValueError, match='workers'):
        run_dataloader(PLANTED, iters=5, workers=-1)


def test_cli_prints_per_process_verdicts(tmp_path):
    config = tmp_path / 'planted.py'
    config.write_text(
        "custom_imports = dict(imports=['helpers.memory_cases'],\n"
        "                      allow_failed_imports=False)\n"
        f"train_dataloader = {PLANTED!r}\n")
    out = subprocess.run(
        [sys.executable, str(REPO_ROOT / 'tools/memcheck.py'), str(config), '--iters', '120',
         '--workers', '1', '--interval', '1', '--warmup-iters', '10'],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO_ROOT), str(REPO_ROOT / 'tests'), os.environ.get('PYTHONPATH', '')])))
    assert out.returncode == 0, out.stderr
    # 120 iterations past a 10-iteration warm-up, as the bisection test (at 40, three spans,
    # the fewest in which a leak is named, a loaded machine could judge it too short). The main
    # process is not blamed (flat, or too short to judge, depending on how its allocator moved).
    assert 'train.w0      leak' in out.stdout
    assert re.search(r'main +(flat|too short to judge)', out.stdout), out.stdout
