"""analysis.model.breakdown and the columnar reader under it, on the real captures: the numbers agree with
nsys' own (`nsys stats` CSVs) and with the record readers, and say what the variants do."""
from __future__ import annotations

import contextlib
import gzip
import shutil
import sqlite3

import numpy as np
import pytest

from analysis.model import breakdown
from analysis.readers.nsys import stats as nsys_stats
from analysis.readers.nsys import columns as cols
from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import ALLOCATION_APIS, Trace, api_family

from conftest import REFERENCE, nsys_stats_rows, reference_runs, reference_trace

RUNS = reference_runs(with_nsys_stats=True)


def _export(run):
    return contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz"))


def _plain(tmp_path, run, name="export.sqlite"):
    db = tmp_path / name
    with gzip.open(run / "nsys.sqlite.gz") as f_in, open(db, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    return db


def _run(workload, variant):
    return next(REFERENCE.glob(f"{workload}/{variant}/n*"))


# --- GPU busy and idle ----------------------------------------------------------------------------------

def test_gpu_time_sums_equal_nsysnsys_stats_rows(run):
    with _export(run) as ex:
        g = breakdown.gpu_time(ex)
    mem = nsys_stats_rows(run, "cuda_gpu_mem_time_sum")
    assert g["kernel_ns"] == sum(int(r["Total Time (ns)"]) for r in nsys_stats_rows(run, "cuda_gpu_kern_sum"))
    assert g["kernels"] == sum(int(r["Instances"]) for r in nsys_stats_rows(run, "cuda_gpu_kern_sum"))
    assert g["memcpy_ns"] == sum(int(r["Total Time (ns)"]) for r in mem if r["Operation"].startswith("[CUDA memcpy"))
    assert g["memset_ns"] == sum(int(r["Total Time (ns)"]) for r in mem if r["Operation"] == "[CUDA memset]")
    assert g["memcpy_h2d_ns"] == sum(int(r["Total Time (ns)"]) for r in mem
                                     if r["Operation"] == "[CUDA memcpy Host-to-Device]")
    # the union: never more than the span or the sum of the kinds; the rest of the span is idle
    assert 0 < g["busy_ns"] <= min(g["span_ns"], g["kernel_ns"] + g["memcpy_ns"] + g["memset_ns"])
    assert g["busy_ns"] + g["idle_in_span_ns"] == g["span_ns"]
    assert g["overlap_ns"] == g["kernel_ns"] + g["memcpy_ns"] + g["memset_ns"] - g["busy_ns"] >= 0


def test_only_the_streams_variant_overlaps_copies_and_kernels():
    overlap = {}
    for variant in ("baseline", "pinned", "streams"):
        with _export(_run("numba_ufunc", variant)) as ex:
            overlap[variant] = breakdown.gpu_time(ex)["overlap_ns"]
    assert overlap["baseline"] == overlap["pinned"] == 0
    assert overlap["streams"] > 0


def test_range_projection_equals_nvtx_gpu_proj_sum(run):
    """Per range name: the projected time (first op start to last op end) and the instances that
    launched anything, as `nsys stats -r nvtx_gpu_proj_sum` gives them."""
    with _export(run) as ex:
        records = breakdown.range_gpu_time(ex)
    mine: dict[str, list] = {}
    for r in records:
        if r["ops"]:
            m = mine.setdefault(f"{r['domain'] or ''}:{r['name']}", [0, 0, 0])
            m[0] += r["span_ns"]
            m[1] += 1
            m[2] += r["launches"]
    theirs = {r["Range"]: [int(r["Total Proj Time (ns)"]), int(r["Range Instances"]), int(r["Total GPU Ops"])]
              for r in nsys_stats_rows(run, "nvtx_gpu_proj_sum")}
    assert mine == theirs


def test_range_records_add_up(run):
    with _export(run) as ex:
        for r in breakdown.range_gpu_time(ex):
            assert r["busy_ns"] + r["idle_in_span_ns"] == r["span_ns"]
            assert r["idle_in_range_ns"] == max(r["range_ns"] - r["busy_ns"], 0)
            assert r["ops"] == r["kernels"] + r["memcpys"] + r["memsets"]


# --- copies ---------------------------------------------------------------------------------------------

def test_copy_throughput_equals_nsys_stats_totals(run):
    with _export(run) as ex:
        rows = breakdown.copy_throughput(ex)
    by_dir: dict[str, list] = {}
    for r in rows:
        d = by_dir.setdefault(f"[CUDA memcpy {r['direction']}]", [0, 0, 0])
        d[0] += r["count"]
        d[1] += r["total_ns"]
        d[2] += r["bytes"]
        assert r["gb_per_s"] == pytest.approx(r["bytes"] / r["total_ns"])
        assert r["best_copy_gb_per_s"] >= r["gb_per_s"] * (1 - 1e-12)
    times = {r["Operation"]: (int(r["Count"]), int(r["Total Time (ns)"])) for r in nsys_stats_rows(run, "cuda_gpu_mem_time_sum")
             if r["Operation"].startswith("[CUDA memcpy")}
    sizes = {r["Operation"]: float(r["Total (MB)"]) for r in nsys_stats_rows(run, "cuda_gpu_mem_size_sum")
             if r["Operation"].startswith("[CUDA memcpy")}
    assert {k: tuple(v[:2]) for k, v in by_dir.items()} == times
    for k, v in by_dir.items():
        assert v[2] / 1e6 == pytest.approx(sizes[k], abs=5e-4)


@pytest.mark.parametrize("variant, host", [("baseline", "pageable"), ("pinned", "pinned"), ("streams", "pinned")])
def test_host_memory_kind_of_the_numba_copies(variant, host):
    with _export(_run("numba_ufunc", variant)) as ex:
        rows = breakdown.copy_throughput(ex)
    host_copies = [r for r in rows if r["direction"] in ("Host-to-Device", "Device-to-Host")]
    assert {r["direction"] for r in host_copies} == {"Host-to-Device", "Device-to-Host"}
    assert {r["host_memory"] for r in host_copies} == {host}


def test_pinned_copies_beat_pageable_ones():
    rates = {}
    for variant in ("baseline", "pinned"):
        with _export(_run("numba_ufunc", variant)) as ex:
            rates[variant] = {r["direction"]: r["gb_per_s"] for r in breakdown.copy_throughput(ex)}
    for direction in ("Host-to-Device", "Device-to-Host"):
        assert rates["pinned"][direction] > rates["baseline"][direction]


def test_copy_throughput_of_ranges_counts_only_their_copies():
    with _export(_run("numba_ufunc", "device_resident")) as ex:
        compute = [r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)]
        assert breakdown.copy_throughput(ex, compute) == []  # device-resident: no copy while computing
        assert breakdown.copy_throughput(ex)  # the result still comes back once, after


# --- allocations and synchronization --------------------------------------------------------------------

def test_allocation_counts_equal_cuda_api_sum(run):
    with _export(run) as ex:
        a = breakdown.allocations(ex)
    theirs = {}
    for r in nsys_stats_rows(run, "cuda_api_sum"):
        if api_family(r["Name"]) in ALLOCATION_APIS:
            n, t = theirs.get(api_family(r["Name"]), (0, 0))
            theirs[api_family(r["Name"])] = (n + int(r["Num Calls"]), t + int(r["Total Time (ns)"]))
    assert {x["name"]: (x["calls"], x["total_ns"]) for x in a["by_api"]} == theirs
    assert a["calls"] == sum(n for n, _ in theirs.values())
    assert sum(a["per_hot_range_calls"]) == a["in_hot_ranges_calls"] <= a["calls"]


def test_pool_variants_allocate_nothing_while_computing_and_the_baseline_does():
    with _export(_run("cupy_sqdiff", "baseline")) as ex:
        base = breakdown.allocations(ex)
    assert base["per_hot_range_calls"][0] > 0  # CuPy's own pool grows in the first call
    assert base["hot_range_pattern"] != "none"
    for variant in ("rmm_pool", "fused_pool"):
        with _export(_run("cupy_sqdiff", variant)) as ex:
            pool = breakdown.allocations(ex)
        assert pool["hot_range_pattern"] == "none" and pool["in_hot_ranges_calls"] == 0, variant
        assert pool["calls"] > 0  # the pool itself was allocated, in setup


def test_driver_api_allocations_count_whatever_their_version_suffix():
    """Numba allocates with cuMemAlloc_v2 in every call of its baseline (to_device per call)."""
    with _export(_run("numba_ufunc", "baseline")) as ex:
        a = breakdown.allocations(ex)
    assert a["hot_range_pattern"] == "every range"
    assert "cuMemAlloc" in [x["name"] for x in a["by_api"] if x["in_hot_ranges_calls"]]


#: recipes whose calls synchronize only where the runner does (once per call); cuDF synchronizes
#: inside its groupby and JAX inside block_until_ready's event waits
RUNNER_SYNC_ONLY = ("cupy_sqdiff", "numba_ufunc", "pycuda_kernel", "warp_sph")


@pytest.mark.parametrize("run", [r for r in RUNS if r.parts[-3] in RUNNER_SYNC_ONLY],
                         ids=lambda p: "/".join(p.parts[-3:]))
def test_every_compute_range_holds_the_runners_one_synchronize(run):
    with _export(run) as ex:
        s = breakdown.synchronization(ex)
        hot = [r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)]
    assert s["per_hot_range_calls"] == [1] * len(hot)


# --- errors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["'soon'", "NULL", "1.5", "X'00ff'", "'1,2'"])
def test_damaged_values_are_a_clear_error(tmp_path, value):
    db = _plain(tmp_path, RUNS[0], "damaged.sqlite")
    with sqlite3.connect(db) as con:
        # the same table without its NOT NULL constraints, as a damaged file may hold it
        con.execute("CREATE TABLE k AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute("ALTER TABLE k RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = {value} WHERE rowid = 2")
    with Trace(db) as ex:
        with pytest.raises(AnalysisInputError, match="damaged.sqlite: .*damaged"):
            breakdown.gpu_time(ex)
    with pytest.raises(AnalysisInputError, match="damaged.sqlite: .*damaged"):
        nsys_stats.report(str(db), "cuda_gpu_kern_sum")


def test_export_without_nvtx_ranges_is_a_clear_error(tmp_path):
    db = _plain(tmp_path, RUNS[0], "nonvtx.sqlite")
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM NVTX_EVENTS")
    with Trace(db) as ex:
        with pytest.raises(AnalysisInputError, match="nonvtx.sqlite.*no closed NVTX ranges"):
            breakdown.range_gpu_time(ex)


# --- nsys_stats statistics over arrays (the kernel summary reads columns) ---------------------------------

def test_summary_of_an_array_equals_the_summary_of_a_list():
    with _export(RUNS[0]) as ex:
        k = cols.int_columns(ex, "CUPTI_ACTIVITY_KIND_KERNEL", ("end - start",), ("d",))["d"]
    # real durations, and the same scaled past what int64 squares can hold (the Python-int path)
    for values in (k, k * (1 << 22), k[:1], k[:2]):
        a, b = nsys_stats._Summary(values), nsys_stats._Summary(values.tolist())
        assert (a.n, a.total, a.min, a.max, a.avg, a.med, a.std) == (b.n, b.total, b.min, b.max, b.avg, b.med, b.std)
    assert isinstance(nsys_stats._Summary(k * (1 << 22)).total, int)
    assert np.int64(k.max()) * (1 << 22) > 0  # still an int64 (no overflow in the scaling itself)
