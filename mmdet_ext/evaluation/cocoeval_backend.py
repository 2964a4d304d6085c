"""Which COCOeval ``CocoMetric`` runs: pycocotools' (mmdet's) or faster-coco-eval's.

faster-coco-eval (PyPI, C++) computes the same matching and accumulation as pycocotools 5.7x
(segm) to 11x (bbox) faster (benchmarks/results/coco_eval_speed.md); its 12 summary statistics
differ from pycocotools' by at most ~2e-17 (summation order), so every number ``CocoMetric``
reports (rounded to 3 digits) and prints is the same. It is an opt-in: pycocotools stays the
default and the reference.
"""
BACKENDS = ('pycocotools', 'faster_coco_eval')


def faster_cocoeval_class() -> type:
    """faster-coco-eval's ``COCOeval_faster``; an ImportError that says how to install it."""
    try:
        from faster_coco_eval import COCOeval_faster
    except ImportError as err:
        raise ImportError("cocoeval_backend='faster_coco_eval' needs the faster-coco-eval package "
                          '(pip install faster-coco-eval)') from err
    return COCOeval_faster


def check_backend(backend: str, use_mp_eval: bool) -> None:
    """Raises for an unknown backend, a missing package, or a combination mmdet would ignore."""
    if backend not in BACKENDS:
        raise ValueError(f'cocoeval_backend must be one of {BACKENDS}, got {backend!r}')
    if backend == 'faster_coco_eval':
        if use_mp_eval:
            raise ValueError("use_mp_eval=True runs mmdet's multi-process COCOevalMP, which "
                             "cocoeval_backend='faster_coco_eval' would not replace: choose one")
        faster_cocoeval_class()


def evaluator_replacements(backend: str) -> dict:
    """The ``coco_metric`` globals that make ``CocoMetric`` evaluate with ``backend``."""
    return {'COCOeval': faster_cocoeval_class()} if backend == 'faster_coco_eval' else {}
