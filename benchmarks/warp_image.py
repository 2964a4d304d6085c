"""Resize + flip of one decoded image: ``warp_image`` against mmcv's ``imresize`` + ``imflip``.

The training pipeline resizes every image to its target and flips about half of them. mmcv does
that in two calls of the cv2 wheel, each into a new array (``cv2.resize``, ``cv2.flip``), on the
interleaved HxWxC image. ``warp_image`` (and ``decode_images_into``'s warps, the same code,
``csrc/transforms/warp_planar.h``) resizes with the OpenCV the extension links, then writes the
channel-planar CxHxW result the model takes, flipping as it writes. Both sides on one thread,
on real photographs (``benchmarks/photos.py``), identical pixels (checked before timing); the
best of ``--repeat`` rounds of 20 calls, rounds interleaved.

    PYTHONPATH=. python3 benchmarks/warp_image.py [--repeat 7]
        [--out benchmarks/results/warp_image.md]
"""
import argparse
import platform
import time
from pathlib import Path

import cv2
import mmcv
import numpy as np
import torch

import mmdet_ext
from benchmarks import write_report
from benchmarks.photos import load_photos, photo_crop
from mmdet_ext.ops import warp_image

# (input w, h) -> (output w, h): a COCO image to mmdet's 1333x800 (keep_ratio), a large photo down.
SIZES = [((640, 480), (1067, 800)), ((2560, 1920), (1067, 800))]
DIRECTIONS = [None, 'horizontal', 'vertical', 'diagonal']
CALLS = 20


def best_ms(call, repeat: int) -> float:
    call()
    best = float('inf')
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(CALLS):
            call()
        best = min(best, (time.perf_counter() - start) / CALLS)
    return 1000 * best


def mmcv_warp(image: np.ndarray, out_wh: tuple, direction):
    resized = mmcv.imresize(image, out_wh, interpolation='bilinear')
    return resized if direction is None else mmcv.imflip(resized, direction)


def mmcv_warp_chw(image: np.ndarray, out_wh: tuple, direction):
    """mmcv's warp, then the copy to CxHxW that ``PackDetInputs`` makes of it."""
    return np.ascontiguousarray(mmcv_warp(image, out_wh, direction).transpose(2, 0, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--repeat', type=int, default=7)
    parser.add_argument('--out', type=Path, default=Path('benchmarks/results/warp_image.md'))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(0)
    photos = load_photos()
    rows = []
    for (in_wh, out_wh) in SIZES:
        image = photo_crop(photos, np.random.default_rng(0), *in_wh)
        tensor = torch.from_numpy(image)
        for direction in DIRECTIONS:
            ours = lambda: warp_image(tensor, out_wh[::-1], 'bilinear', direction)  # noqa: E731
            theirs = lambda: mmcv_warp(image, out_wh, direction)  # noqa: E731
            assert np.array_equal(ours().permute(1, 2, 0).numpy(), theirs())
            chw = lambda: mmcv_warp_chw(image, out_wh, direction)  # noqa: E731
            times = {'ours': [], 'mmcv': [], 'chw': []}
            for _ in range(3):  # interleaved rounds, each side keeps its best
                times['ours'].append(best_ms(ours, args.repeat))
                times['mmcv'].append(best_ms(theirs, args.repeat))
                times['chw'].append(best_ms(chw, args.repeat))
            rows.append((in_wh, out_wh, direction, min(times['mmcv']), min(times['chw']),
                         min(times['ours'])))
            print(rows[-1], flush=True)
    lines = [
        '# Resize + flip of one image: warp_image against mmcv.imresize + mmcv.imflip', '',
        f'Command: `PYTHONPATH=. python3 benchmarks/warp_image.py --repeat {args.repeat}`', '',
        f'Machine: {platform.machine()}, Python {platform.python_version()}, torch '
        f'{torch.__version__}, cv2 {cv2.__version__} (mmcv\'s), mmdet_ext '
        f'{mmdet_ext.__version__}; one thread each side. A real photograph cropped to the input '
        f'size, bilinear; ms per call, best of 3 interleaved rounds of {args.repeat} x {CALLS} '
        'calls. Same pixels both sides (asserted). mmcv writes an HxWxC array (then '
        '`PackDetInputs` copies it to CxHxW); warp_image writes the CxHxW tensor itself.', '',
        '| input -> output | flip | mmcv imresize + imflip | the same + CxHxW copy | warp_image '
        '| warp_image / mmcv | warp_image / mmcv + copy |', '|---|---|---:|---:|---:|---:|---:|']
    for in_wh, out_wh, direction, theirs, chw, ours in rows:
        lines.append(f'| {in_wh[0]}x{in_wh[1]} -> {out_wh[0]}x{out_wh[1]} | {direction} | '
                     f'{theirs:.3f} | {chw:.3f} | {ours:.3f} | {ours / theirs:.2f}x | '
                     f'{ours / chw:.2f}x |')
    write_report(args.out, lines)


if __name__ == '__main__':
    main()
