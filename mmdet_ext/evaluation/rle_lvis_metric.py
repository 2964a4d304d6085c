"""``LVISMetric`` without full-size masks on the host (300 detections per image make mmdet's
host copy of them 3x COCO's: 312 MiB per 1333x800 image).

mmdet's ``LVISMetric.process`` only accepts mask tensors (it calls ``.detach()`` on them), so the
masks are taken out of the predictions before it runs and their RLEs put into its result after.
Result files are written in one pass (``json_dump``: the same bytes).
"""
from typing import Sequence

from mmdet.evaluation.metrics import LVISMetric

from ..registry import METRICS
from .coco_metric_globals import replaced_coco_metric_globals
from .json_dump import dump_json_in_one_pass
from .predicted_masks import predicted_masks_as_rles, without_masks


@METRICS.register_module()
class RLELVISMetric(LVISMetric):
    """``LVISMetric`` (same arguments and results) that encodes predicted masks natively and
    accepts RLE predictions (``RLEFCNMaskHead``); soft masks go to ``LVISMetric`` unchanged."""

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
        # LVISMetric writes its result files with CocoMetric.results2json
        with replaced_coco_metric_globals(required={},
                                          optional={'dump': dump_json_in_one_pass}):
            return super().compute_metrics(results)
