"""``InflightCleanupHook``: no ``inflight_<pid>.txt`` left behind by a run that ended normally."""
from mmengine.hooks import Hook

from ..._compat import runner_loops
from ...datasets.inflight import remove_inflight_records
from ...registry import HOOKS


def inflight_directories(runner) -> set[str]:
    """Where this run's datasets keep their in-flight records (``LazyCocoDataset.inflight``)."""
    directories = {runner.log_dir}
    for loop in runner_loops(runner).values():
        dataset = getattr(getattr(loop, 'dataloader', None), 'dataset', None)
        directory = getattr(getattr(dataset, 'inflight', None), 'directory', None)
        if directory is not None:
            directories.add(directory)
    return directories


@HOOKS.register_module()
class InflightCleanupHook(Hook):
    """Delete the per-process "currently loading" records when the run finishes normally.

    Why: every loading process (main and each DataLoader worker, train and val) keeps
    ``inflight_<pid>.txt`` so that a worker killed by a signal, or one that hangs, can be named
    (``datasets/inflight.py``). After a normal run they explain nothing and only clutter the work
    dir. ``after_run`` is reached only when ``train()``/``val()``/``test()`` return; a run that
    raised (dead worker, DataLoader timeout, watchdog error) keeps its records as evidence.
    """

    priority = 'LOWEST'

    def after_run(self, runner) -> None:
        for directory in inflight_directories(runner):
            remove_inflight_records(directory)
