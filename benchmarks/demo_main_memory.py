"""What does the demo's main process hold? Anonymous RSS, malloc and Python heaps over a real run.

    PYTHONPATH=. python benchmarks/demo_main_memory.py [CONFIG] --work-dir DIR
        [--tracemalloc N] [--cfg-options k=v ...]
    PYTHONPATH=. python benchmarks/demo_main_memory.py --summarize DIR/main_probe.json

Runs the README demo (``tools/train.py configs/mask-rcnn_r18_fpn_toy-coco.py``, the same
config, hooks and ``memory.json``) with one extra observer hook, ``MainMemoryProbe``, that reads
the main process only:

- every train and val iteration: anonymous RSS (``RssAnon`` of /proc/self/status, the figure
  MemoryWatchHook judges), glibc ``mallinfo2`` (bytes malloc hands out, free bytes it keeps,
  mmapped chunks) and, with ``--tracemalloc``, the Python-traced bytes;
- at every phase point (train start, each train epoch's start and end, each val's start and end,
  after COCO evaluation): the same plus /proc/self/smaps split into brk heap / anonymous
  mappings / library data / stacks, ``malloc_info`` per arena (heaps, free bytes, mmapped
  chunks), mmengine's MessageHub (log_scalars HistoryBuffer lengths and bytes, runtime_info
  keys), the MemoryWatchHook record's length, our hooks' per-iteration state, the evaluator's
  pending results, gc object count and, with ``--tracemalloc``, the top allocation-site
  differences (file:line) against the previous phase point and against the end of epoch 2 (0-based epoch 1).

Writes ``DIR/main_probe.json``; ``--summarize`` prints the tables of
benchmarks/results/demo_main_memory.md from it (and from ``DIR/memory.json``).
"""
import argparse
import os
import sys
import tracemalloc


def _early_tracemalloc() -> None:
    # Before torch/mmengine are imported, so their module-level allocations are traced too.
    if '--tracemalloc' in sys.argv:
        tracemalloc.start(int(sys.argv[sys.argv.index('--tracemalloc') + 1]))
        # Only the main process is studied: DataLoader workers forked from it stop tracing (it
        # would slow them down several times over).
        os.register_at_fork(after_in_child=tracemalloc.stop)


_early_tracemalloc()

import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import xml.etree.ElementTree as ET  # noqa: E402
from pathlib import Path  # noqa: E402

MIB = float(1 << 20)
REPO = Path(__file__).resolve().parents[1]
_libc = ctypes.CDLL('libc.so.6')


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks', 'fsmblks', 'uordblks',
        'fordblks', 'keepcost')]


_libc.mallinfo2.restype = _Mallinfo2
_libc.fopen.restype = ctypes.c_void_p
_libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
_libc.fclose.argtypes = [ctypes.c_void_p]
_libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]


def anon_mib() -> float:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('RssAnon:'):
                return int(line.split()[1]) / 1024.0
    return float('nan')


def mallinfo() -> dict:
    """glibc totals over all arenas (MiB): in_use = live malloc'd bytes (sbrk/arenas + mmapped
    chunks), free = free bytes kept inside the arenas (resident or not), mmapped = live chunks
    served by mmap (big tensors)."""
    m = _libc.mallinfo2()
    return dict(in_use=round((m.uordblks + m.hblkhd) / MIB, 2),
                free=round(m.fordblks / MIB, 2), mmapped=round(m.hblkhd / MIB, 2),
                arena=round(m.arena / MIB, 2))


def malloc_arenas() -> dict:
    """``malloc_info`` per arena: count, system bytes, free bytes (MiB); mmapped chunk count."""
    with tempfile.NamedTemporaryFile(suffix='.xml') as tmp:
        fp = _libc.fopen(tmp.name.encode(), b'w')
        _libc.malloc_info(0, fp)
        _libc.fclose(fp)
        root = ET.parse(tmp.name).getroot()
    heaps = []
    for heap in root.findall('heap'):
        free = sum(int(t.get('size')) for t in heap.findall('total')
                   if t.get('type') in ('fast', 'rest'))
        system = next(int(s.get('size')) for s in heap.findall('system')
                      if s.get('type') == 'current')
        heaps.append((int(heap.get('nr')), system, free))
    mmap = next((t for t in root.findall('total') if t.get('type') == 'mmap'), None)
    return dict(arenas=len(heaps),
                system=round(sum(h[1] for h in heaps) / MIB, 2),
                free=round(sum(h[2] for h in heaps) / MIB, 2),
                main_arena_system=round(heaps[0][1] / MIB, 2) if heaps else None,
                main_arena_free=round(heaps[0][2] / MIB, 2) if heaps else None,
                mmap_chunks=int(mmap.get('count')) if mmap is not None else None)


def smaps_anon() -> dict:
    """Anonymous resident MiB of the main process by kind of mapping."""
    kinds = dict(heap=0, anon_mmap=0, lib_data=0, stack=0)
    kind = None
    with open('/proc/self/smaps') as f:
        for line in f:
            first = line.split(None, 1)[0]
            if '-' in first and not first.endswith(':'):
                parts = line.split()
                path = parts[5] if len(parts) > 5 else ''
                kind = ('heap' if path == '[heap]' else 'stack' if path.startswith('[stack')
                        else 'anon_mmap' if not path else 'lib_data')
            elif first == 'Anonymous:':
                kinds[kind] += int(line.split()[1])
    return {k: round(v / 1024.0, 2) for k, v in kinds.items()}


def hub_sizes(runner) -> dict:
    hub = runner.message_hub
    lengths = [len(b._log_history) for b in hub.log_scalars.values()]
    nbytes = sum(b._log_history.nbytes + b._count_history.nbytes
                 for b in hub.log_scalars.values())
    return dict(scalar_keys=len(lengths), longest=max(lengths, default=0),
                total_values=sum(lengths), kib=round(nbytes / 1024, 1),
                runtime_info_keys=len(hub.runtime_info))


def hook_state(runner) -> dict:
    """Per-iteration state our hooks keep (all should stay bounded)."""
    out = {}
    for hook in runner.hooks:
        name = type(hook).__name__
        if name == 'MemoryWatchHook':
            out['memwatch_values'] = sum(len(v) for s in hook.record.series.values()
                                         for v in s.values())
            out['memwatch_samples'] = hook.record.num_samples()
            out['memwatch_warnings'] = len(hook.warnings)
            if hook._autograd is not None:
                out['autograd_watched'] = sum(len(v) for v in vars(hook._autograd).values()
                                              if isinstance(v, (list, dict, set)))
        elif name == 'HangWatchdogHook':
            out['watchdog_durations'] = len(hook._durations)
        elif name == 'ExactResumeHook':
            out['resume_snapshots'] = len(hook._all_snapshots or [])
    evaluator = getattr(getattr(runner, '_val_loop', None), 'evaluator', None)
    if evaluator is not None:
        out['evaluator_pending'] = sum(len(m.results) for m in evaluator.metrics)
    return out


class TraceDiffs:
    """tracemalloc at phase points: top growth by file:line against the previous point and the
    end of epoch 2 (grouped once per point: comparing whole snapshots took minutes)."""

    def __init__(self, top: int = 12) -> None:
        self.top = top
        self.previous = None
        self.reference = None
        self.filters = [tracemalloc.Filter(False, tracemalloc.__file__),
                        tracemalloc.Filter(False, __file__)]

    def diff(self, set_reference: bool) -> dict:
        snap = tracemalloc.take_snapshot().filter_traces(self.filters)
        sites = {}
        for s in snap.statistics('lineno'):
            frame = s.traceback[0]
            sites[f'{frame.filename}:{frame.lineno}'] = (s.size, s.count)
        del snap
        out = dict(traced_mib=round(tracemalloc.get_traced_memory()[0] / MIB, 2))
        for name, base in (('vs_previous', self.previous), ('vs_epoch2', self.reference)):
            if base is not None:
                diffs = [(site, size - base.get(site, (0, 0))[0], count - base.get(site, (0, 0))[1])
                         for site, (size, count) in sites.items()]
                diffs += [(site, -size, -count) for site, (size, count) in base.items()
                          if site not in sites]
                diffs.sort(key=lambda d: -abs(d[1]))
                out[name] = [dict(site=site, kib=round(size / 1024, 1), count=count)
                             for site, size, count in diffs[:self.top]]
        self.previous = sites
        if set_reference:
            self.reference = sites
        return out


def make_probe(trace: bool):
    from mmengine.hooks import Hook

    class MainMemoryProbe(Hook):
        priority = 'LOWEST'

        def __init__(self) -> None:
            self.iters = []   # one row per train/val iteration
            self.points = []  # one row per phase point
            self.trace = TraceDiffs() if trace else None
            self.t0 = time.time()

        def _row(self, runner, phase: str) -> dict:
            row = dict(phase=phase, iter=runner.iter, epoch=runner.epoch,
                       t=round(time.time() - self.t0, 2), anon=round(anon_mib(), 2),
                       malloc=mallinfo())
            if trace:
                row['traced'] = round(tracemalloc.get_traced_memory()[0] / MIB, 2)
            return row

        def point(self, runner, name: str) -> None:
            row = self._row(runner, name)
            row.update(smaps=smaps_anon(), arenas=malloc_arenas(), hub=hub_sizes(runner),
                       hooks=hook_state(runner), gc_objects=len(gc.get_objects()))
            if self.trace is not None:
                row['tracemalloc'] = self.trace.diff(
                    set_reference=name == 'after_train_epoch' and runner.epoch == 1)
            self.points.append(row)
            self.write(runner)  # every point: a run that dies early still leaves its data
            print(f'[probe] {name} epoch {runner.epoch} iter {runner.iter}: anon '
                  f'{row["anon"]:.1f} MiB, malloc in use {row["malloc"]["in_use"]:.1f} '
                  f'free {row["malloc"]["free"]:.1f}, arenas {row["arenas"]["arenas"]}, '
                  f'smaps {row["smaps"]}', flush=True)

        def before_train(self, runner):
            self.point(runner, 'before_train')

        def before_train_epoch(self, runner):
            # LOWEST: after MemoryWatchHook's malloc_trim (release_heap_before_fork).
            self.point(runner, 'before_train_epoch')

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            row = self._row(runner, 'train')
            row['iter'] = runner.iter + 1  # the loop counts the iteration after the hooks
            self.iters.append(row)

        def after_train_epoch(self, runner):
            self.point(runner, 'after_train_epoch')

        def before_val_epoch(self, runner):
            self.point(runner, 'before_val')

        def after_val_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            self.iters.append(self._row(runner, 'val'))

        def after_val_epoch(self, runner, metrics=None):
            self.point(runner, 'after_val')  # CocoMetric has run

        def after_run(self, runner):
            self.point(runner, 'after_run')
            print(f'[probe] wrote {Path(runner.work_dir) / "main_probe.json"}', flush=True)

        def write(self, runner):
            env = {k: v for k, v in os.environ.items() if k.startswith(('MALLOC', 'OMP'))}
            out = Path(runner.work_dir) / 'main_probe.json'
            out.write_text(json.dumps(dict(iters=self.iters, points=self.points,
                                           tracemalloc=trace, env=env)))

    return MainMemoryProbe()


def run(args) -> None:
    from mmengine.runner import Runner

    from mmdet_ext.train import build_config, shut_down_process_group
    cfg = build_config(argparse.Namespace(
        config=args.config, launcher='none', cfg_options=args.cfg_options,
        work_dir=args.work_dir, amp=False, auto_scale_lr=False, resume=None))
    runner = Runner.from_cfg(cfg)
    runner.register_hook(make_probe(args.tracemalloc is not None), 'LOWEST')
    try:
        runner.train()
    finally:
        shut_down_process_group()


# ---- summarize ----------------------------------------------------------------------------
def summarize(path: Path) -> None:
    data = json.loads(path.read_text())
    iters, points = data['iters'], data['points']
    train = [r for r in iters if r['phase'] == 'train']
    print(f'{len(train)} train iterations, {len(iters) - len(train)} val iterations, '
          f'{train[-1]["t"]:.0f} s')
    print('\nper epoch (train iterations): anon min/median/max, malloc in use, malloc free')
    print('| epoch | iters | anon first | anon median | anon max | anon last | malloc in use '
          '(median) | malloc free (median) |' + (' py traced (median) |' if data['tracemalloc']
                                                 else ''))
    print('|---' * (8 + bool(data['tracemalloc'])) + '|')
    for epoch in sorted({r['epoch'] for r in train}):
        rows = [r for r in train if r['epoch'] == epoch]
        anon = [r['anon'] for r in rows]
        line = (f'| {epoch + 1} | {rows[0]["iter"]}-{rows[-1]["iter"]} | {anon[0]:.1f} | '
                f'{statistics.median(anon):.1f} | {max(anon):.1f} | {anon[-1]:.1f} | '
                f'{statistics.median(r["malloc"]["in_use"] for r in rows):.1f} | '
                f'{statistics.median(r["malloc"]["free"] for r in rows):.1f} |')
        if data['tracemalloc']:
            line += f' {statistics.median(r["traced"] for r in rows):.1f} |'
        print(line)
    steps = [b['anon'] - a['anon'] for a, b in zip(train, train[1:])
             if b['epoch'] == a['epoch']]
    steps_sorted = sorted(abs(s) for s in steps)
    print(f'\niteration-to-iteration anon step within an epoch (n={len(steps)}): '
          f'stdev {statistics.pstdev(steps):.1f} MiB, median |step| '
          f'{steps_sorted[len(steps) // 2]:.1f}, 90th pct |step| '
          f'{steps_sorted[int(len(steps) * 0.9)]:.1f}, max |step| {steps_sorted[-1]:.1f}')
    print('\nphase points')
    print('| point | epoch | iter | anon | heap | anon mmap | malloc in use | malloc free | '
          'arenas | arena free | mmap chunks | hub values | memwatch values | gc objects |')
    print('|---' * 14 + '|')
    for p in points:
        print(f'| {p["phase"]} | {p["epoch"]} | {p["iter"]} | {p["anon"]:.1f} | '
              f'{p["smaps"]["heap"]:.1f} | {p["smaps"]["anon_mmap"]:.1f} | '
              f'{p["malloc"]["in_use"]:.1f} | {p["malloc"]["free"]:.1f} | '
              f'{p["arenas"]["arenas"]} | {p["arenas"]["free"]:.1f} | '
              f'{p["arenas"]["mmap_chunks"]} | {p["hub"]["total_values"]} | '
              f'{p["hooks"].get("memwatch_values")} | {p["gc_objects"]} |')
    if data['tracemalloc']:
        last = [p for p in points if 'vs_epoch2' in p.get('tracemalloc', {})][-1]
        first_ref = next(p for p in points if p['phase'] == 'after_train_epoch'
                         and p['epoch'] == 1)
        print(f'\ntracemalloc: traced {first_ref["tracemalloc"]["traced_mib"]} MiB at the end '
              f'of epoch 2 -> {last["tracemalloc"]["traced_mib"]} MiB at {last["phase"]} '
              f'(epoch {last["epoch"]}); top differences by file:line:')
        for s in last['tracemalloc']['vs_epoch2']:
            print(f'  {s["kib"]:+9.1f} KiB {s["count"]:+7d} blocks  {s["site"]}')
    memory = path.with_name('memory.json')
    if memory.exists():
        replay_verdicts(json.loads(memory.read_text()))


def replay_verdicts(mem: dict) -> None:
    """The main process's verdict as MemoryWatchHook gave it at each epoch end (default
    thresholds), replayed from memory.json."""
    from mmdet_ext.engine.memory import MAIN, VerdictThresholds, judge_series
    s = mem['series'][MAIN]
    starts = sorted(int(v) for v in mem['epoch_starts'].values())
    ends = starts[1:] + [s['iter'][-1]]
    lengths = sorted(b - a for a, b in zip(starts, starts[1:]))
    per_epoch = lengths[len(lengths) // 2] if lengths else None
    print(f'\nmemory.json: {len(s["iter"])} main samples, iterations {s["iter"][0]}..'
          f'{s["iter"][-1]}, {per_epoch} per epoch; main verdict at each epoch end:')
    for epoch, end in enumerate(ends, 1):
        n = sum(1 for it in s['iter'] if it <= end)
        v = judge_series(MAIN, s['iter'][:n], s['pid'][:n], s['anon'][:n], None, per_epoch,
                         VerdictThresholds())
        print(f'  epoch {epoch:2d} (iter {end}): {v.summary()}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', nargs='?',
                        default=str(REPO / 'configs/mask-rcnn_r18_fpn_toy-coco.py'))
    parser.add_argument('--work-dir', default=str(REPO / 'work_dirs/demo_main_memory'))
    parser.add_argument('--tracemalloc', type=int, default=None, metavar='NFRAMES',
                        help='trace Python allocations (started before any import)')
    parser.add_argument('--summarize', type=Path, default=None, metavar='PROBE_JSON')
    from mmengine.config import DictAction
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args()
    if args.summarize is not None:
        summarize(args.summarize)
    else:
        run(args)


if __name__ == '__main__':
    main()
