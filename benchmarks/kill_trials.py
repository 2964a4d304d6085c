"""kill -9 at random points of a checkpoint save and of an annotation-store build.

    PYTHONPATH=. python benchmarks/kill_trials.py [--count 20] [--scenarios checkpoint store]
        [--seed 0] [--out benchmarks/results]

``checkpoint``: a real mmengine ``Runner`` (the tiny net of ``tests/helpers/tiny_runner.py``
plus 32 MB of frozen ballast, so that a save takes a while; 4 iterations per epoch) trains with
``AtomicCheckpointHook(interval=1, max_keep_ckpts=1)`` (the hard case: one checkpoint kept),
``ExactResumeHook`` and ``resume=True``, saving every epoch. Two probe hooks report when each save
starts and ends. A random time (uniform over the measured save duration) after a save started,
the trainer is frozen (SIGSTOP); everything it reported is then in the pipe, so whether it is
frozen inside the save is a fact, not a guess. Frozen inside: it is killed (SIGKILL kills it at
exactly that point). Frozen after the save had ended (the machine was slower than the window):
it is thawed and the next save is aimed at half the delay, so every trial's kill lands inside a
save, on an idle or a loaded machine alike. After every kill: the newest checkpoint the trainer
reported complete (or a newer one) must load, every visible ``*.pth`` must load, and the next
trial's trainer must resume from the newest loadable checkpoint. At the end the run is finished
and its weights compared with an uninterrupted run's (bit-exact: the plugin's ``ExactResumeHook``
makes a resumed run repeat itself).

``store``: process A builds the annotation store of a 5000-image COCO json (``open_store``). A
random time (uniform over the measured build duration) after A took the folder lock, A is frozen;
if it still holds the lock it is frozen inside the build (else it is let finish and the next try
aims at half the delay). Then process B asks for the same store and is seen blocked on the lock
(/proc/locks), and A is killed. B must then open or rebuild the store (within 300 s: no hang),
equal to a reference build; the json, another dataset's store and a user file in the same folder
must be unchanged, no temporary file may be left, and the next ``open_store`` must reuse B's
store without rebuilding.

Each scenario runs ``--count`` kills. Writes ``<out>/kill_trials.md``.
"""
import argparse
import fcntl
import hashlib
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / 'tests'
TEMP_SUFFIX = '.mmdet_ext-tmp'  # mmdet_ext.engine.checkpoint_saving.TEMP_SUFFIX
WAIT_S = 300  # longer than this without progress is a hang
# Trainers and builders are forked from a server that imported these once: a child starts in
# milliseconds instead of the seconds a fresh interpreter needs to import torch and mmengine.
PRELOAD = ['mmengine.runner', 'helpers.tiny_runner', 'mmdet_ext.datasets.annotation_store']


def _context() -> multiprocessing.context.BaseContext:
    for path in (str(TESTS), str(REPO)):
        if path not in sys.path:
            sys.path.insert(0, path)
    ctx = multiprocessing.get_context('forkserver')
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _train(work_dir: str, max_epochs: int, conn) -> None:
    """A trainer (child process): the tiny net plus 32 MB of frozen ballast, so that a save takes
    a while; sends ``('resumed', epoch)``, then ``('begin'|'end', epoch)`` around each save."""
    import torch
    import torch.nn as nn
    from mmengine.hooks import Hook
    from mmengine.runner import Runner

    from helpers.tiny_runner import TinyConvNet, tiny_runner_kwargs
    from mmdet_ext.engine.checkpoint_saving import background_writer

    class BallastNet(TinyConvNet):
        def __init__(self) -> None:
            super().__init__()
            self.ballast = nn.Parameter(torch.zeros(8_000_000), requires_grad=False)

    class SaveProbe(Hook):
        """At LOW / LOWEST priority it runs just before / just after the CheckpointHook
        (VERY_LOW) in ``after_train_epoch``, so the two messages bracket the save. The save is
        written in the background (the hook's default): 'end' waits for the write, its rename,
        the pointer and the pruning, so that the window the kills aim at holds all of them."""

        def __init__(self, word: str, priority: str) -> None:
            self.word, self.priority = word, priority

        def before_train(self, runner) -> None:
            if self.word == 'begin':
                conn.send(('resumed', runner.epoch))

        def after_train_epoch(self, runner) -> None:
            if self.word == 'end':
                background_writer.wait()
            conn.send((self.word, runner.epoch + 1))

    kwargs = tiny_runner_kwargs(work_dir, with_val=False, model=BallastNet(), resume=True,
                                max_epochs=max_epochs,
                                checkpoint=dict(type='AtomicCheckpointHook', interval=1,
                                                max_keep_ckpts=1),
                                custom_hooks=[SaveProbe('begin', 'LOW'),
                                              SaveProbe('end', 'LOWEST')])
    Runner(**kwargs).train()
    conn.send(('finished', max_epochs))


def _open(ann_file: str, go, conn) -> None:
    """A store user (child process): waits for ``go``, then ``open_store`` and report it."""
    from mmdet_ext.datasets.annotation_store import open_store
    go.wait()
    store = open_store(ann_file)
    conn.send(dict(images=store.num_images, instances=store.num_instances,
                   key=store.key.hex(), path=store.path))


@dataclass
class Tally:
    """Counts of one scenario; ``problems`` lists every loss, mismatch or hang, one per line."""

    tries: int = 0
    kills_inside: int = 0
    late_freezes: int = 0  # frozen after the save / build had ended: thawed, aimed earlier
    recovered: int = 0
    lost: int = 0
    notes: list = field(default_factory=list)
    problems: list = field(default_factory=list)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            h.update(block)
    return h.hexdigest()


class Messages:
    """What a child sends through its pipe, each message stamped with when it was received."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.seen: list[tuple[str, int, float]] = []

    def wait_for(self, word: str, timeout: float = WAIT_S) -> Optional[int]:
        """The number of the next message ``word``; None at end of messages or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if not self.conn.poll(max(0.0, deadline - time.monotonic())):
                    return None
                got, number = self.conn.recv()
            except (EOFError, OSError):
                return None
            self.seen.append((got, number, time.monotonic()))
            if got == word:
                return number

    def drain(self) -> list[tuple[str, int, float]]:
        """Everything already sent (the child is dead or frozen: all it sent is in the pipe)."""
        while self.wait_for('\0', timeout=0.5) is not None:
            pass
        return self.seen

    def received(self, word: str, number: int) -> bool:
        return any(got == word and n == number for got, n, _ in self.seen)


def _freeze(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until the kernel shows it stopped (or gone): from then on it does
    nothing, and a SIGKILL kills it exactly where it stands."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return  # it had ended already
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            stat = Path(f'/proc/{pid}/stat').read_text()
        except OSError:
            return  # gone
        if stat[stat.rindex(')') + 2] in 'TtZX':  # stopped (or dead)
            return
        time.sleep(0.001)
    raise RuntimeError(f'process {pid} did not stop within {WAIT_S} s of SIGSTOP')


def _thaw(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass  # it had ended already


# ---- checkpoint saves ------------------------------------------------------------------------
def _trainer(ctx, work_dir: Path, max_epochs: int):
    """A started trainer process and its messages."""
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_train, args=(str(work_dir), max_epochs, send))
    proc.start()
    send.close()  # the child holds the only sender: its death ends the messages
    return proc, Messages(receive)


def _newest_loadable(work_dir: Path) -> tuple[int, list[str]]:
    """(epoch of the newest loadable checkpoint or 0, problems with visible files)."""
    from mmdet_ext.engine.checkpoint_loading import load_checkpoint_to_cpu
    newest, problems = 0, []
    for path in sorted(work_dir.glob('epoch_*.pth')):
        try:
            meta = load_checkpoint_to_cpu(str(path))['meta']
        except Exception as err:  # noqa: BLE001  (any failure to load is the finding)
            problems.append(f'{path.name} does not load: {err}')
            continue
        newest = max(newest, int(meta['epoch']))
    pointer = work_dir / 'last_checkpoint'
    if pointer.exists() and newest:
        target = Path(pointer.read_text().strip())
        if not target.is_file():
            problems.append(f'last_checkpoint points to a missing file: {target}')
    return newest, problems


def _weights(path: Path) -> dict:
    from mmdet_ext.engine.checkpoint_loading import load_checkpoint_to_cpu
    return load_checkpoint_to_cpu(str(path))['state_dict']


def checkpoint_trials(count: int, root: Path, rng: random.Random) -> Tally:
    """kill -9 inside checkpoint saves until ``count`` landed inside one (module doc)."""
    import torch
    ctx = _context()
    tally = Tally()
    # Calibrate: how long a save takes here, now (begin .. end of the same epoch).
    proc, messages = _trainer(ctx, root / 'calibration', 6)
    messages.wait_for('finished')
    proc.join(WAIT_S)
    if proc.exitcode != 0:
        raise RuntimeError(f'the calibration trainer failed (exit {proc.exitcode})')
    stamps = {(word, n): t for word, n, t in messages.seen}
    durations = [stamps['end', n] - stamps['begin', n] for n in range(2, 7)]
    window = statistics.median(durations)
    tally.notes.append(f'save duration (median of {len(durations)}): {window * 1000:.0f} ms')

    work_dir = root / 'work'
    while tally.kills_inside < count:
        tally.tries += 1
        expected, _ = _newest_loadable(work_dir) if work_dir.exists() else (0, [])
        proc, messages = _trainer(ctx, work_dir, 10**6)
        try:
            resumed = messages.wait_for('resumed')
            if resumed is None:
                raise RuntimeError(f'try {tally.tries}: the trainer did not start '
                                   f'(exit {proc.exitcode})')
            if resumed != expected:
                tally.lost += 1
                tally.problems.append(f'try {tally.tries}: resumed from epoch {resumed}, the '
                                      f'newest loadable checkpoint is epoch {expected}')
            elif tally.tries > 1:
                tally.recovered += 1
            for _ in range(rng.randint(0, 2)):  # let a few saves complete first
                messages.wait_for('end')
            delay = rng.uniform(0.0, window)
            while True:
                target = messages.wait_for('begin')
                if target is None:
                    raise RuntimeError(f'try {tally.tries}: no save began '
                                       f'(exit {proc.exitcode})')
                time.sleep(delay)
                _freeze(proc.pid)
                messages.drain()  # all it sent before the freeze
                if not messages.received('end', target):
                    break  # frozen inside the save of epoch ``target``
                tally.late_freezes += 1
                delay /= 2
                _thaw(proc.pid)
        finally:
            proc.kill()  # SIGKILL
            proc.join(60)
        if proc.exitcode != -signal.SIGKILL:
            tally.problems.append(f'try {tally.tries}: the trainer had exited by itself before '
                                  f'the kill (exit {proc.exitcode})')
        tally.kills_inside += 1
        completed = [n for word, n, _ in messages.drain() if word == 'end']
        newest, problems = _newest_loadable(work_dir)
        last_done = max(completed, default=expected)
        if problems or newest < max(last_done, expected):
            tally.lost += 1
            tally.problems.append(f'try {tally.tries}: after the kill in the save of epoch '
                                  f'{target} the newest loadable checkpoint is epoch {newest} '
                                  f'(complete saves up to {last_done}); {"; ".join(problems)}')

    # The next run resumes from what the last kill left and finishes; then the same run without
    # interruptions: the weights must be identical.
    expected, _ = _newest_loadable(work_dir)
    final_epochs = expected + 2
    proc, messages = _trainer(ctx, work_dir, final_epochs)
    resumed = messages.wait_for('resumed')
    finished = messages.wait_for('finished')
    proc.join(WAIT_S)
    if proc.exitcode != 0 or finished is None or resumed != expected:
        tally.lost += 1
        tally.problems.append(f'the final run did not resume from epoch {expected} and finish: '
                              f'resumed from {resumed}, exit {proc.exitcode}')
    else:
        tally.recovered += 1
    leftovers = [p.name for p in work_dir.iterdir() if p.name.endswith(TEMP_SUFFIX)]
    if leftovers:
        tally.problems.append(f'temporary files left after the final run: {leftovers}')
    reference_dir = root / 'uninterrupted'
    proc, messages = _trainer(ctx, reference_dir, final_epochs)
    messages.wait_for('finished')
    proc.join(WAIT_S)
    if proc.exitcode != 0:
        raise RuntimeError(f'the uninterrupted trainer failed (exit {proc.exitcode})')
    ours = _weights(work_dir / f'epoch_{final_epochs}.pth')
    reference = _weights(reference_dir / f'epoch_{final_epochs}.pth')
    same = ours.keys() == reference.keys() and all(torch.equal(ours[k], reference[k])
                                                   for k in ours)
    tally.notes.append(f'{tally.late_freezes} freezes came after the save had ended and were '
                       f'aimed again at half the delay at the next save')
    tally.notes.append(f'weights after {final_epochs} epochs, killed and resumed '
                       f'{tally.tries} times vs uninterrupted: '
                       f'{"identical" if same else "DIFFERENT"}')
    if not same:
        tally.problems.append('the resumed run\'s weights differ from the uninterrupted run\'s')
    return tally


# ---- annotation store builds -----------------------------------------------------------------
def _store_user(ctx, ann_file: Path):
    """A started ``open_store`` process (waiting for its go event), the event, its messages."""
    receive, send = ctx.Pipe(duplex=False)
    go = ctx.Event()
    proc = ctx.Process(target=_open, args=(str(ann_file), go, send))
    proc.start()
    send.close()
    return proc, go, receive


def _store_result(conn, timeout: float = WAIT_S) -> Optional[dict]:
    try:
        return conn.recv() if conn.poll(timeout) else None
    except (EOFError, OSError):
        return None


def _folder_locked(directory: Path) -> bool:
    """Whether another process holds the store folder's lock (probed without waiting)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock taken here
    return False


def _waiting_on_a_lock(pid: int) -> bool:
    """Whether ``pid`` is blocked on an flock (a ``->`` line of /proc/locks)."""
    try:
        text = Path('/proc/locks').read_text()
    except OSError:
        return False
    return any('->' in line and f' {pid} ' in line for line in text.splitlines())


def store_trials(count: int, root: Path, rng: random.Random, images: int = 5000) -> Tally:
    """kill -9 a store builder while another process waits, until ``count`` kills landed
    inside a build (module doc); the json has ``images`` images."""
    ctx = _context()
    from benchmarks.dataset_memory import write_synthetic_coco
    from mmdet_ext.datasets.annotation_store import IDENTITY_SETTLE_S, open_store
    tally = Tally()
    folder = root / 'annotations'
    folder.mkdir(parents=True)
    ann_file = folder / 'instances_train.json'
    write_synthetic_coco(ann_file, images, seed=0)
    other = folder / 'instances_val.json'
    write_synthetic_coco(other, 50, seed=1)
    open_store(str(other))  # another dataset's store in the same folder: must survive
    (folder / 'notes.txt').write_text('the user\'s own file\n')
    # A store records the json's identity only once the json is older than IDENTITY_SETTLE_S
    # (a write in the same timestamp tick could go unseen): let it settle, so the reference and
    # every later build record it alike and can be compared byte for byte.
    time.sleep(IDENTITY_SETTLE_S + 0.1)
    reference = open_store(str(ann_file), cache_dir=str(root / 'reference'))
    expected = dict(images=reference.num_images, instances=reference.num_instances,
                    key=reference.key.hex())
    reference_sha = _sha256(Path(reference.path))
    del reference
    kept = {p.name: _sha256(p) for p in folder.iterdir()}

    # Calibrate: lock taken .. store reported, without a kill.
    proc, go, conn = _store_user(ctx, ann_file)
    go.set()
    while not _folder_locked(folder) and proc.is_alive():
        time.sleep(0.001)
    start = time.monotonic()
    built = _store_result(conn)
    window = time.monotonic() - start
    proc.join(60)
    if built is None:
        raise RuntimeError('the calibration build failed')
    tally.notes.append(f'store build under the lock: {window * 1000:.0f} ms at first '
                       f'({expected["images"]} images, {expected["instances"]} instances)')

    waited = 0
    delay = None
    while tally.kills_inside < count:
        tally.tries += 1
        for path in folder.glob('instances_train.json.*'):
            path.unlink()  # each try starts with no store: the builder must build it
        builder, builder_go, builder_conn = _store_user(ctx, ann_file)
        waiter, waiter_go, waiter_conn = _store_user(ctx, ann_file)
        try:
            builder_go.set()
            while not _folder_locked(folder):
                if not builder.is_alive():
                    raise RuntimeError(f'try {tally.tries}: the builder exited early')
                time.sleep(0.001)
            locked_at = time.monotonic()
            delay = rng.uniform(0.0, window) if delay is None else delay
            time.sleep(max(0.0, locked_at + delay - time.monotonic()))
            _freeze(builder.pid)
            if not _folder_locked(folder):  # the build was over: let it end, aim earlier
                tally.late_freezes += 1
                _thaw(builder.pid)
                builder.join(WAIT_S)
                waiter_go.set()  # an ``open_store`` of a built store: it must still work
                _store_result(waiter_conn)
                waiter.join(60)
                tally.tries -= 1
                delay /= 2
                continue
            delay = None
            # Frozen inside the build, holding the lock: the second process must now wait on it.
            waiter_go.set()
            deadline = time.monotonic() + WAIT_S
            while (not _waiting_on_a_lock(waiter.pid) and waiter.is_alive()
                   and time.monotonic() < deadline):
                time.sleep(0.001)
            waiting = _waiting_on_a_lock(waiter.pid)
        finally:
            builder.kill()  # SIGKILL
            builder.join(60)
        if builder.exitcode != -signal.SIGKILL:
            tally.problems.append(f'try {tally.tries}: the builder had exited by itself before '
                                  f'the kill (exit {builder.exitcode})')
        tally.kills_inside += 1
        waited += waiting
        result = _store_result(waiter_conn)
        if result is None:
            waiter.kill()
            waiter.join(60)
            tally.lost += 1
            tally.problems.append(f'try {tally.tries}: the waiting process got no store in '
                                  f'{WAIT_S} s (exit {waiter.exitcode})')
            continue
        waiter.join(60)
        bad = [f'{k} {result[k]} != {expected[k]}' for k in expected if result[k] != expected[k]]
        store_path = Path(result['path'])
        mtime = store_path.stat().st_mtime_ns
        if _sha256(store_path) != reference_sha:
            bad.append('store file differs from the reference build')
        again = open_store(str(ann_file))  # the next run
        if again.path != str(store_path) or store_path.stat().st_mtime_ns != mtime:
            bad.append('the next open_store rebuilt the store instead of reusing it')
        del again
        leftovers = [p.name for p in folder.iterdir() if '.tmp.' in p.name]
        changed = [name for name, sha in kept.items()
                   if not (folder / name).exists() or _sha256(folder / name) != sha]
        if leftovers:
            bad.append(f'temporary files left: {leftovers}')
        if changed:
            bad.append(f'user files changed or gone: {changed}')
        if bad:
            tally.lost += 1
            tally.problems.append(f'try {tally.tries}: ' + '; '.join(bad))
        else:
            tally.recovered += 1
    tally.notes.append(f'the second process was blocked on the folder lock at the instant of '
                       f'the kill in {waited} of {tally.tries} tries (/proc/locks); '
                       f'{tally.late_freezes} freezes came after the build had ended and were '
                       f'aimed again at half the delay')
    return tally


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--count', type=int, default=20,
                        help='kills (each inside a save / a build) per scenario')
    parser.add_argument('--scenarios', nargs='+', default=['checkpoint', 'store'],
                        choices=['checkpoint', 'store'])
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out', default=str(REPO / 'benchmarks' / 'results'))
    args = parser.parse_args()
    run = dict(checkpoint=checkpoint_trials, store=store_trials)
    rng = random.Random(args.seed)
    tallies = {}
    root = Path(tempfile.mkdtemp(prefix='kill_trials_'))
    try:
        for name in args.scenarios:
            start = time.monotonic()
            tallies[name] = run[name](args.count, root / name, rng)
            print(f'{name}: {tallies[name]} ({time.monotonic() - start:.0f} s)', flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lines = ['# kill -9 trials', '',
             'Command: `' + ' '.join(['PYTHONPATH=. nice -n 10 python benchmarks/kill_trials.py',
                                      *sys.argv[1:]]) + '`', '',
             '| scenario | kills (each inside a save / build) | freezes after it had ended '
             '(thawed) | next run resumed / rebuilt correctly | lost or wrong |',
             '| --- | --- | --- | --- | --- |']
    for name, t in tallies.items():
        lines.append(f'| {name} | {t.kills_inside} | {t.late_freezes} '
                     f'| {t.recovered} | {t.lost} |')
    lines.append('')
    for name, t in tallies.items():
        lines += [f'- {name}: {note}' for note in t.notes]
        lines += [f'- {name} PROBLEM: {p}' for p in t.problems]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / 'kill_trials.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))
    if any(t.lost or t.problems for t in tallies.values()):
        raise SystemExit(1)


if __name__ == '__main__':
    main()
