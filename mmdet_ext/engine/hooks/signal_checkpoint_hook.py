"""``SignalCheckpointHook``: on SIGTERM / SIGUSR1, finish the iteration, save, exit 75."""
import os.path as osp
import signal
import threading
from typing import Any, Optional

import torch
from mmengine.dist import all_reduce, get_world_size, is_main_process
from mmengine.hooks import CheckpointHook, Hook

from ...datasets.inflight import remove_inflight_records
from ...registry import HOOKS
from ..checkpoint_saving import atomic_write_bytes, background_writer
from .exact_resume_hook import ExactResumeHook
from .inflight_cleanup_hook import inflight_directories

# sysexits.h EX_TEMPFAIL: "a temporary failure; the user is invited to retry". Not 0, so that
# torchrun / slurm see the job as not finished and requeue or restart it; not 128+signal, so that
# a saved, orderly stop is told apart from a kill.
PREEMPTED_EXIT_CODE = 75


class PreemptedExit(SystemExit):
    """Raised by every rank after the checkpoint is saved; its ``code`` is the exit status."""


@HOOKS.register_module()
class SignalCheckpointHook(Hook):
    """Save a checkpoint and stop when the job is told to stop (preemption, ``scancel``).

    Why: clusters send SIGTERM (slurm: SIGKILL after a grace period, ``--signal=USR1@120`` asks
    for an earlier SIGUSR1) and everything since the last epoch checkpoint is lost. Here the
    main process of each rank only notes the signal; after the current iteration

    * the ranks agree: each iteration, one all-reduce of a one-element flag over the training
      process group, so that a signal that reached one rank stops all of them at the same
      iteration (a rank that acted alone would leave the others waiting in the next collective);
    * a checkpoint save in flight in the background (``AtomicCheckpointHook``) is finished first
      (a failed one is logged as an error, and this save still runs);
    * every rank calls ``runner.save_checkpoint`` (``iter_<N>.pth``, by iteration, so it resumes
      at the next batch, mid-epoch included -- exact with ``ExactResumeHook``), written through
      the atomic backend (temp file, fsync, rename) before the process goes on; rank 0 points
      ``last_checkpoint`` at it, so ``--resume`` (auto) continues from it;
    * the in-flight records are deleted (an orderly stop, nothing to explain), the save is
      logged, and every rank raises :class:`PreemptedExit` (a ``SystemExit``) with
      ``PREEMPTED_EXIT_CODE`` (75).

    The saved file is not part of ``CheckpointHook``'s ``max_keep_ckpts`` rotation. A signal that
    arrives during validation is acted on after the next training iteration; one that arrives
    after the last iteration is ignored (the run is ending anyway). DataLoader workers are not
    signalled by this hook; a launcher that signals the whole process group (not torchrun or
    ``srun``'s default) kills them and the run ends with mmengine's worker-died error instead.

    Args:
        signals: names of the signals to handle.
    """

    priority = 'LOWEST'  # after CheckpointHook: an interval save of the same iteration comes first

    def __init__(self, signals: tuple[str, ...] = ('SIGTERM', 'SIGUSR1')) -> None:
        self.signals = tuple(getattr(signal, name) for name in signals)
        self._received: Optional[int] = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: Any) -> None:
        self._received = signum  # only a note: logging here could deadlock on the log's lock

    def before_train(self, runner) -> None:
        if threading.current_thread() is not threading.main_thread():
            runner.logger.warning('SignalCheckpointHook: not in the main thread, where Python '
                                  'delivers signals; save-on-signal is off')
            return
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._note)

    def after_train(self, runner) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _agreed_signal(self) -> int:
        """The signal number any rank received (0: none), the same on every rank."""
        if get_world_size() == 1:
            return self._received or 0
        flag = torch.tensor([self._received or 0], dtype=torch.int64)
        all_reduce(flag, op='max')
        return int(flag.item())

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        signum = self._agreed_signal()
        if not signum:
            return
        path = self.save(runner)
        name = signal.Signals(signum).name
        runner.logger.warning(
            f'SignalCheckpointHook: {name} received (this rank: '
            f'{"yes" if self._received else "no, another rank"}); saved {path} after iteration '
            f'{runner.iter + 1}; exiting with code {PREEMPTED_EXIT_CODE}. Continue with --resume.')
        for directory in inflight_directories(runner):
            remove_inflight_records(directory)
        self.after_train(runner)  # the previous handlers again: a second signal acts at once
        raise PreemptedExit(PREEMPTED_EXIT_CODE)

    def save(self, runner) -> str:
        """Save ``iter_<N>.pth`` next to the regular checkpoints (every rank must call this)."""
        hook = next((h for h in runner.hooks if isinstance(h, CheckpointHook)), None)
        out_dir = getattr(hook, 'out_dir', None) or runner.work_dir
        backend_args = getattr(hook, 'backend_args', None)
        if (backend_args is None and '://' not in str(out_dir)) or \
                (backend_args or {}).get('backend') == 'atomic_local_background':
            backend_args = {**(backend_args or {}), 'backend': 'atomic_local'}  # done on return
        failure = background_writer.settle()
        if failure is not None:
            runner.logger.error(f'SignalCheckpointHook: {failure}')
        for other in runner.hooks:
            if isinstance(other, ExactResumeHook):
                # On every rank: save_checkpoint runs on rank 0 only.
                other.snapshot_for_save(runner)
        filename = f'iter_{runner.iter + 1}.pth'
        runner.save_checkpoint(out_dir, filename, by_epoch=False, backend_args=backend_args)
        path = osp.join(str(out_dir), filename)
        if is_main_process():
            atomic_write_bytes(path.encode(), osp.join(runner.work_dir, 'last_checkpoint'))
        return path
