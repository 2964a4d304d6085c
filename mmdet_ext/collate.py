"""``fast_collate``: one padded uint8 batch tensor per batch, built in the worker, inputs untouched.

Why: mmengine's ``pseudo_collate`` hands the main process a list of images, and mmdet's
``DetDataPreprocessor`` converts, normalises and pads them one by one on the training process's
critical path. A home-made collate that converts the dataset's own lists to tensors in place goes
wrong the other way: the next epoch sees corrupted annotations. ``fast_collate`` copies
every image once, straight into a preallocated ``[B, C, H, W]`` uint8 tensor (in the DataLoader
worker, where it costs no training time), and builds only new containers: the samples it
receives are never modified. A batch it has no fast path for (tuple samples, multi-branch dict
inputs, images that are not ``Tensor[C, H, W]`` of one dtype and channel count) is collated by
``pseudo_collate``, so any batch mmengine accepts is accepted.

A ``FetchedBatch`` -- the batched fetch's samples with the one buffer their images were made in
(the slots of a padded batch, padded to the model's divisor, or one flat buffer) -- is collated
to that buffer: only its padding is written.

Use with ``FastDetDataPreprocessor`` (``mmdet_ext.models``), which normalises the batch and pads it
to its own ``pad_size_divisor`` exactly as mmdet does: the divisor is set once, there.

Samples from ``NativeLoadResizeFlip(pixels_on='device')`` (their ``pending_warp`` record in the
metainfo) are packed without resizing or padding: one flat uint8 buffer of their decoded CHW
pixels, for ``FastDetDataPreprocessor`` to resize, flip, normalise and pad on the model's device
(docs/deferred_pixels.md).
"""
import math
from collections.abc import Sequence
from typing import Any, Optional

import torch
from mmengine.dataset import pseudo_collate

from . import worker_buffers
from .moved_settings import warn_once
from .ops import FLIP_CODES
from .registry import FUNCTIONS
from .rounding import JPEG_SCALE_DENOMS, reduced_size
from .transforms.fused_loading import DECODED_SHAPE_KEY, PENDING_WARP_KEY


class FetchedBatch(list):
    """The samples of a batch whose images were made in one buffer: a list of the samples, each
    ``inputs`` a view of ``buffer``, which ``fast_collate`` takes as the batch's ``inputs``
    instead of copying the images. Made by the batched fetch (``datasets/batched_fetch.py``)
    and handed by type through the dataset (and mmengine's wrappers) to ``fast_collate``.

    ``buffer``: [B, C, H, W], each image in the top left of its slot, H and W padded to the
    model's divisor (pixels finished in the worker); or [N], the images' CHW pixels (or files'
    bytes) one after another (``defer``). ``views``: each sample's ``inputs`` as it was made;
    a sample whose ``inputs`` is no longer that tensor makes ``fast_collate`` copy the batch.
    """

    def __init__(self, samples: list, buffer: torch.Tensor, views: list) -> None:
        super().__init__(samples)
        self.buffer = buffer
        self.views = views


def _fetched_buffer(data_batch: Sequence, ndim: int) -> Optional[torch.Tensor]:
    """The ``buffer`` of a ``FetchedBatch`` (of ``ndim`` dims) whose samples still hold its
    views, unless sending it from a DataLoader worker would copy it (``allocate_batch`` then
    does better, once); else None."""
    if not isinstance(data_batch, FetchedBatch) or data_batch.buffer.dim() != ndim or \
            len(data_batch.views) != len(data_batch) or \
            any(sample['inputs'] is not view for sample, view in zip(data_batch, data_batch.views)):
        return None
    storage = data_batch.buffer.untyped_storage()
    if _sending_would_copy(storage) and storage.nbytes() > worker_buffers.INLINE_MAX_BYTES:
        return None  # a small one travels inside the pickle, as allocate_batch's would
    return data_batch.buffer


@FUNCTIONS.register_module()
def fast_collate(data_batch: Sequence, pad_size_divisor: Optional[int] = None,
                 pad_value: Optional[float] = None, pin_memory: Optional[bool] = None) -> Any:
    """Collate ``PackDetInputs`` outputs into a padded batch.

    Args:
        data_batch: samples, each ``{'inputs': Tensor[C, H_i, W_i], 'data_samples': ...}``
            (uint8 from the standard pipeline; another dtype, all the same, when the metainfo
            says the tensor is the image); other batches go to ``pseudo_collate``.
        pad_size_divisor, pad_value, pin_memory: ignored, warned about once (the spellings
            before each fact had one home: the padding's divisor and value are the model's
            data preprocessor's, which pads the batch to them -- ``WorkerDefaultsHook`` hands
            the divisor to the datasets, whose batched fetch allocates its slots to it --,
            ``pin_memory`` is the DataLoader's).

    Returns:
        ``pseudo_collate(data_batch)`` for a batch without the fast path, else
        ``{'inputs': Tensor[B, C, H, W], 'data_samples': [...], 'input_shapes': [(H_i, W_i)]}``,
        H and W the largest H_i, W_i (or a ``FetchedBatch``'s slots' size: padded to the
        model's divisor, ``LazyCocoDataset.pad_size_divisor``), the padding zero; every other
        key collated as ``pseudo_collate`` would. ``input_shapes`` lets the data preprocessor tell
        image from padding. For deferred samples (``pending_warp`` in every sample's metainfo):
        ``inputs`` is Tensor[N] uint8, the samples' CHW pixels one after another,
        ``input_shapes`` their sizes after the pending resize, and ``pending_warp`` is
        ``{'image_shapes': Tensor[B, 3] (h, w, c as decoded), 'out_shapes': Tensor[B, 2],
        'flips': Tensor[B] (``mmdet_ext.ops.FLIP_CODES``), 'interpolation': str}``
        (nothing is padded). Samples whose bytes are still encoded (``decode_on='device'``):
        ``inputs`` is their files' bytes one after another, ``image_shapes`` what they decode
        to, and ``pending_warp['encoded_sizes']`` is
        Tensor[B] int64, each file's byte count.
    """
    if len(data_batch) == 0:
        raise ValueError('fast_collate: the batch is empty')
    ignored = {name: value for name, value in (('pad_size_divisor', pad_size_divisor),
                                               ('pad_value', pad_value),
                                               ('pin_memory', pin_memory)) if value is not None}
    if ignored:
        spelled = ', '.join(f'{name}={value!r}' for name, value in ignored.items())
        warn_once('fast_collate', f'fast_collate: {spelled} ignored: the padding is the model '
                  "data preprocessor's (its pad_size_divisor and pad_value), pin_memory the "
                  "DataLoader's")
    # Deferred samples before the fast-path test: their images are not what the model takes
    # (decoded size, or a file's bytes), so pseudo_collate would hand it the wrong pixels.
    warps = _pending_warps(data_batch) if all(
        isinstance(sample, dict) and isinstance(sample.get('inputs'), torch.Tensor)
        for sample in data_batch) else None
    if warps is not None:
        return _collate_deferred(data_batch, warps)
    if not _has_fast_path(data_batch):
        return pseudo_collate(data_batch)
    _check_images_have_their_shape(data_batch)
    images = [sample['inputs'] for sample in data_batch]
    first = images[0]
    batch = _fetched_buffer(data_batch, 4)
    copy = batch is None
    if copy:
        height = max(image.shape[1] for image in images)
        width = max(image.shape[2] for image in images)
        batch = allocate_batch(first, (len(images), first.shape[0], height, width))
    for slot, image in zip(batch, images):
        h, w = image.shape[1:]
        if copy:
            slot[:, :h, :w].copy_(image)
        # Fill only the padding: the image region is written exactly once.
        slot[:, h:, :].fill_(0)
        slot[:, :h, w:].fill_(0)

    others = [{key: value for key, value in sample.items() if key != 'inputs'}
              for sample in data_batch]
    collated = pseudo_collate(others)
    collated['inputs'] = batch
    collated['input_shapes'] = [tuple(image.shape[1:]) for image in images]
    return collated


def allocate_batch(first: torch.Tensor, shape: tuple) -> torch.Tensor:
    """An uninitialised tensor of ``first``'s dtype. In a DataLoader worker, memory it sends
    without another copy, as default_collate's shared memory is (``worker_buffers``: small ones
    travel inside the pickle, larger ones in segments the worker reuses, torch's shared memory
    where neither can be used); in the main process, ordinary memory (the DataLoader's
    ``pin_memory`` pins what it hands on)."""
    if torch.utils.data.get_worker_info() is not None:
        nbytes = first.element_size() * math.prod(shape)
        pooled = worker_buffers.allocate(nbytes)
        if pooled is not None:
            return pooled.view(first.dtype).view(shape)
        storage = first.untyped_storage()._new_shared(nbytes)
        return first.new_empty(0).set_(storage).view(shape)
    return torch.empty(shape, dtype=first.dtype)


def _pending_warps(data_batch: Sequence) -> Optional[list]:
    """Each sample's ``pending_warp`` record, or None when no sample has one."""
    warps = [getattr(sample.get('data_samples'), 'metainfo', {}).get(PENDING_WARP_KEY)
             for sample in data_batch]
    if all(warp is None for warp in warps):
        return None
    if any(warp is None for warp in warps):
        raise ValueError('fast_collate: some samples of this batch were resized in the worker '
                         "and others not (pixels_on='device'); one pipeline per batch")
    return warps


def _check_images_have_their_shape(data_batch: Sequence) -> None:
    """Refuses a sample that looks decoded but not resized: a deferred one that lost its record.

    Why: a ``NativeLoadResizeFlip(pixels_on='device')`` sample whose ``PackDetInputs`` lacks
    ``'pending_warp'`` in ``meta_keys`` arrives at its decoded size (``ori_shape``, or 1/2, 1/4,
    1/8 of it after the reduced JPEG decode) with the metainfo of the resized image; batched as
    it is, the model would train on unresized, unflipped pixels. Only that pattern is refused:
    other batches whose images differ from their ``img_shape`` are collated as mmengine would.
    """
    for position, sample in enumerate(data_batch):
        metainfo = getattr(sample.get('data_samples'), 'metainfo', {})
        if 'ori_shape' not in metainfo or 'img_shape' not in metainfo:
            continue
        height, width = metainfo['ori_shape'][:2]
        decoded_sizes = [reduced_size(height, width, d) for d in JPEG_SCALE_DENOMS]
        image_shape = tuple(sample['inputs'].shape[1:])
        claimed = [tuple(metainfo[key][:2]) for key in ('img_shape', 'pad_shape')
                   if key in metainfo]
        if image_shape in decoded_sizes and image_shape not in claimed:
            raise ValueError(
                f'fast_collate: sample {position} ({metainfo.get("img_path", "no img_path")}) '
                f'has an image of its decoded size {image_shape} but the metainfo of a '
                f'{claimed[0]} image. With NativeLoadResizeFlip(pixels_on=\'device\'), '
                "PackDetInputs must carry 'pending_warp' in its meta_keys "
                '(mmdet_ext.transforms.DEFERRED_META_KEYS).')


def _collate_deferred(data_batch: Sequence, warps: list) -> dict:
    """Deferred samples to one flat uint8 buffer plus what the data preprocessor needs."""
    images = [sample['inputs'] for sample in data_batch]
    if images[0].dtype != torch.uint8:
        raise ValueError(f'fast_collate: deferred images must be uint8, got {images[0].dtype}')
    interpolations = {warp['interpolation'] for warp in warps}
    if len(interpolations) != 1:
        raise ValueError(f'fast_collate: one interpolation per batch, got {interpolations}')
    decoded_shapes = [warp.get(DECODED_SHAPE_KEY) for warp in warps]
    encoded = decoded_shapes[0] is not None
    if any((shape is not None) != encoded for shape in decoded_shapes):
        raise ValueError("fast_collate: some samples of this batch carry encoded bytes "
                         "(decode_on='device') and others decoded pixels; one pipeline per batch")
    flat = _fetched_buffer(data_batch, 1)
    if flat is None:
        flat = allocate_batch(images[0], (sum(image.numel() for image in images),))
        torch.cat([image.reshape(-1) for image in images], out=flat)
    others = [{key: value for key, value in sample.items() if key != 'inputs'}
              for sample in data_batch]
    collated = pseudo_collate(others)
    collated['inputs'] = flat
    collated['input_shapes'] = [tuple(warp['out_shape']) for warp in warps]
    image_shapes = decoded_shapes if encoded else \
        [(*image.shape[1:], image.shape[0]) for image in images]
    collated[PENDING_WARP_KEY] = {
        'image_shapes': torch.tensor(image_shapes, dtype=torch.int64),
        'out_shapes': torch.tensor(collated['input_shapes'], dtype=torch.int64),
        'flips': torch.tensor([FLIP_CODES[warp['flip_direction']] for warp in warps],
                              dtype=torch.int64),
        'interpolation': interpolations.pop(),
    }
    if encoded:
        collated[PENDING_WARP_KEY]['encoded_sizes'] = torch.tensor(
            [image.numel() for image in images], dtype=torch.int64)
    return collated


def _sending_would_copy(storage: torch.UntypedStorage) -> bool:
    """Whether a DataLoader worker sending ``storage`` would first copy it into shared memory:
    ``allocate_batch`` then does better, once (not shared by torch, not a reused segment)."""
    return torch.utils.data.get_worker_info() is not None and not storage.is_shared() and \
        not worker_buffers.is_pooled(storage)


def _has_fast_path(data_batch: Sequence) -> bool:
    """Whether every sample is a dict whose ``inputs`` is an image (:func:`_is_image`), all of
    one dtype, device and channel count."""
    if not all(isinstance(sample, dict) and isinstance(sample.get('inputs'), torch.Tensor)
               for sample in data_batch):
        return False
    first = data_batch[0]['inputs']
    return all(_is_image(sample) and sample['inputs'].dtype == first.dtype
               and sample['inputs'].device == first.device
               and sample['inputs'].shape[0] == first.shape[0] for sample in data_batch)


def _is_image(sample: dict) -> bool:
    """Whether ``sample['inputs']`` is an image: a Tensor[C, H, W] of uint8 pixels, or of another
    dtype (``to_float32``, ``PhotoMetricDistortion``) whose H, W are its sample's ``img_shape``
    or ``pad_shape`` (``PackDetInputs``' metainfo).

    Why not every 3-D tensor: mmengine's ``pseudo_collate`` keeps other tensors (features, any
    float ``inputs``) as a list of the very objects it was given, and code written against it
    relies on that; nothing but the metainfo tells a float image from such a tensor.
    """
    inputs = sample['inputs']
    if inputs.dim() != 3:
        return False
    if inputs.dtype == torch.uint8:
        return True
    metainfo = getattr(sample.get('data_samples'), 'metainfo', {})
    return any(tuple(metainfo[key][:2]) == tuple(inputs.shape[1:])
               for key in ('img_shape', 'pad_shape') if key in metainfo)
