"""The one executor of the batched fetch: a batch's images decoded on ``_C.DecodeQueue``.

Why one: every batched fetch decodes its images the same way, one image at a time by
``decode_one_planar`` (csrc/io), into a flat buffer (images as decoded, or files' bytes) or
into the slots of a padded batch (resized and flipped as they are decoded). Only when the
decodes run differs, and that is a number of threads, not another code path:

- in a DataLoader worker (1 decode thread: the workers are the parallelism) the queue has no
  threads of its own: ``images()`` decodes everything on the calling thread, which is what one
  ``decode_images_into`` call after planning did (tests compare the two);
- in the training process (``num_workers=0``, every core) the queue has one thread fewer than
  the decode threads, and images start decoding while the rest of the batch is planned: a flat
  batch image by image as each is planned (its offset is known once the images before it are),
  a padded batch once the last plan tells the slots' size, decoding while the samples are
  finished (``batched_fetch.reads_no_pixels``). The planning thread joins in when it waits.
  That overlap is what makes threads mode faster than one call after planning
  (benchmarks/results/batched_fetch.md).

How: the queue's native threads never take the GIL. Python threads instead stall: one coming
back from a decode waits for the GIL the planning thread holds; so would native threads dropping
a reference to a tensor Python also holds (the queue keeps raw pointers, and this object the
tensors). A flat buffer is allocated at the first image, for the most bytes a batch took so
far (or this image's size times the batch size, if more), and no more: a few MB of headroom can
take a batch's buffer past glibc's 32 MB mmap threshold, and then every batch faults in fresh
pages. An image that does not fit waits for the decodes in flight, then the buffer grows and
what is decoded is copied over. In a DataLoader worker every buffer is memory the batch crosses
to the training process in as it is (``collate.allocate_batch``). While images are in flight,
the in-flight record lists them before whatever the planning writes, so a decoder crash is
still named.
"""
import math
import os
import threading
from typing import Any, Optional

import torch

from .._native import _C
from ..collate import allocate_batch
from ..ops.image import IMREAD_FLAGS
from ..ops.pixels import INTERPOLATIONS
from ..rounding import padded_size
from ..transforms.fused_loading import PendingDecode


class DecodeFailed(RuntimeError):
    """Images of the batch that did not decode to their planned shape (each named)."""


# (pid, threads) -> DecodeQueue. Never removed: a forked child keeps its parent's entries (whose
# threads it does not have) and makes its own under its pid.
_queues: dict[tuple[int, int], Any] = {}
_queues_lock = threading.Lock()


def decode_queue(threads: int) -> Any:
    """This process's ``_C.DecodeQueue`` of ``threads`` native threads (made on first use)."""
    key = (os.getpid(), threads)
    with _queues_lock:
        queue = _queues.get(key)
        if queue is None:
            queue = _queues[key] = _C.DecodeQueue(threads)
        return queue


def _bytes(count: int) -> torch.Tensor:
    """``count`` uninitialised bytes: in a DataLoader worker, memory the batch is sent in as it
    is (``allocate_batch``)."""
    return allocate_batch(torch.empty(0, dtype=torch.uint8), (count,))


class BatchDecoder:
    """A batch's images in one flat buffer, one after another, each queued as it is added: the
    buffer allocated at the first image (for ``capacity_hint`` bytes, or that image's size times
    the batch size if more) and grown as needed."""

    def __init__(self, loader: Any, threads: int, batch_size: int, inflight: Any,
                 capacity_hint: int = 0) -> None:
        self.loader = loader
        # One thread fewer than the decode threads: the planning thread keeps a core while it
        # plans, and decodes what is left when it waits (DecodeQueue.wait).
        self.queue = decode_queue(threads - 1)
        self.batch_size = batch_size
        self.capacity_hint = capacity_hint
        self.inflight = inflight
        self.buffer: Optional[torch.Tensor] = None
        self.used = 0
        self.layout: list[tuple[int, tuple[int, int, int]]] = []  # (offset, shape) per image
        self.names: list[str] = []  # of the images queued, by their position in the queue
        # The queue holds raw pointers: every tensor it reads or writes stays referenced here
        # until wait() returns.
        self.referenced: list[torch.Tensor] = []
        self.in_flight = False

    def add(self, index: int, pending: PendingDecode) -> None:
        """Place the next image of the batch and queue its decode."""
        shape = pending.out_shape  # as decoded, or as a plan that decoded it warped it
        size = math.prod(shape)
        if self.buffer is None:
            self.buffer = _bytes(max(self.capacity_hint, size * self.batch_size))
        elif self.used + size > self.buffer.numel():
            self._grow(self.used + size)
        offset = self.used
        self.used += size
        self.layout.append((offset, shape))
        if pending.encoded is None:  # plan decoded it (a format without a header reader)
            self.buffer[offset:offset + size].view(shape).copy_(pending.decoded)
            return
        self._submit(index, pending, offset)

    def _submit(self, index: int, pending: PendingDecode, offset: int, **warp: Any) -> None:
        """Queue the decode of ``pending`` into the buffer at ``offset``; ``warp``:
        ``DecodeQueue.submit``'s warp arguments."""
        self.names.append(f'sample {index} ({pending.filename})')
        self.inflight.background = f'batch decode of {len(self.names)} images: ' + \
            ', '.join(self.names)
        max_pixels = self.loader.max_pixels
        self.referenced += [pending.encoded, self.buffer]
        self.queue.submit(len(self.names) - 1, pending.encoded,
                          IMREAD_FLAGS[self.loader.color_type], pending.scale_denom, max_pixels,
                          self.buffer, offset, list(pending.shape), **warp)
        self.in_flight = True

    def images(self) -> list[torch.Tensor]:
        """Every image of the batch, Tensor[C, H, W] views of one buffer, once all are decoded.

        Raises:
            DecodeFailed: naming each image that did not decode (the others are decoded).
        """
        self._wait_or_raise()
        return self.views()

    def views(self) -> list[torch.Tensor]:
        """The batch's images as ``images`` gives them, without waiting: pixels still being
        decoded (``images`` or ``wait`` before anything reads them)."""
        return [self.buffer[offset:offset + math.prod(shape)].view(shape)
                for offset, shape in self.layout]

    @property
    def batch_buffer(self) -> torch.Tensor:
        """The one tensor ``views`` are views of (``collate.FetchedBatch.buffer``)."""
        return _bytes(0) if self.buffer is None else self.buffer[:self.used]

    def wait(self) -> list[str]:
        """Wait for every decode in flight; '<image>: <error>' for each that failed."""
        if not self.in_flight:
            return []
        failed = self.queue.wait()
        self.in_flight = False
        self.referenced = []
        self.inflight.background = None
        return [f'{self.names[tag]}: {error}' for tag, error in sorted(failed)]

    def _wait_or_raise(self) -> None:
        errors = self.wait()
        if errors:
            raise DecodeFailed('; '.join(errors))

    def _grow(self, needed: int) -> None:
        """A larger buffer, with what is decoded so far (the decodes in flight finished)."""
        self._wait_or_raise()
        grown = _bytes(max(needed + needed // 4, 2 * self.buffer.numel()))
        grown[:self.used].copy_(self.buffer[:self.used])
        self.buffer = grown


class SlotDecoder(BatchDecoder):
    """A batch of warped images (``PixelStage.warped``): each decoded, resized and flipped into
    its slot of a padded [B, C, H, W] batch, H and W the largest image's rounded up to
    ``divisor``. The slots' size is known once the whole batch is planned: the images added are
    placed and queued at the first ``views`` or ``images``. Images of several channel counts
    (``color_type='unchanged'``, each decoded by its plan) go into one flat buffer instead."""

    def __init__(self, loader: Any, threads: int, batch_size: int, divisor: int,
                 inflight: Any) -> None:
        super().__init__(loader, threads, batch_size, inflight)
        self.divisor = divisor
        self.planned: list[tuple[int, PendingDecode]] = []
        self.batch: Optional[torch.Tensor] = None

    def add(self, index: int, pending: PendingDecode) -> None:
        self.planned.append((index, pending))

    def images(self) -> list[torch.Tensor]:
        self._place()
        return super().images()

    def views(self) -> list[torch.Tensor]:
        self._place()
        if self.batch is None:
            return super().views()
        return [slot[:, :h, :w] for slot, (_, (_, h, w)) in zip(self.batch, self.layout)]

    @property
    def batch_buffer(self) -> torch.Tensor:
        return super().batch_buffer if self.batch is None else self.batch

    def _place(self) -> None:
        """Place and queue the images added since (once per batch: all of them)."""
        planned, self.planned = self.planned, []
        if not planned:
            return
        shapes = [pending.out_shape for _, pending in planned]
        if len({c for c, _, _ in shapes}) > 1:
            self.capacity_hint = sum(math.prod(shape) for shape in shapes)
            for index, pending in planned:
                BatchDecoder.add(self, index, pending)
            return
        height = padded_size(max(h for _, h, _ in shapes), self.divisor)
        width = padded_size(max(w for _, _, w in shapes), self.divisor)
        self.batch = allocate_batch(torch.empty(0, dtype=torch.uint8),
                                    (len(shapes), shapes[0][0], height, width))
        self.buffer = self.batch.view(-1)
        for position, (index, pending) in enumerate(planned):
            _, height, width = pending.out_shape
            offset = position * self.batch[0].numel()
            self.layout.append((offset, pending.out_shape))
            if pending.encoded is None:  # plan decoded and warped it
                self.batch[position, :, :height, :width].copy_(pending.decoded)
                continue
            warp = pending.warp
            self._submit(index, pending, offset,
                         warp=warp.submitted(),
                         interpolation=INTERPOLATIONS[warp.interpolation],
                         slot_hw=list(self.batch.shape[2:]))
