"""What a built wheel weighs, what it needs from the system, and how long importing it takes.

    python3 benchmarks/wheel_footprint.py dist/mmdet_ext-*.whl [more wheels] [--repeats 5]

For each wheel: its size and its extension's; the shared libraries the extension names (NEEDED)
besides torch's and the C/C++ runtime, and how much the loader pulls in for them (ldd); then,
installed with --no-deps into a fresh venv that sees the system's site-packages (torch, mmcv,
mmdet), the time of ``import mmdet_ext`` in a new interpreter after torch/mmengine/mmdet are
already imported (so the number is the plugin's own), median of --repeats. Prints a markdown table.
"""
import argparse
import statistics
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

# Libraries every torch extension needs anyway: torch's own, the C/C++ runtime, the loader.
BASELINE = ('libc10', 'libtorch', 'libstdc++', 'libgcc_s', 'libc.so', 'libm.so', 'ld-linux',
            'libpthread', 'libdl', 'librt', 'libgomp', 'linux-vdso', 'libshm')
IMPORT_PROBE = '''
import time
import torch, mmengine, mmdet.registry, mmdet.datasets, mmdet.models  # the stack, already there
start = time.perf_counter()
import mmdet_ext
print(time.perf_counter() - start)
'''


def _extra(libraries: list[str]) -> list[str]:
    return [lib for lib in libraries if not any(lib.startswith(b) for b in BASELINE)]


def needed(extension: Path) -> list[str]:
    """The NEEDED entries of the extension's dynamic section."""
    out = subprocess.run(['readelf', '-d', '-W', str(extension)], capture_output=True, text=True,
                         check=True).stdout
    return [line.split('[')[1].rstrip(']') for line in out.splitlines() if '(NEEDED)' in line]


def closure(extension: Path) -> tuple[int, int]:
    """How many libraries outside the baseline the loader maps for the extension; their bytes."""
    out = subprocess.run(['ldd', str(extension)], capture_output=True, text=True).stdout
    paths = {line.split('=>')[1].split('(')[0].strip() for line in out.splitlines()
             if '=>' in line and '/' in line.split('=>')[1]}
    extra = [Path(p) for p in paths if _extra([Path(p).name])]
    return len(extra), sum(p.resolve().stat().st_size for p in extra)


def import_seconds(wheel: Path, repeats: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env_dir = Path(tmp) / 'venv'
        venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
        python = str(env_dir / 'bin' / 'python')
        subprocess.run([python, '-m', 'pip', 'install', '--quiet', '--no-deps', '--no-index',
                        '--disable-pip-version-check', str(wheel)], check=True)
        times = [float(subprocess.run([python, '-c', IMPORT_PROBE], cwd=tmp, check=True,
                                      capture_output=True, text=True).stdout.split()[-1])
                 for _ in range(repeats)]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('wheels', nargs='+', type=Path)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    print('| wheel | wheel MB | extension MB | needs besides torch + C/C++ runtime | '
          'loader maps (libs, MB) | import mmdet_ext s (median) |')
    print('| --- | --- | --- | --- | --- | --- |')
    for wheel in args.wheels:
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
            archive.extractall(tmp)
            extension = next(Path(tmp).glob('mmdet_ext/_C*.so'))
            extension_mb = extension.stat().st_size / 1e6
            libraries = ', '.join(_extra(needed(extension))) or 'nothing'
            count, size = closure(extension)
        seconds = import_seconds(wheel, args.repeats)
        print(f'| {wheel.name} | {wheel.stat().st_size / 1e6:.2f} | {extension_mb:.2f} | '
              f'{libraries} | {count}, {size / 1e6:.1f} | {seconds:.3f} |')
    sys.stdout.flush()


if __name__ == '__main__':
    main()
