"""Findings on the real captures: each rule flags what the variant really does, and its evidence
is the capture's own numbers (recomputed here another way where there is one)."""
from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from analysis.model import breakdown, findings
from analysis.common.gzfiles import existing_capture
from analysis.readers.ncu import read_launches, read_raw_csv
from analysis.readers.nsys.trace import Trace
from analysis.readers.nsys import columns as cols
from analysis.model.run_summary import summarize_nsys

from conftest import REFERENCE, reference_runs, summary_of

RUNS = reference_runs()


_summary = summary_of


def _run(workload, variant, size=None):
    return next(REFERENCE.glob(f"{workload}/{variant}/n{size or '*'}"))


def _ids(run) -> dict[str, dict]:
    return {f["id"]: f for f in _summary(run)["findings"]}


@pytest.fixture
def run(any_run):
    return any_run


def test_findings_are_typed_records_with_evidence_and_a_fix(run):
    for f in _summary(run)["findings"]:
        assert set(f) == {"id", "severity", "title", "evidence", "message", "fix"}
        assert f["severity"] in findings.SEVERITIES
        assert f["evidence"] and f["message"] and f["fix"]
        json.dumps(f)  # plain numbers and text


# --- pageable copies ----------------------------------------------------------------------------------

def test_pageable_copies_are_flagged_in_the_numba_baseline_and_not_once_pinned():
    base = _run("numba_ufunc", "baseline")
    flagged = _ids(base)["pageable_memcpy"]
    with Trace(base / "nsys.sqlite.gz") as ex:
        hot = [r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)]
        copies = breakdown.copy_throughput(ex, hot)
    pageable = [c for c in copies if c["host_memory"] == "pageable"]
    assert flagged["evidence"]["bytes"] == sum(c["bytes"] for c in pageable) > 0
    assert set(flagged["evidence"]["directions"]) == {"Host-to-Device", "Device-to-Host"}
    for variant in ("pinned", "streams", "device_resident"):
        assert "pageable_memcpy" not in _ids(_run("numba_ufunc", variant)), variant


def test_copies_outside_the_compute_ranges_are_not_flagged():
    """CuPy's variants copy the result back from pageable memory, but once, after computing."""
    run = _run("cupy_sqdiff", "fused")
    assert any(c["host_memory"] == "pageable" for c in _summary(run)["nsys"]["copy_throughput"])
    assert "pageable_memcpy" not in _ids(run)


# --- allocations in the hot ranges --------------------------------------------------------------------

@pytest.mark.parametrize("size", [4096, 16384])
def test_cupy_baseline_allocates_in_its_first_call_and_the_pools_do_not(size):
    f = _ids(_run("cupy_sqdiff", "baseline", size))["hot_range_allocations"]
    assert f["evidence"]["first_call_allocation_calls"] > 0
    assert 0 in f["evidence"]["calls_allocating"]
    assert "cudaMalloc" in f["evidence"]["apis"]
    for variant in ("rmm_pool", "fused_pool"):
        assert "hot_range_allocations" not in _ids(_run("cupy_sqdiff", variant, size)), variant


def test_allocation_evidence_is_the_calls_of_the_api_trace():
    run = _run("numba_ufunc", "baseline")
    f = _ids(run)["hot_range_allocations"]
    with Trace(run / "nsys.sqlite.gz") as ex:
        hot = sorted((r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)), key=lambda r: r.start_ns)
        api = ex.api_calls()
    per_call = [sum(1 for c in api if c.is_allocation and c.global_tid == r.global_tid
                    and r.start_ns <= c.start_ns and c.end_ns <= r.end_ns) for r in hot]
    assert f["evidence"]["allocation_calls_per_call"] == per_call
    assert f["severity"] == "warning"  # every call allocates: to_device of a host array per call


# --- less than one wave, low throughput -------------------------------------------------------------------

def test_one_block_of_256_threads_is_under_one_wave():
    run = _run("pycuda_kernel", "baseline")
    f = _ids(run)["under_one_wave"]
    (kernel,) = f["evidence"]["kernels"]
    launch = read_launches(run / "ncu.ncu-rep.gz")[0]
    assert kernel["source"] == "ncu"
    assert kernel["grid_blocks"] == launch.metrics["launch__grid_size"] == 1
    assert kernel["block_threads"] == 256
    assert kernel["waves_per_sm"] < 1
    for variant in ("device_resident", "vectorized", "grid_sized", "pinned_async"):
        assert "under_one_wave" not in _ids(_run("pycuda_kernel", variant)), variant


def test_without_ncu_the_grid_is_compared_with_the_sm_count():
    run = _run("pycuda_kernel", "baseline")
    nsys = _summary(run)["nsys"]
    f = findings.under_one_wave(nsys, None)
    assert f is not None and f.evidence["kernels"][0]["source"] == "nsys"
    assert f.evidence["kernels"][0]["grid_blocks"] < nsys["gpu"]["sm_count"]
    assert findings.under_one_wave(_summary(_run("pycuda_kernel", "grid_sized"))["nsys"], None) is None


def test_low_throughput_is_flagged_where_ncu_measured_both_below_the_threshold(run):
    flagged = "low_throughput" in _ids(run)
    rep, raw = run / "ncu.ncu-rep.gz", existing_capture(str(run), "ncu-raw.csv")  # the reference gzips it
    if not rep.exists() and raw is None:
        assert not flagged
        return
    # where the report file was not kept, the summary reads ncu's raw page
    launches = read_launches(rep) if rep.exists() else read_raw_csv(raw)
    low = any(m["sm__throughput.avg.pct_of_peak_sustained_elapsed"] < findings.LOW_THROUGHPUT_PCT and
              m["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"] < findings.LOW_THROUGHPUT_PCT
              for m in (launch.metrics for launch in launches))
    assert flagged == low
    if "baseline" in run.parts and "pycuda_kernel" in run.parts:
        assert flagged  # one block on a 132-SM GPU keeps neither the SMs nor memory busy


# --- idle gaps and synchronization --------------------------------------------------------------------

def _steady_gaps(run) -> list[tuple[int, int]]:
    """(gap, span) of every steady compute call, from the record readers."""
    with Trace(run / "nsys.sqlite.gz") as ex:
        hot = sorted((r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)), key=lambda r: r.start_ns)
        steady = hot[1:] if len(hot) > 1 else hot
        per_range = cols.launched_in(ex, steady)
    out = []
    for _, ops in per_range:
        launched = sorted(ops, key=lambda o: o.start_ns)
        gap, end = 0, launched[0].end_ns
        for o in launched[1:]:
            gap += max(o.start_ns - end, 0)
            end = max(end, o.end_ns)
        out.append((gap, end - launched[0].start_ns))
    return out


def _timed_idle_confirmed(run) -> bool:
    """The timed run's median exceeds the steady traced calls' GPU busy time by at least a gap's worth."""
    record = summary_of(run)
    steady = record["nsys"]["calls"][1:] or record["nsys"]["calls"]
    busy_ms = sorted(c["gpu_busy_ns"] for c in steady)[(len(steady) - 1) // 2:len(steady) // 2 + 1]
    return record["timing"]["median_ms"] - sum(busy_ms) / len(busy_ms) / 1e6 >= findings.GPU_GAP_MIN_NS / 1e6


def test_gpu_gaps_are_flagged_where_the_steady_calls_leave_the_gpu_idle(run):
    """Gaps under nsys stand only where the timed run confirms idle time."""
    expected = any(gap >= findings.GPU_GAP_MIN_NS and gap / span >= findings.GPU_GAP_MIN_SHARE
                   for gap, span in _steady_gaps(run)) and _timed_idle_confirmed(run)
    assert ("gpu_gaps" in _ids(run)) == expected


def test_warp_plane_threads_gaps_under_nsys_are_not_confirmed_by_the_timed_run():
    """Its event median (2.095 ms) is below nsys' busy time (2.111 ms): the traced gaps are tracing's."""
    run = REFERENCE / "warp_sph" / "plane_threads" / "n62500"
    assert any(gap >= findings.GPU_GAP_MIN_NS and gap / span >= findings.GPU_GAP_MIN_SHARE
               for gap, span in _steady_gaps(run))
    assert not _timed_idle_confirmed(run) and "gpu_gaps" not in _ids(run)


def test_a_cudamalloc_between_two_kernels_leaves_a_gap():
    """At 4096², CuPy's baseline allocates its temporary between the two kernels of call 1."""
    f = _ids(_run("cupy_sqdiff", "baseline", 4096))["gpu_gaps"]
    worst = f["evidence"]["worst_call"]
    call = next(c for c in _summary(_run("cupy_sqdiff", "baseline", 4096))["nsys"]["calls"] if c["index"] == worst)
    assert call["allocation_calls"] > 0 and call["kernels"] == 2
    assert f["evidence"]["gap_share"] >= findings.GPU_GAP_MIN_SHARE
    assert "gpu_gaps" not in _ids(_run("cupy_sqdiff", "fused_pool", 4096))  # one kernel per call, no gap


@pytest.mark.parametrize("run", [r for r in RUNS if r.parts[-3] != "cudf_groupby"],
                         ids=lambda p: "/".join(p.parts[-3:]))
def test_one_synchronize_per_call_is_the_runners_and_not_flagged(run):
    assert "sync_in_loop" not in _ids(run)


@pytest.mark.parametrize("variant", ["split_agg", "agg_all", "split_agg_pool", "agg_all_pool"])
def test_cudf_synchronizing_inside_its_groupby_is_flagged(variant):
    """cuDF waits for the GPU inside a groupby call (sizes of intermediate results go to the host):
    the capture shows it, and the rule says so."""
    assert "sync_in_loop" in _ids(_run("cudf_groupby", variant, 50000000))


def test_synchronize_calls_inside_the_loop_are_flagged(tmp_path):
    """The CuPy baseline's export with three more cudaStreamSynchronize calls in every compute call,
    made of its own synchronize rows."""
    run = _run("cupy_sqdiff", "baseline", 16384)
    db = tmp_path / "synced.sqlite"
    with gzip.open(run / "nsys.sqlite.gz") as f_in, open(db, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    with Trace(db) as ex:
        hot = [r for r in ex.nvtx_ranges() if breakdown.is_hot_range(r)]
    with sqlite3.connect(db) as con:
        cols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
        sync = con.execute("SELECT r.* FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                           "WHERE s.value LIKE 'cudaStreamSynchronize%' LIMIT 1").fetchone()
        corr = con.execute("SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        for r in hot:
            for k in range(3):
                row = dict(zip(cols, sync))
                corr += 1
                row.update(start=r.start_ns + 10 + 2 * k, end=r.start_ns + 11 + 2 * k, correlationId=corr,
                           globalTid=r.global_tid)
                con.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({', '.join('?' * len(cols))})",
                            [row[c] for c in cols])
    with Trace(db) as ex:
        nsys = summarize_nsys(ex, "cupy_sqdiff", "baseline")
    f = findings.sync_in_loop(nsys)
    assert f is not None and f.severity == "warning"
    assert f.evidence["sync_calls_per_call"] == [4] * len(hot)
    assert "cudaStreamSynchronize" in f.evidence["apis"]


def test_jax_tf32_has_no_launch_configuration_finding():
    """Its time is cuBLAS' `sm90_xmma` kernels, one of them at 128 blocks once: a library's launch
    configuration, no advice for the program."""
    assert "under_one_wave" not in _ids(REFERENCE / "jax_matmul" / "tf32" / "n8192")


def test_under_one_wave_charges_each_kernel_by_its_own_launches():
    """Warp's baseline: its kernels run under one wave in every launch (share 1.0 each)."""
    f = _ids(REFERENCE / "warp_sph" / "baseline" / "n62500")["under_one_wave"]
    assert f["evidence"]["kernels"] and all(0 < k["launch_share"] <= 1 for k in f["evidence"]["kernels"])
    assert not any(findings.is_library_kernel(k["kernel"]) for k in f["evidence"]["kernels"])
