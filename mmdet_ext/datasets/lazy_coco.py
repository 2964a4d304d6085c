"""COCO instance segmentation served from a memory-mapped annotation store."""
import logging
import os.path as osp
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch
from mmdet.datasets import BaseDetDataset, CocoDataset
from mmdet.datasets.transforms import PackDetInputs
from mmengine.logging import print_log

from .._compat import dataset_fully_initialized, dataset_indices, mark_dataset_fully_initialized
from ..io import DEFAULT_MAX_PIXELS
from ..moved_settings import warn_once
from ..registry import DATASETS
from ..transforms.fused_loading import PENDING_WARP_KEY, NativeLoadResizeFlip
from ..transforms.loading import NativeLoadImageFromFile
from .annotation_store import (MISSING_EXAMPLE, MISSING_IMAGES, PROBLEMS_SUFFIX,
                               VALIDATION_COUNTS, AnnotationStore, open_store)
from .bad_samples import BadSampleHandler, log_dir
from .batched_fetch import BatchedFetcher, batch_engine_for
from .coco_records import instance_mask, kept_instances
from .inflight import InflightRecord
from .shared_instance_tensors import share_instance_tensors
from .validation import (MAX_MISSING_FRACTION, DataValidationError, MissingImagesError,
                         missing_images_message, nothing_left_message, read_problems,
                         resolve_policy)
from .wrapper_fetch import load_batch


# The loaders that take the dataset's max_pixels.
NATIVE_LOADERS = (NativeLoadImageFromFile, NativeLoadResizeFlip)


@DATASETS.register_module()
class LazyCocoDataset(BaseDetDataset):
    """Drop-in for mmdet's ``CocoDataset`` whose annotations live in a shared, read-only store.

    Same arguments and the same ``data_info`` (``img_path``, ``img_id``, ``seg_map_path``,
    ``height``, ``width``, ``instances`` with ``bbox``, ``bbox_label``, ``ignore_flag``, ``mask``),
    image order, filtering and label mapping as ``CocoDataset``, so mmdet's transforms and
    ``CocoMetric`` work unchanged. Differences, and why:

    - Copy-safe by construction: every ``get_data_info`` call builds new containers from the
      store, so whatever a pipeline or collate does to a sample (mutate lists, convert to tensors
      in place, delete keys) cannot change what the next epoch sees.
    - No per-sample Python objects at rest and no per-rank copy: see ``AnnotationStore``.
      ``serialize_data`` is accepted and ignored (the store already is the serialized form).
    - Instances with ``"mask_file"`` (a per-instance PNG path relative to ``data_root``) get
      ``mask=dict(mask_file=<path>)``; ``LoadLazyAnnotations`` reads it when the sample is used.

    Bad data (see ``validation.py`` and ``bad_samples.py``):

    - ``validate`` (on by default) checks the json and the image/mask file headers when the
      store is built and stores the cleaned data per ``DEFAULT_POLICY`` (problem kind -> action),
      updated by ``validate`` where it is a dict of such overrides; problems found are reported
      in ``<store>.problems.jsonl``. In
      ``test_mode`` nothing is dropped and nothing fails (every action becomes ``'report'``):
      ``CocoMetric`` evaluates against the original json, so the evaluated images must stay the
      json's (only records the store cannot hold, such as a box that is not numbers, are left
      out). Ids need not be integers: ``img_id`` is the json's id, string or not.
    - Missing image files are kept by default, as ``CocoDataset`` keeps them (it never opens
      images at init): loading one raises an error that is also a ``FileNotFoundError``. When
      more than ``MAX_MISSING_FRACTION`` of the images were missing at validation, the first
      missing one loaded raises ``MissingImagesError`` naming the image prefix and a missing path,
      whatever ``on_bad_sample`` says (a wrong ``data_prefix`` is not a few bad samples).
    - Training on an empty dataset (no images in the json, or none left after validation or
      ``filter_cfg``) is a ``DataValidationError`` naming the json and why, not mmengine's
      ``ZeroDivisionError`` in the sampler.
    - ``on_bad_sample`` decides what an exception while loading a sample becomes: ``'raise'`` a
      ``BadSampleError`` naming the sample, image id, file and cause; ``'skip'`` (training only;
      mmengine refuses a None sample in ``test_mode``) logs it once, appends it to
      ``bad_samples.jsonl`` in ``work_dir`` (default: the current logger's directory) and loads
      another sample, until more than ``max_bad_fraction`` of the samples tried were bad.
    - Every process keeps ``inflight_<pid>.txt`` in ``work_dir`` naming the sample it is loading,
      so a worker killed by a signal can be named (``dead_worker_samples``, used by
      ``tools/train.py``).

    Args:
        store_cache_dir: where to cache the store; default next to ``ann_file`` (else
            ~/.cache/mmdet_ext/stores). Stores of earlier contents of the json are deleted once
            no process has them open; no lock or empty files are left (``annotation_store.py``).
        validate: validate the json and its files when building the store: True (the
            actions of ``DEFAULT_POLICY``), a dict overriding some of them (problem kind ->
            action, e.g. ``dict(image_missing='drop_image')``), or False.
        bad_data_policy: the former home of ``validate``'s dict; still taken, with a warning
            once.
        max_pixels: images and RLEs declaring more pixels are invalid (decompression bombs):
            refused when validating and when decoding. The one value: the pipeline's native
            loaders (``NativeLoadImageFromFile``, ``NativeLoadResizeFlip``) take it; one given
            another value of its own is an error naming both.
        on_bad_sample: ``'raise'`` or ``'skip'``.
        max_bad_fraction: under ``'skip'``, the fraction of bad samples that stops the run.
        work_dir: where ``bad_samples.jsonl`` and ``inflight_<pid>.txt`` go; default the current
            mmengine logger's directory (``<work_dir>/<timestamp>`` under a Runner), else none.
        batched_fetch: let the DataLoader fetch whole batches (``__getitems__``): a pipeline
            with ``NativeLoadResizeFlip`` then decodes (and, ``pixels_on='worker'``, resizes and
            flips) each batch in one native call (``batched_fetch.py``,
            docs/deferred_pixels.md); samples are the same. That call runs on 1 thread in a
            DataLoader worker (the workers are the parallelism), on every CPU this process may
            run on with ``num_workers=0`` (its affinity: ``taskset`` narrows it).
        decode_threads: ignored, with a warning once (its own setting before the affinity was
            the one home of the thread count; no measurement showed a win for another value).
        (all other arguments as mmdet's ``CocoDataset``)
    """

    METAINFO = CocoDataset.METAINFO
    # Where image file names come from (annotation_store.open_store's image_names).
    IMAGE_NAMES = 'file_name'

    def __init__(self, *args, store_cache_dir: Optional[str] = None,
                 validate: Union[bool, dict[str, str]] = True,
                 bad_data_policy: Optional[dict[str, str]] = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS, on_bad_sample: str = 'raise',
                 max_bad_fraction: float = 0.1, work_dir: Optional[str] = None,
                 batched_fetch: bool = True, decode_threads: Optional[int] = None,
                 **kwargs) -> None:
        if decode_threads is not None:
            warn_once('decode_threads', 'LazyCocoDataset: decode_threads is ignored: a batch '
                      'decodes on 1 thread in a DataLoader worker, on every CPU the process may '
                      'run on with num_workers=0 (taskset narrows it)')
        self.batched_fetch = batched_fetch
        # The model's data_preprocessor's pad_size_divisor (WorkerDefaultsHook sets it before
        # the run): the batched fetch allocates its padded batches to it, so that neither
        # fast_collate nor the preprocessor copies them again.
        self.pad_size_divisor = 1
        self._fetcher_for: Any = None
        self._fetcher: Optional[BatchedFetcher] = None
        self.store_cache_dir = store_cache_dir
        if bad_data_policy is not None:
            warn_once('bad_data_policy', 'LazyCocoDataset: bad_data_policy is now validate\'s: '
                      'validate=dict(<problem kind>=<action>, ...)')
            validate = {**bad_data_policy, **validate} if isinstance(validate, dict) else \
                bad_data_policy if validate else False
        overrides = validate if isinstance(validate, dict) else None
        self.validate = overrides is not None or bool(validate)
        self.policy = resolve_policy(overrides)  # problem kind -> action
        self.max_pixels = max_pixels
        self.bad_samples = BadSampleHandler(on_bad_sample, max_bad_fraction, work_dir)
        self.inflight = InflightRecord(work_dir or log_dir())
        self.store: Optional[AnnotationStore] = None
        self._rows = np.zeros(0, dtype=np.int64)
        self._missing_images_error: Optional[str] = None
        super().__init__(*args, **kwargs)
        self._hand_to_pipeline()

    def full_init(self) -> None:
        if dataset_fully_initialized(self):
            return
        if self.proposal_file is not None:
            raise ValueError(f'{type(self).__name__} does not support proposal_file; use '
                             "mmdet's dataset")
        self.store = open_store(self.ann_file, self.store_cache_dir, self.backend_args,
                                validation=self._validation_args(),
                                image_names=self.IMAGE_NAMES)
        self.cat_ids = self._selected_category_ids()
        self.cat2label = {cat_id: label for label, cat_id in enumerate(self.cat_ids)}
        self._rows = self._filtered_rows()
        indices = dataset_indices(self)
        if indices is not None:
            self._rows = self._subset(self._rows, indices)
        self._missing_images_error = self._missing_images()
        if len(self._rows) == 0 and not self.test_mode:
            raise DataValidationError(self._empty_reason())
        mark_dataset_fully_initialized(self)

    def _missing_images(self) -> Optional[str]:
        """The wrong-prefix message when most images were missing at validation, else None."""
        if MISSING_IMAGES not in self.store.arrays:
            return None
        missing, checked = (int(v) for v in self.store[MISSING_IMAGES])
        if missing == 0 or missing <= MAX_MISSING_FRACTION * checked:
            return None
        example = self.store[MISSING_EXAMPLE].tobytes().decode('utf-8', 'surrogateescape')
        message = missing_images_message(missing, checked, self.data_prefix.get('img', ''),
                                         example)
        print_log(f'{self.ann_file}: {message}', logger='current', level=logging.WARNING)
        return message

    def _empty_reason(self) -> str:
        where = f'{self.ann_file} (image prefix {self.data_prefix.get("img", "")!r})'
        if self.store.num_images == 0:
            counts = self.store.arrays.get(VALIDATION_COUNTS)
            if counts is not None and int(counts[0]):
                problems_path = self.store.path + PROBLEMS_SUFFIX
                try:
                    problems = read_problems(problems_path)
                except (OSError, ValueError):
                    problems = None
                return f'{where}: no image is left after validation: ' + nothing_left_message(
                    *(int(v) for v in counts), problems, problems_path)
            return f'{where}: the json lists no images; there is nothing to train on'
        return (f'{where}: filter_cfg={self.filter_cfg} (or indices) left none of the '
                f'{self.store.num_images} images; there is nothing to train on')

    def _validation_args(self) -> Optional[dict]:
        if not self.validate:
            return None
        policy = self.policy
        if self.test_mode:  # records the store cannot hold are still left out (Problem.storable)
            policy = {kind: 'report' for kind in policy}
        return {'img_prefix': self.data_prefix.get('img', ''), 'mask_root': self.data_root or '',
                'policy': policy, 'max_pixels': self.max_pixels}

    def _image_ref(self, idx: int) -> tuple[Any, str]:
        """(img_id, img_path) of sample ``idx``, without building its instances."""
        row = int(self._rows[idx])
        file_name = self.store.file_name(row)
        return self.store.image_id(row), osp.join(self.data_prefix['img'], file_name)

    def prepare_data(self, idx: int) -> Optional[dict]:
        """The pipeline's output for ``idx``; a failure goes through ``self.bad_samples``."""
        return self.load_guarded(idx, super().prepare_data)

    def __getitem__(self, idx: int) -> Any:
        """Sample ``idx``: a batch of one (``wrapper_fetch.load_batch``)."""
        return load_batch(self, [idx])[0]

    def load_sample(self, idx: int) -> Any:
        """mmdet's ``__getitem__``: the pipeline transform by transform. The path of a pipeline
        the batch engine does not recognise, and of a batch it cannot make exactly."""
        return super().__getitem__(idx)

    def __getitems__(self, indices: Sequence[int]) -> list:
        """The DataLoader's batched fetch: ``fetch_batch(indices)``."""
        return self.fetch_batch(indices)

    def fetch_batch(self, indices: Sequence[int], seeds: Optional[Sequence[int]] = None) -> list:
        """``[self[i] for i in indices]`` (each under ``seeds[k]``, ``seeded_rngs``, when given),
        made by the batch engine where it recognises the pipeline (``wrapper_fetch.load_batch``:
        the images decoded together, into one buffer). In a DataLoader worker the samples'
        instance tensors then share a few storages, which makes sending the batch cheaper
        (``share_instance_tensors``)."""
        samples = load_batch(self, indices, seeds)
        if self.batched_fetch and torch.utils.data.get_worker_info() is not None:
            share_instance_tensors(samples)
        return samples

    def batch_engine(self) -> Optional[BatchedFetcher]:
        """The batch engine of the current pipeline (PipelineSwitchHook may replace it), or None
        when it is off or the pipeline is not one it recognises; that is logged once per
        pipeline."""
        if not dataset_fully_initialized(self):
            self.full_init()
        pipeline = self.pipeline
        if self._fetcher_for is not pipeline:
            self._fetcher_for, self._fetcher = pipeline, None
            self._hand_to_pipeline()
            self._fetcher, why = batch_engine_for(self, getattr(pipeline, 'transforms', []))
            info = torch.utils.data.get_worker_info()
            if info is None or info.id == 0:  # once, not once per worker
                print_log(f'{type(self).__name__}: batched fetch ' + (
                    'on: each batch decoded natively as one' if self._fetcher else
                    f'off, samples load one by one: {why}'), logger='current', level=logging.INFO)
        return self._fetcher

    def _hand_to_pipeline(self) -> None:
        """Give the pipeline's native loaders this dataset's ``max_pixels`` (see the class
        docstring), and each ``PackDetInputs`` after a loader that defers its pixels the
        ``pending_warp`` record in its ``meta_keys`` (the data preprocessor finishes the pixels
        from it: a config need not list it). PipelineSwitchHook's new pipeline gets both when it
        is first used."""
        deferred = False
        for transform in getattr(self.pipeline, 'transforms', []):
            deferred = deferred or (isinstance(transform, NativeLoadResizeFlip)
                                    and not transform.stage.warped)
            if deferred and isinstance(transform, PackDetInputs) and \
                    PENDING_WARP_KEY not in transform.meta_keys:
                transform.meta_keys = (*transform.meta_keys, PENDING_WARP_KEY)
            if not isinstance(transform, NATIVE_LOADERS) or \
                    transform.max_pixels == self.max_pixels:
                continue
            if transform.max_pixels != DEFAULT_MAX_PIXELS:
                raise ValueError(
                    f'{type(self).__name__}: max_pixels={self.max_pixels} but its '
                    f'{type(transform).__name__} has max_pixels={transform.max_pixels}; set it '
                    f'once, on the dataset (its loaders take it)')
            transform.max_pixels = self.max_pixels

    def load_guarded(self, idx: int, load: Callable[[int], Any]) -> Any:
        """``load(idx)`` named in the in-flight record; a failure goes through
        ``self.bad_samples`` (None when it is skipped)."""
        img_id, img_path = self._image_ref(idx)
        self.bad_samples.tried_one()
        self.inflight.begin(f'sample {idx} (img_id={img_id}, img_path={img_path})')
        try:
            data = load(idx)
        except Exception as err:  # noqa: BLE001 -- any pipeline failure is a bad sample
            self.inflight.end()
            if isinstance(err, FileNotFoundError) and self._missing_images_error:
                raise MissingImagesError(f'{self.ann_file}: {self._missing_images_error}; '
                                         f'loading {img_path} failed') from err
            self.bad_samples.handle(err, idx, img_id, img_path)
            return None
        self.inflight.end()
        return data

    def _selected_category_ids(self) -> list[int]:
        # Same rule as pycocotools' getCatIds(catNms=...): json order, not `classes` order.
        store = self.store
        wanted = set(self.metainfo['classes'])
        names = [store.text('category_name_bytes', *r) for r in store['category_name_range']]
        return [int(cat_id) for cat_id, name in zip(store['category_ids'], names) if name in wanted]

    def _filtered_rows(self) -> np.ndarray:
        """Store rows (images) kept by ``filter_cfg``, exactly as ``CocoDataset.filter_data``."""
        store = self.store
        rows = np.arange(store.num_images, dtype=np.int64)
        if self.test_mode or self.filter_cfg is None:
            return rows
        keep = np.ones(store.num_images, dtype=bool)
        if self.filter_cfg.get('filter_empty_gt', False):
            # CocoDataset keeps images with any annotation (crowd and ignored ones included) of
            # a selected category.
            selected = np.isin(store['category_id'], np.asarray(self.cat_ids, dtype=np.int64))
            image_of_instance = np.repeat(rows, np.diff(store['instance_offsets']))
            has_selected = np.zeros(store.num_images, dtype=bool)
            has_selected[image_of_instance[selected]] = True
            keep &= has_selected
        keep &= store['image_hw'].min(axis=1) >= self.filter_cfg.get('min_size', 0)
        return rows[keep]

    @staticmethod
    def _subset(rows: np.ndarray, indices: Union[int, Sequence[int]]) -> np.ndarray:
        if isinstance(indices, int):
            return rows[:indices] if indices >= 0 else rows[indices:]
        return rows[np.asarray(indices, dtype=np.int64)]

    def __len__(self) -> int:
        if not dataset_fully_initialized(self):
            self.full_init()
        return len(self._rows)

    # What makes a sample's instances; a subclass that overrides any of them may make others,
    # which the columnar reading (columnar_annotations.py) would not give.
    _INSTANCE_MAKERS = ('get_data_info', 'data_info_without_instances', '_data_info',
                        '_instance')

    @property
    def instances_from_store_rows(self) -> bool:
        """Whether this dataset's instances are exactly the store's rows as ``coco_records``
        keeps them (no override of ``_INSTANCE_MAKERS``): the batched fetch may then read the
        columns."""
        return self._keeps_own(self._INSTANCE_MAKERS)

    def _keeps_own(self, names: Sequence[str]) -> bool:
        """Whether this dataset's class overrides none of ``names`` (this class's methods)."""
        return all(getattr(type(self), name) is getattr(LazyCocoDataset, name) for name in names)

    def store_rows(self, indices: Sequence[int]) -> np.ndarray:
        """The store rows (images) of samples ``indices`` (each >= 0)."""
        if not dataset_fully_initialized(self):
            self.full_init()
        return self._rows[np.asarray(indices, dtype=np.int64)]

    def get_data_info(self, idx: int) -> dict:
        """A fresh ``data_info`` dict for sample ``idx`` (new objects on every call)."""
        return self._data_info(idx, with_instances=True)

    def data_info_without_instances(self, idx: int) -> dict:
        """``get_data_info(idx)`` without ``instances``: for the batched fetch, which loads
        them from the store's columns (``columnar_annotations.py``)."""
        return self._data_info(idx, with_instances=False)

    def _data_info(self, idx: int, with_instances: bool) -> dict:
        if not dataset_fully_initialized(self):
            self.full_init()
        row = int(self._rows[idx])
        store = self.store
        height, width = (int(v) for v in store['image_hw'][row])
        file_name = store.file_name(row)
        seg_map_path = None
        if self.data_prefix.get('seg', None):
            seg_map_path = osp.join(self.data_prefix['seg'],
                                    file_name.rsplit('.', 1)[0] + self.seg_map_suffix)
        data_info = {
            'img_path': osp.join(self.data_prefix['img'], file_name),
            'img_id': store.image_id(row),
            'seg_map_path': seg_map_path,
            'height': height,
            'width': width,
        }
        if self.return_classes:
            data_info['text'] = self.metainfo['classes']
            data_info['caption_prompt'] = self.caption_prompt
            data_info['custom_entities'] = True
        if with_instances:
            kept = kept_instances(store, self._rows[[idx]], self.cat2label)[0]
            data_info['instances'] = [
                self._instance(row, crowd, box, label) for row, crowd, box, label in zip(
                    kept.rows.tolist(), kept.iscrowd.tolist(), kept.boxes.tolist(),
                    kept.labels.tolist())]
        data_info['sample_idx'] = idx if idx >= 0 else len(self) + idx
        return data_info

    def _instance(self, row: int, crowd: bool, box: list, label: int) -> dict:
        """Kept annotation ``row`` as an instance dict of mmdet's format."""
        instance = {'ignore_flag': int(crowd), 'bbox': box, 'bbox_label': label}
        mask = instance_mask(self.store, row, self.data_root)
        if mask is not None:
            instance['mask'] = mask
        return instance

    def image_sizes(self, indices: Sequence[int]) -> Optional[tuple[np.ndarray, np.ndarray]]:
        """(widths, heights) of samples ``indices``, as ``get_data_info`` gives them, read from
        the store in one call (``FastAspectRatioBatchSampler``); None in a subclass that makes
        its own ``get_data_info``, whose sizes may not be the store's."""
        if not self._keeps_own(('get_data_info', '_data_info')):
            return None
        rows = self.store_rows(indices)  # full_init first: the store opens there
        height_width = self.store['image_hw'][rows]
        return height_width[:, 1], height_width[:, 0]
