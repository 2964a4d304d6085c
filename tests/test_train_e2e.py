"""The main job end to end: tools/train.py trains the toy Mask R-CNN through the real Runner,
evaluates with CocoMetric, checkpoints, and resumes where it stopped."""
import json
from pathlib import Path

from mmdet_ext import load_checkpoint_to_cpu


def _scalars(work_dir: Path) -> list[dict]:
    (scalars_file,) = work_dir.glob('*/vis_data/scalars.json')
    return [json.loads(line) for line in scalars_file.read_text().splitlines()]


def test_train_evaluate_checkpoint_and_resume(toy_coco_root, tmp_path, train_toy):
    work_dir = tmp_path / 'work'
    train_toy(toy_coco_root, work_dir, 2)
    first = load_checkpoint_to_cpu(str(work_dir / 'epoch_2.pth'))
    iters_per_epoch = first['meta']['iter'] // 2
    assert first['meta']['epoch'] == 2 and iters_per_epoch > 0
    metrics = [row for row in _scalars(work_dir) if 'coco/bbox_mAP' in row]
    assert len(metrics) == 1 and 'coco/segm_mAP' in metrics[0]
    assert (work_dir / 'last_checkpoint').read_text().strip().endswith('epoch_2.pth')
    # Train and val workers (persistent) and the main process each kept an in-flight record
    # while loading; a run that ends normally deletes them all (InflightCleanupHook).
    assert not list(work_dir.rglob('inflight_*.txt'))

    log = train_toy(toy_coco_root, work_dir, 3, '--resume')
    assert f'resumed epoch: 2, iter: {2 * iters_per_epoch}' in log
    resumed = load_checkpoint_to_cpu(str(work_dir / 'epoch_3.pth'))
    assert resumed['meta']['epoch'] == 3
    assert resumed['meta']['iter'] == 3 * iters_per_epoch
    # The resumed run trained on: its weights moved away from the checkpoint it started from.
    name = next(k for k in first['state_dict'] if k.endswith('conv1.weight'))
    assert not (resumed['state_dict'][name] == first['state_dict'][name]).all()
