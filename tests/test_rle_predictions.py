"""Predicted masks kept as RLE: RLEFCNMaskHead and RLECocoMetric against mmdet's own.

The reference is mmdet 3.3 itself: ``FCNMaskHead.predict_by_feat`` (full-size masks, its CPU
path) followed by ``encode_mask_results``, and ``CocoMetric`` on those masks. Equality is exact:
the same RLE dicts, the same boxes afterwards, every reported number the same.
"""
import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mmdet.structures.mask import encode_mask_results
from mmdet.evaluation.metrics import CocoMetric
from mmdet.models.roi_heads.mask_heads import FCNMaskHead
from mmengine.config import Config, ConfigDict
from mmengine.structures import InstanceData
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

import mmdet_ext  # noqa: F401  (registers the head and the metric)
from mmdet_ext import RLECocoMetric, RLEFCNMaskHead

REPO = Path(__file__).resolve().parents[1]
# pycocotools' Masks.__array__ predates numpy 2's copy keyword
pytestmark = pytest.mark.filterwarnings('ignore:__array__ implementation:DeprecationWarning')


def _detections(rng: np.random.Generator, count: int, height: int, width: int):
    """Boxes inside a height x width image (some thin, some large), labels of 3 classes."""
    x1 = rng.uniform(0, width - 2, count)
    y1 = rng.uniform(0, height - 2, count)
    w = rng.choice([0.7, 4.0, 30.0, 0.6 * width], count) * rng.uniform(0.5, 1.0, count)
    h = rng.choice([0.7, 4.0, 30.0, 0.6 * height], count) * rng.uniform(0.5, 1.0, count)
    boxes = np.stack([x1, y1, np.minimum(x1 + w, width), np.minimum(y1 + h, height)], 1)
    return (torch.from_numpy(boxes).float(), torch.from_numpy(rng.integers(0, 3, count)),
            torch.from_numpy(rng.uniform(0.05, 1.0, count)).float())


def _predict(head, mask_preds, boxes, labels, scores, img_meta, threshold, rescale):
    results = InstanceData(bboxes=boxes.clone(), labels=labels, scores=scores)
    return head.predict_by_feat((mask_preds, ), [results], [img_meta],
                                ConfigDict(mask_thr_binary=threshold), rescale=rescale)[0]


@pytest.mark.parametrize('class_agnostic', [False, True])
@pytest.mark.parametrize('rescale', [True, False])
@pytest.mark.parametrize('threshold', [0.5, 0.3])
def test_head_gives_mmdets_masks_as_rle(class_agnostic, rescale, threshold):
    rng = np.random.default_rng(int(class_agnostic) * 4 + int(rescale) * 2 + int(threshold * 10))
    kwargs = dict(num_convs=0, num_classes=3, in_channels=4, conv_out_channels=4,
                  class_agnostic=class_agnostic)
    ours, theirs = RLEFCNMaskHead(**kwargs), FCNMaskHead(**kwargs)
    # A 427x640 original resized by (1.5, ~1.5): boxes in the resized image, as the RoI head has.
    img_meta = dict(ori_shape=(427, 640), img_shape=(640, 960), scale_factor=(1.5, 640 / 427))
    boxes, labels, scores = _detections(rng, 60, 640, 960)
    mask_preds = torch.from_numpy(rng.normal(0, 3, (60, 1 if class_agnostic else 3, 28, 28)))
    mask_preds = mask_preds.float()
    got = _predict(ours, mask_preds, boxes, labels, scores, img_meta, threshold, rescale)
    expected = _predict(theirs, mask_preds, boxes, labels, scores, img_meta, threshold, rescale)
    assert isinstance(got.masks, list) and isinstance(expected.masks, torch.Tensor)
    assert got.masks == encode_mask_results(expected.masks.numpy())
    assert torch.equal(got.bboxes, expected.bboxes)  # rescaled in place by both, or by neither
    assert sum(mask_utils.area(got.masks)) > 0  # the comparison saw foreground


def test_head_keeps_mmdets_tensors_where_it_has_no_rle_form():
    """No detections (mmdet's empty_instances) and mask_thr_binary <= 0 (all-true or soft
    masks): mmdet's own full-size tensors."""
    rng = np.random.default_rng(5)
    head = RLEFCNMaskHead(num_convs=0, num_classes=3, in_channels=4, conv_out_channels=4)
    reference = FCNMaskHead(num_convs=0, num_classes=3, in_channels=4, conv_out_channels=4)
    img_meta = dict(ori_shape=(40, 50), img_shape=(40, 50), scale_factor=(1.0, 1.0))
    boxes, labels, scores = _detections(rng, 5, 40, 50)
    mask_preds = torch.from_numpy(rng.normal(0, 3, (5, 3, 28, 28))).float()
    for threshold in (0.0, -1.0):
        got = _predict(head, mask_preds, boxes, labels, scores, img_meta, threshold, True)
        expected = _predict(reference, mask_preds, boxes, labels, scores, img_meta, threshold,
                            True)
        assert torch.equal(got.masks, expected.masks)
    empty = _predict(head, mask_preds[:0], boxes[:0], labels[:0], scores[:0], img_meta, 0.5, True)
    assert isinstance(empty.masks, torch.Tensor) and empty.masks.shape == (0, 40, 50)


def _noisy_predictions(coco: COCO, rng: np.random.Generator) -> list:
    """Per image: each ground truth instance as a detection with a jittered box, a score and its
    mask with a few pixels flipped, plus a spurious detection (bool mask tensors, as mmdet's
    heads give them)."""
    samples = []
    for img_id in sorted(coco.getImgIds()):
        info = coco.imgs[img_id]
        height, width = info['height'], info['width']
        anns = coco.loadAnns(coco.getAnnIds(imgIds=[img_id], iscrowd=False))
        masks = [coco.annToMask(a).astype(bool) for a in anns] + [np.zeros((height, width), bool)]
        masks[-1][:height // 3, :width // 4] = True
        masks = np.stack(masks) ^ (rng.random((len(masks), height, width)) < 0.01)
        boxes = [a['bbox'] for a in anns] + [[0, 0, width / 4, height / 3]]
        boxes = np.array([[x, y, x + w, y + h] for x, y, w, h in boxes]) + rng.normal(0, 2, (
            len(masks), 4))
        labels = [coco.getCatIds().index(a['category_id']) for a in anns] + [0]
        samples.append(dict(
            img_id=img_id, ori_shape=(height, width),
            pred_instances=dict(bboxes=torch.from_numpy(boxes).float(),
                                scores=torch.from_numpy(rng.uniform(0.1, 1, len(masks))).float(),
                                labels=torch.tensor(labels), masks=torch.from_numpy(masks))))
    return samples


def _encoded(samples: list) -> list:
    """A copy of the predictions with their masks as mmdet's RLE dicts (as RLEFCNMaskHead
    gives them)."""
    encoded = copy.deepcopy(samples)
    for sample in encoded:
        sample['pred_instances']['masks'] = encode_mask_results(
            sample['pred_instances']['masks'].numpy())
    return encoded


def test_metric_reports_cocometrics_numbers(toy_coco_root):
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    coco = COCO(ann_file)
    samples = _noisy_predictions(coco, np.random.default_rng(0))
    classes = tuple(c['name'] for c in coco.loadCats(coco.getCatIds()))
    numbers = []
    for metric_type in (CocoMetric, RLECocoMetric):
        metric = metric_type(ann_file=ann_file, metric=['bbox', 'segm'])
        metric.dataset_meta = dict(classes=classes)
        metric.process({}, copy.deepcopy(samples))
        numbers.append(metric.evaluate(len(samples)))
    assert numbers[0] == numbers[1]
    assert numbers[0]['coco/segm_mAP'] > 0.1  # the predictions overlap the ground truth


def test_metric_takes_rle_predictions_as_they_are(toy_coco_root):
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    coco = COCO(ann_file)
    samples = _noisy_predictions(coco, np.random.default_rng(1))
    encoded = _encoded(samples)
    metric = RLECocoMetric(ann_file=ann_file, metric=['segm'])
    metric.process({}, copy.deepcopy(samples))
    from_tensors = metric.results
    metric.results = []
    metric.process({}, encoded)
    assert [r['masks'] for _, r in metric.results] == [r['masks'] for _, r in from_tensors]


def test_config_example_builds_the_head_and_the_metric(toy_coco_root):
    cfg = Config.fromfile(str(REPO / 'configs' / 'mask-rcnn_r18_fpn_toy-coco_rle-eval.py'))
    from mmdet.registry import METRICS, MODELS
    model = MODELS.build(cfg.model)
    assert type(model.roi_head.mask_head) is RLEFCNMaskHead
    # The config's ann_file is under data/, which README command 1 writes; the suite's own copy
    # of the toy set stands in for it.
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    for evaluator in (cfg.val_evaluator, cfg.test_evaluator):
        assert type(METRICS.build({**evaluator, 'ann_file': ann_file})) is RLECocoMetric


def test_cocoeval_backend_refuses_what_it_cannot_do(toy_coco_root):
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    with pytest.raises(ValueError, match='cocoeval_backend must be one of'):
        RLECocoMetric(ann_file=ann_file, cocoeval_backend='fast')
    with pytest.raises(ValueError, match='use_mp_eval'):
        RLECocoMetric(ann_file=ann_file, use_mp_eval=True, cocoeval_backend='faster_coco_eval')


def _as_lvis_json(coco_json: Path, out: Path) -> str:
    """The toy COCO annotations as an LVIS v1 json (no crowd instances, category frequencies)."""
    coco = json.loads(coco_json.read_text())
    lvis = dict(
        info={}, licenses=[],
        images=[{**image, 'neg_category_ids': [], 'not_exhaustive_category_ids': []}
                for image in coco['images']],
        annotations=[{**ann, 'iscrowd': 0} for ann in coco['annotations'] if not ann['iscrowd']],
        categories=[{**cat, 'frequency': 'cfr'[i % 3], 'synset': f"{cat['name']}.n.01"}
                    for i, cat in enumerate(coco['categories'])])
    out.write_text(json.dumps(lvis))
    return str(out)


@pytest.mark.parametrize('backend', ['auto', 'lvis', 'hotcoco'])
def test_lvis_metric_reports_lvismetrics_numbers(backend, toy_coco_root, tmp_path, monkeypatch):
    """RLELVISMetric on mask tensors and on RLEs (as RLEFCNMaskHead gives them), with each
    evaluator backend: LVISMetric's numbers for the same predictions, per class too. With
    hotcoco (what 'auto' takes, where installed) it evaluates without the np.float alias lvis'
    own accumulate needs."""
    pytest.importorskip('lvis', reason='mmdet\'s LVISMetric needs lvis (tools/install_deps.sh)')
    if backend == 'hotcoco':
        pytest.importorskip('hotcoco', reason='tools/install_deps.sh installs it')
    from mmdet.evaluation.metrics import LVISMetric

    from mmdet_ext import RLELVISMetric
    ann_file = _as_lvis_json(toy_coco_root / 'annotations' / 'instances_val.json',
                             tmp_path / 'lvis_val.json')
    coco = COCO(ann_file)
    samples = _noisy_predictions(coco, np.random.default_rng(3))
    encoded = _encoded(samples)
    classes = tuple(c['name'] for c in coco.loadCats(coco.getCatIds()))

    def numbers(metric_type, predictions, **kwargs):
        metric = metric_type(ann_file=ann_file, metric=['bbox', 'segm'], classwise=True,
                             **kwargs)
        metric.dataset_meta = dict(classes=classes)
        metric.process({}, copy.deepcopy(predictions))
        return metric.evaluate(len(samples))

    ours = []
    if backend != 'lvis':
        assert not hasattr(np, 'float')
        ours.append(numbers(RLELVISMetric, samples, cocoeval_backend=backend))
    # lvis 0.5.3 (PyPI's latest) accumulates with np.float, which numpy 1.24 removed: mmdet's
    # LVISMetric cannot evaluate without it, so the alias is restored for it.
    monkeypatch.setattr(np, 'float', float, raising=False)
    reference = numbers(LVISMetric, samples)
    ours += [numbers(RLELVISMetric, predictions, cocoeval_backend=backend)
             for predictions in (samples, encoded)]
    for got in ours:
        assert json.dumps(got) == json.dumps(reference)  # nan where a class has no ground truth
    assert any(key.endswith('_precision') for key in reference)
    assert reference['lvis/segm_AP'] > 0.1


def test_result_files_are_mmdets_bytes(toy_coco_root, tmp_path):
    """The json files RLECocoMetric writes (in one pass) are byte for byte CocoMetric's, and
    mmdet's own writer is back in place afterwards."""
    import mmdet.evaluation.metrics.coco_metric as coco_metric_module
    original = coco_metric_module.dump
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    coco = COCO(ann_file)
    samples = _noisy_predictions(coco, np.random.default_rng(4))
    for metric_type in (CocoMetric, RLECocoMetric):
        metric = metric_type(ann_file=ann_file, metric=['bbox', 'segm'], format_only=True,
                             outfile_prefix=str(tmp_path / metric_type.__name__))
        metric.dataset_meta = dict(classes=tuple(c['name'] for c in coco.loadCats(
            coco.getCatIds())))
        metric.process({}, copy.deepcopy(samples))
        metric.evaluate(len(samples))
    for kind in ('bbox', 'segm'):
        ours = (tmp_path / f'RLECocoMetric.{kind}.json').read_bytes()
        assert ours == (tmp_path / f'CocoMetric.{kind}.json').read_bytes()
        assert len(json.loads(ours)) > len(samples)
    assert coco_metric_module.dump is original


def test_one_pass_json_dump_writes_what_mmengine_writes(tmp_path):
    from mmengine.fileio import dump

    from mmdet_ext.evaluation.json_dump import dump_json_in_one_pass
    obj = [dict(image_id=np.int64(3), bbox=np.array([1.5, 2.0, 3.25, 4.0], np.float32),
                score=np.float32(0.1), ids={1, 2}, counts='\\x01ab"', nan=float('nan'),
                big=1e300, nested=[range(3), (0.1, -0.0)])]
    dump(obj, str(tmp_path / 'mmengine.json'))
    dump_json_in_one_pass(obj, tmp_path / 'ours.json')
    assert (tmp_path / 'ours.json').read_bytes() == (tmp_path / 'mmengine.json').read_bytes()
    # Other formats and file objects are mmengine's own dump.
    dump_json_in_one_pass(obj[0]['ids'], str(tmp_path / 'ids.pkl'))
    assert (tmp_path / 'ids.pkl').read_bytes() == dump(obj[0]['ids'], file_format='pkl')


# The peak memory of the test-time masks of one image above what the process held before
# (Linux VmHWM reset through /proc/self/clear_refs), in a fresh process: 1,000 detections at
# 1333x800, through the head's paste and the metric's process. Ours holds the RLEs and the
# head's per-thread scratch; mmdet's head makes the full-size masks (1,000 x 1333 x 800 bytes).
_MEMORY_PROBE = r'''
import re, sys
from pathlib import Path
import numpy as np, torch
from mmengine.config import ConfigDict
from mmengine.structures import InstanceData
import mmdet_ext
from mmdet.models.roi_heads.mask_heads import FCNMaskHead
from mmdet_ext import RLECocoMetric, RLEFCNMaskHead
torch.set_num_threads(1)
def hwm(field):
    return int(re.search(field + r':\s+(\d+)', Path('/proc/self/status').read_text()).group(1))
head = (RLEFCNMaskHead if sys.argv[1] == 'ours' else FCNMaskHead)(
    num_convs=0, num_classes=3, in_channels=4, conv_out_channels=4, class_agnostic=True)
metric = RLECocoMetric(ann_file=sys.argv[2], metric=['segm'])
rng = np.random.default_rng(0)
height, width, count = 800, 1333, 1000
x1, y1 = rng.uniform(0, width - 40, count), rng.uniform(0, height - 40, count)
w, h = rng.uniform(20, 0.5 * width, count), rng.uniform(20, 0.5 * height, count)
boxes = torch.from_numpy(np.stack([x1, y1, np.minimum(x1 + w, width),
                                   np.minimum(y1 + h, height)], 1)).float()
yy, xx = np.mgrid[0:28, 0:28] / 27.0 - 0.5
logits = torch.from_numpy(8 - 30 * (xx ** 2 + yy ** 2) + rng.normal(0, 1, (count, 1, 1, 1))).float()
meta = dict(ori_shape=(height, width), img_shape=(height, width), scale_factor=(1.0, 1.0))
def run(n):
    results = InstanceData(bboxes=boxes[:n].clone(), labels=torch.zeros(n, dtype=torch.long),
                           scores=torch.linspace(1, 0.1, n))
    masks = head.predict_by_feat((logits[:n], ), [results], [meta],
                                 ConfigDict(mask_thr_binary=0.5), rescale=True)[0]
    metric.process({}, [dict(img_id=1, ori_shape=(height, width), pred_instances=masks)])
run(10)  # imports, pools, first allocations
before = hwm('VmRSS')
Path('/proc/self/clear_refs').write_text('5')
run(count)
print((hwm('VmHWM') - before) / 1024)
'''

TEST_TIME_MASK_BOUND_MIB = 64


@pytest.mark.skipif(not Path('/proc/self/clear_refs').exists(), reason='Linux peak RSS reset')
def test_test_time_masks_of_1000_detections_stay_under_the_bound(toy_coco_root):
    """1,000 detections on a 1333x800 image: RLEFCNMaskHead + RLECocoMetric.process peak under
    TEST_TIME_MASK_BOUND_MIB above the process's memory before; the same probe sees mmdet's
    FCNMaskHead make its full-size masks (1,017 MiB), so it can see a breach."""
    import subprocess
    import sys
    ann_file = str(toy_coco_root / 'annotations' / 'instances_val.json')
    peaks = {}
    for side in ('ours', 'mmdet'):
        output = subprocess.run([sys.executable, '-c', _MEMORY_PROBE, side, ann_file],
                                check=True, capture_output=True, text=True, cwd=REPO,
                                timeout=600).stdout
        peaks[side] = float(output.strip().splitlines()[-1])
    assert peaks['ours'] < TEST_TIME_MASK_BOUND_MIB, peaks
    full_size_mib = 1000 * 1333 * 800 / 2 ** 20
    assert peaks['mmdet'] > 0.9 * full_size_mib, peaks
