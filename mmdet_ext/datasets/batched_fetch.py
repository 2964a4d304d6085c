"""Batched fetch: a batch of samples whose images are decoded together, into one buffer.

Why: the DataLoader asks a dataset with ``__getitems__`` for a whole batch at once. For a train
pipeline that loads with ``NativeLoadResizeFlip`` (or mmdet's own loading steps), the batch's
images are then decoded by one executor (``batch_decoder.py``: native code, the GIL released)
straight into one buffer. With ``pixels_on='device'`` that buffer (shared memory in a DataLoader
worker) is what ``fast_collate`` hands to the training process as it is: per sample, no decoded
tensor is allocated and no pixel is copied. With ``pixels_on='worker'`` each image is resized
and flipped as it is decoded (``warp_image``'s code) into its slot of the padded [B, C, H, W]
batch (padded to the model's divisor), which ``fast_collate`` pads in place and passes on: no
image is copied there either.

How, in three passes over the batch:

1. *Plan*, per sample and under its seed: what ``BaseDataset.__getitem__`` does, with the pipeline
   stopped at the loader's ``plan`` (every transform before it, the file read, the flip draw, the
   geometry); a bad sample is handled as the per-sample path handles it (``on_bad_sample``,
   ``max_refetch`` replacement draws).
2. *Decode* the batch on ``BatchDecoder``, laid out by the loader's stage (``PixelStage``):
   images finished in the worker into the slots of a padded batch, queued once the last plan
   tells the slots' size; images left to the device (decoded, or the files' bytes) one after
   another into one flat buffer, each queued as it is planned. In a DataLoader worker the queue
   decodes on the calling thread when the batch is waited for; in the training process
   (threads, no DataLoader workers) on native threads too, while the rest of the batch is
   planned or finished.
3. *Finish*, per sample: the decoded image into ``results``, then the transforms after the loader.
   Where nothing after the loader reads the pixels (``reads_no_pixels``: mmdet's own
   ``PackDetInputs`` makes ``inputs`` a view of the buffer without reading it), this runs before
   the decodes are waited for.

Samples come out exactly as the per-sample path makes them: same draws, same bytes (the tests
compare both). Anything the batch cannot do exactly -- a file that does not decode to the size its
header declares (corrupt data, or an EXIF rotation the annotations do not declare), a transform
after the loader returning None or raising -- puts the random states and the bad-sample counts
back and loads the batch again through the per-sample path, which handles it as it always has;
the first such batch of each process is logged.

Recognised pipelines: ``NativeLoadResizeFlip`` anywhere (either ``pixels_on``), or mmdet's own
loading steps (``NativeLoadImageFromFile``, annotation loaders, ``Resize``, ``RandomResize`` or
``RandomChoiceResize``, optionally ``RandomFlip``: ``fused_mmdet_loading.py``), any transforms
before the loader, and after it only transforms in ``AFTER_LOADER`` (deterministic, and none but
``PackDetInputs`` reads ``img``). Any other pipeline keeps the per-sample path; the dataset logs
once which transform makes it fall back (``batch_plan``).
"""
import contextlib
import logging
import os
import random
from typing import Any, Callable, NamedTuple, Optional, Sequence

import numpy as np
import torch
from mmdet.datasets.transforms import FilterAnnotations, LoadAnnotations, PackDetInputs
from mmengine.logging import print_log

from ..collate import FetchedBatch
from ..transforms.fused_loading import NativeLoadResizeFlip, PendingDecode
from ..transforms.fused_mmdet_loading import fuse_mmdet_loading
from ..transforms.packing import PACKERS
from .columnar_annotations import columnar_plan
from .batch_decoder import BatchDecoder, DecodeFailed, SlotDecoder
from .seeded_rngs import seed_rngs

# Whether a LoadLazyAnnotations reads the store's columns where it can (columnar_plan); off
# only to measure what that saves (benchmarks/batched_fetch.py).
COLUMNAR_ANNOTATIONS = True

# Transforms allowed after the loader: they draw nothing at random and do not touch img, or, for
# the packers (mmdet's PackDetInputs, our FastPackDetInputs), read it only to make the CHW tensor
# (a view of the batch buffer). Annotation
# loaders there (a test pipeline's) read only the loader's ori_shape.
AFTER_LOADER = (LoadAnnotations, FilterAnnotations) + PACKERS


class BatchPlan(NamedTuple):
    """A recognised pipeline split at its loader (one transform, or several planned as one);
    ``instances``: whether its ``data_info`` lists them (else its annotation loader reads them
    from the store's columns, ``columnar_plan``)."""
    before: list
    loader: NativeLoadResizeFlip
    after: list
    instances: bool = True


def batch_plan(transforms: Sequence) -> tuple[Optional[BatchPlan], str]:
    """(the split, '') when ``transforms`` can be fetched in batches, else (None, why not).

    The loader is a ``NativeLoadResizeFlip``, or mmdet's own loading steps planned as one
    (``fuse_mmdet_loading``: ``NativeLoadImageFromFile``, annotation loaders, a resize, a flip).
    """
    loaders = [i for i, t in enumerate(transforms) if isinstance(t, NativeLoadResizeFlip)]
    if len(loaders) > 1:
        return None, 'the pipeline has more than one NativeLoadResizeFlip'
    if loaders:
        start, end, loader = loaders[0], loaders[0] + 1, transforms[loaders[0]]
    else:
        fused, why = fuse_mmdet_loading(transforms)
        if fused is None:
            return None, why
        start, end, loader = fused
    last_step = type(transforms[end - 1]).__name__
    for transform in transforms[end:]:
        if not isinstance(transform, AFTER_LOADER):
            return None, (f'{type(transform).__name__} comes after {last_step} (only '
                          f'{", ".join(t.__name__ for t in AFTER_LOADER)} may)')
    if not isinstance(transforms[-1], PackDetInputs):
        return None, 'the pipeline does not end with PackDetInputs'
    return BatchPlan(list(transforms[:start]), loader, list(transforms[end:])), ''


def batch_engine_for(dataset: Any, transforms: Sequence) -> tuple[Optional['BatchedFetcher'], str]:
    """(the batch engine of ``dataset``, a ``LazyCocoDataset``, for a pipeline of
    ``transforms``, '') or (None, why there is none). Everything the engine chooses it chooses
    here, once per pipeline: which front end plans the loading (``batch_plan``), and whether
    the annotations are read from the store's columns (``columnar_plan``)."""
    if not dataset.batched_fetch:
        return None, 'batched_fetch=False'
    plan, why = batch_plan(transforms)
    return (None, why) if plan is None else (BatchedFetcher(dataset, plan), '')


def decode_threads() -> int:
    """1 in a DataLoader worker (the workers are the parallelism), else every core this process
    may run on (``num_workers=0``: the threads are the parallelism)."""
    if torch.utils.data.get_worker_info() is not None:
        return 1
    return len(os.sched_getaffinity(0))


class _FallBack(Exception):
    """The batch cannot be made exactly in batch mode; the per-sample path makes it."""


def _pack_with_inputs(pack: PackDetInputs, results: dict, image: torch.Tensor,
                      wait_for_pixels: Optional[Callable[[], Any]] = None) -> Any:
    """``pack(results)`` whose ``inputs`` is ``image`` itself, a view of the batch buffer, when
    ``pack`` is one of ``PACKERS`` (mmdet's ``PackDetInputs``, our ``FastPackDetInputs``) and
    ``img`` is that image's pixels.

    Why: ``PackDetInputs`` makes ``inputs`` through numpy, a tensor of its own storage, and for
    an image in a slot of a padded batch (rows further apart than its width) it copies every
    pixel to get there; as a view of the batch, ``fast_collate`` sees the batch already lies in
    one buffer and copies nothing. A packer reads ``img`` for ``inputs`` only, so it
    packs everything else without it; ``inputs`` is the same pixels, shape and dtype.
    ``wait_for_pixels``: called before ``pack`` reads the pixels, where they may still be
    decoding.
    """
    img = results.get('img')
    planar = _planar_pixels(img) if isinstance(img, np.ndarray) else None
    if type(pack) not in PACKERS or 'img' in pack.meta_keys or planar is None or \
            planar.dtype != np.uint8 or planar.ctypes.data != image.data_ptr() or \
            planar.shape != tuple(image.shape):
        if wait_for_pixels is not None:
            wait_for_pixels()
        return pack(results)
    del results['img']
    packed = pack(results)
    return {'inputs': image, **packed}


def reads_no_pixels(plan: BatchPlan) -> bool:
    """Whether nothing after ``plan``'s loader reads the pixels: mmdet's own transforms of
    ``AFTER_LOADER`` (not subclasses, which may), ending with a packer that makes
    ``inputs`` a view of the batch (``_pack_with_inputs``), of a uint8 image."""
    pack = plan.after[-1]
    return not getattr(plan.loader, 'to_float32', False) and 'img' not in pack.meta_keys and \
        all(type(transform) in AFTER_LOADER for transform in plan.after) and \
        type(pack) in PACKERS


def _planar_pixels(img: np.ndarray) -> np.ndarray:
    """The [C, H, W] array an ``img`` of ``finish`` views (HxWxC, or HxW for one channel)."""
    return img[None] if img.ndim == 2 else img.transpose(2, 0, 1)


@contextlib.contextmanager
def _kept_rng_states():
    """Yield a function that puts python's, numpy's and torch's RNG back to their states here."""
    states = random.getstate(), np.random.get_state(), torch.get_rng_state()

    def restore() -> None:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
    yield restore


class BatchedFetcher:
    """Loads batches of ``dataset`` (a ``LazyCocoDataset``) through ``plan``."""

    def __init__(self, dataset: Any, plan: BatchPlan) -> None:
        self.dataset = dataset
        columnar = columnar_plan(dataset, plan) if COLUMNAR_ANNOTATIONS else None
        self.plan, self.columns = columnar or (plan, None)
        self._logged_fallback = False
        self._flat_capacity = 0  # the most bytes a flat batch took
        self._reads_no_pixels = reads_no_pixels(self.plan)

    def fetch(self, indices: Sequence[int], seeds: Optional[Sequence[int]] = None
              ) -> Optional[list]:
        """The samples of ``indices`` (each under its seed when given), as the per-sample path
        makes them; None where the batch cannot be made exactly, with the random states and
        the bad-sample counts as they were (the caller loads it sample by sample)."""
        seeds = [None] * len(indices) if seeds is None else list(seeds)
        bad = self.dataset.bad_samples
        counts = bad.tried, bad.bad_count
        with _kept_rng_states() as restore:
            try:
                return self._fetch(indices, seeds)
            except _FallBack as why:
                restore()
                bad.tried, bad.bad_count = counts  # the samples are tried again, not twice
                self._log_fallback(str(why))
                return None
            finally:
                if any(seed is not None for seed in seeds):
                    restore()  # as seeded_rngs leaves them after each sample, whatever happens

    def _fetch(self, indices: Sequence[int], seeds: list) -> list:
        if self.columns is not None:
            self.columns.prepare(indices)
        decoder = self._decoder(len(indices))
        planned = []
        try:
            for index, seed in zip(indices, seeds):
                if seed is not None:
                    # Not seeded_rngs: saving and restoring the states costs 0.12 ms per sample;
                    # fetch restores them once per batch. Nothing after the plan draws.
                    seed_rngs(seed)
                planned.append(self._plan_sample(index))
                decoder.add(*planned[-1][::2])
            if not self._reads_no_pixels:
                images = decoder.images()
                samples = self._finish(planned, images)
            else:
                # Nothing after the loader reads the pixels: the samples are finished while the
                # images decode, then the decodes are waited for.
                images = decoder.views()
                samples = self._finish(planned, images, decoder.images)
                decoder.images()
            return FetchedBatch(samples, decoder.batch_buffer, images)
        except DecodeFailed as err:
            raise _FallBack(str(err)) from err
        finally:
            decoder.wait()  # nothing decodes on after the batch, whatever happened
            self._flat_capacity = max(self._flat_capacity, decoder.used)

    def _decoder(self, batch_size: int) -> BatchDecoder:
        """The executor of a batch, by the loader's stage (``PixelStage``): warped images into
        the slots of a padded [B, C, H, W] batch (padded to the dataset's ``pad_size_divisor``;
        placed once the batch is planned), which ``fast_collate`` pads in place and sends as it
        is; anything else one after another into one flat buffer, each image queued as it is
        planned, which ``fast_collate`` sends as it is. In a worker the batch is memory sent to
        the training process without a copy; in threads mode images decode on the other threads
        while the next samples are planned (a flat batch) or finished (slots)."""
        loader, threads = self.plan.loader, decode_threads()
        if loader.stage.warped:
            return SlotDecoder(loader, threads, batch_size, self.dataset.pad_size_divisor,
                               self.dataset.inflight)
        return BatchDecoder(loader, threads, batch_size, self.dataset.inflight,
                            capacity_hint=self._flat_capacity)

    def _finish(self, planned: list, images: list[torch.Tensor],
                wait_for_pixels: Optional[Callable[[], Any]] = None) -> list:
        """The planned samples with their images, through the transforms after the loader;
        ``wait_for_pixels``: see ``_pack_with_inputs``."""
        samples = []
        for (index, results, _), image in zip(planned, images):
            self.plan.loader.finish(results, image)
            for transform in self.plan.after:
                try:
                    results = _pack_with_inputs(transform, results, image, wait_for_pixels) \
                        if transform is self.plan.after[-1] else transform(results)
                except DecodeFailed:
                    raise
                except Exception as err:  # noqa: BLE001 -- the per-sample path handles it
                    raise _FallBack(f'{type(transform).__name__} raised {type(err).__name__}: '
                                    f'{err} for sample {index}') from err
                if results is None:
                    raise _FallBack(f'{type(transform).__name__} returned None for sample {index}')
            samples.append(results)
        return samples

    def _plan_sample(self, index: int) -> tuple[int, dict, PendingDecode]:
        """``BaseDataset.__getitem__`` up to the loader's plan: (the index loaded, results,
        its pending decode); a bad or None sample is replaced as there."""
        dataset = self.dataset
        if dataset.test_mode:
            planned = dataset.load_guarded(index, self._plan_one)
            if planned is None:
                raise Exception('Test time pipline should not get `None` data_sample')
            return (index, *planned)
        for _ in range(dataset.max_refetch + 1):
            planned = dataset.load_guarded(index, self._plan_one)
            if planned is not None:
                return (index, *planned)
            index = dataset._rand_another()
        raise Exception(f'Cannot find valid image after {dataset.max_refetch}! '
                        'Please check your image path and pipeline')

    def _plan_one(self, index: int) -> Optional[tuple[dict, PendingDecode]]:
        results = self.dataset.get_data_info(index) if self.plan.instances \
            else self.dataset.data_info_without_instances(index)
        for transform in self.plan.before:
            results = transform(results)
            if results is None:
                return None
        pending = self.plan.loader.plan(results)
        return None if pending is None else (results, pending)

    def _log_fallback(self, why: str) -> None:
        if self._logged_fallback:
            return
        self._logged_fallback = True
        print_log(f'{type(self.dataset).__name__}: a batch was loaded sample by sample instead '
                  f'of batched (logged once per process): {why}', logger='current',
                  level=logging.INFO)
