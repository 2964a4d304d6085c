"""A rank ends with its own exit status even while gloo's worker thread still holds a collective:
``run_and_exit`` leaves before interpreter shutdown, where such a thread aborts the process."""
import os
import subprocess
import sys
import textwrap

import pytest

from mmdet_ext.engine.process_exit import _system_exit_status

RANK0 = textwrap.dedent('''
    import os, sys, time
    import torch, torch.distributed as dist
    from mmdet_ext.engine.process_exit import run_and_exit

    work_dir = sys.argv[1]

    class FinishCollectiveAtShutdown:
        """Deleted only by interpreter shutdown (it lives in this module's globals). Lets rank 1
        complete the all-reduce then, and waits until gloo's worker has let go of the tensor:
        a worker that needs the GIL during shutdown aborts the process (SIGABRT)."""
        def __del__(self, open=open, sleep=time.sleep,  # module globals may be gone by then
                    path=os.path.join(work_dir, 'shutdown_ran')):
            open(path, 'w').close()
            while self.tensor._use_count() > 1:
                sleep(0.01)

    marker = FinishCollectiveAtShutdown()

    def main():
        dist.init_process_group('gloo')
        marker.group = dist.group.WORLD  # kept alive past destroy_process_group, as DDP keeps it
        marker.tensor = torch.ones(1)
        dist.all_reduce(marker.tensor, async_op=True)  # rank 1 joins only at rank 0's shutdown

    run_and_exit(main)
''')

RANK1 = textwrap.dedent('''
    import os, sys, time
    import torch, torch.distributed as dist

    work_dir = sys.argv[1]
    dist.init_process_group('gloo')
    shutdown_ran, rank0_gone = (os.path.join(work_dir, name) for name in ('shutdown_ran', 'rank0_gone'))
    while not (os.path.exists(shutdown_ran) or os.path.exists(rank0_gone)):
        time.sleep(0.01)
    if os.path.exists(shutdown_ran):
        dist.all_reduce(torch.ones(1))
    os._exit(0)  # nothing of rank 1's is in flight; its exit is not under test
''')


def test_a_rank_exits_with_its_status_while_a_collective_is_in_flight(tmp_path):
    env = {**os.environ, 'OMP_NUM_THREADS': '1', 'WORLD_SIZE': '2', 'MASTER_ADDR': '127.0.0.1',
           'MASTER_PORT': str(40000 + os.getpid() % 20000)}
    procs = []
    for rank, script in enumerate((RANK0, RANK1)):
        path = tmp_path / f'rank{rank}.py'
        path.write_text(script)
        procs.append(subprocess.Popen(
            [sys.executable, str(path), str(tmp_path)],
            env={**env, 'RANK': str(rank), 'LOCAL_RANK': str(rank)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    output0 = procs[0].communicate(timeout=300)[0]
    (tmp_path / 'rank0_gone').touch()
    output1 = procs[1].communicate(timeout=300)[0]
    assert procs[0].returncode == 0, output0
    assert not (tmp_path / 'shutdown_ran').exists()  # left before interpreter shutdown
    assert procs[1].returncode == 0, output1


@pytest.mark.parametrize('code, status', [(None, 0), (0, 0), (75, 75), ('stopped', 1)])
def test_system_exit_codes_give_python_s_exit_status(code, status, capsys):
    assert _system_exit_status(SystemExit(code)) == status
    assert capsys.readouterr().err == ('stopped\n' if code == 'stopped' else '')
