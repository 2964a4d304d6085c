"""Compatibility matrix: mmdet 3.3's instance-segmentation zoo configs, stock vs adopted, on CPU.

    python3 tools/zoo_matrix.py --iters 2 --markdown docs/zoo_matrix.md
    python3 tools/zoo_matrix.py --only mask-rcnn_1x copy-paste_lsj   # a few rows

For every config, two fresh processes train ``--iters`` seeded iterations on the toy COCO set:
``stock`` reads the zoo config with only the data pointed at the toy set; ``plugin`` is the same
config with ``adopt(globals())`` as its last line (mmdet_ext's dataset, loaders, collate,
preprocessor and hooks). Both get the same CPU-sized settings (below), so the only difference is
the plugin. Each run reports ok or the exception, and its losses per iteration; the table compares
the first iteration's losses.

CPU-sized settings, applied to both variants alike (they change the sizes, not the kinds, of what
the pipelines and models do):
- every image scale, crop and pad size in the train pipeline and batch augments divided by
  ``--shrink`` (COCO's 1333x800 becomes 333x200: the toy images are 320x240);
- no pretrained weights (nothing is downloaded); ``num_classes`` 80 -> the toy set's 4 (and
  per-class loss weights cut to match);
- ``AmpOptimWrapper`` -> ``OptimWrapper`` (AMP needs a GPU), ``SyncBN``/``MMSyncBN`` -> ``BN``
  (one process);
- batch size 2, no workers, no validation, no checkpoints, seed 0.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOY_CLASSES = ('circle', 'rectangle', 'triangle', 'ring')

# (row name, zoo config); the rows the issue asks for, the cheapest config of each family.
ZOO = [
    ('mask-rcnn_1x', 'mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py'),
    ('mask-rcnn_ms-poly-3x', 'mask_rcnn/mask-rcnn_r50_fpn_ms-poly-3x_coco.py'),
    ('cascade-mask-rcnn_1x', 'cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py'),
    ('strong-baseline_lsj',
     'strong_baselines/mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_lsj-100e_coco.py'),
    ('copy-paste_lsj', 'simple_copy_paste/'
     'mask-rcnn_r50_fpn_rpn-2conv_4conv1fc_syncbn-all_32xb2-ssj-scp-90k_coco.py'),
    ('solo_1x', 'solo/solo_r50_fpn_1x_coco.py'),
    ('solov2_1x', 'solov2/solov2_r50_fpn_1x_coco.py'),
    ('condinst', 'condinst/condinst_r50_fpn_ms-poly-90k_coco_instance.py'),
    ('boxinst', 'boxinst/boxinst_r50_fpn_ms-90k_coco.py'),
    ('rtmdet-ins_tiny', 'rtmdet/rtmdet-ins_tiny_8xb32-300e_coco.py'),
    ('mask2former', 'mask2former/mask2former_r50_8xb2-lsj-50e_coco.py'),
    ('maskformer', 'maskformer/maskformer_r50_ms-16xb1-75e_coco.py'),
    ('yolact', 'yolact/yolact_r50_1xb8-55e_coco.py'),
    ('queryinst_1x', 'queryinst/queryinst_r50_fpn_1x_coco.py'),
    ('point-rend', 'point_rend/point-rend_r50-caffe_fpn_ms-1x_coco.py'),
    ('ms-rcnn_1x', 'ms_rcnn/ms-rcnn_r50_fpn_1x_coco.py'),
    ('scnet_1x', 'scnet/scnet_r50_fpn_1x_coco.py'),
    ('htc_1x', 'htc/htc_r50_fpn_1x_coco.py'),
]
SIZE_KEYS = ('scale', 'scales', 'img_scale', 'crop_size', 'size')


def _config_text(zoo_config: str, plugin: bool) -> str:
    """The user's config: the zoo config, plus ``adopt`` for the plugin (the data: ``_prepare``)."""
    text = f"_base_ = 'mmdet::{zoo_config}'\n"
    if plugin:
        text += 'from mmdet_ext.adopt import adopt  # noqa: E402\nadopt(globals())\n'
    return text


def _nested_datasets(dataset: dict) -> list:
    """The dataset and every dataset it wraps (RepeatDataset, MultiImageMixDataset, ...)."""
    chain = [dataset]
    while isinstance(chain[-1].get('dataset'), dict):
        chain.append(chain[-1]['dataset'])
    return chain


def _shrunk(value, shrink: int):
    """Sizes (an int pair, or a list of them) divided by ``shrink``; anything else unchanged."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value):
        return type(value)(max(v // shrink, 32) for v in value)
    if isinstance(value, (tuple, list)) and value and all(
            isinstance(v, (tuple, list)) for v in value):
        return type(value)(_shrunk(v, shrink) for v in value)
    return value


def _shrink_transforms(transforms: list, shrink: int) -> None:
    for transform in transforms:
        for key in SIZE_KEYS:
            if key in transform:
                transform[key] = _shrunk(transform[key], shrink)
        for nested_key in ('transforms', 'pipeline'):
            nested = transform.get(nested_key)
            if isinstance(nested, list):
                # RandomChoice holds lists of transform lists; RandomApply a list of transforms.
                for item in nested:
                    _shrink_transforms(item if isinstance(item, list) else [item], shrink)


def _cpu_sized(node, classes: int):
    """Model settings for one CPU process: no downloads, toy classes, plain BN."""
    if isinstance(node, dict):
        if node.get('type') == 'Pretrained':
            return None
        out = {}
        for key, value in node.items():
            if key == 'num_classes' and value == 80:
                value = classes
            elif key == 'num_things_classes' and value == 80:
                value = classes
            elif key == 'num_stuff_classes':
                value = 0
            elif key == 'class_weight' and isinstance(value, list) and len(value) == 81:
                value = value[:classes] + value[-1:]  # per class, then the "no object" class
            elif key == 'type' and value in ('SyncBN', 'MMSyncBN'):
                value = 'BN'
            out[key] = _cpu_sized(value, classes)
        return out
    if isinstance(node, list):
        return [_cpu_sized(v, classes) for v in node]
    return node


def _prepare(cfg, data_root: Path, iters: int, shrink: int, work_dir: str) -> None:
    """The toy data and the CPU-sized settings of the module doc, applied in place."""
    cfg.model = _cpu_sized(cfg.model.to_dict(), len(TOY_CLASSES))
    if 'panoptic_fusion_head' in cfg.model:  # Mask2Former/MaskFormer instance-only
        cfg.model['panoptic_fusion_head']['num_things_classes'] = len(TOY_CLASSES)
        cfg.model['panoptic_fusion_head']['num_stuff_classes'] = 0
    for augment in cfg.model.get('data_preprocessor', {}).get('batch_augments') or []:
        _shrink_transforms([augment], shrink)
    loader = cfg.train_dataloader
    loader.batch_size, loader.num_workers, loader.persistent_workers = 2, 0, False
    datasets = _nested_datasets(loader.dataset)  # the data goes into the innermost one
    datasets[-1].update(data_root=f'{data_root}/', metainfo=dict(classes=TOY_CLASSES),
                        ann_file='annotations/instances_train.json', data_prefix=dict(img='train/'))
    for dataset in datasets:  # a wrapper may have a pipeline of its own (copy-paste, mosaic)
        _shrink_transforms(dataset.get('pipeline') or [], shrink)
    optim = cfg.optim_wrapper
    if optim.get('type') == 'AmpOptimWrapper':
        optim.type = 'OptimWrapper'
        optim.pop('loss_scale', None)
    cfg.train_cfg = dict(type='IterBasedTrainLoop', max_iters=iters, val_interval=10**9)
    for key in ('val_dataloader', 'val_cfg', 'val_evaluator', 'test_dataloader', 'test_cfg',
                'test_evaluator', 'auto_scale_lr'):
        cfg[key] = None
    cfg.param_scheduler = []
    cfg.default_hooks.checkpoint.interval = 10**9
    cfg.default_hooks.logger.interval = 1
    cfg.custom_hooks = [h for h in cfg.get('custom_hooks', [])
                        if h['type'] not in ('PipelineSwitchHook', 'EMAHook')]
    cfg.randomness = dict(seed=0)
    cfg.launcher = 'none'
    cfg.work_dir = work_dir
    cfg.load_from, cfg.resume = None, False
    cfg.env_cfg = dict(cudnn_benchmark=False, mp_cfg=dict(mp_start_method='fork'),
                       dist_cfg=dict(backend='gloo'))


def run_child(zoo_config: str, variant: str, data_root: Path, iters: int, shrink: int) -> dict:
    """One training run in this process; its losses per iteration, or the exception."""
    import torch
    torch.set_num_threads(1)
    if variant == 'plugin':
        import mmdet_ext  # noqa: F401  (registers the types and the mmdet_ext:: scope)
    from mmdet.utils import register_all_modules
    from mmengine.config import Config
    from mmengine.runner import Runner
    register_all_modules()
    with tempfile.TemporaryDirectory() as work_dir:
        config_path = Path(work_dir) / 'config.py'
        config_path.write_text(_config_text(zoo_config, variant == 'plugin'))
        cfg = Config.fromfile(str(config_path))
        _prepare(cfg, data_root, iters, shrink, work_dir)
        started = time.monotonic()
        runner = Runner.from_cfg(cfg)
        runner.train()
        losses = {}
        for name, buffer in runner.message_hub.log_scalars.items():
            if name.startswith('train/') and 'loss' in name:
                losses[name.removeprefix('train/')] = [float(v) for v in buffer.data[0]]
        masks_type = None
        sample = runner.train_dataloader.dataset[0]
        if 'gt_instances' in sample['data_samples']:
            masks = sample['data_samples'].gt_instances.get('masks')
            masks_type = type(masks).__name__ if masks is not None else None
        return dict(status='ok', losses=losses, masks=masks_type,
                    seconds=round(time.monotonic() - started, 1))


def run_in_subprocess(zoo_config: str, variant: str, data_root: Path, iters: int = 2,
                      shrink: int = 4, timeout: int = 900) -> dict:
    """One run (``variant`` 'stock' or 'plugin') in a fresh interpreter: ``run_child``'s result."""
    command = [sys.executable, __file__, '--child', zoo_config, variant, str(data_root),
               '--iters', str(iters), '--shrink', str(shrink)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              cwd=tempfile.gettempdir(), env=dict(os.environ, OMP_NUM_THREADS='1'))
    except subprocess.TimeoutExpired:
        return dict(status='error', error=f'timeout after {timeout} s')
    for line in reversed(done.stdout.splitlines()):
        if line.startswith('ZOO_MATRIX_RESULT '):
            return json.loads(line.removeprefix('ZOO_MATRIX_RESULT '))
    tail = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ['no output']
    return dict(status='error', error=f'exit {done.returncode}: {tail[0][:300]}')


def first_iteration_difference(stock: dict, plugin: dict) -> str:
    """The largest relative difference of the first iteration's losses, as text."""
    if stock.get('status') != 'ok' or plugin.get('status') != 'ok':
        return ''
    names = sorted(set(stock['losses']) & set(plugin['losses']))
    worst, worst_name = 0.0, ''
    for name in names:
        a, b = stock['losses'][name][0], plugin['losses'][name][0]
        diff = abs(a - b) / max(abs(a), 1e-12)
        if diff > worst:
            worst, worst_name = diff, name
    if worst == 0.0:
        return 'identical'
    return f'{worst:.2e} ({worst_name})'


def markdown(rows: list, args) -> str:
    lines = [
        '# mmdet 3.3 instance-segmentation zoo: stock vs adopted (`adopt(globals())`), on CPU',
        '',
        f'Command: `python3 tools/zoo_matrix.py --iters {args.iters} --shrink {args.shrink} '
        '--markdown docs/zoo_matrix.md`. The settings both variants share are in the script\'s '
        'docstring (toy COCO set, images and crops shrunk, no pretrained weights, seed 0, one '
        'process). "first-iteration losses": the largest relative difference between the two '
        'runs over every loss term of iteration 1.',
        '',
        '| row | zoo config | stock | plugin | plugin gt_masks | first-iteration losses |',
        '| --- | --- | --- | --- | --- | --- |',
    ]
    for name, zoo_config, stock, plugin in rows:
        def cell(result):
            if result['status'] == 'ok':
                return f"ok ({result['seconds']} s)"
            return 'error: ' + result['error'].replace('|', '\\|')
        lines.append(f'| {name} | `{zoo_config}` | {cell(stock)} | {cell(plugin)} | '
                     f"{plugin.get('masks') or ''} | {first_iteration_difference(stock, plugin)} |")
    return '\n'.join(lines) + '\n'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--child', nargs=3, metavar=('CONFIG', 'VARIANT', 'DATA_ROOT'),
                        help=argparse.SUPPRESS)
    parser.add_argument('--iters', type=int, default=2)
    parser.add_argument('--shrink', type=int, default=4)
    parser.add_argument('--timeout', type=int, default=900, help='seconds per run')
    parser.add_argument('--jobs', type=int, default=2, help='runs at once')
    parser.add_argument('--only', nargs='*', help='row names (default: all)')
    parser.add_argument('--markdown', type=Path, help='write the table here')
    args = parser.parse_args()

    if args.child:
        zoo_config, variant, data_root = args.child
        try:
            result = run_child(zoo_config, variant, Path(data_root), args.iters, args.shrink)
        except Exception as err:  # noqa: BLE001 -- the row reports it
            result = dict(status='error', error=f'{type(err).__name__}: {err}'[:300])
        print('ZOO_MATRIX_RESULT ' + json.dumps(result), flush=True)
        return

    sys.path.insert(0, str(REPO_ROOT))
    from mmdet_ext.toy_data import make_toy_coco
    rows = [(n, c) for n, c in ZOO if not args.only or n in args.only]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        data_root = Path(tmp) / 'toy_coco'
        make_toy_coco(data_root, num_train=8, num_val=2, seed=0)
        settings = dict(iters=args.iters, shrink=args.shrink, timeout=args.timeout)
        futures = [(n, c, pool.submit(run_in_subprocess, c, 'stock', data_root, **settings),
                    pool.submit(run_in_subprocess, c, 'plugin', data_root, **settings))
                   for n, c in rows]
        results = []
        for name, zoo_config, stock, plugin in futures:
            results.append((name, zoo_config, stock.result(), plugin.result()))
            print(markdown(results[-1:], args).splitlines()[-1], flush=True)
    table = markdown(results, args)
    if args.markdown:
        args.markdown.write_text(table)
    print(table)


if __name__ == '__main__':
    main()
