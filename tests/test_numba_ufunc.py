"""The Numba recipe on the CPU: the shared scalar body through a CPU ufunc, and the @cuda.jit
code under the CUDA simulator (which cannot run CUDA ufuncs: numba-cuda 0.30 raises
"'FakeOverload' object has no attribute 'signature'" there)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

# Numba is imported by the tests that use it, not at collection: a worker that never runs them is
# spared its import
pytestmark = pytest.mark.skipif(importlib.util.find_spec("numba") is None, reason="could not import 'numba'")

import python_forks  # noqa: E402
from conftest import REPO  # noqa: E402
from workloads import frameworks  # noqa: E402


@pytest.fixture(scope="module")
def body():
    """The recipe's kernels and their scalar body (importing it imports Numba)."""
    from workloads.numba_ufunc import body  # noqa: PLC0415 - Numba at the first test that needs it

    return body


def test_scalar_body_as_cpu_ufunc_matches_the_numpy_reference(body):
    import numba

    ufunc = numba.vectorize(["float64(float64)"], target="cpu")(body.mycalculation)
    x = np.random.default_rng(3).standard_normal(10_000)
    out = ufunc(x)
    ref = body.reference(x)
    assert np.all(np.isfinite(out))
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-14


def _simulate(code: str) -> str:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    r = python_forks.run(python_forks.NUMBA_CUDA, [sys.executable, "-c", code], REPO, env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _run_recipe_on_cpu(tmp_path, variant: str, mode: str, size: int = 301) -> dict:
    """``python -m workloads.numba_ufunc --device cpu`` at ``size`` elements; its record. Forked
    from the warm simulator server, with the variable ``--device cpu`` sets
    (test_device_cpu_turns_the_simulator_on_by_itself runs it as a fresh process without it)."""
    out = tmp_path / "rec.json"
    args = [sys.executable, "-m", "workloads.numba_ufunc", "--device", "cpu", "--variant", variant, "--size", str(size),
            "--mode", mode, "--output", str(out)]
    if mode == "timed":
        args += ["--warmup", "1", "--repeats", "3"]
    env = dict(os.environ, **frameworks.framework("numba").cpu_env)
    r = python_forks.run(python_forks.NUMBA_CUDA, args, REPO, env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(out.read_text())


def test_device_cpu_turns_the_simulator_on_by_itself(tmp_path):
    """A fresh process whose environment does not ask for the simulator: ``--device cpu`` does."""
    out = tmp_path / "rec.json"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-m", "workloads.numba_ufunc", "--device", "cpu", "--variant", "float32",
                        "--size", "64", "--mode", "run", "--output", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(out.read_text())["relative_error"] < U32


@pytest.mark.parametrize("mode", ["run", "timed"])
def test_streams_variant_runs_and_checks_under_the_simulator(tmp_path, mode):
    # 301 elements: 15 chunks of 19 and one of 16 (unequal lengths), each of the 3 streams used 5 or 6 times
    rec = _run_recipe_on_cpu(tmp_path, "streams", mode)
    assert rec["relative_error"] <= 1e-13
    assert rec["work"]["bytes_h2d"] == rec["work"]["bytes_d2h"] == 8 * 301


def test_a_skipped_chunk_is_caught_by_the_check():
    out = _simulate(
        "from workloads.numba_ufunc.streams import Streams\n"
        "from workloads.contract import check_result, ResultMismatch\n"
        "v = Streams(size=301); v.setup(); v.bounds = v.bounds[:-1]; v.step()\n"
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


# --- the float32 steps ---------------------------------------------------------------------------------

from workloads.numba_ufunc import rounding  # noqa: E402

U32 = 2.0 ** -24


def test_the_fill_bounds_x_by_its_box_muller_floor(body):
    # |x| = sqrt(-2 ln u1) |cos| <= sqrt(-2 ln FILL_U1_MIN): what the float32 tolerances are taken at
    assert body.FILL_U1_MIN == 1e-12
    assert body.FILL_MAX_ABS == pytest.approx(7.4338443777, rel=1e-10)


def test_the_float32_error_bound_is_the_derivation_in_rounding_py(body):
    # libdevice: (x^2/2 + 8.5) u, every term of the module doc
    assert rounding.UNIT_ROUNDOFF == U32 and rounding.ULP == 2 * U32
    assert rounding.relative_error_bound(0.0) == pytest.approx(8.5 * U32, rel=1e-12)
    for x in (0.5, 1.0, 3.0, body.FILL_MAX_ABS):
        assert rounding.relative_error_bound(x) == pytest.approx((x * x / 2 + 8.5) * U32, rel=1e-12)
    # fastmath: x^2 u + 2^-22.41 (half the sine's absolute error) + 2^-12 (half the assumed tanh) + 11.5 u
    for x in (0.0, 2.0, body.FILL_MAX_ABS):
        want = x * x * U32 + 2.0 ** -22.41 + 2.0 ** -12 + 11.5 * U32
        assert rounding.relative_error_bound(x, fastmath=True) == pytest.approx(want, rel=1e-12)
    # the tolerances the steps carry: the bound at the largest |x| the fill draws
    from workloads.numba_ufunc.fastmath import Fastmath
    from workloads.numba_ufunc.float32 import Float32

    assert Float32.tolerance == pytest.approx(2.1536e-6, rel=1e-4)
    assert Fastmath.tolerance == pytest.approx(2.4830e-4, rel=1e-4)
    # vectorized as the per-element test below uses it
    xs = np.array([0.0, 1.0, 2.0])
    assert np.allclose(rounding.relative_error_bound(xs), (xs ** 2 / 2 + 8.5) * U32, rtol=1e-12)


@pytest.mark.parametrize("fastmath", [False, True])
def test_float32_cpu_ufunc_stays_within_the_bound_element_by_element(fastmath, body):
    # the same body compiled for the CPU in float32 (glibc's float32 sinf/expf/tanhf, within the 2 ulp
    # the bound assumes): every element within its own first-order bound, and the relative norm (what the
    # check takes) far under the step's tolerance. Numba's CPU fastmath keeps the library calls, so the
    # fastmath run measures the same float32 arithmetic, not the GPU's approximate instructions.
    import numba

    ufunc = numba.vectorize(["float32(float32)"], target="cpu", fastmath=fastmath)(body.mycalculation)
    x = np.random.default_rng(7).standard_normal(2_000_000).astype(np.float32)
    ref = body.reference(x)
    out = ufunc(x).astype(np.float64)
    assert np.all(np.isfinite(out))
    rel = np.abs(out - ref) / np.abs(ref)
    assert np.all(rel <= rounding.relative_error_bound(np.abs(x.astype(np.float64))))
    norm = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    # rounding.py's measured figure: 2.6e-8 (0.44 u); the float32 tolerance sits ~80x above it
    assert 0.1 * U32 < norm < U32
    assert rounding.tolerance(body.FILL_MAX_ABS) / norm > 40


@pytest.mark.parametrize("variant", ["float32", "fastmath"])
@pytest.mark.parametrize("mode", ["run", "timed"])
def test_float32_steps_run_and_check_under_the_simulator(tmp_path, variant, mode, body):
    # the simulator runs every thread in Python: a few hundred elements, more than one block
    n = 301
    rec = _run_recipe_on_cpu(tmp_path, variant, mode, size=n)
    assert rec["tolerance"] == rounding.tolerance(body.FILL_MAX_ABS, fastmath=variant == "fastmath")
    # the simulator evaluates the math in Python floats and stores float32: the output's rounding only
    assert 0 < rec["relative_error"] < U32
    w = rec["work"]
    assert (w["bytes_read"], w["bytes_written"], w["flops"], w["flops_kind"]) == (4 * n, 4 * n, 10 * n, "fp32")
    assert w["bytes_h2d"] == w["bytes_d2h"] == 0


def test_float32_results_off_by_five_times_the_bound_fail_the_check():
    # and a kernel that never ran leaves the poison (NaN) in place
    out = _simulate(
        "import numpy as np\n"
        "from workloads.numba_ufunc.float32 import Float32\n"
        "from workloads.contract import check_result, ResultMismatch\n"
        "v = Float32(size=301); v.setup(); v.step()\n"
        "got, ref = v.result(), v.reference()\n"
        "assert got.dtype == np.float32 and v.d_x.copy_to_host().dtype == np.float32\n"
        "print('exact', check_result(got, ref, v.tolerance, 'x') < 1e-7)\n"
        "try:\n"
        "    check_result(got * np.float32(1 + 5 * v.tolerance), ref, v.tolerance, 'x')\n"
        "except ResultMismatch as e:\n"
        "    print('caught', e)\n"
        "w = Float32(size=301); w.setup()\n"
        "try:\n"
        "    check_result(w.result(), w.reference(), w.tolerance, 'x')\n"
        "except ResultMismatch as e:\n"
        "    print('unlaunched', e)\n")
    assert "exact True" in out
    assert "caught" in out and "exceeds tolerance" in out
    assert "unlaunched" in out and "non-finite" in out


def test_the_float32_kernels_pass_fastmath_and_lineinfo_to_both_jit_calls(monkeypatch, body):
    # Numba compiles for the GPU only where there is one (the simulator has no lineinfo): a stand-in
    # records the calls
    seen = []

    class Recorder:
        @staticmethod
        def jit(*args, **kwargs):
            seen.append((args, kwargs))
            return lambda fn: fn

    monkeypatch.setattr(body, "jit_options", lambda: {"lineinfo": True})
    monkeypatch.setattr(body, "cuda", Recorder)
    monkeypatch.setattr(body, "_compiled", {})
    for fastmath in (False, True):
        seen.clear()
        kernel = body.float32_kernel(fastmath)
        assert kernel.__name__ == ("mycalculation_f32_fastmath" if fastmath else "mycalculation_f32")
        (dev_args, dev_kw), (k_args, k_kw) = seen
        assert dev_args == () and dev_kw == {"device": True, "fastmath": fastmath, "lineinfo": True}
        assert k_args == () and k_kw == {"fastmath": fastmath, "lineinfo": True}


def test_the_new_kernels_names_select_only_themselves():
    from workloads.tools.kernel_profile import kernel_regex, name_matches

    f32 = "mycalculation_f32[abi:v1,cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3CwAkMQ6ntbdO9]"
    fast = "mycalculation_f32_fastmath[abi:v1,cw51cXTLSUwv1sDUaKthqaNgoKmjgOR3W3CwAkMQ6ntbdO9]"
    assert name_matches(kernel_regex("numba", "mycalculation_f32"), f32)
    assert not name_matches(kernel_regex("numba", "mycalculation_f32"), fast)
    assert name_matches(kernel_regex("numba", "mycalculation_f32_fastmath"), fast)
    assert not name_matches(kernel_regex("numba", "mycalculation"), f32)


def test_the_float32_steps_are_registered_after_device_resident():
    from workloads.numba_ufunc import RECIPE

    assert RECIPE.variants[-3:] == ("device_resident", "float32", "fastmath")
    assert RECIPE.parent_of("float32") == "device_resident" and RECIPE.parent_of("fastmath") == "float32"
    for v in ("float32", "fastmath"):
        assert RECIPE.variant_class(v).name == v


def test_the_real_float32_kernels_carry_lineinfo_only_when_asked():
    # lazily compiled: Numba makes the dispatchers without a GPU (as tests/test_kernel_profile.py does
    # for the float64 kernels)
    code = ("from workloads.numba_ufunc import body\n"
            "print([(k.__name__, k.targetoptions.get('fastmath'), k.targetoptions.get('lineinfo', False))"
            " for k in (body.float32_kernel(False), body.float32_kernel(True))])")
    for flag, lineinfo in (("1", True), ("0", False)):
        env = dict(os.environ, COOKBOOK_LINEINFO=flag)
        env.pop("NUMBA_ENABLE_CUDASIM", None)
        r = python_forks.run(python_forks.NUMBA_CUDA, [sys.executable, "-c", code], REPO, env, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == str([("mycalculation_f32", False, lineinfo),
                                        ("mycalculation_f32_fastmath", True, lineinfo)])


def test_the_sampled_check_gathers_on_the_device_the_elements_a_full_copy_holds():
    # a profiled run's sampled check: the result's and the input's sampled elements gathered by a
    # kernel, equal to the same elements of full copies; the reference is taken at them
    out = _simulate(
        "import numpy as np\n"
        "from workloads.numba_ufunc import body\n"
        "from workloads.numba_ufunc.float32 import Float32\n"
        "v = Float32(size=7_001); v.check_sample_elements = 500; v.setup(); v.step()\n"
        "got, idx, total = v.sampled_result()\n"
        "full_out, full_x = v.result(), v.d_x.copy_to_host()\n"
        "v.keep_reference_inputs(idx)\n"
        "ref = v.reference_at(idx)\n"
        "print(total, idx.size, len(np.unique(idx)), got.dtype,\n"
        "      np.array_equal(got, full_out[idx]), np.array_equal(ref, body.reference(full_x[idx])))\n")
    assert out.split() == ["7001", "500", "500", "float32", "True", "True"]


@pytest.mark.parametrize("variant", ["baseline", "pinned"])
def test_host_inputs_are_drawn_before_the_turn_and_equal_the_seeded_draw(variant):
    # prepare_host (before the GPU turn) draws the input; setup keeps it (pageable) or copies it
    # into page-locked buffers, and poisons the result with NaN where it is written into
    out = _simulate(
        "import numpy as np\n"
        "from workloads import hostmath\n"
        f"from workloads.numba_ufunc.{variant} import VARIANT\n"
        "v = VARIANT(size=3001, seed=5); v.prepare_host('sample'); drawn = vars(v)['_kept_input']\n"
        "v.setup()\n"
        "same = np.array_equal(v.x, hostmath.standard_normal(3001, 5))\n"
        "print(same, v.x is drawn, bool(np.isnan(v.out).all()), '_kept_input' in vars(v))\n"
        "w = VARIANT(size=3001, seed=5); w.setup()\n"
        "print(np.array_equal(w.x, v.x))\n")
    kept = "True" if variant == "baseline" else "False"
    assert out.split() == ["True", kept, "True", "False", "True"]
