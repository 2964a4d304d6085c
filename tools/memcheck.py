"""Run only the dataloader of a config (no model) and report which process grows, and why.

    python tools/memcheck.py CONFIG [--iters 300] [--workers 2] [--interval 5]
        [--split train|val|test] [--bisect-fields [FIELD ...]] [--cfg-options k=v ...]

Prints one verdict per process (main, each worker): flat, sawtooth (copy-on-write) or leak, with
its growth. ``--bisect-fields`` repeats the run with each sample field dropped in turn (all
fields of the first sample by default) and names the field that carries the growth.
See docs/memory_watch.md.
"""
import argparse
import sys

from mmengine.config import Config, DictAction

from checkout_path import add_checkout_to_path

add_checkout_to_path()

from mmdet_ext.engine.memory.memcheck import (bisect_fields, format_bisection,  # noqa: E402
                                              format_run, run_dataloader)
from mmdet_ext.engine.memory.verdict import VerdictThresholds  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Memory check of a dataloader alone')
    parser.add_argument('config', help='config file path')
    parser.add_argument('--split', default='train', choices=['train', 'val', 'test'],
                        help='which dataloader of the config to run')
    parser.add_argument('--iters', type=int, default=300, help='iterations (batches) per run')
    parser.add_argument('--workers', type=int, help='override num_workers')
    parser.add_argument('--interval', type=int, default=5, help='sample every N iterations')
    parser.add_argument('--warmup-iters', type=int, default=VerdictThresholds.warmup_iters)
    parser.add_argument('--leak-mib-per-kiter', type=float,
                        default=VerdictThresholds.leak_mib_per_kiter)
    parser.add_argument('--sawtooth-mib', type=float, default=VerdictThresholds.sawtooth_mib)
    parser.add_argument('--bisect-fields', nargs='*', metavar='FIELD',
                        help='repeat the run dropping one field at a time (default: all)')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction,
                        help='override config settings, key=value')
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    scope = cfg.get('default_scope', 'mmdet')
    dataloader_cfg = cfg.get(f'{args.split}_dataloader')
    if dataloader_cfg is None:
        raise SystemExit(f'{args.config} has no {args.split}_dataloader')
    thresholds = VerdictThresholds(warmup_iters=args.warmup_iters,
                                   leak_mib_per_kiter=args.leak_mib_per_kiter,
                                   sawtooth_mib=args.sawtooth_mib)
    dataloader_cfg = dataloader_cfg.to_dict()
    if args.bisect_fields is None:
        run = run_dataloader(dataloader_cfg, args.iters, args.workers, args.interval,
                             thresholds=thresholds, default_scope=scope)
        print(format_run(run))
        return 0
    result = bisect_fields(dataloader_cfg, args.iters, args.workers, args.interval,
                           fields=args.bisect_fields or None, thresholds=thresholds,
                           default_scope=scope)
    print(format_run(result.baseline))
    print(format_bisection(result))
    return 0


if __name__ == '__main__':
    sys.exit(main())
