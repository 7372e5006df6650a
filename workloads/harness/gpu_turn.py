"""A measurement run's turn on a GPU it shares with other runs of the pipeline.

On a one-GPU machine the pipeline lets several of a step's measurement runs (timed, nsys, ncu)
start at once (``workloads.harness.cold --turns``): each one's interpreter start, imports and the
profiler's own start and finish then happen beside another run's GPU work, and only the part that
uses the GPU takes turns. The wrapper names the lock file in ``COOKBOOK_GPU_TURN_LOCK``; the run
takes it (an exclusive ``flock``) before its setup touches the GPU and keeps it until the process
exits, when the operating system lets it go (after every process that holds a copy of the open
lock, a child forked in the turn included, has exited), unless it gives the GPU back earlier
(:meth:`GpuTurn.release`, which keeps the turn while the process has a live child): once its last
result is on the host and its device memory is given back, the float64 check, the record and the
process's exit run on the CPU beside the next run's turn (the check of a 2 GiB result took 2-5 s
per run). A run whose memory is still held keeps the
turn to its exit, so that the next run never starts short of memory (JAX preallocates 75% of the
GPU by default, and the next JAX run would fail to allocate).

What overlaps a measured window is therefore CPU work of other runs in their first seconds
(Python, imports, the profiler starting) or last (the profiler writing its report, the float64
check): never another run's kernels, copies or allocations. So that this CPU work does not slow the
measured run either (a launch-bound step's host time is what it measures), the machine's cores are
split in two (:func:`split_cores`, which the pipeline does for one shared GPU; hardware-thread
siblings stay on one side): the process that holds the GPU measures on the holder's half alone, to
its turn's end (:func:`use_holder_cores`), and every other process of the pipeline, analysis jobs
included, runs on the other half. A step's run sets up on every core (``take_turn``'s
``setup_on_every_core``), since nothing is measured then and a setup that compiles on a thread
pool (XLA's autotuning) takes far longer on half the cores (docs/measurement.md). A job that holds the GPU throughout (the ceilings, most experiments) moves its
whole process tree to the holder's half. A start-up timed from its launch (a cold/warm start, Warp's
coldstart experiment) gets its turn from its parent before the launch (:func:`turn_for_child`) and
runs whole on the holder's half too, until its measurement is over.

Without ``COOKBOOK_GPU_TURN_LOCK`` (a run by hand, a job that holds its GPU throughout, a host with
several GPUs where the wrapper holds one for the whole job) :func:`take_turn` does nothing.

The turn is one :class:`GpuTurn` object, which :func:`take_turn` returns to the run that owns it
(the runner, an experiment); the run passes it to whatever ends the turn or reads it.

The turn's start and end (Unix ns) are written to ``<COOKBOOK_GPU_TURN_RECORD>-<pid>.json``, one
file per process (JAX's allocator experiment runs five in one job, each with its own turn); the
wrapper copies them into its GPU job record (``gpu_turns``), which ``reports/gpu_jobs.md`` checks
for two runs on one GPU at once.
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import stat
import sys
import time
from typing import Iterator

from analysis.common.outputs import write_json_atomic
from workloads import settings
from workloads.errors import WorkloadError

LOCK_VARIABLE = "COOKBOOK_GPU_TURN_LOCK"
RECORD_VARIABLE = "COOKBOOK_GPU_TURN_RECORD"
#: the CPU cores of the process that holds the GPU, and of every other process ("0-7"), where the
#: pipeline split them (:func:`split_cores`)
HOLDER_CORES_VARIABLE = "COOKBOOK_GPU_HOLDER_CORES"
OTHER_CORES_VARIABLE = "COOKBOOK_OTHER_CORES"
#: set by a process that took the GPU's turn for a child it launches (:func:`turn_for_child`):
#: "<fd> <asked_unix_ns> <started_unix_ns>", the locked file the child inherits and the turn's start
HANDED_VARIABLE = "COOKBOOK_GPU_TURN_HANDED"
#: fewest cores worth splitting (two for the holder, two for the rest)
MIN_CORES_TO_SPLIT = 4

#: this process's turn, kept here as well as by its owner so that its lock file stays open (so
#: locked) until the process exits or :meth:`GpuTurn.release` gives it back, and so that a second
#: :func:`take_turn` in the process returns it
_held: "GpuTurn | None" = None
#: a run may give its turn back while it still holds at most this fraction of the GPU's memory (its
#: CUDA context and libraries' handles, ~0.5 GiB): the next run then has nine tenths of the GPU or
#: more. What a run holds is NVML's figure for its process, not a declaration of the recipe
RELEASE_MAX_HELD_FRACTION = 0.10


def core_list(text: str) -> set[int]:
    """The cores of a Linux CPU list ("0-3,8,10-11")."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return cores


def core_text(cores) -> str:
    """A Linux CPU list of ``cores``, with ranges: {0, 1, 2, 5} -> "0-2,5"."""
    ordered, parts = sorted(cores), []
    for core in ordered:
        if parts and core == parts[-1][1] + 1:
            parts[-1][1] = core
        else:
            parts.append([core, core])
    return ",".join(f"{a}-{b}" if b > a else f"{a}" for a, b in parts)


class CoreSplitError(WorkloadError):
    """The cores a pipeline variable names are not cores this process may run on."""


def _move_process(cores: set[int], variable: str = "") -> None:
    """Every thread of this process onto ``cores`` (a thread inherits its creator's affinity, but
    threads started before, such as a library's pool, keep theirs)."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except (ProcessLookupError, PermissionError):
            pass  # the thread ended meanwhile, or is not ours to move
        except OSError as e:
            # an inherited split from another machine or CPU set: say which variable, not a traceback
            raise CoreSplitError(f"{variable or 'CPU cores'}={core_text(cores)}: not cores this process may run on "
                                 f"({e.strerror}); unset {HOLDER_CORES_VARIABLE} and {OTHER_CORES_VARIABLE}, "
                                 "the pipeline sets them") from None


def sibling_groups(cores, read=None) -> list[set[int]]:
    """``cores`` grouped by physical core: the logical CPUs Linux lists as hardware-thread siblings
    (``/sys/devices/system/cpu/cpuN/topology/thread_siblings_list``) share one core's pipelines, so a
    split that put siblings on both sides would leave the measured run sharing a core. One group per
    CPU where the file cannot be read. ``read(path)`` defaults to reading the file."""
    def read_file(path: str) -> str:
        with open(path) as f:
            return f.read()

    read = read or read_file
    groups: dict[frozenset, set[int]] = {}
    for cpu in sorted(cores):
        try:
            siblings = core_list(read(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")) & set(cores)
        except (OSError, ValueError):
            siblings = {cpu}
        groups.setdefault(frozenset(siblings or {cpu}), set()).update(siblings or {cpu})
    return sorted(groups.values(), key=min)


def halves(cores, groups: list[set[int]]) -> tuple[set[int], set[int]]:
    """(others', holder's): the physical cores (``groups``) in order, the first half to the others,
    the rest to the holder; plain halves of ``cores`` where there are too few groups to split."""
    if len(groups) < 2:
        ordered = sorted(cores)
        return set(ordered[: len(ordered) // 2]), set(ordered[len(ordered) // 2:])
    first = groups[: len(groups) // 2]
    others = set().union(*first)
    return others, set(cores) - others


def split_cores(environ=os.environ) -> tuple[set[int], set[int]] | None:
    """Split the cores this process may use in two for a pipeline on one shared GPU, by physical core
    (:func:`sibling_groups`): the upper half for the process holding the GPU, the lower half for
    everything else; name both in ``environ``
    (inherited by every job) and move this process (Snakemake, whose jobs inherit it) to the lower
    half. Returns (holder's cores, others' cores), the split already made where ``environ`` names
    one, or None where there is nothing to split (fewer than :data:`MIN_CORES_TO_SPLIT` cores, or
    no CPU affinity on this system)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    holder_text, other_text = settings.text(HOLDER_CORES_VARIABLE, environ), settings.text(OTHER_CORES_VARIABLE, environ)
    if holder_text and other_text:
        return core_list(holder_text), core_list(other_text)
    cores = os.sched_getaffinity(0)
    if len(cores) < MIN_CORES_TO_SPLIT:
        return None
    others, holder = halves(cores, sibling_groups(cores))
    environ[HOLDER_CORES_VARIABLE], environ[OTHER_CORES_VARIABLE] = core_text(holder), core_text(others)
    _move_process(others)
    return holder, others


def _use_cores(variable: str, environ) -> str | None:
    """Move this process to the cores ``variable`` names (:func:`split_cores`); their list, or None
    where the pipeline split none."""
    text = settings.text(variable, environ)
    if text and hasattr(os, "sched_setaffinity"):
        _move_process(core_list(text), variable)
        return text
    return None


def use_holder_cores(environ=os.environ) -> str | None:
    """Move this process to the cores of the process that holds the GPU."""
    return _use_cores(HOLDER_CORES_VARIABLE, environ)


def use_every_core(environ=os.environ) -> str | None:
    """Move this process to the holder's cores and the others' together (:func:`split_cores`); their
    list, or None where the pipeline split none."""
    holder_text, other_text = settings.text(HOLDER_CORES_VARIABLE, environ), settings.text(OTHER_CORES_VARIABLE, environ)
    if not (holder_text and other_text and hasattr(os, "sched_setaffinity")):
        return None
    cores = core_list(holder_text) | core_list(other_text)
    _move_process(cores, f"{HOLDER_CORES_VARIABLE} and {OTHER_CORES_VARIABLE}")
    return core_text(cores)


def use_other_cores(environ=os.environ) -> str | None:
    """Move this process back to the cores of the processes that do not hold the GPU."""
    return _use_cores(OTHER_CORES_VARIABLE, environ)


def turn_record_path(prefix: str, pid: int) -> str:
    """Where process ``pid`` of a job writes its turn (``COOKBOOK_GPU_TURN_RECORD`` is the prefix)."""
    return f"{prefix}-{pid}.json"


class LockFileError(WorkloadError):
    """A GPU's lock file that cannot be used safely: a symlink, not a regular file, or not openable."""


def open_lock_file(lock_path: str | os.PathLike):
    """The lock file ``lock_path``, open read-only (``flock`` needs no write access, so a file another
    user created in the shared lock folder serves every user), created if missing. Never follows a
    symlink (someone else's link in a shared folder), and never opens an existing file with
    ``O_CREAT`` (refused in a sticky folder under ``fs.protected_regular`` for another user's file).
    Not inheritable: an executed child does not keep the GPU."""
    path = os.fspath(lock_path)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    while True:
        try:
            fd = os.open(path, flags)
            break
        except FileNotFoundError:
            try:
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                continue  # another process created it meanwhile: open theirs
            except OSError as e:
                raise LockFileError(f"{path}: cannot create the GPU's lock file ({e.strerror})") from None
        except OSError as e:
            what = "a symlink, refused" if os.path.islink(path) else e.strerror
            raise LockFileError(f"{path}: cannot open the GPU's lock file ({what})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LockFileError(f"{path}: the GPU's lock file is not a regular file")
    return os.fdopen(fd, "r")


def _lock(lock_path: str, what: str):
    """The GPU's lock file, open and locked (waiting for it if another process holds it), and the
    turn's start: (file, {"asked_unix_ns", "started_unix_ns", "waited_s"})."""
    asked = time.time_ns()
    f = open_lock_file(lock_path)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"{what}: waiting for the GPU's turn ({lock_path})", file=sys.stderr, flush=True)
        fcntl.flock(f, fcntl.LOCK_EX)
    turn = {"asked_unix_ns": asked, "started_unix_ns": time.time_ns()}
    turn["waited_s"] = (turn["started_unix_ns"] - asked) / 1e9
    return f, turn


class HandedTurn:
    """A turn a process took for a child it is about to launch (:func:`turn_for_child`): ``env``
    (what the child's environment adds) and ``fds`` (the locked file, passed to the child) go to the
    launch; :meth:`let_go` follows it at once."""

    def __init__(self, f=None, turn: dict | None = None, environ=os.environ) -> None:
        self._f, self._environ = f, environ
        self.env: dict[str, str] = {}
        self.fds: tuple[int, ...] = ()
        if f is not None:
            self.env = {HANDED_VARIABLE: f"{f.fileno()} {turn['asked_unix_ns']} {turn['started_unix_ns']}"}
            self.fds = (f.fileno(),)

    def let_go(self) -> None:
        """Close this process's copy of the lock (the child's copy keeps it locked until the child gives
        the turn back or exits) and move this process back to the others' cores, where it waits for the
        child beside the next runs' turns. Safe to call twice."""
        if self._f is None:
            return
        self._f.close()
        self._f = None
        use_other_cores(self._environ)


@contextlib.contextmanager
def turn_for_child(what: str, environ=os.environ) -> Iterator[HandedTurn]:
    """For a start-up measured from a process's launch (cold/warm starts, Warp's coldstart experiment):
    wait for the GPU's turn here, before the child exists, and hand it over at the launch. The child
    starts on the holder's cores holding the GPU, as a job that holds it throughout would start it,
    and gives the turn back once its measurement is over and its device memory freed
    (:meth:`GpuTurn.release`), else at its exit: the GPU then goes to other runs while the child checks
    its result, writes its record and exits, and while this process reads it and launches the next.
    Without ``COOKBOOK_GPU_TURN_LOCK`` it takes nothing (the job holds the GPU itself, or a
    scheduler gave it one) and the handed turn adds nothing to the launch."""
    lock_path = settings.text(LOCK_VARIABLE, environ)
    if not lock_path:
        yield HandedTurn()
        return
    f, turn = _lock(lock_path, what)
    handed = HandedTurn(f, turn, environ)
    try:
        os.set_inheritable(f.fileno(), True)
        # the child inherits this process's cores at its launch
        use_holder_cores(environ)
        yield handed
    finally:
        handed.let_go()


def adopt_handed_turn(environ=os.environ) -> GpuTurn | None:
    """In a child launched with a turn (:func:`turn_for_child`): hold that turn as :func:`take_turn`
    would have taken it, from the parent's start of it; the turn, or None when none was handed over.
    Call it first thing, before a library could start processes of its own that would inherit the
    lock: the file is made non-inheritable here and the variable removed from the environment."""
    global _held
    if _held is not None and _held.held:
        return _held
    text = settings.text(HANDED_VARIABLE, environ)
    if not text:
        return None
    lock_path = settings.text(LOCK_VARIABLE, environ)
    try:
        fd, asked, started = (int(x) for x in text.split())
        held = os.fstat(fd)
        if lock_path and not os.path.samestat(held, os.stat(lock_path)):
            raise OSError(f"file descriptor {fd} is not {lock_path}")
        f = os.fdopen(fd, "r")
    except (ValueError, OSError) as e:
        raise WorkloadError(f"{HANDED_VARIABLE}={text!r}: not a GPU turn handed to this process ({e}); "
                            "it is set by the process that launches it") from None
    os.set_inheritable(fd, False)
    environ.pop(HANDED_VARIABLE, None)
    turn = {"asked_unix_ns": asked, "started_unix_ns": started, "waited_s": (started - asked) / 1e9,
            "handed_by_parent": True}
    # the parent moved to the holder's cores before the launch: the whole start-up runs there
    holder_cores = settings.text(HOLDER_CORES_VARIABLE, environ)
    if holder_cores:
        turn["cpu_cores"] = holder_cores
    _held = GpuTurn(f, turn, _write_turn_record(turn, environ))
    return _held


def _write_turn_record(turn: dict, environ) -> str | None:
    """Write the turn's start to this process's record (``COOKBOOK_GPU_TURN_RECORD``) and its end at
    the exit unless given back earlier; the record's path, or None without a record prefix."""
    record_prefix = settings.text(RECORD_VARIABLE, environ)
    if not record_prefix:
        return None
    record_path = turn_record_path(record_prefix, os.getpid())
    write_json_atomic(record_path, turn)

    def _ended() -> None:
        # as late as Python lets us write: the lock itself goes with the process, just after;
        # a turn given back earlier has written its end already
        if turn.get("ended_unix_ns") is None:
            write_json_atomic(record_path, {**turn, "ended_unix_ns": time.time_ns()})

    atexit.register(_ended)
    return record_path


def take_turn(what: str, environ=os.environ, setup_on_every_core: bool = False) -> GpuTurn | None:
    """Wait for the GPU's lock named in ``COOKBOOK_GPU_TURN_LOCK`` and hold it until this process
    exits or gives it back (:meth:`GpuTurn.release`). Returns the turn, or None when no lock is
    named. A second call in the same process returns the turn already held.

    Where the pipeline split the cores, the process moves to the holder's (``cpu_cores``), or with
    ``setup_on_every_core`` to every core of the split (``setup_cpu_cores``) until it calls
    :meth:`GpuTurn.measure_on_holder_cores`: a run's setup measures nothing, and only one process
    holds the GPU, so its compiles (XLA's GEMM autotuning compiles every candidate kernel on a thread pool)
    may take the other jobs' cores too; its measurement then runs on the holder's alone."""
    global _held
    if _held is not None and _held.held:
        return _held
    handed = adopt_handed_turn(environ)
    if handed is not None:
        # a start-up measured from the launch: held from before it, on the holder's cores throughout
        return handed
    lock_path = settings.text(LOCK_VARIABLE, environ)
    if not lock_path:
        return None
    f, turn = _lock(lock_path, what)
    every_core = use_every_core(environ) if setup_on_every_core else None
    if every_core:
        turn["setup_cpu_cores"] = every_core
        turn["cpu_cores"] = settings.text(HOLDER_CORES_VARIABLE, environ)
    else:
        holder_cores = use_holder_cores(environ)
        if holder_cores:
            turn["cpu_cores"] = holder_cores
    _held = GpuTurn(f, turn, _write_turn_record(turn, environ))
    return _held


def _proc_stat_fields(pid: str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...), or None
    when the process is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def live_children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` and that have not exited (zombies left out), from
    ``/proc``; [] where there is no ``/proc``."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    children = []
    for name in names:
        if not name.isdigit():
            continue
        fields = _proc_stat_fields(name)
        if fields and len(fields) > 1 and fields[1] == str(pid) and fields[0] != "Z":
            children.append(int(name))
    return sorted(children)


class GpuTurn:
    """This process's turn on the GPU, from :func:`take_turn` (or :func:`adopt_handed_turn`) to
    :meth:`release` or the process's exit. ``record`` is what the turn's record file holds
    (``asked_unix_ns``, ``started_unix_ns``, ``waited_s``; ``cpu_cores`` and ``setup_cpu_cores``
    where the pipeline split the cores; ``handed_by_parent``)."""

    def __init__(self, f, record: dict, record_path: str | None) -> None:
        self._f = f
        self.record = record
        self._record_path = record_path

    @property
    def held(self) -> bool:
        """Whether the process still holds the turn (not given back by :meth:`release`)."""
        return self._f is not None

    @property
    def waited_s(self) -> float:
        """Seconds from asking for the turn to getting it."""
        return self.record["waited_s"]

    @property
    def cpu_cores(self) -> str | None:
        """The CPU cores the run had to itself while it held the GPU (:func:`split_cores`), or None."""
        return self.record.get("cpu_cores")

    def measure_on_holder_cores(self, environ=os.environ) -> str | None:
        """From a run's measurement on, the holder's cores alone (:func:`take_turn` with
        ``setup_on_every_core``); a no-op once the turn is given back. Their list, or None."""
        return use_holder_cores(environ) if self.held else None

    def release(self, held_bytes: int | None, total_bytes: int | None) -> dict | None:
        """Give the GPU's turn back before the process exits when the process holds at most
        :data:`RELEASE_MAX_HELD_FRACTION` of the GPU's memory (``held_bytes`` of ``total_bytes``,
        NVML's figures: :func:`workloads.harness.telemetry.process_gpu_memory`) and has no live child
        process (one it started could still use the GPU). Call it only once the process will use the
        GPU no more. Returns what was decided, for the run's record (``released``, ``held_bytes``, and
        ``reason`` where the turn is kept), or None when the turn was given back already."""
        global _held
        if not self.held:
            return None
        decision: dict = {"released": False, "held_bytes": held_bytes}
        if held_bytes is None or not total_bytes:
            decision["reason"] = "NVML did not report this process's GPU memory: the turn lasts to the exit"
            return decision
        limit = RELEASE_MAX_HELD_FRACTION * total_bytes
        if held_bytes > limit:
            decision["reason"] = (f"the process still holds {held_bytes / 2**30:.2f} GiB of the GPU's memory, over "
                                  f"{RELEASE_MAX_HELD_FRACTION:.0%} of it: the turn lasts to the exit")
            return decision
        children = live_children(os.getpid())
        if children:
            decision["reason"] = (f"child process(es) {', '.join(map(str, children))} of this run are alive and "
                                  "may use the GPU: the turn lasts to the exit")
            return decision
        self.record["ended_unix_ns"] = time.time_ns()
        self.record["released_before_exit"] = True
        if self._record_path is not None:
            # written before the lock goes: a reader never sees a later turn start before this one's end
            write_json_atomic(self._record_path, self.record)
        # closed, not unlocked: a copy of the open lock that a forked child still holds keeps the GPU
        # locked until that child exits (LOCK_UN would release it for every copy at once)
        self._f.close()
        self._f = None
        if _held is self:
            _held = None
        # the check and the exit run beside the next run's turn, on the others' cores
        use_other_cores()
        decision["released"] = True
        return decision
