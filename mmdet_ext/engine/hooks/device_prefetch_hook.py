"""``DevicePrefetchHook``: the next deferred batch goes to the GPU on a side stream while the
current step runs."""
from collections.abc import Iterator
from typing import Any, Optional

import torch
from mmengine.hooks import Hook

from ...registry import HOOKS
from ...transforms.fused_loading import PENDING_WARP_KEY


class DevicePrefetcher:
    """Wraps a batch iterator: when batch k is handed out, the host-to-device copy of batch k+1's
    pixels (a ``fast_collate`` deferred batch in pinned memory) is already under way on a side
    CUDA stream, so it overlaps step k instead of waiting for it on the compute stream.

    Other batches, unpinned buffers and a CPU ``device`` pass through unchanged; the order of
    batches never changes. The batch dicts are copied, not modified.
    """

    def __init__(self, iterator: Iterator, device: torch.device) -> None:
        self._iterator = iterator
        self._device = torch.device(device)
        cuda = self._device.type == 'cuda'
        self._stream: Optional[Any] = torch.cuda.Stream(self._device) if cuda else None
        self._pending: Optional[Any] = None
        self._exhausted = False

    def __iter__(self) -> 'DevicePrefetcher':
        return self

    def __next__(self) -> Any:
        if self._pending is None and not self._exhausted:
            self._pending = self._start(self._pull())
        if self._pending is None:
            raise StopIteration
        current, self._pending = self._pending, self._start(self._pull())
        return self._ready(current)

    def _pull(self) -> Optional[Any]:
        if self._exhausted:
            return None
        try:
            return next(self._iterator)
        except StopIteration:
            self._exhausted = True
            return None

    def _start(self, batch: Optional[Any]) -> Optional[Any]:
        """Issue the copy of a deferred batch's pixels on the side stream."""
        if (self._stream is None or not isinstance(batch, dict)
                or batch.get(PENDING_WARP_KEY) is None or not batch['inputs'].is_pinned()):
            return batch
        with torch.cuda.stream(self._stream):
            return {**batch, 'inputs': batch['inputs'].to(self._device, non_blocking=True)}

    def _ready(self, batch: Any) -> Any:
        """Make the compute stream wait for the copy, and keep the buffer alive until it is used
        there (the caching allocator would otherwise reuse it once the side stream is done)."""
        if self._stream is not None and isinstance(batch, dict) and \
                isinstance(batch.get('inputs'), torch.Tensor) and batch['inputs'].is_cuda:
            current = torch.cuda.current_stream(self._device)
            current.wait_stream(self._stream)
            batch['inputs'].record_stream(current)
        return batch


class _PrefetchingLoader:
    """A DataLoader whose iterators prefetch (every other attribute is the DataLoader's)."""

    def __init__(self, loader: Any, device: torch.device) -> None:
        self.loader, self.device = loader, device

    def __iter__(self) -> DevicePrefetcher:
        return DevicePrefetcher(iter(self.loader), self.device)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)


@HOOKS.register_module()
class DevicePrefetchHook(Hook):
    """With a model on a CUDA device, wrap the train loop's batches in ``DevicePrefetcher``.

    For ``NativeLoadResizeFlip(pixels_on='device')`` pipelines with ``pin_memory=True`` (or
    ``WorkerDefaultsHook``): the uint8 pixels of the next batch are copied during the current
    step, and ``FastDetDataPreprocessor`` finds them already on the device. Without CUDA it does
    nothing. Epoch-based loops iterate a wrapped DataLoader, iteration-based loops a wrapped
    iterator.
    """

    priority = 'LOW'

    def before_train_epoch(self, runner: Any) -> None:
        device = self._model_device(runner)
        if device is None or device.type != 'cuda':
            return
        loop = runner.train_loop
        if hasattr(loop, 'dataloader_iterator'):  # IterBasedTrainLoop
            if not isinstance(loop.dataloader_iterator, DevicePrefetcher):
                loop.dataloader_iterator = DevicePrefetcher(loop.dataloader_iterator, device)
        elif not isinstance(loop.dataloader, _PrefetchingLoader):
            loop.dataloader = _PrefetchingLoader(loop.dataloader, device)

    @staticmethod
    def _model_device(runner: Any) -> Optional[torch.device]:
        parameter = next(runner.model.parameters(), None)
        return None if parameter is None else parameter.device
