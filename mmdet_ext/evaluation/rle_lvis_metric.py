"""``LVISMetric`` without full-size masks on the host (300 detections per image make mmdet's
host copy of them 3x COCO's: 312 MiB per 1333x800 image).

mmdet's ``LVISMetric.process`` only accepts mask tensors (it calls ``.detach()`` on them), so the
masks are taken out of the predictions before it runs and their RLEs put into its result after.
Result files are written in one pass (``json_dump``: the same bytes), and the matching and
accumulation run on hotcoco where it is installed and agrees with the lvis package
(``cocoeval_backend.py``).
"""
from typing import Sequence

from mmdet.evaluation.metrics import LVISMetric

from ..registry import METRICS
from .coco_metric_globals import replaced_coco_metric_globals
from .cocoeval_backend import LVIS_CHOICES, resolve_lvis_backend
from .json_dump import dump_json_in_one_pass
from .predicted_masks import predicted_masks_as_rles, without_masks


@METRICS.register_module()
class RLELVISMetric(LVISMetric):
    """``LVISMetric`` (same arguments and results) that encodes predicted masks natively and
    accepts RLE predictions (``RLEFCNMaskHead``); soft masks go to ``LVISMetric`` unchanged.

    Args:
        cocoeval_backend: ``'auto'`` (the default: hotcoco's matching and accumulation where it
            is installed and agrees with the lvis package on a built-in check, logged),
            ``'lvis'`` (mmdet's: the lvis package's ``LVISEval``) or ``'hotcoco'``.
        **kwargs: ``LVISMetric``'s arguments.
    """

    def __init__(self, *args, cocoeval_backend: str = 'auto', **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if cocoeval_backend not in LVIS_CHOICES:
            raise ValueError(f'cocoeval_backend must be one of {LVIS_CHOICES}, '
                             f'got {cocoeval_backend!r}')
        self.cocoeval_backend = cocoeval_backend

    def process(self, data_batch: dict, data_samples: Sequence[dict]) -> None:
        for data_sample in data_samples:
            pred = data_sample['pred_instances']
            rles = predicted_masks_as_rles(pred)
            if rles is None:
                super().process(data_batch, [data_sample])
                continue
            super().process(data_batch, [{**data_sample, 'pred_instances': without_masks(pred)}])
            self.results[-1][1]['masks'] = rles

    def compute_metrics(self, results: list) -> dict:
        backend = resolve_lvis_backend(self.cocoeval_backend)
        replacements = {} if backend.name == 'lvis' else {'LVISEval': backend.evaluator}
        # LVISMetric writes its result files with CocoMetric.results2json
        with replaced_coco_metric_globals(required={},
                                          optional={'dump': dump_json_in_one_pass}), \
                replaced_coco_metric_globals(required=replacements, optional={},
                                             module='lvis_metric'):
            return super().compute_metrics(results)
