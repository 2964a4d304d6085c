"""The COCO evaluator backends against pycocotools: the parity suite every offered backend
passes, ``cocoeval_backend='auto'``'s choice, and ``RLECocoMetric``'s numbers with each.

The reference is pycocotools' ``COCOeval`` run as mmdet's ``CocoMetric`` runs it; agreement is
``cocoeval_parity.disagreement``: the same printed summary and reported numbers (3 decimals),
the same per-category AP, unrounded statistics and precision within 1e-12. tools/install_deps.sh
installs every backend, so none is skipped in CI.
"""
import copy
import json

import numpy as np
import pytest
import torch
from mmdet.evaluation.metrics import CocoMetric
from pycocotools.cocoeval import COCOeval

from helpers.tiny_runner import record_mmengine_log
from mmdet_ext import RLECocoMetric
from mmdet_ext.evaluation import cocoeval_backend, cocoeval_parity
from mmdet_ext.evaluation.cocoeval_backend import (BACKENDS, FASTEST_FIRST, Backend,
                                                   FasterCocoEval, auto_backend)
from mmdet_ext.evaluation.cocoeval_parity import (DEFAULT_MAX_DETS, check_parity,
                                                  coco_from_dict, disagreement, evaluate,
                                                  parity_case)

FASTER = [name for name in BACKENDS if name != 'pycocotools']


def _installed(name: str) -> Backend:
    backend = BACKENDS[name]
    if not backend.installed():
        pytest.skip(f'{backend.package} is not installed (tools/install_deps.sh installs it)')
    return backend


@pytest.fixture(scope='module')
def cases() -> dict:
    return {seed: parity_case(seed, images=16 + 12 * seed) for seed in (0, 1, 2)}


# (iou_type, evaluate's keyword arguments): CocoMetric's settings, pycocotools' defaults, the
# subsets a config can ask for (a category without ground truth among them), and useCats=0
SETTINGS = [
    ('bbox', {}), ('segm', {}),
    ('bbox', dict(max_dets=DEFAULT_MAX_DETS)), ('segm', dict(max_dets=DEFAULT_MAX_DETS)),
    ('segm', dict(max_dets=(1, 10, 100, 300))),
    ('bbox', dict(img_ids=[1, 2, 3, 5, 8, 13])), ('segm', dict(img_ids=[2, 4, 6, 10])),
    ('bbox', dict(cat_ids=[1, 3, 7])), ('segm', dict(cat_ids=[2, 5])),
    ('bbox', dict(use_cats=False)), ('segm', dict(use_cats=False)),
]


@pytest.mark.parametrize('name', FASTER)
@pytest.mark.parametrize('seed', [0, 1, 2])
@pytest.mark.parametrize('iou_type,setting', SETTINGS,
                         ids=[f'{t}-{"-".join(s) or "cocometric"}' for t, s in SETTINGS])
def test_backend_reports_what_pycocotools_reports(name, seed, iou_type, setting, cases):
    """Each on fresh ground truth (str RLE counts, as read from a json) and on ground truth a
    pycocotools segm evaluation has been through (it rewrites the counts to bytes in place, and
    mmdet's CocoMetric keeps its COCO object from one evaluation to the next)."""
    evaluator = _installed(name).evaluator
    case = cases[seed]
    reference = evaluate(COCOeval, coco_from_dict(case['gt']), case[iou_type], iou_type,
                         **setting)
    fresh = evaluate(evaluator, coco_from_dict(case['gt']), case[iou_type], iou_type, **setting)
    assert disagreement(reference, fresh) is None
    used = coco_from_dict(case['gt'])
    evaluate(COCOeval, used, case['segm'], 'segm')
    assert any(isinstance(a['segmentation'], dict) and isinstance(a['segmentation']['counts'],
                                                                    bytes)
               for a in used.dataset['annotations'])
    after = evaluate(evaluator, used, case[iou_type], iou_type, **setting)
    assert disagreement(reference, after) is None


def test_hotcoco_makes_its_ground_truth_once_and_every_evaluation_on_it_is_exact(cases):
    """One ground truth through every setting in turn (as CocoMetric evaluates bbox then segm
    at every validation): hotcoco's copy is made once, evaluations on it do not change what
    later ones report, a new index (``createIndex``) makes a new copy, and the copy goes with
    the ground truth."""
    import gc
    import weakref

    from mmdet_ext.evaluation.cocoeval_backend import _HOTCOCO_GROUND_TRUTHS, HotcocoEval

    _installed('hotcoco')
    case = cases[2]
    gt = coco_from_dict(case['gt'])
    copies = []
    for iou_type, setting in SETTINGS + SETTINGS[::-1]:
        reference = evaluate(COCOeval, coco_from_dict(case['gt']), case[iou_type], iou_type,
                             **setting)
        got = evaluate(HotcocoEval, gt, case[iou_type], iou_type, **setting)
        assert disagreement(reference, got) is None, (iou_type, setting)
        copies.append(_HOTCOCO_GROUND_TRUTHS[gt][1])
    assert all(copy is copies[0] for copy in copies)
    gt.createIndex()
    evaluate(HotcocoEval, gt, case['bbox'], 'bbox')
    assert _HOTCOCO_GROUND_TRUTHS[gt][1] is not copies[0]
    alive = weakref.ref(gt)
    del gt
    gc.collect()
    assert alive() is None


def test_the_case_reaches_the_rules_that_decide_a_number(cases):
    """Without these the suite could not tell a backend that gets them wrong."""
    case = cases[0]
    annotations = case['gt']['annotations']
    assert {a['iscrowd'] for a in annotations} == {0, 1}
    assert any(a.get('ignore') for a in annotations)
    kinds = {type(a['segmentation']['counts']).__name__ if isinstance(a['segmentation'], dict)
             else 'polygon' for a in annotations}
    assert kinds == {'str', 'list', 'polygon'}  # compressed, uncompressed RLE and polygons
    areas = [a['area'] for a in annotations if not a['iscrowd']]
    assert min(areas) < 32 ** 2 and max(areas) > 96 ** 2
    images = {image['id'] for image in case['gt']['images']}
    assert images - {a['image_id'] for a in annotations}  # images without ground truth
    assert images - {r['image_id'] for r in case['segm']}  # and without detections
    detected = {r['category_id'] for r in case['segm']}
    annotated = {a['category_id'] for a in annotations}
    assert annotated - detected and detected - annotated
    per_image = {}
    for result in case['bbox']:
        key = (result['image_id'], result['category_id'])
        per_image[key] = per_image.get(key, 0) + 1
    assert max(per_image.values()) > 100  # maxDets=100 cuts
    scores = [r['score'] for r in case['bbox']]
    assert len(set(scores)) < len(scores)  # ties


def test_the_suite_fails_a_backend_that_takes_stats0_at_the_largest_max_dets(cases):
    """faster-coco-eval's own summary (and hotcoco's) computes mAP at maxDets[-1], where
    pycocotools takes 100: with CocoMetric's maxDets (100, 300, 1000) and an image with more
    than 100 detections of a category, the reported mAP differs."""
    pytest.importorskip('faster_coco_eval', reason='tools/install_deps.sh installs it')
    from faster_coco_eval import COCOeval_faster

    class Native(COCOeval_faster):
        def __init__(self, gt, dt, iou_type):
            super().__init__(gt, dt, iou_type, print_function=print)

    problem = check_parity(Native, cases[0])
    assert problem is not None and 'printed summary differs' in problem
    case = cases[0]
    native = evaluate(Native, coco_from_dict(case['gt']), case['bbox'], 'bbox')
    reference = evaluate(COCOeval, coco_from_dict(case['gt']), case['bbox'], 'bbox')
    assert native.reported()[0] != reference.reported()[0]
    assert native.reported()[1:] == reference.reported()[1:]


class _OffBy(FasterCocoEval):
    """faster-coco-eval's tables with one precision entry moved by ``delta``."""
    delta = 0.0

    def tables(self, params):
        precision, recall, scores = super().tables(params)
        precision = np.array(precision)
        position = np.unravel_index(np.argmax(precision), precision.shape)
        precision[position] -= self.delta
        return precision, recall, scores


class _Tiny(_OffBy):
    delta = 1e-9


class _Visible(_OffBy):
    delta = 0.5


@pytest.mark.parametrize('wrong', [_Tiny, _Visible])
def test_a_backend_that_disagrees_is_never_used(wrong):
    """Forced to disagree by 1e-9 (below what is printed) or visibly, a backend is passed over
    by 'auto', and the log says why."""
    _installed('faster_coco_eval')
    bad = Backend(f'wrong by {wrong.delta}', 'faster-coco-eval', 'faster_coco_eval', wrong)
    good = BACKENDS['faster_coco_eval']
    with record_mmengine_log() as records:
        assert auto_backend((bad, good)) is good
        assert auto_backend((bad, )) is BACKENDS['pycocotools']
    text = '\n'.join(record.getMessage() for record in records)
    assert f'passed over wrong by {wrong.delta}: disagrees with pycocotools' in text
    assert "cocoeval_backend='auto': evaluating with pycocotools" in text


def test_auto_takes_the_first_installed_backend_that_agrees():
    """The default order is every faster backend, fastest first; 'auto' takes the first
    installed (all are in CI) and skips one that is not installed, saying so."""
    assert sorted(FASTEST_FIRST) == sorted(FASTER)
    missing = Backend('missing', 'no-such-package', 'no_such_module_here', FasterCocoEval)
    expected = next(BACKENDS[name] for name in FASTEST_FIRST if BACKENDS[name].installed())
    assert auto_backend((missing, *(BACKENDS[name] for name in FASTEST_FIRST))) is expected
    assert cocoeval_backend.resolve_backend('auto', use_mp_eval=False) is expected
    # mmdet's multi-process evaluator is not replaced
    assert cocoeval_backend.resolve_backend('auto', use_mp_eval=True) is BACKENDS['pycocotools']


def test_disagreement_names_what_differs(cases):
    case = cases[0]
    gt = coco_from_dict(case['gt'])
    reference = evaluate(COCOeval, gt, case['segm'], 'segm')
    assert disagreement(reference, copy.deepcopy(reference)) is None
    printed = copy.deepcopy(reference)
    printed.printed = printed.printed.replace('maxDets=100 ]', 'maxDets=1000 ]', 1)
    assert 'printed summary differs' in disagreement(reference, printed)
    stats = copy.deepcopy(reference)
    stats.stats[3] += 0.01
    assert 'statistics' in disagreement(reference, stats)
    per_category = copy.deepcopy(reference)
    per_category.precision[:, :, 0, 0, -1] = np.where(
        per_category.precision[:, :, 0, 0, -1] > -1, 0.0, -1.0)
    assert 'per-category AP' in disagreement(reference, per_category)
    tiny = copy.deepcopy(reference)
    tiny.stats[0] += 1e-11
    assert 'unrounded' in disagreement(reference, tiny)


def _as_predictions(case: dict, classes: list) -> list:
    """The case's results as the predictions a Mask R-CNN gives CocoMetric (boxes xyxy, labels
    by class index, masks as RLE dicts)."""
    labels = {cat: classes.index(f'category {cat}') for cat in
              (c['id'] for c in case['gt']['categories'])}
    samples = []
    for image in case['gt']['images']:
        pairs = [(b, s) for b, s in zip(case['bbox'], case['segm'])
                 if b['image_id'] == image['id']]
        boxes = np.array([[x, y, x + w, y + h] for (x, y, w, h) in
                          (b['bbox'] for b, _ in pairs)], dtype=np.float32).reshape(-1, 4)
        samples.append(dict(
            img_id=image['id'], ori_shape=(image['height'], image['width']),
            pred_instances=dict(
                bboxes=torch.from_numpy(boxes),
                scores=torch.tensor([b['score'] for b, _ in pairs], dtype=torch.float32),
                labels=torch.tensor([labels[b['category_id']] for b, _ in pairs]),
                masks=[dict(s['segmentation']) for _, s in pairs])))
    return samples


@pytest.mark.parametrize('backend', ['auto', *FASTER])
def test_metric_reports_cocometrics_numbers_with_each_backend(backend, cases, tmp_path):
    """Every number RLECocoMetric reports (per class too) is CocoMetric's with pycocotools, on
    a set where maxDets decides mmdet's mAP; mmdet's own evaluator is back afterwards."""
    import mmdet.evaluation.metrics.coco_metric as coco_metric_module

    if backend != 'auto':
        _installed(backend)
    case = cases[0]
    ann_file = tmp_path / 'gt.json'
    ann_file.write_text(json.dumps(case['gt']))
    classes = [c['name'] for c in case['gt']['categories']]
    samples = _as_predictions(case, classes)
    original = coco_metric_module.COCOeval
    numbers = []
    for metric in (CocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'], classwise=True),
                   RLECocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'],
                                 classwise=True, cocoeval_backend=backend)):
        metric.dataset_meta = dict(classes=classes)
        metric.process({}, copy.deepcopy(samples))
        numbers.append(metric.evaluate(len(samples)))
    # nan where a category has no ground truth: compared as text
    assert json.dumps(numbers[0]) == json.dumps(numbers[1])
    assert any(key.endswith('_precision') for key in numbers[0])
    assert numbers[0]['coco/segm_mAP'] > 0.1
    assert coco_metric_module.COCOeval is original


def test_hotcoco_makes_the_results_itself_and_the_ground_truth_is_put_back(cases, tmp_path,
                                                                           monkeypatch):
    """With hotcoco, CocoMetric's ``loadRes`` of each result list is hotcoco's (pycocotools'
    ``loadRes``, the longer half of the work, never runs) and gives CocoMetric's numbers; after
    the call the ground truth's ``loadRes`` is pycocotools' again."""
    from pycocotools.coco import COCO

    _installed('hotcoco')
    case = cases[1]
    ann_file = tmp_path / 'gt.json'
    ann_file.write_text(json.dumps(case['gt']))
    classes = [c['name'] for c in case['gt']['categories']]
    samples = _as_predictions(case, classes)
    reference = CocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'])
    reference.dataset_meta = dict(classes=classes)
    reference.process({}, copy.deepcopy(samples))
    expected = reference.evaluate(len(samples))

    calls = []
    original = COCO.loadRes
    monkeypatch.setattr(COCO, 'loadRes', lambda self, res: calls.append(1) or original(self, res))
    metric = RLECocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'],
                           cocoeval_backend='hotcoco')
    metric.dataset_meta = dict(classes=classes)
    metric.process({}, copy.deepcopy(samples))
    assert metric.evaluate(len(samples)) == expected
    assert calls == []
    assert 'loadRes' not in vars(metric._coco_api)
    metric.cocoeval_backend = 'pycocotools'
    metric.process({}, copy.deepcopy(samples))
    assert metric.evaluate(len(samples)) == expected
    assert len(calls) == 2  # bbox and segm, through pycocotools as before


def test_hotcoco_refuses_results_as_pycocotools_loadres_does(cases):
    """Empty results are pycocotools' IndexError (CocoMetric logs "empty" and stops), results
    of an image the ground truth lacks its assertion; a file or an array, or results of
    other keys, go through pycocotools' ``loadRes`` itself."""
    from mmdet_ext.evaluation.cocoeval_backend import HotcocoEval, RawResults
    from pycocotools.coco import COCO

    gt = coco_from_dict(cases[0]['gt'])
    with pytest.raises(IndexError):
        gt.loadRes([])
    with pytest.raises(IndexError):
        HotcocoEval.load_results(gt, [])
    stray = [dict(cases[0]['bbox'][0], image_id=10 ** 6)]
    with pytest.raises(AssertionError, match='Results do not correspond to current coco set'):
        gt.loadRes(copy.deepcopy(stray))
    with pytest.raises(AssertionError, match='Results do not correspond to current coco set'):
        HotcocoEval.load_results(gt, copy.deepcopy(stray))
    assert isinstance(HotcocoEval.load_results(gt, cases[0]['segm']), RawResults)
    with_keypoints = [dict(r, keypoints=[]) for r in cases[0]['bbox'][:3]]
    assert isinstance(HotcocoEval.load_results(gt, with_keypoints), COCO)
    array = np.array([[r['image_id'], *r['bbox'], r['score'], r['category_id']]
                      for r in cases[0]['bbox'][:5]])
    assert isinstance(HotcocoEval.load_results(gt, array), COCO)


def test_metric_with_hotcoco_reports_empty_results_as_cocometric(cases, tmp_path):
    _installed('hotcoco')
    case = cases[0]
    ann_file = tmp_path / 'gt.json'
    ann_file.write_text(json.dumps(case['gt']))
    classes = [c['name'] for c in case['gt']['categories']]
    empty = [dict(s, pred_instances=dict(bboxes=torch.zeros(0, 4), scores=torch.zeros(0),
                                         labels=torch.zeros(0, dtype=torch.long), masks=[]))
             for s in _as_predictions(case, classes)]
    outcomes = []
    for metric in (CocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm']),
                   RLECocoMetric(ann_file=str(ann_file), metric=['bbox', 'segm'],
                                 cocoeval_backend='hotcoco')):
        metric.dataset_meta = dict(classes=classes)
        metric.process({}, copy.deepcopy(empty))
        with record_mmengine_log() as log:
            outcomes.append(metric.evaluate(len(empty)))
        assert any('The testing results of the whole dataset is empty' in r.getMessage()
                   for r in log)
    assert outcomes[0] == outcomes[1] == {}


def test_check_backend_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match='cocoeval_backend must be one of'):
        cocoeval_backend.check_backend('fast', use_mp_eval=False)
    with pytest.raises(ValueError, match='use_mp_eval'):
        cocoeval_backend.check_backend('hotcoco', use_mp_eval=True)
    cocoeval_backend.check_backend('auto', use_mp_eval=True)  # auto then leaves mmdet's own


def test_parity_case_is_the_same_for_a_seed():
    assert parity_case(3, images=6) == parity_case(3, images=6)
    assert cocoeval_parity.parity_case(3, images=6) != parity_case(4, images=6)


# LVIS: hotcoco's LVISEval under lvis' own summary, against the lvis package's LVISEval

@pytest.mark.parametrize('seed', [0, 1, 2])
def test_hotcoco_lvis_reports_what_lvis_reports(seed):
    """bbox, segm, and segm results with their boxes (as mmdet's LVISMetric writes them: lvis
    then takes the box's area); negative and not-exhaustive categories, all frequencies."""
    pytest.importorskip('lvis', reason='tools/install_deps.sh installs it')
    backend = cocoeval_backend.LVIS_BACKENDS['hotcoco']
    if not backend.installed():
        pytest.skip('hotcoco is not installed (tools/install_deps.sh installs it)')
    case = cocoeval_parity.lvis_parity_case(seed, images=16 + 12 * seed)
    images = case['gt']['images']
    assert any(image['neg_category_ids'] for image in images)
    assert any(image['not_exhaustive_category_ids'] for image in images)
    assert {c['frequency'] for c in case['gt']['categories']} == {'r', 'c', 'f'}
    assert cocoeval_parity.check_lvis_parity(backend.evaluator, case) is None


def test_an_lvis_backend_that_disagrees_is_never_used():
    pytest.importorskip('lvis', reason='tools/install_deps.sh installs it')
    good = cocoeval_backend.LVIS_BACKENDS['hotcoco']
    if not good.installed():
        pytest.skip('hotcoco is not installed (tools/install_deps.sh installs it)')

    class Wrong(good.evaluator):
        def accumulate(self):
            super().accumulate()
            precision = self.eval['precision']
            precision[np.unravel_index(np.argmax(precision), precision.shape)] -= 1e-9

    bad = cocoeval_backend.LVISBackend('wrong', 'hotcoco', 'hotcoco', lambda: Wrong)
    with record_mmengine_log() as records:
        assert cocoeval_backend.auto_lvis_backend((bad, good)) is good
        assert cocoeval_backend.auto_lvis_backend((bad, )) is \
            cocoeval_backend.LVIS_BACKENDS['lvis']
    assert 'passed over wrong: disagrees with lvis' in '\n'.join(
        record.getMessage() for record in records)
    assert not hasattr(np, 'float')  # the check's alias for lvis' own accumulate is gone again
