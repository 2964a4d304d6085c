"""Generate the synthetic toy COCO dataset (see mmdet_ext/toy_data.py).

    python tools/make_toy_coco.py --out data/toy_coco --num-train 96 --num-val 24 --seed 0
"""

import argparse

from checkout_path import add_checkout_to_path

add_checkout_to_path()

from mmdet_ext.toy_data import SPLITS, make_toy_coco  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="data/toy_coco", help="dataset root")
    parser.add_argument("--num-train", type=int, default=96, help="train images")
    parser.add_argument("--num-val", type=int, default=24, help="val images")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--width", type=int, help="every image's width, px (default: a mix)")
    parser.add_argument("--height", type=int, help="every image's height, px (default: a mix)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    summary = make_toy_coco(
        args.out, args.num_train, args.num_val, args.seed, args.width, args.height
    )
    splits = []
    for split in SPLITS:
        s = summary[split]
        kinds = ", ".join(f"{name} {count}" for name, count in s["per_category"].items())
        splits.append(
            f"{split}: {s['images']} images, {s['instances']} instances ({kinds}), "
            f"{s['crowd']} crowd"
        )
    print(f"toy COCO in {summary['root']} | " + " | ".join(splits))


if __name__ == "__main__":
    main()
