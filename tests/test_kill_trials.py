"""A few kill -9 trials of benchmarks/kill_trials.py (the full run: 20 kills per scenario).

Real processes, real kills: a Runner killed inside checkpoint saves must resume from the newest
complete checkpoint and end with the uninterrupted run's weights; a store builder killed while a
second process waits on the folder lock must leave that process a correct store, and the user's
files untouched. Each process is frozen (SIGSTOP) before it is killed and the kill happens only
when it is frozen inside the save / build, so how many kills land there does not depend on how
fast the machine is.
"""
import random
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))  # this checkout (and its benchmarks/), not an installed copy

from benchmarks.kill_trials import checkpoint_trials, store_trials  # noqa: E402


def _check(tally, kills: int) -> None:
    assert tally.problems == [] and tally.lost == 0, tally.problems
    assert tally.kills_inside == tally.tries == kills, tally
    assert tally.recovered == tally.tries, tally


def test_kill_9_inside_checkpoint_saves(tmp_path):
    tally = checkpoint_trials(2, tmp_path / 'ckpt', random.Random(0))
    _check(tally, 2)
    assert any('identical' in note for note in tally.notes), tally.notes


def test_kill_9_while_building_the_store_with_a_waiter(tmp_path):
    tally = store_trials(2, tmp_path / 'store', random.Random(0), images=1500)
    _check(tally, 2)
    assert any('blocked on the folder lock at the instant of the kill in 2 of 2' in note
               for note in tally.notes), tally.notes
