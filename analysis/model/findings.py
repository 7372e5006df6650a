"""Findings: what a run's captures say is worth fixing, in the manner of ``nsys analyze`` rules and
ncu's rule results. Each is a :class:`Finding` with an id, a severity, the evidence (numbers taken
from the capture) and a suggested fix.

The rules read a run summary's ``nsys`` part (:func:`analysis.model.run_summary.summarize_nsys`) and its
``ncu`` part (:func:`analysis.model.run_summary.summarize_ncu`, or None where ncu did not profile the
variant); they never open a file, so they are pure functions of the captures the summary was made
from. The thresholds are named constants below, each with the reason for its value.
"""
from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Sequence

from analysis.model.limiter.advice import is_library_kernel

#: A copy from or to pageable host memory is staged by the driver through a pinned bounce buffer:
#: it runs well below the link's rate, and cudaMemcpyAsync from pageable memory is synchronous.
#: Below about a megabyte per copy, the copy's latency (~10 µs) rather than its rate sets the time,
#: and pinning buys little; from this size on, pinning pays.
PAGEABLE_MIN_BYTES_PER_COPY = 1 << 20

#: A steady compute call should allocate nothing: each cudaMalloc/cuMemAlloc costs microseconds to
#: milliseconds, and cudaFree synchronizes the device. One allocation call in a hot range is already
#: one a pool (or allocating once, up front) removes.
HOT_RANGE_ALLOCATIONS_MIN = 1

#: One wave is every SM holding the kernel's blocks once. Below one, some SMs have no block for the
#: kernel's whole duration: the kernel cannot use the whole GPU whatever its code does.
WAVES_MIN = 1.0

#: ncu's SOLBottleneck rule calls a kernel latency-bound when both its compute (SM) and its memory
#: throughput are below 60% of peak: neither unit is busy, so the kernel waits (on latency, on too
#: little parallelism) rather than computes or moves data.
LOW_THROUGHPUT_PCT = 60.0

#: Gaps between back-to-back GPU operations of one call shorter than this are launch latency
#: (a few µs per launch on current drivers); gaps adding up to more are host work, allocations or
#: synchronization between the launches.
GPU_GAP_MIN_NS = 10_000
#: ...and they matter when they are at least this share of the call's GPU span (first operation's
#: start to the last one's end): one tenth idle is time a fused or graph-launched call would save.
GPU_GAP_MIN_SHARE = 0.10

#: The suite's runner synchronizes once at the end of every compute call (so that each range holds
#: its own GPU work). More synchronize calls than this in a range mean the step itself waits for the
#: GPU, in a loop or between stages, and the GPU idles while the host catches up.
SYNC_CALLS_PER_COMPUTE_RANGE = 1

SEVERITIES = ("warning", "optimization", "info")


@dataclasses.dataclass(frozen=True)
class Finding:
    """One rule's result on one run."""

    id: str  # the rule, e.g. "pageable_memcpy"
    severity: str  # "warning" (costs time in every call) | "optimization" | "info"
    title: str
    evidence: dict[str, Any]  # numbers from the capture, with units in the key names
    message: str  # the evidence in words
    fix: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _steady(calls: Sequence[dict]) -> Sequence[dict]:
    """Calls after the first (the first call of a cold process compiles and loads code)."""
    return calls[1:] if len(calls) > 1 else calls


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.0f} MB"


def pageable_memcpy(nsys: dict) -> Finding | None:
    """Copies between device and pageable host memory inside the compute ranges."""
    rows = [r for r in nsys.get("compute_copy_throughput") or [] if r.get("host_memory") == "pageable"
            and r["count"] and r["bytes"] / r["count"] >= PAGEABLE_MIN_BYTES_PER_COPY]
    if not rows:
        return None
    calls = len(nsys["calls"])
    total_bytes = sum(r["bytes"] for r in rows)
    total_ns = sum(r["total_ns"] for r in rows)
    parts = [f"{r['count']} {r['direction']} copies of {_mb(r['bytes'] / r['count'])} at {r['gb_per_s']:.1f} GB/s"
             for r in rows]
    return Finding(
        id="pageable_memcpy", severity="warning",
        title="Copies from or to pageable host memory in the compute ranges",
        evidence={"copies": sum(r["count"] for r in rows), "bytes": total_bytes, "duration_ns": total_ns,
                  "gb_per_s": total_bytes / total_ns if total_ns else None, "compute_calls": calls,
                  "directions": [r["direction"] for r in rows]},
        message=f"{'; '.join(parts)} over {calls} compute calls ({total_ns / 1e6:.1f} ms of GPU copy time): "
                "the driver stages each through a pinned bounce buffer.",
        fix="Allocate the host buffers pinned (page-locked) once, in setup: cudaHostAlloc / cudaMallocHost, "
            "cupy.cuda.alloc_pinned_memory, numba.cuda.pinned_array, pycuda.driver.pagelocked_empty; copies from "
            "them run at the link's rate and can overlap kernels on a stream.")


def hot_range_allocations(nsys: dict) -> Finding | None:
    """cudaMalloc/cudaFree-family calls inside the compute ranges."""
    calls = nsys["calls"]
    per_call = [c["allocation_calls"] for c in calls]
    if max(per_call, default=0) < HOT_RANGE_ALLOCATIONS_MIN:
        return None
    steady = [c["allocation_calls"] for c in _steady(calls)] if len(calls) > 1 else []
    ns = sum(c["allocation_ns"] for c in calls)
    wall = sum(c["wall_ns"] for c in calls)
    by_api = [a["name"] for a in (nsys.get("allocations") or {}).get("by_api", []) if a["in_hot_ranges_calls"]]
    flagged = [c["index"] for c in calls if c["allocation_calls"] >= HOT_RANGE_ALLOCATIONS_MIN]
    return Finding(
        id="hot_range_allocations", severity="warning" if any(steady) else "optimization",
        title="Memory allocations inside the compute ranges",
        evidence={"allocation_calls_per_call": per_call, "calls_allocating": flagged,
                  "first_call_allocation_calls": per_call[0], "later_calls_allocation_calls": sum(steady),
                  "allocation_ns": ns, "share_of_compute_wall": ns / wall if wall else None, "apis": by_api},
        message=f"{sum(per_call)} allocation calls ({', '.join(by_api) or 'cudaMalloc family'}) in the compute "
                f"ranges: per call {per_call}, {ns / 1e6:.3f} ms in all"
                + (("; every call after the first allocates too." if all(steady) else
                    "; calls after the first allocate too (a cache or pool still growing).") if any(steady) else
                   "; only the first call allocates (a cache or pool filling up)."),
        fix="Allocate once in setup and reuse the buffers (out= arguments, preallocated outputs), or allocate from "
            "a pool: an RMM pool (rmm.mr.PoolMemoryResource) or CuPy's MemoryPool grown in setup, "
            "cudaMallocAsync on a stream with a memory pool; a pool's first growth belongs in warm-up.")


def under_one_wave(nsys: dict, ncu: Sequence[dict] | None) -> Finding | None:
    """Kernels whose grid does not fill the GPU once (ncu's waves per SM, else grid size vs SMs), each
    with the share of its launches that ran under one wave (what its time at stake is charged by).
    Library kernels (cuBLAS, cuDNN, CUTLASS, CUB, XLA's) are left out: their launch configuration is
    not the program's to change."""
    gpu = nsys.get("gpu") or {}
    small = []
    measured = [launch for launch in ncu or [] if launch["metrics"].get("launch__waves_per_multiprocessor") is not None
                and not is_library_kernel(launch["kernel_name"])]
    if measured:
        by_name: dict[str, list[dict]] = {}
        for launch in measured:
            by_name.setdefault(launch["kernel_name"], []).append(launch)
        for name, launches in by_name.items():
            under = [x for x in launches if x["metrics"]["launch__waves_per_multiprocessor"] < WAVES_MIN]
            if not under:
                continue
            m = under[0]["metrics"]
            small.append({"kernel": name, "source": "ncu", "waves_per_sm": m["launch__waves_per_multiprocessor"],
                          "grid_blocks": m.get("launch__grid_size"), "block_threads": m.get("launch__block_size"),
                          "sm_count": m.get("launch__sm_count") or gpu.get("sm_count"),
                          "launch_share": len(under) / len(launches)})
    elif gpu.get("sm_count"):  # no ncu profile: fewer blocks than SMs is less than one wave for sure
        shapes = [s for s in nsys.get("compute_launch_shapes") or [] if not is_library_kernel(s["name"])]
        for shape in shapes:
            if shape["grid_blocks"] < gpu["sm_count"]:
                total = sum(s.get("launches") or 0 for s in shapes if s["name"] == shape["name"])
                small.append({"kernel": shape["name"], "source": "nsys", "waves_per_sm": None,
                              "grid_blocks": shape["grid_blocks"], "block_threads": shape["block_threads"],
                              "sm_count": gpu["sm_count"],
                              "launch_share": (shape.get("launches") or 0) / total if total else 1.0})
    if not small:
        return None
    parts = []
    for s in small:
        w = f"{s['waves_per_sm']:.3g} waves per SM" if s["waves_per_sm"] is not None else "fewer blocks than SMs"
        parts.append(f"`{s['kernel']}`: {s['grid_blocks']} block(s) of {s['block_threads']} threads on "
                     f"{s['sm_count']} SMs ({w}, from {s['source']})")
    return Finding(
        id="under_one_wave", severity="warning", title="Kernels launched with less than one wave",
        evidence={"kernels": small},
        message="; ".join(parts) + ": most SMs have nothing to run.",
        fix="Launch enough blocks to fill every SM: a grid of (SM count x resident blocks per SM) with a "
            "grid-stride loop, or one thread per element with grid = ceil(n / block); the occupancy "
            "calculator (cudaOccupancyMaxActiveBlocksPerMultiprocessor) gives the blocks per SM.")


def low_throughput(ncu: Sequence[dict] | None) -> Finding | None:
    """Kernels with both SM and memory throughput under LOW_THROUGHPUT_PCT (ncu)."""
    low = []
    seen = set()
    for launch in ncu or []:
        m = launch["metrics"]
        sm = m.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
        mem = m.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
        if sm is None or mem is None or launch["kernel_name"] in seen:
            continue
        if sm < LOW_THROUGHPUT_PCT and mem < LOW_THROUGHPUT_PCT:
            seen.add(launch["kernel_name"])
            low.append({"kernel": launch["kernel_name"], "launch_id": launch["id"], "sm_pct": sm, "memory_pct": mem,
                        "duration_ns": m.get("gpu__time_duration.sum"),
                        "occupancy_pct": m.get("sm__warps_active.avg.pct_of_peak_sustained_active")})
    if not low:
        return None
    parts = [f"`{k['kernel']}` (ncu ID {k['launch_id']}): SM {k['sm_pct']:.1f}%, memory {k['memory_pct']:.1f}% of peak"
             for k in low]
    return Finding(
        id="low_throughput", severity="warning",
        title=f"Kernels below {LOW_THROUGHPUT_PCT:.0f}% of peak on both compute and memory",
        evidence={"kernels": low, "threshold_pct": LOW_THROUGHPUT_PCT},
        message="; ".join(parts) + ": neither the SMs nor memory are busy, the kernel is latency-bound.",
        fix="Give the GPU more parallel work: more blocks (see under_one_wave), more independent work per thread "
            "(unrolling, vector loads) and higher occupancy; ncu's Warp State and Occupancy sections say what the "
            "warps wait for.")


def gpu_gaps(nsys: dict, timing: dict | None = None) -> Finding | None:
    """GPU idle gaps between the operations of a steady compute call, measured under nsys; only where
    the timed run confirms idle time (``timing``: its median above the steady calls' GPU busy time):
    tracing adds host time between launches that the timed run does not have."""
    steady = _steady(nsys["calls"])
    if timing and steady:
        busy_ms = statistics.median(c.get("gpu_busy_ns") or 0 for c in steady) / 1e6
        if timing["median_ms"] - busy_ms < GPU_GAP_MIN_NS / 1e6:
            return None
    flagged = []
    for c in _steady(nsys["calls"]):
        span, gap = c.get("gpu_span_ns") or 0, c.get("gpu_gap_ns") or 0
        if span and gap >= GPU_GAP_MIN_NS and gap / span >= GPU_GAP_MIN_SHARE:
            flagged.append(c)
    if not flagged:
        return None
    worst = max(flagged, key=lambda c: c["gpu_gap_ns"] / c["gpu_span_ns"])
    share = worst["gpu_gap_ns"] / worst["gpu_span_ns"]
    with_allocs = [c["index"] for c in flagged if c["allocation_calls"]]
    with_syncs = [c["index"] for c in flagged if c.get("sync_calls", 0) > SYNC_CALLS_PER_COMPUTE_RANGE]
    causes = []
    if with_allocs:
        causes.append(f"calls {with_allocs} allocate memory between launches")
    if with_syncs:
        causes.append(f"calls {with_syncs} synchronize between launches")
    return Finding(
        id="gpu_gaps", severity="optimization", title="The GPU idles between the launches of a compute call",
        evidence={"calls_flagged": [c["index"] for c in flagged], "worst_call": worst["index"],
                  "gap_ns": worst["gpu_gap_ns"], "max_gap_ns": worst["gpu_gap_max_ns"],
                  "gpu_span_ns": worst["gpu_span_ns"], "gap_share": share, "gpu_ops": worst.get("gpu_ops"),
                  "steady_calls": len(_steady(nsys["calls"]))},
        message=f"in call {worst['index']} the GPU ran nothing for {worst['gpu_gap_ns'] / 1e3:.1f} µs "
                f"({share:.0%}) of the {worst['gpu_span_ns'] / 1e3:.1f} µs from its first operation's start to its "
                f"last one's end (longest gap {worst['gpu_gap_max_ns'] / 1e3:.1f} µs)"
                + (f"; {'; '.join(causes)}" if causes else "") + ".",
        fix="Keep the launches back to back: move allocations, host work and synchronization out of the call, "
            "fuse the kernels, or capture the call's launches once in a CUDA graph and replay it.")


def sync_in_loop(nsys: dict) -> Finding | None:
    """More synchronize calls in a compute range than the runner's one per call."""
    calls = nsys["calls"]
    per_call = [c.get("sync_calls", 0) for c in calls]
    if max(per_call, default=0) <= SYNC_CALLS_PER_COMPUTE_RANGE:
        return None
    sync = nsys.get("synchronization") or {}
    apis = [a["name"] for a in sync.get("by_api", []) if a["in_hot_ranges_calls"]]
    ns = sum(c.get("sync_ns", 0) for c in calls)
    return Finding(
        id="sync_in_loop", severity="warning", title="Synchronization inside the compute ranges",
        evidence={"sync_calls_per_call": per_call, "expected_per_call": SYNC_CALLS_PER_COMPUTE_RANGE,
                  "sync_ns": ns, "apis": apis},
        message=f"{sum(per_call)} synchronize calls ({', '.join(apis)}) in {len(calls)} compute calls, "
                f"per call {per_call} where the runner makes {SYNC_CALLS_PER_COMPUTE_RANGE}; "
                f"{ns / 1e6:.3f} ms spent waiting.",
        fix="Synchronize once, after the loop (or let stream order do it): replace per-iteration "
            "cudaStreamSynchronize/cudaDeviceSynchronize with events (cudaStreamWaitEvent) between streams, "
            "and avoid calls that synchronize implicitly (cudaMemcpy from pageable memory, cudaFree, "
            "reading a device scalar on the host).")


def evaluate(nsys: dict, ncu: Sequence[dict] | None, timing: dict | None = None) -> list[Finding]:
    """Every rule on one run, the flagged ones in a fixed order (``timing``: the timed run's, which
    confirms or rules out idle time measured under nsys)."""
    results = [pageable_memcpy(nsys), hot_range_allocations(nsys), under_one_wave(nsys, ncu), low_throughput(ncu),
               gpu_gaps(nsys, timing), sync_in_loop(nsys)]
    return [f for f in results if f is not None]
