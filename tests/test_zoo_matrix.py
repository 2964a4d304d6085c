"""CI's row of the zoo matrix (tools/zoo_matrix.py, docs/zoo_matrix.md): mmdet's LSJ + copy-paste
strong baseline, stock and adopted, two seeded CPU iterations each, in fresh interpreters.

This row is the one that reads and writes the masks' pixels inside mmdet's own transforms
(``CopyPaste`` assigns ``.masks``, ``FilterAnnotations(by_mask=True)``, ``RandomCrop``), so it fails
if the lazy masks stop working as ``BitmapMasks`` in mmdet's pipeline.
"""
import math
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / 'tools'))

from zoo_matrix import ZOO, run_in_subprocess  # noqa: E402

COPY_PASTE = dict(ZOO)['copy-paste_lsj']


def test_copy_paste_baseline_trains_stock_and_adopted(toy_coco_root):
    stock = run_in_subprocess(COPY_PASTE, 'stock', toy_coco_root)
    plugin = run_in_subprocess(COPY_PASTE, 'plugin', toy_coco_root)

    assert stock['status'] == 'ok', stock
    assert plugin['status'] == 'ok', plugin
    # CopyPaste builds a new BitmapMasks from the pixels it composed, for stock and plugin alike.
    assert plugin['masks'] == stock['masks'] == 'BitmapMasks'
    assert set(plugin['losses']) == set(stock['losses'])
    for name, values in plugin['losses'].items():
        assert len(values) == 2 and all(math.isfinite(v) for v in values), (name, values)
