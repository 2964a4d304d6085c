"""Worker memory, resident size and start-up time: LazyCocoDataset vs mmdet's CocoDataset.

    python benchmarks/dataset_memory.py [--images 20000] [--workers 2] [--out benchmarks/results]

Builds a synthetic COCO instances json (annotations only: polygons, some crowd RLEs) in a temp
dir, then, each variant in a fresh process, makes one full pass with a real DataLoader (the
pipeline is empty, so only annotation access is measured) and samples every worker's USS:

- ``list-of-dicts``: mmdet ``CocoDataset(serialize_data=False)``: annotations as Python
  objects, whose refcounts each worker writes, copying the pages (copy-on-write);
- ``serialized``: mmdet ``CocoDataset`` with mmengine's default ``serialize_data=True``;
- ``lazy-store``: ``LazyCocoDataset`` (memory-mapped store, built before the measured run).

Writes a markdown table to ``<out>/dataset_memory.md``.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
CLASSES = ('circle', 'rectangle', 'triangle', 'ring')


def write_synthetic_coco(path: Path, num_images: int, seed: int = 0) -> None:
    """COCO-like statistics: ~7 instances per image, 8-40 vertex polygons, 3% crowd RLEs."""
    from pycocotools import mask as mask_utils
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    rows, cols = np.mgrid[:480, :640]
    crowd_disc = ((rows - 240) ** 2 + (cols - 320) ** 2 < 90 ** 2).astype(np.uint8)
    crowd_rle = mask_utils.encode(np.asfortranarray(crowd_disc))['counts'].decode()
    for image_id in range(1, num_images + 1):
        images.append({'id': image_id, 'file_name': f'{image_id:012d}.jpg', 'width': 640,
                       'height': 480})
        for _ in range(rng.integers(1, 14)):
            cx, cy, r = rng.uniform(50, 590), rng.uniform(50, 430), rng.uniform(5, 50)
            n = int(rng.integers(8, 41))
            angles = np.sort(rng.uniform(0, 2 * np.pi, n))
            radius = r * rng.uniform(0.6, 1.0, n)
            poly = np.stack([cx + radius * np.cos(angles), cy + radius * np.sin(angles)], 1)
            x0, y0 = poly.min(0)
            x1, y1 = poly.max(0)
            crowd = rng.random() < 0.03
            annotations.append({
                'id': len(annotations) + 1, 'image_id': image_id,
                'category_id': int(rng.integers(1, 5)), 'iscrowd': int(crowd),
                'bbox': [round(float(x0), 2), round(float(y0), 2), round(float(x1 - x0), 2),
                         round(float(y1 - y0), 2)],
                'area': float(np.pi * r * r),
                'segmentation': {'size': [480, 640], 'counts': crowd_rle} if crowd else
                [[round(float(v), 2) for v in poly.reshape(-1)]],
            })
    categories = [{'id': i + 1, 'name': name} for i, name in enumerate(CLASSES)]
    path.write_text(json.dumps({'images': images, 'annotations': annotations,
                                'categories': categories}))


def measure(variant: str, ann_file: str, workers: int) -> dict:
    """Runs in a fresh process: build the dataset, one DataLoader pass, USS of every worker."""
    import psutil
    import torch
    from torch.utils.data import DataLoader

    import mmdet_ext  # noqa: F401
    from mmdet.datasets import CocoDataset
    from mmdet_ext.datasets import LazyCocoDataset

    kwargs = dict(ann_file=ann_file, data_prefix=dict(img=''), metainfo=dict(classes=CLASSES),
                  pipeline=[], filter_cfg=dict(filter_empty_gt=True))
    main = psutil.Process()
    rss_before = main.memory_full_info().uss
    start = time.perf_counter()
    if variant == 'lazy-store':
        dataset = LazyCocoDataset(**kwargs)
        resident = dataset.store.nbytes
    else:
        dataset = CocoDataset(serialize_data=variant == 'serialized', **kwargs)
        resident = int(dataset.data_bytes.nbytes) if variant == 'serialized' else None
    startup = time.perf_counter() - start
    main_uss = main.memory_full_info().uss - rss_before

    loader = DataLoader(dataset, batch_size=16, num_workers=workers, collate_fn=list,
                        shuffle=True, generator=torch.Generator().manual_seed(0))
    first: dict = {}
    last: dict = {}
    for step, _ in enumerate(loader):
        children = main.children()
        usage = {c.pid: c.memory_full_info().uss for c in children}
        if step == 2:
            first = usage
        last = usage
    growth = [(last[pid] - first[pid]) / 2**20 for pid in first if pid in last]
    return {'variant': variant, 'samples': len(dataset), 'startup_s': startup,
            'main_uss_mib': main_uss / 2**20,
            'resident_mib': None if resident is None else resident / 2**20,
            'worker_uss_growth_mib': growth,
            'worker_uss_end_mib': [last[pid] / 2**20 for pid in last]}


def run_variant(variant: str, ann_file: str, workers: int) -> dict:
    code = ('import json, sys; sys.path.insert(0, %r); from benchmarks.dataset_memory import '
            'measure; print(json.dumps(measure(%r, %r, %d)))' % (str(REPO), variant, ann_file,
                                                                 workers))
    out = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f'{variant} failed:\n{out.stderr[-3000:]}')
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=20000)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--out', default=str(REPO / 'benchmarks' / 'results'))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ann_file = str(Path(tmp) / 'instances.json')
        write_synthetic_coco(Path(ann_file), args.images)
        json_mib = os.path.getsize(ann_file) / 2**20
        # First use builds the store; measured separately from the cached start-up.
        build = run_variant('lazy-store', ann_file, 0)
        rows = [run_variant(v, ann_file, args.workers)
                for v in ('list-of-dicts', 'serialized', 'lazy-store')]
    lines = [
        f'# Dataset memory and start-up: {args.images} images, {rows[0]["samples"]} samples, '
        f'json {json_mib:.1f} MiB, {args.workers} workers, one full pass',
        '',
        f'Command: `python benchmarks/dataset_memory.py --images {args.images} '
        f'--workers {args.workers}`',
        '',
        '| variant | start-up (s) | annotations resident (MiB) | main USS after init (MiB) | '
        'per-worker USS growth over the pass (MiB) | per-worker USS at end (MiB) |',
        '| --- | --- | --- | --- | --- | --- |',
    ]
    for r in rows:
        resident = '-' if r['resident_mib'] is None else f'{r["resident_mib"]:.1f}'
        lines.append(
            f'| {r["variant"]} | {r["startup_s"]:.2f} | {resident} | {r["main_uss_mib"]:.1f} | '
            + ', '.join(f'{g:+.1f}' for g in r['worker_uss_growth_mib']) + ' | '
            + ', '.join(f'{u:.1f}' for u in r['worker_uss_end_mib']) + ' |')
    lines += ['', f'lazy-store first use (json parse + store build): {build["startup_s"]:.2f} s.',
              'Resident size: the store file (shared by all workers and ranks through the page '
              'cache) vs mmengine\'s serialized buffer (one private copy per rank).']
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / 'dataset_memory.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
