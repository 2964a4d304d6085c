"""Which evaluator ``RLECocoMetric`` (``RLELVISMetric``) runs: pycocotools' (the lvis package's),
as mmdet's metrics do, or a faster package that reports the same numbers.

Each faster backend is a ``COCOeval`` to mmdet: constructed with mmdet's ``COCO`` objects, its
``params`` set as ``CocoMetric`` sets them, then ``evaluate``, ``accumulate``, ``summarize``. The
package does the matching and the accumulation (the work: per-image IoUs, greedy matching,
precision/recall tables); the summary is pycocotools' own code run on its tables, so the printed
table and ``stats`` follow pycocotools' rules whatever the package's own summary does
(faster-coco-eval's computes ``stats[0]`` at the largest ``maxDets``, where pycocotools takes
100, and prints two more lines). What each adapter has to do for its package is said on it.

``'auto'`` (the default) takes the fastest installed backend (``FASTEST_FIRST``, measured in
benchmarks/results/cocoeval_backends.md and cocoeval_hotcoco_loadres.md) that agrees with
pycocotools on the built-in parity check (``cocoeval_parity.check_parity``, under a second, once
per process), else pycocotools;
the log says which and why each faster one was passed over. A named backend is used as asked
(tests/test_cocoeval_backends.py holds each to the full parity suite).
"""
import contextlib
import datetime
import functools
import gc
import importlib
import importlib.util
import operator
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from mmengine.logging import print_log
from pycocotools.cocoeval import COCOeval, Params

from .cocoeval_parity import check_lvis_parity, check_parity


class TablesFromPackage:
    """A ``COCOeval`` whose ``evaluate`` and ``accumulate`` are another package's: ``tables``
    returns its precision, recall and scores tables (pycocotools' shapes) for ``params``; the
    rest (params, what is printed, ``eval``, ``summarize``) is pycocotools'."""

    package = ''

    def __init__(self, cocoGt=None, cocoDt=None, iouType: str = 'segm') -> None:  # noqa: N803
        self.cocoGt, self.cocoDt = cocoGt, cocoDt
        self.params = Params(iouType=iouType)
        self.eval: dict = {}
        self.stats: list = []
        self._tables: Optional[tuple] = None
        if cocoGt is not None:
            self.params.imgIds = sorted(cocoGt.getImgIds())
            self.params.catIds = sorted(cocoGt.getCatIds())

    def evaluate(self) -> None:
        start = time.time()
        print('Running per image evaluation...')
        params = self.params
        print(f'Evaluate annotation type *{params.iouType}* ({self.package})')
        if params.iouType not in ('bbox', 'segm'):
            raise NotImplementedError(f'{type(self).__name__}: iouType {params.iouType!r}')
        # what pycocotools' evaluate does to the params
        params.imgIds = [int(i) for i in np.unique(params.imgIds)]
        if params.useCats:
            params.catIds = [int(c) for c in np.unique(params.catIds)]
        params.maxDets = sorted(int(m) for m in params.maxDets)
        with _collection_paused():  # the packages' Python objects by the hundred thousand
            self._tables = self.tables(params)
        print(f'DONE (t={time.time() - start:0.2f}s).')

    def accumulate(self, p=None) -> None:
        if p is not None and p is not self.params:
            raise NotImplementedError(f'{type(self).__name__}.accumulate takes no other params')
        if self._tables is None:
            print('Please run evaluate() first')
            return
        params = self.params
        if not params.useCats:  # as pycocotools' accumulate does
            params.catIds = [-1]
        precision, recall, scores = (np.asarray(table, dtype=np.float64)
                                     for table in self._tables)
        self.eval = dict(params=params, counts=list(precision.shape),
                         date=datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S'),
                         precision=precision, recall=recall, scores=scores)

    summarize = COCOeval.summarize

    def tables(self, params: Params) -> tuple:
        raise NotImplementedError

    def _set_params(self, package_params, params: Params, convert: Callable = list) -> None:
        """Copies pycocotools' ``params`` into the package's."""
        package_params.imgIds = list(params.imgIds)
        package_params.catIds = list(params.catIds)
        package_params.maxDets = list(params.maxDets)
        package_params.iouThrs = convert(params.iouThrs)
        package_params.recThrs = convert(params.recThrs)
        package_params.areaRng = [[float(lo), float(hi)] for lo, hi in params.areaRng]
        package_params.areaRngLbl = list(params.areaRngLbl)
        package_params.useCats = int(bool(params.useCats))


@contextlib.contextmanager
def _collection_paused():
    """Python's cyclic garbage collector off while a package evaluates (the annotation dicts it
    is given, or makes, by the hundred thousand), on again after if it was on. Why: each batch
    of new objects starts a collection that walks every live one, the datasets included, which
    was most of the time of converting segm results for hotcoco (the hotcoco rows of
    benchmarks/results/cocoeval_native.md against cocoeval_backends.md). What is made here holds
    no cycle."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_FLOAT_KEYS = ('area', 'score')
_INT_KEYS = ('id', 'image_id', 'category_id', 'iscrowd')


def _plain_annotations(annotations: list) -> list:
    """Copies of ``annotations`` with Python numbers and str RLE counts (``loadRes`` leaves
    numpy boxes and areas; pycocotools' segm evaluation rewrites ground truth counts to bytes),
    what the Rust packages read. The boxes are converted for the whole list at once (numpy's
    arrays and scalars one by one cost several times as much)."""
    plain = [dict(annotation) for annotation in annotations]
    boxes = [annotation['bbox'] for annotation in plain if 'bbox' in annotation]
    try:  # one [N, 4] array where every annotation has a box of 4
        together = np.asarray(boxes, dtype=np.float64) if len(boxes) == len(plain) else None
    except ValueError:
        together = None
    if together is not None and together.shape == (len(plain), 4):
        for annotation, box in zip(plain, together.tolist()):
            annotation['bbox'] = box
    else:
        for annotation in plain:
            if 'bbox' in annotation:
                annotation['bbox'] = [float(v) for v in annotation['bbox']]
    for key, kind in [(key, float) for key in _FLOAT_KEYS] + [(key, int) for key in _INT_KEYS]:
        for annotation in plain:
            value = annotation.get(key)
            if value is not None and type(value) is not kind:
                annotation[key] = kind(value)
    for annotation in plain:
        segmentation = annotation.get('segmentation')
        if isinstance(segmentation, dict) and isinstance(segmentation.get('counts'), bytes):
            annotation['segmentation'] = {**segmentation,
                                          'counts': segmentation['counts'].decode()}
    return plain


# hotcoco's copy of each ground truth in use: CocoMetric evaluates bbox then segm on one
# ground truth, at every validation. An entry lives as long as its ground truth, and holds while
# that ground truth's dataset and index are the objects it was made from (pycocotools' and lvis'
# createIndex make a new index, as their own evaluations would then see other annotations).
_HOTCOCO_GROUND_TRUTHS: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


def _hotcoco_ground_truth(coco, make: Callable):
    """``make(_plain_dataset(coco))`` (hotcoco's ``COCO`` or ``LVIS`` of ``coco``), made once
    for as long as ``coco`` is the same ground truth."""
    made_from = (coco.dataset, getattr(coco, 'anns', None), make)
    entry = _HOTCOCO_GROUND_TRUTHS.get(coco)
    if entry is None or any(a is not b for a, b in zip(entry[0], made_from)):
        entry = (made_from, make(_plain_dataset(coco)))
        _HOTCOCO_GROUND_TRUTHS[coco] = entry
    return entry[1]


def _plain_dataset(coco, annotations: Optional[list] = None) -> dict:
    dataset = coco.dataset
    return dict(images=list(dataset['images']), categories=list(dataset['categories']),
                annotations=_plain_annotations(dataset.get('annotations', [])
                                               if annotations is None else annotations))


class FasterCocoEval(TablesFromPackage):
    """faster-coco-eval (C++): takes pycocotools' ``COCO`` objects and params as they are."""

    package = 'faster-coco-eval'

    def tables(self, params: Params) -> tuple:
        from faster_coco_eval import COCOeval_faster

        evaluator = COCOeval_faster(self.cocoGt, self.cocoDt, params.iouType,
                                    print_function=lambda *args, **kwargs: None)
        self._set_params(evaluator.params, params, convert=lambda thresholds: thresholds)
        evaluator.evaluate()
        evaluator.accumulate()
        return tuple(evaluator.eval[key] for key in ('precision', 'recall', 'scores'))


class RawResults:
    """The result list ``CocoMetric`` gave ``loadRes``, as it was: what ``load_results`` hands a
    package that makes its own results object of it (``cocoDt`` of its evaluator)."""

    def __init__(self, annotations: list) -> None:
        self.annotations = annotations


# The keys of the results CocoMetric loads: its bbox (and proposal) results, and its segm results
# once it has popped their boxes. Others go through pycocotools' loadRes.
_RAW_RESULT_KEYS = ({'image_id', 'category_id', 'bbox', 'score'},
                    {'image_id', 'category_id', 'segmentation', 'score'})


class HotcocoEval(TablesFromPackage):
    """hotcoco (Rust): it takes only its own ``COCO`` objects (mmdet's are refused, and mmdet's
    subclassing of ``COCO`` cannot be applied to hotcoco's), so the ground truth is built from
    its dataset (once while it is the same: ``_hotcoco_ground_truth``), and the results by
    hotcoco's own ``loadRes`` from the list ``CocoMetric`` gave
    (``load_results``: pycocotools' ``loadRes``, the longer half of the work, is not run; the
    same rules, held by the parity suite); its warnings for non-default ``maxDets`` and
    ``useCats=0`` are not raised. It mutates nothing."""

    package = 'hotcoco'

    @staticmethod
    def load_results(coco, results):
        """``coco.loadRes(results)`` (pycocotools') for CocoMetric's result lists, not yet made:
        the list checked as pycocotools checks it (an empty list is its IndexError, which
        ``CocoMetric`` reports as empty results; an image not in ``coco`` its assertion);
        anything else through pycocotools' ``loadRes``."""
        if not isinstance(results, list) or results and set(results[0]) not in _RAW_RESULT_KEYS:
            return type(coco).loadRes(coco, results)
        print('Loading and preparing results...')
        if not results:
            raise IndexError('list index out of range')  # pycocotools' loadRes' own
        if not set(map(operator.itemgetter('image_id'), results)) <= set(coco.getImgIds()):
            raise AssertionError('Results do not correspond to current coco set')
        return RawResults(results)

    def tables(self, params: Params) -> tuple:
        import hotcoco

        gt = _hotcoco_ground_truth(self.cocoGt, hotcoco.COCO)
        if isinstance(self.cocoDt, RawResults):
            dt = gt.loadRes(self.cocoDt.annotations)
        else:
            dt = hotcoco.COCO(_plain_dataset(self.cocoGt,
                                             self.cocoDt.dataset.get('annotations', [])))
        evaluator = hotcoco.COCOeval(gt, dt, params.iouType)
        self._set_params(evaluator.params, params,
                         convert=lambda thresholds: [float(t) for t in thresholds])
        evaluator.params.useCats = bool(params.useCats)
        with warnings.catch_warnings():
            warnings.filterwarnings('ignore', message='hotcoco:')
            evaluator.evaluate()
            evaluator.accumulate()
        return tuple(evaluator.eval[key] for key in ('precision', 'recall', 'scores'))


class UltrafastEval(TablesFromPackage):
    """ultrafast-pycocotools (Rust): takes pycocotools' ``COCO`` objects once they have the
    ``_compact`` attribute its own ``COCO`` sets (None: it then reads them as pycocotools
    does). It mutates nothing else."""

    package = 'ultrafast-pycocotools'

    def tables(self, params: Params) -> tuple:
        from ultrafast_pycocotools import COCOeval as UltrafastCOCOeval

        for coco in (self.cocoGt, self.cocoDt):
            if not hasattr(coco, '_compact'):
                coco._compact = None
        evaluator = UltrafastCOCOeval(self.cocoGt, self.cocoDt, params.iouType,
                                      print_function=lambda *args, **kwargs: None)
        self._set_params(evaluator.params, params, convert=lambda thresholds: thresholds)
        evaluator.params.useCats = params.useCats
        evaluator.evaluate()
        evaluator.accumulate()
        return tuple(evaluator.eval[key] for key in ('precision', 'recall', 'scores'))


class _DatasetView:
    """What vernier reads of a ``COCO``: ``dataset``, ``getImgIds``, ``getCatIds``."""

    def __init__(self, dataset: dict) -> None:
        self.dataset = dataset

    def getImgIds(self) -> list:  # noqa: N802
        return [int(image['id']) for image in self.dataset['images']]

    def getCatIds(self) -> list:  # noqa: N802
        return [int(category['id']) for category in self.dataset['categories']]


class VernierEval(TablesFromPackage):
    """vernier (Rust): reads plain datasets (``loadRes``' numpy boxes are refused, so copies
    with lists); refuses an ``imgIds`` subset (the datasets are cut to it here) and a changed
    ``areaRng`` (an error); with ``useCats=0`` it breaks score ties in file order where
    pycocotools goes category by category in ``catIds`` order, so the annotations are given in
    that order."""

    package = 'vernier'

    def tables(self, params: Params) -> tuple:
        import vernier

        images = [image for image in self.cocoGt.dataset['images']
                  if int(image['id']) in set(params.imgIds)]
        kept = {int(image['id']) for image in images}

        def annotations(coco) -> list:
            chosen = [a for a in coco.dataset.get('annotations', []) if a['image_id'] in kept]
            if not params.useCats:
                rank = {int(category): i for i, category in enumerate(params.catIds)}
                chosen = sorted((a for a in chosen if a['category_id'] in rank),
                                key=lambda a: rank[a['category_id']])
            return _plain_annotations(chosen)

        def view(coco) -> _DatasetView:
            return _DatasetView(dict(images=images,
                                     categories=list(self.cocoGt.dataset['categories']),
                                     annotations=annotations(coco)))

        evaluator = vernier.COCOeval(view(self.cocoGt), view(self.cocoDt), params.iouType)
        evaluator.params.catIds = list(params.catIds)
        evaluator.params.maxDets = list(params.maxDets)
        evaluator.params.iouThrs = params.iouThrs
        evaluator.params.recThrs = params.recThrs
        evaluator.params.useCats = int(bool(params.useCats))
        evaluator.evaluate()
        evaluator.accumulate()
        return tuple(evaluator.eval[key] for key in ('precision', 'recall', 'scores'))


@dataclass(frozen=True)
class Backend:
    """A COCO evaluator package: what pip installs, what is imported, its ``COCOeval``."""
    name: str
    package: str
    module: str
    evaluator: type

    def installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


BACKENDS = {backend.name: backend for backend in (
    Backend('pycocotools', 'pycocotools', 'pycocotools', COCOeval),
    Backend('faster_coco_eval', 'faster-coco-eval', 'faster_coco_eval', FasterCocoEval),
    Backend('hotcoco', 'hotcoco', 'hotcoco', HotcocoEval),
    Backend('ultrafast_pycocotools', 'ultrafast-pycocotools', 'ultrafast_pycocotools',
            UltrafastEval),
    Backend('vernier', 'vernier', 'vernier', VernierEval),
)}
# 'auto' tries these in this order: fastest first, loadRes and evaluation together, as CocoMetric
# runs them (benchmarks/results/cocoeval_hotcoco_loadres.md for the first two, since hotcoco
# makes the results itself; cocoeval_backends.md for the rest)
FASTEST_FIRST = ('hotcoco', 'ultrafast_pycocotools', 'vernier', 'faster_coco_eval')
CHOICES = ('auto', *BACKENDS)


# LVIS: the lvis package's LVISEval is mmdet's (and the reference); hotcoco has one of its own.

@functools.lru_cache(maxsize=None)
def hotcoco_lvis_eval() -> type:
    """An ``lvis.LVISEval`` whose ``evaluate`` and ``accumulate`` are hotcoco's ``LVISEval``
    (on hotcoco objects built from the datasets, the results as they were given, ``_as_given``);
    its summary, results and printed table are the lvis package's own code (which runs on
    numpy 2: only lvis' ``accumulate`` uses the removed ``np.float``). The params are lvis', so
    the camelCase names mmdet sets on them (``imgIds``, and ``useCats``/``maxDets`` for
    proposals) are ignored as lvis ignores them."""
    from lvis import LVISEval

    class HotcocoLVISEval(LVISEval):
        package = 'hotcoco'

        def evaluate(self) -> None:
            import hotcoco

            self.freq_groups = self._prepare_freq_group()
            params = self.params
            params.img_ids = [int(i) for i in np.unique(params.img_ids)]
            with _collection_paused():
                gt = _hotcoco_ground_truth(self.lvis_gt, hotcoco.LVIS)
                dt = hotcoco.LVISResults(
                    gt, _as_given(self.lvis_dt.dataset.get('annotations', []), params.iou_type),
                    max_dets=params.max_dets)
            evaluator = hotcoco.LVISEval(gt, dt, params.iou_type)
            evaluator.params.img_ids = list(params.img_ids)
            evaluator.params.cat_ids = list(params.cat_ids)
            evaluator.params.iou_thrs = [float(t) for t in params.iou_thrs]
            evaluator.params.max_dets = [int(params.max_dets)]
            evaluator.params.use_cats = bool(params.use_cats)
            evaluator.evaluate()
            evaluator.accumulate()
            self._tables = tuple(np.asarray(evaluator.eval[key], dtype=np.float64)
                                 for key in ('precision', 'recall'))
            self.eval_imgs = [None]  # lvis' accumulate warns without it

        def accumulate(self) -> None:
            precision, recall = self._tables  # (T, R, K, A, 1) and (T, K, A, 1)
            self.eval = dict(params=self.params, counts=list(precision.shape[:4]),
                             date=datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S'),
                             precision=precision.reshape(precision.shape[:4]),
                             recall=recall.reshape(recall.shape[:3]))

    return HotcocoLVISEval


def _as_given(annotations: list, iou_type: str) -> list:
    """The results as they were before lvis' ``LVISResults`` added their ``id``, ``area`` and
    (segm) ``bbox``, which hotcoco's ``LVISResults`` makes again by lvis' rule: a result with a
    box takes the box's area, a segm result without one its mask's. A segm result whose area is
    its box's is given with its box (either it had one, or its mask's area is its box's)."""
    given = []
    for plain in _plain_annotations(annotations):
        area = plain.pop('area', None)
        plain.pop('id', None)
        if iou_type == 'segm':
            _, _, width, height = plain['bbox']
            if area != width * height:
                del plain['bbox']
        given.append(plain)
    return given


@dataclass(frozen=True)
class LVISBackend:
    """An LVIS evaluator package and its ``LVISEval`` (made on first use: lvis is optional)."""
    name: str
    package: str
    module: str
    make: Callable[[], type]

    def installed(self) -> bool:
        return all(importlib.util.find_spec(module) is not None
                   for module in (self.module, 'lvis'))

    @property
    def evaluator(self) -> type:
        return self.make()


def _lvis_eval() -> type:
    from lvis import LVISEval
    return LVISEval


LVIS_BACKENDS = {backend.name: backend for backend in (
    LVISBackend('lvis', 'lvis', 'lvis', _lvis_eval),
    LVISBackend('hotcoco', 'hotcoco', 'hotcoco', hotcoco_lvis_eval),
)}
LVIS_CHOICES = ('auto', *LVIS_BACKENDS)


@functools.lru_cache(maxsize=None)
def auto_lvis_backend(candidates: Optional[tuple] = None) -> LVISBackend:
    """As ``auto_backend``, for ``RLELVISMetric``: the first of ``candidates`` (default:
    hotcoco) installed and agreeing with the lvis package's ``LVISEval`` on
    ``check_lvis_parity``, else the lvis package's."""
    candidates = (LVIS_BACKENDS['hotcoco'], ) if candidates is None else candidates
    return _first_that_agrees(candidates, LVIS_BACKENDS['lvis'], check_lvis_parity, 'LVISEval')


def check_backend(backend: str, use_mp_eval: bool) -> None:
    """Raises for an unknown backend, a missing package, or a combination mmdet would ignore."""
    if backend not in CHOICES:
        raise ValueError(f'cocoeval_backend must be one of {CHOICES}, got {backend!r}')
    if backend in ('auto', 'pycocotools'):
        return
    if use_mp_eval:
        raise ValueError(f"use_mp_eval=True runs mmdet's multi-process COCOevalMP, which "
                         f"cocoeval_backend={backend!r} would not replace: choose one")
    if not BACKENDS[backend].installed():
        raise ImportError(f'cocoeval_backend={backend!r} needs the {BACKENDS[backend].package} '
                          f'package (pip install {BACKENDS[backend].package})')


@functools.lru_cache(maxsize=None)
def auto_backend(candidates: Optional[tuple] = None) -> 'Backend':
    """The first of ``candidates`` (``Backend``s; default: ``FASTEST_FIRST``) that is installed
    and agrees with pycocotools on the built-in parity check, else pycocotools; logged once per
    process, with why each earlier one was not taken."""
    if candidates is None:
        candidates = tuple(BACKENDS[name] for name in FASTEST_FIRST)
    return _first_that_agrees(candidates, BACKENDS['pycocotools'], check_parity, 'COCOeval')


def _first_that_agrees(candidates: tuple, reference, check: Callable, kind: str):
    passed_over = []
    chosen = reference
    for backend in candidates:
        if not backend.installed():
            passed_over.append(f'{backend.name}: not installed')
            continue
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            problem = check(backend.evaluator)
        if problem is None:
            chosen = backend
            break
        passed_over.append(f'{backend.name}: disagrees with {reference.name} ({problem})')
    why = (f'it agrees with {reference.name} on the built-in parity check and is the fastest of '
           'those installed' if chosen is not reference else
           f'no faster {kind} is installed and agrees')
    print_log(f"cocoeval_backend='auto': evaluating with {chosen.name} ({why})"
              + ''.join(f'; passed over {line}' for line in passed_over),
              logger='current')
    return chosen


def resolve_backend(backend: str, use_mp_eval: bool) -> Backend:
    """The backend that evaluates: ``backend``, or what 'auto' chose: pycocotools where mmdet's
    multi-process evaluator was asked for, or where this mmdet reaches its evaluator otherwise
    than through ``coco_metric.COCOeval`` (a fork)."""
    if backend != 'auto' or use_mp_eval:
        return BACKENDS['pycocotools' if backend == 'auto' else backend]
    if not hasattr(importlib.import_module('mmdet.evaluation.metrics.coco_metric'), 'COCOeval'):
        _log_once("cocoeval_backend='auto': this mmdet's coco_metric has no COCOeval to replace; "
                  'evaluating with its own')
        return BACKENDS['pycocotools']
    return auto_backend()


def resolve_lvis_backend(backend: str) -> LVISBackend:
    """``RLELVISMetric``'s evaluator: ``backend``, or what 'auto' chose (the lvis package's where
    this mmdet reaches its evaluator otherwise than through ``lvis_metric.LVISEval``)."""
    if backend not in LVIS_CHOICES:
        raise ValueError(f'cocoeval_backend must be one of {LVIS_CHOICES}, got {backend!r}')
    if backend != 'auto':
        if not LVIS_BACKENDS[backend].installed():
            raise ImportError(f'cocoeval_backend={backend!r} needs the lvis and '
                              f'{LVIS_BACKENDS[backend].package} packages')
        return LVIS_BACKENDS[backend]
    if getattr(importlib.import_module('mmdet.evaluation.metrics.lvis_metric'), 'LVISEval',
               None) is None:
        _log_once("cocoeval_backend='auto': this mmdet's lvis_metric has no LVISEval to "
                  'replace; evaluating with its own')
        return LVIS_BACKENDS['lvis']
    return auto_lvis_backend()


@functools.lru_cache(maxsize=None)
def _log_once(message: str) -> None:
    print_log(message, logger='current')


def evaluator_replacements(backend: Backend) -> dict:
    """The ``coco_metric`` globals that make ``CocoMetric`` evaluate with ``backend``."""
    return {} if backend.evaluator is COCOeval else {'COCOeval': backend.evaluator}
