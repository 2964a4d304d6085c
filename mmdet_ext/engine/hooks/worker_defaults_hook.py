"""``WorkerDefaultsHook``: sane DataLoader worker settings, applied before the first batch."""
import functools
import os
from typing import Callable, Optional

import cv2
import torch
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.model import is_model_wrapper

from ..._compat import (discard_dataloader_iterator, infinite_iterator_epoch,
                         restart_infinite_iterator, runner_loops)
from ..._native import _C
from ...datasets import LazyCocoDataset
from ...datasets.wrapper_fetch import wrapped_datasets
from ...moved_settings import warn_once
from ...registry import HOOKS


def usable_cpu_count() -> int:
    """CPUs this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def disable_opencv_threads() -> None:
    """Run OpenCV in the calling thread, in the cv2 wheel and in the OpenCV our ops link."""
    cv2.setNumThreads(0)  # as mmengine's env_cfg.mp_cfg.opencv_num_threads=0 does
    # Debian's OpenCV runs on TBB, where 1 thread is serial too and, unlike 0, is what
    # getNumThreads then reports (with 0 it reports TBB's default concurrency). A build without
    # OpenCV has no pool to limit: this does nothing there.
    _C.set_opencv_num_threads(1)


def _init_worker(worker_id: int, previous: Optional[Callable]) -> None:
    disable_opencv_threads()
    if previous is not None:  # mmengine's seeding (or the user's own function), unchanged
        previous(worker_id)


# The timeout a DataLoader with workers gets when its config sets none: a worker that hands over
# no batch for this long makes it raise "DataLoader timed out after N seconds". Above
# HangWatchdogHook's 600 s floor, so that the watchdog reports the stuck sample and stacks first.
DEFAULT_TIMEOUT_S = 900
# The DataLoader settings this hook fills in where a dataloader's config leaves them unset.
_SETTINGS = ('pin_memory', 'timeout')
# The hook's arguments before the dataloader's own settings were their one home.
_OLD_ARGUMENTS = ('max_workers', 'pin_memory', 'timeout')


@HOOKS.register_module()
class WorkerDefaultsHook(Hook):
    """Before the run, make every dataloader's workers safe and not oversubscribed.

    Why: too many workers exhaust RAM and fight for cores, each worker's OpenCV starts its own
    thread pool, and a stuck worker hangs the run forever. For the train, val and test
    dataloaders this hook

    - caps ``num_workers`` at the CPUs usable per local rank (affinity mask / ``LOCAL_WORLD_SIZE``)
      and logs when it lowers it (``num_workers=0`` stays 0);
    - sets ``pin_memory`` where CUDA is available, and gives workers a ``timeout`` of
      ``DEFAULT_TIMEOUT_S`` seconds so that a stuck worker raises -- each only where the
      dataloader's config does not set it (``pin_memory=False`` or ``timeout=0`` there are
      kept): the dataloader's settings are their one home, this hook has none of its own;
    - disables OpenCV's threads inside every worker, then runs the configured
      ``worker_init_fn`` (mmengine's seeding) as before;
    - hands the model's ``data_preprocessor.pad_size_divisor`` to every ``LazyCocoDataset``
      of the dataloaders, whose batched fetch then allocates its batches padded to it: the one
      place the divisor is set is the model's preprocessor.

    ``persistent_workers`` cannot change after the DataLoader is built: set it in the config (our
    dataset base config does). The arguments it took before (``max_workers``, ``pin_memory``,
    ``timeout``) keep working, with a warning once per process naming the dataloader's setting.
    """

    priority = 'VERY_HIGH'

    def __init__(self, **old_arguments) -> None:
        unknown = sorted(set(old_arguments) - set(_OLD_ARGUMENTS))
        if unknown:
            raise TypeError(f'WorkerDefaultsHook takes no arguments (it fills in the '
                            f"dataloaders' own settings), got {', '.join(unknown)}")
        if old_arguments.get('pin_memory', 'auto') not in ('auto', True, False):
            raise ValueError(f"pin_memory must be 'auto', True or False, got "
                             f"{old_arguments['pin_memory']!r}")
        if old_arguments:
            spelled = ', '.join(f'{key}={value!r}' for key, value in old_arguments.items())
            warn_once('WorkerDefaultsHook', f'WorkerDefaultsHook({spelled}): set the '
                      "dataloader's own num_workers, pin_memory and timeout instead (the hook "
                      'fills in only what a dataloader leaves unset); the old arguments keep '
                      'working')
        self.max_workers = old_arguments.get('max_workers')
        # What the old arguments said, as if each dataloader's config had said it.
        self._old_settings = {name: old_arguments[name] for name in _SETTINGS
                              if old_arguments.get(name, 'auto') != 'auto'}
        self._old_default_timeout = self._old_settings.pop('timeout', DEFAULT_TIMEOUT_S)

    def worker_cap(self) -> int:
        ranks_here = int(os.environ.get('LOCAL_WORLD_SIZE', 1))
        cap = max(1, usable_cpu_count() // max(ranks_here, 1))
        return cap if self.max_workers is None else min(cap, self.max_workers)

    def before_run(self, runner) -> None:
        model = runner.model.module if is_model_wrapper(runner.model) else runner.model
        divisor = getattr(getattr(model, 'data_preprocessor', None), 'pad_size_divisor', 1)
        for name, loop in runner_loops(runner).items():
            loader = getattr(loop, 'dataloader', None)  # loops not built yet are still dicts
            if isinstance(loader, torch.utils.data.DataLoader):
                config = getattr(runner, f'_{name}_dataloader', None)
                self.apply(loader, name, config if isinstance(config, dict) else None)
                for dataset in wrapped_datasets(loader.dataset):
                    if isinstance(dataset, LazyCocoDataset):
                        dataset.pad_size_divisor = divisor
                iterator = getattr(loop, 'dataloader_iterator', None)
                if iterator is not None:
                    # OpenMMLab's IterBasedTrainLoop made its iterator -- and started its
                    # workers -- when it was built, before any hook ran (the fork's makes it
                    # on its first batch): made again, the first data epoch has these
                    # settings too.
                    discard_dataloader_iterator(loader)
                    restart_infinite_iterator(iterator, infinite_iterator_epoch(iterator))

    def apply(self, loader: torch.utils.data.DataLoader, name: str = 'train',
              config: Optional[dict] = None) -> None:
        """Apply the defaults to a DataLoader that has not been iterated yet. ``config``: the
        dict it was built from, whose ``pin_memory`` and ``timeout`` are kept as set; without
        it, a DataLoader's ``pin_memory=False`` and ``timeout=0`` count as unset."""
        cap = self.worker_cap()
        if loader.num_workers > cap:
            print_log(f'WorkerDefaultsHook: {name} dataloader num_workers {loader.num_workers} '
                      f'-> {cap} (usable CPUs per rank)', logger='current')
            loader.num_workers = cap
        explicit = {key: (config or {})[key] for key in _SETTINGS if key in (config or {})}
        explicit.update(self._old_settings)
        loader.pin_memory = explicit.get('pin_memory', loader.pin_memory
                                         or torch.cuda.is_available())
        if loader.num_workers > 0:
            if 'timeout' not in explicit and not loader.timeout:
                loader.timeout = self._old_default_timeout
            previous = loader.worker_init_fn
            if not (isinstance(previous, functools.partial) and previous.func is _init_worker):
                loader.worker_init_fn = functools.partial(_init_worker, previous=previous)
