"""One run's captures -> one dict of numbers (what the report needs, nothing presented).

A run folder holds ``timing.json`` (timed mode), ``nsys.sqlite`` and
``nsys-run.json`` (the run under nsys) and, for sizes ncu profiled,
``ncu.ncu-rep``. Everything here is a pure function of those files.
"""
from __future__ import annotations

import bisect
import json
import os
from typing import Iterable, Sequence

from analysis import ncu as ncu_reader
from analysis.errors import AnalysisInputError
from analysis.gzfiles import existing_capture
from analysis.nsys_sqlite import ApiCall, GpuOp, NsysExport, NvtxRange

SUITE_DOMAIN = "cookbook"
PHASES = ("setup", "warmup", "compute", "transfer", "check")


def load_json(path: str) -> dict:
    if not os.path.isfile(path):
        raise AnalysisInputError(path, "no such file")
    try:
        with open(path) as f:
            return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AnalysisInputError(path, f"not valid JSON ({e})") from None


def union_ns(intervals: Iterable[tuple[int, int]]) -> int:
    """Total length covered by possibly overlapping [start, end) intervals."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def ops_launched_in(rng: NvtxRange, calls: Sequence[ApiCall], call_starts: Sequence[int],
                    ops_by_corr: dict[int, list[GpuOp]]) -> tuple[list[ApiCall], list[GpuOp]]:
    """API calls made on the range's thread while it was open, and the GPU ops they launched."""
    lo = bisect.bisect_left(call_starts, rng.start_ns)
    hi = bisect.bisect_right(call_starts, rng.end_ns)
    in_range = [c for c in calls[lo:hi] if c.global_tid == rng.global_tid and c.end_ns <= rng.end_ns]
    ops = [op for c in in_range for op in ops_by_corr.get(c.correlation_id, ())]
    return in_range, ops


def _call_record(rng: NvtxRange, api: list[ApiCall], ops: list[GpuOp]) -> dict:
    by_kind = {k: sum(o.duration_ns for o in ops if o.kind == k) for k in ("kernel", "memcpy", "memset")}
    h2d = sum(o.duration_ns for o in ops if o.kind == "memcpy" and o.copy_kind == "Host-to-Device")
    d2h = sum(o.duration_ns for o in ops if o.kind == "memcpy" and o.copy_kind == "Device-to-Host")
    busy = union_ns((o.start_ns, o.end_ns) for o in ops)
    allocs = [c for c in api if c.is_allocation]
    return {
        "index": rng.payload,
        "wall_ns": rng.duration_ns,
        "gpu_kernel_ns": by_kind["kernel"],
        "gpu_memcpy_ns": by_kind["memcpy"],
        "gpu_memcpy_h2d_ns": h2d,
        "gpu_memcpy_d2h_ns": d2h,
        "gpu_memset_ns": by_kind["memset"],
        "gpu_busy_ns": busy,
        "gpu_idle_ns": max(rng.duration_ns - busy, 0),
        "kernels": sum(1 for o in ops if o.kind == "kernel"),
        "kernel_names": [o.name for o in ops if o.kind == "kernel"],
        "allocation_calls": len(allocs),
        "allocation_ns": sum(c.duration_ns for c in allocs),
    }


def kernel_table(ops: Iterable[GpuOp]) -> list[dict]:
    agg: dict[str, list[int]] = {}
    for o in ops:
        if o.kind == "kernel":
            agg.setdefault(o.name, []).append(o.duration_ns)
    rows = [{"name": n, "count": len(d), "total_ns": sum(d), "avg_ns": sum(d) / len(d)} for n, d in agg.items()]
    return sorted(rows, key=lambda r: -r["total_ns"])


def memcpy_table(ops: Iterable[GpuOp]) -> list[dict]:
    agg: dict[tuple, list[GpuOp]] = {}
    for o in ops:
        if o.kind == "memcpy":
            agg.setdefault((o.copy_kind, o.src_kind, o.dst_kind), []).append(o)
    rows = []
    for (ck, sk, dk), group in agg.items():
        nbytes = sum(o.bytes or 0 for o in group)
        ns = sum(o.duration_ns for o in group)
        rows.append({"direction": ck, "src_kind": sk, "dst_kind": dk, "count": len(group), "bytes": nbytes,
                     "total_ns": ns, "gb_per_s": nbytes / ns if ns else None})
    return sorted(rows, key=lambda r: -r["total_ns"])


def summarize_nsys(sqlite_path: str, workload: str, variant: str) -> dict:
    with NsysExport(sqlite_path) as ex:
        ranges = ex.nvtx_ranges()
        api = ex.api_calls()
        ops = ex.gpu_ops()
        gpus = ex.gpu_info()
    mine = {}
    for r in ranges:
        if r.domain != SUITE_DOMAIN:
            continue
        parts = r.name.split("/")
        if len(parts) == 3 and parts[0] == workload and parts[1] == variant and parts[2] in PHASES:
            mine.setdefault(parts[2], []).append(r)
    if not mine.get("compute"):
        raise AnalysisInputError(
            sqlite_path, f"no NVTX range {SUITE_DOMAIN}:{workload}/{variant}/compute: NVTX tracing was off "
                         "(nsys -t nvtx) or the capture is of another workload")
    call_starts = [c.start_ns for c in api]
    ops_by_corr: dict[int, list[GpuOp]] = {}
    for o in ops:
        ops_by_corr.setdefault(o.correlation_id, []).append(o)

    calls, compute_ops = [], []
    for r in sorted(mine["compute"], key=lambda r: r.start_ns):
        api_in, ops_in = ops_launched_in(r, api, call_starts, ops_by_corr)
        calls.append(_call_record(r, api_in, ops_in))
        compute_ops.extend(ops_in)
    phase_ops = {}
    for ph, rs in mine.items():
        phase_ops[ph] = [o for r in rs for o in ops_launched_in(r, api, call_starts, ops_by_corr)[1]]
    all_allocs = [c for c in api if c.is_allocation]
    return {
        "gpu": gpus[0].__dict__ if gpus else None,
        "phases_wall_ns": {ph: sum(r.duration_ns for r in rs) for ph, rs in mine.items()},
        "calls": calls,
        "compute_kernels": kernel_table(compute_ops),
        "memcpy_by_direction": memcpy_table(ops),
        "transfer_memcpy": memcpy_table(phase_ops.get("transfer", [])),
        "allocation_calls_total": len(all_allocs),
        "allocation_ns_total": sum(c.duration_ns for c in all_allocs),
    }


def summarize_ncu(path: str) -> list[dict]:
    out = []
    for launch in ncu_reader.read_launches(path):
        m = launch.metrics
        dur = m.get("gpu__time_duration.sum")
        dram = None
        if m.get("dram__bytes_read.sum") is not None and m.get("dram__bytes_write.sum") is not None:
            dram = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        out.append({
            "id": launch.id,
            "kernel_name": launch.kernel_name,
            "metrics": m,
            "dram_bytes": dram,
            "dram_gb_per_s": dram / dur if dram and dur else None,
            "findings": [f.__dict__ for f in launch.findings],
        })
    return out


def _median(values) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize_run(run_dir: str) -> dict:
    timing = load_json(os.path.join(run_dir, "timing.json"))
    for key in ("workload", "variant", "size", "timing", "times_ms", "work", "provenance"):
        if key not in timing:
            raise AnalysisInputError(os.path.join(run_dir, "timing.json"), f"missing key {key!r}")
    nsys_run = load_json(os.path.join(run_dir, "nsys-run.json"))
    w, v = timing["workload"], timing["variant"]
    work = timing["work"]
    median_ms = timing["timing"]["median_ms"]
    record = {
        "workload": w,
        "variant": v,
        "summary": timing.get("summary", ""),
        "size": timing["size"],
        "work": work,
        "timing": timing["timing"],
        "times_ms": timing["times_ms"],
        "relative_error": timing["relative_error"],
        "achieved_gb_per_s": (work["bytes_read"] + work["bytes_written"]) / median_ms / 1e6,
        "achieved_gflop_per_s": work["flops"] / median_ms / 1e6,
        # what a host timer around the call saw, without and with a synchronize (seed 003)
        "host_call_ms": _median(timing.get("host_call_ms")),
        "host_synced_ms": _median(timing.get("host_synced_ms")),
        "provenance": timing["provenance"],
        "nsys_provenance": nsys_run.get("provenance"),
        "nsys": summarize_nsys(existing_capture(run_dir, "nsys.sqlite") or os.path.join(run_dir, "nsys.sqlite"),
                               w, v),
        "ncu": None,
    }
    ncu_path = existing_capture(run_dir, "ncu.ncu-rep")
    if ncu_path:
        record["ncu"] = summarize_ncu(ncu_path)
    return record
