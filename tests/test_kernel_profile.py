"""The one-kernel ncu run (workloads/tools/kernel_profile.py) without a GPU: the kernel-name rules
against real kernel names from the committed reports, and the run itself with a stand-in for the
ncu executable that records what it was given (and, for the success path, hands back a committed
real report as ncu's output). Also Numba's COOKBOOK_LINEINFO switch (workloads/numba_ufunc/body.py)."""
from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from analysis.readers.ncu_source import kernel_names
from workloads.contract import WorkloadError
from workloads.tools.kernel_profile import kernel_regex, name_matches, ncu_command, nvtx_include

import python_forks
from conftest import REFERENCE, REPO

#: kernel_profile's capture of scale_vec4 on an H100 (its kernel page: reports/kernels/)
VECTORIZED_KERNEL_CAPTURE = (REPO / "reports" / "reference" / "h100" / "kernels" / "pycuda_kernel_vectorized_scale_vec4"
                             / "kernel.ncu-rep.gz")


def _names(workload, variant, size):
    return kernel_names(str(REFERENCE / workload / variant / f"n{size}" / "ncu.ncu-rep.gz"))


@pytest.mark.parametrize("workload,variant,size,framework,kernel", [
    ("numba_ufunc", "baseline", 268435456, "numba", "mycalculation"),
    ("numba_ufunc", "streams", 268435456, "numba", "mycalculation_kernel"),
    ("pycuda_kernel", "vectorized", 268435456, "pycuda", "scale_vec4"),
    ("pycuda_kernel", "baseline", 268435456, "pycuda", "scale_one_block"),
    ("cupy_sqdiff", "fused", 16384, "cupy", "cookbook_squared_diff"),
    ("cupy_sqdiff", "baseline", 16384, "cupy", "cupy_subtract"),
])
def test_the_pattern_selects_the_real_kernel_name_ncu_recorded(workload, variant, size, framework, kernel):
    names = _names(workload, variant, size)
    chosen = {n for n in names if name_matches(kernel_regex(framework, kernel), n)}
    # one kernel (the report may hold several launches of it)
    assert len(chosen) == 1, (names, kernel_regex(framework, kernel))


@pytest.mark.parametrize("framework,kernel,other", [
    # the ufunc's kernel and the @cuda.jit kernel differ only by prefix and suffix
    ("numba", "mycalculation", ("numba_ufunc", "streams", 268435456)),
    ("numba", "mycalculation_kernel", ("numba_ufunc", "baseline", 268435456)),
    # a fused kernel's name is a prefix of another's
    ("cupy", "cookbook_squared_diff", ("cupy_sqdiff", "fused_pow", 16384)),
    ("pycuda", "scale_vec", ("pycuda_kernel", "vectorized", 268435456)),
    # the raw kernel's name extends the fused kernels' names
    ("cupy", "cookbook_squared_diff_raw", ("cupy_sqdiff", "fused", 16384)),
    ("cupy", "cookbook_squared_diff_raw", ("cupy_sqdiff", "fused_pow", 16384)),
])
def test_the_pattern_does_not_select_a_neighbour(framework, kernel, other):
    assert not any(name_matches(kernel_regex(framework, kernel), n) for n in _names(*other))


def test_the_raw_kernels_pattern_selects_its_extern_c_name_only():
    from workloads.cupy_sqdiff.raw_kernel import KERNEL_NAME, SOURCE

    # extern "C": ncu records the name as written in the source
    assert f'extern "C" __global__ void {KERNEL_NAME}(' in SOURCE
    assert name_matches(kernel_regex("cupy", KERNEL_NAME), KERNEL_NAME)
    assert not name_matches(kernel_regex("cupy", "cookbook_squared_diff"), KERNEL_NAME)


def test_warp_pattern_matches_the_name_from_warps_profiling_guide():
    # Warp's profiling guide: "their full names become get_acceleration_a9fb4286_cuda_kernel_forward"
    p = kernel_regex("warp", "get_acceleration")
    assert name_matches(p, "get_acceleration_a9fb4286_cuda_kernel_forward")
    assert not name_matches(p, "get_acceleration_a9fb4286_cuda_kernel_backward")
    assert not name_matches(p, "compute_density_99e58138_cuda_kernel_forward")
    assert not name_matches(kernel_regex("warp", "acceleration"), "get_acceleration_a9fb4286_cuda_kernel_forward")


def test_names_that_are_not_identifiers_or_unknown_frameworks_are_refused():
    with pytest.raises(WorkloadError, match="identifier"):
        kernel_regex("warp", "get_acc.*")
    with pytest.raises(WorkloadError, match="framework"):
        kernel_regex("tensorflow", "matmul")


def test_nvtx_include_escapes_the_range_names_slashes():
    # the form the README and rules/common.smk use
    assert nvtx_include("cupy_sqdiff", "fused") == "cookbook@cupy_sqdiff\\/fused\\/compute/"


def test_ncu_command_has_every_flag_the_page_needs():
    cmd = ncu_command("ncu", "python3", "warp_sph", "baseline", 62500, "^x$", ["/c/warp"], "out/kernel")
    s = " ".join(cmd)
    for flag in ("--set full", "--import-source yes", "--source-folders /c/warp", "-k regex:^x$", "-c 1",
                 "--clock-control none", "--nvtx --nvtx-include cookbook@warp_sph\\/baseline\\/compute/",
                 "--export out/kernel", "--kernel-name-base function"):
        assert flag in s, flag
    assert cmd[-9:] == ["python3", "-m", "workloads.warp_sph", "--variant", "baseline", "--size", "62500",
                        "--calls", "1"]
    assert "-s" not in cmd  # the first matching launch unless asked


def test_a_later_launch_is_profiled_when_asked():
    # Warp SPH's sorted step reorders after each substep: its first launch reads the unsorted state
    cmd = ncu_command("ncu", "python3", "warp_sph", "sorted", 62500, "^x$", ["/c/warp"], "out/kernel", launch_skip=39)
    i = cmd.index("-s")
    assert cmd[i + 1] == "39" and cmd[i + 2:i + 4] == ["-c", "1"]


# --- the run, with a stand-in for ncu ------------------------------------------------------------------

_STUB = """#!{python}
import json, os, shutil, sys
if sys.argv[1:] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler")
    print("Version 0.0.0-stand-in (build 0)")
    sys.exit(0)
env = {{k: v for k, v in os.environ.items() if k.startswith("COOKBOOK_") or k.endswith(("_CACHE_DIR", "_CACHE_PATH"))}}
with open(os.environ["STUB_RECORD"], "w") as f:
    json.dump({{"argv": sys.argv[1:], "env": env,
               "warp_cache_exists": os.path.isdir(os.environ["WARP_CACHE_PATH"])}}, f)
if os.environ.get("STUB_REPORT"):
    shutil.copy(os.environ["STUB_REPORT"], sys.argv[sys.argv.index("--export") + 1] + ".ncu-rep")
sys.exit(int(os.environ.get("STUB_RC", "0")))
"""


def write_stub_ncu(folder):
    path = folder / "ncu"
    path.write_text(_STUB.format(python=sys.executable))
    path.chmod(0o755)
    return path


@pytest.fixture
def stub_ncu(tmp_path):
    return write_stub_ncu(tmp_path)


def _profile(tmp_path, stub, *args, **env):
    record = tmp_path / "stub.json"
    full_env = dict(os.environ, STUB_RECORD=str(record), **env)
    r = subprocess.run([sys.executable, "-m", "workloads.tools.kernel_profile", "--ncu", str(stub),
                        "--python", "python3", "--work-dir", str(tmp_path / "work"),
                        "--output-dir", str(tmp_path / "out"), *args],
                       cwd=REPO, env=full_env, capture_output=True, text=True, timeout=120)
    seen = json.loads(record.read_text()) if record.exists() else None
    return r, seen


def test_no_matching_kernel_is_a_clear_failure_and_the_run_was_cold(tmp_path, stub_ncu):
    r, seen = _profile(tmp_path, stub_ncu, "--workload", "numba_ufunc", "--variant", "baseline",
                       "--kernel", "mycalculation")
    assert r.returncode == 4, r.stderr
    assert "no kernel matched" in r.stderr and "mycalculation" in r.stderr
    assert not (tmp_path / "out" / "kernel-run.json").exists()
    argv, env = seen["argv"], seen["env"]
    assert argv[argv.index("-k") + 1] == "regex:" + kernel_regex("numba", "mycalculation")
    assert argv[argv.index("--size") + 1] == "268435456"  # the recipe's default size
    assert env["COOKBOOK_LINEINFO"] == "1"
    # every cache in one fresh folder under <work-dir>/cache, removed afterwards
    cache = tmp_path / "work" / "cache"
    for var in ("CUPY_CACHE_DIR", "CUDA_CACHE_PATH", "NUMBA_CACHE_DIR", "WARP_CACHE_PATH"):
        assert os.path.dirname(os.path.dirname(env[var])) == str(cache.resolve())
    assert argv[argv.index("--source-folders") + 1] == env["WARP_CACHE_PATH"] and seen["warp_cache_exists"]
    assert list(cache.iterdir()) == []
    assert "COOKBOOK_WARP_LINE_DIRECTIVES" not in env


def test_warp_runs_get_the_kernel_cache_and_the_line_directives_switch(tmp_path, stub_ncu):
    r, seen = _profile(tmp_path, stub_ncu, "--workload", "numba_ufunc", "--variant", "baseline", "--kernel",
                       "get_acceleration", "--framework", "warp", "--no-line-directives", "--size", "1000")
    assert r.returncode == 4
    env = seen["env"]
    assert env["COOKBOOK_WARP_LINE_DIRECTIVES"] == "0"
    assert env["COOKBOOK_WARP_KERNEL_CACHE"] == env["WARP_CACHE_PATH"]
    argv = seen["argv"]
    assert argv[argv.index("-k") + 1] == r"regex:^get_acceleration_[0-9a-f]{8}_cuda_kernel_forward$"


def test_a_failing_profiler_run_is_reported_as_such(tmp_path, stub_ncu):
    r, _ = _profile(tmp_path, stub_ncu, "--workload", "numba_ufunc", "--variant", "baseline",
                    "--kernel", "mycalculation", STUB_RC="1")
    assert r.returncode == 3 and "ncu exited with status 1" in r.stderr


def test_unknown_workload_variant_or_name_is_refused(tmp_path, stub_ncu):
    for args in (["--workload", "nope", "--variant", "baseline", "--kernel", "k"],
                 ["--workload", "numba_ufunc", "--variant", "nope", "--kernel", "k"],
                 ["--workload", "numba_ufunc", "--variant", "baseline", "--kernel", "a b"]):
        r, seen = _profile(tmp_path, stub_ncu, *args)
        assert r.returncode == 2 and seen is None, r.stderr


def make_vectorized_capture(tmp_path):
    """kernel_profile's output when ncu hands back a real capture of PyCUDA's vectorized kernel: the
    H100 reference's kernel-page capture (-lineinfo, the #line directive, sources imported)."""
    report = tmp_path / "real.ncu-rep"
    with gzip.open(VECTORIZED_KERNEL_CAPTURE) as f, open(report, "wb") as g:
        shutil.copyfileobj(f, g)
    r, _ = _profile(tmp_path, write_stub_ncu(tmp_path), "--workload", "pycuda_kernel", "--variant", "vectorized",
                    "--kernel", "scale_vec4", STUB_REPORT=str(report))
    assert r.returncode == 0, r.stderr
    return tmp_path / "out"


@pytest.fixture
def vectorized_capture(tmp_path):
    return make_vectorized_capture(tmp_path)


def test_the_run_record_names_the_pattern_and_leaves_the_report_to_the_analysis(vectorized_capture):
    run = json.loads((vectorized_capture / "kernel-run.json").read_text())
    assert run["kernel_regex"] == "^scale_vec4$" and "profiled_kernel" not in run
    assert kernel_names(str(vectorized_capture / "kernel.ncu-rep")) == ["scale_vec4"]
    assert run["framework"] == "pycuda" and run["line_directives"] is None
    assert run["environment"] == {"COOKBOOK_LINEINFO": "1"}
    assert run["report"] == "kernel.ncu-rep" and (vectorized_capture / "kernel.ncu-rep").exists()
    assert "pycuda" in run["provenance"]["packages"] and run["ncu_version"] == "0.0.0-stand-in"


# --- Numba: COOKBOOK_LINEINFO=1 -> lineinfo=True ---------------------------------------------------------

def _numba(code: str, **env) -> str:
    r = python_forks.run(python_forks.NUMBA_CUDA, [sys.executable, "-c", code], REPO, dict(os.environ, **env),
                         timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.strip()


_KERNELS = ("from workloads.numba_ufunc import body\n"
            "print(body.jit_options(), [k.targetoptions['lineinfo'] for k in "
            "(body.cuda_kernel(), body.fill_kernel(), body.poison_kernel())])")


def test_numba_kernels_get_lineinfo_only_when_asked():
    pytest.importorskip("numba")
    assert _numba(_KERNELS, COOKBOOK_LINEINFO="1") == "{'lineinfo': True} [True, True, True]"
    assert _numba(_KERNELS, COOKBOOK_LINEINFO="0") == "{} [False, False, False]"


def test_numba_lineinfo_is_off_under_the_simulator_which_has_no_such_option():
    pytest.importorskip("numba")
    out = _numba("from workloads.numba_ufunc import body\nprint(body.jit_options(), "
                 "type(body.cuda_kernel()).__name__)", COOKBOOK_LINEINFO="1", NUMBA_ENABLE_CUDASIM="1")
    assert out == "{} FakeCUDAKernel"


def test_the_cuda_vectorize_target_takes_no_lineinfo_option():
    # why body.py subclasses the ufunc builder rather than passing lineinfo to vectorize()
    pytest.importorskip("numba")
    from numba.cuda.vectorizers import CUDAVectorize

    from workloads.numba_ufunc.body import mycalculation

    with pytest.raises(KeyError, match="lineinfo"):
        CUDAVectorize(mycalculation, targetoptions={"lineinfo": True})
