"""Hook that carries RNG and sampler state through checkpoints so a resumed run repeats itself."""
from typing import Any, Optional

from mmengine.dist import all_gather_object
from mmengine.hooks import Hook
from mmengine.runner import IterBasedTrainLoop

from ..._compat import runner_resume_requested
from ...registry import HOOKS
from ..rng_state import capture_rng_state, restore_rng_state

CHECKPOINT_KEY = 'mmdet_ext_resume_state'


@HOOKS.register_module()
class ExactResumeHook(Hook):
    """Make an interrupted-then-resumed run reproduce the uninterrupted run's losses.

    mmengine already restores iteration/epoch, optimizer (incl. the AMP loss scaler, which
    ``AmpOptimWrapper.state_dict`` carries), schedulers and the message hub. What it drops is the
    state of the random number generators (python, numpy, torch, CUDA) and the sampler seed
    (``DefaultSampler(seed=None)`` draws a fresh one each run), so dropout and data augmentation
    continue differently. This hook

    * snapshots every rank's RNG state at the end of each training epoch (iteration-based loops:
      each iteration) -- before ``CheckpointHook`` saves -- and gathers them onto rank 0;
    * writes the snapshots and the sampler seed into the checkpoint (``before_save_checkpoint``);
    * restores the snapshot after validation, so validation never shifts the training streams
      (that is what makes "validate, save, continue" equal "load, continue");
    * on resume only (``after_load_checkpoint`` also fires for ``load_from``; it checks the
      Runner's ``resume``), restores the sampler seed and each rank's own RNG in ``before_train``.

    Exact: epoch-based loops (the mmdet default) with ``num_workers=0`` or non-persistent workers
    (mmengine re-seeds workers from the seed each epoch), on the same world size.
    Not exact: ``persistent_workers=True`` (worker RNG lives in the workers, not in the
    checkpoint); iteration-based loops with ``num_workers=0``, because mmengine's
    ``IterBasedTrainLoop`` replays the skipped batches through the transforms in the main process
    after ``before_train``; resuming a checkpoint saved mid-epoch by an epoch-based loop
    (mmengine restarts that epoch); GPU kernels that are nondeterministic anyway. In distributed
    iteration-based runs the snapshot costs one small all-gather per iteration.
    """

    priority = 'VERY_HIGH'  # snapshot before CheckpointHook (VERY_LOW) saves

    def __init__(self) -> None:
        self._own_snapshot: Optional[dict[str, Any]] = None
        self._all_snapshots: Optional[list[dict[str, Any]]] = None
        self._to_restore: Optional[dict[str, Any]] = None

    def _snapshot(self) -> None:
        self._own_snapshot = capture_rng_state()
        self._all_snapshots = all_gather_object(self._own_snapshot)

    def after_train_iter(self, runner, batch_idx: int, data_batch=None, outputs=None) -> None:
        if isinstance(runner.train_loop, IterBasedTrainLoop):
            self._snapshot()

    def after_train_epoch(self, runner) -> None:
        if not isinstance(runner.train_loop, IterBasedTrainLoop):
            self._snapshot()

    def after_val(self, runner) -> None:
        if self._own_snapshot is not None:
            restore_rng_state(self._own_snapshot)

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        rng = self._all_snapshots or [capture_rng_state()]
        sampler = runner.train_dataloader.sampler
        checkpoint[CHECKPOINT_KEY] = dict(rng=rng, sampler_seed=getattr(sampler, 'seed', None))

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not runner_resume_requested(runner):
            return
        self._to_restore = checkpoint.get(CHECKPOINT_KEY)
        if self._to_restore is None:
            runner.logger.warning('ExactResumeHook: the checkpoint has no RNG/sampler state '
                                  '(saved without this hook); the resumed run will not repeat '
                                  'the uninterrupted one exactly.')

    def before_train(self, runner) -> None:
        if self._to_restore is None:
            return
        state, self._to_restore = self._to_restore, None
        sampler = runner.train_dataloader.sampler
        if state['sampler_seed'] is not None and hasattr(sampler, 'seed'):
            sampler.seed = state['sampler_seed']
        rng = state['rng']
        if len(rng) != runner.world_size:
            runner.logger.warning(f'ExactResumeHook: checkpoint has RNG state for {len(rng)} '
                                  f'ranks, this run has {runner.world_size}; every rank takes '
                                  'rank 0\'s, so the run will not repeat exactly.')
        restore_rng_state(rng[runner.rank] if len(rng) == runner.world_size else rng[0])
