"""Shared fixtures. The captures under reports/reference/ are real profiler output from a GPU host."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = REPO / "reports" / "reference" / "h200"
sys.path.insert(0, str(REPO))


def copy_checkout(dst: pathlib.Path, parts: tuple[str, ...] = (), reference: str | tuple[str, ...] = ()
                  ) -> pathlib.Path:
    """The checkout's files that git tracks or would track (new, not ignored) into ``dst``, so that
    pipeline runs leave the checkout alone: never a virtual environment, results, caches or the
    committed figures.
    ``parts``: only these paths (all when empty). The reference captures (30 MB) are copied only
    as asked: ``reference`` names run folders under reports/reference/h200 ("" for all of them),
    or is "link" for a symbolic link to the checkout's reference, for runs that only read it."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *parts],
                            cwd=REPO, capture_output=True, text=True)
    if listed.returncode != 0:
        raise RuntimeError(f"{REPO}: not a git checkout, the pipeline tests copy its tracked files: {listed.stderr}")
    # a virtual environment that .gitignore does not name is still one (it holds pyvenv.cfg)
    venvs = {p.parent.name for p in REPO.glob("*/pyvenv.cfg")}
    # the committed figures are outputs the pipeline draws again, never inputs
    files = [f for f in listed.stdout.split("\0") if f and not f.startswith(("reports/reference/", "reports/figures/"))
             and f.split("/", 1)[0] not in venvs]
    if reference == "link":
        (dst / "reports").mkdir(parents=True, exist_ok=True)
        (dst / "reports" / "reference").symlink_to(REPO / "reports" / "reference", target_is_directory=True)
    else:
        for run in reference:
            files += [str(p.relative_to(REPO)) for p in (REFERENCE / run).rglob("*") if p.is_file()]
    for rel in files:
        if (REPO / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, dst / rel)
    return dst


def reference_runs(with_nsys_stats: bool = False) -> list[pathlib.Path]:
    """Every run folder of the reference capture (workload/variant/n<size>). ``with_nsys_stats``:
    only those that kept nsys' own CSVs (ground truth); a run captured by hand outside the pipeline
    (reports/reference/h200/jax_matmul/jit/n512) has none."""
    runs = sorted(p.parent for p in REFERENCE.glob("*/*/n*/timing.json"))
    return [r for r in runs if (r / "nsys-stats").is_dir()] if with_nsys_stats else runs


@pytest.fixture(scope="session")
def reference_dir() -> pathlib.Path:
    if not REFERENCE.is_dir():
        pytest.fail(f"reference captures missing: {REFERENCE}")
    return REFERENCE


@pytest.fixture
def no_gpu_env(tmp_path, monkeypatch):
    """PATH without nvidia-smi, nsys or ncu, whatever the machine has."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "bash", "sh", "tee", "env", "mkdir", "cat", "git"):
        for d in os.environ.get("PATH", "").split(os.pathsep):
            cand = pathlib.Path(d) / tool
            if cand.exists() and not (bin_dir / tool).exists():
                (bin_dir / tool).symlink_to(cand)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.delenv("NCU", raising=False)
    return bin_dir
