"""workloads.tools.check_cuda_toolkit: one line naming what a PyCUDA build would miss (nvcc,
cuda.h), found the way PyCUDA's build finds the toolkit (CUDA_ROOT, else nvcc on PATH)."""
from __future__ import annotations

import subprocess
import sys

from workloads.tools import check_cuda_toolkit

from conftest import REPO


def _toolkit(root, nvcc=True, header=True):
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    if nvcc:
        (root / "bin" / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
        (root / "bin" / "nvcc").chmod(0o755)
    if header:
        (root / "include" / "cuda.h").write_text("")
    return root


def test_nothing_on_path_names_nvcc_and_cuda_h():
    ready, line = check_cuda_toolkit.check({"PATH": ""})
    assert not ready
    assert "missing nvcc and cuda.h" in line and "\n" not in line


def test_a_toolkit_without_headers_names_cuda_h_only(tmp_path):
    root = _toolkit(tmp_path / "cuda", header=False)
    ready, line = check_cuda_toolkit.check({"PATH": str(root / "bin")})
    assert not ready
    assert f"missing cuda.h ({root / 'include' / 'cuda.h'} not found)" in line
    assert "nvcc (" not in line


def test_cuda_root_wins_over_path(tmp_path):
    root = _toolkit(tmp_path / "cuda")
    other = _toolkit(tmp_path / "other", nvcc=False, header=False)
    ready, line = check_cuda_toolkit.check({"PATH": str(other / "bin"), "CUDA_ROOT": str(root)})
    assert ready
    assert line == f"CUDA toolkit for a PyCUDA build: nvcc 13.0 and cuda.h in {root} (from CUDA_ROOT)"


def test_command_line_exits_2_with_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workloads.tools.check_cuda_toolkit"], cwd=REPO,
                       capture_output=True, text=True, env={"PATH": "", "CUDA_ROOT": str(tmp_path)})
    assert r.returncode == 2
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1
    assert "missing nvcc" in r.stderr and "cuda.h" in r.stderr
