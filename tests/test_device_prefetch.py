"""``DevicePrefetcher`` / ``DevicePrefetchHook`` on the CPU, with ``RecordingStreams`` standing
in for the GPU: which copy each step waits for, look-ahead across data epochs, and a resumed
iteration-based run with prefetching that repeats the uninterrupted losses (real Runner).
The copies on a real GPU: tests/test_cuda_kernels.py."""
import itertools
import logging

import pytest
import torch

from helpers.resumed_iterators import ids, loop_iterator, uninterrupted_ids
from helpers.tiny_runner import (assert_iter_based_resume_repeats_the_run,
                                 needs_fast_forward_on_resume)
from mmdet_ext.engine import DevicePrefetcher, DevicePrefetchHook, RecordingStreams
from mmdet_ext.engine.hooks.exact_resume_hook import PrepaidIterator
from mmdet_ext.ops import deferred_pixels_device, has_kernel
from mmdet_ext.transforms.fused_loading import PENDING_WARP_KEY


def _deferred_batches(count: int) -> list[dict]:
    return [{'inputs': torch.full((6 + k,), k, dtype=torch.uint8),
             PENDING_WARP_KEY: {'interpolation': 'bilinear'}} for k in range(count)]


def test_step_k_waits_for_copy_k_only_while_copy_k_plus_1_runs():
    streams, batches = RecordingStreams(), _deferred_batches(4)
    for k, batch in enumerate(DevicePrefetcher(iter(batches), streams)):
        assert streams.name_of(batch['inputs']) == f'copy {k}'
        assert torch.equal(batch['inputs'], batches[k]['inputs'])
        # The compute stream depends on copies 0..k, not on copy k+1, already issued.
        assert streams.compute.awaited == {f'copy {i}' for i in range(k + 1)}
        if k + 1 < len(batches):
            assert ('copy', 'side 0', f'copy {k + 1}') in streams.log
        streams.use(batch['inputs'])
    assert streams.log == [
        ('copy', 'side 0', 'copy 0'), ('record', 'side 0', 'copy 0'),
        ('copy', 'side 0', 'copy 1'), ('record', 'side 0', 'copy 0', 'copy 1'),
        ('wait', 'compute', 'copy 0'), ('keep_alive', 'compute', 'copy 0'), ('use', 'copy 0'),
        ('copy', 'side 0', 'copy 2'), ('record', 'side 0', 'copy 0', 'copy 1', 'copy 2'),
        ('wait', 'compute', 'copy 0', 'copy 1'), ('keep_alive', 'compute', 'copy 1'),
        ('use', 'copy 1'),
        ('copy', 'side 0', 'copy 3'),
        ('record', 'side 0', 'copy 0', 'copy 1', 'copy 2', 'copy 3'),
        ('wait', 'compute', 'copy 0', 'copy 1', 'copy 2'), ('keep_alive', 'compute', 'copy 2'),
        ('use', 'copy 2'),
        ('wait', 'compute', 'copy 0', 'copy 1', 'copy 2', 'copy 3'),
        ('keep_alive', 'compute', 'copy 3'), ('use', 'copy 3')]
    assert all(not b['inputs'].is_pinned() for b in batches)  # the batches handed in: as they were


def test_only_deferred_batches_are_copied_and_none_is_a_batch():
    """Other batches pass through uncopied, in order; None (what ``PrepaidIterator`` answers
    for the batches a resumed iteration-based run skips) is a batch, not the end of data."""
    streams = RecordingStreams()
    plain = {'inputs': torch.zeros(3), 'labels': torch.ones(3)}
    deferred = _deferred_batches(1)[0]
    got = list(DevicePrefetcher(PrepaidIterator(iter([plain, deferred]), 2), streams))
    assert got[:3] == [None, None, plain]
    assert streams.name_of(got[3]['inputs']) == 'copy 0'
    assert list(DevicePrefetcher(iter([]), streams)) == []


class _EpochCountingIterator:
    """An ``_InfiniteDataloaderIterator`` stand-in: ``_epoch`` moves on as it draws batch
    ``per_epoch`` of each epoch."""

    def __init__(self, per_epoch: int, total: int) -> None:
        self.per_epoch, self.total, self.drawn, self._epoch = per_epoch, total, 0, 0

    def __next__(self) -> int:
        if self.drawn == self.total:
            raise StopIteration
        self._epoch, self.drawn = self.drawn // self.per_epoch, self.drawn + 1
        return self.drawn - 1


def test_data_epoch_is_that_of_the_batch_handed_out_not_of_the_look_ahead():
    prefetcher = DevicePrefetcher(PrepaidIterator(_EpochCountingIterator(3, 7), 0),
                                  RecordingStreams())
    epochs = [(batch, prefetcher.data_epoch) for batch in prefetcher]
    assert epochs == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 2)]


@pytest.mark.skipif(has_kernel('resize_normalize_batch', 'cuda'),
                    reason='this build has CUDA kernels')
def test_cpu_only_build_keeps_deferred_pixels_on_the_cpu():
    """On a GPU machine, a build without the CUDA kernel resizes on the CPU: the prefetcher
    must not copy the pixels to the GPU only for the preprocessor to copy them back."""
    assert deferred_pixels_device('cuda') == torch.device('cpu')
    assert deferred_pixels_device('cpu') == torch.device('cpu')

    class Loop:
        dataloader_iterator = iter(_deferred_batches(2))

    class FakeRunner:
        train_loop, logger = Loop(), logging.getLogger('test')

    hook = DevicePrefetchHook(streams=RecordingStreams('cuda'))
    hook.before_train_epoch(FakeRunner())
    assert not isinstance(FakeRunner.train_loop.dataloader_iterator, DevicePrefetcher)


@pytest.mark.parametrize('fast_forward', [
    pytest.param(False, id='resume-skips'),
    pytest.param(True, id='fast-forward', marks=needs_fast_forward_on_resume)])
@pytest.mark.parametrize('save_at', [8, 11], ids=['at-epoch-end', 'mid-second-epoch'])
def test_resume_with_prefetch_repeats_the_uninterrupted_losses(tmp_path, save_at, fast_forward,
                                                               no_dataloader_restart_pause):
    """Saved where the look-ahead has already drawn the next data epoch's first batch (8), and
    in the second data epoch (11); resumed with prefetching (the data position counts the
    batch trained on, and the resumed run's skipped iterations are None batches)."""
    loop_options = dict(fast_forward_on_resume=True) if fast_forward else None
    assert_iter_based_resume_repeats_the_run(
        tmp_path, save_at, hooks=[DevicePrefetchHook(streams=RecordingStreams())],
        loop_options=loop_options)


# ---- the fork's resume: IterBasedTrainLoop.run calls dataloader_iterator.skip_iter(n) --------
@pytest.mark.parametrize('resume_at', [3, 6, 8], ids=['mid-epoch', 'epoch-end', 'next-epoch'])
def test_skip_iter_before_the_first_batch_is_the_wrapped_iterators(resume_at,
                                                                   no_dataloader_restart_pause):
    """ExactResumeHook's prepaid batches under the prefetcher, skipped as the fork's loop does:
    then the batches the uninterrupted run draws after them, and their data epochs."""
    iterator, epoch = loop_iterator(resume_at)
    prefetcher = DevicePrefetcher(PrepaidIterator(iterator, resume_at), RecordingStreams())
    prefetcher.skip_iter(resume_at)
    assert prefetcher.data_epoch == epoch
    got = [(batch.tolist(), prefetcher.data_epoch)
           for batch in itertools.islice(prefetcher, 16 - resume_at)]
    assert got == [(batch, (resume_at + k) // 6)
                   for k, batch in enumerate(uninterrupted_ids()[resume_at:])]


def test_skip_iter_after_batches_drops_the_look_ahead_first(no_dataloader_restart_pause):
    prefetcher = DevicePrefetcher(PrepaidIterator(loop_iterator()[0], 0), RecordingStreams())
    assert ids(itertools.islice(prefetcher, 2)) == uninterrupted_ids()[:2]  # batch 2 drawn ahead
    prefetcher.skip_iter(5)  # batches 2-6: the look-ahead, then 4 from the source
    assert prefetcher.data_epoch == 1  # of batch 6, the last one passed over
    assert ids(itertools.islice(prefetcher, 3)) == uninterrupted_ids()[7:10]


def test_skip_iter_waits_for_the_copy_it_drops():
    streams, batches = RecordingStreams(), _deferred_batches(5)
    prefetcher = DevicePrefetcher(iter(batches), streams)
    next(prefetcher)
    prefetcher.skip_iter(2)  # copy 1 was under way: the compute stream waits for it
    assert ('wait', 'compute', 'copy 0', 'copy 1') in streams.log
    assert torch.equal(next(prefetcher)['inputs'], batches[3]['inputs'])
    prefetcher.skip_iter(0)
    assert torch.equal(next(prefetcher)['inputs'], batches[4]['inputs'])
    prefetcher.skip_iter(3)  # past the end: nothing left, and no error
    assert list(prefetcher) == []


def test_skip_iter_without_streams_is_the_sources():
    prefetcher = DevicePrefetcher(PrepaidIterator(iter(range(10)), 2), None)
    prefetcher.skip_iter(4)  # 2 prepaid, then 2 drawn
    assert list(prefetcher) == list(range(2, 10))
