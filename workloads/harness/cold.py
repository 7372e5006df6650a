"""Run a command cold: every JIT and driver cache points at a fresh, private folder.

    python -m workloads.harness.cold --work-dir results -- nsys profile ... python -m workloads.X ...

The caches are redirected through each library's own setting (never by
deleting a user's real cache), so two runs in parallel never share one. The
fresh folders live under ``<work-dir>/cache/`` and are removed afterwards;
:func:`safe_rmtree` refuses any path outside that folder. The tag and the cache
root are checked before anything runs.

``--shared-cache KEY`` (the timed, ncu and some nsys runs of one recipe) is
the one exception: the compile caches of frameworks that compile outside what
those runs measure (``Framework.shared_compile_cache``: JAX, Warp, PyCUDA, cuDF), go to
``<work-dir>/cache/shared/KEY/`` and stay there, so that the first run that
needs a program compiles it and the others load it. Every other cache is still fresh.
Deleting ``<work-dir>/cache/shared`` between runs is always safe.

``--turns`` (a step's timed, nsys and ncu runs, on one GPU): the wrapper does not hold the GPU;
the workload inside takes it from its setup until its memory is freed or its exit (``workloads/harness/gpu_turn.py``), so that
several such commands start and finish beside each other while one uses the GPU.

The command runs in its own process group, launched by a keeper process forked from this
wrapper: the keeper is in a session of its own, holds a copy of the wrapper's GPU lock and is the
subreaper of the command's whole tree (Linux ``PR_SET_CHILD_SUBREAPER``). SIGINT, SIGTERM and
SIGHUP sent to this wrapper are forwarded to the command's group; once the command exits the keeper
kills whatever it left (its group, and any descendant that left the group, as a profiler's program
or daemon may) and waits for all of it; the wrapper then writes the GPU job record (``killed_by``),
removes the cache folder and only then lets go of the GPU. If the wrapper itself is SIGKILLed, the
keeper kills the command's tree, waits for it, writes the record (``wrapper_killed``) and removes
the caches, and the GPU's lock goes with the keeper, after all of that. The command gets a
SIGKILL if the keeper dies (``PR_SET_PDEATHSIG``). A command that fails leaves its exit status and
the tail of its stderr as the last lines of the wrapper's stderr (the rule's log), whatever else it
printed; one that cannot be started exits 127 with one line.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from workloads import frameworks

from workloads.harness import gpu_turn
from workloads.tools.gpu_jobs import LockFolderError, gpu_job
from workloads.work_dir import system_folder_problem

#: environment variable -> sub-folder of the run's cache root (the driver's and each framework's)
CACHE_VARIABLES = frameworks.cache_variables()
#: settings the private cache folders need besides the folder (JAX's cache turned on)
CACHE_SETTINGS = frameworks.cache_settings()


#: what a tag may be: one path component (it prefixes the run's cache folder)
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,99}")
#: signals forwarded to the command's process group
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: when a start-up's parent launched it (workloads/settings.py), stamped by the keeper at the launch
LAUNCH_VARIABLE = "COOKBOOK_LAUNCH_UNIX_NS"
#: bytes of the command's stderr repeated after a failure
STDERR_TAIL_BYTES = 4000


class UnsafePathError(RuntimeError):
    """A path given for deletion is not inside the suite's own cache folder, or a tag or cache root
    that would put one elsewhere."""


def cache_root(work_dir: str | os.PathLike) -> Path:
    return Path(work_dir).resolve() / "cache"


def check_tag(tag: str, option: str = "--tag") -> str:
    """``tag`` names the run's cache folder (``--shared-cache``: the recipe's shared one): one plain
    path component, nothing that climbs out."""
    if not _TAG.fullmatch(tag) or ".." in tag:
        raise UnsafePathError(f"{option} {tag!r}: use letters, digits and _.+=- only (one folder name, no '..')")
    return tag


def check_cache_root(work_dir: str | os.PathLike) -> Path:
    """``<work-dir>/cache``, refused up front when it is a symlink or not a folder (the run's
    caches, and what is deleted afterwards, would be elsewhere)."""
    root = Path(os.path.abspath(work_dir)) / "cache"
    if root.is_symlink():
        raise UnsafePathError(f"{root} is a symlink (to {os.readlink(root)}): the cache root must be a real folder")
    if root.exists() and not root.is_dir():
        raise UnsafePathError(f"{root} exists and is not a folder")
    return cache_root(work_dir)


def safe_rmtree(path: str | os.PathLike, allowed_root: str | os.PathLike) -> None:
    """Delete ``path`` only if it resolves strictly inside ``allowed_root``.

    Symlinks are resolved first, so a link pointing outside is refused; the
    root itself, ``/`` and the home folder are refused whatever the root is.
    """
    root = Path(allowed_root).resolve()
    target = Path(path).resolve()
    forbidden = {Path("/").resolve(), Path.home().resolve()}
    if target in forbidden or root in forbidden:
        raise UnsafePathError(f"refusing to delete {path!r}: it is / or the home folder")
    if root.name != "cache":
        raise UnsafePathError(f"refusing to delete under {allowed_root!r}: not a suite cache folder")
    if target == root or root not in target.parents:
        raise UnsafePathError(f"refusing to delete {path!r}: it resolves to {target}, outside {root}")
    shutil.rmtree(target)


#: sub-folder of the cache root that holds the recipes' shared compile caches (--shared-cache)
SHARED = "shared"


def fresh_cache_env(work_dir: str | os.PathLike, tag: str, base: Mapping[str, str],
                    shared_key: str | None = None) -> tuple[dict, Path]:
    """A copy of ``base`` whose cache settings point into a new private folder; with
    ``shared_key``, the shared compile caches point into ``<cache root>/shared/<shared_key>``."""
    root = cache_root(work_dir)
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=root))
    env = dict(base)
    for var, sub in CACHE_VARIABLES.items():
        (run_dir / sub).mkdir()
        env[var] = str(run_dir / sub)
    env.update(CACHE_SETTINGS)
    if shared_key is not None:
        shared = root / SHARED / check_tag(shared_key, "--shared-cache")
        for name, settings in frameworks.shared_compile_caches(str(shared)).items():
            (shared / name).mkdir(parents=True, exist_ok=True)
            env.update(settings)
    return env, run_dir


def _die_with_parent() -> None:
    """In the command's process, before exec: SIGKILL it when its parent, the keeper, dies (Linux)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


#: Linux prctl options: a signal on the parent's death; orphaned descendants reparented to this process
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _end_process_tree(group: int) -> None:
    """In the keeper: SIGKILL the command's process group and every other descendant left (each
    orphan is reparented to the keeper, a subreaper), and reap them all; returns once none is left,
    so that no process of the command outlives the GPU's lock."""
    me = os.getpid()
    while True:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
        for pid in gpu_turn.live_children(me):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


class _Keeper:
    """The process that launches the command and outlives a SIGKILL of the wrapper (its own session,
    so also a kill of the wrapper's process group): forked from the wrapper, it holds the wrapper's
    open files, the GPU's lock among them, and is the parent and subreaper of the command's whole
    tree. The wrapper reads ``pid N`` (the command's process group), then ``exit RC`` once every
    process of the tree has exited, and answers ``done``; if the wrapper is gone before that answer
    (end of file), the keeper kills the tree, waits for it, writes the record itself
    (``wrapper_killed``) and removes the run's caches (``on_orphaned``). A wrapper killed after its
    answer, while it writes the record, leaves none; nothing of the command runs by then."""

    def __init__(self, cmd: Sequence[str], env: Mapping[str, str], stderr_fd: int, pass_fds: Sequence[int],
                 record: dict, on_orphaned: Callable[[], None] | None = None) -> None:
        self.cmd, self.env, self.stderr_fd, self.pass_fds = list(cmd), dict(env), stderr_fd, tuple(pass_fds)
        self.record, self.on_orphaned = record, on_orphaned

    def run(self, to_wrapper: int, from_wrapper: int) -> int:
        os.setsid()
        for s in (signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # meant for the wrapper, which passes them on
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
        say = os.fdopen(to_wrapper, "w", buffering=1)
        if LAUNCH_VARIABLE in self.env:
            # a start-up timed from its launch: stamped at the launch itself, not before this fork
            self.env[LAUNCH_VARIABLE] = str(time.time_ns())
        try:
            proc = subprocess.Popen(self.cmd, env=self.env, stderr=self.stderr_fd, start_new_session=True,
                                    pass_fds=self.pass_fds, preexec_fn=_die_with_parent)
        except OSError as e:
            say.write(f"error {e.strerror or e}\n")
            return 0
        finally:
            os.close(self.stderr_fd)
            for fd in self.pass_fds:
                os.close(fd)  # a handed turn is the command's: given back when it gives it back
        say.write(f"pid {proc.pid}\n")

        def forward(signum, _frame) -> None:  # a SIGTERM for the keeper ends the command first
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signum)

        signal.signal(signal.SIGTERM, forward)
        wrapper_gone = threading.Event()

        def watch() -> None:
            # the wrapper writes nothing until the job is over: end of file before "done" is its death
            with os.fdopen(from_wrapper, "r") as f:
                if f.readline().strip() != "done":
                    wrapper_gone.set()
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        returncode = proc.wait()
        _end_process_tree(proc.pid)
        with contextlib.suppress(BrokenPipeError):
            say.write(f"exit {returncode}\n")
        watcher.join()
        if wrapper_gone.is_set():
            print(f"cold: the wrapper of {' '.join(self.cmd)} was killed: its command (process group {proc.pid}) "
                  f"was killed and has exited; the GPU is let go now", file=sys.stderr, flush=True)
            self.record.update(returncode=returncode, wrapper_killed=True)
            if self.record.get("killed_by") is None:
                self.record["killed_by"] = "SIGKILL"
            if callable(getattr(self.record, "write", None)):
                self.record.write()
            if self.on_orphaned is not None:
                self.on_orphaned()
        return 0


def run_command(cmd: Sequence[str], env: Mapping[str, str], record: dict, label: str,
                handed: gpu_turn.HandedTurn | None = None, on_orphaned: Callable[[], None] | None = None) -> int:
    """Run ``cmd`` in its own process group, forwarding FORWARDED_SIGNALS to it, and wait for it
    and every process it left to exit, whatever this process receives meanwhile. Sets
    ``record["returncode"]`` and, when a signal was forwarded, ``record["killed_by"]``. Its stderr
    passes through; after a failure the exit status and the tail of the stderr are repeated as the
    last lines. ``handed``: a GPU turn taken for the command
    (:func:`workloads.harness.gpu_turn.turn_for_child`), passed to it at its launch and let go here right
    after. The command is launched by a keeper process (:class:`_Keeper`) that survives a SIGKILL of
    this one: it then kills the command's tree, waits for it, writes ``record`` (a
    :class:`~workloads.tools.gpu_jobs.JobRecord`) and calls ``on_orphaned``, holding the GPU's lock
    until all that is done. A command that cannot be started returns 127, as a shell's would."""
    handed = handed or gpu_turn.HandedTurn()
    err_r, err_w = os.pipe()
    status_r, status_w = os.pipe()
    done_r, done_w = os.pipe()
    keeper = _Keeper(cmd, {**env, **handed.env}, err_w, handed.fds, record, on_orphaned)
    sys.stderr.flush()
    sys.stdout.flush()
    keeper_pid = os.fork()
    if keeper_pid != 0:
        # the keeper holds a copy of a handed turn and passes it on at the launch: this one goes now
        handed.let_go()
    else:  # the keeper: never returns into the wrapper's code
        code = 1
        try:
            os.close(err_r)
            os.close(status_r)
            os.close(done_w)
            code = keeper.run(status_w, done_r)
        except BaseException as e:  # noqa: BLE001 - anything, so that the keeper never runs on as a wrapper
            print(f"cold: {label}: the keeper process failed: {e!r}", file=sys.stderr, flush=True)
        finally:
            os._exit(code)
    os.close(err_w)
    os.close(status_w)
    os.close(done_r)
    status = os.fdopen(status_r, "r")
    launched = status.readline().split(" ", 1)
    if launched[0] != "pid":
        os.close(done_w)
        os.close(err_r)
        status.close()
        os.waitpid(keeper_pid, 0)
        why = launched[1].strip() if len(launched) > 1 else "the keeper process failed"
        print(f"cold: {label}: cannot run {cmd[0]}: {why}", file=sys.stderr, flush=True)
        record["returncode"] = 127
        return 127
    group = int(launched[1])
    tail: collections.deque[bytes] = collections.deque()
    tail_len = [0]
    command_stderr = os.fdopen(err_r, "rb")

    def pump() -> None:  # the command's stderr -> ours, keeping the tail
        out = sys.stderr.buffer
        for chunk in iter(lambda: command_stderr.read1(65536), b""):
            out.write(chunk)
            out.flush()
            tail.append(chunk)
            tail_len[0] += len(chunk)
            while tail_len[0] - len(tail[0]) >= STDERR_TAIL_BYTES:
                tail_len[0] -= len(tail.popleft())

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()

    def forward(signum, _frame) -> None:
        if record.get("killed_by") is None:
            record["killed_by"] = _signal_name(signum)
        print(f"cold: {label}: got {_signal_name(signum)}, passing it to the command (process group "
              f"{group}) and waiting for it to exit", file=sys.stderr, flush=True)
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        # one line once the whole tree has exited (the keeper reaps it); none if the keeper died
        ended = status.readline().split()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    status.close()
    pumping.join(timeout=10)
    command_stderr.close()
    if len(ended) == 2 and ended[0] == "exit":
        returncode = int(ended[1])
    else:
        print(f"cold: {label}: the keeper process of the command died; its command was killed with it",
              file=sys.stderr, flush=True)
        returncode = -signal.SIGKILL
    # the record is written and the caches removed by the caller once this returns: the keeper may go
    os.write(done_w, b"done\n")
    os.close(done_w)
    os.waitpid(keeper_pid, 0)
    record["returncode"] = returncode
    if returncode != 0:
        status_text = (f"was killed by {_signal_name(-returncode)}" if returncode < 0
                       else f"exited with status {returncode}")
        text = b"".join(tail).decode(errors="replace")[-STDERR_TAIL_BYTES:].rstrip()
        print(f"\ncold: {label}: the command {status_text}: {' '.join(cmd)}", file=sys.stderr)
        if text:
            print(f"cold: {label}: the last lines of its stderr:\n{text}", file=sys.stderr)
        sys.stderr.flush()
    return returncode


def run_cold(cmd: Sequence[str], work_dir: str, tag: str, keep: bool = False, gpus: int = 1,
             shared_key: str | None = None, turns: bool = False) -> int:
    check_tag(tag)
    root = check_cache_root(work_dir)
    env, run_dir = fresh_cache_env(work_dir, tag, os.environ, shared_key)
    shared = "" if shared_key is None else f"; compiled programs shared in {root / SHARED / shared_key}"
    print(f"cold: caches in {run_dir}{shared}", file=sys.stderr, flush=True)
    try:
        # the GPU is let go when this block ends: after the command exited and its record is written
        with gpu_job(work_dir, gpus, env, tag, cmd, turns=turns) as record:
            returncode = run_command(cmd, env, record, tag,
                                     on_orphaned=None if keep else lambda: safe_rmtree(run_dir, root))
            killed_by = record.get("killed_by")
    finally:
        if not keep:
            safe_rmtree(run_dir, root)
    if killed_by is not None and returncode >= 0:
        return 128 + signal.Signals[killed_by].value  # the command caught it: still report the kill
    return returncode if returncode >= 0 else 128 - returncode


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.harness.cold", description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", required=True, help="the suite's work folder (caches go in <work-dir>/cache)")
    p.add_argument("--tag", default="run", help="prefix of the run's cache folder")
    p.add_argument("--keep", action="store_true", help="keep the cache folder (to inspect it)")
    p.add_argument("--gpus", type=int, default=1,
                   help="GPUs on this machine; with more than one, each run takes a free one "
                        "(CUDA_VISIBLE_DEVICES) unless CUDA_VISIBLE_DEVICES is already set")
    p.add_argument("--shared-cache", metavar="KEY", default=None,
                   help="share the compile caches of frameworks that compile outside what is measured (JAX, Warp, "
                        "PyCUDA, cuDF) with the other runs given this KEY, in <work-dir>/cache/shared/KEY (one recipe's timed and ncu runs)")
    p.add_argument("--turns", action="store_true",
                   help="one GPU: do not hold it for the whole command; the workload run inside takes it for its "
                        "GPU part (workloads.harness.gpu_turn), so that several such jobs start and finish beside each other")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    if args.gpus < 1:
        p.error("--gpus must be at least 1")
    try:
        check_tag(args.tag)
        if args.shared_cache is not None:
            check_tag(args.shared_cache, "--shared-cache")
        check_cache_root(args.work_dir)
        problem = system_folder_problem(args.work_dir)
        if problem:
            raise UnsafePathError(f"--work-dir {args.work_dir!r} {problem}")
    except UnsafePathError as e:
        p.error(str(e))
    if shutil.which(cmd[0]) is None:
        # refused before any lock or record: Popen's FileNotFoundError would end in a traceback
        print(f"workloads.harness.cold: {cmd[0]}: no such program (not a file, or not executable, or not on PATH)",
              file=sys.stderr)
        return 2
    try:
        return run_cold(cmd, args.work_dir, args.tag, args.keep, args.gpus, args.shared_cache, args.turns)
    except (gpu_turn.CoreSplitError, gpu_turn.LockFileError, LockFolderError) as e:
        print(f"workloads.harness.cold: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
