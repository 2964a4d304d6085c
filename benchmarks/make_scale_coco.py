"""Synthetic COCO-format jsons at dataset scale, written streaming (the generator holds one chunk).

    python benchmarks/make_scale_coco.py coco  OUT.json   # 118,287 images, 864,309 polygons
    python benchmarks/make_scale_coco.py o365  OUT.json   # 1.7M images, 25M boxes, no masks
    python benchmarks/make_scale_coco.py lvis  OUT.json   # 100,170 images, 1.27M polygons
    python benchmarks/make_scale_coco.py coco OUT.json --scale 0.01   # a small one
    python benchmarks/make_scale_coco.py coco OUT.json --image-sizes coco  # mixed sizes

Shapes follow the real files: image records with license/url/date fields, polygons of 2-decimal
coordinates (COCO: 86% of instances one part, ~24 points a part), 1% crowd instances as
uncompressed RLEs (COCO's json form), area with many decimals, bbox with 2. Category names are
the classes mmdet's dataset classes expect (CocoDataset's 80; Objects365V2Dataset's 365), so the
baseline keeps every instance. LVIS records carry ``neg_category_ids`` and
``not_exhaustive_category_ids``.

Images are all 640x480 unless ``--image-sizes coco``: then each image's (height, width) is drawn
from ``COCO_SIZES``, COCO train's common sizes (mostly 640 wide, about a quarter portrait, a few
square; the shares are rounded guesses, not counts), and its instances lie inside it.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

SIZES = {  # images, instances
    'coco': (118_287, 864_309),
    'o365': (1_700_000, 25_000_000),
    'lvis': (100_170, 1_270_141),
}
CHUNK = 20_000  # instances formatted at a time
# (height, width): share of the images, for --image-sizes coco.
COCO_SIZES = {(480, 640): 0.40, (427, 640): 0.25, (424, 640): 0.05, (640, 480): 0.12,
              (640, 427): 0.10, (640, 640): 0.03, (512, 640): 0.05}


def _classes(kind: str) -> tuple:
    from mmdet.datasets import CocoDataset, Objects365V2Dataset
    if kind == 'o365':
        return Objects365V2Dataset.METAINFO['classes']
    if kind == 'lvis':
        return tuple(f'lvis_class_{k}' for k in range(1203))
    return CocoDataset.METAINFO['classes']


def _image_record(image_id: int, height: int, width: int, kind: str, rng) -> str:
    name = f'{image_id:012d}.jpg'
    record = {'license': int(rng.integers(1, 8)), 'file_name': name,
              'coco_url': f'http://images.cocodataset.org/train2017/{name}',
              'height': height, 'width': width, 'date_captured': '2013-11-14 11:18:45',
              'flickr_url': f'http://farm4.staticflickr.com/3153/{image_id}_0123456789_z.jpg',
              'id': image_id}
    if kind == 'lvis':
        record['neg_category_ids'] = [int(v) for v in rng.choice(1203, 5, replace=False) + 1]
        record['not_exhaustive_category_ids'] = [int(rng.integers(1, 1204))]
    return json.dumps(record)


def _polygon(rng, cx: float, cy: float, rx: float, ry: float, points: int,
             height: int = 480, width: int = 640) -> list:
    angles = np.sort(rng.uniform(0, 2 * np.pi, points))
    radius = rng.uniform(0.6, 1.0, points)
    xs = np.clip(cx + rx * radius * np.cos(angles), 0, width - 0.01)
    ys = np.clip(cy + ry * radius * np.sin(angles), 0, height - 0.01)
    return np.round(np.stack([xs, ys], axis=1).ravel(), 2).tolist()


def write(kind: str, out: Path, scale: float = 1.0, seed: int = 0,
          image_sizes: str = 'fixed') -> None:
    rng = np.random.default_rng(seed)
    num_images, num_anns = (max(1, int(n * scale)) for n in SIZES[kind])
    classes = _classes(kind)
    # Instances per image: multinomial over images, every image its share.
    image_of_ann = np.sort(rng.integers(1, num_images + 1, num_anns))
    image_hw = np.tile([480, 640], (num_images + 1, 1))  # row = image id (row 0 unused)
    if image_sizes == 'coco':
        sizes = np.array(list(COCO_SIZES))
        shares = np.array(list(COCO_SIZES.values()))
        image_hw[1:] = sizes[np.random.default_rng(seed + 1).choice(
            len(sizes), num_images, p=shares / shares.sum())]
    with open(out, 'w') as f:
        f.write('{"info": {"description": "synthetic %s-sized", "version": "1.0"}, '
                '"licenses": [{"url": "http://creativecommons.org/", "id": 1, "name": "x"}], '
                '"images": [' % kind)
        for start in range(1, num_images + 1, CHUNK):
            ids = range(start, min(start + CHUNK, num_images + 1))
            f.write(('' if start == 1 else ', ') + ', '.join(
                _image_record(i, int(image_hw[i, 0]), int(image_hw[i, 1]), kind, rng)
                for i in ids))
        f.write('], "annotations": [')
        for start in range(0, num_anns, CHUNK):
            end = min(start + CHUNK, num_anns)
            records = []
            n = end - start
            heights, widths = image_hw[image_of_ann[start:end]].T
            ws = np.round(rng.uniform(4, 300, n), 2)
            hs = np.round(rng.uniform(4, 300, n), 2)
            xs = np.round(rng.uniform(0, 1, n) * (widths - ws), 2)
            ys = np.round(rng.uniform(0, 1, n) * (heights - hs), 2)
            areas = ws * hs * rng.uniform(0.4, 0.9, n)
            cats = rng.integers(1, len(classes) + 1, n)
            for k, ann_index in enumerate(range(start, end)):
                x, y, w, h = float(xs[k]), float(ys[k]), float(ws[k]), float(hs[k])
                height, width = int(heights[k]), int(widths[k])
                ann = {'id': ann_index + 1, 'image_id': int(image_of_ann[ann_index]),
                       'category_id': int(cats[k]), 'bbox': [x, y, w, h],
                       'area': float(areas[k]), 'iscrowd': 0}
                if kind == 'o365':
                    ann['isfake'] = 0
                    ann['isreflected'] = 0
                elif kind == 'coco' and rng.random() < 0.01:
                    ann['iscrowd'] = 1
                    ann['segmentation'] = {'counts': [int(v) for v in _rle_counts(
                                               x, y, w, h, height, width)],
                                           'size': [height, width]}
                else:
                    parts = 1 if rng.random() < 0.86 else int(rng.integers(2, 4))
                    points = 24 if kind == 'coco' else 14
                    ann['segmentation'] = [
                        _polygon(rng, x + w / 2, y + h / 2, w / 2, h / 2,
                                 max(3, int(rng.integers(points // 2, points * 3 // 2))),
                                 height, width)
                        for _ in range(parts)]
                records.append(json.dumps(ann))
            f.write(('' if start == 0 else ', ') + ', '.join(records))
            print(f'\r{kind}: {end}/{num_anns} annotations', end='', file=sys.stderr, flush=True)
        categories = [{'supercategory': 'thing', 'id': k + 1, 'name': name}
                      for k, name in enumerate(classes)]
        if kind == 'lvis':
            for category in categories:
                category.update({'frequency': 'f', 'synonyms': [category['name']], 'def': 'x',
                                 'image_count': 1, 'instance_count': 1})
        f.write('], "categories": ' + json.dumps(categories) + '}')
    print(file=sys.stderr)


def _rle_counts(x: float, y: float, w: float, h: float, height: int, width: int) -> list:
    """Uncompressed column-major RLE counts of the box, as COCO's crowd json has them."""
    x0, x1 = int(x), min(width, int(x + w) + 1)
    y0, y1 = int(y), min(height, int(y + h) + 1)
    counts = [x0 * height + y0]
    for col in range(x0, x1):
        counts += [y1 - y0, height - (y1 - y0)]
    counts[-1] = height * width - sum(counts[:-1])
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('kind', choices=sorted(SIZES))
    parser.add_argument('out', type=Path)
    parser.add_argument('--scale', type=float, default=1.0, help='fraction of the full size')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--image-sizes', choices=('fixed', 'coco'), default='fixed',
                        help="'fixed': every image 640x480; 'coco': COCO_SIZES")
    args = parser.parse_args()
    write(args.kind, args.out, args.scale, args.seed, args.image_sizes)


if __name__ == '__main__':
    main()
