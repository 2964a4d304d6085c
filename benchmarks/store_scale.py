"""Annotation store at dataset scale: mmdet's dataset init vs our store build, each in a fresh process.

    python benchmarks/store_scale.py coco [--json PATH] [--limit-gb 12] [--out FILE.md]
    python benchmarks/store_scale.py o365 --runs mmdet,build
    python benchmarks/store_scale.py lvis --runs build,build_validated,cached

Without ``--json`` the json is generated (benchmarks/make_scale_coco.py) in ``--work`` and deleted
afterwards with every store. Runs (each a fresh ``python`` process; time is from after the imports
to a usable dataset: constructed, ``len`` and one ``get_data_info``; peak RSS is the process's
``ru_maxrss``, imports included):

- ``mmdet``: mmdet's ``CocoDataset`` (``Objects365V2Dataset`` for o365), mmengine's default
  ``serialize_data=True``;
- ``python_build``: ``open_store`` with the Python reader (``json.loads``, the previous builder);
- ``build``: ``open_store`` with the native reader, no validation;
- ``build_validated``: ``LazyCocoDataset`` first use: native build with issue 7's validation
  (the images do not exist: every one is checked and reported missing, as a wrong prefix would);
- ``cached_unvalidated``: ``LazyCocoDataset(validate=False)`` on the store ``build`` left;
- ``cached``: ``LazyCocoDataset`` on the store ``build_validated`` left (its open re-checks every
  judged image file with one ``stat``, issue 7's freshness rule).

A watchdog samples each process's RSS and kills it above ``--limit-gb`` (the machine is shared),
reporting where it was. Appends a markdown table to ``--out``.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
RUNS = ('mmdet', 'python_build', 'build', 'cached_unvalidated', 'build_validated', 'cached')

CHILD = r'''
import json, os, resource, sys, time
sys.path.insert(0, {repo!r})
run, ann_file, work, kind = {run!r}, {ann_file!r}, {work!r}, {kind!r}
if run == 'mmdet':
    from mmdet.datasets import CocoDataset, Objects365V2Dataset
    cls = Objects365V2Dataset if kind == 'o365' else CocoDataset
else:
    if run == 'python_build':
        os.environ['MMDET_EXT_JSON_READER'] = 'python'
    from mmdet_ext.datasets import LazyCocoDataset, open_store
from mmdet.datasets import CocoDataset, Objects365V2Dataset
classes = (Objects365V2Dataset if kind == 'o365' else CocoDataset).METAINFO['classes']
if kind == 'lvis':
    classes = tuple(f'lvis_class_{{k}}' for k in range(1203))
start = time.perf_counter()
extra = {{}}
if run == 'mmdet':
    dataset = cls(ann_file=ann_file, data_prefix=dict(img=work), pipeline=[])
    len(dataset), dataset.get_data_info(0)
elif run in ('python_build', 'build'):
    store = open_store(ann_file, cache_dir=os.path.join(work, run))
    extra = dict(store_bytes=store.nbytes, images=store.num_images, instances=store.num_instances)
else:
    unvalidated = run == 'cached_unvalidated'
    dataset = LazyCocoDataset(ann_file=ann_file, data_prefix=dict(img=os.path.join(work, 'img')),
                              metainfo=dict(classes=classes), pipeline=[],
                              validate=not unvalidated,
                              store_cache_dir=os.path.join(work, 'build' if unvalidated
                                                           else 'validated'))
    len(dataset), dataset.get_data_info(0)
    extra = dict(store_bytes=dataset.store.nbytes, samples=len(dataset))
seconds = time.perf_counter() - start
print('RESULT ' + json.dumps(dict(seconds=seconds,
                                  peak_rss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                                  **extra)))
'''


def run_child(run: str, ann_file: str, work: str, kind: str, limit: float) -> dict:
    """One run in a fresh process under the RSS watchdog."""
    code = CHILD.format(repo=str(REPO), run=run, ann_file=ann_file, work=work, kind=kind)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    watched = psutil.Process(proc.pid)
    peak = 0
    killed = None
    while proc.poll() is None:
        try:
            rss = watched.memory_info().rss
        except psutil.NoSuchProcess:
            break
        peak = max(peak, rss)
        if rss > limit:
            proc.kill()
            killed = f'killed by the watchdog at {rss / 2**30:.1f} GiB RSS after ' \
                     f'{time.perf_counter() - start:.0f} s (process wall time, imports included)'
            break
        time.sleep(0.1)
    out, err = proc.communicate()
    for line in out.splitlines():
        if line.startswith('RESULT '):
            return json.loads(line[7:])
    return {'failed': killed or f'exit {proc.returncode}: {err.strip()[-400:]}',
            'peak_rss': peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('kind', choices=('coco', 'o365', 'lvis'))
    parser.add_argument('--json', help='an existing json (kept); default: generate, then delete')
    parser.add_argument('--runs', default=','.join(RUNS))
    parser.add_argument('--limit-gb', type=float, default=12.0)
    parser.add_argument('--work', default=None, help='scratch folder (default: a temp dir)')
    parser.add_argument('--out', default=str(REPO / 'benchmarks' / 'results' / 'store_scale.md'))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix='store_scale_', dir=args.work))
    try:
        ann_file = args.json
        if ann_file is None:
            ann_file = str(work / f'{args.kind}.json')
            start = time.perf_counter()
            subprocess.run([sys.executable, str(REPO / 'benchmarks' / 'make_scale_coco.py'),
                            args.kind, ann_file], check=True)
            print(f'generated {ann_file} in {time.perf_counter() - start:.0f} s', flush=True)
        json_bytes = os.path.getsize(ann_file)
        results = {}
        for run in args.runs.split(','):
            load = os.getloadavg()[0]
            results[run] = run_child(run, ann_file, str(work), args.kind, args.limit_gb * 2**30)
            results[run]['load'] = load  # other work on the machine slows every run alike
            print(run, results[run], flush=True)
        write_table(args, ann_file, json_bytes, results)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_table(args, ann_file: str, json_bytes: int, results: dict) -> None:
    lines = [f'\n### {args.kind}: {Path(ann_file).name}, {json_bytes / 1e6:.0f} MB json\n',
             f'`python benchmarks/store_scale.py {" ".join(sys.argv[1:])}`\n',
             '| run | time to a usable dataset / store | peak RSS | store size | store / json '
             '| load avg at start |',
             '|---|---:|---:|---:|---:|---:|']
    for run, r in results.items():
        if 'failed' in r:
            lines.append(f'| {run} | {r["failed"]} | >= {r["peak_rss"] / 1e9:.2f} GB | | | '
                         f'{r["load"]:.1f} |')
            continue
        size = r.get('store_bytes')
        lines.append(f'| {run} | {r["seconds"]:.1f} s | {r["peak_rss"] / 1e9:.2f} GB | '
                     + (f'{size / 1e6:.0f} MB | {size / json_bytes:.2f}x |' if size else ' | |')
                     + f' {r["load"]:.1f} |')
    base = results.get('mmdet', {})
    if 'seconds' in base:
        for run in ('build', 'build_validated'):
            if 'seconds' in results.get(run, {}):
                lines.append(f'\n{run} / mmdet init time: '
                             f'{results[run]["seconds"] / base["seconds"]:.3f}x')
    text = '\n'.join(lines) + '\n'
    print(text)
    with open(args.out, 'a') as f:
        f.write(text)


if __name__ == '__main__':
    main()
