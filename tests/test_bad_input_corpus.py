"""The bad-input corpus (tools/make_bad_corpus.py): every kind, both policies, judged.

The corpus runs once, in a subprocess (it forks one process per case, each with a timeout, so a
hang fails its case instead of CI); each kind is then its own test. ``docs/bad_data.md`` holds the
same results beside stock mmdet's.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / 'tools'))

from bad_corpus.cases import ALL_CASES  # noqa: E402


@pytest.fixture(scope='module')
def corpus_results(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp('corpus') / 'results.json'
    proc = subprocess.run([sys.executable, str(REPO / 'tools' / 'make_bad_corpus.py'),
                           '--json', str(out), '--timeout', '60'],
                          cwd=REPO, capture_output=True, text=True, timeout=1200)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return {row['kind']: row for row in json.loads(out.read_text())}


def test_corpus_covers_at_least_60_kinds_of_every_group():
    groups = {case.group for case in ALL_CASES}
    assert len(ALL_CASES) >= 60 and len({case.kind for case in ALL_CASES}) == len(ALL_CASES)
    assert groups == {'image', 'json', 'annotation', 'dataset', 'checkpoint'}
    assert {case.expected for case in ALL_CASES} == {'error', 'drop', 'skip', 'loads'}


@pytest.mark.parametrize('kind', [case.kind for case in ALL_CASES])
def test_kind(corpus_results, kind):
    runs = corpus_results[kind]['ours']
    failed = [f"[{run['policy']}] {run['verdict']}: {run['outcome']}" for run in runs
              if run['verdict'] != 'ok']
    assert not failed, '\n'.join(failed)


def test_isolation_turns_a_hang_and_a_crash_into_results():
    import faulthandler
    import os
    import signal
    import time

    from bad_corpus.isolate import run_isolated
    assert run_isolated(lambda: time.sleep(3600) or {}, timeout=1)['status'] == 'hang'

    def planted_crash():
        faulthandler.disable()  # pytest's dump of this expected crash would only clutter the log
        os.kill(os.getpid(), signal.SIGSEGV)
        return {}

    crash = run_isolated(planted_crash, timeout=30)
    assert crash == {'status': 'crash', 'message': 'killed by SIGSEGV'}
    assert run_isolated(lambda: {'status': 'loaded'}, timeout=30) == {'status': 'loaded'}
