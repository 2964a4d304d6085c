"""Running one corpus case in this process: the plugin's path or stock mmdet/mmengine's.

Data cases build the dataset (``LazyCocoDataset`` with ``NativeLoadImageFromFile`` +
``LoadLazyAnnotations``, or ``CocoDataset`` with ``LoadImageFromFile`` +
``LoadAnnotations(poly2mask=True)``), load every sample and rasterise its masks (what the mask
head would do); checkpoint cases load the file the way ``load_from`` / ``--resume PATH`` do.
The result is a json-able dict; judging it is ``judge.py``'s job.
"""
import json
import math
import traceback
from pathlib import Path

import numpy as np

from .base_data import ANN_FILE, IMG_DIR


def _error(err: BaseException) -> dict:
    return {'status': 'error', 'error_type': type(err).__name__,
            'error_bases': [c.__name__ for c in type(err).__mro__],
            'message': str(err), 'traceback': traceback.format_exc()[-2000:]}


def _sample_summary(results: dict) -> dict:
    """What a sample trains on, reduced to what the judge checks."""
    masks = results.get('gt_masks')
    pixels = [] if masks is None else [int(v) for v in masks.to_ndarray().sum(axis=(1, 2))]
    boxes = results['gt_bboxes'].numpy().tolist() if 'gt_bboxes' in results else []
    ignore = results.get('gt_ignore_flags', np.zeros(len(boxes), bool)).tolist()
    return {'img_id': results['img_id'], 'img_shape': list(results['img'].shape[:2]),
            'json_hw': [results['height'], results['width']], 'boxes': boxes,
            'ignore': [bool(v) for v in ignore], 'mask_pixels': pixels,
            'boxes_finite': all(math.isfinite(v) for box in boxes for v in box)}


def _read_jsonl(paths) -> list[dict]:
    return [json.loads(line) for path in paths for line in Path(path).read_text().splitlines()]


def _json_image_ids(ann_file: Path) -> list:
    """The ids of the json's images, in its order: what must load, less what is dropped."""
    coco = json.loads(ann_file.read_bytes().decode('utf-8-sig'))
    return [image.get('id') for image in coco.get('images', [])]


def run_data_case(case_dir: Path, impl: str, policy: str, options: dict) -> dict:
    """Build the dataset of ``case_dir`` and load every sample; ``options`` from the case."""
    data_prefix = dict(img=options.get('img_prefix', IMG_DIR + '/'))
    common = dict(data_root=str(case_dir), ann_file=options.get('ann_file', ANN_FILE),
                  data_prefix=data_prefix, filter_cfg=None, test_mode=False)
    if impl == 'ours':
        from mmdet_ext.datasets import LazyCocoDataset
        pipeline = [dict(type='NativeLoadImageFromFile'),
                    dict(type='LoadLazyAnnotations', with_bbox=True, with_mask=True)]
        make = lambda: LazyCocoDataset(  # noqa: E731
            pipeline=pipeline, on_bad_sample=policy, work_dir=str(case_dir / 'work'),
            store_cache_dir=str(case_dir / 'cache'), **common)
    else:
        from mmdet.datasets import CocoDataset
        pipeline = [dict(type='LoadImageFromFile'),
                    dict(type='LoadAnnotations', with_bbox=True, with_mask=True,
                         poly2mask=True)]
        make = lambda: CocoDataset(pipeline=pipeline, **common)  # noqa: E731
    result: dict = {'status': 'loaded', 'samples': []}
    try:
        dataset = make()
        dataset.max_refetch = 20  # the stock default (1000) only delays the same error
        for idx in range(len(dataset)):
            result['samples'].append(_sample_summary(dataset[idx]))
    except Exception as err:  # noqa: BLE001 -- recording what happened is the point
        result.update(_error(err))
    result['problems'] = _read_jsonl(sorted((case_dir / 'cache').glob('*.problems.jsonl')))
    result['bad_samples'] = _read_jsonl(sorted((case_dir / 'work').glob('bad_samples.jsonl')))
    if result['status'] == 'loaded':  # the dataset read the json: so can this
        result['json_image_ids'] = _json_image_ids(case_dir / common['ann_file'])
    return result


def run_checkpoint_case(case_dir: Path, impl: str, options: dict) -> dict:
    """Load ``case_dir/<options['file']>`` as ``--resume PATH`` / ``load_from`` do."""
    from mmengine.runner.checkpoint import _load_checkpoint
    path = str(case_dir / options['file'])
    if impl == 'ours':
        from mmdet_ext.engine.checkpoint_loading import install_cpu_checkpoint_loader
        install_cpu_checkpoint_loader()
    try:
        checkpoint = _load_checkpoint(path, map_location='cpu')
        keys = sorted(checkpoint) if isinstance(checkpoint, dict) else []
        result = {'status': 'loaded', 'keys': [str(k) for k in keys][:20]}
    except Exception as err:  # noqa: BLE001
        result = _error(err)
    marker = case_dir / 'PWNED'
    result['code_ran'] = marker.exists()
    return result
