"""``DevicePrefetchHook``: the next deferred batch goes to the GPU on a side stream while the
current step runs."""
from collections.abc import Iterator
from typing import Any, NamedTuple, Optional

import torch
from mmengine.hooks import Hook

from ..._compat import data_epoch, skip_batches
from ...ops import deferred_pixels_device
from ...registry import HOOKS
from ...transforms.fused_loading import PENDING_WARP_KEY
from ..device_streams import DeviceStreams, streams_for


class _Prefetched(NamedTuple):
    batch: Any
    ready: Any  # event recorded on the side stream after this batch's copy; None: no copy
    data_epoch: int  # the source's data epoch right after this batch was drawn


_END = object()  # the source ran out (a batch may be None: PrepaidIterator's answers)


class DevicePrefetcher:
    """Wraps a batch iterator: when batch k is handed out, the host-to-device copy of batch
    k+1's pixels (a ``fast_collate`` deferred batch in pinned memory) is already under way on a
    side stream, so it overlaps step k.

    Before batch k is handed out, the compute stream waits for the event recorded right after
    batch k's copy -- not for the side stream as a whole, which by then also holds batch k+1's
    copy -- and the copied buffer is kept alive on the compute stream. Other batches and
    unpinned buffers pass through uncopied; the order of batches never changes, and the batch
    dicts are copied, not modified. ``streams`` None: no look-ahead, no copies.

    ``data_epoch`` is the data epoch of the batch handed out last (``_compat.data_epoch``):
    the look-ahead has drawn one batch further, possibly into the next epoch. ``skip_iter(n)``
    (the fork's ``IterBasedTrainLoop`` resumes through it) passes over the next n batches, the
    look-ahead first, without copying them.
    """

    def __init__(self, iterator: Iterator, streams: Optional[DeviceStreams]) -> None:
        self._iterator = iterator
        self._streams = streams
        self._side: Optional[Any] = None
        self._pending: Any = None
        self.data_epoch = data_epoch(iterator)

    def __iter__(self) -> 'DevicePrefetcher':
        return self

    def __next__(self) -> Any:
        if self._streams is None:
            batch = next(self._iterator)
            self.data_epoch = data_epoch(self._iterator)
            return batch
        if self._pending is None:
            self._pending = self._start(self._pull())
        current = self._pending
        if current is _END:
            raise StopIteration
        self._pending = self._start(self._pull())
        self.data_epoch = current.data_epoch
        return self._ready(current)

    def skip_iter(self, num_iters: int) -> None:
        """Pass over the next ``num_iters`` batches: the one already drawn ahead (its copy is
        waited for, then dropped), then the source's (``_compat.skip_batches``)."""
        if num_iters <= 0 or self._pending is _END:
            return
        if self._pending is not None:
            self._ready(self._pending)  # its buffer is freed once the copy has run
            self.data_epoch = self._pending.data_epoch
            self._pending, num_iters = None, num_iters - 1
        if num_iters > 0:
            skip_batches(self._iterator, num_iters)
            self.data_epoch = data_epoch(self._iterator)

    def _pull(self) -> Any:
        try:
            batch = next(self._iterator)
        except StopIteration:
            return _END
        return _Prefetched(batch, None, data_epoch(self._iterator))

    def _start(self, item: Any) -> Any:
        """Issue the copy of a deferred batch's pixels on the side stream, and record the
        event the compute stream will wait for."""
        if item is _END or not self._copies(item.batch):
            return item
        if self._side is None:
            self._side = self._streams.new_stream()
        inputs = self._streams.copy_on(self._side, item.batch['inputs'])
        ready = self._streams.new_event()
        ready.record(self._side)
        return item._replace(batch={**item.batch, 'inputs': inputs}, ready=ready)

    def _copies(self, batch: Any) -> bool:
        # Not encoded files (decode_on='device'): nvJPEG reads them from host memory.
        return (isinstance(batch, dict) and batch.get(PENDING_WARP_KEY) is not None
                and batch[PENDING_WARP_KEY].get('encoded_sizes') is None
                and isinstance(batch.get('inputs'), torch.Tensor)
                and self._streams.is_pinned(batch['inputs']))

    def _ready(self, item: _Prefetched) -> Any:
        """Make the compute stream wait for this batch's copy only, and keep the buffer alive
        until it is used there (the caching allocator knows only the side stream)."""
        if item.ready is not None:
            current = self._streams.current_stream()
            current.wait_event(item.ready)
            self._streams.keep_alive(item.batch['inputs'], current)
        return item.batch


class _PrefetchingLoader:
    """A DataLoader whose iterators prefetch (every other attribute is the DataLoader's)."""

    def __init__(self, loader: Any, streams: DeviceStreams) -> None:
        self.loader, self.streams = loader, streams

    def __iter__(self) -> DevicePrefetcher:
        return DevicePrefetcher(iter(self.loader), self.streams)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


@HOOKS.register_module()
class DevicePrefetchHook(Hook):
    """With a model on a CUDA device, wrap the train loop's batches in ``DevicePrefetcher``.

    For ``NativeLoadResizeFlip(pixels_on='device')`` pipelines with ``pin_memory=True`` (or
    ``WorkerDefaultsHook``): the uint8 pixels of the next batch are copied during the current
    step, and ``FastDetDataPreprocessor`` finds them already on the device. It does nothing
    without CUDA, and nothing where this build has no ``resize_normalize_batch`` kernel for
    the model's device (a CPU-only build on a GPU machine: the preprocessor resizes on the
    CPU, and pixels copied to the GPU would only be copied back). Epoch-based loops iterate a
    wrapped DataLoader, iteration-based loops a wrapped iterator.

    Args:
        streams: the device interface to use (tests: ``RecordingStreams``); None: the model's
            device's (``device_streams.streams_for``).
    """

    priority = 'LOW'

    def __init__(self, streams: Optional[DeviceStreams] = None) -> None:
        self.streams = streams
        self._said_why_not = False

    def before_train_epoch(self, runner: Any) -> None:
        streams = self.streams
        if streams is None:
            device = self._model_device(runner)
            streams = None if device is None else streams_for(device)
        if streams is None:
            return
        if deferred_pixels_device(streams.device) != streams.device:
            if not self._said_why_not:
                self._said_why_not = True
                runner.logger.info(f'DevicePrefetchHook: this build has no resize_normalize_batch '
                                   f'kernel for {streams.device}: the pixels stay on the CPU')
            return
        loop = runner.train_loop
        if hasattr(loop, 'dataloader_iterator'):  # IterBasedTrainLoop
            if not isinstance(loop.dataloader_iterator, DevicePrefetcher):
                loop.dataloader_iterator = DevicePrefetcher(loop.dataloader_iterator, streams)
        elif not isinstance(loop.dataloader, _PrefetchingLoader):
            loop.dataloader = _PrefetchingLoader(loop.dataloader, streams)

    @staticmethod
    def _model_device(runner: Any) -> Optional[torch.device]:
        parameter = next(runner.model.parameters(), None)
        return None if parameter is None else parameter.device
