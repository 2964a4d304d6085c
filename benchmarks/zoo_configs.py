"""The user's path: mmdet 3.3's zoo configs, stock vs ``adopt(globals())``, DataLoader throughput.

Issue 50's "Measure": what a user gets who takes mmdet's zoo config and adds the two adopt lines.
Rows (read with ``mmdet::``, at the zoo's real sizes: nothing is shrunk):

- Mask R-CNN 1x (``mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py``),
- Mask R-CNN ms-poly 3x (``mask_rcnn/mask-rcnn_r50_fpn_ms-poly-3x_coco.py``, ``RepeatDataset`` x3),
- the LSJ strong baseline (``strong_baselines/mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_
  lsj-100e_coco.py``, ``RepeatDataset`` x4),
- Mask2Former LSJ (``mask2former/mask2former_r50_8xb2-lsj-50e_coco.py``),
- RTMDet-Ins tiny (``rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py``, CachedMosaic/CachedMixUp).

Variants, each a real config file read with ``Config.fromfile``:

- stock: ``_base_ = 'mmdet::...'`` and a ``train_dataloader`` that points ``data_root``,
  ``ann_file`` and ``data_prefix`` at the generated set and sets batch size 4, 2 workers,
  persistent workers (nothing else changes);
- stock best (Mask R-CNN 1x, and the rows ``--stock-best`` names): the same plus the pipeline
  with mmdet's fastest settings,
  ``LoadImageFromFile(imdecode_backend='turbojpeg')`` and ``LoadAnnotations(poly2mask=False)``;
- adopted: the stock file plus ``from mmdet_ext.adopt import adopt  # noqa: E402`` and
  ``adopt(globals())`` as its last line;
- ceiling (Mask R-CNN 1x only): the physical ceiling of the pixels alone, what no loader of this
  config can beat while it gives mmdet's bits: the same files read, decoded (libjpeg) and resized
  to the config's own ``Resize`` scale (OpenCV's bilinear, as mmcv.imresize), every other one
  flipped, written channel-planar into one buffer, on one native thread per pinned core
  (``batched_fetch.DecodeOnThreads``, the "fused ceiling" of batched_fetch.py); no annotations,
  no Python per sample, nothing sent between processes.

Each loader is built as mmengine's Runner builds it, ``Runner.build_dataloader(
cfg.train_dataloader, seed=0)`` after ``set_multi_processing(**cfg.env_cfg.mp_cfg)`` (the Runner's
``setup_env``: OpenCV threads off, fork). The adopted variant then gets what the adopted runtime's
hooks do to the train loader before the first batch, called directly rather than through a Runner
(no model is built): ``WorkerDefaultsHook(...).apply(loader)`` with the config's own hook settings;
the model preprocessor's ``pad_size_divisor`` on every wrapped dataset that has that attribute (what
``WorkerDefaultsHook.before_run`` does in trees after issue 50's divisor change; a getattr check, so
older trees are measured as they are); ``HangWatchdogHook``'s worker stack dumps
(``install_worker_stack_dumps``: a ``worker_init_fn`` wrapper); and ``ExactResumeHook``'s
``install_resumable_loading(loader, seed=0, rank=0)``.

Data: ``benchmarks/batched_fetch.make_dataset``: 640x480 quality-90 JPEGs cut from real
photographs (``benchmarks/photos.py``) with COCO-like instances (~7.3 an image, polygons, 1% crowd
RLEs) and COCO's 80 class names, in a temporary folder.

Measured as ``batched_fetch.py`` measures (its ``measure``, ``shut_down``, ``pin_to``): every
contender pinned to ``--cores``; one untimed pass (workers started, mosaic caches filled), then
``--passes`` timed passes; samples/s and CPU ms per sample (user + system of the process that
iterates and its DataLoader workers, psutil); the loader is built for each measurement and shut
down after it; best of ``--rounds`` interleaved rounds (every variant of every row once per round).
An epoch of a ``RepeatDataset`` row is ``times`` x the images.

Processes: the stock variants run in one child process with this checkout on ``PYTHONPATH``; the
adopted variant runs in one child per ``--tree NAME=PATH`` with that checkout (its ``mmdet_ext``,
its built extension, its ``benchmarks`` helpers) on ``PYTHONPATH``, so before and after come from
one run. Children measure one at a time, on the orchestrator's command.

    PYTHONPATH=. python3 benchmarks/zoo_configs.py [--images 64] [--passes 2] [--rounds 3]
        [--tree old=/work/old --tree new=.] [--only mask-rcnn_1x ...]
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
ROWS = [
    ('mask-rcnn_1x', 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'),
    ('mask-rcnn_ms-poly-3x', 'mask_rcnn/mask-rcnn_r50_fpn_ms-poly-3x_coco.py'),
    ('strong-baseline_lsj',
     'strong_baselines/mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_lsj-100e_coco.py'),
    ('mask2former_lsj', 'mask2former/mask2former_r50_8xb2-lsj-50e_coco.py'),
    ('rtmdet-ins_tiny', 'rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py'),
]
STOCK_BEST_ROW = 'mask-rcnn_1x'
WIDTH, HEIGHT = 640, 480
ANN_FILE = 'annotations/instances_train.json'
ADOPT_LINES = 'from mmdet_ext.adopt import adopt  # noqa: E402\nadopt(globals())\n'
RESULT = 'ZOO_CONFIGS_RESULT '


# --- the config files ------------------------------------------------------------------------

def _zoo_config(zoo: str):
    import mmdet
    from mmengine.config import Config
    return Config.fromfile(str(Path(mmdet.__file__).parent / '.mim' / 'configs' / zoo))


def _wrapper_depth(dataset) -> int:
    """How many dataset wrappers (``dataset=``) sit above the dataset that reads the files."""
    depth = 0
    while isinstance(dataset.get('dataset'), dict):
        dataset, depth = dataset['dataset'], depth + 1
    return depth


def _best_pipeline(pipeline: list) -> list:
    """mmdet's fastest loading settings: turbojpeg decode, polygons kept as polygons."""
    best = []
    for transform in pipeline:
        transform = dict(transform)
        if transform['type'] == 'LoadImageFromFile':
            transform['imdecode_backend'] = 'turbojpeg'
        elif transform['type'] == 'LoadAnnotations':
            transform['poly2mask'] = False
        best.append(transform)
    return best


def config_text(zoo: str, data_root: Path, variant: str, batch_size: int, workers: int) -> str:
    """The user's config file for ``variant`` ('stock', 'stock best', 'adopted')."""
    base = _zoo_config(zoo).train_dataloader.dataset
    innermost = base
    for _ in range(_wrapper_depth(base)):
        innermost = innermost['dataset']
    data = (f"data_root='{data_root}/', ann_file='{ANN_FILE}', "
            "data_prefix=dict(img='train/')")
    if variant == 'stock best':
        data += f',\n    pipeline={_best_pipeline(innermost["pipeline"])!r}'
    dataset = f'dict({data})'
    for _ in range(_wrapper_depth(base)):
        dataset = f'dict(dataset={dataset})'
    text = (f"_base_ = 'mmdet::{zoo}'\n"
            f'train_dataloader = dict(\n    batch_size={batch_size}, num_workers={workers}, '
            f'persistent_workers=True,\n    dataset={dataset})\n')
    return text + (ADOPT_LINES if variant == 'adopted' else '')


# --- a child: builds and measures loaders on command -----------------------------------------

def _datasets(dataset) -> list:
    """The dataset and every dataset it wraps (``dataset`` / ``datasets`` attributes)."""
    found, todo = [], [dataset]
    while todo:
        current = todo.pop()
        found.append(current)
        if getattr(current, 'dataset', None) is not None:
            todo.append(current.dataset)
        todo.extend(getattr(current, 'datasets', None) or [])
    return found


def prepare_adopted(loader, cfg, work_dir: str) -> list[str]:
    """What the adopted runtime's hooks do to the train loader before training (module doc), in
    the Runner's hook order; ``work_dir`` stands for the Runner's. Returns what was done."""
    from mmdet_ext.datasets.sample_seeds import install_resumable_loading
    from mmdet_ext.engine.hooks import WorkerDefaultsHook
    done = []
    hooks = {h['type']: {k: v for k, v in h.items() if k != 'type'}
             for h in cfg.get('custom_hooks', [])}
    if 'WorkerDefaultsHook' in hooks:  # before_run, priority VERY_HIGH
        WorkerDefaultsHook(**hooks['WorkerDefaultsHook']).apply(
            loader, config=cfg.train_dataloader.to_dict())
        done.append(f'WorkerDefaultsHook({hooks["WorkerDefaultsHook"]}).apply')
    divisor = cfg.model.get('data_preprocessor', {}).get('pad_size_divisor', 1)
    for dataset in _datasets(loader.dataset):
        if hasattr(dataset, 'pad_size_divisor'):
            dataset.pad_size_divisor = divisor
            done.append(f'{type(dataset).__name__}.pad_size_divisor={divisor}')
    if 'HangWatchdogHook' in hooks:  # before_run, priority LOWEST: wraps worker_init_fn
        try:
            from mmdet_ext.engine.hooks.hang_watchdog_hook import install_worker_stack_dumps
        except ImportError:
            pass
        else:
            install_worker_stack_dumps(loader, work_dir)
            done.append('install_worker_stack_dumps')
    install_resumable_loading(loader, seed=0, rank=0)  # ExactResumeHook.before_train
    done.append('install_resumable_loading')
    return done


def _collate_name(collate) -> str:
    func = getattr(collate, 'func', collate)
    given = getattr(collate, 'keywords', None) or {}
    keywords = ', '.join(f'{k}={v!r}' for k, v in given.items())
    return f'{getattr(func, "__name__", type(func).__name__)}({keywords})'


def measure_config(path: str, adopted: bool, passes: int) -> dict:
    from benchmarks.batched_fetch import measure, shut_down
    from mmengine.config import Config
    from mmengine.runner import Runner
    from mmengine.utils.dl_utils import set_multi_processing
    cfg = Config.fromfile(path)
    set_multi_processing(**cfg.get('env_cfg', {}).get('mp_cfg', {}), distributed=False)
    loader = Runner.build_dataloader(cfg.train_dataloader, seed=0)
    work_dir = tempfile.mkdtemp(prefix='zoo_configs_')
    try:
        done = prepare_adopted(loader, cfg, work_dir) if adopted else []
        rate, cpu = measure(loader, passes)
        epoch = sum(1 for _ in loader.batch_sampler) if loader.batch_sampler else len(loader)
        return dict(rate=rate, cpu=cpu, dataset=type(loader.dataset).__name__,
                    samples_per_epoch=len(loader.dataset), batches_per_epoch=epoch,
                    collate=_collate_name(loader.collate_fn),
                    workers=loader.num_workers, prepared=done)
    finally:
        shut_down(loader)
        shutil.rmtree(work_dir, ignore_errors=True)


def _train_resize(cfg) -> tuple:
    """The (w, h) scale of the innermost train pipeline's ``Resize`` (keep_ratio)."""
    dataset = cfg.train_dataloader.dataset
    while isinstance(dataset.get('dataset'), dict):
        dataset = dataset['dataset']
    resizes = [t for t in dataset['pipeline'] if t['type'] == 'Resize']
    if len(resizes) != 1 or not resizes[0].get('keep_ratio'):
        raise ValueError(f'no single keep_ratio Resize to measure a ceiling for: {resizes}')
    return tuple(resizes[0]['scale'])


def measure_ceiling(path: str, passes: int) -> dict:
    """The ceiling variant (module doc) for the config at ``path``."""
    from benchmarks.batched_fetch import DecodeOnThreads, measure
    from mmengine.config import Config
    cfg = Config.fromfile(path)
    data = cfg.train_dataloader.dataset
    while isinstance(data.get('dataset'), dict):
        data = data['dataset']
    images = Path(data['data_root']) / data['data_prefix']['img']
    paths = sorted(str(p) for p in images.iterdir())
    threads = len(os.sched_getaffinity(0))
    scale = _train_resize(cfg)
    rate, cpu = measure(DecodeOnThreads(paths, cfg.train_dataloader.batch_size, threads, scale),
                        passes)
    return dict(rate=rate, cpu=cpu, dataset=f'{len(paths)} files, resized to {scale}',
                samples_per_epoch=len(paths),
                batches_per_epoch=-(-len(paths) // cfg.train_dataloader.batch_size),
                collate='none', workers=f'0 ({threads} native threads)', prepared=[])


def child(cores: str, stock: bool) -> None:
    """Reads one JSON command a line on stdin, answers one ``RESULT`` line each."""
    import mmcv
    import mmdet
    import mmengine
    import torch
    from benchmarks.batched_fetch import pin_to
    from mmdet.utils import register_all_modules
    # The stock child: mmcv's turbojpeg decoder made (mmcv.use_backend), as batched_fetch.py's
    # mmdet-best rows have it; without it LoadImageFromFile(imdecode_backend='turbojpeg') fails.
    # Variants that do not ask for turbojpeg are unaffected (mmdet passes its backend by name).
    pin_to(cores, mmdet_rows=stock)
    register_all_modules(init_default_scope=True)
    try:
        import mmdet_ext
        ext = dict(mmdet_ext=getattr(mmdet_ext, '__version__', '?'),
                   mmdet_ext_path=str(Path(mmdet_ext.__file__).resolve().parents[1]))
    except ImportError as err:
        ext = dict(mmdet_ext=f'not importable: {err}')
    try:
        import turbojpeg
        turbo = turbojpeg.__version__
    except ImportError:
        turbo = None
    hello = dict(python=platform.python_version(), torch=torch.__version__,
                 mmdet=mmdet.__version__, mmcv=mmcv.__version__, mmengine=mmengine.__version__,
                 turbojpeg=turbo, **ext)
    print(RESULT + json.dumps(hello), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if command.get('ceiling'):
                result = measure_ceiling(command['config'], command['passes'])
            else:
                result = measure_config(command['config'], command['adopted'],
                                        command['passes'])
        except Exception as err:  # noqa: BLE001 -- the cell reports it
            # A worker's exception carries its traceback in the message: its last line is kept.
            last = [line for line in str(err).splitlines() if line.strip()][-1:] or ['']
            result = dict(error=f'{type(err).__name__}: {last[0]}'[:300])
        print(RESULT + json.dumps(result), flush=True)


class Child:
    """One child process with ``pythonpath`` first on its path."""

    def __init__(self, pythonpath: Path, cores: str, stock: bool) -> None:
        env = dict(os.environ, PYTHONPATH=str(pythonpath), OMP_NUM_THREADS='1')
        self.process = subprocess.Popen(
            [sys.executable, __file__, '--child', '--cores', cores] + ['--stock'] * stock,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=env, cwd=tempfile.gettempdir())
        self.info = self._answer()

    def _answer(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(RESULT):
                return json.loads(line.removeprefix(RESULT))
        raise RuntimeError(f'child exited with {self.process.wait()}')

    def measure(self, config: Path, adopted: bool, passes: int, ceiling: bool = False) -> dict:
        self.process.stdin.write(json.dumps(dict(config=str(config), adopted=adopted,
                                                 passes=passes, ceiling=ceiling)) + '\n')
        self.process.stdin.flush()
        return self._answer()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


# --- the orchestrator ------------------------------------------------------------------------

def git_state(path: Path) -> str:
    def git(*args):
        return subprocess.run(['git', '-C', str(path), *args], capture_output=True,
                              text=True).stdout.strip()
    commit = git('rev-parse', '--short', 'HEAD') or 'not a git checkout'
    changed = len(git('status', '--porcelain', '--untracked-files=no').splitlines())
    return f'{commit}' + (f' + {changed} uncommitted tracked files' if changed else '')


def code_identity(path: Path) -> str:
    """The git tree ids of the checkout's mmdet_ext/ and csrc/ at HEAD, and 'dirty' where a
    tracked file there has uncommitted changes: equal identities, the same plugin code."""
    def git(*args):
        return subprocess.run(['git', '-C', str(path), *args], capture_output=True,
                              text=True).stdout.strip()
    ids = [git('rev-parse', f'HEAD:{folder}')[:10] or '?' for folder in ('mmdet_ext', 'csrc')]
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', 'mmdet_ext', 'csrc')
    return '/'.join(ids) + (' dirty' if dirty else '')


def cell(result: dict) -> str:
    if 'error' in result:
        return 'error: ' + result['error'].replace('|', '\\|')
    return f'{result["rate"]:.1f} ({1000 * result["cpu"]:.0f})'


def same_code(trees: dict) -> str:
    identities = {name: code_identity(path) for name, path in trees.items()}
    if len(trees) > 1 and len(set(identities.values())) == 1 and 'dirty' not in next(
            iter(identities.values())) and '?' not in next(iter(identities.values())):
        return (' Every tree holds the same `mmdet_ext/` and `csrc/` (git trees '
                f'{next(iter(identities.values()))}): their adopted cells differ by this run\'s '
                'noise alone.')
    return ' `mmdet_ext/`/`csrc/` git trees: ' + '; '.join(
        f'{name} {identity}' for name, identity in identities.items()) + '.'


def ratio(a: Optional[dict], b: Optional[dict], key: str = 'rate') -> str:
    if a is None or b is None or 'error' in a or 'error' in b:
        return '-'
    return f'{a[key] / b[key]:.2f}x'


def report(args, trees, results, infos, loads, wall, command) -> list[str]:
    tree_names = list(trees)
    stock_info = infos['stock']
    turbo = stock_info.get('turbojpeg')
    lines = [
        "# The user's path: mmdet 3.3 zoo configs, stock vs `adopt(globals())` (issue 50)", '',
        f'Command: `{command}` ({wall / 60:.1f} min wall).', '',
        f'Machine: {platform.machine()}, {os.cpu_count()} CPUs, every process pinned to CPUs '
        f'{args.cores}; Python {stock_info["python"]}, torch {stock_info["torch"]}, mmengine '
        f'{stock_info["mmengine"]}, mmcv {stock_info["mmcv"]}, mmdet {stock_info["mmdet"]}, '
        f'PyTurboJPEG {turbo or "not installed"}. Load average (1, 5, 15 min) before: '
        f'{", ".join(f"{v:.2f}" for v in loads[0])}; after: '
        f'{", ".join(f"{v:.2f}" for v in loads[1])}.', '',
        'Trees (the adopted variant runs with each on `PYTHONPATH`; the stock variants with this '
        'checkout): ' + '; '.join(
            f'**{name}** = `{path}` at {git_state(path)} (mmdet_ext '
            f'{infos[name].get("mmdet_ext")} from `{infos[name].get("mmdet_ext_path")}`)'
            for name, path in trees.items()) + '.' + same_code(trees), '',
        f'Data: {args.images} real photographs (benchmarks/photos.py) as {WIDTH}x{HEIGHT} '
        'quality-90 JPEGs with COCO-like instances (batched_fetch.make_dataset). Each config is '
        'the zoo file (`mmdet::`) with only `data_root`/`ann_file`/`data_prefix` pointed at the '
        f'set and batch size {args.batch_size}, {args.workers} persistent workers; the zoo\'s '
        'own pipelines at their real sizes, samplers and dataset wrappers. Loaders built as the '
        'Runner builds them (`Runner.build_dataloader(cfg.train_dataloader, seed=0)` after the '
        "Runner's `set_multi_processing`); the adopted variant then gets what its runtime hooks "
        'do to the train loader before training, called directly, not through a Runner: '
        '`WorkerDefaultsHook.apply` (the config\'s settings), the preprocessor\'s '
        '`pad_size_divisor` on datasets that have that attribute, HangWatchdogHook\'s worker '
        'stack dumps (`install_worker_stack_dumps`, its `worker_init_fn` wrapper), and '
        '`install_resumable_loading(loader, seed=0, rank=0)` (ExactResumeHook). A real Runner '
        '(`Runner.from_cfg` + the hooks\' `before_run`/`before_train`) gives the Mask R-CNN 1x '
        'loader the same dataset, batch sampler, collate, workers, timeout and worker_init_fn '
        'chain (checked by hand when this script was written). Best of '
        f'{args.rounds} interleaved rounds of one warm-up pass + {args.passes} timed passes.', '',
        'Cells: samples/s (CPU ms per sample: user + system of the iterating process and its '
        'DataLoader workers over the timed passes, divided by the samples).', '',
        '| config | stock | stock best | ' + ' | '.join(f'adopted ({n})' for n in tree_names) +
        ' | ' + ' | '.join(f'{n} / stock' for n in tree_names) + ' | ' +
        ' | '.join(f'{n} / stock best' for n in tree_names) + ' | ' +
        ' | '.join(f'CPU ms: {n} / stock' for n in tree_names) + ' |',
        '|---|' + '---:|' * (2 + 4 * len(tree_names)),
    ]
    details = []
    for name, zoo in ROWS:
        if name not in results:
            continue
        row = results[name]
        stock, best = row['stock'], row.get('stock best')

        adopted = [row[f'adopted ({n})'] for n in tree_names]
        lines.append(
            f'| {name} | {cell(stock)} | {cell(best) if best else "-"} | ' +
            ' | '.join(cell(a) for a in adopted) + ' | ' +
            ' | '.join(ratio(a, stock) for a in adopted) + ' | ' +
            ' | '.join(ratio(a, best) for a in adopted) + ' | ' +
            ' | '.join(ratio(a, stock, 'cpu') for a in adopted) + ' |')
        variants = '; '.join(
            f'{variant}: ' + (result['error'] if 'error' in result else
                              f'{result["dataset"]}, {result["samples_per_epoch"]} samples / '
                              f'{result["batches_per_epoch"]} batches an epoch, collate '
                              f'{result["collate"]}, {result["workers"]} workers, rounds '
                              + ', '.join(f'{r:.1f}' for r in result['rounds']) + ' /s'
                              + (f', prepared: {", ".join(result["prepared"])}'
                                 if result['prepared'] else ''))
            for variant, result in row.items())
        details.append(f'- {name} (`{zoo}`): {variants}.')
    ceilings = [(name, row) for name, row in ((n, results[n]) for n, _ in ROWS if n in results)
                if 'ceiling' in row]
    if ceilings:
        lines += ['', 'Against the physical ceiling of the pixels alone (the ceiling variant: read, '
                  'decode, resize to the config\'s scale, flip, planar, one native thread per '
                  'core, nothing else):', '',
                  '| config | ceiling | stock best / ceiling | ' +
                  ' | '.join(f'{n} / ceiling' for n in tree_names) + ' | ceiling / stock best |',
                  '|---|' + '---:|' * (3 + len(tree_names))]
        for name, row in ceilings:
            ceiling = row['ceiling']
            lines.append(f'| {name} | {cell(ceiling)} | {ratio(row.get("stock best"), ceiling)} | '
                         + ' | '.join(ratio(row[f'adopted ({n})'], ceiling) for n in tree_names)
                         + f' | {ratio(ceiling, row.get("stock best"))} |')
    lines += ['', '"stock best" (Mask R-CNN 1x, and the rows `--stock-best` names): '
              '`LoadImageFromFile(imdecode_backend='
              "'turbojpeg')` and `LoadAnnotations(poly2mask=False)`, with mmcv's turbojpeg "
              "decoder made in the stock process (`mmcv.use_backend('turbojpeg')`, as "
              'batched_fetch.py does: without it that backend fails in mmcv 2.1)' +
              ('' if turbo else ' -- PyTurboJPEG is not installed here, so that cell is an '
               'error') + '. Issue 50\'s goals: no config slower than before; Mask R-CNN 1x '
              'adopted >= 2.5x stock best. The CPU ratio is adopted CPU ms / stock CPU ms '
              '(below 1: less CPU per sample).', '', '## Every variant', '', *details]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--stock', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--cores', default='0,1', help='the CPUs every process is pinned to')
    parser.add_argument('--passes', type=int, default=2)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--tree', action='append', metavar='NAME=PATH',
                        help='a checkout to run the adopted variant with (repeatable); '
                        'default: this one, as "this"')
    parser.add_argument('--only', nargs='*', help='row names (default: all)')
    parser.add_argument('--stock-best', nargs='*', default=[], metavar='ROW',
                        help=f'rows measured with mmdet\'s fastest settings too (always: '
                             f'{STOCK_BEST_ROW})')
    parser.add_argument('--out', type=Path, default=REPO / 'benchmarks/results/zoo_configs.md')
    args = parser.parse_args()
    if args.child:
        child(args.cores, args.stock)
        return

    sys.path.insert(0, str(REPO))
    from benchmarks import write_report
    from benchmarks.batched_fetch import make_dataset
    trees = {'this': REPO}
    if args.tree:
        trees = {spec.split('=', 1)[0]: Path(spec.split('=', 1)[1]).resolve()
                 for spec in args.tree}
    rows = [(n, z) for n, z in ROWS if not args.only or n in args.only]
    best_rows = {STOCK_BEST_ROW, *args.stock_best}
    command = ' '.join(['PYTHONPATH=. python3 benchmarks/zoo_configs.py',
                        *sys.argv[1:]])
    started = time.monotonic()
    loads = [os.getloadavg()]
    children = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / 'coco'
        make_dataset(root, args.images, WIDTH, HEIGHT, 'photos')
        plan = []  # (row, variant, config file, child name)
        for name, zoo in rows:
            variants = ['stock'] + ['stock best'] * (name in best_rows) + \
                ['ceiling'] * (name == STOCK_BEST_ROW) + ['adopted']
            for variant in variants:
                path = Path(tmp) / f'{name}_{variant.replace(" ", "_")}.py'
                path.write_text(config_text(zoo, root, variant, args.batch_size, args.workers))
                if variant == 'adopted':
                    plan += [(name, f'adopted ({tree})', path, tree) for tree in trees]
                else:
                    plan.append((name, variant, path, 'stock'))
        try:
            children['stock'] = Child(REPO, args.cores, stock=True)
            for tree, path in trees.items():
                children[tree] = Child(path, args.cores, stock=False)
            results: dict = {}
            all_rounds: dict = {}
            for round_index in range(args.rounds):
                for name, variant, path, who in plan:
                    result = children[who].measure(path, who != 'stock', args.passes,
                                                   ceiling=variant == 'ceiling')
                    rounds = all_rounds.setdefault((name, variant), [])
                    rounds.append(result.get('rate', 0.0))
                    kept = results.setdefault(name, {}).get(variant)
                    if kept is None or 'error' in kept or result.get('rate', 0) > kept['rate']:
                        results[name][variant] = dict(result, rounds=rounds)
                    print(f'round {round_index + 1} {name} {variant}: {cell(result)}',
                          flush=True)
        finally:
            for process in children.values():
                process.close()
    loads.append(os.getloadavg())
    infos = {name: c.info for name, c in children.items()}
    write_report(args.out, report(args, trees, results, infos, loads,
                                  time.monotonic() - started, command))


if __name__ == '__main__':
    main()
