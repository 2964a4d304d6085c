"""``CocoMetric`` without full-size masks on the host.

mmdet's ``CocoMetric.process`` copies each image's predicted masks to the host
(``pred['masks'].detach().cpu().numpy()``: 100 detections at 1333x800 are 104 MiB) and encodes
them one by one with pycocotools. ``RLECocoMetric`` encodes boolean mask tensors where they are
(``predicted_masks_as_rles``) and takes RLE predictions (``RLEFCNMaskHead``) as they are; the
results, the gathering across ranks (RLE bytes only) and every reported number are
``CocoMetric``'s. Result files are written in one pass (``json_dump``: the same bytes), and the
evaluation runs on the fastest installed evaluator that reports pycocotools' numbers
(``cocoeval_backend.py``).
"""
import contextlib
import functools
import importlib
from typing import Sequence

from mmdet.evaluation.metrics import CocoMetric

from ..registry import METRICS
from .coco_metric_globals import replaced_coco_metric_globals
from .cocoeval_backend import check_backend, evaluator_replacements, resolve_backend
from .cocoeval_parity import load_results
from .json_dump import dump_json_in_one_pass
from .predicted_masks import predicted_masks_as_rles


@METRICS.register_module()
class RLECocoMetric(CocoMetric):
    """``CocoMetric`` (same arguments and results) that encodes predicted masks natively.

    Boolean mask tensors become the RLE dicts ``encode_mask_results`` makes (bit for bit, see
    ``rle_encode_batch``); other masks (soft uint8 masks, already-encoded RLEs) go to
    ``CocoMetric`` unchanged.

    Args:
        cocoeval_backend: ``'auto'`` (the default: the fastest installed backend that agrees
            with pycocotools on a built-in check, logged), ``'pycocotools'`` (mmdet's
            ``COCOeval``) or a package named in ``cocoeval_backend.BACKENDS`` (the same printed
            and reported numbers, several times faster).
        **kwargs: ``CocoMetric``'s arguments.
    """

    def __init__(self, *args, cocoeval_backend: str = 'auto', **kwargs) -> None:
        super().__init__(*args, **kwargs)
        check_backend(cocoeval_backend, self.use_mp_eval)
        self.cocoeval_backend = cocoeval_backend

    def process(self, data_batch: dict, data_samples: Sequence[dict]) -> None:
        for data_sample in data_samples:
            pred = data_sample['pred_instances']
            rles = predicted_masks_as_rles(pred)
            if rles is not None:
                data_sample['pred_instances'] = {**dict(pred.items()), 'masks': rles}
        super().process(data_batch, data_samples)

    def compute_metrics(self, results: list) -> dict:
        backend = resolve_backend(self.cocoeval_backend, self.use_mp_eval)
        with self._results_loaded_for(backend.evaluator) as coco, replaced_coco_metric_globals(
                required=evaluator_replacements(backend),
                optional={'dump': dump_json_in_one_pass, **coco}):
            return super().compute_metrics(results)

    @contextlib.contextmanager
    def _results_loaded_for(self, evaluator: type):
        """Within the block the ground truth's ``loadRes`` is ``evaluator``'s (``load_results``):
        the ``COCO`` given (``ann_file``) or made in ``compute_metrics`` (without one: the name
        to replace in ``coco_metric`` is yielded). Put back after."""
        if getattr(evaluator, 'load_results', None) is None:
            yield {}
            return
        module = importlib.import_module('mmdet.evaluation.metrics.coco_metric')
        made_by = getattr(module, 'COCO', None)

        def shadowed(api):
            api.loadRes = functools.partial(load_results, evaluator, api)
            return api
        if self._coco_api is not None:
            shadowed(self._coco_api)
        try:
            yield {} if made_by is None else {'COCO': lambda *a, **k: shadowed(made_by(*a, **k))}
        finally:
            if self._coco_api is not None:
                vars(self._coco_api).pop('loadRes', None)
