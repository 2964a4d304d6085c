"""One kind of bad (or valid but unusual) input and the outcome it must have (see cases.py)."""
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


@dataclass(frozen=True)
class Case:
    kind: str
    group: str  # image | json | annotation | dataset | checkpoint
    expected: str  # error | drop | skip | loads
    build: Callable[[Path], dict]  # writes the case's files; returns run options
    names: tuple = ()
    is_a: str = ''  # an upstream exception type the error must also be
    note: str = ''
