"""GPU memory of resuming Mask R-CNN R50-FPN training: stock mmengine vs ``CpuCheckpointLoadHook``.

Why: mmengine's ``Runner.resume`` loads with ``map_location='cuda'``, so the whole checkpoint
(weights and SGD momentum) is restored onto the GPU, on top of the model that already lives
there, before it is copied into the model; with several ranks it lands on whichever GPU is
current. The plugin loads to CPU and lets the Runner copy. Measured on one GPU: peak memory
while resuming, and whatever is still allocated afterwards beyond the model and optimizer state.

The checkpoint is written by a real Runner after one SGD step on the training device, so its
tensors carry that device as storage location, as in the failure being measured. Each phase
runs in its own process (clean peak counters, allocator and loader registrations):

    python tools/gpu/resume_memory.py save   WORK_DIR
    python tools/gpu/resume_memory.py resume WORK_DIR --variant stock|stock-unsafe|plugin
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from mmengine.hooks import Hook
from mmengine.runner import Runner

from report import NO_CUDA, Row, mib
from shape_model import MaskRCNNShapeModel, OneInputDataset, load_shapes

MEASUREMENT = 'a. resume memory (R50-FPN shapes)'
CHECKPOINT = 'iter_1.pth'
RESULT_PREFIX = 'RESULT '
VARIANTS = {
    # name: (label in the table, extra environment, uses the plugin's hook)
    'stock': ('stock mmengine', {}, False),
    'stock-unsafe': ('stock, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1',
                     {'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'}, False),
    'plugin': ('CpuCheckpointLoadHook', {}, True),
}
ALLOCATOR_BLOCK = 512  # the CUDA caching allocator rounds every allocation up to this


class ResumeProbe(Hook):
    """Reads the GPU counters around ``load_or_resume``: it runs after every ``before_run``
    (lowest priority), and ``before_train`` comes right after the resume."""

    priority = 'LOWEST'

    def __init__(self) -> None:
        self.result: dict = {}

    def before_run(self, runner) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.result['model'] = device_bytes(runner.model.parameters(), runner.model.buffers())
            # Where each allocation from here on was made (Python frames): the extra bytes'
            # owners. Allocations made earlier (the model's) are listed without frames.
            torch.cuda.memory._record_memory_history(max_entries=100_000, stacks='python')
        self._start = time.perf_counter()

    def before_train(self, runner) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.result['seconds'] = time.perf_counter() - self._start
        self.result['iter'] = runner.iter
        optimizer = runner.optim_wrapper.optimizer
        state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        self.result['state_tensors'] = len(state)
        if torch.cuda.is_available():
            self.result['peak'] = torch.cuda.max_memory_allocated()
            self.result['after'] = torch.cuda.memory_allocated()
            self.result['model_and_state'] = device_bytes(
                runner.model.parameters(), runner.model.buffers(), state)
            known = storage_addresses(runner.model.parameters(), runner.model.buffers(), state)
            try:  # a private API: its failure must not cost the row
                self.result['extra_blocks'] = unknown_blocks(torch.cuda.memory._snapshot(),
                                                             known)
            except Exception as err:  # noqa: BLE001  (reported in the row's notes)
                self.result['extra_blocks'] = [[0, f'no snapshot: {err!r}']]
            torch.cuda.memory._record_memory_history(enabled=None)


def device_bytes(*tensor_groups) -> int:
    """What the allocator holds for these CUDA tensors: each storage once, rounded up."""
    blocks = {}
    for group in tensor_groups:
        for tensor in group:
            if tensor.is_cuda:
                storage = tensor.untyped_storage()
                rounded_up = -(-storage.nbytes() // ALLOCATOR_BLOCK) * ALLOCATOR_BLOCK
                blocks[storage.data_ptr()] = rounded_up
    return sum(blocks.values())


def storage_addresses(*tensor_groups) -> set[int]:
    return {t.untyped_storage().data_ptr() for group in tensor_groups for t in group if t.is_cuda}


# Frames of these files say how, not who: the first frame outside them names the owner.
_MACHINERY = ('torch/', 'contextlib.py', 'functools.py', '<frozen', 'threading.py')


def unknown_blocks(snapshot: dict, known: set[int]) -> list[list]:
    """[bytes, where] of each live allocator block that is not one of ``known``'s storages,
    grouped by where it was allocated (the first frames outside torch's own files, or 'before
    the resume' for a block allocated before the history was recorded), largest first."""
    by_owner: collections.Counter = collections.Counter()
    for segment in snapshot['segments']:
        address = segment['address']
        for block in segment['blocks']:
            address = block.get('address', address)
            if block['state'] == 'active_allocated' and address not in known:
                frames = [f for f in block.get('frames', [])
                          if not any(m in f['filename'] for m in _MACHINERY)]
                owner = ' < '.join(f"{Path(f['filename']).name}:{f['line']} {f['name']}"
                                   for f in frames[:3]) or 'before the resume'
                by_owner[owner] += block['size']
            address += block['size']
    return [[size, owner] for owner, size in by_owner.most_common()]


def build_runner(work_dir: Path, probe: Hook, resume_from: Path | None = None,
                 plugin: bool = False) -> Runner:
    """mmdet's Mask R-CNN schedule (SGD, lr 0.02, momentum 0.9, wd 1e-4, linear warm-up);
    one iteration, a checkpoint after it."""
    custom_hooks = [dict(type='CpuCheckpointLoadHook')] if plugin else []
    return Runner(
        model=MaskRCNNShapeModel(load_shapes()),
        work_dir=str(work_dir),
        train_dataloader=dict(dataset=OneInputDataset(), batch_size=1, num_workers=0,
                              sampler=dict(type='DefaultSampler', shuffle=False)),
        train_cfg=dict(by_epoch=False, max_iters=1),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.02, momentum=0.9,
                                          weight_decay=0.0001)),
        param_scheduler=dict(type='LinearLR', start_factor=0.001, by_epoch=False, begin=0,
                             end=500),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1, by_epoch=False)),
        custom_hooks=[*custom_hooks, probe],
        load_from=str(resume_from) if resume_from else None,
        resume=resume_from is not None,
        default_scope='mmdet',
        randomness=dict(seed=0),
        log_level='WARNING',
    )


def storage_locations(path: Path) -> dict[str, int]:
    """How many tensors of the checkpoint were saved from each device ('cuda:0', 'cpu')."""
    seen: collections.Counter = collections.Counter()

    def record(storage, location):
        seen[location] += 1
        return storage

    # weights_only=False: this is the file the harness has just written itself.
    torch.load(path, map_location=record, weights_only=False)
    return dict(seen)


def save(work_dir: Path) -> dict:
    build_runner(work_dir, ResumeProbe()).train()
    path = work_dir / CHECKPOINT
    return dict(locations=storage_locations(path), size=path.stat().st_size)


def resume(work_dir: Path, variant: str) -> dict:
    _, environment, plugin = VARIANTS[variant]
    os.environ.update(environment)
    if plugin:
        import mmdet_ext  # noqa: F401  (registers CpuCheckpointLoadHook)
    probe = ResumeProbe()
    build_runner(work_dir / variant, probe, resume_from=work_dir / CHECKPOINT,
                 plugin=plugin).train()
    return probe.result


def _child(args: list[str], env: dict) -> dict:
    """Run this file in a fresh process; its result (``{'error': ...}`` when it failed)."""
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600, check=False)
    for text in reversed(proc.stdout.splitlines()):
        if text.startswith(RESULT_PREFIX):
            return json.loads(text[len(RESULT_PREFIX):])
    lines = [t for t in proc.stderr.splitlines() if t.strip()]
    return dict(error=lines[-1] if lines else f'exit status {proc.returncode}')


def _error_summary(err: Exception) -> str:
    """The exception's type and the line of its message that names the cause.

    torch's weights_only refusal is a page of advice with the cause on an 'error:' line.
    """
    lines = [t.strip() for t in str(err).splitlines() if t.strip()] or ['']
    cause = next((t for t in lines[1:] if 'error:' in t.lower()), lines[0])
    return f'{type(err).__name__}: {cause.split(". ")[0]}'


def _row(label: str, result: dict) -> Row:
    if 'error' in result:
        return Row(MEASUREMENT, label, notes=f'fails: {result["error"][:200]}')
    if result['iter'] != 1:
        return Row(MEASUREMENT, label, notes=f'did not resume (iteration {result["iter"]})')
    seconds = f'{result["seconds"]:.2f} s'
    if 'peak' not in result:
        return Row(MEASUREMENT, label, seconds, notes=f'resumed; GPU memory: {NO_CUDA}')
    extra = result['after'] - result['model_and_state']
    return Row(MEASUREMENT, label, seconds, mib(result['peak']),
               f'model {mib(result["model"])}; after resume {mib(result["after"])} = model + '
               f'{result["state_tensors"]} momentum buffers + {extra:,} B extra; '
               f'peak - after = {mib(result["peak"] - result["after"])}; {_owners(result)}')


def _owners(result: dict) -> str:
    """Where the extra bytes are: the live blocks that belong to no model or optimizer tensor,
    or, when there are none, inside those tensors' own blocks (rounded up by the allocator)."""
    if not result['extra_blocks']:
        return ('no live block outside them: the extra is their blocks being larger than '
                'their storages')
    return 'the extra: ' + '; '.join(f'{size:,} B at {owner}'
                                     for size, owner in result['extra_blocks'][:6])


def measure(device: str) -> list[Row]:
    """Save on ``device``, then resume with each variant: a row for the checkpoint, one each."""
    if device == 'cuda' and not torch.cuda.is_available():
        return [Row(MEASUREMENT, label, notes=NO_CUDA) for label, _, _ in VARIANTS.values()]
    # The Runner puts the model on the GPU whenever there is one.
    hide_gpu = {'CUDA_VISIBLE_DEVICES': ''} if device == 'cpu' else {}
    with tempfile.TemporaryDirectory(prefix='resume_memory_') as tmp:
        saved = _child(['save', tmp], hide_gpu)
        if 'error' in saved:
            return [Row(MEASUREMENT, 'checkpoint', notes=f'fails: {saved["error"]}')]
        where = ', '.join(f'{n} tensors from {loc}' for loc, n in saved['locations'].items())
        rows = [Row(MEASUREMENT, 'checkpoint', notes=f'{mib(saved["size"])} after one SGD step; '
                                                     f'{where}')]
        rows += [_row(label, _child(['resume', tmp, '--variant', name], hide_gpu))
                 for name, (label, _, _) in VARIANTS.items()]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('phase', choices=['save', 'resume'])
    parser.add_argument('work_dir', type=Path)
    parser.add_argument('--variant', choices=sorted(VARIANTS), default='plugin')
    args = parser.parse_args()
    try:
        result = save(args.work_dir) if args.phase == 'save' else \
            resume(args.work_dir, args.variant)
    except Exception as err:  # reported in the table, not a reason to stop the harness
        result = dict(error=_error_summary(err))
    print(RESULT_PREFIX + json.dumps(result), flush=True)


if __name__ == '__main__':
    main()
