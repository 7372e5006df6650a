"""The multi-process recipe and the overhead script, on the CPU: argument checks, one child's work
with a fake array library, the whole parent/children run on the NumPy stand-in, and the overhead
script against a fake workload. The CuPy run itself needs a GPU (last test)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from workloads import annotate
from workloads.contract import ResultMismatch
from workloads.nvtx_multiprocess import CUPY_FUNCTIONS, DEFAULT_SIZES, overhead, recipe

from conftest import REPO, run_in_thread


class FakeBackend:
    """A tiny array library: NumPy arrays, with a mean that can be made wrong."""

    name = "fake"

    def __init__(self, mean_offset: float = 0.0, values=None):
        self.mean_offset = mean_offset
        self.values = values
        self.synchronized = 0

    def generator(self, seed):
        return np.random.default_rng(seed)

    def random(self, gen, shape):
        return np.full(shape, self.values) if self.values is not None else gen.random(shape)

    def mean(self, x):
        return np.float64(x.mean() + self.mean_offset)

    def to_host(self, x):
        return np.asarray(x)

    def synchronize(self):
        self.synchronized += 1

    def version(self):
        return "0"


def test_defaults_are_the_blogs_two_matrices():
    a = recipe.parse_args([])
    assert a.sizes == list(DEFAULT_SIZES) == [4096, 1024]
    assert a.array_module == "cupy" and a.functions == list(CUPY_FUNCTIONS) and a.output is None
    a = recipe.parse_args(["--sizes", "64", "32", "--array-module", "numpy", "--output", "x.json"])
    assert a.sizes == [64, 32] and a.functions == ["numpy.mean"] and a.output == "x.json"
    assert recipe.parse_args(["--functions", ""]).functions == []
    assert recipe.parse_args(["--functions", "json.dumps, cupy.mean"]).functions == ["json.dumps", "cupy.mean"]


@pytest.mark.parametrize("argv, message", [
    (["--sizes", "0"], "size must be positive"),
    (["--sizes", "x"], "not an integer"),
    (["--sizes", "8", "8"], "--sizes must differ"),
    (["--timeout-s", "0"], "--timeout-s must be positive"),
])
def test_bad_arguments_are_refused_with_a_reason(argv, message, capsys):
    with pytest.raises(SystemExit):
        recipe.parse_args(argv)
    assert message in capsys.readouterr().err


def test_a_child_names_its_thread_annotates_its_phases_and_checks_the_mean(recorded):
    backend = FakeBackend()
    rec = run_in_thread(recipe.run_child, 64, 3, backend, ["numpy.mean", "json.dumps"])
    assert rec["role"] == "matrix-64" and rec["variant"] == "n64" and rec["size"] == 64
    assert rec["os_thread_name"] == "matrix-64"
    assert rec["relative_error"] <= recipe.MEAN_TOLERANCE
    assert rec["mean"] == pytest.approx(rec["mean_reference"], rel=1e-12)
    assert rec["thirdparty_functions"] == ["numpy.mean", "json.dumps"]
    assert backend.synchronized == 2
    suite = [e[1]["message"] for e in recorded[annotate.DOMAIN].events if e[0] == "push"]
    assert suite == [f"nvtx_multiprocess/n64/{p}" for p in ("setup", "compute", "transfer", "check")]
    assert all(annotate.parse_range_name(n) for n in suite)  # the suite's workload/variant/phase convention
    marks = [e[1]["message"] for e in recorded[annotate.DOMAIN].events if e[0] == "mark"]
    assert marks == ["nvtx_multiprocess/n64/checked"]
    # the wrapped functions are put back when the child is done
    assert annotate.annotated_paths() == [] and not hasattr(np.mean, annotate._WRAPPER_MARK)


def test_the_child_wraps_a_third_party_call_inside_its_compute_range(recorded):
    class ThroughNumpy(FakeBackend):
        def mean(self, x):
            return np.mean(x)  # looked up on the module: the wrapper sees the call

    run_in_thread(recipe.run_child, 16, 0, ThroughNumpy(), ["numpy.mean"])
    order = [(name, e[0], e[1]["message"] if e[0] != "pop" else None)
             for name, dom in recorded.items() for e in dom.events]
    third = [m for d, kind, m in order if d == annotate.THIRDPARTY_DOMAIN and kind == "push"]
    assert third == ["numpy.mean"]


@pytest.mark.parametrize("backend, message", [
    (FakeBackend(mean_offset=1e-6), "differs from the float64 reference"),
    (FakeBackend(values=0.0), "standard deviations from 0.5"),
    (FakeBackend(values=2.0), "outside \\[0, 1\\)"),
    (FakeBackend(mean_offset=float("nan")), "mean is nan"),
])
def test_a_wrong_mean_fails_loudly(backend, message):
    with pytest.raises(ResultMismatch, match=message):
        run_in_thread(recipe.run_child, 32, 0, backend, [])


def test_the_recipe_modules_import_without_cupy():
    r = subprocess.run([sys.executable, "-c", "import sys, workloads.nvtx_multiprocess.recipe, "
                        "workloads.nvtx_multiprocess.overhead, workloads.nvtx_multiprocess.__main__; "
                        "print('cupy' in sys.modules)"], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"


def test_parent_and_spawned_children_on_the_numpy_stand_in(tmp_path):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "workloads.nvtx_multiprocess", "--array-module", "numpy",
                        "--sizes", "96", "48", "--output", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    rec = json.loads(out.read_text())
    assert rec["start_method"] == "spawn" and rec["sizes"] == [96, 48]
    kids = rec["children"]
    assert [k["role"] for k in kids] == ["matrix-96", "matrix-48"]
    pids = {k["pid"] for k in kids}
    assert len(pids) == 2 and rec["parent"]["pid"] not in pids  # two processes of their own
    for k in kids:
        assert k["native_thread_id"] == k["pid"]  # each child's work ran in its main thread
        assert k["os_thread_name"] == k["role"]
        assert k["thirdparty_functions"] == ["numpy.mean"]
        assert k["relative_error"] <= recipe.MEAN_TOLERANCE
    assert "provenance" in rec and rec["provenance"]["packages"]["numpy"] == np.__version__
    assert "nvtx_multiprocess/n96 pid=" in r.stdout


def test_a_failing_child_fails_the_run_with_its_reason(tmp_path):
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "workloads.nvtx_multiprocess", "--array-module", "numpy",
                        "--sizes", "16", "--functions", "numpy.nosuchfunction", "--output", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "child matrix-16 failed: AnnotationError: numpy.nosuchfunction" in r.stderr
    assert "Traceback" not in r.stderr  # a typed error explains itself, once
    assert not out.exists()


@pytest.mark.skipif(__import__("importlib").util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_without_cupy_the_recipe_says_so():
    assert recipe.main(["--sizes", "8"]) == 1


# --- the overhead script --------------------------------------------------------------------------

FAKE_WORKLOAD = '''
import argparse, json, os
p = argparse.ArgumentParser()
for a in ("--variant", "--size", "--mode", "--warmup", "--repeats", "--output"):
    p.add_argument(a)
a = p.parse_args()
if os.environ.get("FAKE_FAIL"):
    raise SystemExit("fake workload: asked to fail")
ms = 2.0 if os.environ["COOKBOOK_NVTX"] == "1" else 1.0  # annotation doubles the time, for the test
json.dump({"timing": {"median_ms": ms}, "times_ms": [ms] * int(a.repeats),
           "host_synced_ms": [ms + 1.0] * int(a.repeats)}, open(a.output, "w"))
'''


@pytest.fixture
def fake_workload(tmp_path, monkeypatch):
    pkg = tmp_path / "fake_workload"
    pkg.mkdir()
    (pkg / "__main__.py").write_text(FAKE_WORKLOAD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return "fake_workload"


def test_overhead_alternates_settings_and_reports_the_relative_cost(fake_workload, tmp_path, capsys):
    out = tmp_path / "overhead.json"
    rc = overhead.main(["--workload", fake_workload, "--pairs", "2", "--repeats", "3", "--loop-ranges", "2000",
                        "--loop-trials", "2", "--output", str(out)])
    assert rc == 0
    rec = json.loads(out.read_text())
    assert [(r["pair"], r["setting"]) for r in rec["runs"]] == [(0, "on"), (0, "off"), (1, "off"), (1, "on")]
    plain = rec["summary"]["plain"]
    assert plain["on"]["median_ms"] == 2.0 and plain["off"]["median_ms"] == 1.0
    assert plain["relative_overhead"]["median_ms"] == pytest.approx(1.0)
    assert plain["relative_overhead"]["host_synced_median_ms"] == pytest.approx(3.0 / 2.0 - 1.0)
    loops = {x["setting"]: x for x in rec["range_cost_loops"]}
    assert loops["on"]["nvtx_enabled"] is True and loops["off"]["nvtx_enabled"] is False
    assert "nsys" not in rec["summary"] and "provenance" in rec
    table = capsys.readouterr().out
    assert "on vs off: +100.000 % per call" in table and "plain" in table


def test_overhead_failures_are_clear(fake_workload, tmp_path, monkeypatch, capsys):
    out = tmp_path / "overhead.json"
    assert overhead.main(["--workload", fake_workload, "--pairs", "1", "--nsys", "/no/such/nsys",
                          "--output", str(out)]) == 1
    assert "--nsys /no/such/nsys: no such executable" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_FAIL", "1")
    assert overhead.main(["--workload", fake_workload, "--pairs", "1", "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert "exited with code 1" in err and "fake workload: asked to fail" in err
    assert not out.exists()  # nothing half-written


def test_overhead_runs_pairs_under_nsys_with_the_suites_options(fake_workload, tmp_path, capsys):
    # a stand-in nsys that checks its options, then runs the program after them
    nsys = tmp_path / "nsys"
    nsys.write_text("#!/bin/sh\n"
                    "[ \"$1 $2 $3 $4 $5 $6 $7\" = 'profile -t cuda,nvtx -s none --cpuctxsw none' ] || exit 9\n"
                    "shift 11\nexec \"$@\"\n")
    nsys.chmod(0o755)
    out = tmp_path / "overhead.json"
    assert overhead.main(["--workload", fake_workload, "--pairs", "1", "--repeats", "2", "--loop-ranges", "1000",
                          "--loop-trials", "1", "--nsys", str(nsys), "--output", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert set(rec["summary"]) == {"plain", "nsys"}
    assert [r["under_nsys"] for r in rec["runs"]] == [False, False, True, True]
    assert rec["nsys_args"][:7] == ["profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw", "none"]


def test_one_range_costs_little_without_a_profiler():
    r = overhead.measure_range_cost(5000, 3)
    assert r["nvtx_enabled"] == annotate.ENABLED
    # generous bound (a loaded CI machine): a range with no profiler attached is a few hundred ns
    assert r["range_ns"] < 20_000 and r["wrapper_ns"] < 20_000


# --- on a GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_the_cupy_recipe_on_a_gpu(tmp_path):
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA GPU here")
    pytest.importorskip("cupy")
    out = tmp_path / "run.json"
    r = subprocess.run([sys.executable, "-m", "workloads.nvtx_multiprocess", "--sizes", "512", "256",
                        "--output", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    kids = json.loads(out.read_text())["children"]
    assert [k["thirdparty_functions"] for k in kids] == [list(CUPY_FUNCTIONS)] * 2
