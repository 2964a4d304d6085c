"""One loader benchmark run against several checkouts, before and after a change, in one run.

    PYTHONPATH=. python3 benchmarks/trees.py --tree before=/path/to/old --tree after=. \\
        --repeat 2 --out benchmarks/results/data_path_engine.md \\
        -- benchmarks/batched_fetch.py --images 64 --passes 2 --rounds 1

Each checkout runs its own copy of the benchmark script (``--`` and after: the script, relative to
the checkout, and its arguments), with that checkout on ``PYTHONPATH`` and its own compiled
extension; a script given by an absolute path is that one file in every checkout
(``loader_rows.py``). The checkouts take turns, ``--repeat`` times, so that a machine slowing
down during the run does not favour one of them; each row keeps its best samples/s. Rows are
read from the "Every row:" lines the loader benchmarks (``batched_fetch.py``,
``adopted_pipeline.py``) write.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROW = re.compile(r'(.+?) ([\d.]+)/s \(([\d.]+) CPU ms\)(?:, |\.?$)')
SCENARIO = re.compile(r'^- (.+?): .*Every row: (.*)$')


def rows_of(report: str) -> dict[tuple[str, str], tuple[float, float]]:
    """{(scenario, row): (samples/s, CPU ms)} from a loader benchmark's report."""
    rows = {}
    for line in report.splitlines():
        match = SCENARIO.match(line)
        if match is None:
            continue
        for name, rate, cpu in ROW.findall(match.group(2)):
            rows[(match.group(1), name.strip())] = (float(rate), float(cpu))
    return rows


def run(tree: Path, script: list[str], out: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree))
    subprocess.run([sys.executable, *script, '--out', str(out)], cwd=tree, env=env, check=True)
    return out.read_text()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tree', action='append', required=True,
                        help='NAME=PATH of a checkout with its extension built (repeatable)')
    parser.add_argument('--repeat', type=int, default=2)
    parser.add_argument('--out', type=Path, required=True)
    parser.add_argument('script', nargs=argparse.REMAINDER)
    args = parser.parse_args()
    script = args.script[1:] if args.script[:1] == ['--'] else args.script
    trees = [(name, Path(path).resolve()) for name, path in
             (spec.split('=', 1) for spec in args.tree)]
    load_before = os.getloadavg()
    best: dict[str, dict] = {name: {} for name, _ in trees}
    commands = {}
    with tempfile.TemporaryDirectory() as tmp:
        for turn in range(args.repeat):
            for name, tree in trees:
                report = run(tree, script, Path(tmp) / f'{name}_{turn}.md')
                commands[name] = next((line for line in report.splitlines()
                                       if line.startswith('Command:')), '')
                for key, value in rows_of(report).items():
                    if key not in best[name] or value[0] > best[name][key][0]:
                        best[name][key] = value
    load_after = os.getloadavg()
    names = [name for name, _ in trees]
    keys = [key for key in best[names[0]] if all(key in best[n] for n in names)]
    lines = [f'# {Path(script[0]).stem}, before and after, in one run', '',
             'Command: `PYTHONPATH=. python3 benchmarks/trees.py ' +
             ' '.join(f'--tree {spec}' for spec in args.tree) +
             f' --repeat {args.repeat} --out {args.out} -- {shlex.join(script)}`', '',
             'Trees: ' + ', '.join(f'{name} = `{tree}` (git {_head(tree)})'
                                   for name, tree in trees) + '. ' +
             f'They took turns, {args.repeat} each; each row is its best. Load average before: '
             f'{", ".join(f"{v:.2f}" for v in load_before)}; after: '
             f'{", ".join(f"{v:.2f}" for v in load_after)}. What each row is: the script\'s own '
             'docstring. Cells: samples/s (CPU ms per sample, every process).', '',
             '| scenario | row | ' + ' | '.join(names) +
             ''.join(f' | {n} / {names[0]}' for n in names[1:]) + ' |',
             '|---|---|' + '---:|' * (2 * len(names) - 1)]
    for scenario, row in keys:
        cells = [best[n][(scenario, row)] for n in names]
        lines.append(f'| {scenario} | {row} | ' +
                     ' | '.join(f'{rate:.1f} ({cpu:.2f})' for rate, cpu in cells) +
                     ''.join(f' | {cell[0] / cells[0][0]:.2f}x' for cell in cells[1:]) + ' |')
    lines += ['', *(f'- {name}: {commands[name]}' for name in names)]
    args.out.write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def _head(tree: Path) -> str:
    """The checkout's commit, and whether tracked files differ from it."""
    def git(*command: str) -> str:
        return subprocess.run(['git', '-C', str(tree), *command], capture_output=True,
                              text=True).stdout.strip()

    changed = git('status', '--porcelain', '--untracked-files=no')
    return (git('rev-parse', '--short', 'HEAD') or '?') + (' with changes' if changed else '')


if __name__ == '__main__':
    main()
