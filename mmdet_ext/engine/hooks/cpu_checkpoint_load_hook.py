"""Hook that routes every checkpoint load of the Runner through the CPU, allowlisted loader."""
import functools
from typing import Callable, Optional, Sequence

from mmengine.dist import broadcast_object_list
from mmengine.hooks import Hook

from ..._compat import (runner_load_from, runner_resume_requested, set_runner_load_from,
                        set_runner_resume)
from ...registry import HOOKS
from ..checkpoint_discovery import find_newest_loadable_checkpoint
from ..checkpoint_loading import (install_cpu_checkpoint_loader, load_checkpoint_to_cpu,
                                  resolve_safe_globals, restore_checkpoint_loader)
from ..checkpoint_saving import settle_saves_of_earlier_runs


@HOOKS.register_module()
class CpuCheckpointLoadHook(Hook):
    """Map ``load_from``, ``resume`` and pretrained ``init_cfg`` loads to CPU, safely.

    Add to a config with ``custom_hooks = [dict(type='CpuCheckpointLoadHook')]``. It installs the
    loader in ``before_run``, which the Runner calls before ``init_weights`` and
    ``load_or_resume``, on every rank; ``after_run`` restores mmengine's own loader.

    Auto-resume (``resume=True`` without ``load_from``): instead of trusting ``last_checkpoint``,
    rank 0 picks the newest checkpoint that opens, warning about each one it skips, and every rank
    sets that path as the Runner's ``load_from``, so ``load_or_resume`` resumes from it explicitly.
    If none opens, training starts from scratch with a warning. An explicit ``load_from`` that is
    corrupt stays an error naming the file.

    Args:
        allow_unsafe_globals: load with ``weights_only=False``. Off by default; logs a warning
            every time it is used.
        extra_safe_globals: dotted names (``'my_pkg.MyMeta'``) allowed on top of the built-in
            allowlist, still under ``weights_only=True``. Logs a warning when set.
        mmap: memory-map checkpoint storages instead of reading them into RAM.
    """

    priority = 'VERY_HIGH'

    def __init__(self, allow_unsafe_globals: bool = False,
                 extra_safe_globals: Sequence[str] = (), mmap: bool = True) -> None:
        self.allow_unsafe_globals = allow_unsafe_globals
        self.extra_safe_globals = list(extra_safe_globals)
        self.mmap = mmap
        self._previous_loader: Optional[dict[str, Callable]] = None

    def before_run(self, runner) -> None:
        extra = resolve_safe_globals(self.extra_safe_globals)
        if extra:
            runner.logger.warning('CpuCheckpointLoadHook: also allowing '
                                  f'{self.extra_safe_globals} in checkpoints (extra_safe_globals)')
        self._previous_loader = install_cpu_checkpoint_loader(
            allow_unsafe_globals=self.allow_unsafe_globals, extra_safe_globals=extra,
            mmap=self.mmap)
        if runner_resume_requested(runner) and runner_load_from(runner) is None:
            self._choose_auto_resume_checkpoint(runner, extra)

    def _choose_auto_resume_checkpoint(self, runner, extra: Sequence[Callable]) -> None:
        settle_saves_of_earlier_runs(runner.logger)  # a save in flight is a candidate too
        load = functools.partial(load_checkpoint_to_cpu,
                                 allow_unsafe_globals=self.allow_unsafe_globals,
                                 extra_safe_globals=extra, mmap=True)
        choice = [find_newest_loadable_checkpoint(runner.work_dir, load) if runner.rank == 0
                  else None]
        broadcast_object_list(choice, src=0)
        if choice[0] is None:
            runner.logger.warning('Auto-resume: no loadable checkpoint in '
                                  f'{runner.work_dir}; training starts from scratch.')
            set_runner_resume(runner, False)
            return
        runner.logger.info(f'Auto-resume: resuming from {choice[0]}')
        set_runner_load_from(runner, choice[0])

    def after_run(self, runner) -> None:
        if self._previous_loader is not None:
            restore_checkpoint_loader(self._previous_loader)
            self._previous_loader = None
