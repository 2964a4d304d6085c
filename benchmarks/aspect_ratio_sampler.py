"""Main-process seconds per epoch of the aspect-ratio batch sampler: mmdet's against ours.

    PYTHONPATH=. python3 benchmarks/aspect_ratio_sampler.py [--scale 1.0] [--repeats 3]
        [--batch-size 2] [--out benchmarks/results]

mmdet's ``AspectRatioBatchSampler`` calls ``get_data_info`` for every index of every epoch in the
main process to read two numbers; ``FastAspectRatioBatchSampler`` reads them with
``LazyCocoDataset.image_sizes`` (the store's columns). The dataset: a synthetic COCO-train-sized
json (``make_scale_coco.py coco --image-sizes coco``: 118,287 images of mixed COCO-like sizes,
864,309 instances, polygons) written with a fixed seed into a temporary directory, under
``LazyCocoDataset`` (``validate=False``: no image file is read; the store is built once, before
any timing). One epoch is every batch of a ``DefaultSampler(shuffle=True)`` epoch, drawn as the
DataLoader draws them (indices only, nothing loaded); epochs 0, 1, 2, ... alternate between the
two samplers, each keeps its best of ``--repeats``. Both are asserted to give the same batches.
Times are wall seconds (``perf_counter``) and CPU seconds of this process (``process_time``).
Writes ``<out>/aspect_ratio_sampler.md``.
"""
import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

from mmdet.datasets.samplers import AspectRatioBatchSampler
from mmengine.dataset import DefaultSampler

from benchmarks.make_scale_coco import SIZES
from benchmarks.make_scale_coco import write as write_coco_json
from mmdet_ext.datasets import FastAspectRatioBatchSampler, LazyCocoDataset

COMMAND = 'PYTHONPATH=. python3 benchmarks/aspect_ratio_sampler.py'
SAMPLERS = {'mmdet AspectRatioBatchSampler': AspectRatioBatchSampler,
            'FastAspectRatioBatchSampler': FastAspectRatioBatchSampler}


def one_epoch(sampler_class: type, dataset: LazyCocoDataset, epoch: int,
              batch_size: int) -> tuple[float, float, list]:
    """(wall s, CPU s, batches) of one epoch of ``sampler_class`` over ``dataset``."""
    sampler = DefaultSampler(dataset, shuffle=True, seed=0)
    sampler.set_epoch(epoch)
    batch_sampler = sampler_class(sampler, batch_size=batch_size)
    wall, cpu = time.perf_counter(), time.process_time()
    batches = list(batch_sampler)
    return time.perf_counter() - wall, time.process_time() - cpu, batches


def measure(dataset: LazyCocoDataset, repeats: int, batch_size: int) -> dict:
    """Best (wall, CPU) seconds per epoch of each sampler."""
    best = {name: (float('inf'), float('inf')) for name in SAMPLERS}
    for repeat in range(repeats):
        batches = {}
        for name, sampler_class in SAMPLERS.items():
            wall, cpu, batches[name] = one_epoch(sampler_class, dataset, repeat, batch_size)
            best[name] = (min(best[name][0], wall), min(best[name][1], cpu))
            print(f'epoch {repeat}: {name}: {wall:.3f} s wall, {cpu:.3f} s CPU', flush=True)
        mine, theirs = batches.values()
        assert mine == theirs, f'epoch {repeat}: the samplers gave different batches'
    return best


def cpu_model() -> str:
    """The CPU's model name (Linux), else the machine type."""
    try:
        with open('/proc/cpuinfo') as f:
            return next(line.split(':', 1)[1].strip() for line in f
                        if line.startswith('model name'))
    except (OSError, StopIteration):
        return platform.machine()


def report(best: dict, args: argparse.Namespace, num_images: int, num_anns: int,
           portrait: int, load: tuple) -> str:
    (mmdet_wall, mmdet_cpu), (ours_wall, ours_cpu) = best.values()
    command = COMMAND + (f' --scale {args.scale}' if args.scale != 1.0 else '') + (
        f' --repeats {args.repeats}' if args.repeats != 3 else '') + (
        f' --batch-size {args.batch_size}' if args.batch_size != 2 else '')
    lines = [
        '# Aspect-ratio batch sampler: main-process seconds per epoch',
        '',
        f'Command: `{command}`',
        '',
        f'Machine: {cpu_model()}, {os.cpu_count()} cores '
        f'(shared with other jobs; load average {load[0]:.2f} before the run), Python '
        f'{platform.python_version()}. Dataset: synthetic COCO json '
        f'(`make_scale_coco.py coco --image-sizes coco --scale {args.scale}`), '
        f'{num_images:,} images ({portrait:,} portrait), {num_anns:,} instances, '
        '`LazyCocoDataset(validate=False)`. '
        f'One epoch: every batch of a `DefaultSampler(shuffle=True)` epoch, batch size '
        f'{args.batch_size}, indices only; best of {args.repeats} epochs each, samplers '
        'alternating; both gave the same batches (asserted).',
        '',
        '| sampler | wall s / epoch | CPU s / epoch |',
        '| --- | ---: | ---: |',
    ]
    lines += [f'| {name} | {wall:.3f} | {cpu:.3f} |' for name, (wall, cpu) in best.items()]
    lines += [f'| mmdet / ours | {mmdet_wall / ours_wall:.0f}x | {mmdet_cpu / ours_cpu:.0f}x |',
              '',
              "mmdet's sampler builds each sample's `data_info` (its instances' boxes and "
              'polygons included) to read `width` and `height`; ours reads the two columns of '
              'the store for every sample in one call per epoch. A DataLoader draws its batches '
              'in the '
              'main process whatever `num_workers` is: this time is spent there every epoch, '
              'between batches.', '']
    return '\n'.join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--scale', type=float, default=1.0,
                        help='fraction of the COCO-train size (make_scale_coco --scale)')
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--batch-size', type=int, default=2)
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results'))
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        ann_file = Path(tmp) / 'instances_train.json'
        write_coco_json('coco', ann_file, args.scale, seed=0, image_sizes='coco')
        start = time.perf_counter()
        dataset = LazyCocoDataset(ann_file=str(ann_file), data_prefix=dict(img='train/'),
                                  pipeline=[], validate=False, store_cache_dir=tmp)
        print(f'store built and opened in {time.perf_counter() - start:.1f} s', flush=True)
        num_images = len(dataset)
        assert num_images == max(1, int(SIZES['coco'][0] * args.scale))  # every image kept
        num_anns = int(dataset.store['instance_offsets'][-1])
        widths, heights = dataset.image_sizes(range(num_images))
        portrait = int((widths < heights).sum())
        best = measure(dataset, args.repeats, args.batch_size)
        del dataset
    text = report(best, args, num_images, num_anns, portrait, load)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / 'aspect_ratio_sampler.md').write_text(text)
    print(text)


if __name__ == '__main__':
    main()
