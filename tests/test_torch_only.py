"""The tests of the native ops run where only torch is installed (issue 52, item 5).

A lent GPU machine has torch and none of mmengine, mmcv, mmdet or pycocotools; carrying and
building them there costs its minutes. ``tests/test_cuda_kernels.py`` needs none of them, so
neither may ``tests/conftest.py``, which pytest imports for every test. Here a child pytest runs
that file with those packages (and OpenCV and psutil, which the GPU machine's image may lack)
made unimportable by an import hook, as they are on such a machine: every test must be collected
and pass or skip (on a CPU, the CUDA ones skip), and nothing may fail to import.
"""
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
ABSENT = ('mmengine', 'mmcv', 'mmdet', 'pycocotools', 'cv2', 'psutil')

# Loaded at start-up (``sitecustomize``) in the child: each absent package's import fails as a
# missing package's does (ModuleNotFoundError naming it).
BLOCKER = textwrap.dedent(f'''
    import importlib.abc
    import sys

    ABSENT = {ABSENT!r}


    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split('.')[0] in ABSENT:
                raise ModuleNotFoundError(f'No module named {{name!r}}', name=name)
            return None


    sys.meta_path.insert(0, Absent())
''')


def run_without_upstream(tmp_path: Path, *pytest_args: str) -> subprocess.CompletedProcess:
    """``pytest *pytest_args`` in a child where ``ABSENT`` cannot be imported."""
    (tmp_path / 'sitecustomize.py').write_text(BLOCKER)
    return subprocess.run(
        [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', *pytest_args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
        env={'PATH': '/usr/bin:/bin', 'PYTHONPATH': str(tmp_path), 'HOME': str(tmp_path)})


def test_the_native_op_tests_run_with_torch_alone(tmp_path):
    result = run_without_upstream(tmp_path, 'tests/test_cuda_kernels.py')
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    counts = output.strip().splitlines()[-1]  # "N passed, M skipped in S s"
    words = counts.replace(',', '').split()
    ran = sum(int(n) for n, kind in zip(words, words[1:]) if kind in ('passed', 'skipped'))
    collected = subprocess.run(
        [sys.executable, '-m', 'pytest', '--collect-only', '-q', '-p', 'no:cacheprovider',
         'tests/test_cuda_kernels.py'], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=600)
    total = int(collected.stdout.strip().splitlines()[-1].split()[0])  # "N tests collected"
    assert ran == total > 0, (counts, collected.stdout[-500:])


def test_the_blocked_child_still_fails_where_upstream_is_needed(tmp_path):
    """The hook does block: a test file that imports mmdet at its top fails to import there."""
    result = run_without_upstream(tmp_path, 'tests/test_mix_augment.py')
    output = result.stdout + result.stderr
    assert result.returncode != 0 and "No module named 'mmdet" in output, output[-3000:]
