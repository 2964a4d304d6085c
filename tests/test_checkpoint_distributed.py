"""Two ranks (torchrun, gloo): resume on both, each loads to CPU, training continues exactly."""
import json
import os
import subprocess
import sys
import textwrap

TRAIN = textwrap.dedent('''
    import json, os, sys
    import torch.distributed as dist
    from mmengine.hooks import Hook
    from mmengine.runner import Runner
    from helpers.tiny_runner import LossRecorderHook, tiny_runner_kwargs
    from mmdet_ext.engine.process_exit import run_and_exit

    work_dir, max_epochs, load_from = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None
    rank = int(os.environ['RANK'])

    class RecordLoad(Hook):
        def after_load_checkpoint(self, runner, checkpoint):
            devices = sorted({t.device.type for t in checkpoint['state_dict'].values()})
            with open(f'{work_dir}/load_rank{rank}.json', 'w') as f:
                json.dump(dict(devices=devices, iter=checkpoint['meta']['iter']), f)

    # mmengine 0.10.7's init_dist calls torch.cuda.set_device even for gloo, and wraps DDP with
    # device_ids=[LOCAL_RANK]; on a CPU build both fail. Initialise gloo here (the Runner then
    # skips init_dist) and give DDP device_ids=None, as a CPU job must.
    dist.init_process_group('gloo')
    kwargs = tiny_runner_kwargs(work_dir, max_epochs=max_epochs, launcher='pytorch',
                                cfg=dict(model_wrapper_cfg=dict(
                                    type='MMDistributedDataParallel', device_ids=None)),
                                resume=load_from is not None, load_from=load_from,
                                custom_hooks=[RecordLoad(),
                                              LossRecorderHook(f'{work_dir}/loss{rank}.jsonl')])
    run_and_exit(Runner(**kwargs).train)  # as tools/train.py ends a rank: never SIGABRT at exit
''')


def _torchrun(work_dir, max_epochs: int, load_from: str = '') -> None:
    tests_dir = os.path.dirname(os.path.abspath(__file__))  # for helpers.tiny_runner
    env = {**os.environ, 'OMP_NUM_THREADS': '1',
           'PYTHONPATH': os.pathsep.join([tests_dir, os.environ.get('PYTHONPATH', '')])}
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
           '--master_port', str(29500 + os.getpid() % 1000)]
    script = work_dir.parent / 'train_two_ranks.py'
    script.write_text(TRAIN)
    proc = subprocess.run([*cmd, str(script), str(work_dir), str(max_epochs), load_from],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _losses(path) -> dict[int, float]:
    with open(path) as f:
        return {row['iter']: row['loss'] for row in map(json.loads, f)}


def test_two_rank_resume_loads_to_cpu_and_continues(tmp_path):
    full, resumed = tmp_path / 'full', tmp_path / 'resumed'
    _torchrun(full, max_epochs=3)
    _torchrun(resumed, max_epochs=3, load_from=str(full / 'epoch_2.pth'))
    for rank in (0, 1):
        load = json.loads((resumed / f'load_rank{rank}.json').read_text())
        assert load == dict(devices=['cpu'], iter=load['iter']) and load['iter'] > 0
        expected = _losses(full / f'loss{rank}.jsonl')
        got = _losses(resumed / f'loss{rank}.jsonl')
        assert sorted(got) == [i for i in sorted(expected) if i >= load['iter']]
        assert got == {i: expected[i] for i in got}  # each rank continues its own stream
    assert _losses(full / 'loss0.jsonl') != _losses(full / 'loss1.jsonl')  # ranks differ
