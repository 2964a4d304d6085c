"""GPU measurements of mmdet_ext against stock mmengine/mmdet: one table, device named.

    bash tools/gpu/run.sh                      # installs what is missing, builds, then runs this
    python tools/gpu/harness.py [--output benchmarks/results/gpu.md] [--repeat 7]
    python tools/gpu/harness.py --smoke        # CPU-only check of every code path, tiny sizes

a. resume memory: peak GPU memory of resuming Mask R-CNN R50-FPN (weights + SGD momentum)
   through mmengine's Runner, stock loading vs ``CpuCheckpointLoadHook`` (resume_memory.py).
b. mask targets: time per image and peak GPU memory of the mask head's targets, BitmapMasks /
   PolygonMasks / LazyInstanceMasks, on CPU and CUDA (mask_targets.py).
c. train step: Mask R-CNN R50-FPN step time and peak memory, stock data path vs the plugin's
   (train_step.py); needs mmcv's CUDA ops (build_mmcv_ops.sh).
d. predicted masks: test-time masks to COCO RLE, mmdet's GPU paste + encode_mask_results vs
   paste_masks_to_rle (predicted_masks.py).

``--only a,d`` runs those measurements alone (the table then holds only their rows).

Without a GPU the CUDA rows say so and the CPU rows are measured; nothing is written unless
``--output`` is given. The table is never filled with estimates. docs/gpu.md explains the rows.
"""
import argparse
import datetime
import sys
from pathlib import Path

import torch

from report import Row, environment_lines, skipped, table
from timing import release_memory

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # predicted_masks reuses benchmarks/predicted_masks.py's data
MEASUREMENTS = {'a': 'a. resume memory', 'b': 'b. mask targets', 'c': 'c. train step',
                'd': 'd. predicted masks'}
DEFAULT_OUTPUT = REPO / 'benchmarks' / 'results' / 'gpu.md'


def mmcv_ops_status() -> tuple[bool, bool, str]:
    """(compiled ops import, built with CUDA, a description for the report)."""
    try:
        from mmcv.ops import get_compiling_cuda_version
    except ImportError as err:
        return False, False, f'compiled ops missing: {err}'
    cuda = get_compiling_cuda_version()
    if cuda == 'not available':
        return True, False, 'compiled ops, CPU only'
    return True, True, f'compiled ops with CUDA {cuda}'


def run(smoke: bool, repeat: int, only: str) -> tuple[list[str], list[Row]]:
    """Environment lines and table rows of the measurements ``only`` names."""
    has_ops, cuda_ops, ops_text = mmcv_ops_status()
    lines = environment_lines(ops_text)
    if not has_ops:
        # mmdet's mask structures import mmcv.ops, and so does `import mmdet_ext`.
        reason = 'mmcv ops not built (bash tools/gpu/build_mmcv_ops.sh)'
        return lines, [skipped(MEASUREMENTS[m], '-', reason) for m in only]
    import mask_targets
    import predicted_masks
    import resume_memory
    import train_step

    device = 'cpu' if smoke else 'cuda'
    rows = []
    if 'a' in only:
        rows += resume_memory.measure(device)
        release_memory()
    if 'b' in only and smoke:
        rows += mask_targets.measure(num_images=2, rois=16, height=200, width=333, repeat=1,
                                     warmup=1, mmcv_cuda_ops=cuda_ops)
    elif 'b' in only:
        rows += mask_targets.measure(repeat=repeat, mmcv_cuda_ops=cuda_ops)
    release_memory()
    if 'c' in only and smoke:
        rows += train_step.measure('cpu', cuda_ops, height=192, width=320, warmup=1, repeat=1)
    elif 'c' in only:
        rows += train_step.measure('cuda', cuda_ops)
    release_memory()
    if 'd' in only and smoke:
        rows += predicted_masks.measure('cpu', repeat=1, warmup=0, sizes=[(48, 64)])
    elif 'd' in only:
        rows += predicted_masks.measure('cuda', repeat=repeat)
    return lines, rows


def markdown(lines: list[str], rows: list[Row], command: str) -> str:
    today = datetime.date.today().isoformat()
    return '\n'.join([
        '# GPU measurements', '',
        (f'Command: `{command}` (from the repository root), {today}. '
         'How to read it: [docs/gpu.md](../../docs/gpu.md).'), '',
        *[f'- {line}' for line in lines], '',
        table(rows), '',
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--output', type=Path,
                        help=f'markdown file to write (default on CUDA: {DEFAULT_OUTPUT})')
    parser.add_argument('--repeat', type=int, default=7, help='timed runs per row; median kept')
    parser.add_argument('--smoke', action='store_true',
                        help='run every measurement on the CPU at tiny sizes to check the code '
                        'paths; numbers mean nothing and are never written')
    parser.add_argument('--only', default=','.join(MEASUREMENTS),
                        help='comma-separated letters of the measurements to run (default: all)')
    args = parser.parse_args()
    only = args.only.split(',')
    if not set(only) <= set(MEASUREMENTS):
        parser.error(f'--only takes letters of {sorted(MEASUREMENTS)}')
    if args.smoke and args.output:
        parser.error('--smoke numbers mean nothing; they are not written (drop --output)')

    lines, rows = run(args.smoke, args.repeat, only)
    if args.smoke:
        lines.insert(0, 'SMOKE RUN: every measurement on the CPU at tiny sizes; not results')
    print('\n'.join(lines))
    print(table(rows))
    output = args.output or (DEFAULT_OUTPUT if torch.cuda.is_available() and not args.smoke
                             else None)
    if output is not None:
        command = 'bash tools/gpu/run.sh' + ''.join(f' {a}' for a in sys.argv[1:])
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(markdown(lines, rows, command))
        print(f'written: {output}')


if __name__ == '__main__':
    main()
