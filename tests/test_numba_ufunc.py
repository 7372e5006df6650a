"""The Numba recipe on the CPU: the shared scalar body through a CPU ufunc, and the @cuda.jit
code under the CUDA simulator (which cannot run CUDA ufuncs: numba-cuda 0.30 raises
"'FakeOverload' object has no attribute 'signature'" there)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from workloads.numba_ufunc import body  # noqa: E402

from conftest import REPO  # noqa: E402


def test_scalar_body_as_cpu_ufunc_matches_the_numpy_reference():
    ufunc = numba.vectorize(["float64(float64)"], target="cpu")(body.mycalculation)
    x = np.random.default_rng(3).standard_normal(10_000)
    out = ufunc(x)
    ref = body.reference(x)
    assert np.all(np.isfinite(out))
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-14


def _simulate(code: str) -> str:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


@pytest.mark.parametrize("mode", ["run", "timed"])
def test_streams_variant_runs_and_checks_under_the_simulator(tmp_path, mode):
    # 3001 elements: chunks of unequal length, every stream used more than once
    out = tmp_path / "rec.json"
    # --device cpu turns the simulator on by itself (workloads/frameworks.py)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    args = [sys.executable, "-m", "workloads.numba_ufunc", "--device", "cpu", "--variant", "streams", "--size", "3001",
            "--mode", mode, "--output", str(out)]
    if mode == "timed":
        args += ["--warmup", "1", "--repeats", "3"]
    r = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["relative_error"] <= 1e-13
    assert rec["work"]["bytes_h2d"] == rec["work"]["bytes_d2h"] == 8 * 3001


def test_a_skipped_chunk_is_caught_by_the_check():
    out = _simulate(
        "from workloads.numba_ufunc.streams import Streams\n"
        "from workloads.contract import check_result, ResultMismatch\n"
        "v = Streams(size=3001); v.setup(); v.bounds = v.bounds[:-1]; v.step()\n"
        "try:\n"
        "    check_result(v.result(), v.reference(), v.tolerance, 'x')\n"
        "except ResultMismatch as e:\n"
        "    print('caught', e)\n")
    assert "caught" in out and "non-finite" in out


def test_fill_kernel_makes_finite_normal_looking_data():
    out = _simulate(
        "import numpy as np\n"
        "from numba import cuda\n"
        "from workloads.numba_ufunc import body\n"
        "d = cuda.device_array(4000, dtype='float64')\n"
        "body.fill_kernel()[4, 64](d, 0.0)\n"
        "x = d.copy_to_host()\n"
        "print(bool(np.isfinite(x).all()), round(float(x.mean()), 1), round(float(x.std()), 1))\n")
    finite, mean, std = out.split()
    assert finite == "True" and abs(float(mean)) <= 0.1 and 0.8 <= float(std) <= 1.2
