"""Run a command cold: every JIT and driver cache points at a fresh, private folder.

    python -m workloads.tools.cold --work-dir results -- nsys profile ... python -m workloads.X ...

The caches are redirected through each library's own setting (never by
deleting a user's real cache), so two runs in parallel never share one. The
fresh folders live under ``<work-dir>/cache/`` and are removed afterwards;
:func:`safe_rmtree` refuses any path outside that folder.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

from workloads import frameworks
from workloads.tools.gpu_jobs import gpu_job

#: environment variable -> sub-folder of the run's cache root (the driver's and each framework's)
CACHE_VARIABLES = frameworks.cache_variables()
#: settings that turn a persistent cache off rather than moving it
CACHE_OFF = frameworks.cache_off()


class UnsafePathError(RuntimeError):
    """A path given for deletion is not inside the suite's own cache folder."""


def cache_root(work_dir: str | os.PathLike) -> Path:
    return Path(work_dir).resolve() / "cache"


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


def fresh_cache_env(work_dir: str | os.PathLike, tag: str, base: Mapping[str, str]) -> tuple[dict, Path]:
    """A copy of ``base`` whose cache settings point into a new private folder."""
    root = cache_root(work_dir)
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=root))
    env = dict(base)
    for var, sub in CACHE_VARIABLES.items():
        (run_dir / sub).mkdir()
        env[var] = str(run_dir / sub)
    env.update(CACHE_OFF)
    return env, run_dir


def run_cold(cmd: Sequence[str], work_dir: str, tag: str, keep: bool = False, gpus: int = 1) -> int:
    env, run_dir = fresh_cache_env(work_dir, tag, os.environ)
    print(f"cold: caches in {run_dir}", file=sys.stderr, flush=True)
    try:
        with gpu_job(work_dir, gpus, env, tag, cmd) as record:
            record["returncode"] = subprocess.run(list(cmd), env=env).returncode
        return record["returncode"]
    finally:
        if not keep:
            safe_rmtree(run_dir, cache_root(work_dir))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.cold", description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", required=True, help="the suite's work folder (caches go in <work-dir>/cache)")
    p.add_argument("--tag", default="run", help="prefix of the run's cache folder")
    p.add_argument("--keep", action="store_true", help="keep the cache folder (to inspect it)")
    p.add_argument("--gpus", type=int, default=1,
                   help="GPUs on this machine; with more than one, each run takes a free one "
                        "(CUDA_VISIBLE_DEVICES) unless CUDA_VISIBLE_DEVICES is already set")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given after --")
    if args.gpus < 1:
        p.error("--gpus must be at least 1")
    return run_cold(cmd, args.work_dir, args.tag, args.keep, args.gpus)


if __name__ == "__main__":
    sys.exit(main())
