"""In-flight records: deleted after a normal run, kept when the run raises (they name the sample).

The main job's own check (tools/train.py, LazyCocoDataset, persistent train and val workers)
is in test_train_e2e.py; here the tiny Runner, with a record written into its log dir.
"""
import os

import pytest
from mmengine.hooks import Hook
from mmengine.runner import Runner

from helpers.tiny_runner import tiny_runner_kwargs
from mmdet_ext.datasets.inflight import InflightRecord, inflight_path, remove_inflight_records


class Boom(Exception):
    pass


class RaiseAtFirstIter(Hook):
    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        raise Boom


def _runner(work_dir, *hooks: Hook) -> Runner:
    runner = Runner(**tiny_runner_kwargs(str(work_dir), max_epochs=1, with_val=False,
                                         custom_hooks=[dict(type='InflightCleanupHook'),
                                                       *hooks]))
    InflightRecord(runner.log_dir).begin('sample 1 (img_id=2, img_path=b.jpg)')
    return runner


def test_remove_inflight_records_deletes_only_records(tmp_path):
    InflightRecord(str(tmp_path)).begin('sample 3 (img_id=4, img_path=x.jpg)')
    (tmp_path / 'inflight_notes.md').write_text('not a record')
    (tmp_path / 'bad_samples.jsonl').write_text('{}\n')
    assert remove_inflight_records(str(tmp_path)) == [inflight_path(str(tmp_path), os.getpid())]
    assert sorted(p.name for p in tmp_path.iterdir()) == ['bad_samples.jsonl', 'inflight_notes.md']


def test_normal_run_leaves_no_records(tmp_path):
    _runner(tmp_path).train()
    assert (tmp_path / 'epoch_1.pth').is_file()
    assert not list(tmp_path.rglob('inflight_*.txt'))


def test_records_survive_a_run_that_raises(tmp_path):
    runner = _runner(tmp_path, RaiseAtFirstIter())
    with pytest.raises(Boom):
        runner.train()
    (record,) = tmp_path.rglob('inflight_*.txt')
    assert record.read_text().startswith('loading sample 1 (img_id=2, img_path=b.jpg)')
