"""Report section: Warp's ``ScopedTimer`` activity times beside Nsight Systems' kernel records.

Input: ``experiments/scoped_timer/`` of the recipe's capture folder, written by
``workloads/warp_sph/exp_scoped_timer.py`` in one process under nsys: ``scoped_timer.json``
(Warp's per-activity event times per frame) and ``nsys.sqlite`` (CUPTI's records of the same
launches). Frames are NVTX ranges ``<variant>/<mode>`` (payload = frame index) in the domain
``cookbook.warp_sph``.

Pairing, per frame: the GPU operations launched by API calls inside the frame's range, in launch
order, each named by an activity key (``compute_density``, ``memset``, ``memcpy DtoD``, ``graph``
for all operations of one graph launch, ...); Warp's activities, in issue order, are matched to
the next operation with the same key. Operations Warp never timed (cub's radix-sort kernels inside
``HashGrid.build``, their memsets) stay unmatched and are listed apart.

Parsing (files -> numbers) is :func:`read_experiment` and :func:`compare`; :func:`render_markdown`
only formats.
"""
from __future__ import annotations

import dataclasses
import os
import re
import statistics
from collections import defaultdict

from analysis.common.errors import AnalysisInputError
from analysis.report.markdown import table
from analysis.readers.nsys.trace import ApiCall, GpuOp, Interval, Trace, NvtxRange
from analysis.common import layout
from analysis.readers.nsys import columns as cols
from analysis.model.run_summary import load_json, union_ns

EXPERIMENT = "scoped_timer"

#: what render() reads, relative to the recipe's capture folder: the report rule's inputs
INPUTS: tuple[str, ...] = (f"experiments/{EXPERIMENT}",)
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ()
NVTX_DOMAIN = "cookbook.warp_sph"
MODES = ("all", "sync", "host")

_WARP_KERNEL = re.compile(r"^(?P<base>.+)_[0-9a-f]{8}$")
_COPY_KINDS = {"Host-to-Device": "memcpy HtoD", "Device-to-Host": "memcpy DtoH",
               "Device-to-Device": "memcpy DtoD", "Peer-to-Peer": "memcpy PtoP"}


def _identifier(text: str) -> str:
    """The function's own name in a (possibly demangled, templated) C++ signature."""
    head = text.strip().strip("()")
    head = re.sub(r"^void\s+", "", head)
    depth, cut = 0, len(head)
    for k, ch in enumerate(head):  # the name ends where its template or argument list begins
        if ch in "<(" and depth == 0:
            cut = k
            break
    name = head[:cut].strip()
    return name.rsplit("::", 1)[-1] or text


def activity_key(name: str, kind: str) -> str:
    """A Warp activity's name -> the key it is paired on (the kernel's base name, ``memset``, ...)."""
    if kind == "kernel":
        stem = name.removeprefix("forward kernel ").removeprefix("backward kernel ")
        m = _WARP_KERNEL.match(stem)
        return m["base"] if m else stem
    if kind == "builtin":
        return _identifier(name.removeprefix("builtin kernel "))
    return name  # "memset", "memcpy DtoD", "graph"


def op_key(op: GpuOp) -> str:
    if op.kind == "kernel":
        stem = op.name.removesuffix("_cuda_kernel_forward")
        if stem != op.name:
            m = _WARP_KERNEL.match(stem)
            return m["base"] if m else stem
        return _identifier(op.name)
    if op.kind == "memset":
        return "memset"
    return _COPY_KINDS.get(op.copy_kind or "", f"memcpy {op.copy_kind}")


@dataclasses.dataclass(frozen=True)
class Item(Interval):
    """One GPU operation as nsys recorded it, or one graph launch (``inner``: its operations)."""

    key: str
    start_ns: int
    end_ns: int
    inner: tuple[GpuOp, ...] = ()


def frame_items(calls: list[ApiCall], ops: list[GpuOp]) -> list[Item]:
    """The frame's operations in launch order; a graph launch's operations form one ``graph`` item."""
    by_corr: dict[int, list[GpuOp]] = defaultdict(list)
    for op in ops:
        by_corr[op.correlation_id].append(op)
    items = []
    for c in calls:
        launched = sorted(by_corr.get(c.correlation_id, ()), key=lambda o: o.start_ns)
        if not launched:
            continue
        if "GraphLaunch" in c.name:
            items.append(Item("graph", min(o.start_ns for o in launched), max(o.end_ns for o in launched),
                              tuple(launched)))
        else:
            items.extend(Item(op_key(o), o.start_ns, o.end_ns) for o in launched)
    return items


def match(activities: list[dict], items: list[Item]) -> tuple[list[tuple[dict, Item]], list[Item], list[dict]]:
    """Warp's activities (issue order) paired with nsys items (launch order) by key, in order.
    Returns the pairs, the items no activity took, and the activities no item matched."""
    pairs, unmatched_items, missing = [], [], []
    k = 0
    for a in activities:
        key = activity_key(a["name"], a["kind"])
        j = k
        while j < len(items) and items[j].key != key:
            j += 1
        if j == len(items):
            missing.append(a)
            continue
        unmatched_items.extend(items[k:j])
        pairs.append((a, items[j]))
        k = j + 1
    unmatched_items.extend(items[k:])
    return pairs, unmatched_items, missing


def read_experiment(folder: str) -> tuple[dict, str]:
    """The experiment's JSON record and the path of its nsys export (plain or gzipped)."""
    path = os.path.join(folder, "scoped_timer.json")
    if not os.path.isfile(path):
        raise AnalysisInputError(path, "no such file (run: python -m workloads.warp_sph.exp_scoped_timer)")
    record = load_json(path)
    if not isinstance(record.get("runs"), list) or not record["runs"]:
        raise AnalysisInputError(path, "no runs recorded")
    for run in record["runs"]:
        for key in ("variant", "mode", "frames"):
            if key not in run:
                raise AnalysisInputError(path, f"a run lacks {key!r}")
        for fr in run["frames"]:
            if "index" not in fr or "elapsed_ms" not in fr:
                raise AnalysisInputError(path, f"a frame of {run['variant']}/{run['mode']} lacks index or elapsed_ms")
    return record, layout.nsys_export(folder)


def _frame_ranges(ex: Trace, domain: str) -> dict[tuple[str, int], NvtxRange]:
    out = {}
    for r in ex.nvtx_ranges():
        if r.domain == domain and r.payload is not None:
            out[(r.name, int(r.payload))] = r
    return out


def compare(record: dict, ex: Trace) -> dict:
    """Per variant and mode: per-activity pairs (Warp event time, nsys time) and per-frame times."""
    domain = record.get("nvtx_domain", NVTX_DOMAIN)
    ranges = _frame_ranges(ex, domain)
    if not ranges:
        raise AnalysisInputError(ex.path, f"no NVTX ranges of the domain {domain!r}: not this experiment's capture")
    out: dict = {"runs": []}
    for run in record["runs"]:
        variant, mode = run["variant"], run["mode"]
        per_key: dict[str, dict[str, list[float]]] = defaultdict(lambda: {"timer_us": [], "nsys_us": []})
        unmatched: dict[str, list[float]] = defaultdict(list)
        missing: dict[str, int] = defaultdict(int)
        nodes: dict[str, list[float]] = defaultdict(list)
        frames = []
        for fr in run["frames"]:
            rng = ranges.get((f"{variant}/{mode}", int(fr["index"])))
            if rng is None:
                raise AnalysisInputError(ex.path, f"no NVTX range {variant}/{mode} payload {fr['index']}")
            [(in_calls, ops)] = cols.launched_in(ex, [rng])
            items = frame_items(in_calls, ops)
            pairs, extra, lost = match(fr.get("activities", []), items)
            for a, it in pairs:
                k = activity_key(a["name"], a["kind"])
                per_key[k]["timer_us"].append(a["elapsed_ms"] * 1e3)
                per_key[k]["nsys_us"].append(it.duration_ns / 1e3)
            for it in extra:
                unmatched[it.key].append(it.duration_ns / 1e3)
            for a in lost:
                missing[activity_key(a["name"], a["kind"])] += 1
            for it in items:
                for op in it.inner:
                    nodes[op_key(op)].append(op.duration_ns / 1e3)
            intervals = [(o.start_ns, o.end_ns) for o in ops]
            frames.append({
                "timer_ms": fr["elapsed_ms"],
                "range_ms": rng.duration_ns / 1e6,
                "gpu_busy_ms": union_ns(intervals) / 1e6,
                "gpu_span_ms": (max(e for _, e in intervals) - min(s for s, _ in intervals)) / 1e6 if intervals else 0.0,
                "gpu_ops": len(ops),
            })
        out["runs"].append({"variant": variant, "mode": mode, "frame_mode": run.get("frame_mode"),
                            "frames": frames, "pairs": dict(per_key), "unmatched_us": dict(unmatched),
                            "timer_only": dict(missing), "graph_nodes_us": dict(nodes)})
    return out


# --- markdown -----------------------------------------------------------------------------------


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


#: rows of the "inside the graph launches" table; the rest are summed in one row
GRAPH_NODE_ROWS = 3
#: rows of each "activities Warp timed" table (longest first); the rest are named in one row
PAIR_ROWS = 2


def _pair_rows(run: dict, frames: int) -> list[list[str]]:
    rows = []
    ordered = sorted(run["pairs"].items(), key=lambda kv: -sum(kv[1]["nsys_us"]))
    for key, d in ordered[:PAIR_ROWS]:
        t, n = _mean(d["timer_us"]), _mean(d["nsys_us"])
        diff = t - n
        rows.append([f"`{key}`", f"{len(d['timer_us']) / frames:g}", f"{t:.2f}", f"{n:.2f}", f"{diff:+.2f}",
                     f"{100 * diff / n:+.1f}%" if n > 0 else "n/a"])
    rest = ordered[PAIR_ROWS:]
    if rest:  # the report's length budget: the rest named in one row, their differences in the text below
        rows.append([f"{len(rest)} more: " + ", ".join(f"`{k}`" for k, _ in rest), "", "", "", "", ""])
    return rows


def render_markdown(record: dict, cmp: dict) -> str:
    frames = int(record.get("frames", 1))
    size = record.get("size")
    lines = [
        "## Warp's ScopedTimer against Nsight Systems",
        "",
        f"One process ran {frames} frames per variant and mode at {size} particles under "
        f"`nsys profile {' '.join(record.get('nsys', {}).get('flags', []))}`; each frame was one "
        "`wp.ScopedTimer` and one NVTX range. Mode `all`: `synchronize=True, cuda_filter=wp.TIMING_ALL` "
        "(Warp records a CUDA event pair around every launch, memset and memcpy it issues); `sync`: "
        "`synchronize=True` only; `host`: `synchronize=False`. Times are means per occurrence; "
        "\"per frame\" counts how often the activity ran in one frame.",
        "",
    ]
    all_runs = [r for r in cmp["runs"] if r["mode"] == "all"]
    diffs_us = []
    for run in all_runs:
        rows = _pair_rows(run, frames)
        lines += [f"**{run['variant']}** (frame issued as: {run['frame_mode']}), activities Warp timed:", ""]
        lines.append(table(["activity", "per frame", "ScopedTimer µs", "nsys µs", "difference µs",
                            "difference"], rows))
        lines.append("")
        for d in run["pairs"].values():
            diffs_us += [t - n for t, n in zip(d["timer_us"], d["nsys_us"])]
        if run["unmatched_us"]:
            extra = [[f"`{k}`", f"{len(v) / frames:g}", f"{_mean(v):.2f}", f"{sum(v) / frames:.1f}"]
                     for k, v in sorted(run["unmatched_us"].items(), key=lambda kv: -sum(kv[1]))]
            lines += ["Operations in the same frames that Warp's timer did not list (nsys only):", "",
                      table(["operation", "per frame", "nsys µs each", "nsys µs per frame"], extra), ""]
        if run["graph_nodes_us"]:
            ordered = sorted(run["graph_nodes_us"].items(), key=lambda kv: -sum(kv[1]))
            inner = [[f"`{k}`", f"{len(v) / frames:g}", f"{_mean(v):.2f}", f"{sum(v) / frames:.1f}"]
                     for k, v in ordered[:GRAPH_NODE_ROWS]]
            rest = ordered[GRAPH_NODE_ROWS:]
            if rest:  # the report's length budget: the longest rows, the rest summed in one
                inner.append([f"{len(rest)} more: " + ", ".join(f"`{k}`" for k, _ in rest),
                              f"{sum(len(v) for _, v in rest) / frames:g}", "",
                              f"{sum(sum(v) for _, v in rest) / frames:.1f}"])
            lines += ["Inside the graph launches (nsys only: Warp times the launch as one activity):", "",
                      table(["kernel or operation", "per frame", "nsys µs each", "nsys µs per frame"], inner), ""]
        if run["timer_only"]:
            lines += ["Activities Warp listed that nsys has no record for: "
                      + ", ".join(f"`{k}` ({v})" for k, v in sorted(run["timer_only"].items())), ""]
    frame_rows = []
    for run in cmp["runs"]:
        fr = run["frames"]
        frame_rows.append([run["variant"], run["mode"], f"{_mean([f['timer_ms'] for f in fr]):.3f}",
                           f"{_mean([f['range_ms'] for f in fr]):.3f}",
                           f"{_mean([f['gpu_busy_ms'] for f in fr]):.3f}",
                           f"{_mean([f['gpu_span_ms'] for f in fr]):.3f}"])
    lines += ["Whole frames (means over frames):", "",
              table(["variant", "mode", "ScopedTimer ms", "NVTX range ms (nsys)", "GPU busy ms (nsys)",
                     "GPU first start to last end ms (nsys)"], frame_rows), ""]
    lines.append(_why(cmp, diffs_us))
    return "\n".join(lines) + "\n"


def _why(cmp: dict, diffs_us: list[float]) -> str:
    """The paragraph on why the numbers differ, with this capture's numbers in it."""
    parts = ["Why they differ. Warp times an activity between two CUDA events recorded on the stream just "
             "before and after the launch, so it includes the GPU's work between each event and the kernel, and "
             "CUDA events resolve about 0.5 µs (the Warp guide's caveat); nsys takes the kernel's start and end "
             "from CUPTI."]
    if diffs_us:
        med = statistics.median(diffs_us)
        rel = "longer" if med >= 0 else "shorter"
        parts.append(f"Over {len(diffs_us)} paired activities, Warp's time is {rel} than nsys' by a median "
                     f"{abs(med):.2f} µs: much of a few-µs kernel or memset, little of a long neighbour pass.")
    unseen = sorted({k for run in cmp["runs"] if run["mode"] == "all" for k in run["unmatched_us"]})
    if unseen:
        parts.append("Warp times only what it launches itself: " + ", ".join(f"`{k}`" for k in unseen)
                     + " ran in the same frames (from Warp's native code: cub's radix sort in `HashGrid.build`) "
                     "and appear only in nsys.")
    if any(run["graph_nodes_us"] for run in cmp["runs"]):
        parts.append("A graph launch is one Warp activity (`graph`); its kernels appear only in nsys, with "
                     "`--cuda-graph-trace=node`.")
    by = {(r["variant"], r["mode"]): _mean([f["timer_ms"] for f in r["frames"]]) for r in cmp["runs"]}
    for variant in dict.fromkeys(r["variant"] for r in cmp["runs"]):
        a, s, h = by.get((variant, "all")), by.get((variant, "sync")), by.get((variant, "host"))
        if a is not None and s is not None and h is not None:
            parts.append(f"{variant}: {a:.3f} ms a frame with activity timing, {s:.3f} ms without "
                         f"({a - s:+.3f} ms: the events and their bookkeeping); unsynchronized, {h:.3f} ms, the "
                         "host's time to issue the frame, not the GPU's.")
    return " ".join(parts)


def render(workload_root: str, figure_dir: str) -> str:
    folder = os.path.join(workload_root, "experiments", EXPERIMENT)
    record, sqlite = read_experiment(folder)
    with Trace(sqlite) as ex:
        return render_markdown(record, compare(record, ex))
