"""Streams, events and pinned buffers for the host-to-device pixel copies.

Why one module: ``DevicePrefetcher`` needs a side stream, events, ``record_stream`` and
pinned-memory checks. Written against :class:`DeviceStreams` instead of
``torch.cuda`` directly, their ordering -- which copy a step waits for, which buffer is kept
alive on which stream -- runs in the CPU suite with :class:`RecordingStreams` standing in for
the GPU. Streams and events have the shape of ``torch.cuda.Stream`` / ``torch.cuda.Event``
(``wait_event``, ``wait_stream``, ``record_event``; ``record``), so :class:`CudaStreams` hands
out torch's own. Which device the pixels go to at all is ``ops.deferred_pixels_device``'s
answer, shared with ``FastDetDataPreprocessor``.
"""
from typing import Any, Optional, Protocol

import torch



class DeviceStreams(Protocol):
    """What the prefetcher needs from a device: the torch.cuda calls it makes, in one place."""

    device: torch.device

    def current_stream(self) -> Any:
        """The stream the training step runs on (``torch.cuda.current_stream``)."""

    def new_stream(self) -> Any:
        """A side stream for copies (``torch.cuda.Stream``)."""

    def new_event(self) -> Any:
        """An event to record on one stream and wait for on another (``torch.cuda.Event``)."""

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        """Whether a copy of ``tensor`` to the device can be asynchronous (page-locked)."""

    def copy_on(self, stream: Any, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` copied to the device, issued on ``stream`` without waiting for it."""

    def keep_alive(self, tensor: torch.Tensor, stream: Any) -> None:
        """Keep ``tensor``'s memory from reuse until the work queued on ``stream`` so far is
        done (``Tensor.record_stream``): the allocator knows only the stream it came from."""


class CudaStreams:
    """:class:`DeviceStreams` for one CUDA device."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)

    def current_stream(self) -> torch.cuda.Stream:
        return torch.cuda.current_stream(self.device)

    def new_stream(self) -> torch.cuda.Stream:
        return torch.cuda.Stream(self.device)

    def new_event(self) -> torch.cuda.Event:
        return torch.cuda.Event()

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return tensor.is_pinned()

    def copy_on(self, stream: torch.cuda.Stream, tensor: torch.Tensor) -> torch.Tensor:
        with torch.cuda.stream(stream):
            return tensor.to(self.device, non_blocking=True)

    def keep_alive(self, tensor: torch.Tensor, stream: torch.cuda.Stream) -> None:
        tensor.record_stream(stream)


def streams_for(device: torch.device | str) -> Optional[DeviceStreams]:
    """The streams of ``device``; None where copies are synchronous anyway (the CPU)."""
    device = torch.device(device)
    return CudaStreams(device) if device.type == 'cuda' else None


class RecordedEvent:
    """A ``torch.cuda.Event`` stand-in: recording it captures the work queued on a stream."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        self.work: Optional[tuple[str, ...]] = None  # None: never recorded
        self._log = log

    def record(self, stream: 'RecordedStream') -> None:
        self.work = tuple(stream.queued)
        self._log.append(('record', stream.name, *self.work))

    def wait(self, stream: 'RecordedStream') -> None:
        stream.wait_event(self)


class RecordedStream:
    """A ``torch.cuda.Stream`` stand-in: what was queued on it and what it waits for.

    ``awaited`` is every piece of work (of any stream) that this stream's later work depends
    on: what the events it waited for had captured, or all of another stream's queued work for
    ``wait_stream``.
    """

    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name = name
        self.queued: list[str] = []
        self.awaited: set[str] = set()
        self._log = log

    def wait_event(self, event: RecordedEvent) -> None:
        if event.work is None:
            raise AssertionError(f'{self.name} waits for an event that was never recorded')
        self.awaited.update(event.work)
        self._log.append(('wait', self.name, *event.work))

    def wait_stream(self, stream: 'RecordedStream') -> None:
        self.awaited.update(stream.queued)
        self._log.append(('wait', self.name, *stream.queued))

    def record_event(self, event: Optional[RecordedEvent] = None) -> RecordedEvent:
        event = event or RecordedEvent(self._log)
        event.record(self)
        return event


class RecordingStreams:
    """:class:`DeviceStreams` stand-in for the CPU suite: copies are clones, named
    ``copy <n>`` in issue order, and ``log`` lists, in order, the copies, event records, waits
    and keep-alives a GPU run would issue, and the uses :meth:`use` reports.

    ``device`` is the device it stands in for (the CPU by default, where every op has a
    kernel). Every tensor counts as pinned.
    """

    def __init__(self, device: torch.device | str = 'cpu') -> None:
        self.device = torch.device(device)
        self.log: list[tuple[str, ...]] = []
        self.compute = RecordedStream('compute', self.log)
        self._names: dict[int, str] = {}  # id of a copy's result -> its name
        self._side_streams = 0

    def current_stream(self) -> RecordedStream:
        return self.compute

    def new_stream(self) -> RecordedStream:
        self._side_streams += 1
        return RecordedStream(f'side {self._side_streams - 1}', self.log)

    def new_event(self) -> RecordedEvent:
        return RecordedEvent(self.log)

    def is_pinned(self, tensor: torch.Tensor) -> bool:
        return True

    def copy_on(self, stream: RecordedStream, tensor: torch.Tensor) -> torch.Tensor:
        name = f'copy {len(self._names)}'
        copy = tensor.clone()
        self._names[id(copy)] = name
        stream.queued.append(name)
        self.log.append(('copy', stream.name, name))
        return copy

    def keep_alive(self, tensor: torch.Tensor, stream: RecordedStream) -> None:
        self.log.append(('keep_alive', stream.name, self.name_of(tensor)))

    def name_of(self, tensor: torch.Tensor) -> str:
        """``copy <n>`` for a tensor :meth:`copy_on` returned, else ``'not copied'``."""
        return self._names.get(id(tensor), 'not copied')

    def use(self, tensor: torch.Tensor) -> None:
        """Report that the compute stream reads ``tensor`` now."""
        self.log.append(('use', self.name_of(tensor)))
