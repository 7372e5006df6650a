"""A measurement run's turn on a GPU it shares with other runs of the pipeline.

On a one-GPU machine the pipeline lets several of a step's measurement runs (timed, nsys, ncu)
start at once (``workloads.tools.cold --turns``): each one's interpreter start, imports and the
profiler's own start and finish then happen beside another run's GPU work, and only the part that
uses the GPU takes turns. The wrapper names the lock file in ``COOKBOOK_GPU_TURN_LOCK``; the run
takes it (an exclusive ``flock``) before its setup touches the GPU and keeps it until the process
exits, when the operating system lets it go. Holding it to the exit, not just to the last
measurement, keeps the next run from starting while this one still holds its GPU memory (JAX
preallocates most of it, and the next JAX run would fail to).

What overlaps a measured window is therefore CPU work of other runs in their first seconds
(Python, imports, the profiler starting) or last (the profiler writing its report): never another
run's kernels, copies or allocations.

Without ``COOKBOOK_GPU_TURN_LOCK`` (a run by hand, a SLURM job with its own GPU, a host with
several GPUs where the wrapper holds one for the whole job) :func:`take_turn` does nothing.

The turn's start and end (Unix ns) are written to ``<COOKBOOK_GPU_TURN_RECORD>-<pid>.json``, one
file per process (JAX's allocator experiment runs five in one job, each with its own turn); the
wrapper copies them into its GPU job record (``gpu_turns``), which ``reports/gpu_jobs.md`` checks
for two runs on one GPU at once.
"""
from __future__ import annotations

import atexit
import fcntl
import os
import sys
import time

from analysis.outputs import write_json_atomic
from workloads import settings

LOCK_VARIABLE = "COOKBOOK_GPU_TURN_LOCK"
RECORD_VARIABLE = "COOKBOOK_GPU_TURN_RECORD"

#: the open lock file of this process's turn (kept open, so locked, until the process exits)
_held = None


def turn_record_path(prefix: str, pid: int) -> str:
    """Where process ``pid`` of a job writes its turn (``COOKBOOK_GPU_TURN_RECORD`` is the prefix)."""
    return f"{prefix}-{pid}.json"


def take_turn(what: str, environ=os.environ) -> dict | None:
    """Wait for the GPU's lock named in ``COOKBOOK_GPU_TURN_LOCK`` and hold it until this process
    exits. Returns the turn (``started_unix_ns``, ``waited_s``), or None when no lock is named.
    A second call in the same process returns the turn already held."""
    global _held
    lock_path = settings.text(LOCK_VARIABLE, environ)
    if not lock_path:
        return None
    if _held is not None:
        return _held[1]
    asked = time.time_ns()
    f = open(lock_path, "a")  # not inheritable (Python's default): no child keeps the GPU
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"{what}: waiting for the GPU's turn ({lock_path})", file=sys.stderr, flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    turn = {"asked_unix_ns": asked, "started_unix_ns": time.time_ns()}
    turn["waited_s"] = (turn["started_unix_ns"] - asked) / 1e9
    _held = (f, turn)
    record_prefix = settings.text(RECORD_VARIABLE, environ)
    if record_prefix:
        record_path = turn_record_path(record_prefix, os.getpid())
        write_json_atomic(record_path, turn)

        def _ended() -> None:
            # as late as Python lets us write: the lock itself goes with the process, just after
            write_json_atomic(record_path, {**turn, "ended_unix_ns": time.time_ns()})

        atexit.register(_ended)
    return turn
