"""Check a COCO instances json and its files, and print every problem found.

    python tools/validate_coco.py ANN_FILE --img-prefix data/coco/train2017/ [--data-root DIR]
        [--policy kind=action ...] [--max-pixels N] [--json-only] [--jsonl OUT]

Prints one line per problem (kind, image id, annotation id, file, reason, action under the policy)
and a summary; exits 1 when a problem's policy is 'fail', else 0. Nothing is written unless
``--jsonl`` is given (not written when the policy fails). The same checks run when ``LazyCocoDataset(validate=True)`` builds its store.
"""
import argparse
import sys
from pathlib import Path

from checkout_path import add_checkout_to_path

add_checkout_to_path()

from mmdet_ext.datasets.validation import (
    DEFAULT_POLICY,
    DataValidationError,
    apply_policy,
    find_problems,
    parse_coco_json,
    resolve_policy,
)
from mmdet_ext.io import DEFAULT_MAX_PIXELS, read_regular_file


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('ann_file', help='COCO instances json')
    parser.add_argument('--img-prefix', default='', help='directory images[].file_name is in')
    parser.add_argument('--data-root', default='', help='directory mask_file paths are relative to')
    parser.add_argument('--policy', nargs='*', default=[], metavar='KIND=ACTION',
                        help=f'override the default policy; kinds: {", ".join(DEFAULT_POLICY)}')
    parser.add_argument('--max-pixels', type=int, default=DEFAULT_MAX_PIXELS)
    parser.add_argument('--json-only', action='store_true', help='do not read image/mask files')
    parser.add_argument('--jsonl', help='also write the report here, one json object per line')
    args = parser.parse_args()

    policy = resolve_policy(dict(item.split('=', 1) for item in args.policy))
    try:
        coco = parse_coco_json(read_regular_file(args.ann_file)[0], args.ann_file)
    except (DataValidationError, OSError) as err:  # OSError: missing, a pipe, a directory
        print(err)
        return 1
    problems = find_problems(coco, args.img_prefix, args.data_root, max_pixels=args.max_pixels,
                             check_files=not args.json_only)
    for problem in problems:
        print(f'[{policy[problem.kind]}] {problem}')
    try:
        _, report = apply_policy(coco, problems, policy)
    except DataValidationError as err:
        print(err)
        return 1
    print(report.summary())
    if args.jsonl:
        report.write_jsonl(args.jsonl)
    return 0


if __name__ == '__main__':
    sys.exit(main())
