"""Evaluate a trained model with mmdet's mask head + CocoMetric and with RLEFCNMaskHead +
RLECocoMetric, side by side: the printed COCO tables must be identical; time and peak memory of
each test run.

    PYTHONPATH=. python3 benchmarks/predicted_masks_eval.py --checkpoint work_dirs/.../epoch_12.pth

Each variant runs ``Runner.test()`` in a fresh process (peak RSS is the process's own), once to
warm the page cache and then ``--repeat`` times; the table lines (COCOeval's ``Average
Precision``/``Recall`` summaries and the per-metric results) of every run are compared.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VARIANTS = {
    'mmdet (FCNMaskHead + CocoMetric)': 'configs/mask-rcnn_r18_fpn_toy-coco.py',
    'mmdet_ext (RLEFCNMaskHead + RLECocoMetric)': 'configs/mask-rcnn_r18_fpn_toy-coco_rle-eval.py',
}
TABLE_LINE = re.compile(r'(Average (Precision|Recall) .*|coco/\S+: \S+)')


def run_once(config: str, checkpoint: str, out: Path) -> dict:
    """Runner.test() of ``config`` with ``checkpoint`` in this process; writes what it measured."""
    import mmdet_ext  # noqa: F401
    from mmengine.config import Config
    from mmengine.runner import Runner
    cfg = Config.fromfile(str(REPO / config))
    cfg.load_from = checkpoint
    cfg.work_dir = tempfile.mkdtemp(prefix='predicted_masks_eval_')
    cfg.default_hooks.pop('visualization', None)
    runner = Runner.from_cfg(cfg)
    start = time.perf_counter()
    metrics = runner.test()
    seconds = time.perf_counter() - start
    out.write_text(json.dumps(dict(
        seconds=seconds, metrics=metrics, images=len(runner.test_dataloader.dataset),
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))


def measure(config: str, checkpoint: str) -> tuple[dict, list]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / 'result.json'
        proc = subprocess.run([sys.executable, __file__, '--child', config, '--checkpoint',
                               checkpoint, '--child-out', str(out)], capture_output=True,
                              text=True, cwd=REPO, env={**os.environ, 'PYTHONPATH': str(REPO)})
        if proc.returncode != 0:
            raise SystemExit(f'{config}: exit {proc.returncode}\n{proc.stderr[-4000:]}')
        table = [m.group(1) for line in (proc.stdout + proc.stderr).splitlines()
                 if (m := TABLE_LINE.search(line))]
        return json.loads(out.read_text()), table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--checkpoint', required=True)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--child')
    parser.add_argument('--child-out', type=Path)
    args = parser.parse_args()
    if args.child:
        return run_once(args.child, args.checkpoint, args.child_out)
    load_before = os.getloadavg()
    rows, tables = [], {}
    for name, config in VARIANTS.items():
        measure(config, args.checkpoint)  # warm-up: page cache, lazy imports
        runs = [measure(config, args.checkpoint) for _ in range(args.repeat)]
        tables[name] = {tuple(table) for _, table in runs}
        seconds = sorted(r['seconds'] for r, _ in runs)
        rss = max(r['peak_rss_mib'] for r, _ in runs)
        first = runs[0][0]
        rows.append(f"| {name} | {first['images']} | {seconds[len(seconds) // 2]:.1f} "
                    f"| {rss:.0f} | {first['metrics']['coco/segm_mAP']:.3f} "
                    f"| {first['metrics']['coco/bbox_mAP']:.3f} |")
    same = len({t for ts in tables.values() for t in ts}) == 1
    print(f'load average before: {load_before}, after: {os.getloadavg()}')
    print('| variant | images | test run, s (median) | peak RSS, MiB | segm mAP | bbox mAP |')
    print('|---|---:|---:|---:|---:|---:|')
    print('\n'.join(rows))
    print(f'printed COCO tables identical across variants and runs: {same}')
    if same:
        print('\n'.join(next(iter(next(iter(tables.values()))))))


if __name__ == '__main__':
    main()
