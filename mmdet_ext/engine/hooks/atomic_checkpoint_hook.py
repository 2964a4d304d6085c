"""``CheckpointHook`` whose saves survive ``kill -9`` at any instant and do not stall training."""
import contextlib
import os.path as osp

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook

from ..._compat import runner_saves_checkpoints_with
from ...registry import HOOKS
from ..checkpoint_saving import (atomic_write_bytes, background_writer, remove_stale_temp_files,
                                 save_in_background, settle_saves_of_earlier_runs)

# The backends this hook makes local saves with: blocking, and in the background.
ATOMIC_BACKENDS = ('atomic_local', 'atomic_local_background')


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's ``CheckpointHook`` with crash-proof saving; every argument works as there.

    Select it with ``default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook', ...))``
    (our ``configs/_base_/mmdet_ext_runtime.py`` does). Why a subclass: the stock hook

    * writes ``epoch_N.pth`` in place (``LocalBackend.put``), so a kill mid-save leaves a
      truncated file, and the ``last_checkpoint`` pointer with a plain ``open('w')``;
    * deletes the oldest of ``max_keep_ckpts`` *before* saving the new one, so with
      ``max_keep_ckpts=1`` a kill mid-save leaves no checkpoint at all.

    Here, for a local ``out_dir``, saves go through the ``atomic_local`` file backend (temp file,
    fsync, ``os.replace``, fsync the directory; see :mod:`..checkpoint_saving`), which covers the
    regular, best and re-saved checkpoints alike; the pointer is replaced atomically *after* the
    checkpoint is in place; and outdated checkpoints are deleted only after both. Remote
    ``out_dir``/``backend_args`` (object stores, whose ``put`` is already all-or-nothing) keep the
    stock behaviour. Temp files left by a killed save are removed in ``before_train``.

    With ``background=True`` (the default) the training thread only copies the state (into
    buffers kept from the previous save: ``checkpoint_saving.CheckpointStager``); the
    serialisation, write, fsyncs and rename run on a thread while training goes on
    (``checkpoint_saving.BackgroundWriter``), and the pointer and pruning follow the rename
    there. At most one save is in flight: the next save waits for it, and says
    so. A failed background write raises :class:`CheckpointSaveError`, naming the file and the
    cause, at the next iteration (or the end of the run). The run's end, and
    ``SignalCheckpointHook``'s save, wait for the save in flight; a kill leaves only a hidden temp
    file of it, never a checkpoint that auto-resume could take.

    Args:
        background: write local checkpoints on a thread (True) or in the training thread.
        (all other arguments as ``CheckpointHook``)
    """

    def __init__(self, *args, background: bool = True, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.background = background

    def before_train(self, runner) -> None:
        out_dir = self.out_dir or runner.work_dir
        backend = (self.backend_args or {}).get('backend', 'local')
        if (self.file_client_args is None and backend == 'local'
                and '://' not in str(out_dir)):
            self.backend_args = {**(self.backend_args or {}), 'backend':
                                 ATOMIC_BACKENDS[self.background]}
        super().before_train(runner)
        settle_saves_of_earlier_runs(runner.logger)  # its temp file is not a killed save's
        if isinstance(self.file_backend, LocalBackend) and is_main_process():
            for path in remove_stale_temp_files(str(self.out_dir)):
                runner.logger.warning(f'Removed {path}, left by a checkpoint save that was killed')

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        background_writer.raise_if_failed()

    def after_train(self, runner) -> None:
        background_writer.wait()  # the last checkpoint in place before it is published
        super().after_train(runner)

    def after_run(self, runner) -> None:
        background_writer.wait()

    def _save_best_checkpoint(self, runner, metrics) -> None:
        background_writer.wait()  # the previous best is in place before it may be removed
        with self._serialising_in_background():
            super()._save_best_checkpoint(runner, metrics)

    def _serialising_in_background(self):
        """Where saves go to the background writer, the Runner's saves are staged and
        serialised there (``checkpoint_saving.save_in_background``) instead of in this thread."""
        if (self.backend_args or {}).get('backend') != ATOMIC_BACKENDS[1]:
            return contextlib.nullcontext()
        return runner_saves_checkpoints_with(save_in_background)

    def _save_checkpoint_with_step(self, runner, step, meta) -> None:
        if self.backend_args is None or self.backend_args.get('backend') not in ATOMIC_BACKENDS:
            return super()._save_checkpoint_with_step(runner, step, meta)
        # At most one save in flight, and never two serialised checkpoints in memory.
        background_writer.wait()
        # Same bookkeeping as the stock hook (the kept ids are saved inside this checkpoint's
        # message hub), but the outdated file is deleted only once the new one is safely in place.
        # A copy of mmengine 0.10.7's method: _compat.COPIED_SOURCES holds the hash of the
        # upstream source, so tests/test_compat.py tells when upstream changes it.
        outdated = None
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids
                                            and self.keep_ckpt_ids[-1] == step):
            if len(self.keep_ckpt_ids) == self.max_keep_ckpts:
                outdated = self.keep_ckpt_ids.popleft()
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids', list(self.keep_ckpt_ids))

        ckpt_filename = self.filename_tmpl.format(step)
        self.last_ckpt = self.file_backend.join_path(self.out_dir, ckpt_filename)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        with self._serialising_in_background():
            runner.save_checkpoint(
                self.out_dir, ckpt_filename, self.file_client_args,
                save_optimizer=self.save_optimizer,
                save_param_scheduler=self.save_param_scheduler, meta=meta,
                by_epoch=self.by_epoch, backend_args=self.backend_args, **self.args)
        if not is_main_process():
            return
        pointer, target = osp.join(runner.work_dir, 'last_checkpoint'), str(self.last_ckpt)
        outdated_path = None if outdated is None else self.file_backend.join_path(
            self.out_dir, self.filename_tmpl.format(outdated))

        def publish() -> None:
            """Once the checkpoint is in place: the pointer to it, then the outdated one gone."""
            atomic_write_bytes(target.encode(), pointer)
            if outdated_path is None:
                return
            if self.file_backend.isfile(outdated_path):
                self.file_backend.remove(outdated_path)
            elif self.file_backend.isdir(outdated_path):  # deepspeed saves directories
                self.file_backend.rmtree(outdated_path)
        background_writer.then(publish)  # at once after a blocking save
