"""What ``nsys stats`` does not give, as pure functions of an nsys SQLite export.

- :func:`gpu_time`: over the whole run, GPU time by kind (kernels, copies, memsets), the time
  the GPU was busy with anything (their union) and idle, between the first GPU operation's start
  and the last one's end.
- :func:`range_gpu_time`: the same per NVTX range, projected as ``nsys stats -r nvtx_gpu_proj_sum``
  projects: the GPU operations launched by CUDA API calls that started and ended inside the range,
  on the range's thread.
- :func:`copy_throughput`: memcpy throughput per direction and host memory kind (pageable or
  pinned, from the copies' srcKind/dstKind).
- :func:`allocations`: cudaMalloc/cudaFree-family calls (runtime and driver API), counts and time,
  in total and inside the hot (``compute``) ranges, and what that says about pooling.
- :func:`synchronization`: synchronize calls inside the hot ranges.

Times in ns, sizes in bytes, throughput in GB/s (10^9 bytes per second = bytes per ns).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from analysis.readers.nsys import columns as cols
from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import Trace, NvtxRange

#: host memory kinds as ENUM_CUDA_MEM_KIND labels them, and as the reports name them
HOST_KINDS = {"Pageable": "pageable", "Pinned": "pinned", "Managed": "managed"}


def is_hot_range(r: NvtxRange) -> bool:
    """A ``compute`` range: named ``compute``, or ``.../compute`` as the suite names them."""
    return r.name == "compute" or r.name.endswith("/compute")


def _labels(ex: Trace) -> tuple[dict[int, str], dict[int, str]]:
    return ex.enum_labels("ENUM_CUDA_MEMCPY_OPER"), ex.enum_labels("ENUM_CUDA_MEM_KIND")


# --- GPU busy and idle ------------------------------------------------------------------------------

def ops_time(ops: cols.Ops, idx: np.ndarray | slice, h2d: int | None = None, d2h: int | None = None) -> dict:
    """GPU time of the operations ``ops[idx]``: sums of durations by kind, their union (busy), the
    span from the first start to the last end, and the gaps inside it (idle between operations)."""
    kind, start, end = ops.kind[idx], ops.start[idx], ops.end[idx]
    dur = end - start
    u = cols.union(start, end)
    copy = ops.copy_kind[idx]
    out = {
        "kernels": int((kind == cols.KERNEL).sum()),
        "memcpys": int((kind == cols.MEMCPY).sum()),
        "memsets": int((kind == cols.MEMSET).sum()),
        "kernel_ns": int(dur[kind == cols.KERNEL].sum()),
        "memcpy_ns": int(dur[kind == cols.MEMCPY].sum()),
        "memcpy_h2d_ns": int(dur[(kind == cols.MEMCPY) & (copy == h2d)].sum()) if h2d is not None else 0,
        "memcpy_d2h_ns": int(dur[(kind == cols.MEMCPY) & (copy == d2h)].sum()) if d2h is not None else 0,
        "memset_ns": int(dur[kind == cols.MEMSET].sum()),
        "busy_ns": u.busy_ns,
        "span_ns": u.span_ns,
        "idle_in_span_ns": u.gap_ns,
        "max_gap_ns": u.max_gap_ns,
        "first_start_ns": u.first_start_ns,
        "last_end_ns": u.last_end_ns,
    }
    # kinds overlap when streams run concurrently: their sum exceeds the union by this much
    out["overlap_ns"] = out["kernel_ns"] + out["memcpy_ns"] + out["memset_ns"] - u.busy_ns
    return out


def _copy_ids(ex: Trace) -> tuple[int | None, int | None]:
    kinds = ex.enum_labels("ENUM_CUDA_MEMCPY_OPER")
    by_label = {v: k for k, v in kinds.items()}
    return by_label.get("Host-to-Device"), by_label.get("Device-to-Host")


def gpu_time(ex: Trace) -> dict:
    """Whole run: GPU time by kind, busy (union) and idle between the first and last operation."""
    trace = cols.launches(ex)
    if len(trace.ops) == 0:
        raise AnalysisInputError(ex.path, "export holds no GPU operations (kernels, memcpys, memsets)")
    return ops_time(trace.ops, slice(None), *_copy_ids(ex))


def range_record(r: NvtxRange, ops: cols.Ops, idx: np.ndarray, h2d: int | None, d2h: int | None) -> dict:
    t = ops_time(ops, idx, h2d, d2h)
    return {
        "name": r.name, "domain": r.domain, "payload": r.payload,
        "start_ns": r.start_ns, "end_ns": r.end_ns, "range_ns": r.duration_ns,
        "ops": int(len(idx)),
        # launches that put work on the GPU: a CUDA graph launch runs many kernels under one
        # correlation id, and nsys' nvtx_gpu_proj_sum counts it once ("Total GPU Ops")
        "launches": int(len(np.unique(ops.corr[idx]))),
        **t,
        # wall time of the range the GPU spent on none of the work the range launched
        "idle_in_range_ns": max(r.duration_ns - t["busy_ns"], 0),
    }


def range_gpu_time(ex: Trace, ranges: Sequence[NvtxRange] | None = None) -> list[dict]:
    """Per NVTX range (every closed range by default, in start order): the GPU time of the work it
    launched (see the module's doc)."""
    trace = cols.launches(ex)
    if ranges is None:
        ranges = ex.nvtx_ranges()
        if not ranges:
            raise AnalysisInputError(ex.path, "export holds no closed NVTX ranges (nsys -t nvtx, and a program "
                                              "that pushes ranges)")
    h2d, d2h = _copy_ids(ex)
    return [range_record(r, trace.ops, idx, h2d, d2h) for r, idx in zip(ranges, cols.ops_in_ranges(trace, ranges))]


# --- copies -----------------------------------------------------------------------------------------

def copy_rows(ops: cols.Ops, idx: np.ndarray | slice, kinds: dict[int, str], mem: dict[int, str]) -> list[dict]:
    """Memcpys of ``ops[idx]`` grouped by (direction, source kind, destination kind), largest total
    time first; ``host_memory`` is the host side's kind (pageable, pinned, managed) or None for
    copies that do not touch the host."""
    sel = np.arange(len(ops))[idx]
    sel = sel[ops.kind[sel] == cols.MEMCPY]
    if not len(sel):
        return []
    key = (ops.copy_kind[sel] + 1) * (1 << 40) + (ops.src_kind[sel] + 1) * (1 << 20) + (ops.dst_kind[sel] + 1)
    uniq, counts, nbytes, first = cols.grouped(key, ops.bytes[sel])
    _, _, ns, _ = cols.grouped(key, ops.end[sel] - ops.start[sel])
    rows = []
    for k, n, b, t, f in zip(uniq, counts, nbytes, ns, first):
        i = sel[f]
        ck, sk, dk = int(ops.copy_kind[i]), int(ops.src_kind[i]), int(ops.dst_kind[i])
        src, dst = mem.get(sk), mem.get(dk)
        direction = kinds.get(ck, f"copyKind {ck}")
        host = None
        if direction.startswith("Host-to") or direction.startswith("Unified Host"):
            host = HOST_KINDS.get(src or "", (src or "unknown").lower())
        elif direction.endswith("to-Host"):
            host = HOST_KINDS.get(dst or "", (dst or "unknown").lower())
        in_group = sel[key == k]
        rates = ops.bytes[in_group] / np.maximum(ops.end[in_group] - ops.start[in_group], 1)
        rows.append({"direction": direction, "src_kind": src, "dst_kind": dst, "host_memory": host,
                     "count": int(n), "bytes": int(b), "total_ns": int(t),
                     "gb_per_s": int(b) / int(t) if t else None,
                     "max_copy_bytes": int(ops.bytes[in_group].max()),
                     "best_copy_gb_per_s": float(rates.max())})
    rows.sort(key=lambda r: -r["total_ns"])
    return rows


def copy_throughput(ex: Trace, ranges: Sequence[NvtxRange] | None = None) -> list[dict]:
    """Copy throughput per direction and host memory kind: of every memcpy, or of the copies
    launched inside ``ranges``. An export without memcpys gives an empty list (a program that copies
    nothing has nothing to report); an export that is not one raises."""
    trace = cols.launches(ex)
    kinds, mem = _labels(ex)
    if ranges is None:
        return copy_rows(trace.ops, slice(None), kinds, mem)
    per_range = cols.ops_in_ranges(trace, ranges)
    idx = np.concatenate(per_range) if per_range else np.zeros(0, np.int64)
    return copy_rows(trace.ops, idx, kinds, mem)


# --- API calls inside hot ranges --------------------------------------------------------------------

def _named_calls_in(ex: Trace, predicate: Callable[[str], bool], hot: Sequence[NvtxRange]) -> dict:
    calls, names = cols.calls_named(ex, predicate)
    dur = calls.end - calls.start
    per_range = cols.calls_in_ranges(calls, hot)
    inside = np.concatenate(per_range) if per_range else np.zeros(0, np.int64)
    family = np.array([cols.api_family(names.get(int(i), "")) for i in calls.name], dtype=object)
    by_api = []
    for fam in sorted(set(family.tolist())):
        mask = family == fam
        in_hot = mask[inside] if len(inside) else np.zeros(0, bool)
        by_api.append({"name": fam, "calls": int(mask.sum()), "total_ns": int(dur[mask].sum()),
                       "in_hot_ranges_calls": int(in_hot.sum()),
                       "in_hot_ranges_ns": int(dur[inside][in_hot].sum()) if len(inside) else 0})
    return {
        "calls": int(len(dur)), "total_ns": int(dur.sum()),
        "hot_ranges": len(hot),
        "in_hot_ranges_calls": int(len(inside)), "in_hot_ranges_ns": int(dur[inside].sum()) if len(inside) else 0,
        "per_hot_range_calls": [int(len(i)) for i in per_range],
        "per_hot_range_ns": [int(dur[i].sum()) for i in per_range],
        "by_api": by_api,
    }


def _hot(ex: Trace, hot: Sequence[NvtxRange] | None) -> list[NvtxRange]:
    if hot is not None:
        return sorted(hot, key=lambda r: r.start_ns)
    return [r for r in ex.nvtx_ranges() if is_hot_range(r)]


def allocations(ex: Trace, hot: Sequence[NvtxRange] | None = None) -> dict:
    """cudaMalloc/cudaFree-family calls (cudaMalloc, cuMemAlloc, cudaMallocAsync, cudaMallocHost,
    their frees, ...): counts and time in total and inside the hot ranges (by default the NVTX
    ranges named ``compute`` or ``.../compute``), and ``hot_range_pattern``:

    - ``"none"``: no allocation inside a hot range (a pool, or buffers allocated up front);
    - ``"first only"`` / ``"early ranges only"``: the first range(s) allocate, the later ones do not
      (a pool or a cache filling up, then reused);
    - ``"every range"`` / ``"some ranges"``: allocations in the steady loop (no pool).
    """
    hot = _hot(ex, hot)
    out = _named_calls_in(ex, cols.is_allocation_api, hot)
    per = out["per_hot_range_calls"]
    allocating = [n > 0 for n in per]
    if not any(allocating):
        pattern = "none"
    elif all(allocating):
        pattern = "every range" if len(per) > 1 else "first only"
    elif allocating == sorted(allocating, reverse=True):  # a run of allocating ranges, then none
        pattern = "first only" if allocating.count(True) == 1 else "early ranges only"
    else:
        pattern = "some ranges"
    out["hot_range_pattern"] = pattern
    pool = cols.calls_named(ex, cols.is_pool_api)[0]
    out["pool_api_calls"] = int(len(pool.start))
    return out


def synchronization(ex: Trace, hot: Sequence[NvtxRange] | None = None) -> dict:
    """Calls that wait for the GPU (cudaStreamSynchronize, cudaDeviceSynchronize, cuCtxSynchronize,
    cuStreamSynchronize, cudaEventSynchronize, ...): counts and time in total and inside the hot ranges."""
    return _named_calls_in(ex, cols.is_sync_api, _hot(ex, hot))
