"""Reused batch buffers: real DataLoader workers, real pickling, real shared memory.

What must hold: the training process receives exactly what the worker wrote, however long it
keeps a batch; a segment is reused only once released; views of one segment arrive as views of
one mapping; everything else still travels through torch's own shared memory. The training
process maps each segment once, and keeps no mapping of a segment its worker closed, of a worker
that exited, or in a process it forks.
"""
import gc
import os

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from mmdet_ext import worker_buffers
from mmdet_ext.collate import allocate_batch

BATCH_BYTES = 3 << 20  # over INLINE_MAX_BYTES: pooled
SMALL_BYTES = 4 << 10  # under it: inside the pickle

pytestmark = pytest.mark.skipif(not hasattr(os, 'memfd_create'),
                                reason='the pool needs memfd (Linux)')


class Indices(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> int:
        return index


def fill_batch(indices: list) -> dict:
    """A batch whose bytes say which batch it is (its first index), plus what the worker knows."""
    first = indices[0]
    pixels = allocate_batch(torch.empty(0, dtype=torch.uint8), (BATCH_BYTES,))
    pixels.copy_(torch.arange(BATCH_BYTES, dtype=torch.int64).add_(first).remainder_(251)
                 .to(torch.uint8))
    floats = pixels.view(torch.float32)  # another dtype, same segment
    small = allocate_batch(torch.empty(0, dtype=torch.float32), (SMALL_BYTES // 4,))
    small.copy_(expected_small(first))  # every element differs: a view's offset shows
    # not from allocate_batch, too large to go inside the pickle: torch's shared memory
    middle = torch.full((worker_buffers.INLINE_MAX_BYTES + 1,), first, dtype=torch.uint8)
    shared = (torch.arange(5) + first).share_memory_()  # shared on purpose: stays torch's
    conjugated = torch.tensor([1 + 2j]).conj()  # a view whose storage alone does not tell it
    odd = torch.arange(7, dtype=torch.uint8)[:4].view(torch.int32)  # 7 bytes seen as int32
    pool = worker_buffers._pool
    return {'first': first, 'pixels': pixels, 'rows': [pixels[:1000], pixels[5000:9000]],
            'floats': floats[100:200], 'small': small, 'small_rows': [small[:10], small[10:30]],
            'middle': middle, 'plain': torch.arange(5) + first, 'shared': shared,
            'conjugated': conjugated, 'odd': odd,
            'created': pool.segments_created if pool else 0,
            'token': pool.token if pool else None}


def expected_pixels(first: int) -> torch.Tensor:
    return torch.arange(BATCH_BYTES, dtype=torch.int64).add_(first).remainder_(251) \
        .to(torch.uint8)


def expected_small(first: int) -> torch.Tensor:
    return torch.arange(SMALL_BYTES // 4, dtype=torch.float32).add_(first)


def check(batch: dict) -> None:
    want = expected_pixels(batch['first'])
    assert torch.equal(batch['pixels'], want)
    assert torch.equal(batch['rows'][0], want[:1000])
    assert torch.equal(batch['rows'][1], want[5000:9000])
    assert torch.equal(batch['floats'], want.view(torch.float32)[100:200])
    assert batch['small'].dtype == torch.float32 and batch['small'].shape == (SMALL_BYTES // 4,)
    small = expected_small(batch['first'])
    assert torch.equal(batch['small'], small)
    assert torch.equal(batch['small_rows'][0], small[:10])
    assert torch.equal(batch['small_rows'][1], small[10:30])
    assert bool((batch['middle'] == batch['first'] % 256).all())
    assert torch.equal(batch['plain'], torch.arange(5) + batch['first'])
    assert torch.equal(batch['shared'], torch.arange(5) + batch['first'])
    assert torch.equal(batch['odd'], torch.arange(4, dtype=torch.uint8).view(torch.int32))


def loader(**options) -> DataLoader:
    # A worker that hangs fails the test after 300 s instead of holding CI until its limit.
    return DataLoader(Indices(), batch_size=2, collate_fn=fill_batch, timeout=300, **options)


def test_batches_arrive_intact_and_segments_are_reused():
    batches = 0
    created = []
    for batch in loader(num_workers=1, prefetch_factor=2):
        check(batch)
        # the big buffer came through the pool, as one mapping for all its views
        assert worker_buffers.is_received(batch['pixels'])
        assert not batch['pixels'].is_shared()
        storages = {t.untyped_storage().data_ptr()
                    for t in (batch['pixels'], *batch['rows'], batch['floats'])}
        assert len(storages) == 1
        # small storages inside the pickle, one storage however many views of it
        assert not batch['small'].is_shared() and not batch['plain'].is_shared()
        assert batch['small_rows'][0].untyped_storage().data_ptr() == \
            batch['small'].untyped_storage().data_ptr()
        # larger ones, and any already in shared memory, through torch's shared memory
        assert batch['middle'].is_shared() and batch['shared'].is_shared()
        assert batch['conjugated'].is_shared()  # torch's own way, whatever torch makes of it
        created.append(batch['created'])
        batches += 1
    assert batches == 32
    # When the worker allocates batch k, the batches not yet released are at most k-1 (queued),
    # k-2 (received) and k-3 (still the loop variable while k-1 is fetched): 4 segments at most,
    # for 32 batches.
    assert max(created) <= 4


def test_a_batch_the_training_process_keeps_is_never_overwritten():
    held = list(loader(num_workers=1, prefetch_factor=2))
    assert len(held) == 32
    for batch in held:  # every batch, after the worker wrote all the later ones
        check(batch)
    pooled = [worker_buffers.is_received(batch['pixels']) for batch in held]
    # the pool grew to its limit, then the worker fell back to torch's shared memory
    assert sum(pooled) == worker_buffers.MAX_SEGMENTS
    assert all(batch['pixels'].is_shared() for batch, p in zip(held, pooled) if not p)


def test_releasing_a_batch_lets_the_worker_reuse_its_segment():
    received = []
    iterator = iter(loader(num_workers=1, prefetch_factor=2, persistent_workers=True))
    for _ in range(worker_buffers.MAX_SEGMENTS + 4):
        received.append(next(iterator))
    assert received[-1]['created'] == worker_buffers.MAX_SEGMENTS
    assert not worker_buffers.is_received(received[-1]['pixels'])  # the pool was full
    fetched = len(received)
    received.clear()
    gc.collect()
    pooled, created = [], []
    for batch in iterator:  # each batch dropped before the next
        check(batch)
        pooled.append(worker_buffers.is_received(batch['pixels']))
        created.append(batch['created'])
    # the two batches fetched while the pool was still full came through torch's memory
    assert len(pooled) == 32 - fetched and all(pooled[2:])
    assert max(created) == worker_buffers.MAX_SEGMENTS  # reused, not grown


def kept_by_token() -> dict:
    """{pool token: serials} of the segments whose mappings this process keeps."""
    kept = {}
    for token, serial in list(worker_buffers._kept):
        kept.setdefault(token, set()).add(serial)
    return kept


def test_each_segment_is_mapped_once_then_sent_by_name():
    mapped_before = worker_buffers.mappings_made
    batches = 0
    for batch in loader(num_workers=1, prefetch_factor=2, persistent_workers=True):
        check(batch)  # every reuse of a kept mapping shows what the worker wrote this time
        assert kept_by_token()[batch['token']] <= set(range(batch['created']))
        batches += 1
    assert batches == 32
    # 32 batches through a handful of segments: one mapping each, not one per batch
    assert worker_buffers.mappings_made - mapped_before == batch['created'] <= 4


def grow_batch(indices: list) -> dict:
    """Every batch larger than the last: the worker's pool closes free segments to grow."""
    first = indices[0]
    pixels = allocate_batch(torch.empty(0, dtype=torch.uint8), ((1 << 20) * (1 + first),))
    pixels.fill_(first)
    pool = worker_buffers._pool
    return {'first': first, 'pixels': pixels, 'token': pool.token,
            'live': {s.serial for s in pool.segments}}


def test_mappings_of_closed_segments_are_dropped():
    mapped = 0
    for batch in DataLoader(Indices(), batch_size=1, collate_fn=grow_batch, timeout=300,
                            num_workers=1, prefetch_factor=2):
        assert bool((batch['pixels'] == batch['first']).all())
        # what the worker closed before sending this batch, it said in it
        assert kept_by_token()[batch['token']] <= batch['live']
        mapped = max(mapped, len(kept_by_token()[batch['token']]))
    assert mapped <= worker_buffers.MAX_SEGMENTS


def test_mappings_of_exited_workers_are_dropped():
    batches = loader(num_workers=1, prefetch_factor=2)  # a new worker each epoch
    first_epoch = set()
    for batch in batches:
        first_epoch.add(batch['token'])
        assert batch['token'] in kept_by_token()
    for batch in batches:  # the first epoch's worker exited (joined at its epoch's end)
        check(batch)
        assert batch['token'] not in first_epoch
        assert first_epoch.isdisjoint(kept_by_token())


def test_a_forked_process_keeps_no_mapping():
    held = next(iter(loader(num_workers=1, persistent_workers=True)))
    assert worker_buffers.kept_mappings() > 0
    child = os.fork()
    if child == 0:
        os._exit(0 if worker_buffers.kept_mappings() == 0 else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    check(held)


def test_a_segment_sent_by_name_that_was_never_mapped_is_a_clear_error():
    name = worker_buffers._SegmentName(token=12345, pid=os.getpid(), serial=3)
    with pytest.raises(RuntimeError, match=f'worker {os.getpid()} sent segment 3 .*no mapping'):
        worker_buffers._receive_segment(name, None, worker_buffers.HEADER_BYTES + 4096, [])


def test_views_outlive_the_batch_they_came_with():
    kept = [batch['rows'][1] for batch in loader(num_workers=2)]
    for position, row in enumerate(kept):
        assert torch.equal(row, expected_pixels(2 * position)[5000:9000])


def test_spawned_workers_send_through_the_pool_too():
    for batch in loader(num_workers=2, multiprocessing_context='spawn'):
        check(batch)
        assert worker_buffers.is_received(batch['pixels'])


def test_outside_a_worker_nothing_is_pooled():
    assert worker_buffers.allocate(BATCH_BYTES) is None
    batch = fill_batch([3])
    check(batch)
    assert batch['created'] == 0
    assert not worker_buffers.is_pooled(batch['pixels'].untyped_storage())


def test_capacity_rounding():
    for nbytes in (1 << 20, (1 << 20) + 1, 3_000_001, 25_804_800):
        capacity = worker_buffers._rounded_capacity(nbytes)
        assert nbytes <= capacity <= nbytes * 1.125
        assert capacity % worker_buffers.HEADER_BYTES == 0
    assert np.all(np.diff([worker_buffers._rounded_capacity(n) for n in range(1 << 20, 1 << 21,
                                                                              4099)]) >= 0)
