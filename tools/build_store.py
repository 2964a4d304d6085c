"""Build (or check) the annotation store of a COCO json ahead of training.

    python tools/build_store.py data/coco/annotations/instances_train2017.json [--cache-dir DIR]

Training builds it on first use anyway; this does it up front, with a progress bar, and prints
where the store is and how big it is next to the json.
"""
import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mmdet_ext.datasets import open_store  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('ann_file', help='COCO instances json')
    parser.add_argument('--cache-dir', help='where to keep the store (default: next to the json)')
    args = parser.parse_args()

    last_percent = [-1]

    def progress(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent == last_percent[0]:
            return
        last_percent[0] = percent
        filled = 40 * percent // 100
        print(f'\r[{"#" * filled}{"." * (40 - filled)}] {percent:3d}% of {total} annotations',
              end='', flush=True)

    start = time.perf_counter()
    store = open_store(args.ann_file, args.cache_dir, progress=progress)
    print(f'\n{store.path}: {store.num_images} images, {store.num_instances} instances, '
          f'{store.nbytes / 2**20:.1f} MiB (json {os.path.getsize(args.ann_file) / 2**20:.1f} MiB), '
          f'{time.perf_counter() - start:.1f} s')


if __name__ == '__main__':
    main()
