"""How often does MemoryWatchHook cry wolf, and when does it find a real leak?

    PYTHONPATH=.:tests python benchmarks/memory_detector.py [--repeats 20] [--load both]
        [--epochs 12] [--workloads ...] [--out benchmarks/results]

Every run is a fresh process training ``TinyModel`` (tests/helpers/memory_cases.py) with the real
mmengine Runner, real DataLoader workers and ``MemoryWatchHook`` at its default thresholds, for
``--epochs`` epochs of 40 iterations (batch 8). The hook judges every process at each epoch end;
the benchmark reads every judgement from the log (``MemoryWatch after N iterations: ...``) and
every warning (``MemoryWatch: <process> LEAK: ...``).

Healthy workloads (no leak anywhere; goal: 0 leak verdicts, 0 leak warnings):
``flat`` (numpy dataset, 2 workers restarted each epoch), ``persistent`` (the same, persistent
workers), ``no_workers`` (``num_workers=0``), ``val_every_epoch`` (2 workers, validation with 2
workers after every epoch), ``cow`` (a list-of-dicts dataset: copy-on-write sawtooth, bounded,
never a leak).

Planted leaks (goal: named by the end of the run, and never taken back once named):
``fast_leak`` (64 KiB per sample kept in each restarted worker: ~256 MiB/1000 iter each),
``slow_leak`` (4 KiB per sample, persistent workers: ~16 MiB/1000 iter each), ``one_worker``
(64 KiB per sample in worker 0 only, persistent: worker 1 and main must stay unnamed),
``main_leak`` (a hook keeping 64 KiB per iteration in the main process: 64 MiB/1000 iter).

``--load idle|loaded|both``: ``loaded`` runs two busy-looping processes (one per core here)
beside every run. Besides, ``--replay`` judges recorded series (memory.json files, e.g. the demo's
and the soak's) at every epoch end, as the hook would have. Writes ``<out>/memory_detector.md``
and the raw judgements as ``memory_detector.json``.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

REPO = Path(__file__).resolve().parents[1]
ITERS_PER_EPOCH = 40
BATCH = 8

HEALTHY = ('flat', 'persistent', 'no_workers', 'val_every_epoch', 'cow')
PLANTED = {  # workload -> the processes that leak
    'fast_leak': ('train.w0', 'train.w1'),
    'slow_leak': ('train.w0', 'train.w1'),
    'one_worker': ('train.w0',),
    'main_leak': ('main',),
}

_CHILD = r'''
import sys
from mmengine.runner import Runner
import helpers.memory_cases
from helpers.memory_cases import TinyModel
workload, work_dir, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
length = {length}
datasets = dict(flat=dict(type='NumpyDatasetFlat', length=length),
                cow=dict(type='ListOfDictsDataset', length=length),
                fast_leak=dict(type='AppendingDataset', length=length, leak_kib=64),
                slow_leak=dict(type='AppendingDataset', length=length, leak_kib=4),
                one_worker=dict(type='OneWorkerLeakDataset', length=length, leak_kib=64))
dataset = datasets.get(workload, datasets['flat'])
workers = 0 if workload == 'no_workers' else 2
persistent = workload in ('persistent', 'slow_leak', 'one_worker')
loader = lambda ds: dict(dataset=ds, batch_size={batch}, num_workers=workers,
                         persistent_workers=persistent, collate_fn=dict(type='default_collate'),
                         sampler=dict(type='DefaultSampler', shuffle=False))
hooks = [dict(type='MemoryWatchHook')]
if workload == 'main_leak':
    hooks.append(dict(type='MainProcessLeakHook', leak_kib=64))
extra = {{}}
if workload == 'val_every_epoch':
    extra = dict(val_dataloader=loader(dict(type='NumpyDatasetFlat', length=160)),
                 val_evaluator=dict(type='MeanOutputMetric'), val_cfg=dict())
Runner(model=TinyModel(), work_dir=work_dir, experiment_name='run', default_scope='mmdet',
       train_dataloader=loader(dataset),
       train_cfg=dict(by_epoch=True, max_epochs=epochs, val_interval=1),
       optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
       default_hooks=dict(checkpoint=None, logger=dict(type='LoggerHook', interval=40)),
       custom_hooks=hooks, **extra).train()
'''.format(length=ITERS_PER_EPOCH * BATCH, batch=BATCH)

_JUDGEMENT = re.compile(r'MemoryWatch after (\d+) iterations: (.*)$')
_VERDICT = re.compile(r'([\w.]+) (flat|sawtooth|leak|too short to judge) \(')
_WARNING = re.compile(r'MemoryWatch: ([\w.]+) LEAK:')


def parse_log(text: str) -> dict:
    """Every judgement (iteration -> process -> verdict) and every leak warning in a log."""
    judgements, warnings = [], []
    for line in text.splitlines():
        match = _JUDGEMENT.search(line)
        if match:
            verdicts = dict(_VERDICT.findall(match.group(2)))
            judgements.append((int(match.group(1)), verdicts))
        match = _WARNING.search(line)
        if match:
            warnings.append(match.group(1))
    return dict(judgements=judgements, leak_warnings=warnings)


def run_once(workload: str, epochs: int) -> dict:
    """Train one workload in a fresh process; its judgements, warnings and wall time."""
    with tempfile.TemporaryDirectory() as work_dir:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(REPO), str(REPO / 'tests'), os.environ.get('PYTHONPATH', '')]))
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, '-c', _CHILD, workload, work_dir, str(epochs)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f'{workload} failed:\n{proc.stderr[-3000:]}')
        logs = sorted(Path(work_dir).rglob('*.log'))
        result = parse_log(logs[-1].read_text())
    result.update(workload=workload, seconds=round(seconds, 1),
                  load_average=round(os.getloadavg()[0], 2))
    return result


def score(run: dict) -> dict:
    """Leak verdicts, warnings and flaps of one run; for planted runs, when the leak was named."""
    named, flaps, wrong = {}, 0, set()
    leaking = PLANTED.get(run['workload'], ())
    for iteration, verdicts in run['judgements']:
        for process, verdict in verdicts.items():
            if verdict == 'leak':
                named.setdefault(process, iteration)
                if process not in leaking:
                    wrong.add(process)
            elif process in named:
                flaps += 1  # named a leak at an earlier judgement, not any more
    final = run['judgements'][-1][1] if run['judgements'] else {}
    return dict(
        false_leak_processes=sorted(wrong),
        false_warnings=sum(1 for p in run['leak_warnings'] if p not in leaking),
        flaps=flaps,
        found=all(final.get(p) == 'leak' for p in leaking) if leaking else None,
        first_named={p: named.get(p) for p in leaking})


def busy_load(n: int) -> List[subprocess.Popen]:
    """``n`` processes spinning on the CPU (a stress-style load), stopped by the caller."""
    return [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(n)]


def recorded_series(path: Path) -> List[tuple]:
    """``(name, memory.json-like dict)`` for a memory.json, or for each pipeline of
    benchmarks/soak_dataloader.py's json (its epochs are ``batches / epochs`` long)."""
    data = json.loads(path.read_text())
    if 'series' in data:
        return [(str(path), data)]
    out = []
    for result in data['results']:
        per_epoch = result['batches'] / result['epochs']
        starts = {str(e): int(round(e * per_epoch)) for e in range(result['epochs'])}
        out.append((f'{path} ({result["pipeline"]})',
                    dict(series=result['series'], epoch_starts=starts)))
    return out


def replay(name: str, data: dict) -> dict:
    """Judge a recorded series at every epoch end, as the hook would have (with its named-leak
    memory). Returns the judgements and the number of leak verdicts among them."""
    from mmdet_ext.engine.memory import LEAK, MemoryRecord, VerdictThresholds
    thresholds = VerdictThresholds(**(data.get('meta', {}).get('thresholds') or {}))
    full = MemoryRecord.from_dict(data)
    last = max(s['iter'][-1] for s in full.series.values())
    ends = sorted({it for it in full.epoch_starts.values() if 0 < it < last} | {last})
    named, judgements = {}, []
    for end in ends:
        cut = MemoryRecord.from_dict(data)
        for s in cut.series.values():
            keep = [i for i, it in enumerate(s['iter']) if it <= end]
            for key in s:
                s[key] = [s[key][i] for i in keep]
        cut.series = {k: s for k, s in cut.series.items() if s['iter']}
        cut.epoch_starts = {e: it for e, it in full.epoch_starts.items() if it <= end}
        verdicts = cut.judge(thresholds, named)
        for v in verdicts:
            if v.verdict == LEAK:
                named.setdefault(v.label, end)
            else:
                named.pop(v.label, None)
        judgements.append((end, {v.label: v.verdict for v in verdicts}))
    leaks = sum(v == LEAK for _, verdicts in judgements for v in verdicts.values())
    return dict(series=name, judgements=judgements, leak_verdicts=leaks)


def write_report(results: List[dict], replays: List[dict], args, out: Path) -> Path:
    rows = ['| workload | CPU | runs | runs with a false leak verdict | false leak warnings '
            '| flaps | leak found at the end | first named (iteration, median / max) '
            '| s per run | load average (median) |',
            '|---|---|---:|---:|---:|---:|---:|---|---:|---:|']
    keyed: Dict[tuple, List[dict]] = {}
    for r in results:
        keyed.setdefault((r['workload'], r['load']), []).append(r)
    for (workload, load), runs in keyed.items():
        scores = [score(r) for r in runs]
        false_runs = sum(bool(s['false_leak_processes']) for s in scores)
        warnings = sum(s['false_warnings'] for s in scores)
        flaps = sum(s['flaps'] for s in scores)
        if workload in PLANTED:
            found = f'{sum(bool(s["found"]) for s in scores)}/{len(runs)}'
            firsts = [it for s in scores for it in s['first_named'].values()]
            named = [it for it in firsts if it is not None]
            first = (f'{sorted(named)[len(named) // 2]} / {max(named)}'
                     + ('' if len(named) == len(firsts) else ' (some never)')) if named else 'never'
        else:
            found, first = '-', '-'
        seconds = sorted(r['seconds'] for r in runs)[len(runs) // 2]
        load_average = sorted(r['load_average'] for r in runs)[len(runs) // 2]
        rows.append(f'| {workload} | {load} | {len(runs)} | {false_runs} | {warnings} | {flaps} '
                    f'| {found} | {first} | {seconds:.0f} | {load_average:.1f} |')
    lines = [
        '# Memory watch: false alarms and detections', '',
        f'Command: `PYTHONPATH=.:tests python3 benchmarks/memory_detector.py --repeats '
        f'{args.repeats} --planted-repeats {args.planted_repeats} --epochs {args.epochs} '
        f'--load {args.load}'
        + (f' --workloads {" ".join(args.workloads)}' if args.workloads != list(
            HEALTHY + tuple(PLANTED)) else '')
        + ''.join(f' --replay {p}' for p in args.replay) + '`', '',
        f'Each run: a fresh process, TinyModel, {args.epochs} epochs x {ITERS_PER_EPOCH} '
        f'iterations (batch {BATCH}), MemoryWatchHook at its defaults (warm-up 200 iterations, '
        f'leak >= 10 MiB/1000 iter or 5 %/epoch, min_leak_blocks 3), judged at every epoch end. '
        f'"loaded": two busy-looping processes beside the run on this {os.cpu_count()}-core '
        f'machine; the load average column is the 1-minute load at the end of each run (other '
        f'work on the machine included), so "idle" is what was asked for, not a promise. A '
        f'flap is a judgement that no longer calls a process a leak after an earlier one did.',
        '', *rows, '']
    if replays:
        lines += ['## Recorded series, judged at every epoch end', '',
                  '| series | judgements | leak verdicts | last judgement |', '|---|---:|---:|---|']
        for rep in replays:
            last = rep['judgements'][-1] if rep['judgements'] else (0, {})
            summary = ', '.join(f'{k} {v}' for k, v in sorted(last[1].items()))
            lines.append(f'| `{rep["series"]}` | {len(rep["judgements"])} | '
                         f'{rep["leak_verdicts"]} | after {last[0]} it: {summary} |')
        lines.append('')
    path = out / 'memory_detector.md'
    path.write_text('\n'.join(lines))
    (out / 'memory_detector.json').write_text(json.dumps(
        dict(runs=results, replays=replays), indent=1))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--repeats', type=int, default=20, help='runs of each healthy workload')
    parser.add_argument('--planted-repeats', type=int, default=5,
                        help='runs of each planted-leak workload')
    parser.add_argument('--epochs', type=int, default=12)
    parser.add_argument('--load', choices=('idle', 'loaded', 'both'), default='both')
    parser.add_argument('--workloads', nargs='+', default=list(HEALTHY + tuple(PLANTED)),
                        choices=HEALTHY + tuple(PLANTED))
    parser.add_argument('--replay', nargs='*', default=[], type=Path)
    parser.add_argument('--out', type=Path, default=REPO / 'benchmarks' / 'results')
    parser.add_argument('--resume', action='store_true',
                        help='keep the runs already in <out>/memory_detector_runs.jsonl')
    args = parser.parse_args()
    loads = ('idle', 'loaded') if args.load == 'both' else (args.load,)
    # Each run is appended as it ends, so that a long benchmark cut short keeps its runs;
    # --resume goes on from them.
    runs_file = args.out / 'memory_detector_runs.jsonl'
    results = ([json.loads(line) for line in runs_file.read_text().splitlines()]
               if args.resume and runs_file.is_file() else [])
    if not args.resume:
        runs_file.write_text('')
    done = {(r['load'], r['repeat'], r['workload']) for r in results}
    for load in loads:
        spinners = busy_load(os.cpu_count() or 2) if load == 'loaded' else []
        try:
            for repeat in range(max(args.repeats, args.planted_repeats)):
                for workload in args.workloads:
                    if (repeat >= (args.planted_repeats if workload in PLANTED else args.repeats)
                            or (load, repeat, workload) in done):
                        continue
                    run = run_once(workload, args.epochs)
                    run.update(load=load, repeat=repeat)
                    results.append(run)
                    with runs_file.open('a') as f:
                        f.write(json.dumps(run) + '\n')
                    print(f'[{load} {repeat}] {workload}: {score(run)} ({run["seconds"]} s)',
                          flush=True)
        finally:
            for spinner in spinners:
                spinner.kill()
    replays = [replay(name, data) for path in args.replay
               for name, data in recorded_series(path)]
    print(write_report(results, replays, args, args.out).read_text())


if __name__ == '__main__':
    main()
