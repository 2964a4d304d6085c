"""Where a zoo config's training sample spends its time, transform by transform, stock beside
adopted, in one process (issue 51's per-transform table).

The config files are ``zoo_configs.config_text``'s (stock: mmdet's zoo config pointed at the
generated set; adopted: the same plus ``adopt(globals())``); each dataset is built from the
config's ``train_dataloader.dataset`` as the Runner builds it, and its innermost dataset's
pipeline is run by hand, sample after sample (``get_data_info``, then each transform in order,
the calls ``Compose`` makes), one process, one thread (OpenCV's too, as the Runner sets it), warm
page cache, each transform's time summed over the pass. The adopted pipeline may have fewer
steps (``ResizeCrop`` is a resize and a crop): the two columns are each pipeline in its order.
The mosaic and mix-up caches fill during an untimed first pass over the same samples, as in
training after the first few batches.

Data: ``benchmarks/batched_fetch.make_dataset``'s 640x480 photo crops with COCO-like instances
(``zoo_configs``' data).

    PYTHONPATH=. python3 benchmarks/zoo_transforms.py [--only rtmdet-ins_tiny] [--images 64]
        [--passes 3] [--out benchmarks/results/zoo_transforms.md]
"""
import argparse
import itertools
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from benchmarks import write_report
from benchmarks.batched_fetch import make_dataset
from benchmarks.zoo_configs import HEIGHT, ROWS, WIDTH, config_text


def innermost(dataset):
    while getattr(dataset, 'dataset', None) is not None:
        dataset = dataset.dataset
    return dataset


def build_dataset(path: str):
    from mmengine.config import Config
    from mmengine.registry import DATASETS, init_default_scope
    cfg = Config.fromfile(path)
    init_default_scope(cfg.get('default_scope', 'mmdet'))
    return innermost(DATASETS.build(cfg.train_dataloader.dataset))


def stage_times(dataset, passes: int, seed: int = 0) -> dict[str, float]:
    """Median over ``passes`` of each stage's time in ms per sample (module doc)."""
    names = ['get_data_info'] + [type(t).__name__ for t in dataset.pipeline.transforms]
    runs = {name: [] for name in names}
    for turn in range(passes + 1):  # the first pass fills the caches and is not counted
        np.random.seed(seed + turn)
        random.seed(seed + turn)
        totals = dict.fromkeys(names, 0.0)
        for index in range(len(dataset)):
            start = time.perf_counter()
            data = dataset.get_data_info(index)
            totals['get_data_info'] += time.perf_counter() - start
            for name, transform in zip(names[1:], dataset.pipeline.transforms):
                start = time.perf_counter()
                data = transform(data)
                totals[name] += time.perf_counter() - start
                if data is None:
                    break
        if turn:
            for name in names:
                runs[name].append(totals[name] * 1e3 / len(dataset))
    return {name: statistics.median(values) for name, values in runs.items()}


def _ms(value) -> str:
    return '' if value is None else f'{value:.2f}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--only', nargs='+', default=['rtmdet-ins_tiny'],
                        choices=[name for name, _ in ROWS])
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--passes', type=int, default=3)
    parser.add_argument('--out', default=None)
    args = parser.parse_args()
    cv2.setNumThreads(0)
    import mmdet_ext  # noqa: F401  (registers the adopted types)
    root = Path(tempfile.mkdtemp(prefix='zoo_transforms_'))
    try:
        make_dataset(root / 'data', args.images, WIDTH, HEIGHT, 'photos')
        day = time.strftime('%Y-%m-%d')
        lines = [f'# Per-transform time of zoo configs, stock and adopted ({day})',
                 '', f'`{" ".join(["python3"] + sys.argv)}`', '',
                 f'{platform.processor() or platform.machine()}, {os.cpu_count()} cores, one '
                 f'process, one thread; {args.images} photo crops {WIDTH}x{HEIGHT}; median of '
                 f'{args.passes} passes after one untimed pass; ms per sample.', '']
        for name, zoo in ROWS:
            if name not in args.only:
                continue
            times = {}
            for variant in ('stock', 'adopted'):
                path = root / f'{name}_{variant}.py'
                path.write_text(config_text(zoo, root / 'data', variant, 4, 2))
                times[variant] = stage_times(build_dataset(str(path)), args.passes)
            lines += [f'## {name} (`{zoo}`)', '', '| step | stock | adopted step | adopted |',
                      '|---|---:|---|---:|']
            stock, adopted = list(times['stock'].items()), list(times['adopted'].items())
            for (s_name, s_ms), (a_name, a_ms) in itertools.zip_longest(
                    stock, adopted, fillvalue=('', None)):
                lines.append(f'| {s_name} | {_ms(s_ms)} | {a_name} | {_ms(a_ms)} |')
            total_s, total_a = sum(times['stock'].values()), sum(times['adopted'].values())
            lines += [f'| **total** | **{total_s:.2f}** | | **{total_a:.2f}** |', '',
                      f'stock / adopted: {total_s / total_a:.2f}x', '']
        if args.out:
            write_report(Path(args.out), lines)
        else:
            print('\n'.join(lines))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    main()
