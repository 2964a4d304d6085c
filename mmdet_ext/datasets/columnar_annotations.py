"""``LoadLazyAnnotations`` straight from the annotation store's columns, for the batched fetch.

Why: per sample, ``LazyCocoDataset.get_data_info`` builds a dict per instance (its box as a list,
its polygon parts as lists of floats) and ``LoadLazyAnnotations`` turns them back into arrays:
about 0.2 ms of a COCO sample's 0.6 ms of Python in the batched fetch. ``ColumnarAnnotations``
reads the same columns with array operations and writes what ``LoadLazyAnnotations`` writes: the
same keys, types, dtypes and values, the same errors (tests/test_columnar_annotations.py). The
sample then has no ``instances``; ``columnar_plan`` uses it only where nothing reads them.
"""
import copy
from typing import Any, Optional, Sequence

import numpy as np
import torch
from mmdet.datasets.transforms import LoadAnnotations, PackDetInputs
from mmdet.structures.bbox import get_box_type

from ..structures import LazyBitmapMasks, LazyPolygonMasks
from ..transforms.lazy_annotations import LoadLazyAnnotations
from .coco_records import KeptInstances, instance_mask, kept_instances
from .coco_store_layout import MASK_POLYGON, decoded


class ColumnarAnnotations:
    """``loader`` on a sample of ``dataset`` (a ``LazyCocoDataset``) whose ``data_info`` has no
    ``instances``: they are read from the store's rows of ``results['sample_idx']``, kept and
    dropped by the one rule (``coco_records.kept_instances``).

    ``prepare(indices)`` reads a whole batch's instances in one pass of array operations (per
    sample, a COCO image's handful of instances would pay numpy's per-call cost many times over);
    a sample outside it (one drawn to replace a bad sample) is read on its own.
    """

    def __init__(self, dataset: Any, loader: LoadLazyAnnotations) -> None:
        self.dataset = dataset
        self.loader = loader
        self._prepared: dict[int, KeptInstances] = {}

    def prepare(self, indices: Sequence[int]) -> None:
        """Read the instances of the samples ``indices`` (they replace any read before)."""
        size = len(self.dataset)
        samples = [i if i >= 0 else size + i for i in indices]
        self._prepared = dict(zip(samples, self._kept_instances(samples)))

    def __call__(self, results: dict) -> dict:
        return self.transform(results)

    def transform(self, results: dict) -> dict:
        """``results`` with what ``loader`` writes (a transform's interface, as mmcv's)."""
        sample = results['sample_idx']
        kept = self._prepared.get(sample)
        if kept is None:
            kept = self._kept_instances([sample])[0]
        loader = self.loader
        # Fresh arrays for every call, as the dicts give: a sample twice in a batch, or changed
        # in place downstream, shares nothing with another.
        if loader.with_bbox:
            boxes = kept.boxes.astype(np.float32)  # a copy: nothing shared with another call
            results['gt_bboxes'] = boxes if loader.box_type is None else \
                get_box_type(loader.box_type)[1](boxes, dtype=torch.float32)
            results['gt_ignore_flags'] = kept.iscrowd.copy()
        if loader.with_label:
            results['gt_bboxes_labels'] = kept.labels.copy()
        if loader.with_mask:
            results['gt_masks'], invalid = self._masks(results, kept.rows)
            results['gt_ignore_flags'] = kept.iscrowd | invalid
        return results

    def _kept_instances(self, samples: list[int]) -> list[KeptInstances]:
        """``KeptInstances`` of each of ``samples`` (indices >= 0)."""
        return kept_instances(self.dataset.store, self.dataset.store_rows(samples),
                              self.dataset.cat2label)

    def _masks(self, results: dict, rows: np.ndarray) -> tuple[Any, np.ndarray]:
        """(``gt_masks`` as ``LoadLazyAnnotations._load_masks`` makes them, which instances it
        marks ignored for an invalid mask)."""
        loader, dataset = self.loader, self.dataset
        height, width = results['ori_shape'] if 'ori_shape' in results \
            else (results['height'], results['width'])
        polygons = self._polygon_parts(rows)
        items, invalid = [], np.zeros(len(rows), dtype=bool)
        for k, i in enumerate(rows.tolist()):
            # Any other kind (RLE, PNG, none) through the loader's own code: rare, and its
            # errors are the per-sample path's.
            mask = polygons[i] if i in polygons else \
                instance_mask(dataset.store, i, dataset.data_root)
            item = loader._mask_item(mask, height, width, not loader.poly2mask)
            if item is None:
                invalid[k] = True
                item = [np.zeros(6)]  # mmdet's placeholder, as LoadLazyAnnotations'
            items.append(item)
        flavour = LazyBitmapMasks if loader.poly2mask else LazyPolygonMasks
        # Every item is one _mask_item made or the placeholder: valid, as the checks would say.
        return flavour._wrap(items, height, width), invalid

    def _polygon_parts(self, rows: np.ndarray) -> dict[int, list]:
        """{store row: its polygon parts} for the polygon instances among ``rows`` (one
        sample's): float64 views of one array of the sample's coordinates, a copy, so that
        nothing views the store."""
        store = self.dataset.store
        polygon_rows = rows[store['mask_kind'][rows] == MASK_POLYGON]
        if not len(polygon_rows):
            return {}
        ranges = store['mask_range'][polygon_rows].tolist()  # [first part, end part) each
        first_part, end_part = min(a for a, _ in ranges), max(b for _, b in ranges)
        offsets = store['poly_part_offsets'][first_part:end_part + 1].astype(np.int64)
        coords = np.array(decoded(store, 'poly_coords', slice(offsets[0], offsets[-1])),
                          dtype=np.float64)
        bounds = (offsets - offsets[0]).tolist()  # of part first_part + k: bounds[k:k + 2]
        return {i: [coords[bounds[p - first_part]:bounds[p - first_part + 1]]
                    for p in range(a, b)] for i, (a, b) in zip(polygon_rows.tolist(), ranges)}


def columnar_plan(dataset: Any, plan: Any) -> Optional[tuple[Any, ColumnarAnnotations]]:
    """(``plan`` (a ``BatchPlan``) with its ``LoadLazyAnnotations`` reading the store's columns,
    that ``ColumnarAnnotations``), or None where that would not give the same samples.

    It applies where the pipeline's one annotation loader is a ``LoadLazyAnnotations`` (exactly:
    a subclass may load otherwise) with boxes of mmdet's 'hbox' type (or arrays) and no
    segmentation map, first in the pipeline or straight after ``NativeLoadImageFromFile``
    (``mmdet_loading_plan``); where ``dataset`` makes its instances as ``LazyCocoDataset`` does;
    and where nothing after the loader reads ``instances`` (no annotation loader, no
    ``PackDetInputs`` meta key).
    """
    if not getattr(dataset, 'instances_from_store_rows', False):
        return None
    if any(isinstance(t, LoadAnnotations) for t in plan.after) or any(
            isinstance(t, PackDetInputs) and 'instances' in t.meta_keys for t in plan.after):
        return None
    loaders = getattr(plan.loader, 'annotation_loaders', None)
    if len(plan.before) == 1 and _columnar_loader(plan.before[0]) and not loaders:
        columns = ColumnarAnnotations(dataset, plan.before[0])
        return plan._replace(before=[columns], instances=False), columns
    if not plan.before and loaders is not None and len(loaders) == 1 and \
            _columnar_loader(loaders[0]):
        columns = ColumnarAnnotations(dataset, loaders[0])
        loader = copy.copy(plan.loader)
        loader.annotation_loaders = [columns]
        return plan._replace(loader=loader, instances=False), columns
    return None


def _columnar_loader(transform: Any) -> bool:
    return type(transform) is LoadLazyAnnotations and transform.box_type in (None, 'hbox') and \
        not transform.with_seg
