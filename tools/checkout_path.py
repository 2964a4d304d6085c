"""Which mmdet_ext the tools import: this checkout's when it is built, else the installed one.

A checkout holds the compiled extension (``mmdet_ext/_C*.so``) only after a build in place
(``tools/install_deps.sh``). Someone who installed the wheel and runs a tool from a clone has none
there, and the checkout first on ``sys.path`` would hide the installed package behind one that
cannot load. So the checkout goes first when its extension is built, and last otherwise: an
installed mmdet_ext wins, and without one the checkout's import error says what is missing.
"""
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def add_checkout_to_path() -> None:
    """Put this checkout on ``sys.path``: first when its extension is built, else last."""
    if any((REPO / 'mmdet_ext').glob('_C*.so')):
        sys.path.insert(0, str(REPO))
    else:
        sys.path.append(str(REPO))
