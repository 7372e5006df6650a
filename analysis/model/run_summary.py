"""One run's captures -> one dict of numbers (what the report needs, nothing presented).

A run folder (:mod:`analysis.common.layout`) holds ``timing.json`` (timed mode), ``nsys.sqlite`` and
``nsys-run.json`` (the run under nsys) and, for sizes ncu profiled, ``ncu.ncu-rep``. Everything
here is a pure function of those files. The summary carries ``schema_version``
(:data:`SCHEMA_VERSION`); :func:`load_summary` refuses one it does not know.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import zlib
from typing import Iterable

import numpy as np

from analysis.model import breakdown, findings, limiter, no_counters
from analysis.readers import ncu as ncu_reader
from analysis.readers.nsys import columns as cols
from analysis.common import layout
from analysis.common.errors import AnalysisInputError, UnknownSchemaVersion
from analysis.common.gzfiles import existing_capture, open_capture_text, text_capture_exists
from analysis.readers.nsys.trace import NvtxRange, Trace, api_base_name
from workloads.registry import BY_NAME

SUITE_DOMAIN = "cookbook"
#: the run summary's schema: raise it when a key changes meaning or goes away; readers refuse others
SCHEMA_VERSION = 3
PHASES = ("setup", "warmup", "compute", "transfer", "check")


def load_json(path: str) -> dict:
    """A JSON record: ``path``, or the gzipped copy a reference keeps (``path.gz``)."""
    if not text_capture_exists(path):
        raise AnalysisInputError(path, "no such file (nor .gz)")
    try:
        with open_capture_text(path) as f:
            return json.load(f)
    except (OSError, EOFError, zlib.error) as e:
        raise AnalysisInputError(path, f"cannot read JSON: not readable ({e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise AnalysisInputError(path, f"cannot read JSON: not valid JSON ({e})") from None


def load_summary(path: str) -> dict:
    """A run summary written by :func:`summarize_run`, refused (UnknownSchemaVersion) when it was
    written with a schema this code does not know, and checked against SUMMARY_SCHEMA: a missing or
    mistyped field is an AnalysisInputError naming the file and the field."""
    record = load_json(path)
    version = record.get("schema_version") if isinstance(record, dict) else None
    if version != SCHEMA_VERSION:
        raise UnknownSchemaVersion(path, f"run summary schema_version {version!r}, this code reads "
                                         f"{SCHEMA_VERSION}: summarize the captures again")
    return check_json(path, record, SUMMARY_SCHEMA, "a run summary")


_NUMBER = {"type": "number"}
#: what ``report`` and ``index`` read from a run summary (summarize_run writes more)
SUMMARY_SCHEMA = {
    "type": "object",
    "required": ["workload", "variant", "size", "work", "timing", "times_ms", "provenance", "nsys", "ncu",
                 "nsys_capture_range"],
    "properties": {
        "workload": {"type": "string"},
        "variant": {"type": "string"},
        "size": {"type": "integer", "minimum": 1},
        "work": {"type": "object", "required": ["bytes_read", "bytes_written", "flops"],
                 "properties": {"bytes_read": _NUMBER, "bytes_written": _NUMBER, "flops": _NUMBER}},
        "timing": {"type": "object", "required": ["median_ms", "q1_ms", "q3_ms"], "additionalProperties": _NUMBER},
        "times_ms": {"type": "array", "minItems": 1, "items": _NUMBER},
        "provenance": {"type": "object"},
        "nsys": {"type": "object", "required": ["calls"], "properties": {"calls": {"type": "array"}}},
        "nsys_capture_range": {"type": "boolean"},
        "ncu": {"type": ["array", "null"], "items": {"type": "object"}},
        "findings": {"type": "array", "items": {"type": "object"}},
    },
}


#: the keywords an array's ``items`` may carry for :func:`_validator`'s one-pass check of a list of numbers
_NUMBER_ITEM_KEYWORDS = frozenset({"type", "minimum", "exclusiveMinimum"})


def _all_numbers_within(items: dict, instance) -> bool:
    """Whether every element of ``instance`` is a plain JSON number that the bounds in ``items`` admit."""
    if not (isinstance(instance, list) and all(type(x) is float or type(x) is int for x in instance)):
        return False
    lowest, above = items.get("minimum"), items.get("exclusiveMinimum")
    return (lowest is None or all(x >= lowest for x in instance)) and (above is None or all(x > above for x in instance))


@functools.lru_cache(maxsize=None)
def _validator():
    """Draft 2020-12 whose ``items`` checks a list of plain numbers (a run's times: thousands of them) in
    one pass: descending into each element costs about a hundred times more. A list that fails the pass,
    or any other ``items``, goes through jsonschema's own keyword, so every error is jsonschema's."""
    import jsonschema  # noqa: PLC0415 - snakemake's own dependency; only the report commands need it

    draft = jsonschema.Draft202012Validator
    items_keyword = draft.VALIDATORS["items"]

    def items(validator, item_schema, instance, schema):
        if (isinstance(item_schema, dict) and item_schema.get("type") == "number" and "prefixItems" not in schema
                and item_schema.keys() <= _NUMBER_ITEM_KEYWORDS and _all_numbers_within(item_schema, instance)):
            return
        yield from items_keyword(validator, item_schema, instance, schema)

    return jsonschema.validators.extend(draft, {"items": items})


def check_json(path: str, record, schema: dict, what: str):
    """``record`` (read from ``path``) if it matches the JSON schema, else an AnalysisInputError
    naming the file and the first wrong field."""
    import jsonschema  # noqa: PLC0415 - snakemake's own dependency; only the report commands need it

    error = jsonschema.exceptions.best_match(_validator()(schema).iter_errors(record))
    if error is not None:
        field = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise AnalysisInputError(path, f"not {what}: field {field}: {error.message}")
    return record


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


#: overview rows of the timeline merge intervals closer than (run span / this): a figure is
#: about a thousand pixels wide, so finer detail would not show and only bloat the summary
TIMELINE_BINS = 1500
#: the zoom on the last compute call keeps at most this many GPU operations (the figure needs a few)
TIMELINE_ZOOM_MAX_OPS = 300


def _merged(start: np.ndarray, end: np.ndarray, tol: int, t0: int) -> list[list[int]]:
    """Intervals relative to ``t0``, merged where less than ``tol`` apart (sorted)."""
    if len(start) == 0:
        return []
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1] + tol
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return [[int(a - t0), int(b - t0)] for a, b in zip(s[first], e[last])]


def _op_rows(ops: cols.Ops, idx: np.ndarray, h2d: int | None, d2h: int | None) -> dict[str, np.ndarray]:
    """GPU operations by timeline row, as Nsight Systems groups them."""
    kind, copy = ops.kind[idx], ops.copy_kind[idx]
    memcpy = kind == cols.MEMCPY
    return {
        "kernels": idx[kind == cols.KERNEL],
        "memcpy HtoD": idx[memcpy & (copy == h2d)],
        "memcpy DtoH": idx[memcpy & (copy == d2h)],
        "memcpy other": idx[memcpy & (copy != h2d) & (copy != d2h)],
        "memsets": idx[kind == cols.MEMSET],
    }


def _timeline(ops: cols.Ops, suite: list[NvtxRange], suite_ops: list[np.ndarray], compute: list[NvtxRange],
              compute_ops: list[np.ndarray], names: dict[int, str], h2d: int | None, d2h: int | None,
              api: list[list]) -> dict:
    """The few hundred numbers a timeline figure needs: the whole run at figure resolution
    (phases, and GPU operations merged per row) and the last compute call exactly."""
    launched = np.zeros(len(ops), bool)
    for idx in suite_ops:
        launched[idx] = True
    all_idx = np.flatnonzero(launched)
    t0 = min(r.start_ns for r in suite)
    t1 = max(max(r.end_ns for r in suite), int(ops.end[all_idx].max()) if len(all_idx) else 0)
    tol = max((t1 - t0) // TIMELINE_BINS, 1)
    phases: dict[str, list[NvtxRange]] = {}
    for r in suite:
        phases.setdefault(r.name.rsplit("/", 1)[-1], []).append(r)
    overview = {
        "resolution_ns": int(tol),
        "nvtx": {ph: _merged(np.array([r.start_ns for r in rs]), np.array([r.end_ns for r in rs]), tol, t0)
                 for ph, rs in phases.items()},
        "gpu": {row: _merged(ops.start[i], ops.end[i], tol, t0) for row, i in _op_rows(ops, all_idx, h2d, d2h).items()},
    }
    last, last_idx = compute[-1], compute_ops[-1]
    kept = last_idx[:TIMELINE_ZOOM_MAX_OPS]
    z0 = last.start_ns
    z1 = max(last.end_ns, int(ops.end[last_idx].max()) if len(last_idx) else 0)

    def label(i: int) -> str:
        return names.get(int(ops.name[i]), "kernel") if ops.kind[i] == cols.KERNEL else \
            f"{int(ops.bytes[i]) / 1e6:.0f} MB" if ops.kind[i] == cols.MEMCPY else "memset"

    zoom = {
        "call": last.payload,
        "start_ns": int(z0 - t0), "end_ns": int(z1 - t0),
        "nvtx": [[int(last.start_ns - t0), int(last.end_ns - t0), f"compute {last.payload}"]],
        "gpu": {row: [[int(ops.start[i] - t0), int(ops.end[i] - t0), label(i)] for i in idx.tolist()]
                for row, idx in _op_rows(ops, kept, h2d, d2h).items()},
        "dropped_ops": int(len(last_idx) - len(kept)),
        # the CUDA API calls the call made on its thread: [start, end, name]
        "api": [[a - t0, b - t0, name] for a, b, name in api[:TIMELINE_ZOOM_MAX_OPS]],
        "dropped_api_calls": max(len(api) - TIMELINE_ZOOM_MAX_OPS, 0),
    }
    return {"t0_ns": int(t0), "end_ns": int(t1 - t0), "overview": overview, "zoom": zoom}


def _api_in(ex: Trace, trace: cols.Launches, rng: NvtxRange) -> list[list]:
    """[start, end, name] of the API calls made on the range's thread inside it (ns, absolute)."""
    _, api_names = cols.calls_named(ex, lambda name: False)  # reads the API names once
    idx = cols.calls_in_ranges(trace.calls, [rng])[0]
    c = trace.calls
    return [[int(c.start[i]), int(c.end[i]), api_base_name(api_names[int(c.name[i])])] for i in idx.tolist()]


def _call_record_columns(rng: NvtxRange, ops: cols.Ops, idx: np.ndarray, t: dict, names: dict[int, str],
                         alloc_ns: np.ndarray, sync_ns: np.ndarray) -> dict:
    """One compute call; ``t``: the GPU time of its operations (``breakdown.ops_time``)."""
    kernels = idx[ops.kind[idx] == cols.KERNEL]
    return {
        "index": rng.payload,
        "wall_ns": rng.duration_ns,
        "gpu_kernel_ns": t["kernel_ns"],
        "gpu_memcpy_ns": t["memcpy_ns"],
        "gpu_memcpy_h2d_ns": t["memcpy_h2d_ns"],
        "gpu_memcpy_d2h_ns": t["memcpy_d2h_ns"],
        "gpu_memset_ns": t["memset_ns"],
        "gpu_busy_ns": t["busy_ns"],
        "gpu_idle_ns": max(rng.duration_ns - t["busy_ns"], 0),
        "kernels": int(len(kernels)),
        "kernel_names": [names[i] for i in ops.name[kernels].tolist()],
        "allocation_calls": int(len(alloc_ns)),
        "allocation_ns": int(alloc_ns.sum()),
        # GPU operations of the call: from the first one's start to the last one's end, and the
        # time inside that span when the GPU ran none of them (gaps between launches)
        "gpu_ops": int(len(idx)),
        "gpu_span_ns": t["span_ns"],
        "gpu_gap_ns": t["idle_in_span_ns"],
        "gpu_gap_max_ns": t["max_gap_ns"],
        "sync_calls": int(len(sync_ns)),
        "sync_ns": int(sync_ns.sum()),
    }


def _kernel_rows(ops: cols.Ops, idx: np.ndarray, names: dict[int, str]) -> list[dict]:
    k = idx[ops.kind[idx] == cols.KERNEL]
    ids, counts, totals, _ = cols.grouped(ops.name[k], ops.end[k] - ops.start[k])
    rows = [{"name": names[int(i)], "count": int(n), "total_ns": int(t), "avg_ns": int(t) / int(n)}
            for i, n, t in zip(ids, counts, totals)]
    return sorted(rows, key=lambda r: -r["total_ns"])


def _launch_shapes(ops: cols.Ops, idx: np.ndarray, names: dict[int, str]) -> list[dict]:
    """Distinct (kernel, grid blocks, block threads) launched, with counts, in first-launch order."""
    k = idx[ops.kind[idx] == cols.KERNEL]
    if not len(k):
        return []
    name, grid, block = ops.name[k], ops.grid_blocks[k], ops.block_threads[k]
    order = np.lexsort((np.arange(len(k)), block, grid, name))
    change = np.append(True, (np.diff(name[order]) != 0) | (np.diff(grid[order]) != 0) | (np.diff(block[order]) != 0))
    cut = np.flatnonzero(change)
    counts = np.diff(np.append(cut, len(k)))
    first = order[cut]
    rows = sorted(zip(first.tolist(), counts.tolist()))
    return [{"name": names[int(name[f])], "grid_blocks": int(grid[f]), "block_threads": int(block[f]), "launches": c}
            for f, c in rows]


def summarize_nsys(ex: Trace, workload: str, variant: str) -> dict:
    """The numbers of one run's nsys capture that the report needs (``workload/variant``'s own ranges)."""
    ranges = ex.nvtx_ranges()
    mine: dict[str, list[NvtxRange]] = {}
    for r in ranges:
        if r.domain != SUITE_DOMAIN:
            continue
        parts = r.name.split("/")
        if len(parts) == 3 and parts[0] == workload and parts[1] == variant and parts[2] in PHASES:
            mine.setdefault(parts[2], []).append(r)
    if not mine.get("compute"):
        raise AnalysisInputError(
            ex.path, f"no NVTX range {SUITE_DOMAIN}:{workload}/{variant}/compute: NVTX tracing was off "
                         "(nsys -t nvtx) or the capture is of another workload")
    trace = cols.launches(ex)
    ops = trace.ops
    gpus = ex.gpu_info()
    kinds, mem = ex.enum_labels("ENUM_CUDA_MEMCPY_OPER"), ex.enum_labels("ENUM_CUDA_MEM_KIND")
    by_label = {v: k for k, v in kinds.items()}
    h2d, d2h = by_label.get("Host-to-Device"), by_label.get("Device-to-Host")
    compute = sorted(mine["compute"], key=lambda r: r.start_ns)
    suite = sorted((r for rs in mine.values() for r in rs), key=lambda r: r.start_ns)
    suite_ops = cols.ops_in_ranges(trace, suite)
    ops_of = {id(r): i for r, i in zip(suite, suite_ops)}
    compute_ops = [ops_of[id(r)] for r in compute]
    compute_idx = np.concatenate(compute_ops)
    allocs, _ = cols.calls_named(ex, cols.is_allocation_api)
    syncs, _ = cols.calls_named(ex, cols.is_sync_api)
    alloc_in = cols.calls_in_ranges(allocs, compute)
    sync_in = cols.calls_in_ranges(syncs, compute)
    kernel_ids = ops.name[compute_idx][ops.kind[compute_idx] == cols.KERNEL]
    zoom_ids = ops.name[compute_ops[-1]][ops.kind[compute_ops[-1]] == cols.KERNEL]
    names = cols.string_ids(ex, np.unique(np.concatenate([kernel_ids, zoom_ids])))
    range_records = [breakdown.range_record(r, ops, i, h2d, d2h) for r, i in zip(suite, suite_ops)]
    time_of = {id(r): rec for r, rec in zip(suite, range_records)}
    calls = [_call_record_columns(r, ops, i, time_of[id(r)], names, (allocs.end - allocs.start)[a],
                                  (syncs.end - syncs.start)[s])
             for r, i, a, s in zip(compute, compute_ops, alloc_in, sync_in)]
    transfer = [ops_of[id(r)] for r in mine.get("transfer", [])]
    transfer_idx = np.concatenate(transfer) if transfer else np.zeros(0, np.int64)
    alloc_dur = allocs.end - allocs.start
    old_keys = ("direction", "src_kind", "dst_kind", "count", "bytes", "total_ns", "gb_per_s")
    whole_copies = breakdown.copy_rows(ops, slice(None), kinds, mem)
    record = {
        "gpu": gpus[0].__dict__ if gpus else None,
        "phases_wall_ns": {ph: sum(r.duration_ns for r in rs) for ph, rs in mine.items()},
        "calls": calls,
        "compute_kernels": _kernel_rows(ops, compute_idx, names),
        "memcpy_by_direction": [{k: row[k] for k in old_keys} for row in whole_copies],
        "transfer_memcpy": [{k: row[k] for k in old_keys}
                            for row in breakdown.copy_rows(ops, transfer_idx, kinds, mem)],
        "allocation_calls_total": int(len(alloc_dur)),
        "allocation_ns_total": int(alloc_dur.sum()),
        # what nsys stats does not give (analysis.model.breakdown)
        "gpu_time": breakdown.ops_time(ops, slice(None), h2d, d2h) if len(ops) else None,
        "ranges_gpu_time": range_records,
        "copy_throughput": whole_copies,
        "compute_copy_throughput": breakdown.copy_rows(ops, compute_idx, kinds, mem),
        # the same per NVTX phase (setup, warmup, compute, transfer, check): a report keeps the
        # check's read-backs apart from the copies a call makes
        "phase_copy_throughput": {
            ph: breakdown.copy_rows(ops, np.concatenate([ops_of[id(r)] for r in rs]), kinds, mem)
            for ph, rs in mine.items()},
        "capture": ex.capture_metadata(),
        "allocations": breakdown.allocations(ex, compute),
        "synchronization": breakdown.synchronization(ex, compute),
        "compute_launch_shapes": _launch_shapes(ops, compute_idx, names),
        "timeline": _timeline(ops, suite, suite_ops, compute, compute_ops, names, h2d, d2h,
                              _api_in(ex, trace, compute[-1])),
    }
    return record


def summarize_ncu(path: str) -> list[dict]:
    """One record per profiled launch of an ncu report, or of ncu's raw page saved as CSV
    (``ncu-raw.csv``: the same metrics, no rule results) where the report itself was not kept."""
    read = ncu_reader.read_raw_csv if path.endswith((".csv", ".csv.gz")) else ncu_reader.read_launches
    out = []
    for launch in read(path):
        m = launch.metrics
        dur = m.get("gpu__time_duration.sum")
        dram = None
        if m.get("dram__bytes_read.sum") is not None and m.get("dram__bytes_write.sum") is not None:
            dram = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        flops = ncu_reader.counted_flops(m)
        out.append({
            "id": launch.id,
            "kernel_name": launch.kernel_name,
            "metrics": m,
            "dram_bytes": dram,
            "dram_gb_per_s": dram / dur if dram and dur else None,
            # executed FP64 / FP32 operations, as ncu's roofline counts them (None: not in the report)
            "flops_fp64": flops["fp64"] if flops else None,
            "flops_fp32": flops["fp32"] if flops else None,
            "findings": [f.__dict__ for f in launch.findings],
            # the full set, the full set less some sections, or the analysis' metrics only (no rules)
            "collection": launch.collection,
            # the full set's sections a recipe's own list left out (analysis.readers.ncu.Launch.sections_left_out)
            "sections_left_out": list(launch.sections_left_out),
            # a metrics-only launch's metrics its recipe did not ask for (analysis.readers.ncu.Launch.metrics_left_out)
            "metrics_left_out": list(launch.metrics_left_out),
            # what limits the launch, measured (analysis.model.limiter); None without speed-of-light metrics
            "limiter": dataclasses.asdict(lim) if (lim := limiter.classify_launch(m)) else None,
        })
    return out


def _median(values) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def captured_in_range(nsys_run: dict, workload: str) -> bool:
    """Whether the nsys run's calls ran inside a capture range, so that its trace holds only them
    (nsys-run.json ``capture_range``). Records older than that key come from runs that always used
    the range for a recipe declaring one (Recipe.capture_range)."""
    if "capture_range" in nsys_run:
        return bool(nsys_run["capture_range"])
    return BY_NAME[workload].capture_range


def summarize_run(run_dir: str) -> dict:
    timing = load_json(os.path.join(run_dir, layout.TIMING))
    for key in ("workload", "variant", "size", "timing", "times_ms", "work", "provenance"):
        if key not in timing:
            raise AnalysisInputError(os.path.join(run_dir, layout.TIMING), f"missing key {key!r}")
    nsys_run = load_json(os.path.join(run_dir, layout.NSYS_RUN))
    w, v = timing["workload"], timing["variant"]
    work = timing["work"]
    median_ms = timing["timing"]["median_ms"]
    record = {
        "schema_version": SCHEMA_VERSION,
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
        # what a host timer around the call saw, without and with a synchronize (as the PyCUDA article times)
        "host_call_ms": _median(timing.get("host_call_ms")),
        "host_synced_ms": _median(timing.get("host_synced_ms")),
        "provenance": timing["provenance"],
        # adaptive sampling and GPU telemetry (absent in captures older than them)
        "warmup_calls": timing.get("warmup_calls"),
        "sampling": timing.get("sampling"),
        "l2_mode": timing.get("l2_mode"),
        "telemetry": {k: v for k, v in (timing.get("telemetry") or {}).items() if k != "per_sample"} or None,
        # how busy the run's own CPU cores and the others were while it was timed (workloads/harness/hostload.py)
        "host_load": timing.get("host_load"),
        "nsys_provenance": nsys_run.get("provenance"),
        # the trace holds only the calls (a capture range), or the whole process
        "nsys_capture_range": captured_in_range(nsys_run, w),
        "nsys": None,
        "ncu": None,
    }
    with Trace(existing_capture(run_dir, layout.NSYS_EXPORT) or os.path.join(run_dir, layout.NSYS_EXPORT)) as ex:
        record["nsys"] = summarize_nsys(ex, w, v)
        # launch resources CUPTI records without counters, and the occupancy they imply (analysis.model.no_counters)
        record["counter_free"] = no_counters.kernel_evidence(ex.kernel_launch_resources(), record["nsys"])
    ncu_path = existing_capture(run_dir, layout.NCU_REPORT)
    raw_path = existing_capture(run_dir, layout.NCU_RAW)
    record["ncu_source"] = None
    if ncu_path:
        record["ncu"] = summarize_ncu(ncu_path)
        record["ncu_source"] = layout.NCU_REPORT
    elif raw_path:  # the report was not kept (size), its raw page was
        record["ncu"] = summarize_ncu(raw_path)
        record["ncu_source"] = layout.NCU_RAW
    record["findings"] = [f.as_dict() for f in findings.evaluate(record["nsys"], record["ncu"], record.get("timing"))]
    return record
