"""Per-process view of an nsys SQLite export: who annotated what, on which thread, and which GPU
work each process launched. Pure functions of an :class:`~analysis.readers.nsys.Trace`.

nsys numbers threads and processes with "global" ids: ``globalTid`` holds the pid in bits 24-47
and the tid in bits 0-23 (``globalPid`` is the same with tid 0), so every event, whichever table
it is in, can be given to its process. A GPU operation belongs to the process whose CUDA runtime
call has its correlation id; correlation ids are only unique inside one process, so they are
matched per process.

Made for ``python -m workloads.nvtx_multiprocess`` (N processes), and equally valid for the
suite's single-process captures.
"""
from __future__ import annotations

import dataclasses
import functools
import heapq
import os
import zlib
from typing import Sequence

import numpy as np

from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys import columns
from analysis.common.outputs import save_figure_atomic
from analysis.report import mdtext
from analysis.readers.nsys.trace import NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, GpuOp, Interval, Trace
from workloads.annotate import (DOMAIN, MARK_COLOR, PHASE_COLORS, THIRDPARTY_COLOR, THIRDPARTY_DOMAIN,
                                parse_range_name)
from analysis.report.page_text import describe_commit, packages_text

_ID_BITS = 24
_ID_MASK = (1 << _ID_BITS) - 1

#: a timeline of many GPU operations merges gaps shorter than its span / this (a figure is about a
#: thousand pixels wide, so finer detail would not show)
TIMELINE_BINS = 2000

#: GPU work colours, as Nsight Systems draws them (kernels blue, copies red)
GPU_KIND_COLORS = {"kernel": "#4c72b0", "memcpy": "#c44e52", "memset": "#dd8452"}


def pid_of(global_id: int) -> int:
    """The OS process id inside an nsys ``globalTid`` or ``globalPid``."""
    return (global_id >> _ID_BITS) & _ID_MASK


def tid_of(global_tid: int) -> int:
    """The OS thread id inside an nsys ``globalTid`` (equals the pid for the main thread)."""
    return global_tid & _ID_MASK


@dataclasses.dataclass(frozen=True)
class ThreadInfo:
    tid: int
    #: every name nsys recorded for the thread, oldest first (a renamed thread has several)
    names: tuple[str, ...]
    is_main: bool

    @property
    def name(self) -> str | None:
        return self.names[-1] if self.names else None


@dataclasses.dataclass(frozen=True)
class Range(Interval):
    name: str
    domain: str | None
    start_ns: int
    end_ns: int
    tid: int
    payload: int | float | None
    #: GPU operations whose CUDA call was made on this range's thread while it was open
    gpu_ops_launched: int = 0


@dataclasses.dataclass(frozen=True)
class Mark:
    name: str
    domain: str | None
    time_ns: int
    tid: int
    payload: int | float | None


@dataclasses.dataclass(frozen=True)
class LaunchedOp(GpuOp):
    """A kernel, memcpy or memset as the GPU ran it, with the CUDA runtime call that launched it (when
    there is one)."""

    launch_tid: int | None = None
    launch_start_ns: int | None = None
    api: str | None = None


def _launched_ops(ops: columns.ProcessOps) -> tuple[LaunchedOp, ...]:
    """The operations of ``ops`` as records (a few thousand in a suite capture; a view of millions
    of launches uses the columns)."""
    none = lambda v: None if v < 0 else v  # noqa: E731 (-1 stands for a NULL or no launching call)
    ops = ops.take(np.lexsort((ops.corr, ops.end, ops.start)))  # by start, end, correlation id
    return tuple(
        LaunchedOp(kind=columns.KINDS[kind], name=ops.names[name], start_ns=start, end_ns=end,
                   correlation_id=none(corr), stream_id=none(stream), bytes=none(nbytes), launch_tid=none(tid),
                   launch_start_ns=none(launch), api=ops.names[api] if api >= 0 else None)
        for kind, name, start, end, corr, stream, nbytes, tid, launch, api in zip(
            ops.kind.tolist(), ops.name.tolist(), ops.start.tolist(), ops.end.tolist(), ops.corr.tolist(),
            ops.stream.tolist(), ops.bytes.tolist(), ops.launch_tid.tolist(), ops.launch_start.tolist(),
            ops.api.tolist()))


@dataclasses.dataclass(frozen=True, eq=False)
class ProcessActivity:
    pid: int
    #: the executable as nsys' PROCESSES table names it (None when the table lacks the pid)
    executable: str | None
    threads: tuple[ThreadInfo, ...]
    suite_ranges: tuple[Range, ...]       # domain "cookbook"
    thirdparty_ranges: tuple[Range, ...]  # domain "cookbook.thirdparty"
    other_ranges: tuple[Range, ...]       # any other domain (libraries' own NVTX, nsys' Python tracing)
    marks: tuple[Mark, ...]
    #: GPU work matched to this process's CUDA runtime calls, as columns (by start, end, correlation id)
    launched: columns.ProcessOps
    #: GPU work of this process (by globalPid) with no runtime call of that correlation id
    unattributed: columns.ProcessOps
    cuda_api_calls: int

    @property
    def gpu_ops(self) -> tuple[LaunchedOp, ...]:
        return _launched_ops(self.launched)

    @property
    def unattributed_gpu_ops(self) -> tuple[LaunchedOp, ...]:
        return _launched_ops(self.unattributed)

    @property
    def main_thread(self) -> ThreadInfo | None:
        return next((t for t in self.threads if t.is_main), None)

    @property
    def label(self) -> str:
        """``pid 825 matrix-4096``: the pid and the main thread's name (what nsys shows)."""
        main = self.main_thread
        name = main.name if main and main.name else (os.path.basename(self.executable or "") or "?")
        return f"pid {self.pid} {name}"

    def ops_of_kind(self, kind: str) -> list[LaunchedOp]:
        return list(_launched_ops(self.launched.take(np.flatnonzero(self.launched.kind == columns.KINDS.index(kind)))))

    @functools.cached_property
    def ops_table(self) -> list[dict]:
        """:func:`_ops_table` of its GPU work, made once (the page and the JSON both show it)."""
        return _ops_table(self.launched)

    def count_of_kind(self, kind: str) -> int:
        return int(np.count_nonzero(self.launched.kind == columns.KINDS.index(kind)))

    @functools.cached_property
    def gpu_busy_ns(self) -> int:
        """Time at least one of this process's GPU operations was running (overlaps counted once)."""
        return columns.union(self.launched.start, self.launched.end).busy_ns

    @property
    def span_ns(self) -> tuple[int, int] | None:
        """First and last instant of its drawn activity (ranges, marks, GPU work)."""
        starts = [r.start_ns for r in self.all_ranges] + [m.time_ns for m in self.marks]
        ends = [r.end_ns for r in self.all_ranges] + [m.time_ns for m in self.marks]
        if len(self.launched):
            starts.append(int(self.launched.start.min()))
            ends.append(int(self.launched.end.max()))
        return (min(starts), max(ends)) if starts else None

    @property
    def all_ranges(self) -> tuple[Range, ...]:
        return self.suite_ranges + self.thirdparty_ranges + self.other_ranges




# --- readers ------------------------------------------------------------------------------------


def thread_names(ex: Trace) -> dict[int, dict[int, tuple[str, ...]]]:
    """pid -> {tid -> names in the order nsys recorded them} from ThreadNames."""
    out: dict[int, dict[int, tuple[str, ...]]] = {}
    for gtid, names in ex.thread_names().items():
        out.setdefault(pid_of(gtid), {})[tid_of(gtid)] = names
    return out


def nvtx_events(ex: Trace) -> tuple[list[tuple[int, Range]], list[tuple[int, Mark]]]:
    """Every closed NVTX range and every mark, each with its pid, domains resolved per process."""
    if not ex.has_nvtx:
        return [], []
    ranges, marks = [], []
    for e in ex.nvtx_events((NVTX_PUSH_POP, NVTX_START_END, NVTX_MARK)):
        pid = pid_of(e.tid)
        payload = e.payload if e.payload is not None else e.payload_real
        if e.event_type == NVTX_MARK:
            marks.append((pid, Mark(e.text, e.domain, e.start, tid_of(e.tid), payload)))
        elif e.end is not None:  # a range still open when the capture stopped has no end
            ranges.append((pid, Range(e.text, e.domain, e.start, e.end, tid_of(e.tid), payload)))
    return ranges, marks


def _count_launches(ranges: Sequence[Range], ops: columns.ProcessOps) -> list[Range]:
    """Each range with the number of GPU operations launched on its thread while it was open."""
    if not ranges:
        return []
    order = np.lexsort((ops.launch_start, ops.launch_tid))
    tids, starts = ops.launch_tid[order], ops.launch_start[order]
    r_tid = np.fromiter((r.tid for r in ranges), np.int64, len(ranges))
    r_start = np.fromiter((r.start_ns for r in ranges), np.int64, len(ranges))
    r_end = np.fromiter((r.end_ns for r in ranges), np.int64, len(ranges))
    # (tid, time) pairs ordered lexicographically: searched as one sorted sequence per tid
    lo_tid = np.searchsorted(tids, r_tid, side="left")
    hi_tid = np.searchsorted(tids, r_tid, side="right")
    counts = np.zeros(len(ranges), np.int64)
    for tid in np.unique(r_tid):
        sel = np.flatnonzero(r_tid == tid)
        a, b = int(lo_tid[sel[0]]), int(hi_tid[sel[0]])
        block = starts[a:b]
        counts[sel] = np.searchsorted(block, r_end[sel], side="right") - np.searchsorted(block, r_start[sel], "left")
    return [dataclasses.replace(r, gpu_ops_launched=int(n)) for r, n in zip(ranges, counts.tolist())]


def processes(ex: Trace) -> list[ProcessActivity]:
    """Every process that made CUDA calls, ran GPU work or emitted NVTX ranges or marks, ordered by
    its first drawn activity (then pid). The capture's other processes (nsys itself, the shell,
    the kernel's threads, which ThreadNames also lists) are left out."""
    ranges, marks = nvtx_events(ex)
    ops, calls_per_gpid = columns.read_process_ops(ex)
    executables = ex.process_names()
    names = thread_names(ex)

    calls_per_pid: dict[int, int] = {}
    for gpid, n in calls_per_gpid.items():
        calls_per_pid[pid_of(gpid)] = calls_per_pid.get(pid_of(gpid), 0) + n
    op_pid = (ops.pid >> _ID_BITS) & _ID_MASK
    by_pid = np.argsort(op_pid, kind="stable")  # stable: each process's operations stay in time order
    cut = np.flatnonzero(np.append(True, op_pid[by_pid][1:] != op_pid[by_pid][:-1])) if len(by_pid) else by_pid
    op_slices = {int(op_pid[by_pid[a]]): by_pid[a:b] for a, b in zip(cut.tolist(), np.append(cut[1:], len(by_pid)))}
    ranges_of: dict[int, list[Range]] = {}
    for p, r in ranges:
        ranges_of.setdefault(p, []).append(r)
    marks_of: dict[int, list[Mark]] = {}
    for p, m in marks:
        marks_of.setdefault(p, []).append(m)

    pids = set(calls_per_pid) | set(op_slices) | set(ranges_of) | set(marks_of)
    empty = np.zeros(0, np.int64)
    out = []
    for pid in pids:
        idx = op_slices.get(pid, empty)
        attributed = ops.launch_tid[idx] >= 0
        p_ops, p_orphans = ops.take(idx[attributed]), ops.take(idx[~attributed])
        p_ranges = _count_launches(ranges_of.get(pid, []), p_ops)
        p_marks = marks_of.get(pid, [])
        seen_tids = {r.tid for r in p_ranges} | {m.tid for m in p_marks} | set(np.unique(p_ops.launch_tid).tolist())
        thread_map = dict(names.get(pid, {}))
        for tid in seen_tids - set(thread_map):
            thread_map[tid] = ()
        threads = tuple(ThreadInfo(tid, thread_map[tid], tid == pid) for tid in sorted(thread_map))
        out.append(ProcessActivity(
            pid=pid,
            executable=executables.get(pid),
            threads=threads,
            suite_ranges=tuple(r for r in p_ranges if r.domain == DOMAIN),
            thirdparty_ranges=tuple(r for r in p_ranges if r.domain == THIRDPARTY_DOMAIN),
            other_ranges=tuple(r for r in p_ranges if r.domain not in (DOMAIN, THIRDPARTY_DOMAIN)),
            marks=tuple(p_marks),
            launched=p_ops,
            unattributed=p_orphans,
            cuda_api_calls=calls_per_pid.get(pid, 0),
        ))
    out.sort(key=lambda p: ((p.span_ns or (float("inf"),))[0], p.pid))
    return out


def read_processes(path: str) -> list[ProcessActivity]:
    """:func:`processes` of an export file (``.sqlite`` or ``.sqlite.gz``)."""
    with Trace(path) as ex:
        return processes(ex)


# --- summaries ----------------------------------------------------------------------------------


def time_origin_ns(procs: Sequence[ProcessActivity]) -> int:
    """The first drawn instant of any process: the zero of every time in the report."""
    spans = [p.span_ns for p in procs if p.span_ns]
    return min(s for s, _ in spans) if spans else 0


def _range_table(ranges: Sequence[Range], t0: int) -> list[dict]:
    """Ranges grouped by name, in order of first appearance."""
    groups: dict[str, list[Range]] = {}
    for r in ranges:
        groups.setdefault(r.name, []).append(r)
    rows = []
    for name, rs in groups.items():
        total = sum(r.duration_ns for r in rs)
        rows.append({"name": name, "calls": len(rs), "first_start_ms": (rs[0].start_ns - t0) / 1e6,
                     "total_ms": total / 1e6, "mean_ms": total / len(rs) / 1e6,
                     "gpu_ops_launched": sum(r.gpu_ops_launched for r in rs)})
    return rows


def _ops_table(ops: columns.ProcessOps) -> list[dict]:
    """GPU operations grouped by (kind, name), longest total first."""
    if not len(ops):
        return []
    key = ops.kind.astype(np.int64) * len(ops.names) + ops.name
    order = np.argsort(key, kind="stable")
    k = key[order]
    del key
    cut = np.flatnonzero(np.append(True, k[1:] != k[:-1]))
    counts = np.diff(np.append(cut, len(k)))
    totals = np.add.reduceat((ops.end - ops.start)[order], cut)
    nbytes = np.add.reduceat(np.maximum(ops.bytes[order], 0), cut)
    # (group, launching tid) pairs as one int64 each: the tids every group was launched from
    group = np.repeat(np.arange(len(cut), dtype=np.int64), counts)
    pairs = np.unique((group << np.int64(32)) | (ops.launch_tid[order].astype(np.int64) & 0xFFFFFFFF))
    del group, order
    pair_group, pair_tid = pairs >> np.int64(32), (pairs & 0xFFFFFFFF).astype(np.int32)
    rows = []
    for g, (n, total, size) in enumerate(zip(counts.tolist(), totals.tolist(), nbytes.tolist())):
        kind_index, name_index = divmod(int(k[cut[g]]), len(ops.names))
        kind = columns.KINDS[kind_index]
        tids = pair_tid[pair_group == g]
        rows.append({"kind": kind, "name": ops.names[name_index], "count": n, "total_ms": total / 1e6,
                     "bytes": size if kind != "kernel" else None,
                     "launch_tids": sorted(t for t in tids.tolist() if t >= 0)})
    rows.sort(key=lambda r: (-r["total_ms"], r["kind"], r["name"]))
    return rows


def summary(procs: Sequence[ProcessActivity]) -> dict:
    """A JSON-able record of every process: threads, ranges by name, marks, GPU work by name."""
    t0 = time_origin_ns(procs)
    out = {"time_origin_ns": t0, "processes": []}
    for p in procs:
        span = p.span_ns
        out["processes"].append({
            "pid": p.pid,
            "executable": p.executable,
            "label": p.label,
            "threads": [{"tid": t.tid, "names": list(t.names), "main": t.is_main} for t in p.threads],
            "suite_ranges": _range_table(p.suite_ranges, t0),
            "thirdparty_ranges": _range_table(p.thirdparty_ranges, t0),
            "other_ranges": _range_table(p.other_ranges, t0),
            "marks": [{"name": m.name, "time_ms": (m.time_ns - t0) / 1e6, "payload": m.payload, "tid": m.tid}
                      for m in p.marks],
            "gpu_ops": p.ops_table,
            "kernels": p.count_of_kind("kernel"),
            "memcpys": p.count_of_kind("memcpy"),
            "memsets": p.count_of_kind("memset"),
            "unattributed_gpu_ops": len(p.unattributed),
            "cuda_api_calls": p.cuda_api_calls,
            "gpu_busy_ms": p.gpu_busy_ns / 1e6,
            "first_ms": (span[0] - t0) / 1e6 if span else None,
            "last_ms": (span[1] - t0) / 1e6 if span else None,
        })
    return out


# --- markdown -----------------------------------------------------------------------------------


#: longest table cell shown (templated kernel names run to hundreds of characters); cut with an ellipsis
MAX_CELL_CHARS = 160


def _cell(x: object) -> str:
    return mdtext.cell(x, MAX_CELL_CHARS, backslash=False)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _thread_label(t: ThreadInfo) -> str:
    return " → ".join(t.names) if t.names else "(no name recorded)"


#: GPU operation rows shown per process before "... and N more"
MAX_OP_ROWS = 15


def executable_label(path: str | None, python_version: str | None = None) -> str:
    """A process's executable without the capture host's folders: a Python interpreter by its
    version (the path is the host's virtual environment, which says nothing to a reader)."""
    if not path:
        return "unknown"
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    if name.startswith("python"):
        return f"Python {python_version}" if python_version else "Python"
    return name


def _provenance_lines(run: dict | None) -> list[str]:
    if not run or not run.get("provenance"):
        return ["## Provenance", "", "No run record (run.json) came with this capture: its GPU, driver and "
                "packages are unknown.", ""]
    prov = run["provenance"]
    gpus = prov.get("gpus") or []

    commit = describe_commit(prov)
    rows = [("GPU", gpus[0]["name"] if gpus else "not recorded"), ("driver", prov.get("driver_version")),
            ("CUDA runtime / driver API", f"{prov.get('cuda_runtime')} / {prov.get('cuda_driver_api')}"),
            ("Python", prov.get("python"))]
    rows += [("packages", packages_text(prov))]
    rows += [("commit", commit), ("captured (UTC)", prov.get("date_utc"))]
    return ["## Provenance", "", _table(("", "value"), rows), ""]


def markdown_report(procs: Sequence[ProcessActivity], source: str, figure: str | None,
                    run: dict | None = None) -> str:
    """The page: one summary table, the timeline figure, then each process in detail, and the run's
    provenance (``run``: the run record the workload wrote). Deterministic: the same export gives
    the same bytes."""
    python_version = ((run or {}).get("provenance") or {}).get("python")
    s = summary(procs)
    lines = [
        "# NVTX ranges and GPU work per process",
        "",
        f"From the Nsight Systems export `{source}`: {len(procs)} process"
        f"{'es' if len(procs) != 1 else ''} with CUDA calls, GPU work or NVTX annotations. Times are in ms "
        f"from the first range, mark or GPU operation of any of them ({s['time_origin_ns'] / 1e6:.3f} ms "
        "into the capture). GPU work belongs to the process whose CUDA call has its correlation id; "
        f"`{DOMAIN}` ranges are the suite's phases, `{THIRDPARTY_DOMAIN}` ranges are third-party functions "
        "wrapped by `workloads.annotate.annotate_functions`.",
        "",
        _table(
            ("pid", "main thread", "threads", "suite ranges", "third-party ranges", "other ranges", "kernels",
             "copies", "memsets", "GPU busy ms", "first → last ms"),
            [(p["pid"], next((" → ".join(t["names"]) for t in p["threads"] if t["main"]), "?"), len(p["threads"]),
              sum(r["calls"] for r in p["suite_ranges"]), sum(r["calls"] for r in p["thirdparty_ranges"]),
              sum(r["calls"] for r in p["other_ranges"]), p["kernels"], p["memcpys"], p["memsets"],
              f"{p['gpu_busy_ms']:.3f}",
              "n/a" if p["first_ms"] is None else f"{p['first_ms']:.3f} → {p['last_ms']:.3f}")
             for p in s["processes"]]),
        "",
    ]
    if figure:
        lines += [f"![NVTX ranges and GPU work of each process on one time axis]({figure})", ""]
    for proc, p in zip(procs, s["processes"]):
        lines += [f"## {mdtext.cell(proc.label)}", "",
                  f"Executable: {mdtext.cell(executable_label(proc.executable, python_version))}; "
                  f"{p['cuda_api_calls']} CUDA API calls.", ""]
        lines += ["Threads (names as nsys recorded them; the main thread's tid is the pid):", "",
                  _table(("tid", "name", "main"), [(t.tid, _thread_label(t), "yes" if t.is_main else "")
                                                   for t in proc.threads]), ""]
        for key, title, what in (("suite_ranges", "The suite's ranges", "range"),
                                 ("thirdparty_ranges", "Third-party functions", "function"),
                                 ("other_ranges", "Other NVTX ranges", "range")):
            rows = p[key]
            if not rows:
                if key == "thirdparty_ranges":
                    lines += [f"{title}: none (no annotate_functions call, or COOKBOOK_NVTX=0).", ""]
                continue
            lines += [f"{title}:", "", _table(
                (what, "calls", "first start ms", "total ms", "mean ms", "GPU ops launched inside"),
                [(r["name"], r["calls"], f"{r['first_start_ms']:.3f}", f"{r['total_ms']:.3f}", f"{r['mean_ms']:.4f}",
                  r["gpu_ops_launched"]) for r in rows]), ""]
        if p["marks"]:
            lines += ["Marks:", "", _table(("mark", "time ms", "payload", "tid"),
                                          [(m["name"], f"{m['time_ms']:.3f}", m["payload"], m["tid"])
                                           for m in p["marks"]]), ""]
        ops = p["gpu_ops"]
        if ops:
            shown = ops[:MAX_OP_ROWS]
            lines += ["GPU work it launched, longest total first:", "", _table(
                ("kind", "name", "count", "total ms", "MB", "launched from tid"),
                [(o["kind"], o["name"], o["count"], f"{o['total_ms']:.4f}",
                  "" if o["bytes"] is None else f"{o['bytes'] / 1e6:.1f}",
                  ", ".join(map(str, o["launch_tids"]))) for o in shown]), ""]
            if len(ops) > len(shown):
                lines += [f"... and {len(ops) - len(shown)} more kinds of operation.", ""]
        else:
            lines += ["GPU work it launched: none.", ""]
        if p["unattributed_gpu_ops"]:
            lines += [f"{p['unattributed_gpu_ops']} more GPU operations ran for this process with no CUDA "
                      "runtime call of their correlation id (launched through an API nsys did not trace).", ""]
    lines += _provenance_lines(run)
    return "\n".join(lines).rstrip() + "\n"


# --- figure -------------------------------------------------------------------------------------


def _argb_hex(argb: int) -> str:
    return f"#{argb & 0xFFFFFF:06x}"


def _lanes(intervals: Sequence[tuple[int, int]]) -> list[int]:
    """A lane per interval so that overlapping ones (nested ranges, concurrent kernels) sit on
    separate lines: each goes to the lowest-numbered lane free at its start (heaps of the free
    lanes and of the busy ones by end: n log n for any depth of nesting)."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1]))
    busy: list[tuple[int, int]] = []  # (end, lane)
    free: list[int] = []
    n_lanes = 0
    lanes = [0] * len(intervals)
    for i in order:
        s, e = intervals[i]
        while busy and busy[0][0] <= s:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane, n_lanes = n_lanes, n_lanes + 1
        lanes[i] = lane
        heapq.heappush(busy, (e, lane))
    return lanes


#: lanes of ranges drawn per row group (deeper nesting is left out, and the row label says so)
MAX_RANGE_LANES = 12
#: a process with more GPU operations than this is drawn as the busy time of each kind, merged
#: at the figure's resolution, instead of one bar per operation
MAX_DRAWN_OPS = 20_000
#: longest range label drawn inside a bar
MAX_LABEL_CHARS = 40


def _merged_busy(start: np.ndarray, end: np.ndarray, tol: int) -> list[tuple[int, int]]:
    """The union of [start, end) intervals, with gaps of at most ``tol`` closed."""
    if not len(start):
        return []
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.append(True, s[1:] > e[:-1] + tol)
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return list(zip(s[first].tolist(), e[last].tolist()))


_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
            "#bcbd22", "#17becf")


def _range_color(r: Range) -> str:
    if r.domain == DOMAIN:
        parsed = parse_range_name(r.name)
        return _argb_hex(PHASE_COLORS[parsed[2]]) if parsed else "#7f7f7f"
    if r.domain == THIRDPARTY_DOMAIN:
        return _argb_hex(THIRDPARTY_COLOR)
    # other domains: a colour per name, the same in every run (crc32, not Python's salted hash)
    return _PALETTE[zlib.crc32(r.name.encode()) % len(_PALETTE)]


def _range_label(r: Range) -> str:
    """The phase for the suite's ranges (the row already names the process), else the whole name."""
    parsed = parse_range_name(r.name) if r.domain == DOMAIN else None
    label = parsed[2] if parsed else r.name
    return label if len(label) <= MAX_LABEL_CHARS else label[:MAX_LABEL_CHARS - 1] + "…"


def timeline_figure(procs: Sequence[ProcessActivity], path: str, title: str) -> None:
    """One row group per process on one shared time axis: its suite ranges (and marks), its
    third-party ranges, its other NVTX ranges, and the GPU work it launched. Saved atomically with
    no software version or date in the PNG, so the same export gives the same bytes."""
    import matplotlib

    matplotlib.use("Agg")  # no display on GPU hosts and CI
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = time_origin_ns(procs)
    rows: list[tuple[str, list[tuple[float, float, str, str]], list[float]]] = []  # label, bars, marks
    group_bounds: list[int] = []
    for p in procs:
        first = len(rows)
        for label, ranges in (("NVTX", p.suite_ranges), ("third-party", p.thirdparty_ranges),
                              ("other NVTX", p.other_ranges)):
            if not ranges and label != "NVTX":
                continue
            lanes = _lanes([(r.start_ns, r.end_ns) for r in ranges])
            n_lanes = max(lanes, default=0) + 1
            for lane in range(min(n_lanes, MAX_RANGE_LANES)):
                bars = [((r.start_ns - t0) / 1e6, r.duration_ns / 1e6, _range_color(r), _range_label(r))
                        for r, ln in zip(ranges, lanes) if ln == lane]
                marks = [(m.time_ns - t0) / 1e6 for m in p.marks] if (label == "NVTX" and lane == 0) else []
                row_label = f"{p.label}\n{label}" if lane == 0 else ""
                if lane == MAX_RANGE_LANES - 1 and n_lanes > MAX_RANGE_LANES:
                    row_label = f"{n_lanes - MAX_RANGE_LANES} deeper\nlevels not drawn"
                rows.append((row_label, bars, marks))
        n_ops = len(p.launched) + len(p.unattributed)
        if n_ops > MAX_DRAWN_OPS:
            kind = np.concatenate([p.launched.kind, p.unattributed.kind])
            start = np.concatenate([p.launched.start, p.unattributed.start])
            end = np.concatenate([p.launched.end, p.unattributed.end])
            tol = max(int((end.max() - start.min()) // TIMELINE_BINS), 0)
            for k, name in enumerate(columns.KINDS):
                sel = np.flatnonzero(kind == k)
                if len(sel):
                    bars = [((s_ - t0) / 1e6, (e_ - s_) / 1e6, GPU_KIND_COLORS[name], "")
                            for s_, e_ in _merged_busy(start[sel], end[sel], tol)]
                    rows.append((f"{p.label}\nGPU {name}s (busy)", bars, []))
        else:
            ops = list(p.gpu_ops) + list(p.unattributed_gpu_ops)
            lanes = _lanes([(o.start_ns, o.end_ns) for o in ops])
            for lane in range(max(lanes, default=0) + 1):
                bars = [((o.start_ns - t0) / 1e6, o.duration_ns / 1e6, GPU_KIND_COLORS[o.kind], "")
                        for o, ln in zip(ops, lanes) if ln == lane]
                rows.append((f"{p.label}\nGPU" if lane == 0 else "", bars, []))
        group_bounds.append(first)

    span_ms = max((s + w for _, bars, _ in rows for s, w, _, _ in bars), default=1.0)
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.42 * len(rows)))
    for y, (_, bars, marks) in enumerate(rows):
        if bars:
            # an edge in the bar's own colour keeps microsecond ranges visible as hairlines
            ax.broken_barh([(s, w) for s, w, _, _ in bars], (y - 0.38, 0.76),
                           facecolors=[c for _, _, c, _ in bars], edgecolors=[c for _, _, c, _ in bars],
                           linewidth=0.6)
            for s, w, _, text in bars:
                if text and w > 0.06 * span_ms:
                    ax.text(s + w / 2, y, text, ha="center", va="center", fontsize=7, color="white", clip_on=True)
        if marks:
            ax.scatter(marks, [y - 0.25] * len(marks), marker="v", s=22, color=_argb_hex(MARK_COLOR), zorder=3)
    for b in group_bounds[1:]:
        ax.axhline(b - 0.5, color="#444444", linewidth=0.8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r[0] for r in rows], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlim(0, span_ms * 1.01)
    ax.set_xlabel("ms from the first annotated or GPU event (shared by all processes)")
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)

    phases_seen = sorted({parse_range_name(r.name)[2] for p in procs for r in p.suite_ranges
                          if parse_range_name(r.name)}, key=list(PHASE_COLORS).index)
    handles = [Patch(color=_argb_hex(PHASE_COLORS[ph]), label=ph) for ph in phases_seen]
    if any(p.thirdparty_ranges for p in procs):
        handles.append(Patch(color=_argb_hex(THIRDPARTY_COLOR), label="third-party function"))
    kinds_seen = {columns.KINDS[k] for p in procs for k in np.unique(np.concatenate([p.launched.kind,
                                                                                  p.unattributed.kind])).tolist()}
    handles += [Patch(color=c, label=k) for k, c in GPU_KIND_COLORS.items() if k in kinds_seen]
    legend_in = 0.0
    if handles:
        legend_in = 0.3 * ((len(handles) + 5) // 6)  # one legend line per six entries, below the axis
        fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, legend_in / fig.get_figheight(), 1, 1))
    save_figure_atomic(fig, path, dpi=110, metadata={"Software": None})  # deterministic bytes


def require_processes(procs: Sequence[ProcessActivity], path: str) -> None:
    if not procs:
        raise AnalysisInputError(path, "no process made CUDA calls or NVTX annotations in this capture "
                                       "(was it made with nsys -t cuda,nvtx?)")
