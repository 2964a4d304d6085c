"""``decode_on='device'`` (the workers send the JPEG bytes) against ``decode_on='worker'``.

Same conditions as ``batched_fetch.py`` (its dataset, pinning, steady state, best of interleaved
rounds, CPU-seconds summed over the main process and its workers), 640x480 real photographs to
1333x800, ``pixels_on='device'`` and the batched fetch in DataLoader workers for both:

- decoded in the workers: ``decode_on='worker'`` (``reduced_decode=False``, as the other);
- bytes from the workers: ``decode_on='device'``, the loader alone. The decode is not in this
  row: it is the training device's (below), so the row is what the workers cost without it;
- bytes + CPU decode: the same, each batch then decoded by ``decode_encoded_batch`` on the CPU in
  the main process (the fallback of a CPU model or a build without nvJPEG, on every core);
- bytes + nvJPEG: the same on the GPU (``decode_encoded_batch`` on ``cuda``, synchronised), only
  where there is a GPU and this build's nvJPEG loads; otherwise the report says why not.

Also the bytes sent per sample (the batch's ``inputs``). Before timing, the first batches of the
bytes rows decoded on the CPU are asserted equal to the workers' decoded batches, bit for bit.

    PYTHONPATH=. python3 benchmarks/gpu_decode.py [--images 64] [--batch-size 8] [--cores 0,1]
        [--passes 3] [--rounds 3]
"""
import os
import platform
import tempfile
from pathlib import Path

import psutil
import torch

import mmdet_ext
from benchmarks import write_report
from benchmarks.batched_fetch import (loader, loader_arguments, make_dataset, measure, pin_to,
                                      shut_down)
from mmdet_ext import LazyCocoDataset, fast_collate
from mmdet_ext.datasets.sample_seeds import PerSampleSeedDataset
from mmdet_ext.ops import decode_encoded_batch, nvjpeg_problem
from mmdet_ext.transforms import DEFERRED_META_KEYS

WIDTH, HEIGHT, SCALE = 640, 480, (1333, 800)
NOTE = ('"bytes from the workers" leaves out the decode, which is the training device\'s: it is '
        'what the workers cost without it. "bytes + CPU decode" is the fallback (a CPU model, or '
        'no nvJPEG): the decode in the main process after the workers. Resize and normalisation '
        '(resize_normalize_batch) are in no row: they are the same for all.')


def dataset(root: Path, decode_on: str) -> PerSampleSeedDataset:
    return PerSampleSeedDataset(LazyCocoDataset(
        data_root=str(root), ann_file='annotations/instances_train.json',
        data_prefix=dict(img='train/'),
        pipeline=[dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True),
                  dict(type='NativeLoadResizeFlip', scale=SCALE, keep_ratio=True, prob=0.5,
                       pixels_on='device', decode_on=decode_on, reduced_decode=False),
                  dict(type='PackDetInputs', meta_keys=DEFERRED_META_KEYS)]))


class DecodedAfter:
    """The batches of ``batches`` with their bytes decoded on ``device`` (the preprocessor's
    first step), the decode waited for."""

    def __init__(self, batches, device: torch.device) -> None:
        self.batches, self.device = batches, device

    def __iter__(self):
        for batch in self.batches:
            warp = batch['pending_warp']
            shapes = [(c, h, w) for h, w, c in warp['image_shapes'].tolist()]
            pixels = decode_encoded_batch(batch['inputs'], warp['encoded_sizes'].tolist(),
                                          shapes, self.device)
            if self.device.type == 'cuda':
                torch.cuda.synchronize(self.device)
            yield {**batch, 'inputs': pixels}


def assert_same_pixels(decoded_loader, bytes_loader) -> None:
    """The bytes rows decode (on the CPU) to the workers' batches: or the timings compare
    nothing."""
    firsts = [batch for _, batch in zip(range(2), decoded_loader)]
    seconds = [batch for _, batch in zip(range(2), DecodedAfter(bytes_loader,
                                                                torch.device('cpu')))]
    for want, got in zip(firsts, seconds):
        assert torch.equal(got['inputs'], want['inputs'])
        for key in ('image_shapes', 'out_shapes', 'flips'):
            assert torch.equal(got['pending_warp'][key], want['pending_warp'][key])
        assert [s.img_id for s in got['data_samples']] == \
            [s.img_id for s in want['data_samples']]


def bytes_per_sample(ld) -> float:
    sent = [(batch['inputs'].numel(), len(batch['data_samples'])) for batch in ld]
    return sum(n for n, _ in sent) / sum(b for _, b in sent)


def main() -> None:
    args = loader_arguments(__doc__.split('\n')[0], 'benchmarks/results/gpu_decode.md',
                            3).parse_args()
    cores = pin_to(args.cores, mmdet_rows=False)
    gpu = torch.device('cuda') if torch.cuda.is_available() else None
    why_no_gpu = 'no CUDA device' if gpu is None else nvjpeg_problem()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / f'{WIDTH}x{HEIGHT}'
        make_dataset(root, args.images, WIDTH, HEIGHT, 'photos')

        def make(decode_on):
            return loader(dataset(root, decode_on), args.batch_size, args.workers, fast_collate,
                          True)
        contenders = {
            'decoded in the workers': lambda: make('worker'),
            'bytes from the workers': lambda: make('device'),
            'bytes + CPU decode': lambda: DecodedAfter(make('device'), torch.device('cpu')),
        }
        if why_no_gpu is None:
            contenders['bytes + nvJPEG'] = lambda: DecodedAfter(make('device'), gpu)
        assert_same_pixels(make('worker'), make('device'))
        sent = {'decoded in the workers': bytes_per_sample(make('worker')),
                'bytes from the workers': bytes_per_sample(make('device'))}
        result = {name: (0.0, 0.0) for name in contenders}
        for _ in range(args.rounds):
            for name, build in contenders.items():
                ld = build()
                rate, cpu = measure(ld, args.passes)
                shut_down(ld.batches if isinstance(ld, DecodedAfter) else ld)
                if rate > result[name][0]:
                    result[name] = (rate, cpu)
            print(result, flush=True)
    load_after = os.getloadavg()
    lines = [
        "# decode_on='device': the workers send JPEG bytes (issue 30, item 6)", '',
        f'Command: `PYTHONPATH=. python3 benchmarks/gpu_decode.py --images {args.images} '
        f'--batch-size {args.batch_size} --workers {args.workers} --cores {args.cores} '
        f'--passes {args.passes} --rounds {args.rounds}`', '',
        f'Machine: {platform.machine()}, pinned to CPUs {cores} of {psutil.cpu_count()}, '
        f'Python {platform.python_version()}, torch {torch.__version__}, mmdet_ext '
        f'{mmdet_ext.__version__}, GPU: '
        f'{torch.cuda.get_device_name(gpu) if gpu is not None else "none"}. Load average '
        f'(1, 5, 15 min) before: {", ".join(f"{v:.2f}" for v in load_before)}; after: '
        f'{", ".join(f"{v:.2f}" for v in load_after)}. {args.images} real photographs '
        f'(benchmarks/photos.py), {WIDTH}x{HEIGHT} quality-90 JPEGs to {SCALE[0]}x{SCALE[1]}, '
        f'COCO-like annotations, batch {args.batch_size}, {args.workers} workers, persistent, '
        "pixels_on='device', batched fetch; best of "
        f'{args.rounds} interleaved rounds of one warm-up pass + {args.passes} timed passes.', '',
        '| contender | samples/s | CPU ms per sample (all processes) | bytes sent per sample |',
        '|---|---:|---:|---:|']
    for name, (rate, cpu) in result.items():
        size = f'{sent[name] / 1e3:.1f} kB' if name in sent else 'as above'
        lines.append(f'| {name} | {rate:.1f} | {1000 * cpu:.2f} | {size} |')
    if why_no_gpu is not None:
        lines.append(f'| bytes + nvJPEG | not run: {why_no_gpu} | | |')
    lines += ['', NOTE]
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
