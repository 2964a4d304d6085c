"""End a training process that used torch.distributed without aborting on the way out.

Why: gloo runs every collective on its process group's worker threads (two per group). A worker
drops its reference to a finished collective -- and so to the tensors Python handed it -- a
moment *after* the caller's ``wait()`` has returned. Dropping a tensor that Python also saw takes
the GIL. If the main thread has meanwhile begun interpreter shutdown, Python ends the worker
inside that C++ destructor (``take_gil`` -> ``pthread_exit``), which C++ turns into
``std::terminate``: the rank dies of SIGABRT ("terminate called without an active exception",
exit status -6) after a finished or a preempted run, and torchrun reports the job as failed.
``torch.distributed.destroy_process_group()`` does not prevent it (torch 2.13): gloo's
``shutdown()`` leaves the threads running, and they are only joined when the last reference to
the group goes, which DDP keeps.

So a process that had a group ends here while the interpreter is whole -- group destroyed,
non-daemon threads joined, ``atexit`` functions run (logging handlers, DataLoader workers and
other multiprocessing children), garbage collected, standard streams flushed -- and then leaves
through ``os._exit``, skipping the interpreter shutdown that the race needs. Objects still
reachable at that point are not finalized: a file must be flushed by whoever keeps it open.
"""
import atexit
import gc
import os
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

import torch.distributed as dist


def run_and_exit(main: Callable[[], Any]) -> NoReturn:
    """Run ``main()`` and end the process with its exit status.

    The status is Python's: 0 when ``main`` returns, a ``SystemExit``'s code
    (``PreemptedExit``: 75), 1 after printing an exception's traceback (130 for
    ``KeyboardInterrupt``). Without a process group at the end, the process exits the ordinary
    way (an exception propagates unchanged); with one, through :func:`exit_process`.
    """
    try:
        main()
    except SystemExit as stop:
        if not _has_process_group():
            raise
        status = _system_exit_status(stop)
    except BaseException as error:
        if not _has_process_group():
            raise
        traceback.print_exc()
        status = 130 if isinstance(error, KeyboardInterrupt) else 1
    else:
        if not _has_process_group():
            sys.exit(0)
        status = 0
    exit_process(status)


def exit_process(status: int) -> NoReturn:
    """End the process with ``status``; after torch.distributed, without interpreter shutdown."""
    if not _has_process_group():
        sys.exit(status)
    dist.destroy_process_group()
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()  # what interpreter shutdown would wait for
    atexit._run_exitfuncs()
    gc.collect()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):  # closed, or replaced by None
            pass
    os._exit(status)


def _has_process_group() -> bool:
    return dist.is_available() and dist.is_initialized()


def _system_exit_status(stop: SystemExit) -> int:
    """The status Python gives ``SystemExit(code)``: None is 0, an int itself, else printed, 1."""
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code
    print(stop.code, file=sys.stderr)
    return 1
