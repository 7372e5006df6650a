"""The JAX matmul recipe (the HPC-center guide's loop) on JAX's CPU backend, its capture-range switch, the allocator
experiment's child process, and the section readers on the committed real nsys exports."""
from __future__ import annotations

import collections
import importlib.util
import json
import os
import sqlite3
import sys

import numpy as np
import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# JAX is imported by the tests that use it, not at collection: a worker that never runs them is spared
# its import
pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="could not import 'jax'")

from analysis.common.gzfiles import plain_file  # noqa: E402
from analysis.report.sections import jax_matmul_readers as readers  # noqa: E402
from workloads import profiler_range  # noqa: E402
from workloads.contract import WorkloadError, check_result  # noqa: E402
from workloads.jax_backend import HostClockPair  # noqa: E402
from workloads.jax_matmul import RECIPE  # noqa: E402
from workloads.jax_matmul import common  # noqa: E402
from workloads.jax_matmul import exp_allocator  # noqa: E402

import python_forks  # noqa: E402
from conftest import REFERENCE, REPO, reference_trace  # noqa: E402

CPU_ENV = dict(os.environ, JAX_PLATFORMS="cpu")


def _jax_module(module: str, *args: str, env: dict | None = None):
    """``python -m MODULE ARGS`` on JAX's CPU backend (``env``: CPU_ENV), forked from the tests' warm JAX server."""
    return python_forks.run(python_forks.JAX, [sys.executable, "-m", module, *args], REPO,
                            CPU_ENV if env is None else env, timeout=120)


def _run(variant: str, size: int):
    v = RECIPE.variant_class(variant)(size=size)
    v.setup()
    v.step()
    v.synchronize()
    return v


@pytest.mark.parametrize("variant", [v for v in RECIPE.variants if v != "tf32"])
def test_every_variant_matches_its_reference_exactly(variant):
    v = _run(variant, 64)
    # int32: exact modulo 2^32; float32/bf16: small integers, every sum exact in float32
    assert v.tolerance == 0.0
    assert check_result(v.result(), v.reference(), v.tolerance, variant) == 0.0
    v.teardown()


def test_seed_sizes_are_the_seeds_loop():
    assert common.seed_sizes(512) == tuple(2 ** i for i in range(1, 10))
    assert common.seed_sizes(2) == (2,)


def test_baseline_runs_every_side_of_the_seeds_loop():
    v = _run("baseline", 64)
    assert [p.shape for p in v.pending] == [(n, n) for n in (2, 4, 8, 16, 32, 64)]
    for n, product in zip(v.sizes, v.pending):
        assert str(product.dtype) == "int32"
        a = common.seed_values(n)
        np.testing.assert_array_equal(np.asarray(product, dtype=np.float64), common.int32_wrapped_matmul(a, a))


def test_int32_products_wrap_around_as_in_the_seed():
    # side 64 peaks at 5.4e8 (fits int32); side 128 at 1.7e10 (does not)
    v = _run("baseline", 128)
    n = 128
    out = np.asarray(v.pending[-1]).astype(np.int64)
    a = np.arange(n * n, dtype=object).reshape(n, n)
    exact = a.dot(a)  # Python integers: no overflow
    assert int(exact.max()) > 2 ** 31 - 1
    wrapped = np.vectorize(lambda x: ((int(x) + 2 ** 31) % 2 ** 32) - 2 ** 31, otypes=[np.int64])(exact)
    np.testing.assert_array_equal(out, wrapped)
    # a closed form, derived apart: C[i,j] = n^2 i S1 + n^2 i j + n S2 + j S1 (S1 = sum k, S2 = sum k^2)
    s1, s2 = n * (n - 1) // 2, (n - 1) * n * (2 * n - 1) // 6
    i, j = np.meshgrid(np.arange(n, dtype=object), np.arange(n, dtype=object), indexing="ij")
    closed = n * n * i * s1 + n * n * i * j + n * s2 + j * s1
    assert (closed == exact).all()
    np.testing.assert_array_equal(v.reference(), wrapped.astype(np.float64))
    small = _run("baseline", 64)
    a64 = np.arange(64 * 64, dtype=object).reshape(64, 64)
    np.testing.assert_array_equal(np.asarray(small.pending[-1]).astype(np.int64), a64.dot(a64).astype(np.int64))


def test_int32_wrapped_matmul_is_twos_complement_on_any_int32():
    rng = np.random.default_rng(7)
    a = rng.integers(-2 ** 31, 2 ** 31, size=(5, 9), dtype=np.int64)
    b = rng.integers(-2 ** 31, 2 ** 31, size=(9, 4), dtype=np.int64)
    exact = a.astype(object).dot(b.astype(object))
    wrapped = np.vectorize(lambda x: ((int(x) + 2 ** 31) % 2 ** 32) - 2 ** 31, otypes=[np.int64])(exact)
    np.testing.assert_array_equal(common.int32_wrapped_matmul(a, b), wrapped.astype(np.float64))


def test_a_wrong_product_fails_the_exact_check():
    v = _run("bf16", 32)
    out = v.result()
    out[3, 5] += 1.0
    with pytest.raises(WorkloadError, match="relative error"):
        check_result(out, v.reference(), v.tolerance, "bf16")


@pytest.mark.parametrize("variant", ["jit", "float32"])
def test_the_sampled_check_recomputes_whole_rows_equal_to_the_full_reference(variant):
    """--check sample (the profiled runs): rows of the largest product, the same values as the full
    reference at those places, int32 wrap-around included (128: the sums overflow)."""
    v = _run(variant, 128)
    out = v.result()
    idx = v.sample_indices(out.size)
    assert idx.size == v.check_sample_rows * 128 and len(set(idx // 128)) == v.check_sample_rows
    np.testing.assert_array_equal(v.reference_at(idx), v.reference().reshape(-1)[idx])
    # a wrong element inside the sample fails it
    out.reshape(-1)[idx[7]] += 1.0
    with pytest.raises(WorkloadError, match="relative error"):
        check_result(out.reshape(-1)[idx], v.reference_at(idx), v.tolerance, variant)


def test_a_run_under_the_profilers_records_its_sampled_check(tmp_path):
    out = tmp_path / "run.json"
    r = _jax_module("workloads.jax_matmul", "--device", "cpu", "--variant", "jit", "--size", "64",
                    "--calls", "1", "--check", "sample", "--output", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["check"] == {"method": "sample", "elements": 8 * 64, "of": 64 * 64}
    assert rec["relative_error"] == 0.0
    # no COOKBOOK_CAPTURE_RANGE: the calls ran outside any capture range, and the record says so
    assert "COOKBOOK_CAPTURE_RANGE" not in CPU_ENV and rec["capture_range"] is False


@pytest.mark.parametrize("variant,item_in,kind", [("baseline", 4, "int32"), ("jit", 4, "int32"),
                                                   ("float32", 4, "fp32"), ("tf32", 4, "tf32_tensor"),
                                                   ("bf16", 2, "fp16_tensor")])
def test_work_sums_over_the_sides(variant, item_in, kind):
    w = RECIPE.variant_class(variant)(size=8192).work()
    sides = [2 ** i for i in range(1, 14)]
    assert w.flops == sum(2 * n ** 3 for n in sides)
    assert w.flops_kind == kind
    assert w.bytes_read == sum(2 * item_in * n * n for n in sides)
    assert w.bytes_written == sum(4 * n * n for n in sides)
    # the last product holds 7/8 of the loop's FLOPs, nearly
    assert 2 * 8192 ** 3 / w.flops == pytest.approx(7 / 8, rel=1e-3)


@pytest.mark.parametrize("size", [0, 1, 3, 96, 513, 1 << 16])
def test_sizes_that_are_not_a_power_of_two_or_too_large_are_refused(size):
    with pytest.raises(WorkloadError):
        RECIPE.variant_class("jit")(size=size)


def test_the_runner_refuses_a_non_power_of_two_with_one_line():
    r = _jax_module("workloads.jax_matmul", "--device", "cpu", "--variant", "baseline", "--size", "96")
    assert r.returncode == 1
    assert "power of two" in r.stderr


def test_timed_run_through_the_runner(tmp_path):
    out = tmp_path / "t.json"
    r = _jax_module("workloads.jax_matmul", "--device", "cpu", "--variant", "jit", "--size", "128", "--mode",
                    "timed", "--warmup", "1", "--repeats", "3", "--output", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["relative_error"] == 0.0
    assert len(rec["times_ms"]) == 3 and all(t > 0 for t in rec["times_ms"])
    assert rec["work"]["flops"] == sum(2 * n ** 3 for n in (2, 4, 8, 16, 32, 64, 128))
    # the record and the printed line say which backend timed it, and with which timer
    assert rec["device"] == "cpu" and "block_until_ready" in rec["timer"]
    assert "device=cpu" in r.stdout and "block_until_ready" in r.stdout


def test_host_clock_pair_waits_and_refuses_early_reads():
    waited = []
    ev = HostClockPair(lambda: waited.append(1))
    with pytest.raises(WorkloadError):
        ev.elapsed_ms()
    ev.start()
    ev.stop()
    assert waited == [1, 1]
    assert ev.elapsed_ms() >= 0.0


# --- capture range ---------------------------------------------------------------------------

def test_capture_range_is_a_no_op_unless_switched_on(monkeypatch):
    monkeypatch.setenv(profiler_range.ENV_LIBRARY, "libcuda-not-here.so.1")
    ran = []
    for value in (None, "0", "true", ""):
        if value is None:
            monkeypatch.delenv(profiler_range.ENV_SWITCH, raising=False)
        else:
            monkeypatch.setenv(profiler_range.ENV_SWITCH, value)
        # no library is loaded: the missing one would raise otherwise
        with profiler_range.cuda_profiler_range() as on:
            ran.append(on)
    assert ran == [False] * 4


def test_capture_range_names_a_missing_driver_library(monkeypatch):
    monkeypatch.setenv(profiler_range.ENV_SWITCH, "1")
    body = []
    with pytest.raises(profiler_range.ProfilerRangeError, match="libcuda-not-here.so.1"):
        with profiler_range.cuda_profiler_range(library="libcuda-not-here.so.1"):
            body.append(1)
    assert body == []
    monkeypatch.setenv(profiler_range.ENV_LIBRARY, "libcuda-also-missing.so.1")
    with pytest.raises(profiler_range.ProfilerRangeError, match="libcuda-also-missing.so.1"):
        with profiler_range.cuda_profiler_range():
            pass
    # a WorkloadError, so the runner reports it as one line
    assert issubclass(profiler_range.ProfilerRangeError, WorkloadError)


# --- the allocator experiment ----------------------------------------------------------------

def test_allocator_settings_start_from_a_clean_environment():
    parent = {"PATH": "/bin", "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.5",
              "TF_GPU_ALLOCATOR": "cuda_malloc_async"}
    assert exp_allocator.child_environment(parent, "default") == {"PATH": "/bin"}
    assert exp_allocator.child_environment(parent, "allocator_platform") == {
        "PATH": "/bin", "XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    assert exp_allocator.child_environment(parent, "mem_fraction_0.25")["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.25"
    with pytest.raises(WorkloadError, match="no setting"):
        exp_allocator.child_environment(parent, "huge_pages")


def test_allocator_child_records_time_memory_and_the_check(tmp_path):
    out = tmp_path / "child.json"
    env = dict(CPU_ENV, XLA_PYTHON_CLIENT_PREALLOCATE="false",
               COOKBOOK_CUDA_DRIVER_LIBRARY="libcuda-not-here.so.1")
    r = _jax_module("workloads.jax_matmul.exp_allocator", "--child", "--setting", "preallocate_false", "--size", "64",
                    "--warmup", "1", "--repeats", "3", "--output", str(out), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert rec["environment"] == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    assert rec["variant"] == "float32" and rec["relative_error"] == 0.0
    assert len(rec["times_ms"]) == 3 and rec["timing"]["median_ms"] > 0
    # no driver here: the record says why instead of a number
    assert "libcuda-not-here.so.1" in rec["driver_memory_after_calls"]["error"]
    import jax

    assert rec["provenance"]["packages"]["jax"] == jax.__version__


def test_allocator_parent_refuses_unknown_settings_before_running_anything(tmp_path):
    rc = exp_allocator.main(["--out-dir", str(tmp_path), "--nsys", "/nonexistent/nsys", "--settings",
                             "default,huge_pages"])
    assert rc == 1
    assert not list(tmp_path.iterdir())


def test_a_setting_whose_process_crashes_under_nsys_runs_once_without_nsys(tmp_path, capfd, monkeypatch):
    """A child that ends without its record under nsys (allocator_platform exited 139 under nsys in
    7 of 7 attempts, H100 and H200) is not tried again under nsys: it runs once without nsys, and
    the record says so: no nsys columns, its time not compared with the runs under nsys. A setting
    whose process crashes without nsys too fails the experiment with one error, and no
    allocator.json."""
    from analysis.report.sections import jax_matmul_allocator

    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("COOKBOOK_CUDA_DRIVER_LIBRARY", "libcuda-not-here.so.1")
    calls = tmp_path / "calls"
    fake = tmp_path / "nsys"
    fake.write_text(f"#!/bin/sh\necho x >> {calls}\necho 'Segmentation fault' >&2\nexit 139\n")
    fake.chmod(0o755)
    out = tmp_path / "recipe" / "experiments" / "allocator"
    rc = exp_allocator.main(["--out-dir", str(out), "--nsys", str(fake), "--settings", "allocator_platform",
                             "--size", "64", "--warmup", "1", "--repeats", "3"])
    assert rc == 0, capfd.readouterr().err[-2000:]
    assert len(calls.read_text().splitlines()) == 1
    entry = json.loads((out / "allocator.json").read_text())["settings"][0]
    assert entry["timed_without_nsys"] is True and entry["sqlite"] is None and len(entry["crashes_before"]) == 1
    assert entry["nsys_attempts"] == 1
    assert entry["nsys_error"].startswith("the process crashed under nsys (exit status 139) and ran once without it")
    assert entry["run"]["environment"] == {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    assert entry["run"]["relative_error"] == 0.0 and len(entry["run"]["times_ms"]) == 3
    # the step's seeded sample of whole rows, not the full float64 product
    assert entry["run"]["check"] == {"method": "sample", "elements": 8 * 64, "of": 64 * 64}
    row = jax_matmul_allocator.summarize(str(tmp_path / "recipe"))["rows"][0]
    assert row["timed_without_nsys"] and row["peak_bytes"] is None
    # and a process that crashes without nsys too: the experiment fails, saying so
    crashing_python = tmp_path / "python"
    crashing_python.write_text("#!/bin/sh\nexit 139\n")
    crashing_python.chmod(0o755)
    again = tmp_path / "again"
    rc = exp_allocator.main(["--out-dir", str(again), "--nsys", str(fake), "--python", str(crashing_python),
                             "--settings", "default", "--size", "64"])
    assert rc == 1
    err = capfd.readouterr().err
    assert "setting default: the run under nsys wrote no record, nor the run without nsys (exit 139" in err
    assert not (again / "allocator.json").exists()


# --- section readers on real captures ------------------------------------------------------------
#
# Device-memory events: the pipeline records them in the allocator experiment's runs only (rules/
# config.yaml: nsys_profile.cuda_memory_usage), whose float32 loop allocates nothing inside a call;
# the previous H200 reference recorded them in every run, and its CuPy baseline at 4096 allocates in
# its first calls (tests/data/nsys_memory_h200).

ALLOCATOR = REFERENCE / "jax_matmul" / "experiments" / "allocator"
ALLOCATOR_SETTINGS = ("default", "preallocate_false", "mem_fraction_0.25", "client_mem_fraction_0.25")
CUPY_WITH_MEMORY_EVENTS = REPO / "tests" / "data" / "nsys_memory_h200" / "cupy_sqdiff_baseline_n4096.sqlite.gz"

def _sql(path, query):
    with plain_file(str(path)) as p:
        db = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            return db.execute(query).fetchall()
        finally:
            db.close()


DEVICE_KINDS_SQL = "(SELECT id FROM ENUM_CUDA_MEM_KIND WHERE label IN ('Device', 'Device Static', 'Array'))"


@pytest.mark.parametrize("path", [ALLOCATOR / f"{s}.sqlite.gz" for s in ALLOCATOR_SETTINGS] + [CUPY_WITH_MEMORY_EVENTS],
                         ids=lambda p: p.name.removesuffix(".sqlite.gz"))
def test_device_memory_peak_matches_a_running_sum_in_sql(path):
    mem = readers.device_memory(reference_trace(str(path)))
    # the same peak by a window function over the events, signed by their operation's label
    (peak,), = _sql(path, f"""
        SELECT MAX(held) FROM (SELECT SUM(CASE o.label WHEN 'Allocation' THEN e.bytes ELSE -e.bytes END)
            OVER (ORDER BY e.start, e.rowid) AS held
            FROM CUDA_GPU_MEMORY_USAGE_EVENTS e JOIN ENUM_CUDA_DEV_MEM_EVENT_OPER o ON o.id = e.memoryOperationType
            WHERE e.memKind IN {DEVICE_KINDS_SQL})""")
    assert mem["peak_bytes"] == peak
    (allocated,), = _sql(path, f"""SELECT SUM(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS
        WHERE memoryOperationType = 0 AND memKind IN {DEVICE_KINDS_SQL}""")
    assert mem["allocated_bytes"] == allocated
    assert mem["gpu_total_memory_bytes"] > 140 * 10 ** 9  # an H200


@pytest.mark.parametrize("setting, fraction", [("default", 0.75), ("mem_fraction_0.25", 0.25),
                                               ("client_mem_fraction_0.25", 0.25)])
def test_a_preallocated_pool_is_one_large_device_allocation(setting, fraction):
    """XLA's allocator takes its pool in one device allocation before the run's arrays: 75% of the
    GPU's memory by default, the fraction asked for otherwise. The pool, not the 3 x 256 MiB the float32
    loop at 8192 needs, is what the process holds."""
    mem = readers.device_memory(reference_trace(str(ALLOCATOR / f"{setting}.sqlite.gz")))
    assert mem["large_allocations_bytes"][0] == mem["largest_allocation_bytes"]
    assert mem["largest_allocation_bytes"] == pytest.approx(fraction * mem["gpu_total_memory_bytes"], rel=0.01)
    assert mem["peak_bytes"] - mem["largest_allocation_bytes"] < 3 * 8192 * 8192 * 4
    assert mem["peak_bytes"] > 40 * 3 * 8192 * 8192 * 4


def test_large_allocations_are_listed_in_order_and_doubling_runs_found():
    # without preallocation XLA's allocator grows: each new region twice the one before, 2 MiB ... 1 GiB
    path = ALLOCATOR / "preallocate_false.sqlite.gz"
    mem = readers.device_memory(reference_trace(str(path)))
    threshold = readers.LARGE_ALLOCATION_BYTES
    in_order = [b for (b,) in _sql(path, f"""SELECT bytes FROM CUDA_GPU_MEMORY_USAGE_EVENTS
        WHERE memoryOperationType = 0 AND memKind IN {DEVICE_KINDS_SQL} AND bytes >= {threshold}
        ORDER BY start, rowid""")]
    assert mem["large_allocations_bytes"] == in_order
    assert readers.longest_doubling(mem["large_allocations_bytes"]) == [2 ** k for k in range(21, 31)]
    # with the pool, nothing doubles
    mem = readers.device_memory(reference_trace(str(ALLOCATOR / "default.sqlite.gz")))
    assert len(readers.longest_doubling(mem["large_allocations_bytes"])) == 1
    # CuPy's own pool takes one block per array it keeps (128 MiB at 4096^2 float64): no doubling
    mem = readers.device_memory(reference_trace(str(CUPY_WITH_MEMORY_EVENTS)))
    assert mem["large_allocations_bytes"].count(4096 * 4096 * 8) >= 3
    assert len(readers.longest_doubling(mem["large_allocations_bytes"])) == 1
    assert readers.longest_doubling([2, 4, 8, 5, 10, 20, 40, 3]) == [5, 10, 20, 40]
    assert readers.longest_doubling([7]) == [7] and readers.longest_doubling([]) == []


def test_frees_are_counted_and_the_peak_is_what_was_held_at_once():
    """XLA frees its regions and pinned staging buffers at exit: frees and freed bytes as the events
    say, per kind; the pinned host buffers (not device memory) are freed in full and never count
    toward the device peak."""
    path = ALLOCATOR / "preallocate_false.sqlite.gz"
    mem = readers.device_memory(reference_trace(str(path)))
    (frees, freed), = _sql(path, f"""SELECT COUNT(*), SUM(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS
        WHERE memoryOperationType = 1 AND memKind IN {DEVICE_KINDS_SQL}""")
    assert (mem["frees"], mem["freed_bytes"]) == (frees, freed) and 0 < frees < mem["allocations"]
    pinned = mem["by_kind"]["Pinned"]
    assert pinned["frees"] == pinned["allocations"] > 0 and pinned["freed_bytes"] == pinned["allocated_bytes"]
    assert mem["peak_bytes"] <= mem["allocated_bytes"]
    assert mem["allocated_bytes"] == sum(k["allocated_bytes"] for kind, k in mem["by_kind"].items() if kind != "Pinned")


def test_ranges_by_name_are_those_of_all_ranges_with_that_name():
    """``nvtx_ranges(name)``, which the sections use on exports with thousands of ranges of other
    domains (cuDF's libcudf, cudf_python and CCCL ranges; XLA's own are left out of the suite's JAX
    captures: workloads/frameworks.py), keeps what filtering every range would keep, in the same order."""
    ex = reference_trace(str(REFERENCE / "cudf_groupby/split_agg/n50000000/nsys.sqlite.gz"))
    every = ex.nvtx_ranges()
    name = "cudf_groupby/split_agg/compute"
    assert len({r.domain for r in every}) >= 3
    assert ex.nvtx_ranges(name) and len(every) > 100 * len(ex.nvtx_ranges(name))
    assert ex.nvtx_ranges(name) == [r for r in every if r.name == name]
    # a name of another domain, repeated many times
    other = collections.Counter(r.name for r in every if r.domain != "cookbook").most_common(1)[0][0]
    assert len(ex.nvtx_ranges(other)) > 1 and ex.nvtx_ranges(other) == [r for r in every if r.name == other]
    assert ex.nvtx_ranges("no such range") == []


def test_compute_calls_find_the_kernels_inside_each_range():
    path = str(REFERENCE / "cupy_sqdiff/baseline/n4096/nsys.sqlite.gz")
    calls = readers.compute_calls(reference_trace(path), "cupy_sqdiff", "baseline")
    assert len(calls) == 3
    for c in calls:
        # (a - b) ** 2: a subtract and a square kernel per call, no copies
        assert [name for name, _ in c.kernel_names] == ["cupy_square__float64_float64",
                                                        "cupy_subtract__float64_float64_float64"]
        assert c.launches == 2 and c.memcpys == 0 and c.graph_launches == 0
        assert c.busy_ns <= c.kernel_ns <= c.range_ns
        assert not readers.is_library_gemm(c.longest.name)
    # the same kernels by SQL: those that ran inside the compute ranges' time spans
    (n,), = _sql(REFERENCE / "cupy_sqdiff/baseline/n4096/nsys.sqlite.gz", """
        SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN NVTX_EVENTS r
        ON k.start >= r.start AND k.end <= r.end LEFT JOIN StringIds s ON s.id = r.textId
        WHERE COALESCE(r.text, s.value) = 'cupy_sqdiff/baseline/compute'""")
    assert n == sum(c.kernels for c in calls)
    # CuPy's pool takes its blocks in the first calls (the previous reference's capture of this step,
    # which recorded device-memory events); the allocator experiment's loop allocates nothing in a call
    cupy = reference_trace(CUPY_WITH_MEMORY_EVENTS)
    assert readers.allocations_per_call(cupy, "cupy_sqdiff", "baseline") == [16, 1, 0]
    (in_calls,), = _sql(CUPY_WITH_MEMORY_EVENTS, f"""
        SELECT COUNT(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS e JOIN NVTX_EVENTS r
        ON e.start >= r.start AND e.start <= r.end LEFT JOIN StringIds s ON s.id = r.textId
        WHERE e.memoryOperationType = 0 AND e.memKind IN {DEVICE_KINDS_SQL}
        AND COALESCE(r.text, s.value) = 'cupy_sqdiff/baseline/compute'""")
    assert in_calls == 17
    assert readers.allocations_per_call(reference_trace(ALLOCATOR / "default.sqlite.gz"), "jax_matmul", "float32") \
        == [0] * 10


def test_readers_name_what_is_missing(tmp_path):
    from analysis.common.errors import AnalysisInputError

    with pytest.raises(AnalysisInputError, match="no NVTX range"):
        readers.compute_calls(reference_trace(REFERENCE / "cupy_sqdiff/baseline/n4096/nsys.sqlite.gz"), "jax_matmul", "bf16")
    with pytest.raises(AnalysisInputError, match="allocator.json"):
        readers.allocator_experiment(str(tmp_path))
    with pytest.raises(AnalysisInputError, match="ceilings.json"):
        readers.ceilings(str(tmp_path / "jax_matmul"))


# --- the ceilings this recipe is measured against (the GPU parts run in the pipeline) -------------

def test_the_gemm_ceilings_spot_check_is_the_exact_product():
    from workloads.harness import ceilings

    n = 96
    a = (np.arange(n * n) % ceilings.GEMM_INPUT_MODULUS).reshape(n, n).astype(np.float64)
    rows, cols = [0, 1, 48, 95], [0, 95, 3, 94]
    np.testing.assert_array_equal(ceilings.gemm_spot_values(n, rows, cols), (a @ a)[rows, cols])
    # the same values as the recipe's float inputs, so the ceiling multiplies what the recipe does
    np.testing.assert_array_equal(common.float_values(n), a)


def test_fma_kernels_differ_only_in_type_and_function():
    from workloads.harness import ceilings

    fp64, fp32 = ceilings.fma_source("fp64_fma"), ceilings.fma_source("fp32_fma")
    assert "@" not in fp64 + fp32
    assert "void fp64_fma(double *out" in fp64 and "fma(x0, a, b)" in fp64 and "fmaf" not in fp64
    assert "void fp32_fma(float *out" in fp32 and "fmaf(x0, a, b)" in fp32 and "double" not in fp32


def test_allocator_runs_stream_their_output_and_exit_status_into_the_log(capfd):
    """The experiment's log held only "jax_matmul/allocator: default ..." after a failure under
    --cores 4: the run under nsys was captured whole and said nothing until it ended."""
    code = "import sys; print('compiling'); print('RESOURCE_EXHAUSTED: out of memory', file=sys.stderr); sys.exit(3)"
    r = exp_allocator.run_streaming([sys.executable, "-c", code], dict(os.environ), "default under nsys")
    err = capfd.readouterr().err
    assert r.returncode == 3 and "RESOURCE_EXHAUSTED" in r.stderr and "compiling" in r.stderr
    assert "[default under nsys] compiling" in err and "[default under nsys] RESOURCE_EXHAUSTED" in err
    assert err.rstrip().endswith("[default under nsys] exit status 3")


# --- the tf32 step ----------------------------------------------------------------------------------

def test_tf32_tolerance_is_the_n_term_dot_product_bound():
    # 2 e + e^2 + (n - 1) 2^-23, e = 2^-10: both inputs cut to TF32, float32 sums of n nonnegative terms
    for n in (2, 64, 512, 8192):
        want = 2 * 2.0 ** -10 + 2.0 ** -20 + (n - 1) * 2.0 ** -23
        assert common.tf32_tolerance(n) == pytest.approx(want, rel=1e-12)
    assert common.tf32_tolerance(8192) == pytest.approx(2.9305e-3, rel=1e-4)
    v = RECIPE.variant_class("tf32")(size=8192)
    assert v.tolerance == common.tf32_tolerance(8192)


def test_tf32_rounding_keeps_ten_mantissa_bits():
    x = np.array([1 / 7, 2 / 7, 5 / 7, 1.0, 3.0e-5, -4.75, 1234.5678], dtype=np.float32)
    for nearest, bound in ((False, 2.0 ** -10), (True, 2.0 ** -11)):
        t = common.tf32_round(x, nearest=nearest)
        assert t.dtype == np.float32 and not (t.view(np.uint32) & np.uint32(0x1FFF)).any()
        rel = np.abs(t.astype(np.float64) - x) / np.abs(x.astype(np.float64))
        assert (rel <= bound).all()
    # 5/7 = 1.0110110110|1101... x 2^-1: cut, it loses 0.11011..., rounded it goes up
    five = np.float32(5 / 7)
    assert common.tf32_round(np.array([five]))[0] < five < common.tf32_round(np.array([five]), nearest=True)[0]


@pytest.mark.parametrize("n", [64, 512])
def test_tf32_expected_error_from_the_inputs_rounding_sits_under_the_tolerance(n):
    """What the GPU check should measure: the product of the TF32-rounded inputs against the exact one
    (float64 both). Every k/7 loses about 2^-12 of itself (5/7: 2^-10.7 when cut), all the same way, so
    the errors add up instead of averaging out: 6.6e-4 when the kernel cuts, 3.2e-4 when it rounds."""
    a = common.float_values(n, 7)
    exact = a @ a
    errs = {}
    for nearest in (False, True):
        t = common.tf32_round(a.astype(np.float32), nearest=nearest).astype(np.float64)
        errs[nearest] = np.linalg.norm(t @ t - exact) / np.linalg.norm(exact)
    assert errs[False] == pytest.approx(6.6e-4, rel=0.05) and errs[True] == pytest.approx(3.2e-4, rel=0.05)
    assert common.tf32_tolerance(n) / errs[False] > 2.5


@pytest.mark.parametrize("size", [64, 512])
def test_tf32_on_the_cpu_passes_its_check_in_full_float32(size):
    # JAX's CPU backend computes Precision.DEFAULT in float32: no TF32 rounding to see here
    v = _run("tf32", size)
    assert v.platform == "cpu"
    out, ref = v.result(), v.reference()
    err = check_result(out, ref, v.tolerance, "tf32")
    assert 0 < err < 1e-5, err
    # the inputs are the float32 quotients k/7, made on the host
    np.testing.assert_array_equal(np.asarray(v.inputs[-1][0], dtype=np.float64), common.float_values(size, 7))
    # a product off by TF32's whole bound fails
    with pytest.raises(WorkloadError, match="relative error"):
        check_result(out * (1 + 2 * v.tolerance), ref, v.tolerance, "tf32")
    v.teardown()


def test_tf32_program_for_a_gpu_names_the_tf32_algorithm_and_the_cpu_program_default():
    import jax
    from jax import export

    v = RECIPE.variant_class("tf32")(size=64)
    s = jax.ShapeDtypeStruct((64, 64), jax.numpy.float32)
    v.platform = "gpu"
    gpu = export.export(jax.jit(v.product), platforms=["cuda"])(s, s).mlir_module()
    dots = [line for line in gpu.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 1
    assert "lhs_precision_type = tf32, rhs_precision_type = tf32, accumulation_type = f32" in dots[0]
    v.platform = "cpu"
    cpu = jax.jit(v.product).lower(s, s).as_text()
    dots = [line for line in cpu.splitlines() if "stablehlo.dot_general" in line]
    assert len(dots) == 1 and "algorithm" not in dots[0]
    # why the CPU path differs: XLA's CPU backend refuses the preset
    with pytest.raises(ValueError, match="not supported"):
        jax.jit(lambda a, b: jax.numpy.matmul(a, b, precision=jax.lax.DotAlgorithmPreset.TF32_TF32_F32)).lower(s, s)


def test_the_tf32_ceiling_spot_values_are_the_float64_product_of_the_steps_inputs():
    from workloads.harness import ceilings

    n = 96
    a = common.float_values(n, ceilings.TF32_INPUT_DIVISOR)
    rows, cols = [0, 1, 48, 95], [0, 95, 3, 94]
    spot = ceilings.gemm_spot_values(n, rows, cols, divisor=ceilings.TF32_INPUT_DIVISOR)
    np.testing.assert_allclose(spot, (a @ a)[rows, cols], rtol=1e-14)
    assert RECIPE.variant_class("tf32").float_divisor == ceilings.TF32_INPUT_DIVISOR


def test_tf32_work_is_measured_against_the_tf32_gemm_ceiling():
    from analysis.model import floors

    w = RECIPE.variant_class("tf32")(size=8192).work().as_dict()
    ceil = {"d2d_copy": {"gb_per_s": 3000.0}, "tf32_gemm": {"tflop_per_s": 400.0}}
    fl = floors.floor(w, ceil)
    assert fl.binding.resource == "TF32 tensor-core matmul"
    assert fl.ms == pytest.approx(w["flops"] / 400e12 * 1e3)
    assert fl.binding.rate_name == "measured TF32 tensor-core GEMM rate"
    # a run without the ceiling (the committed H200 one) has the memory floor alone
    assert floors.floor(w, {"d2d_copy": {"gb_per_s": 3000.0}}).binding.resource == "device memory"


def test_tf32_improves_on_float32_beside_bf16():
    assert RECIPE.variants == ("baseline", "jit", "float32", "tf32", "bf16")
    assert RECIPE.parent_of("tf32") == "float32" and RECIPE.parent_of("bf16") == "float32"
