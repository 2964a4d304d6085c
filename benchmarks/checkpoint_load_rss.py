"""Peak RSS of loading a large checkpoint: plain ``torch.load(map_location='cpu')`` vs ours (mmap).

Each variant runs in a fresh subprocess and reports ``ru_maxrss`` after the load minus before it,
so interpreter and import overhead cancel out. Usage::

    python benchmarks/checkpoint_load_rss.py [--size-mb 500] [--path /tmp/ckpt_rss.pth]

Results go to ``benchmarks/results/checkpoint_load_rss.md``.
"""
import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

VARIANTS = {
    'torch.load(map_location="cpu", weights_only=False)':
        'torch.load(path, map_location="cpu", weights_only=False)',
    'load_checkpoint_to_cpu(mmap=False)':
        'load_checkpoint_to_cpu(path, mmap=False)',
    'load_checkpoint_to_cpu(mmap=True)  [default]':
        'load_checkpoint_to_cpu(path, mmap=True)',
}

MEASURE = textwrap.dedent('''
    import resource, sys, torch
    from mmdet_ext.engine.checkpoint_loading import load_checkpoint_to_cpu
    path = sys.argv[1]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    checkpoint = {load}
    total = sum(t.numel() * t.element_size() for t in checkpoint['state_dict'].values())
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(before / 1024, after / 1024, total / 2**20)
''')


def make_checkpoint(path: str, size_mb: int) -> None:
    """A Runner-shaped checkpoint: ``meta`` plus a state_dict of 4 MB float32 tensors."""
    import torch

    n = size_mb // 4
    state_dict = {f'layer{i}.weight': torch.randn(1024, 1024) for i in range(n)}
    torch.save({'meta': {'epoch': 1, 'iter': 1}, 'state_dict': state_dict}, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--size-mb', type=int, default=500)
    parser.add_argument('--path', default='/tmp/mmdet_ext_ckpt_rss.pth')
    args = parser.parse_args()
    if not os.path.exists(args.path):
        make_checkpoint(args.path, args.size_mb)
    rows = []
    for name, load in VARIANTS.items():
        out = subprocess.run([sys.executable, '-c', MEASURE.format(load=load), args.path],
                             check=True, capture_output=True, text=True).stdout.split()
        before, after, tensors = map(float, out[-3:])
        rows.append((name, before, after, tensors))
        print(f'{name:50s} peak RSS {before:7.1f} -> {after:7.1f} MiB (tensors {tensors:.0f} MiB)')
    file_mb = os.path.getsize(args.path) / 2**20
    lines = [
        '# Peak RSS of loading a checkpoint',
        '',
        f'Command: `python benchmarks/checkpoint_load_rss.py --size-mb {args.size_mb}` '
        f'(file {file_mb:.0f} MiB in /tmp; each variant in a fresh process; '
        'growth of `ru_maxrss` across the load).',
        '',
        '| loader | peak RSS before load (MiB) | after (MiB) | growth (MiB) | tensors (MiB) |',
        '|---|---:|---:|---:|---:|',
        *(f'| `{name}` | {before:.1f} | {after:.1f} | {after - before:.1f} | {tensors:.0f} |'
          for name, before, after, tensors in rows),
        '',
        'With mmap the storages stay file-backed until touched: the Runner copies them into the '
        "model's parameters (on each rank's device) and the mapping is dropped; nothing is "
        'staged in anonymous memory first.',
    ]
    out_path = Path(__file__).parent / 'results' / 'checkpoint_load_rss.md'
    out_path.write_text('\n'.join(lines) + '\n')
    print(f'wrote {out_path}')


if __name__ == '__main__':
    main()
