"""Run a command cold: every JIT and driver cache points at a fresh, private folder.

    python -m workloads.tools.cold --work-dir results -- nsys profile ... python -m workloads.X ...

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
the workload inside takes it from its setup until its memory is freed or its exit (``workloads/gpu_turn.py``), so that
several such commands start and finish beside each other while one uses the GPU.

The command runs in its own process group. SIGINT, SIGTERM and SIGHUP sent to
this wrapper are forwarded to that group; the wrapper waits for the command to
exit, writes its GPU job record (``killed_by``), removes the cache folder and
only then lets go of the GPU. If the wrapper itself is SIGKILLed, the kernel
kills the command too (Linux ``PR_SET_PDEATHSIG``). A command that fails leaves
its exit status and the tail of its stderr as the last lines of the wrapper's
stderr (the rule's log), whatever else it printed.
"""
from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

from workloads import frameworks, gpu_turn
from workloads.tools.gpu_jobs import gpu_job
from workloads.work_dir import system_folder_problem

#: environment variable -> sub-folder of the run's cache root (the driver's and each framework's)
CACHE_VARIABLES = frameworks.cache_variables()
#: settings the private cache folders need besides the folder (JAX's cache turned on)
CACHE_SETTINGS = frameworks.cache_settings()


#: what a tag may be: one path component (it prefixes the run's cache folder)
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,99}")
#: signals forwarded to the command's process group
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
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
    """In the command's process, before exec: SIGKILL it when the wrapper dies (Linux), so that a
    SIGKILLed wrapper, whose GPU lock the kernel releases at once, leaves no job on the GPU."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def run_command(cmd: Sequence[str], env: Mapping[str, str], record: dict, label: str,
                handed: gpu_turn.HandedTurn | None = None) -> int:
    """Run ``cmd`` in its own process group, forwarding FORWARDED_SIGNALS to it, and wait for it
    to exit, whatever this process receives meanwhile. Sets ``record["returncode"]`` and, when a
    signal was forwarded, ``record["killed_by"]``. Its stderr passes through; after a failure the
    exit status and the tail of the stderr are repeated as the last lines. ``handed``: a GPU turn
    taken for the command (:func:`workloads.gpu_turn.turn_for_child`), passed to it at its launch
    and let go here right after."""
    handed = handed or gpu_turn.HandedTurn()
    try:
        proc = subprocess.Popen(list(cmd), env={**env, **handed.env}, stderr=subprocess.PIPE, start_new_session=True,
                                pass_fds=handed.fds, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    finally:
        handed.let_go()
    tail: collections.deque[bytes] = collections.deque()
    tail_len = [0]

    def pump() -> None:  # the command's stderr -> ours, keeping the tail
        out = sys.stderr.buffer
        for chunk in iter(lambda: proc.stderr.read1(65536), b""):
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
              f"{proc.pid}) and waiting for it to exit", file=sys.stderr, flush=True)
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass

    previous = {s: signal.signal(s, forward) for s in FORWARDED_SIGNALS}
    try:
        returncode = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    pumping.join(timeout=10)
    record["returncode"] = returncode
    if returncode != 0:
        status = f"was killed by {_signal_name(-returncode)}" if returncode < 0 else f"exited with status {returncode}"
        text = b"".join(tail).decode(errors="replace")[-STDERR_TAIL_BYTES:].rstrip()
        print(f"\ncold: {label}: the command {status}: {' '.join(cmd)}", file=sys.stderr)
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
            returncode = run_command(cmd, env, record, tag)
            killed_by = record.get("killed_by")
    finally:
        if not keep:
            safe_rmtree(run_dir, root)
    if killed_by is not None and returncode >= 0:
        return 128 + signal.Signals[killed_by].value  # the command caught it: still report the kill
    return returncode if returncode >= 0 else 128 - returncode


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.cold", description=__doc__.split("\n")[0])
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
                        "GPU part (workloads.gpu_turn), so that several such jobs start and finish beside each other")
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
        print(f"workloads.tools.cold: {cmd[0]}: no such program (not a file, or not executable, or not on PATH)",
              file=sys.stderr)
        return 2
    try:
        return run_cold(cmd, args.work_dir, args.tag, args.keep, args.gpus, args.shared_cache, args.turns)
    except gpu_turn.CoreSplitError as e:
        print(f"workloads.tools.cold: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
