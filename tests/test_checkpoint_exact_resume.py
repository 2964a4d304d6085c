"""Interrupted-then-resumed training repeats the uninterrupted run's losses, in the real Runner,
with OpenMMLab's resume (the loop replays the done batches with next()) and the fork's (one
dataloader_iterator.skip_iter(n), or nothing with fast_forward_on_resume)."""
import itertools

import pytest
from mmengine.hooks import Hook
from mmengine.runner import Runner

from helpers.tiny_runner import (LossRecorderHook, RunnerLogRecorder,
                                 assert_iter_based_resume_repeats_the_run,
                                 needs_fast_forward_on_resume, read_losses, tiny_runner_kwargs)
from helpers.resumed_iterators import ids, loop_iterator, uninterrupted_ids
from mmdet_ext.engine.hooks.exact_resume_hook import PrepaidIterator


class SimulatedCrash(Exception):
    pass


class CrashAtEpoch(Hook):
    """Dies at the start of ``epoch`` (after the previous epoch's checkpoint and validation)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def before_train_epoch(self, runner) -> None:
        if runner.epoch == self.epoch:
            raise SimulatedCrash


def _run(work_dir, name, losses, *, exact_hook=True, **kwargs) -> None:
    runner_kwargs = tiny_runner_kwargs(str(work_dir), experiment_name=name, max_epochs=4,
                                       **kwargs)
    runner_kwargs['custom_hooks'] = [
        hook for hook in runner_kwargs['custom_hooks']
        if exact_hook or not (isinstance(hook, dict) and hook['type'] == 'ExactResumeHook')
    ] + [LossRecorderHook(str(losses))]
    Runner(**runner_kwargs).train()


@pytest.fixture(scope='module', params=[True, False], ids=['with-ExactResumeHook', 'without'])
def exact_hook(request) -> bool:
    return request.param


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory, exact_hook) -> dict[int, float]:
    work_dir = tmp_path_factory.mktemp('uninterrupted')
    _run(work_dir, f'uninterrupted-{exact_hook}', work_dir / 'losses.jsonl',
         exact_hook=exact_hook)
    return read_losses(str(work_dir / 'losses.jsonl'))


def test_resumed_run_repeats_uninterrupted_losses(uninterrupted, tmp_path, exact_hook):
    losses = tmp_path / 'losses.jsonl'
    with pytest.raises(SimulatedCrash):
        _run(tmp_path, f'crash-{exact_hook}', losses, exact_hook=exact_hook,
             custom_hooks=[CrashAtEpoch(2)])
    # The restart knows no seed: the sampler seed and RNG state must come from the checkpoint.
    _run(tmp_path, f'resume-{exact_hook}', losses, exact_hook=exact_hook, resume=True, seed=None)
    resumed = read_losses(str(losses))
    assert sorted(resumed) == sorted(uninterrupted) == list(range(16))
    assert [resumed[i] for i in range(8)] == [uninterrupted[i] for i in range(8)]
    if exact_hook:
        assert resumed == uninterrupted
    else:  # the control: what stock mmengine restores does not reproduce the run
        assert [resumed[i] for i in range(8, 16)] != [uninterrupted[i] for i in range(8, 16)]


@pytest.mark.parametrize('save_at', [8, 11], ids=['at-epoch-end', 'mid-second-epoch'])
def test_iteration_based_resume_in_a_later_data_epoch(tmp_path, save_at,
                                                      no_dataloader_restart_pause):
    """DefaultSampler in an iteration-based loop: the resumed run remakes the iterator at data
    epoch 1 before DistSamplerSeedHook sets the sampler to the loop's epoch 0; the order must
    still be data epoch 1's."""
    assert_iter_based_resume_repeats_the_run(tmp_path, save_at)

@needs_fast_forward_on_resume
@pytest.mark.parametrize('save_at', [5, 8, 11],
                         ids=['mid-first-epoch', 'at-epoch-end', 'mid-second-epoch'])
def test_fast_forward_on_resume_still_repeats_the_run(tmp_path, save_at,
                                                      no_dataloader_restart_pause):
    """The fork's loop then skips nothing; the data continues at the saved position all the
    same (and no None batch from PrepaidIterator reaches the model)."""
    assert_iter_based_resume_repeats_the_run(
        tmp_path, save_at, loop_options=dict(fast_forward_on_resume=True))


def test_iteration_based_runs_gather_rng_state_only_for_checkpoints(tmp_path, monkeypatch):
    """The snapshot is a collective in distributed runs: taken when a checkpoint is saved, not
    in every iteration."""
    import mmdet_ext.engine.hooks.exact_resume_hook as exact_resume
    gathers = []
    gather = exact_resume.all_gather_object
    monkeypatch.setattr(exact_resume, 'all_gather_object',
                        lambda obj: gathers.append(obj) or gather(obj))
    kwargs = tiny_runner_kwargs(str(tmp_path), with_val=False,
                                train_cfg=dict(type='IterBasedTrainLoop', max_iters=7))
    kwargs['train_dataloader']['sampler'] = dict(type='InfiniteSampler', shuffle=True)
    kwargs['default_hooks'] = dict(checkpoint=dict(type='AtomicCheckpointHook', interval=3,
                                                   by_epoch=False))
    kwargs['param_scheduler'] = None
    Runner(**kwargs).train()
    assert sorted(p.name for p in tmp_path.glob('iter_*.pth')) == \
        ['iter_3.pth', 'iter_6.pth', 'iter_7.pth']
    assert len(gathers) == 3


# ---- the fork's resume protocol: IterBasedTrainLoop.run calls dataloader_iterator.skip_iter(n)
@pytest.mark.parametrize('resume_at', [3, 6, 8], ids=['mid-epoch', 'epoch-end', 'next-epoch'])
def test_prepaid_iterator_skip_iter_yields_what_the_run_yields_after_n(
        resume_at, no_dataloader_restart_pause):
    """As the fork's loop resumes: one skip_iter(n) over the prepaid batches, then the batches
    an uninterrupted run draws after n -- none loaded twice, none lost."""
    iterator, epoch = loop_iterator(resume_at)
    prepaid = PrepaidIterator(iterator, resume_at)
    prepaid.skip_iter(resume_at)
    assert prepaid.prepaid == 0 and prepaid.data_epoch == epoch
    assert ids(itertools.islice(prepaid, 16 - resume_at)) == uninterrupted_ids()[resume_at:]


def test_prepaid_iterator_skip_iter_draws_what_is_not_prepaid(no_dataloader_restart_pause):
    prepaid = PrepaidIterator(loop_iterator(3)[0], 3)
    prepaid.skip_iter(5)  # 3 prepaid, then 2 drawn from the resumed position
    assert ids(itertools.islice(prepaid, 4)) == uninterrupted_ids()[5:9]
    prepaid = PrepaidIterator(loop_iterator(3)[0], 3)
    prepaid.skip_iter(1)
    assert next(prepaid) is None and next(prepaid) is None  # 2 prepaid left, answered by next
    assert ids(itertools.islice(prepaid, 2)) == uninterrupted_ids()[3:5]


def test_a_checkpoint_of_more_ranks_resumes_from_rank_zeros_state_and_says_so(tmp_path):
    """A checkpoint holding RNG state for 2 ranks resumed by 1 process: it warns, and takes rank
    0's state (the run then repeats rank 0's); rank 1's entry, another state, is not used."""
    import torch
    from mmdet_ext.engine.hooks.exact_resume_hook import CHECKPOINT_KEY
    from mmdet_ext.engine.rng_state import capture_rng_state, restore_rng_state
    reference = tmp_path / 'reference'
    _run(reference, 'two-ranks-reference', reference / 'losses.jsonl')
    uninterrupted = read_losses(str(reference / 'losses.jsonl'))
    losses = tmp_path / 'losses.jsonl'
    with pytest.raises(SimulatedCrash):
        _run(tmp_path, 'two-ranks-crash', losses, custom_hooks=[CrashAtEpoch(2)])
    path = tmp_path / 'epoch_2.pth'
    checkpoint = torch.load(path, weights_only=False)
    saved = capture_rng_state()
    torch.manual_seed(12345)
    other = capture_rng_state()
    restore_rng_state(saved)
    checkpoint[CHECKPOINT_KEY]['rng'] = [checkpoint[CHECKPOINT_KEY]['rng'][0], other]
    torch.save(checkpoint, path)
    log = RunnerLogRecorder()
    _run(tmp_path, 'two-ranks-resume', losses, resume=True, seed=None, custom_hooks=[log])
    assert read_losses(str(losses)) == uninterrupted
    assert [m for m in log.messages() if 'ranks, this run has' in m] == [
        "ExactResumeHook: checkpoint has RNG state for 2 ranks, this run has 1; every rank "
        "takes rank 0's, so the run will not repeat exactly."]
