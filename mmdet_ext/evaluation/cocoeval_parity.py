"""Whether a COCO evaluator reports what pycocotools' ``COCOeval`` reports, as ``CocoMetric``
uses it.

A backend is compared with pycocotools on a case built to reach every rule that decides a
number: crowd regions and ``ignore`` flags, the three area ranges, more detections on an image
than the smallest ``maxDets``, tied scores (pycocotools sorts them stably: image order, then
result order), images without ground truth or without detections, a category without
detections and one without ground truth, polygon, compressed and uncompressed RLE ground truth.
It agrees when the printed summary is the same text, every statistic ``CocoMetric`` reports (to
3 decimals) and every per-category AP it logs (``classwise``) are the same numbers, and the
unrounded statistics and precision table differ by no more than ``TOLERANCE`` (summation order:
faster-coco-eval's differ from pycocotools' by ~1e-17). ``'auto'`` runs ``check_parity`` once per
process (``cocoeval_backend.py``); tests/test_cocoeval_backends.py runs it on more cases.
"""
import contextlib
import copy
import io
import json
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

TOLERANCE = 1e-12
# CocoMetric's proposal_nums, and pycocotools' own default
MMDET_MAX_DETS = (100, 300, 1000)
DEFAULT_MAX_DETS = (1, 10, 100)
# CocoMetric's default iou_thrs (the same values as pycocotools' own, computed as mmdet does)
IOU_THRESHOLDS = np.linspace(.5, 0.95, int(np.round((0.95 - .5) / .05)) + 1, endpoint=True)
# (height, width): small, medium and large objects fit
_SIZES = ((96, 128), (200, 150), (240, 320))
_CATEGORIES = (1, 2, 3, 5, 7)  # 5: never detected; 7: detected, never in the ground truth
_UNDETECTED = 5


def _star(rng: np.random.Generator, height: int, width: int, radius: float) -> list:
    cx, cy = rng.uniform(radius, width - radius), rng.uniform(radius, height - radius)
    angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(5, 16))))
    radii = radius * rng.uniform(0.5, 1.0, len(angles))
    return np.round(np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1),
                    2).ravel().tolist()


def _rle(polygon: list, height: int, width: int) -> dict:
    return mask_utils.merge(mask_utils.frPyObjects([polygon], height, width))


def _shifted(polygon: list, rng: np.random.Generator, spread: float) -> list:
    """``polygon`` scaled about its centre by up to ``spread`` and moved by about 2 pixels."""
    points = np.asarray(polygon).reshape(-1, 2)
    centre = points.mean(0)
    points = centre + (points - centre) * rng.uniform(1 - spread, 1 + spread) + \
        rng.normal(0, 2, 2)
    return np.round(points, 2).ravel().tolist()


def parity_case(seed: int = 0, images: int = 16) -> dict:
    """A ground truth dataset dict and its bbox and segm results (``loadRes`` lists, as
    ``CocoMetric.results2json`` writes them; segm results without ``bbox``, as mmdet pops it)."""
    rng = np.random.default_rng(seed)
    dataset = dict(images=[], annotations=[], categories=[
        dict(id=cat, name=f'category {cat}') for cat in _CATEGORIES])
    bbox_results, segm_results = [], []
    for img_id in range(1, images + 1):
        height, width = _SIZES[img_id % len(_SIZES)]
        dataset['images'].append(dict(id=img_id, height=height, width=width,
                                      file_name=f'{img_id}.jpg'))
        # more detections of one category than the smallest maxDets, on a few images
        crowded = img_id % 8 == 2
        shapes = []
        for number in range(0 if img_id % 5 == 1 else int(rng.integers(1, 7))):
            largest = 0.45 * min(height, width)
            radius = largest if number == 0 else float(  # one large object on the large images
                np.exp(rng.uniform(np.log(3), np.log(largest))))
            polygon = _star(rng, height, width, radius)
            rle = _rle(polygon, height, width)
            kind = rng.choice(['polygon', 'polygon', 'rle', 'uncompressed', 'crowd', 'ignore'])
            category = 1 if crowded else int(rng.choice(_CATEGORIES[:4]))
            if kind in ('rle', 'crowd'):
                segmentation = dict(size=rle['size'], counts=rle['counts'].decode())
            elif kind == 'uncompressed':
                segmentation = dict(size=[height, width],
                                    counts=_run_lengths(mask_utils.decode(rle)))
            else:
                segmentation = [polygon]
            annotation = dict(id=len(dataset['annotations']) + 1, image_id=img_id,
                              category_id=category,
                              bbox=[round(v, 2) for v in mask_utils.toBbox(rle).tolist()],
                              area=float(mask_utils.area(rle)), iscrowd=int(kind == 'crowd'),
                              segmentation=segmentation)
            if kind == 'ignore':
                annotation['ignore'] = 1
            dataset['annotations'].append(annotation)
            shapes.append((polygon, category))
        if img_id % 7 == 3:
            continue  # an image without detections
        detections = [(polygon, category) for polygon, category in shapes
                      if rng.random() < 0.8 and category != _UNDETECTED]
        detections = [(_shifted(polygon, rng, 0.15), category) for polygon, category in detections]
        matched = len(detections)
        for _ in range(100 if crowded else int(rng.integers(0, 8))):
            polygon = _star(rng, height, width, float(rng.uniform(3, 0.3 * min(height, width))))
            detections.append((polygon, 1 if crowded else int(rng.choice([1, 2, 3, 7]))))
        for position, (polygon, category) in enumerate(detections):
            rle = _rle(polygon, height, width)
            box = mask_utils.toBbox(rle).tolist()
            if box[2] <= 0 or box[3] <= 0:
                continue
            if crowded:  # the true detections ranked after 100 others: maxDets decides
                score = round(float(rng.uniform(0.01, 0.05) if position < matched
                                    else rng.uniform(0.3, 0.6)), 3)
            else:  # ties, within and across images
                score = float(rng.choice([0.9, 0.75, 0.5, 0.5, 0.3])) if rng.random() < 0.4 \
                    else round(float(rng.uniform(0.05, 1.0)), 3)
            bbox_results.append(dict(image_id=img_id, category_id=category,
                                     bbox=[round(v, 2) for v in box], score=score))
            segm_results.append(dict(image_id=img_id, category_id=category, score=score,
                                     segmentation=dict(size=rle['size'],
                                                       counts=rle['counts'].decode())))
    return dict(gt=dataset, bbox=bbox_results, segm=segm_results)


def _run_lengths(mask: np.ndarray) -> list:
    """Uncompressed COCO RLE counts of a mask (column-major runs, starting with zeros)."""
    flat = np.asfortranarray(mask).ravel(order='F')
    changes = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], changes, [flat.size]])
    counts = np.diff(bounds).tolist()
    return ([0] + counts) if flat.size and flat[0] else counts


def coco_from_dict(dataset: dict) -> COCO:
    """A pycocotools ``COCO`` of an in-memory dataset (its index message not printed)."""
    coco = COCO()
    coco.dataset = copy.deepcopy(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


@dataclass
class Outcome:
    """What ``CocoMetric`` takes from one evaluation."""
    stats: np.ndarray
    precision: np.ndarray
    printed: str

    def reported(self) -> list:
        """The statistics as ``CocoMetric`` reports them (3 decimals)."""
        return [float(f'{round(value, 3)}') for value in self.stats]

    def per_category(self) -> list:
        """Each category's AP as ``CocoMetric(classwise=True)`` logs it (all areas, last
        maxDets, rounded to 3; nan where it has no ground truth)."""
        values = []
        for idx in range(self.precision.shape[2]):
            precision = self.precision[:, :, idx, 0, -1]
            precision = precision[precision > -1]
            values.append(round(float(np.mean(precision)), 3) if precision.size else 'nan')
        return values


def load_results(evaluator: type, coco: COCO, results):
    """What ``coco.loadRes(results)`` is for ``evaluator``: its own ``load_results`` where it
    has one (``RLECocoMetric.compute_metrics`` puts this in place of ``loadRes`` for the call),
    else pycocotools' ``loadRes``."""
    load = getattr(evaluator, 'load_results', None)
    return type(coco).loadRes(coco, results) if load is None else load(coco, results)


def evaluate(evaluator: type, gt: COCO, results: list, iou_type: str,
             max_dets: Sequence[int] = MMDET_MAX_DETS, img_ids: Optional[Sequence[int]] = None,
             cat_ids: Optional[Sequence[int]] = None, use_cats: bool = True) -> Outcome:
    """``evaluator`` run as ``CocoMetric.compute_metrics`` runs ``COCOeval``."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        dt = load_results(evaluator, gt, copy.deepcopy(results))
        printed.seek(0)
        printed.truncate()
        coco_eval = evaluator(gt, dt, iou_type)
        coco_eval.params.catIds = list(cat_ids) if cat_ids is not None else gt.getCatIds()
        coco_eval.params.imgIds = list(img_ids) if img_ids is not None else gt.getImgIds()
        coco_eval.params.maxDets = list(max_dets)
        coco_eval.params.iouThrs = IOU_THRESHOLDS
        if not use_cats:
            coco_eval.params.useCats = 0
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return Outcome(np.asarray(coco_eval.stats, dtype=np.float64),
                   np.asarray(coco_eval.eval['precision'], dtype=np.float64),
                   _without_timings(printed.getvalue()))


def _without_timings(text: str) -> str:
    """The summary table, without the progress and timing lines an evaluator may print."""
    return '\n'.join(line for line in text.splitlines()
                     if line.startswith(' Average '))


def disagreement(reference: Outcome, got: Outcome, name: str = 'pycocotools') -> Optional[str]:
    """Why ``got`` is not what ``name`` reported (``reference``), or None when it is."""
    if got.printed != reference.printed:
        return f'its printed summary differs:\n{got.printed}\n{name}:\n{reference.printed}'
    if got.stats.shape != reference.stats.shape or got.reported() != reference.reported():
        return f'its statistics {got.reported()} are not {name}\'s {reference.reported()}'
    if got.precision.shape != reference.precision.shape:
        return (f'its precision table is {got.precision.shape}, {name}\'s '
                f'{reference.precision.shape}')
    if got.per_category() != reference.per_category():
        return (f'its per-category AP {got.per_category()} is not {name}\'s '
                f'{reference.per_category()}')
    worst = max(float(np.max(np.abs(got.stats - reference.stats), initial=0.0)),
                float(np.max(np.abs(got.precision - reference.precision), initial=0.0)))
    if not worst <= TOLERANCE:
        return f'its unrounded numbers differ from {name}\'s by up to {worst:.3g}'
    return None


# (iou_type, evaluate's keyword arguments): the settings CocoMetric uses, and pycocotools' own
CHECKS = (('bbox', dict()), ('segm', dict()), ('segm', dict(max_dets=DEFAULT_MAX_DETS)),
          ('bbox', dict(use_cats=False)))


def check_parity(evaluator: type, case: Optional[dict] = None,
                 checks: Sequence[tuple] = CHECKS) -> Optional[str]:
    """None when ``evaluator`` agrees with pycocotools on ``case`` (``parity_case()``) under
    every one of ``checks``; else what it got wrong, or the error it raised."""
    from pycocotools.cocoeval import COCOeval

    case = parity_case() if case is None else case
    gt = coco_from_dict(case['gt'])
    for iou_type, kwargs in checks:
        reference = evaluate(COCOeval, gt, case[iou_type], iou_type, **kwargs)
        try:
            got = evaluate(evaluator, gt, case[iou_type], iou_type, **kwargs)
        except Exception as err:  # noqa: BLE001  a backend that fails is a backend not used
            return f'{iou_type} {kwargs or "(CocoMetric settings)"}: {type(err).__name__}: {err}'
        problem = disagreement(reference, got)
        if problem is not None:
            return f'{iou_type} {kwargs or "(CocoMetric settings)"}: {problem}'
    return None


# LVIS: the lvis package's LVISEval (mmdet's LVISMetric) is the reference.

def lvis_parity_case(seed: int = 0, images: int = 16) -> dict:
    """``parity_case`` as an LVIS v1 set: no crowd regions or ``ignore`` flags (LVIS has none),
    categories of each frequency, images with negative and not-exhaustive categories (the
    federated rules)."""
    case = parity_case(seed, images)
    gt = case['gt']
    annotated: dict = {}
    for annotation in gt['annotations']:
        annotated.setdefault(annotation['image_id'], set()).add(annotation['category_id'])
    images_ = []
    for position, image in enumerate(gt['images']):
        present = sorted(annotated.get(image['id'], set()))
        absent = [c['id'] for c in gt['categories'] if c['id'] not in present]
        images_.append({**image, 'neg_category_ids': absent[:position % 3],
                        'not_exhaustive_category_ids': present[:int(position % 4 == 1)]})
    annotations = [{key: value for key, value in a.items() if key != 'ignore'}
                   for a in gt['annotations'] if not a['iscrowd']]
    categories = [{**c, 'frequency': 'rcf'[i % 3], 'synset': f'category_{c["id"]}.n.01'}
                  for i, c in enumerate(gt['categories'])]
    # mmdet's LVISMetric gives segm results with their boxes (lvis then takes the box's area)
    boxed = [{**segm, 'bbox': box['bbox']} for box, segm in zip(case['bbox'], case['segm'])]
    return dict(gt=dict(images=images_, annotations=annotations, categories=categories),
                bbox=case['bbox'], segm=case['segm'], segm_with_boxes=boxed)


@contextlib.contextmanager
def _numpy_float_alias():
    """lvis 0.5.3 (PyPI's latest) accumulates with ``np.float``, which numpy 1.24 removed: the
    alias, for the reference's run only, where numpy lacks it (removed again after)."""
    added = not hasattr(np, 'float')
    if added:
        np.float = float
    try:
        yield
    finally:
        if added:
            del np.float


def evaluate_lvis(evaluator: type, gt_path: str, results: list, iou_type: str) -> Outcome:
    """``evaluator`` run as mmdet's ``LVISMetric.compute_metrics`` runs ``LVISEval``
    (``LVISResults`` of the results, 300 a image)."""
    from lvis import LVIS, LVISResults

    with contextlib.redirect_stdout(io.StringIO()) as printed, warnings.catch_warnings():
        warnings.simplefilter('ignore')
        gt = LVIS(gt_path)
        lvis_eval = evaluator(gt, LVISResults(gt, copy.deepcopy(results)), iou_type)
        lvis_eval.evaluate()
        lvis_eval.accumulate()
        lvis_eval.summarize()
        printed.seek(0)
        printed.truncate()
        lvis_eval.print_results()
    results = lvis_eval.get_results()
    precision = np.asarray(lvis_eval.eval['precision'], dtype=np.float64)
    return Outcome(np.asarray([results[key] for key in sorted(results)], dtype=np.float64),
                   precision.reshape(precision.shape[:4] + (1, )), printed.getvalue())


def check_lvis_parity(evaluator: type, case: Optional[dict] = None) -> Optional[str]:
    """None when ``evaluator`` (an ``LVISEval``) agrees with the lvis package's on ``case``
    (``lvis_parity_case()``): bbox, and segm results without and with their boxes; else what it
    got wrong, or the error it raised."""
    import tempfile

    from lvis import LVISEval

    case = lvis_parity_case() if case is None else case
    with tempfile.TemporaryDirectory() as folder:
        gt_path = f'{folder}/lvis.json'
        with open(gt_path, 'w') as f:
            json.dump(case['gt'], f)
        for results in ('bbox', 'segm', 'segm_with_boxes'):
            iou_type = results[:4]
            with _numpy_float_alias():
                reference = evaluate_lvis(LVISEval, gt_path, case[results], iou_type)
            try:
                got = evaluate_lvis(evaluator, gt_path, case[results], iou_type)
            except Exception as err:  # noqa: BLE001  a backend that fails is a backend not used
                return f'LVIS {results}: {type(err).__name__}: {err}'
            problem = disagreement(reference, got, 'lvis')
            if problem is not None:
                return f'LVIS {results}: {problem}'
    return None
