#!/usr/bin/env python
"""Mutation testing (issue 56, item 3): mutmut 2.x over the modules that carry exactness and
safety claims, each against a chosen fast subset of the tests.

    pip install 'mutmut<3'
    python tools/mutation_test.py                   # every module of MODULES
    python tools/mutation_test.py rounding collate  # those (of MODULES and NAMED_ONLY) whose
                                                    # path contains a word given
    python tools/mutation_test.py --sample 40 --seed 0 collate   # a seeded random sample of
                                                    # each chosen module's mutants
    python tools/mutation_test.py --ids 289-362 lazy_masks       # those mutants (1-based, in
                                                    # mutmut's order: its ids on a fresh cache)

A module too big for the hour on 2 cores (collate.py, the store reader, the loaders: hundreds of
mutants each; benchmarks/results/mutation.md) is scored on a sample: ``--sample K`` draws K of
its mutants with ``random.Random(seed)``, applies each with mutmut's own mutation operators
(``mutmut.mutate``, the same mutants ``mutmut run`` makes, numbered as it numbers them), runs the
module's tests through the same fork server, and reports the killed fraction with its 95% Wilson
interval for the whole module. A mutant whose tests outlast three times the unmutated run (at
least 60 s) is a timeout.

The working tree is never touched: the tracked files (plus the built ``mmdet_ext/_C*.so`` and
``_build_config.json``, which must be present) are copied into a temporary directory, and mutmut
mutates the copy in place there. Prints, per module, the mutants killed / survived / timed out /
suspicious and the diff of each survivor; the report of a run is ``benchmarks/results/mutation.md``.

Why a fork server: importing torch + mmdet takes 15-40 s on the shared 2-core machine, more than
the tests themselves, and mutmut runs the tests once per mutant. ``--serve`` imports them once;
for each mutant the runner (``--client``) asks it to fork a child, which imports ``mmdet_ext``
afresh (so it sees the mutated file; bytecode is never written) and runs ``pytest.main``. The
runner exits 1 when pytest did not exit 0 (mutmut 2 counts only exit code 1 as killed). A
runner that mutmut kills for a timeout ends the child's process group.
"""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (module, pytest arguments): each subset compares with mmdet / pycocotools / torch where the
# module claims exactness, and runs in a few seconds once torch and mmdet are imported.
MODULES = [
    ('mmdet_ext/rounding.py', ['tests/test_collate.py', 'tests/test_resize_normalize.py']),
    ('mmdet_ext/structures/coco_rle.py', ['tests/test_coco_rle.py']),
    ('mmdet_ext/transforms/box_geometry.py', ['tests/test_box_geometry.py']),
    ('mmdet_ext/datasets/bad_samples.py',
     ['tests/test_bad_sample_handler.py', 'tests/test_bad_samples.py', '-k',
      'handler or raise_names or skip_replaces or too_many or test_mode']),
]
# Run only when named (alone or with ``--sample``): too slow for the hour on the shared 2-core
# machine in full (benchmarks/results/mutation.md). A comma-separated entry is one group.
NAMED_ONLY = [
    ('mmdet_ext/collate.py',
     ['tests/test_collate.py', 'tests/test_conformance_collate.py', 'tests/test_deferred_pixels.py',
      'tests/test_worker_buffers.py', 'tests/test_batched_fetch.py', '-k',
      'not spawned_workers and not mappings_of_closed and not training_on_the_batched and not '
      'resuming_on_the_batched']),
    ('mmdet_ext/engine/checkpoint_loading.py', ['tests/test_checkpoint_loading.py']),
    ('mmdet_ext/engine/hooks/exact_resume_hook.py,'
     'mmdet_ext/engine/hooks/cpu_checkpoint_load_hook.py,'
     'mmdet_ext/engine/hooks/atomic_checkpoint_hook.py',
     ['tests/test_checkpoint_exact_resume.py', 'tests/test_checkpoint_saving.py',
      'tests/test_preemption_resume.py', '-k', 'not kill_9 and not two_ranks']),
    ('mmdet_ext/datasets/annotation_store.py,mmdet_ext/datasets/coco_store_layout.py',
     ['tests/test_annotation_store.py', 'tests/test_store_freshness.py',
      'tests/test_native_store_builder.py', 'tests/test_annotation_acceptance.py', '-k',
      'not concurrent_builders and not two_workers and not gloo_ranks and not spawn']),
    ('mmdet_ext/transforms/fused_loading.py,mmdet_ext/transforms/loading.py,'
     'mmdet_ext/transforms/fused_mmdet_loading.py',
     ['tests/test_fused_loading.py', 'tests/test_loading.py', 'tests/test_conformance_loading.py',
      'tests/test_deferred_pixels.py', 'tests/test_gpu_decode.py', 'tests/test_decode_image.py',
      'tests/test_batched_mmdet_pipeline.py', 'tests/test_batched_fetch.py', '-k',
      'not training_on_batched and not training_on_the_batched and not resuming_on_the_batched']),
    ('mmdet_ext/structures/lazy_masks.py',
     ['tests/test_lazy_masks.py', 'tests/test_lazy_masks_input.py',
      'tests/test_conformance_masks.py', 'tests/test_lazy_mask_targets.py']),
]
PYTEST_ARGS = ['-x', '-q', '-p', 'no:cacheprovider', '-W', 'ignore']
PRELOAD = ['numpy', 'cv2', 'torch', 'pycocotools.mask', 'pytest', 'psutil', 'mmengine',
           'mmengine.runner', 'mmcv', 'mmcv.transforms', 'mmdet', 'mmdet.datasets',
           'mmdet.structures', 'mmdet.models', 'mmdet.evaluation', 'mmdet.engine']


def serve(path: str) -> None:
    """Import the heavy dependencies once, then fork one pytest run per request on ``path``."""
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.getcwd())
    for name in PRELOAD:
        __import__(name)
    assert not any(m == 'mmdet_ext' or m.startswith('mmdet_ext.') for m in sys.modules)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    print('ready', flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            request = json.loads(conn.makefile().readline())
            pid = os.fork()
            if pid == 0:
                server.close()
                conn.close()
                os.setpgid(0, 0)
                import pytest
                try:
                    code = int(pytest.main(request['args']))
                except BaseException:  # an import error of a mutant is a failing run too
                    code = 99
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            conn.setblocking(False)
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    conn.setblocking(True)
                    conn.sendall(f'{os.waitstatus_to_exitcode(status)}\n'.encode())
                    break
                try:
                    if conn.recv(1) == b'':  # the runner was killed (mutmut's timeout)
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)


def client(path: str, args: list) -> int:
    # mutmut 2 counts a mutant killed only on exit code 1 (tests_pass: `returncode != 1`); a
    # collection error (pytest's 2) or a mutant that cannot be imported fails the tests too.
    # mutmut itself times the run out (it kills this process).
    return 0 if timed_run(path, args, None) == 'survived' else 1


def copy_tree(dest: str) -> None:
    files = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split('\0')
    built = [f for f in os.listdir(os.path.join(REPO, 'mmdet_ext'))
             if f.startswith('_C') and f.endswith('.so') or f == '_build_config.json']
    if len(built) < 2:
        sys.exit('build mmdet_ext first: no mmdet_ext/_C*.so or _build_config.json')
    for rel in [f for f in files if f] + [os.path.join('mmdet_ext', f) for f in built]:
        src = os.path.join(REPO, rel)
        if os.path.islink(src):  # a tracked link (mmdet_ext/.mim/configs), kept a link
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            os.symlink(os.readlink(src), os.path.join(dest, rel))
        elif os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, rel))


PROGRESS = re.compile(r'(\d+)/(\d+)\s+KILLED (\d+)\s+TIMEOUT (\d+)\s+SUSPICIOUS (\d+)\s+'
                      r'SURVIVED (\d+)\s+SKIPPED (\d+)')


def parse_results(text: str) -> dict:
    """``mutmut results`` -> {status: [ids]}."""
    out, status = {}, None
    for line in text.splitlines():
        head = re.match(r'^(Killed|Survived|Timed out|Suspicious|Skipped|Untested).*\((\d+)\)',
                        line)
        if head:
            status = head.group(1)
            out.setdefault(status, [])
        elif status and re.fullmatch(r'[\d,\s-]+', line.strip() or 'x'):
            ids = re.findall(r'(\d+)(?:-(\d+))?', line)
            for first, last in ids:
                out[status] += list(range(int(first), int(last or first) + 1))
    return out


def mutants_of(module: str) -> list:
    """Every mutant of ``module`` (comma-separated files) as (path, mutmut's RelativeMutationID),
    in mutmut's order."""
    from mutmut import Context, list_mutations
    out = []
    for path in module.split(','):
        with open(os.path.join(REPO, path)) as f:
            source = f.read()
        out += [(path, ident) for ident in list_mutations(Context(source=source, filename=path))]
    return out


def mutated_source(work: str, path: str, ident) -> str:
    from mutmut import Context, mutate
    with open(os.path.join(work, path)) as f:
        source = f.read()
    text, count = mutate(Context(source=source, filename=path, mutation_id=ident))
    assert count == 1, (path, ident)
    return text


def timed_run(sock: str, args: list, timeout: Optional[float]) -> str:
    """Runs the tests once through the fork server: 'killed' (pytest did not exit 0),
    'survived' or 'timeout' (after ``timeout`` s; None: no limit)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(sock)
    conn.settimeout(timeout)
    conn.sendall((json.dumps({'args': PYTEST_ARGS + args}) + '\n').encode())
    try:
        reply = conn.makefile().readline()
    except TimeoutError:
        return 'timeout'  # closing the connection makes the server kill the run
    finally:
        conn.close()
    return 'survived' if reply and int(reply) == 0 else 'killed'


def wilson(killed: int, total: int) -> tuple:
    """The 95% Wilson score interval of killed / total."""
    if total == 0:
        return 0.0, 1.0
    z, p = 1.96, killed / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * ((p * (1 - p) + z * z / (4 * total)) / total) ** 0.5 / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


def parse_ids(text: str) -> list:
    out = []
    for part in text.split(','):
        first, _, last = part.partition('-')
        out += list(range(int(first), int(last or first) + 1))
    return out


def sampled(chosen: list, sample: int, seed: int, ids: list) -> int:
    import difflib
    import random
    work, sock, server, log = start_server()
    try:
        summary = []
        for module, tests in chosen:
            mutants = mutants_of(module)
            if ids:
                picked = [i for i in ids if 1 <= i <= len(mutants)]
            elif sample < len(mutants):
                picked = sorted(random.Random(seed).sample(range(1, len(mutants) + 1), sample))
            else:
                picked = list(range(1, len(mutants) + 1))
            start = time.monotonic()
            if timed_run(sock, tests, 3600) != 'survived':
                sys.exit(f'the unmutated tests of {module} fail: {tests}')
            timeout = max(60.0, 3 * (time.monotonic() - start))
            verdicts = {}
            for number in picked:
                path, ident = mutants[number - 1]
                target = os.path.join(work, path)
                with open(target) as f:
                    original = f.read()
                text = mutated_source(work, path, ident)
                with open(target, 'w') as f:
                    f.write(text)
                try:
                    verdict = timed_run(sock, tests, timeout)
                finally:
                    with open(target, 'w') as f:
                        f.write(original)
                verdicts[number] = verdict
                print(f'{module} #{number}: {verdict}', flush=True)
                if verdict != 'killed':
                    print(''.join(difflib.unified_diff(
                        original.splitlines(True), text.splitlines(True), path, path, n=1)),
                        flush=True)
            took = time.monotonic() - start
            summary.append((module, len(mutants), verdicts, took, tests))
        print('\n## summary (' + ('the mutants named' if ids else f'sample seed {seed}') + ')')
        for module, total, verdicts, took, tests in summary:
            killed = sum(v == 'killed' for v in verdicts.values())
            low, high = wilson(killed, len(verdicts))
            interval = '' if ids else f' (95% interval for the module {low:.0%}-{high:.0%})'
            left = ', '.join(f'#{n} {v}' for n, v in verdicts.items() if v != 'killed')
            print(f'{module}: {len(verdicts)} of {total} mutants run, killed {killed}{interval}, '
                  f'{took:.0f} s; tests {tests}; not killed: {left or "none"}')
    finally:
        stop_server(work, server, log)
    return 0


def work_env(work: str) -> dict:
    return dict(os.environ, PYTHONPATH=work, PYTHONDONTWRITEBYTECODE='1')


def start_server() -> tuple:
    """Copies the tree into a temporary directory and starts the fork server there: (the
    directory, the server's socket, the server, its log)."""
    work = tempfile.mkdtemp(prefix='mmdet_ext_mutation_')
    copy_tree(work)
    sock = os.path.join(work, '.mutation.sock')
    log = open(os.path.join(work, 'server.log'), 'w')
    server = subprocess.Popen([sys.executable, 'tools/mutation_test.py', '--serve', sock],
                              cwd=work, env=work_env(work), stdout=log, stderr=subprocess.STDOUT)
    while not os.path.exists(sock):
        if server.poll() is not None:
            sys.exit(f'the fork server died: see {log.name}')
        time.sleep(0.5)
    return work, sock, server, log


def stop_server(work: str, server, log) -> None:
    server.kill()
    server.wait()
    log.close()
    if os.environ.get('MUTATION_KEEP') != '1':
        shutil.rmtree(work, ignore_errors=True)
    else:
        print('kept', work)


def chosen_modules(words: list) -> list:
    """MODULES, or those of MODULES and NAMED_ONLY whose path contains a word given."""
    return MODULES if not words else \
        [(m, t) for m, t in MODULES + NAMED_ONLY if any(w in m for w in words)]


def main(words: list) -> int:
    chosen = chosen_modules(words)
    work, sock, server, log = start_server()
    env = work_env(work)
    try:
        summary = []
        for module, tests in chosen:
            cache = os.path.join(work, '.mutmut-cache')
            if os.path.exists(cache):
                os.remove(cache)
            runner = shlex.join([sys.executable, 'tools/mutation_test.py', '--client', sock,
                                 *tests])
            start = time.monotonic()
            run = subprocess.run(['mutmut', 'run', '--paths-to-mutate', module, '--tests-dir',
                                  'tests', '--runner', runner, '--simple-output',
                                  '--test-time-base', '30'], cwd=work, env=env,
                                 capture_output=True, text=True)
            took = time.monotonic() - start
            progress = PROGRESS.findall(run.stdout)
            if not progress:
                print(run.stdout[-3000:], run.stderr[-3000:])
                sys.exit(f'mutmut did not check {module}')
            total, *numbers = (int(n) for n in progress[-1][1:])
            counts = dict(zip(('Killed', 'Timed out', 'Suspicious', 'Survived', 'Skipped'),
                              numbers))
            results = parse_results(subprocess.run(['mutmut', 'results'], cwd=work, env=env,
                                                   capture_output=True, text=True).stdout)
            summary.append((module, total, counts, took))
            print(f'\n## {module}: {total} mutants, {counts}, {took:.0f} s; tests: {tests}')
            for status in ('Survived', 'Timed out', 'Suspicious'):
                for ident in results.get(status, []):
                    shown = subprocess.run(['mutmut', 'show', str(ident)], cwd=work, env=env,
                                           capture_output=True, text=True)
                    diff = shown.stdout + shown.stderr
                    print(f'### {status} {ident}\n{diff}')
        print('\n## summary')
        for module, total, counts, took in summary:
            print(f'{module}: {total} mutants, killed {counts.get("Killed", 0)}, survived '
                  f'{counts.get("Survived", 0)}, timed out {counts.get("Timed out", 0)}, '
                  f'suspicious {counts.get("Suspicious", 0)} ({took:.0f} s)')
    finally:
        stop_server(work, server, log)
    return 0


if __name__ == '__main__':
    if sys.argv[1:2] == ['--serve']:
        serve(sys.argv[2])
    elif sys.argv[1:2] == ['--client']:
        sys.exit(client(sys.argv[2], sys.argv[3:]))
    else:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `finally` cleans up
        words, options = [], {}
        argv = iter(sys.argv[1:])
        for word in argv:
            if word in ('--sample', '--seed', '--ids'):
                options[word] = next(argv)
            else:
                words.append(word)
        if not options:
            sys.exit(main(words))
        sys.exit(sampled(chosen_modules(words), int(options.get('--sample', 10 ** 9)),
                         int(options.get('--seed', 0)), parse_ids(options.get('--ids', ''))
                         if '--ids' in options else []))
