"""Build (or check) the annotation store of a COCO json ahead of training.

    python tools/build_store.py data/coco/annotations/instances_train2017.json [--cache-dir DIR]

Training builds it on first use anyway; this does it up front, with a progress bar (bytes of the
json read by the native reader; annotations stored by the Python one), and prints where the store
is, how big it is next to the json, the build time and the peak RSS of the process.
"""
import argparse
import os
import resource
import time

from checkout_path import add_checkout_to_path

add_checkout_to_path()

from mmdet_ext.datasets import open_store  # noqa: E402
from mmdet_ext.datasets.annotation_store import json_reader  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('ann_file', help='COCO instances json')
    parser.add_argument('--cache-dir', help='where to keep the store (default: next to the json)')
    parser.add_argument('--image-names', choices=('file_name', 'coco_url'), default='file_name',
                        help="coco_url: LVIS v1's store (LazyLVISV1Dataset), images named by "
                        'coco_url as mmdet names them')
    args = parser.parse_args()

    last_percent = [-1]
    reader = json_reader()

    def progress(done: int, total: int) -> None:
        percent = 100 * done // max(total, 1)
        if percent == last_percent[0]:
            return
        last_percent[0] = percent
        filled = 40 * percent // 100
        unit = (f'{total / 2**20:.0f} MiB of json' if reader == 'native'
                else f'{total} annotations')
        print(f'\r[{"#" * filled}{"." * (40 - filled)}] {percent:3d}% of {unit}',
              end='', flush=True)

    start = time.perf_counter()
    store = open_store(args.ann_file, args.cache_dir, progress=progress,
                       image_names=args.image_names)
    seconds = time.perf_counter() - start
    json_size = os.path.getsize(args.ann_file)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    print(f'\n{store.path}: {store.num_images} images, {store.num_instances} instances')
    print(f'store {store.nbytes / 2**20:.1f} MiB = {store.nbytes / max(json_size, 1):.2f}x the json '
          f'({json_size / 2**20:.1f} MiB); {seconds:.1f} s ({reader} json reader; a cached store '
          f'is only opened); peak RSS {peak / 2**30:.2f} GiB')


if __name__ == '__main__':
    main()
