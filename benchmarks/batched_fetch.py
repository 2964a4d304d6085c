"""The batched fetch (issue 30) against the per-sample paths, mmdet and the decode ceiling.

DataLoader throughput in samples/s and CPU-seconds per sample summed over every process (main and
workers: user + system), steady state (persistent workers, one untimed pass, then timed passes),
warm page cache, all pinned to the same cores (``os.sched_setaffinity``, as ``taskset``; workers
inherit it). Rounds interleave the contenders; each keeps its best round. Contenders:

- mmdet default: ``LoadImageFromFile`` + ``LoadAnnotations(poly2mask=True)`` + ``Resize`` +
  ``RandomFlip(0.5)`` + ``PackDetInputs``, ``pseudo_collate``;
- mmdet best: ``poly2mask=False``, ``imdecode_backend='turbojpeg'``, ``cv2.setNumThreads(0)``,
  persistent workers, workers swept (the best count kept); pin_memory has no effect without CUDA;
- today, fused: ``LoadLazyAnnotations`` + ``NativeLoadResizeFlip`` + ``PackDetInputs``,
  ``fast_collate`` (resized, padded uint8 batch), ``batched_fetch=False`` (per sample);
- today, deferred: the same with ``pixels_on='device'``, ``batched_fetch=False`` (per sample);
- batched, workers: ``pixels_on='device'`` with the batched fetch (one ``decode_images_into``
  per batch in each worker, into shared memory that ``fast_collate`` passes on);
- batched, threads: the same with ``num_workers=0`` (a thread per pinned core);
- batched fused, workers / threads: ``pixels_on='worker'`` (the main job's pipeline) with the
  batched fetch: one ``decode_images_into`` per batch that resizes and flips as it decodes;
- ceiling: the same decoder (``decode_image``, libjpeg) on the same files at the same
  parallelism, nothing else: read + decode in the workers, only the shape sent back; and read +
  ``decode_images_into`` per batch on the threads in one process. The better of the two.
- fused ceiling: read + ``decode_images_into`` with the same resizes (every other image
  flipped, as about half are in the path) per batch on the threads: the native work of the
  fused path and nothing else;
- batched, workers, dicts / batched fused, workers, dicts: the two batched worker rows with the
  instances made as before the store's columns were read for the whole batch (per-instance
  dicts from ``get_data_info``, then ``LoadLazyAnnotations``): what ``ColumnarAnnotations``
  saves, side by side.

Our contenders load through ``PerSampleSeedDataset`` with seeded batches (``ExactResumeHook``'s
path), and the first batches of the deferred and batched paths are asserted identical before
anything is timed. Annotations: COCO-like (``make_scale_coco``: ~7.3 instances per image, 86%
one-part polygons of ~24 points, 1% crowd RLEs at 640x480; polygons and boxes scaled up, crowd
left out, at 2560x1920); images: real photographs (``benchmarks/photos.py``), or
``--content synthetic`` (``deferred_pipeline.photo_like``).

    PYTHONPATH=. python3 benchmarks/batched_fetch.py [--images 64] [--batch-size 8]
        [--cores 0,1] [--passes 2] [--rounds 2]
"""
import argparse
import gc
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import cv2
import mmcv
import numpy as np
import psutil
import torch
from mmdet.datasets import CocoDataset
from mmengine.dataset import pseudo_collate
from mmengine.registry import init_default_scope
from torch.utils.data import DataLoader, Dataset

import mmdet_ext
from benchmarks import write_report
from benchmarks.deferred_pipeline import photo_like
from benchmarks.make_scale_coco import SIZES
from benchmarks.make_scale_coco import write as write_coco_json
from benchmarks.photos import load_photos, photo_crop
from mmdet_ext import LazyCocoDataset, fast_collate
from mmdet_ext.datasets.batch_decoder import BatchDecoder
from mmdet_ext.datasets.sample_seeds import PerSampleSeedDataset, SeededKey
from mmdet_ext.io import read_image_header
from mmdet_ext.ops import decode_image, decode_images_into
from mmdet_ext.transforms import DEFERRED_META_KEYS, NativeLoadResizeFlip

SCENARIOS = [('640x480 -> 1333x800', 640, 480, (1333, 800)),
             ('2560x1920 -> 1333x800', 2560, 1920, (1333, 800))]
MMDET_BEST_WORKERS = (1, 2, 3, 4)


def make_dataset(root: Path, count: int, width: int, height: int, content: str) -> list[str]:
    """COCO-like annotations and ``count`` JPEGs (quality 90) of width x height under root."""
    (root / 'annotations').mkdir(parents=True)
    (root / 'train').mkdir()
    raw = root / 'annotations' / 'raw.json'
    write_coco_json('coco', raw, scale=count / SIZES['coco'][0])
    data = json.loads(raw.read_text())
    raw.unlink()
    factor = width / 640
    for image in data['images']:
        image['height'], image['width'] = height, width
    if factor != 1:  # crowd RLEs are drawn for 640x480: left out rather than resampled
        data['annotations'] = [a for a in data['annotations'] if not a['iscrowd']]
        for ann in data['annotations']:
            ann['bbox'] = [v * factor for v in ann['bbox']]
            ann['area'] *= factor * factor
            ann['segmentation'] = [[v * factor for v in part] for part in ann['segmentation']]
    (root / 'annotations' / 'instances_train.json').write_text(json.dumps(data))
    photos = load_photos() if content == 'photos' else None
    paths = []
    for i, image in enumerate(data['images']):
        rng = np.random.default_rng(i)
        pixels = photo_crop(photos, rng, width, height) if photos else photo_like(rng, width,
                                                                                    height)
        path = str(root / 'train' / image['file_name'])
        cv2.imwrite(path, pixels, [cv2.IMWRITE_JPEG_QUALITY, 90])
        paths.append(path)
    return paths


def mmdet_dataset(root: Path, scale: tuple, poly2mask: bool, backend: str) -> CocoDataset:
    return CocoDataset(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=[dict(type='LoadImageFromFile', imdecode_backend=backend),
                  dict(type='LoadAnnotations', with_bbox=True, with_mask=True,
                       poly2mask=poly2mask),
                  dict(type='Resize', scale=scale, keep_ratio=True),
                  dict(type='RandomFlip', prob=0.5),
                  dict(type='PackDetInputs')])


class InstancesAsDicts(LazyCocoDataset):
    """The batched fetch as it was before instances were read from the store's columns: a
    dataset that makes its own instances gets them as dicts (``columnar_plan``)."""

    def _instance(self, *args):
        return super()._instance(*args)


def our_dataset(root: Path, scale: tuple, pixels_on: str, dataset_class=LazyCocoDataset,
                **kwargs) -> PerSampleSeedDataset:
    meta_keys = DEFERRED_META_KEYS if pixels_on == 'device' else DEFERRED_META_KEYS[:-1]
    return PerSampleSeedDataset(dataset_class(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=[dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                  dict(type='NativeLoadResizeFlip', scale=scale, keep_ratio=True, prob=0.5,
                       pixels_on=pixels_on),
                  dict(type='PackDetInputs', meta_keys=meta_keys)], **kwargs))


def seeded_batches(count: int, batch_size: int) -> list[list[SeededKey]]:
    return [[SeededKey(i, 1_000_003 * i % (1 << 31)) for i in range(start, min(start + batch_size,
                                                                               count))]
            for start in range(0, count, batch_size)]


class DecodeInWorkers(Dataset):
    """Ceiling, processes: read + decode_image, only the decoded shape goes back."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple:
        with open(self.paths[index], 'rb') as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
        return tuple(decode_image(data).shape)


def shapes_only(batch: list) -> dict:
    return {'data_samples': batch}


class DecodeOnThreads:
    """Ceiling, threads: read + decode_images_into per batch into a buffer allocated once."""

    def __init__(self, paths: list[str], batch_size: int, threads: int,
                 resize_to: tuple = None, reduced_decode: bool = True) -> None:
        self.paths, self.batch_size, self.threads = paths, batch_size, threads
        # (w, h) scale, keep_ratio: the loader's own target and reduced-decode arithmetic
        self.loader = NativeLoadResizeFlip(scale=resize_to, keep_ratio=True,
                                           reduced_decode=reduced_decode) if resize_to else None
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def __iter__(self):
        for start in range(0, len(self.paths), self.batch_size):
            data, shapes, denoms, warps = [], [], [], []
            for path in self.paths[start:start + self.batch_size]:
                with open(path, 'rb') as f:
                    raw = f.read()
                header = read_image_header(raw)
                data.append(torch.frombuffer(bytearray(raw), dtype=torch.uint8))
                denom = 1
                if self.loader:  # resized, from a reduced decode where the loader does it
                    _, (w, h) = self.loader._target_size(header.width, header.height)
                    # Every other image flipped: the path flips about half (prob=0.5).
                    warps.append((h, w, 'horizontal' if len(warps) % 2 else None))
                    denom = self.loader._scale_denom(header, w, h)
                denoms.append(denom)
                shapes.append((3, -(-header.height // denom), -(-header.width // denom)))
            written = [(3, *w[:2]) for w in warps] if warps else shapes
            sizes = [int(np.prod(s)) for s in written]
            offsets = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            if self.buffer.numel() < offsets[-1]:
                self.buffer = torch.empty(offsets[-1], dtype=torch.uint8)
            decode_images_into(data, 'color', denoms, self.buffer, offsets[:-1], shapes,
                               num_threads=self.threads, warps=warps or None)
            yield {'data_samples': shapes}


def cpu_seconds(processes: list) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def measure(loader, passes: int) -> tuple[float, float]:
    """(samples/s, CPU-seconds per sample over this process and its workers), steady state."""
    for _ in loader:  # warm-up: workers started, caches warm
        pass
    me = psutil.Process()
    processes = [me] + me.children(recursive=True)
    cpu_before, start = cpu_seconds(processes), time.perf_counter()
    count = sum(len(batch['data_samples']) for _ in range(passes) for batch in loader)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds(processes) - cpu_before
    return count / elapsed, cpu / count


def loader(dataset, batch_size: int, workers: int, collate, seeded: bool):
    options = dict(num_workers=workers, collate_fn=collate, persistent_workers=workers > 0)
    if seeded:
        return DataLoader(dataset, batch_sampler=seeded_batches(len(dataset), batch_size),
                          **options)
    return DataLoader(dataset, batch_size=batch_size, shuffle=False, **options)


def assert_same_batches(*loaders) -> None:
    """The first two batches of every loader are the same: or the timings compare nothing."""
    firsts = [[batch for _, batch in zip(range(2), ld)] for ld in loaders]
    for batches in firsts[1:]:
        for got, want in zip(batches, firsts[0]):
            assert torch.equal(got['inputs'], want['inputs'])
            assert got['input_shapes'] == want['input_shapes']
            for key in ('image_shapes', 'out_shapes', 'flips') if 'pending_warp' in want else ():
                assert torch.equal(got['pending_warp'][key], want['pending_warp'][key])
            assert [s.img_id for s in got['data_samples']] == \
                [s.img_id for s in want['data_samples']]
            for g, w in zip(got['data_samples'], want['data_samples']):
                assert torch.equal(g.gt_instances.bboxes.tensor, w.gt_instances.bboxes.tensor)
                assert np.array_equal(g.gt_instances.masks.to_ndarray(),
                                      w.gt_instances.masks.to_ndarray())


def run_scenario(root: Path, paths: list[str], scale: tuple, args, cores: int) -> dict:
    batch, passes = args.batch_size, args.passes
    contenders = {
        'mmdet default': lambda: loader(mmdet_dataset(root, scale, True, 'cv2'), batch,
                                        args.workers, pseudo_collate, False),
        'today, fused': lambda: loader(our_dataset(root, scale, 'worker', batched_fetch=False),
                                       batch, args.workers, fast_collate, True),
        'today, deferred': lambda: loader(our_dataset(root, scale, 'device',
                                                      batched_fetch=False), batch,
                                          args.workers, fast_collate, True),
        'batched, workers': lambda: loader(our_dataset(root, scale, 'device'), batch,
                                           args.workers, fast_collate, True),
        'batched, threads': lambda: loader(our_dataset(root, scale, 'device'), batch, 0,
                                           fast_collate, True),
        'batched fused, workers': lambda: loader(our_dataset(root, scale, 'worker'), batch,
                                                 args.workers, fast_collate, True),
        'batched fused, threads': lambda: loader(our_dataset(root, scale, 'worker'), batch, 0,
                                                 fast_collate, True),
        'batched, workers, dicts': lambda: loader(
            our_dataset(root, scale, 'device', InstancesAsDicts), batch, args.workers,
            fast_collate, True),
        'batched fused, workers, dicts': lambda: loader(
            our_dataset(root, scale, 'worker', InstancesAsDicts), batch, args.workers,
            fast_collate, True),
        'ceiling, processes': lambda: loader(DecodeInWorkers(paths), batch, args.workers,
                                             shapes_only, False),
        'ceiling, threads': lambda: DecodeOnThreads(paths, batch, cores),
        'fused ceiling': lambda: DecodeOnThreads(paths, batch, cores, scale),
    }
    for workers in MMDET_BEST_WORKERS:
        contenders[f'mmdet best, {workers} workers'] = (
            lambda w=workers: loader(mmdet_dataset(root, scale, False, 'turbojpeg'), batch, w,
                                     pseudo_collate, False))
    assert_same_batches(contenders['today, deferred'](), contenders['batched, workers'](),
                        contenders['batched, threads'](), contenders['batched, workers, dicts']())
    assert_same_batches(contenders['today, fused'](), contenders['batched fused, workers'](),
                        contenders['batched fused, threads'](),
                        contenders['batched fused, workers, dicts']())
    result = {name: (0.0, 0.0) for name in contenders}
    for _ in range(args.rounds):
        for name, make in contenders.items():
            # Built for this measurement and shut down after it: no other contender's workers
            # are alive while one is timed.
            ld = make()
            rate, cpu = measure(ld, passes)
            shut_down(ld)
            if rate > result[name][0]:
                result[name] = (rate, cpu)
    return result


def shut_down(ld) -> None:
    iterator = getattr(ld, '_iterator', None)
    if iterator is not None and hasattr(iterator, '_shutdown_workers'):
        iterator._shutdown_workers()
    del ld
    gc.collect()


def phase_times(root: Path, scale: tuple, batch_size: int, passes: int,
                dataset_class=LazyCocoDataset) -> dict[str, float]:
    """Where a batched sample's time goes, threads mode (one process): ms per sample of each
    step, each timed around its own calls, after one untimed pass."""
    dataset = our_dataset(root, scale, 'device', dataset_class)
    inner = dataset.dataset
    totals: dict[str, float] = {}

    def timed(owner, name: str, label: str) -> None:
        call = getattr(owner, name)

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                totals[label] = totals.get(label, 0.0) + time.perf_counter() - start
        setattr(owner, name, wrapper)  # on the instance: nothing else sees it

    batches = seeded_batches(len(inner), batch_size)
    fast_collate(dataset.__getitems__(batches[0]))  # builds the fetcher, so it can be timed
    fetcher = inner._fetcher
    _, loader, pack = inner.pipeline.transforms
    annotations = fetcher.plan.before[0]  # LoadLazyAnnotations, or its ColumnarAnnotations
    info = 'get_data_info' if fetcher.columns is None else 'data_info_without_instances'
    timed(inner, info, 'data_info (the store record to a dict)')
    timed(annotations, 'transform', 'annotations (LoadLazyAnnotations, or from the columns)')
    if fetcher.columns is not None:
        timed(fetcher.columns, 'prepare',
              'the columns of the batch (ColumnarAnnotations.prepare)')
    timed(loader, 'plan', 'NativeLoadResizeFlip.plan (read, header, geometry, flip)')
    # Threads mode decodes while it plans and packs (batch_decoder.py): what the planning
    # thread spends queueing the images, and waiting for (and helping with) the rest of the
    # decode.
    overlapped = {name: getattr(BatchDecoder, name) for name in ('add', 'images')}
    timed(BatchDecoder, 'add', 'queueing each image as it is planned (BatchDecoder.add)')
    timed(BatchDecoder, 'images',
          'the decode left after planning and packing (BatchDecoder.images: waits, '
          'decodes too)')
    timed(loader, 'finish', 'NativeLoadResizeFlip.finish')
    timed(pack, 'transform', 'PackDetInputs')
    timed(fetcher, 'fetch', 'whole fetch')
    for batch in batches:  # warm-up
        fast_collate(dataset.__getitems__(batch))
    totals.clear()
    start = time.perf_counter()
    for _ in range(passes):
        for batch in batches:
            fast_collate(dataset.__getitems__(batch))
    totals['whole batch, fast_collate included'] = time.perf_counter() - start
    samples = passes * len(inner)
    steps = sum(v for k, v in totals.items() if not k.startswith('whole'))
    totals['the rest of the fetch (seeded RNGs, bad-sample and in-flight bookkeeping)'] = (
        totals['whole fetch'] - steps)
    for name, method in overlapped.items():  # the class's own methods again
        setattr(BatchDecoder, name, method)
    return {label: 1000 * value / samples for label, value in totals.items()}


def loader_arguments(description: str, out: str, passes: int) -> argparse.ArgumentParser:
    """The command line every DataLoader benchmark of this kind takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('--images', type=int, default=64)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--workers', type=int, default=2)
    parser.add_argument('--cores', default='0,1', help='the CPUs every contender is pinned to')
    parser.add_argument('--passes', type=int, default=passes)
    parser.add_argument('--rounds', type=int, default=passes)
    parser.add_argument('--out', type=Path, default=Path(out))
    return parser


def main() -> None:
    parser = loader_arguments(__doc__.split('\n')[0], 'benchmarks/results/batched_fetch.md', 2)
    parser.add_argument('--content', choices=('photos', 'synthetic'), default='photos')
    args = parser.parse_args()
    cores = pin_to(args.cores)
    load_before = os.getloadavg()
    rows, phases = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, width, height, scale in SCENARIOS:
            root = Path(tmp) / f'{width}x{height}'
            paths = make_dataset(root, args.images, width, height, args.content)
            result = run_scenario(root, paths, scale, args, len(cores))
            rows.append((name, result))
            for mode, dataset_class in (('columns', LazyCocoDataset),
                                        ('dicts', InstancesAsDicts)):
                phases.append((f'{name}, {mode}', phase_times(
                    root, scale, args.batch_size, args.passes, dataset_class)))
            print(name, result, phases[-1], flush=True)
    load_after = os.getloadavg()
    write_report(args.out, report(rows, phases, args, cores, load_before, load_after))


def pin_to(cores: str, mmdet_rows: bool = True) -> list[int]:
    """Pin this process (and the workers it starts) to ``cores`` ('0,1') and set what every
    contender shares: one torch thread, mmdet's best setting (no OpenCV threads, turbojpeg), the
    mmdet registry scope. Returns the core list. ``mmdet_rows=False``: a benchmark without
    mmdet's loaders leaves mmcv's backend alone (PyTurboJPEG need not be installed)."""
    pinned = [int(c) for c in cores.split(',')]
    os.sched_setaffinity(0, pinned)
    torch.set_num_threads(1)
    cv2.setNumThreads(0)  # mmdet's best setting; our decoder uses no OpenCV threads
    init_default_scope('mmdet')
    if mmdet_rows:
        mmcv.use_backend('turbojpeg')
    return pinned


def mmdet_best(result: dict) -> tuple[float, float]:
    """The best of the swept mmdet-best rows."""
    return max((v for k, v in result.items() if k.startswith('mmdet best')), key=lambda v: v[0])


def report(rows, phases, args, cores, load_before, load_after) -> list[str]:
    order = ['mmdet default', 'mmdet best', 'today, fused', 'today, deferred',
             'batched, workers', 'batched, threads', 'ceiling']
    content = ('real photographs (benchmarks/photos.py)' if args.content == 'photos'
               else 'photo-like synthetic images')
    lines = [
        '# Batched fetch vs the per-sample paths, mmdet and the decode ceiling (issue 30)',
        '',
        f'Command: `PYTHONPATH=. python3 benchmarks/batched_fetch.py --images {args.images} '
        f'--batch-size {args.batch_size} --workers {args.workers} --cores {args.cores} '
        f'--passes {args.passes} --rounds {args.rounds} --content {args.content}`',
        '',
        f'Machine: {platform.machine()}, pinned to CPUs {cores} of '
        f'{psutil.cpu_count()}, Python {platform.python_version()}, torch {torch.__version__}, '
        f'mmdet_ext {mmdet_ext.__version__}. Load average (1, 5, 15 min) before: '
        f'{", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}. {args.images} {content} per scenario '
        f'as quality-90 JPEGs, COCO-like annotations, batch {args.batch_size}, '
        f'{args.workers} workers unless said, persistent; best of {args.rounds} interleaved '
        f'rounds of one warm-up pass + {args.passes} timed passes. CPU s/sample: user + system '
        'of the main process and its workers over the timed passes, divided by the samples.',
        '',
        '| scenario | ' + ' | '.join(order) + ' | batched / ceiling | batched / mmdet best '
        '| batched / today deferred |',
        '|---|' + '---:|' * (len(order) + 3),
    ]
    details = []
    for name, result in rows:
        best_mmdet = mmdet_best(result)
        best_workers = [k for k, v in result.items() if v == best_mmdet][0].split(', ')[1]
        ceiling = max(result['ceiling, processes'], result['ceiling, threads'],
                      key=lambda v: v[0])
        batched = max(result['batched, workers'], result['batched, threads'], key=lambda v: v[0])
        cells = {**result, 'mmdet best': best_mmdet, 'ceiling': ceiling}
        row = [f'{cells[k][0]:.1f} ({1000 * cells[k][1]:.1f})' for k in order]
        lines.append(f'| {name} | ' + ' | '.join(row) + f' | {batched[0] / ceiling[0]:.2f}x | '
                     f'{batched[0] / best_mmdet[0]:.2f}x | '
                     f'{batched[0] / result["today, deferred"][0]:.2f}x |')
        details += [f'- {name}: mmdet best with {best_workers}. Every row: ' + ', '.join(
            f'{k} {v[0]:.1f}/s ({1000 * v[1]:.1f} CPU ms)' for k, v in result.items()) + '.']
    lines += ['', 'Cells: samples/s (CPU ms per sample). "batched" is the better of the workers '
              'and threads rows; "ceiling" the better of decoding in worker processes and on '
              'threads. Goals (issue 30): batched >= 0.9x the decode ceiling at 640x480, >= 2.5x '
              'mmdet\'s best setting.', '', *details]
    fused = ['mmdet best', 'today, fused', 'batched fused, workers', 'batched fused, threads',
             'fused ceiling']
    lines += ['', "## Resized in the worker (pixels_on='worker', the main job's pipeline)", '',
              'The same run. The fused ceiling is the native work of this path alone: read + '
              '`decode_images_into` with the same resizes (and reduced decodes) on the threads, '
              'every other image flipped.',
              '', '| scenario | ' + ' | '.join(fused) + ' | batched fused / fused ceiling | '
              'batched fused / mmdet best | batched fused / today fused |',
              '|---|' + '---:|' * (len(fused) + 3)]
    for name, result in rows:
        best_mmdet = mmdet_best(result)
        batched = max(result['batched fused, workers'], result['batched fused, threads'],
                      key=lambda v: v[0])
        cells = {**result, 'mmdet best': best_mmdet}
        row = [f'{cells[k][0]:.1f} ({1000 * cells[k][1]:.1f})' for k in fused]
        lines.append(f'| {name} | ' + ' | '.join(row) + ' | ' + ' | '.join(
            f'{batched[0] / other[0]:.2f}x' for other in (
                result['fused ceiling'], best_mmdet, result['today, fused'])) + ' |')
    columns = ['batched, workers, dicts', 'batched, workers', 'batched fused, workers, dicts',
               'batched fused, workers']
    lines += ['', "## Instances from the store's columns against per-instance dicts", '',
              'The same run: the batched fetch with `LoadLazyAnnotations` read from the '
              'store\'s columns for the whole batch (`ColumnarAnnotations`, the default) and as '
              'before, through `get_data_info`\'s per-instance dicts.', '',
              '| scenario | ' + ' | '.join(columns) + ' | deferred: columns / dicts | '
              'fused: columns / dicts |', '|---|' + '---:|' * (len(columns) + 2)]
    for name, result in rows:
        row = [f'{result[k][0]:.1f} ({1000 * result[k][1]:.1f})' for k in columns]
        lines.append(f'| {name} | ' + ' | '.join(row) + ' | ' + ' | '.join(
            f'{result[a][0] / result[b][0]:.2f}x' for a, b in (
                (columns[1], columns[0]), (columns[3], columns[2]))) + ' |')
    labels = list(dict.fromkeys(label for _, times in phases for label in times))
    lines += ['', '## Where a batched sample\'s time goes (threads, one process)', '',
              f'ms per sample, {args.passes} passes after a warm-up, each step timed around its '
              f'own calls; the decode runs on {len(cores)} native threads, while the batch is '
              'planned and packed (one thread fewer then; the planning thread joins in once it '
              'has planned and packed the batch: `batch_decoder.py`), so its time is what '
              'the planning thread spends queueing images and waiting for the rest.', '',
              '| step | ' + ' | '.join(name for name, _ in phases) + ' |',
              '|---|' + '---:|' * len(phases)]
    lines += [f'| {label} | ' + ' | '.join(f'{times[label]:.3f}' if label in times else '-'
                                           for _, times in phases) + ' |'
              for label in labels]
    return lines


if __name__ == '__main__':
    main()
