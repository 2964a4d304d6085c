"""Replacing names in mmdet's ``coco_metric`` module for the length of one ``compute_metrics``.

``CocoMetric.compute_metrics`` (and ``LVISMetric``'s, through ``results2json``) reaches its
evaluator and its json writer through module globals (``COCOeval``, ``dump``), so that is where a
faster one goes in: only while our metric computes, under a lock (metrics are computed one at a
time anyway, in the main process), and put back even when the computation raises.
"""
import contextlib
import importlib
import threading

_LOCK = threading.RLock()  # LVIS replaces names in two modules, one block in the other


@contextlib.contextmanager
def replaced_coco_metric_globals(required: dict, optional: dict, module: str = 'coco_metric'):
    """Within the block, mmdet's ``coco_metric`` module (or ``module`` of
    ``mmdet.evaluation.metrics``) sees the given names.

    ``required``: a RuntimeError if the module has no such name (a fork that builds its evaluator
    differently); ``optional``: such a name is left alone (the speed-up is lost, nothing else).
    """
    module = importlib.import_module(f'mmdet.evaluation.metrics.{module}')
    missing = [name for name in required if not hasattr(module, name)]
    if missing:
        raise RuntimeError(f'{module.__file__} has no {", ".join(missing)} to replace: this mmdet '
                           "evaluates differently; leave cocoeval_backend='auto' (its own evaluator)")
    replacements = {**{k: v for k, v in optional.items() if hasattr(module, k)}, **required}
    with _LOCK:
        originals = {name: getattr(module, name) for name in replacements}
        for name, value in replacements.items():
            setattr(module, name, value)
        try:
            yield
        finally:
            for name, value in originals.items():
                setattr(module, name, value)
