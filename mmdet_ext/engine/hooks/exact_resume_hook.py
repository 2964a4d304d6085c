"""Hook that carries RNG state and the data position through checkpoints, so a resumed run
repeats itself -- also from a checkpoint saved in the middle of an epoch."""
from typing import Any, Optional

from mmengine.dist import all_gather_object
from mmengine.hooks import CheckpointHook, Hook
from mmengine.runner import IterBasedTrainLoop

from ..._compat import (data_epoch, restart_infinite_iterator, resume_skip_count,
                        runner_resume_requested)
from ...datasets.sample_seeds import (ResumableBatchSampler, index_sampler,
                                      install_resumable_loading, merge_unconsumed, share_of)
from ...registry import HOOKS
from ..rng_state import capture_rng_state, restore_rng_state

CHECKPOINT_KEY = 'mmdet_ext_resume_state'


class PrepaidIterator:
    """Answers the first ``prepaid`` ``next()`` calls with None, then is ``iterator``;
    ``skip_iter(n)`` passes over n batches, the prepaid ones first.

    Why: on resume, ``IterBasedTrainLoop.run`` passes over every iteration already done --
    OpenMMLab's by one ``next(dataloader_iterator)`` each, loading and throwing away every one
    of those batches, the fork's by one ``dataloader_iterator.skip_iter(n)``; the DataLoader
    here already starts at the right batch, so either must cost nothing.
    """

    def __init__(self, iterator: Any, prepaid: int) -> None:
        self.iterator = iterator
        self.prepaid = prepaid

    def __iter__(self) -> 'PrepaidIterator':
        return self

    def __next__(self) -> Any:
        if self.prepaid > 0:
            self.prepaid -= 1
            return None
        return next(self.iterator)

    def skip_iter(self, num_iters: int) -> None:
        """Pass over the next ``num_iters`` batches (the fork's loop asks for the prepaid ones,
        once, on resume): the prepaid ones cost nothing; any beyond them are drawn from
        ``iterator`` and dropped. Not ``iterator.skip_iter``: the fork's counts from the start
        of the run, and ``iterator`` already stands at the resumed position."""
        paid = min(self.prepaid, max(num_iters, 0))
        self.prepaid -= paid
        for _ in range(num_iters - paid):
            next(self.iterator)

    @property
    def data_epoch(self) -> int:
        return data_epoch(self.iterator)


def saves_after_this_iter(hook: Hook, runner) -> bool:
    """Whether ``hook``, a by-iteration ``CheckpointHook``, saves in this ``after_train_iter``
    (the test ``CheckpointHook.after_train_iter`` makes)."""
    if not isinstance(hook, CheckpointHook) or hook.by_epoch:
        return False
    return hook.every_n_train_iters(runner, hook.interval, hook.save_begin) or (
        hook.save_last and hook.is_last_train_iter(runner))


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Make an interrupted-then-resumed run reproduce the uninterrupted run's losses.

    mmengine already restores iteration/epoch, optimizer (incl. the AMP loss scaler, which
    ``AmpOptimWrapper.state_dict`` carries), schedulers and the message hub. What it drops is the
    state of the random number generators (python, numpy, torch, CUDA), the sampler seed
    (``DefaultSampler(seed=None)`` draws a fresh one each run) and where in the epoch the data
    was. This hook

    * seeds every training sample's augmentation from its identity in the run (sampler seed,
      epoch, dataset index, occurrence), not from per-worker RNG streams
      (``datasets/sample_seeds.py``), so the data does not depend on the worker count,
      ``persistent_workers`` or the number of ranks;
    * snapshots every rank's RNG state at the end of each training epoch of an epoch-based
      loop, after iterations a by-iteration ``CheckpointHook`` saves, and when
      ``SignalCheckpointHook`` is about to save, gathered onto rank 0; counts the batches
      consumed in the current data epoch (of the batch the step trained on: a look-ahead such
      as ``DevicePrefetcher`` may have drawn further);
    * writes snapshots, sampler seed and data position into the checkpoint; in the middle of
      an epoch of an epoch-based loop with mmengine's ``DefaultSampler``, the position includes
      the epoch's samples not yet trained on, in the epoch's global order (one all-gather of
      them with the snapshot);
    * puts this rank's RNG state back after validation as it was before, so validation never
      shifts the training streams;
    * on resume only (``after_load_checkpoint`` also fires for ``load_from``; it checks the
      Runner's ``resume``), restores the sampler seed, each rank's own RNG and the data position
      in ``before_train``: the DataLoader starts at the next batch of the interrupted epoch,
      the batches before it are skipped as indices, never loaded (epoch-based loops: instead of
      restarting the epoch; iteration-based loops: instead of replaying them through the
      pipeline).

    Exact on the same world size, batch size and dataset, for ``EpochBasedTrainLoop`` and
    ``IterBasedTrainLoop``, any ``num_workers``, persistent or not, end-of-epoch or mid-epoch
    checkpoints. On another world size (epoch-based, ``DefaultSampler``) the interrupted epoch
    continues with exactly its samples not yet trained on, dealt to the new ranks, each
    augmented as it would have been; the global batch, the batches and the per-rank RNG streams
    then differ (one warning says so). Not exact: GPU kernels that are nondeterministic anyway;
    a different world size in an iteration-based loop or with another sampler (warned); a
    checkpoint saved without this hook (warned: it falls back to mmengine's behaviour); in
    distributed runs, a mid-epoch checkpoint saved by some other hook (warned).
    In the partial epoch after a mid-epoch resume, ``batch_idx`` (what LoggerHook shows as
    ``[i/N]``) counts the remaining batches only. In distributed runs the snapshot
    costs one all-gather per checkpoint and per epoch of an epoch-based loop (the RNG states and
    the epoch's unconsumed indices: a few bytes per sample).
    """

    priority = 'VERY_HIGH'  # snapshot and count before CheckpointHook (VERY_LOW) saves

    def __init__(self) -> None:
        self._before_val: Optional[dict[str, Any]] = None
        self._all_snapshots: Optional[list[dict[str, Any]]] = None
        self._all_unconsumed: Optional[list[Any]] = None  # every rank's, with the snapshot
        self._snapshot_fresh = False
        self._to_restore: Optional[dict[str, Any]] = None
        self._batches: Optional[ResumableBatchSampler] = None
        self._position = [0, 0]  # [data epoch, batches consumed in it]
        self._resume_skip = 0

    def _snapshot(self, runner) -> None:
        unconsumed = None
        if not isinstance(runner.train_loop, IterBasedTrainLoop) and self._batches is not None:
            unconsumed = self._batches.unconsumed(self._position[1])
        gathered = all_gather_object((capture_rng_state(), unconsumed))
        self._all_snapshots = [rng for rng, _ in gathered]
        self._all_unconsumed = [rest for _, rest in gathered]
        self._snapshot_fresh = True

    def before_train_epoch(self, runner) -> None:
        if not isinstance(runner.train_loop, IterBasedTrainLoop):
            self._position = [runner.epoch, self._resume_skip]
            self._resume_skip = 0

    def before_train_iter(self, runner, batch_idx: int, data_batch=None) -> None:
        self._snapshot_fresh = False

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        self._batches.skip_next(0)  # the resumed epoch's iterators exist: the skip is spent
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop):
            epoch = data_epoch(loop.dataloader_iterator)
            self._position = [epoch, 1] if epoch != self._position[0] \
                else [epoch, self._position[1] + 1]
        else:
            self._position[1] += 1
        if any(saves_after_this_iter(hook, runner) for hook in runner.hooks):
            self._snapshot(runner)

    def snapshot_for_save(self, runner) -> None:
        """Snapshot every rank's RNG now, for a checkpoint saved next (call it on all ranks:
        ``runner.save_checkpoint`` runs on rank 0 only, where no collective can be started)."""
        self._snapshot(runner)

    def after_train_epoch(self, runner) -> None:
        if not isinstance(runner.train_loop, IterBasedTrainLoop):
            self._snapshot(runner)

    def before_val(self, runner) -> None:
        self._before_val = capture_rng_state()

    def after_val(self, runner) -> None:
        if self._before_val is not None:
            restore_rng_state(self._before_val)
            self._before_val = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        fresh = self._snapshot_fresh
        if not fresh:
            if runner.world_size == 1:
                self._snapshot(runner)
                fresh = True
            else:
                runner.logger.warning(
                    'ExactResumeHook: a checkpoint saved in the middle of an epoch by a hook '
                    'this hook does not know; it carries the RNG state of the last epoch end, '
                    'so resuming from it will not repeat the run exactly.')
        rng = self._all_snapshots or [capture_rng_state()]
        sampler = index_sampler(runner.train_dataloader)
        position = dict(epoch=self._position[0], batches=self._position[1],
                        world_size=runner.world_size,
                        continues_saved_rest=bool(self._batches and
                                                  self._batches.continues_saved_rest))
        unconsumed = self._all_unconsumed if fresh else None
        if unconsumed and all(rest is not None for rest in unconsumed):
            position['unconsumed'] = merge_unconsumed(unconsumed)
        checkpoint[CHECKPOINT_KEY] = dict(
            rng=rng, sampler_seed=getattr(sampler, 'seed', None), position=position)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not runner_resume_requested(runner):
            return
        self._to_restore = checkpoint.get(CHECKPOINT_KEY)
        if self._to_restore is None:
            runner.logger.warning('ExactResumeHook: the checkpoint has no RNG/sampler state '
                                  '(saved without this hook); the resumed run will not repeat '
                                  'the uninterrupted one exactly.')

    def before_train(self, runner) -> None:
        state, self._to_restore = self._to_restore, None
        loop = runner.train_loop
        sampler = index_sampler(loop.dataloader)
        if state is not None and state['sampler_seed'] is not None and hasattr(sampler, 'seed'):
            sampler.seed = state['sampler_seed']
        seed = getattr(sampler, 'seed', None)
        self._batches = install_resumable_loading(
            loop.dataloader, seed if seed is not None else (runner.seed or 0), runner.rank)
        position = (state or {}).get('position')
        rest_dealt = False
        if isinstance(loop, IterBasedTrainLoop):
            self._start_iter_loop(runner, loop, position, resumed=state is not None)
        elif position is not None and position['epoch'] == loop.epoch:
            # DistSamplerSeedHook sets the sampler's epoch only in before_train_epoch.
            if hasattr(sampler, 'set_epoch'):
                sampler.set_epoch(loop.epoch)
            rest_dealt = self._continue_epoch(runner, loop, sampler, position)
        if state is None:
            return
        rng = state['rng']
        if len(rng) != runner.world_size and not rest_dealt:
            runner.logger.warning(f'ExactResumeHook: checkpoint has RNG state for {len(rng)} '
                                  f'ranks, this run has {runner.world_size}; every rank takes '
                                  'rank 0\'s, so the run will not repeat exactly.')
        restore_rng_state(rng[runner.rank] if len(rng) == runner.world_size else rng[0])

    def _continue_epoch(self, runner, loop, sampler: Any, position: dict) -> bool:
        """Start the interrupted epoch where the saved run left it: at its next batch on the
        same ranks, else with its samples not yet trained on dealt to this run's ranks (True)."""
        saved_world = position.get('world_size', runner.world_size)
        rest = position.get('unconsumed')
        if saved_world == runner.world_size and not position.get('continues_saved_rest'):
            self._resume_skip = position['batches']
            self._batches.skip_next(position['batches'])
            runner.logger.info(f'ExactResumeHook: epoch {loop.epoch + 1} continues at batch '
                               f'{position["batches"] + 1}; the batches before it are skipped '
                               'without loading them')
            return False
        if rest is None:
            self._resume_skip = position['batches']
            self._batches.skip_next(position['batches'])
            runner.logger.warning(
                f'ExactResumeHook: the checkpoint was saved on {saved_world} ranks without the '
                f'samples its epoch had left (an iteration-based loop, a sampler other than '
                f'DefaultSampler, or an older mmdet_ext); on {runner.world_size} ranks epoch '
                f'{loop.epoch + 1} continues at batch {position["batches"] + 1} of each rank, so '
                'samples may be trained twice or not at all in it.')
            return False
        self._resume_skip = 0
        share = share_of(rest, runner.rank, runner.world_size,
                         round_up=getattr(sampler, 'round_up', True))
        self._batches.continue_epoch(loop.epoch, share)
        batch = self._batches.batch_size
        repeated = -len(rest) % runner.world_size if getattr(sampler, 'round_up', True) else 0
        runner.logger.info(
            f'ExactResumeHook: epoch {loop.epoch + 1} continues with the {len(rest)} samples of '
            f'it not yet trained on, {len(share)} on this rank, without loading the others')
        if saved_world != runner.world_size:
            runner.logger.warning(
                f'ExactResumeHook: resumed on {runner.world_size} ranks from a checkpoint saved '
                f'on {saved_world}: the global batch is {batch} x {runner.world_size} (was '
                f'{batch} x {saved_world}); every sample is augmented as it would have been, but '
                'the batches, the iterations per epoch and the ranks\' RNG streams (dropout) '
                f'differ from the interrupted run\'s'
                + (f'; {repeated} samples are repeated to give every rank as many'
                   if repeated else '') + '.')
        return True

    def _start_iter_loop(self, runner, loop: IterBasedTrainLoop, position: Optional[dict],
                         resumed: bool) -> None:
        if resumed and position is None and loop.iter > 0:
            # An old checkpoint: no position, so mmengine's replay is the only way to continue.
            restart_infinite_iterator(loop.dataloader_iterator, 0)
            return
        epoch, batches = (position['epoch'], position['batches']) if position else (0, 0)
        saved_world = (position or {}).get('world_size', runner.world_size)
        if saved_world != runner.world_size:
            runner.logger.warning(
                f'ExactResumeHook: the checkpoint was saved on {saved_world} ranks, this run '
                f'has {runner.world_size}; an iteration-based loop continues at batch '
                f'{batches + 1} of each rank\'s stream, so samples may be trained twice or not '
                'at all in this data epoch.')
        self._position = [epoch, batches]
        restart_infinite_iterator(loop.dataloader_iterator, epoch, self._batches, batches)
        if loop.iter == 0:
            return
        prepaid = resume_skip_count(loop)
        if prepaid > 0:
            loop.dataloader_iterator = PrepaidIterator(loop.dataloader_iterator, prepaid)
        runner.logger.info(
            f'ExactResumeHook: data continues at batch {batches + 1} of data epoch {epoch}; '
            + (f'mmengine\'s skip of {prepaid} batches is answered without loading them'
               if prepaid else 'fast_forward_on_resume is set, and this costs nothing'))
