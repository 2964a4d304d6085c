"""Train-pipeline throughput: mmdet_ext's native pipeline against mmdet's standard one.

Same images, same DataLoader settings (batch size, workers, no shuffle), one run:

- mmdet: ``CocoDataset`` + ``LoadImageFromFile`` + ``LoadAnnotations(with_mask=True,
  poly2mask=True)`` + ``Resize(keep_ratio=True)`` + ``RandomFlip(0.5)`` + ``PackDetInputs``,
  collated by ``pseudo_collate``;
- mmdet_ext: ``LazyCocoDataset`` + ``LoadLazyAnnotations`` + ``NativeLoadResizeFlip`` (same
  scale, same flip) + ``PackDetInputs``, collated by ``fast_collate`` (padded batch);
- decode ceiling: read the file and ``cv2.imdecode`` it, nothing else, on the same files.

A second table times, in one process, what happens after the geometric transforms: packing,
collating and producing the normalised float batch the model sees (mmdet:
``PackDetInputs + pseudo_collate + DetDataPreprocessor``, whose ``stack_batch`` pads and stacks;
ours: ``PackDetInputs + fast_collate + FastDetDataPreprocessor``).

    PYTHONPATH=. python benchmarks/pipeline_throughput.py [--images 96] [--workers 2]
"""
import argparse
import platform
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np
import torch
from mmdet.datasets import CocoDataset
from mmcv.transforms import LoadImageFromFile
from mmdet.datasets.transforms import PackDetInputs, Resize
from mmdet.models.data_preprocessors import DetDataPreprocessor
from mmengine.dataset import pseudo_collate
from mmengine.model.utils import stack_batch
from mmengine.registry import init_default_scope
from torch.utils.data import DataLoader, Dataset

import mmdet_ext
from mmdet_ext import FastDetDataPreprocessor, LazyCocoDataset, NativeLoadResizeFlip, fast_collate
from mmdet_ext.toy_data import make_toy_coco

CLASSES = ('circle', 'rectangle', 'triangle', 'ring')
PREPROCESSOR = dict(mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375],
                    bgr_to_rgb=True, pad_size_divisor=32, pad_mask=True)
# (name, image width, height, train scale): COCO-sized images upscaled to mmdet's default
# scale, and 5-megapixel photos downscaled to it (where reduced-size JPEG decoding applies).
SCENARIOS = [('COCO-like 640x480 -> 1333x800', 640, 480, (1333, 800)),
             ('photos 2560x1920 -> 1333x800', 2560, 1920, (1333, 800))]


class DecodeOnly(Dataset):
    """The ceiling: read each file and decode it with cv2, nothing else."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> np.ndarray:
        with open(self.paths[index], 'rb') as f:
            return cv2.imdecode(np.frombuffer(f.read(), np.uint8), cv2.IMREAD_COLOR)


def keep_list(batch: list) -> list:
    return batch


def mmdet_dataset(root: Path, scale: tuple) -> CocoDataset:
    return CocoDataset(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
        pipeline=[dict(type='LoadImageFromFile'),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True, poly2mask=True),
                  dict(type='Resize', scale=scale, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackDetInputs')])


def our_dataset(root: Path, scale: tuple, reduced_decode: bool = True) -> LazyCocoDataset:
    return LazyCocoDataset(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'), metainfo=dict(classes=CLASSES),
        pipeline=[dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                  dict(type='NativeLoadResizeFlip', scale=scale, keep_ratio=True, prob=0.5,
                       reduced_decode=reduced_decode),
                  dict(type='PackDetInputs')])


def samples_per_second(dataset: Dataset, collate, batch_size: int, workers: int,
                       passes: int) -> float:
    """Steady state, as in training with persistent workers: one untimed pass starts the
    workers and warms them up, then ``passes`` timed passes."""
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=workers, collate_fn=collate,
                        shuffle=False, persistent_workers=workers > 0)
    for _ in loader:
        pass
    start = time.perf_counter()
    count = sum(len(batch['data_samples']) if isinstance(batch, dict) else len(batch)
                for _ in range(passes) for batch in loader)
    return count / (time.perf_counter() - start)


def transformed_samples(dataset, count: int) -> list[dict]:
    """Results dicts after the dataset's pipeline minus its final ``PackDetInputs``."""
    dataset.pipeline.transforms.pop()
    return [dataset[i % len(dataset)] for i in range(count)]


def time_to_batch(mmdet_samples: list[dict], our_samples: list[dict], batch_size: int,
                  repeat: int) -> dict[str, float]:
    """Milliseconds per batch of each side's flow from its own transformed samples (mmdet's:
    HWC images, bitmap masks; ours: planar-backed images, lazy masks), best of ``repeat``."""
    pack = PackDetInputs()

    def batched(samples: list[dict]) -> list[list[dict]]:
        return [samples[i:i + batch_size] for i in range(0, len(samples), batch_size)]

    def to_padded_mmdet(packed: list[dict]):
        return stack_batch(pseudo_collate(packed)['inputs'], pad_size_divisor=32)

    flows = {  # name: (samples, to padded uint8 batch, collate, the model's data preprocessor)
        'mmdet': (mmdet_samples, to_padded_mmdet, pseudo_collate,
                  DetDataPreprocessor(**PREPROCESSOR)),
        'mmdet_ext': (our_samples, fast_collate, fast_collate,
                      FastDetDataPreprocessor(**PREPROCESSOR)),
    }
    timings = {}
    for name, (samples, to_padded, collate, preprocessor) in flows.items():
        timings[f'{name} to padded batch'] = best_ms_per_batch(
            lambda batch: to_padded([pack(dict(r)) for r in batch]), batched(samples), repeat)
        timings[f'{name} to normalised batch'] = best_ms_per_batch(
            lambda batch: preprocessor(collate([pack(dict(r)) for r in batch]), training=True),
            batched(samples), repeat)
    return timings


def best_ms_per_batch(fn, batches: list, repeat: int) -> float:
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter()
        for batch in batches:
            fn(batch)
        best = min(best, time.perf_counter() - start)
    return 1000 * best / len(batches)


def reduced_decode_difference(root: Path, scale: tuple, count: int = 16) -> tuple[float, int]:
    """Mean and max |ours - mmdet| over the pixels of the first ``count`` images, our image
    decoded at reduced size, mmdet's decoded at full size and resized by ``Resize``."""
    load, resize = LoadImageFromFile(), Resize(scale=scale, keep_ratio=True)
    ours = NativeLoadResizeFlip(scale=scale, keep_ratio=True)
    total, pixels, worst = 0.0, 0, 0
    for path in sorted((root / 'train').glob('*.jpg'))[:count]:
        reference = resize(load(dict(img_path=str(path))))['img'].astype(np.int16)
        difference = np.abs(ours(dict(img_path=str(path)))['img'].astype(np.int16) - reference)
        total, pixels = total + difference.sum(), pixels + difference.size
        worst = max(worst, int(difference.max()))
    return total / pixels, worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--images', type=int, default=96)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--batch-size', type=int, default=4)
    parser.add_argument('--passes', type=int, default=3)
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/pipeline.md'))
    args = parser.parse_args()
    torch.set_num_threads(1)
    init_default_scope('mmdet')

    lines = [
        '# Train pipeline throughput: mmdet_ext vs mmdet',
        '',
        f'Command: `PYTHONPATH=. python benchmarks/pipeline_throughput.py --images {args.images} '
        f'--workers {args.workers} --batch-size {args.batch_size} --passes {args.passes}`',
        '',
        f'Machine: {platform.machine()}, {len(__import__("os").sched_getaffinity(0))} usable '
        f'CPUs, Python {platform.python_version()}, torch {torch.__version__}, mmdet_ext '
        f'{mmdet_ext.__version__}. Toy COCO images (JPEG quality 95, 4 shape classes, polygons + '
        f'crowd RLE), DataLoader batch {args.batch_size}, {args.workers} workers, no shuffle; '
        f'persistent workers, one warm-up pass, then {args.passes} timed passes. Samples/s '
        '(higher is better).',
        '',
        '| scenario | mmdet | mmdet_ext | mmdet_ext, full-size decode | decode ceiling '
        '| speed-up | of ceiling |',
        '|---|---:|---:|---:|---:|---:|---:|',
    ]
    stage_rows, differences = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, width, height, scale in SCENARIOS:
            root = Path(tmp) / f'{width}x{height}'
            make_toy_coco(root, num_train=args.images, num_val=0, width=width, height=height)
            paths = sorted(str(p) for p in (root / 'train').glob('*.jpg'))
            run = dict(batch_size=args.batch_size, workers=args.workers, passes=args.passes)
            theirs = samples_per_second(mmdet_dataset(root, scale), pseudo_collate, **run)
            ours = samples_per_second(our_dataset(root, scale), fast_collate, **run)
            ours_full = samples_per_second(our_dataset(root, scale, reduced_decode=False),
                                           fast_collate, **run)
            ceiling = samples_per_second(DecodeOnly(paths), keep_list, **run)
            lines.append(f'| {name} | {theirs:.1f} | {ours:.1f} | {ours_full:.1f} | '
                         f'{ceiling:.1f} | {ours / theirs:.2f}x | {ours / ceiling:.2f}x |')
            count = 8 * args.batch_size
            stages = time_to_batch(transformed_samples(mmdet_dataset(root, scale), count),
                                   transformed_samples(our_dataset(root, scale), count),
                                   args.batch_size, repeat=5)
            stage_rows.append((name, stages))
            differences.append((name, reduced_decode_difference(root, scale)))
            print(lines[-1], stages, flush=True)

    lines += [
        '',
        '## After the transforms: pack, collate, normalised batch (one process, one thread)',
        '',
        'Milliseconds per batch, best of 5 passes over 8 batches, each side from the output of '
        'its own transforms above (mmdet: HWC images, bitmap masks; ours: images laid out '
        'channel-planar by NativeLoadResizeFlip, lazy masks). Padded uint8 batch: mmdet '
        '`PackDetInputs + pseudo_collate + stack_batch` vs '
        'ours `PackDetInputs + fast_collate`. Normalised float batch: mmdet `PackDetInputs + '
        'pseudo_collate + DetDataPreprocessor` (per-image channel swap, float, normalise, then '
        '`stack_batch`) vs ours `PackDetInputs + fast_collate + FastDetDataPreprocessor` (one '
        'native pass); identical tensors (tests/test_collate.py).',
        '',
        '| scenario | mmdet to padded batch | ours | ratio '
        '| mmdet to normalised batch | ours | ratio |',
        '|---|---:|---:|---:|---:|---:|---:|',
    ]
    for name, s in stage_rows:
        theirs_pc, ours_pc = s['mmdet to padded batch'], s['mmdet_ext to padded batch']
        theirs_all, ours_all = s['mmdet to normalised batch'], s['mmdet_ext to normalised batch']
        lines.append(f'| {name} | {theirs_pc:.2f} | {ours_pc:.2f} | {ours_pc / theirs_pc:.2f}x '
                     f'| {theirs_all:.2f} | {ours_all:.2f} | {ours_all / theirs_all:.2f}x |')
    lines += [
        '',
        '## Reduced-size decoding against mmdet\'s full-size decode + Resize',
        '',
        'Pixel difference (0-255 scale) of `NativeLoadResizeFlip` (reduced decode on) against '
        '`LoadImageFromFile + Resize` on the first 16 images, no flip. Where the target is not '
        'at most half the image no reduction applies and the images are identical.',
        '',
        '| scenario | mean abs difference | max abs difference |',
        '|---|---:|---:|',
    ]
    lines += [f'| {name} | {mean:.3f} | {worst} |' for name, (mean, worst) in differences]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
