"""Train a detector: the same command line as MMDetection's tools/train.py.

    python -m mmdet_ext.train CONFIG [--work-dir DIR] [--resume [CHECKPOINT]] [--amp]
        [--auto-scale-lr] [--cfg-options k=v ...] [--launcher none|pytorch|slurm|mpi]

``tools/train.py`` in a checkout runs this. The config imports mmdet_ext itself
(``custom_imports``), exactly as a user's config would; importing it here first also lets the
config inherit ``mmdet_ext::`` base configs (mmdet_ext/config_scope.py). If a DataLoader worker
dies (segfault, OOM killer), the error is extended with the sample each dead worker was loading.
A distributed run ends through ``run_and_exit`` (mmdet_ext/engine/process_exit.py), so that a
finished or preempted rank exits 0 or 75, never SIGABRT from gloo's threads.
"""
import argparse
import os
import os.path as osp

from mmdet.utils import setup_cache_size_limit_of_dynamo
from mmengine.config import Config, DictAction
from mmengine.registry import RUNNERS
from mmengine.runner import Runner

from .datasets.inflight import dead_worker_samples
from .engine.process_exit import run_and_exit


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Train a detector')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument('--amp', action='store_true', help='automatic mixed precision (GPU)')
    parser.add_argument('--auto-scale-lr', action='store_true', help='scale LR by batch size')
    parser.add_argument(
        '--resume', nargs='?', type=str, const='auto',
        help='resume from CHECKPOINT, or without a value from the latest in the work dir')
    parser.add_argument(
        '--cfg-options', nargs='+', action=DictAction,
        help='override config settings, key=value (e.g. train_cfg.max_epochs=2)')
    parser.add_argument('--launcher', choices=['none', 'pytorch', 'slurm', 'mpi'],
                        default='none', help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def build_config(args: argparse.Namespace) -> Config:
    cfg = Config.fromfile(args.config)
    cfg.launcher = args.launcher
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir', None) is None:
        cfg.work_dir = osp.join('./work_dirs', osp.splitext(osp.basename(args.config))[0])
    if args.amp:
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.loss_scale = 'dynamic'
    if args.auto_scale_lr:
        if 'base_batch_size' not in cfg.get('auto_scale_lr', {}):
            raise RuntimeError('--auto-scale-lr needs auto_scale_lr.base_batch_size in the config')
        cfg.auto_scale_lr.enable = True
    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume
    return cfg


def main() -> None:
    args = parse_args()
    setup_cache_size_limit_of_dynamo()
    cfg = build_config(args)
    runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    try:
        runner.train()
    except RuntimeError as err:
        # A worker killed by a signal leaves only its pid; name the sample it was loading.
        notes = dead_worker_samples(str(err), runner.log_dir)
        if not notes:
            raise
        raise RuntimeError('\n'.join([str(err), *notes])) from err


if __name__ == '__main__':
    run_and_exit(main)
