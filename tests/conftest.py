"""Shared fixtures. The captures under reports/reference/ are real profiler output from a GPU host."""
from __future__ import annotations

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
REFERENCE = REPO / "reports" / "reference" / "h200"
sys.path.insert(0, str(REPO))


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
