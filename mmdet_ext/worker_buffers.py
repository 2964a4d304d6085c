"""How a DataLoader worker sends a batch's tensors: images in segments it reuses, small
tensors inside the pickle; torch's shared memory for the rest.

Why: torch sends every CPU tensor from a worker through a new shared-memory segment whose file
descriptor the training process fetches from the worker over a socket. For a batch's images,
the kernel then allocates, zeroes and maps every page as the worker first writes it, and frees
them all when the training process lets go: on a padded 8 x 3 x 800 x 1344 batch that costs
three times the copy itself. For a small tensor (boxes, labels, shapes) the segment and the
socket round trip cost about 0.6 ms of CPU whatever the size, where its bytes inside the pickle
cost microseconds (benchmarks/results/worker_buffers.md).

How:

* ``allocate(nbytes)`` in a worker returns a plain uint8 tensor up to ``INLINE_MAX_BYTES``, a
  tensor over a pooled segment above it, and None when the pool is full of busy segments (the
  caller then uses torch's shared memory, as before).
* A pooled segment is a ``memfd`` (Linux) of ``HEADER_BYTES`` + capacity, mapped by the worker.
  Its header holds two counters: how many times the worker sent it (written only by the worker)
  and how many of those the training process has released (written only there). It is free
  when no tensor in the worker uses it and ``released == sent``.
* Sending: ``install_sender()`` registers a pickling reducer for ``torch.Tensor`` in the worker.
  A tensor over a pooled segment travels as the segment (its file descriptor, once per batch
  however many views of it the batch holds) plus the view's dtype, offset, shape and strides;
  ``sent`` goes up by one. A tensor whose storage is at most ``INLINE_MAX_BYTES`` and not in
  shared memory travels as that storage's bytes (once per batch too) plus the same view. Every
  other tensor goes through torch's own reducer.
* Receiving: the training process rebuilds the views as plain CPU tensors (``is_shared()`` is
  False), over its mapping of the segment or a copy of the bytes. When the last view of a
  segment is gone, ``released`` goes up by one.
* Mappings kept: the training process maps a segment once and keeps the mapping, with its pid
  in the segment's header (``mapped_by``). Seeing it there, the worker sends the segment again
  as its name only: no file descriptor over multiprocessing's socket, no new mapping, and none
  of the page faults a fresh mapping takes on its first read of every page (about 0.4 us a
  page: 2.7 ms for a padded 8 x 3 x 800 x 1344 batch). A mapping is dropped when its worker
  says it closed the segment (in the next segment it sends) or when the worker has exited
  (checked at each receive); its memory goes when its last view does.

The training process may keep a batch as long as it likes: a segment is never written while it
holds any view of it, so nothing it received changes under it. A batch that is never received
(a DataLoader shut down with batches in its queue) leaves its segment busy; the pool then grows,
up to ``MAX_SEGMENTS``, and beyond that the worker falls back to torch's shared memory.
"""
import mmap
import os
import threading
import weakref
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import NamedTuple, Optional

import numpy as np
import torch
# Registers torch's reducers with ForkingPickler: install_sender() wraps the one for tensors.
import torch.multiprocessing  # noqa: F401

from ._torch_compat import has_dimension_names

# Three int64 counters (sent, released, mapped_by), padded so the data is 64-byte aligned.
HEADER_BYTES = 64
# Up to this, a storage travels inside the pickle; above it, in a pooled segment. A shared-memory
# segment and the passing of its file descriptor cost about 0.6 ms of CPU whatever the size;
# bytes inside the pickle are copied twice and written through a pipe. Measured per batch of
# one tensor, CPU of both processes: 64 KiB 0.53 ms inline, 0.98 pooled; 256 KiB 1.05 and 1.32;
# 900 KiB 3.43 and 1.81 (ad hoc, with torch's own way at 1.32, 1.79 and 2.36).
INLINE_MAX_BYTES = 256 << 10
# Segments one worker keeps: the batches it may have in flight (prefetch_factor, 2 by default)
# plus those the training process holds, with room to spare.
MAX_SEGMENTS = 8
SENT, RELEASED, MAPPED_BY = 0, 1, 2
# Whether the training process keeps its mappings of the segments it receives (the benchmark
# turns it off to measure a fresh mapping per batch side by side).
KEEP_MAPPINGS = True


class _Segment:
    """One memfd of ``HEADER_BYTES + capacity`` bytes, mapped in the worker that created it."""

    def __init__(self, capacity: int, serial: int) -> None:
        self.capacity = capacity
        self.serial = serial  # its name in the pool, for the training process's kept mapping
        self.fd = os.memfd_create('mmdet_ext_batch', os.MFD_CLOEXEC)
        os.ftruncate(self.fd, HEADER_BYTES + capacity)
        self.map = mmap.mmap(self.fd, HEADER_BYTES + capacity)
        self.counters = np.frombuffer(self.map, np.int64, count=3)
        self.address = self.counters.ctypes.data + HEADER_BYTES
        self.sent = 0
        self.in_use: Optional[weakref.ref] = None  # the worker's array of the current allocation
        self.handle: Optional[_SentSegment] = None

    def is_free(self) -> bool:
        live = self.in_use is not None and self.in_use() is not None
        return not live and int(self.counters[RELEASED]) == self.sent

    def allocate(self, nbytes: int) -> torch.Tensor:
        array = np.frombuffer(self.map, np.uint8, count=nbytes, offset=HEADER_BYTES)
        self.in_use = weakref.ref(array)
        # One handle per allocation: every view of it in one pickled batch refers to this object,
        # so pickle's memo sends the segment once.
        self.handle = _SentSegment(self)
        return torch.from_numpy(array)

    def is_kept_by_parent(self) -> bool:
        """Whether the training process (this worker's parent) keeps a mapping of it."""
        return int(self.counters[MAPPED_BY]) == os.getppid()

    def close(self) -> None:
        del self.counters
        self.map.close()
        os.close(self.fd)


class _SentSegment:
    """What a tensor over a pooled segment pickles as: the segment, once per batch."""

    def __init__(self, segment: _Segment) -> None:
        self.segment = segment

    def __reduce__(self):
        segment, pool = self.segment, _own_pool()
        segment.sent += 1
        segment.counters[SENT] = segment.sent
        fd = None if segment.is_kept_by_parent() else DupFd(segment.fd)
        closed, pool.closed_serials = pool.closed_serials, []
        return _receive_segment, (_SegmentName(pool.token, os.getpid(), segment.serial), fd,
                                  HEADER_BYTES + segment.capacity, closed)


class _SegmentName(NamedTuple):
    """Which segment of which worker: ``token`` is random per pool (a pid can be reused)."""
    token: int
    pid: int
    serial: int


class _Pool:
    """The segments of this worker process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.token = int.from_bytes(os.urandom(8), 'little')
        self.segments_created = 0  # for tests and diagnostics: how often the pool grew
        # Closed segments the training process may keep a mapping of, told in the next send.
        self.closed_serials: list[int] = []
        self.segments: list[_Segment] = []
        self.by_address: dict[int, _Segment] = {}

    def allocate(self, nbytes: int) -> Optional[torch.Tensor]:
        free = [s for s in self.segments if s.is_free()]
        fits = [s for s in free if s.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda s: s.capacity).allocate(nbytes)
        if free:  # replace the largest free one: the pool holds as many segments as it needs
            self._drop(max(free, key=lambda s: s.capacity))
        elif len(self.segments) >= MAX_SEGMENTS:
            return None
        segment = _Segment(_rounded_capacity(nbytes), self.segments_created)
        self.segments_created += 1
        self.segments.append(segment)
        self.by_address[segment.address] = segment
        return segment.allocate(nbytes)

    def _drop(self, segment: _Segment) -> None:
        if segment.is_kept_by_parent():
            self.closed_serials.append(segment.serial)
        self.segments.remove(segment)
        del self.by_address[segment.address]
        segment.close()


def _rounded_capacity(nbytes: int) -> int:
    """``nbytes`` rounded up to an eighth of its power of two: a batch slightly larger than the
    last one still fits, at most 12.5% is unused."""
    step = max(1 << (nbytes.bit_length() - 1) >> 3, HEADER_BYTES)
    return -(-nbytes // step) * step


_pool: Optional[_Pool] = None


def _own_pool() -> Optional[_Pool]:
    """This process's pool, if it made one (a forked worker does not use its parent's)."""
    return _pool if _pool is not None and _pool.pid == os.getpid() else None


def _worker_pool() -> Optional[_Pool]:
    """This worker's pool, made on first use; None where memfd does not exist."""
    global _pool
    if not hasattr(os, 'memfd_create'):
        return None
    if _own_pool() is None:
        _pool = _Pool()
    return _pool


def allocate(nbytes: int) -> Optional[torch.Tensor]:
    """In a DataLoader worker, a uint8 Tensor[nbytes] for data to send to the training process:
    a plain tensor up to ``INLINE_MAX_BYTES`` (it travels inside the pickle), else a reused
    shared segment. None when every segment is busy, and outside a worker: the caller then
    takes torch's shared memory, or ordinary memory."""
    if torch.utils.data.get_worker_info() is None:
        return None
    install_sender()
    if nbytes <= INLINE_MAX_BYTES:
        return torch.empty(nbytes, dtype=torch.uint8)
    pool = _worker_pool()
    return None if pool is None else pool.allocate(nbytes)


def is_pooled(storage: torch.UntypedStorage) -> bool:
    """Whether ``storage`` is a segment of this process's pool (it is sent without a copy)."""
    pool = _own_pool()
    return pool is not None and storage.data_ptr() in pool.by_address


_torch_reduce_tensor = None


def install_sender() -> None:
    """Register ``_reduce_tensor`` for ``torch.Tensor`` with ``ForkingPickler`` (once)."""
    global _torch_reduce_tensor
    if _torch_reduce_tensor is None:
        _torch_reduce_tensor = ForkingPickler._extra_reducers[torch.Tensor]
        ForkingPickler.register(torch.Tensor, _reduce_tensor)


def _reduce_tensor(tensor: torch.Tensor):
    """A pooled segment's view, or a small storage's (inline): sent by us; else by torch."""
    if _is_plain(tensor):
        storage = tensor.untyped_storage()
        pool = _own_pool()
        segment = pool.by_address.get(storage.data_ptr()) if pool is not None else None
        if segment is not None:
            sent = segment.handle
        elif storage.nbytes() <= INLINE_MAX_BYTES and not storage.is_shared():
            sent = _inline_storage(storage)
        else:  # large, or in torch's shared memory: someone shared it on purpose
            sent = None
        if sent is not None:
            return _receive_view, (sent, tensor.dtype, tensor.storage_offset(),
                                   tuple(tensor.shape), tuple(tensor.stride()))
    return _torch_reduce_tensor(tensor)


def _is_plain(tensor: torch.Tensor) -> bool:
    """A dense CPU tensor that a storage, a dtype and a view describe completely (no autograd,
    names, quantization, or conjugate and negative bits): what ``_receive_view`` rebuilds."""
    return tensor.device.type == 'cpu' and tensor.layout == torch.strided and \
        not tensor.requires_grad and not tensor.is_quantized and not tensor.is_nested and \
        not tensor.is_conj() and not tensor.is_neg() and not has_dimension_names(tensor)


class _InlineStorage:
    """A small storage, sent as bytes inside the pickle: once per batch, however many views of
    it the batch holds (every view's reduce finds this object: pickle's memo sends it once)."""

    def __init__(self, storage: torch.UntypedStorage) -> None:
        self.storage = storage

    def __reduce__(self):
        data = torch.empty(0, dtype=torch.uint8).set_(self.storage).numpy().tobytes()
        return _receive_inline, (data,)


# The holder of each storage being pickled, by address: it holds the storage, so the address
# cannot be reused while the entry exists; the pickler's memo keeps it alive for one batch.
_inline_holders: 'weakref.WeakValueDictionary[int, _InlineStorage]' = \
    weakref.WeakValueDictionary()


def _inline_storage(storage: torch.UntypedStorage) -> _InlineStorage:
    holder = _inline_holders.get(storage.data_ptr())
    if holder is None:
        holder = _inline_holders[storage.data_ptr()] = _InlineStorage(storage)
    return holder


def _receive_inline(data: bytes) -> torch.Tensor:
    base = torch.empty(len(data), dtype=torch.uint8)  # aligned for any dtype's view
    base.numpy()[:] = np.frombuffer(data, np.uint8)
    return base


# Release counts are read-modify-writes, and tensors die on any thread (pin_memory's too).
_release_lock = threading.Lock()


# Where the segments this process received and still holds lie (is_received).
_received: set[int] = set()


def _release(counters: np.ndarray, address: int) -> None:
    # The views were read before their last reference went (torch's reference counts order
    # that); the worker reads this counter before it writes the segment again.
    with _release_lock:
        _received.discard(address)
        counters[RELEASED] += 1


def is_received(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is a view of a segment a worker's pool sent to this process."""
    return tensor.untyped_storage().data_ptr() in _received


def _receive_segment(name: _SegmentName, fd: Optional[DupFd], size: int,
                     closed: list[int]) -> torch.Tensor:
    """The training process's mapping of a segment, as bytes; released when these views die.

    ``fd`` is None when the worker saw this process keeps a mapping of it; ``closed``, the
    worker's segments closed since its last send, whose kept mappings are dropped.
    """
    key = (name.token, name.serial)
    with _kept_lock:
        for serial in closed:
            _kept.pop((name.token, serial), None)
        _forget_exited_workers()
        if fd is not None:  # first sent, or this process does not keep its mappings
            mapping = _map_segment(fd, size)
            if KEEP_MAPPINGS:
                _kept[key], _kept_pids[name.token] = mapping, name.pid
                mapping.counters[MAPPED_BY] = os.getpid()
        elif key in _kept:
            mapping = _kept[key]
        else:
            raise RuntimeError(f'worker_buffers: DataLoader worker {name.pid} sent segment '
                               f'{name.serial} as mapped by this process, which holds no mapping '
                               'of it')
    # A new array object per receive: its death (with the last view) is this send's release.
    data = mapping.data[:]
    address = data.ctypes.data
    _received.add(address)
    weakref.finalize(data, _release, mapping.counters, address)
    return torch.from_numpy(data)


class _Mapping(NamedTuple):
    counters: np.ndarray
    data: np.ndarray  # the bytes after the header; the mapping lives as long as an array of it


def _map_segment(fd: DupFd, size: int) -> _Mapping:
    global mappings_made
    mappings_made += 1
    descriptor = fd.detach()
    try:
        mapping = mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
    return _Mapping(np.frombuffer(mapping, np.int64, count=3),
                    np.frombuffer(mapping, np.uint8, offset=HEADER_BYTES))


mappings_made = 0  # for tests and diagnostics: segments this process mapped
# The mappings this process keeps, by (pool token, serial), and each pool's worker pid.
_kept: dict[tuple[int, int], _Mapping] = {}
_kept_pids: dict[int, int] = {}
_kept_lock = threading.Lock()  # the pin_memory thread receives too


def _forget_exited_workers() -> None:
    """Drop the kept mappings of workers that have exited (a DataLoader's end, or non-persistent
    workers' epoch end): nothing will send them again. Called with ``_kept_lock`` held."""
    for token, pid in list(_kept_pids.items()):
        try:
            os.kill(pid, 0)
            continue  # alive
        except PermissionError:  # alive, as another user: kept (a worker may drop privileges)
            continue
        except ProcessLookupError:
            pass
        del _kept_pids[token]
        for key in [key for key in _kept if key[0] == token]:
            del _kept[key]


def kept_mappings() -> int:
    """How many segments' mappings this process keeps (for tests and diagnostics)."""
    with _kept_lock:
        return len(_kept)


def _forget_kept_in_child() -> None:
    # A forked process (a DataLoader worker of this one) must not keep the segments of other
    # workers alive; and a lock another thread held at the fork would stay held in it forever.
    global _kept_lock, _release_lock
    _kept_lock, _release_lock = threading.Lock(), threading.Lock()
    _kept.clear()
    _kept_pids.clear()


os.register_at_fork(after_in_child=_forget_kept_in_child)


def _receive_view(base: torch.Tensor, dtype: torch.dtype, offset: int, shape: tuple,
                  stride: tuple) -> torch.Tensor:
    """A view of a received storage (``base``: its bytes), as the worker's tensor was."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    # A storage of an odd size seen through a wider dtype: its tail is no element of the view.
    whole = base[:base.numel() - base.numel() % itemsize]
    return whole.view(dtype).as_strided(shape, stride, offset)
