"""Benchmark scripts (run from the repository root: ``PYTHONPATH=. python3 benchmarks/...``)."""
from pathlib import Path


def write_report(path: Path, lines: list) -> None:
    """Writes a benchmark's markdown report (creating its folder) and prints it."""
    text = '\n'.join(lines) + '\n'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(text)
