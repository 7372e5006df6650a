"""Nsight Systems' ``nsys stats`` summary reports, recomputed from the SQLite export.

``python -m analysis stats --report NAME FILE.sqlite[.gz]`` prints what
``nsys stats --report NAME --format csv FILE.sqlite`` prints (nsys 2025.3), for

  cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, cuda_api_sum,
  nvtx_sum, nvtx_gpu_proj_sum

without nsys. Each report is a pure function of the export, ``(export) -> (header, rows)``;
``format_csv``, ``format_md`` and ``format_json`` print a table.

How nsys computes the columns, and so how they are computed here:

- times in ns, sizes in MB (10^6 bytes);
- Avg is the mean, Med the median (the mean of the two middle values for an even count),
  StdDev the sample standard deviation (n - 1; 0 for one value);
- ``Time (%)`` is the row's total over the sum of the totals of all rows;
- time statistics are SQLite's ``round(x, 1)``: half away from zero, on the double's
  exact value; sizes are printed in MB with three decimals;
- rows are ordered by total, largest first (ties: count, then name).

The NVTX GPU projection of a range: the GPU operations (kernels, memcpys, memsets)
launched by CUDA API calls that started and ended inside the range, on the range's
thread; the projected range runs from the first such operation's start to the last
one's end. Only ranges that start and end on the same thread count.
"""
from __future__ import annotations

import csv
import decimal
import heapq
import io
import json
import math
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np

from analysis.nsys import columns
from analysis.errors import AnalysisInputError, NoDataInExport
from analysis.nsys.trace import NvtxEvent, Trace, api_base_name
from analysis import mdtext

Header = list[str]
Rows = list[list[Any]]
Report = tuple[Header, Rows]

# globalTid = (hardware/VM id, pid, tid) packed; these keep the process part
PROCESS_MASK = 0xFFFFFFFFFF000000

_TENTH = decimal.Decimal("0.1")


# --- numbers, as nsys prints them -------------------------------------------------------------

def sqlite_round1(x: float | None) -> decimal.Decimal | None:
    """SQLite's ``round(x, 1)`` as nsys' queries use it: half away from zero, on the double's
    exact binary value (what SQLite 3.43-3.49 does; SQLite 3.40 and 3.50+ look at 15-17 decimal
    digits instead, which differs only when ``x`` is within a few ulp of a .x5 tie)."""
    if x is None or math.isnan(x) or math.isinf(x):
        return None
    return decimal.Decimal(x).quantize(_TENTH, rounding=decimal.ROUND_HALF_UP)


def megabytes(nbytes: float | None) -> decimal.Decimal | None:
    """Bytes as MB (10^6 bytes) with three decimals, as nsys prints sizes."""
    if nbytes is None or math.isnan(nbytes) or math.isinf(nbytes):
        return None
    return decimal.Decimal(f"{nbytes / 1e6:.3f}")


class _Summary:
    """Total, count, mean, median, min, max and sample standard deviation of integers (a sequence,
    or an int64 array for millions of values: the same numbers, computed without a Python int per
    value where int64 cannot overflow)."""

    def __init__(self, values: Sequence[int] | np.ndarray) -> None:
        if isinstance(values, np.ndarray):
            v = np.sort(values)
            n = len(v)
            # exact in int64 while n * max^2 < 2^63; beyond that, Python integers
            small = n == 0 or int(np.abs(v).max()) <= math.isqrt((1 << 62) // max(n, 1))
            total = int(v.sum()) if small else sum(v.tolist())
            squares = int((v * v).sum()) if small else sum(x * x for x in v.tolist())
            lo, hi = int(v[0]), int(v[-1])
            mid_values = (int(v[(n - 1) // 2]), int(v[n // 2]))
        else:
            v = sorted(values)
            n = len(v)
            total = sum(v)
            squares = None
            lo, hi = v[0], v[-1]
            mid_values = (v[(n - 1) // 2], v[n // 2])
        self.n = n
        self.total = total
        self.min = lo
        self.max = hi
        self.avg = self.total / n  # the double SQLite's avg() gives for integer sums below 2^53
        self.med = float(mid_values[1]) if n % 2 else (mid_values[0] + mid_values[1]) / 2
        if n < 2:
            self.std = 0.0
        else:
            if squares is None:
                squares = sum(x * x for x in v)
            var = Fraction(n * squares - self.total * self.total, n * (n - 1))
            self.std = math.sqrt(var)

    def time_columns(self) -> list[Any]:
        """Total, count, Avg, Med, Min, Max, StdDev as nsys prints durations."""
        return [self.total, self.n, sqlite_round1(self.avg), sqlite_round1(self.med), self.min, self.max,
                sqlite_round1(self.std)]


def _percent(part: int, whole: int) -> decimal.Decimal | None:
    return sqlite_round1(part * 100.0 / whole) if whole else None


# --- reading the export -----------------------------------------------------------------------

def _require(ex: Trace, table: str, problem: str) -> None:
    if table not in ex.tables:
        raise AnalysisInputError(ex.path, f"export has no {table} table: {problem}")


def _nonempty(ex: Trace, rows, problem: str):
    if len(rows) == 0:
        raise NoDataInExport(ex.path, problem)
    return rows


def _timed_rows(header: Header, groups: dict[Any, list[int]], label: Callable[[Any], list[Any]]) -> Report:
    """Rows ``Time (%)``, total, count, Avg, Med, Min, Max, StdDev, then the label columns."""
    sums = {key: _Summary(durations) for key, durations in groups.items()}
    grand = sum(s.total for s in sums.values())
    order = sorted(sums, key=lambda k: (-sums[k].total, sums[k].n, label(k)))
    rows = [[_percent(sums[k].total, grand)] + sums[k].time_columns() + label(k) for k in order]
    return header, rows


# --- the reports ------------------------------------------------------------------------------

def cuda_gpu_kern_sum(ex: Trace) -> Report:
    """CUDA GPU Kernel Summary: kernels by (demangled) name. Read as columns (a trace may hold
    millions of kernels): names are looked up once per distinct name."""
    k = columns.int_columns(ex, "CUPTI_ACTIVITY_KIND_KERNEL", ("demangledName", "start", "end"),
                            ("name", "start", "end"))
    _nonempty(ex, k["name"], "export holds no CUDA kernels: nothing ran on the GPU while nsys traced CUDA")
    names = columns.string_ids(ex, np.unique(k["name"]))
    dur = k["end"] - k["start"]
    order = np.argsort(k["name"], kind="stable")
    ids, dur = k["name"][order], dur[order]
    cut = np.flatnonzero(np.append(True, ids[1:] != ids[:-1]))
    groups: dict[str, np.ndarray] = {}
    for a, b in zip(cut, np.append(cut[1:], len(ids))):
        name = names[int(ids[a])]
        groups[name] = np.concatenate([groups[name], dur[a:b]]) if name in groups else dur[a:b]
    return _timed_rows(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)",
                        "Max (ns)", "StdDev (ns)", "Name"], groups, lambda name: [name])


def _memory_ops(ex: Trace) -> list[tuple[str, int, int, int]]:
    """(operation name as nsys names it, start, end, bytes) of every memcpy and memset."""
    has_memcpy = "CUPTI_ACTIVITY_KIND_MEMCPY" in ex.tables
    has_memset = "CUPTI_ACTIVITY_KIND_MEMSET" in ex.tables
    if not has_memcpy and not has_memset:
        raise NoDataInExport(ex.path, "export has no CUPTI_ACTIVITY_KIND_MEMCPY or CUPTI_ACTIVITY_KIND_MEMSET "
                                          "table: the program made no GPU memory copies or memsets")
    rows: list[tuple] = []
    if has_memcpy:
        _require(ex, "ENUM_CUDA_MEMCPY_OPER", "the export is incomplete (memcpy kinds are missing)")
        rows += ex.checked_rows("SELECT '[CUDA memcpy ' || o.label || ']', m.start, m.end, m.bytes "
                                "FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = m.copyKind",
                                ("str", "int", "int", "int"), "CUPTI_ACTIVITY_KIND_MEMCPY")
    if has_memset:
        rows += ex.checked_rows("SELECT '[CUDA memset]', start, end, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET",
                                ("str", "int", "int", "int"), "CUPTI_ACTIVITY_KIND_MEMSET")
    return _nonempty(ex, rows, "export holds no GPU memory copies or memsets")


def cuda_gpu_mem_time_sum(ex: Trace) -> Report:
    """CUDA GPU MemOps Summary (by Time): memcpys by direction, and memsets."""
    groups: dict[str, list[int]] = {}
    for name, start, end, _ in _memory_ops(ex):
        groups.setdefault(name, []).append(end - start)
    return _timed_rows(["Time (%)", "Total Time (ns)", "Count", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                        "StdDev (ns)", "Operation"], groups, lambda name: [name])


def cuda_gpu_mem_size_sum(ex: Trace) -> Report:
    """CUDA GPU MemOps Summary (by Size), in MB."""
    groups: dict[str, list[int]] = {}
    for name, _, _, nbytes in _memory_ops(ex):
        groups.setdefault(name, []).append(nbytes)
    sums = {name: _Summary(sizes) for name, sizes in groups.items()}
    order = sorted(sums, key=lambda k: (-sums[k].total, sums[k].n, k))
    rows = [[megabytes(s.total), s.n, megabytes(s.avg), megabytes(s.med), megabytes(s.min), megabytes(s.max),
             megabytes(s.std), name] for name, s in ((k, sums[k]) for k in order)]
    return ["Total (MB)", "Count", "Avg (MB)", "Med (MB)", "Min (MB)", "Max (MB)", "StdDev (MB)", "Operation"], rows


def cuda_api_sum(ex: Trace) -> Report:
    """CUDA API Summary: runtime and driver calls by name, without nsys' version suffix."""
    rows = ex.checked_rows("SELECT s.value, r.start, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                           "JOIN StringIds s ON s.id = r.nameId", ("str", "int", "int"), "CUPTI_ACTIVITY_KIND_RUNTIME")
    _nonempty(ex, rows, "export holds no CUDA API calls: CUDA tracing was off (nsys -t cuda)")
    groups: dict[str, list[int]] = {}
    for name, start, end in rows:
        groups.setdefault(api_base_name(name), []).append(end - start)
    return _timed_rows(["Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                        "StdDev (ns)", "Name"], groups, lambda name: [name])


def _nvtx(ex: Trace) -> tuple[list[NvtxEvent], int | None]:
    """Every NVTX range (push/pop and start/end) with its domain's name, and the latest
    timestamp of any range (where nsys ends ranges that were never closed)."""
    ranges = ex.nvtx_events()
    latest = max((max(r.start, r.end if r.end is not None else r.start) for r in ranges), default=None)
    return ranges, latest


def nvtx_sum(ex: Trace) -> Report:
    """NVTX Range Summary: closed push/pop and start/end ranges by style and ``domain:name``.

    As nsys prints them: once the export holds a named domain, a range of the default domain
    is ``:name`` (its domain's name is empty); without named domains, just ``name``."""
    ranges, _ = _nvtx(ex)
    named_domains = bool(ex.nvtx_domain_names())
    groups: dict[tuple[str, str], list[int]] = {}
    for r in ranges:
        if r.end is None:
            continue
        name = f"{r.domain or ''}:{r.text}" if named_domains else r.text
        groups.setdefault((r.style, name), []).append(r.end - r.start)
    _nonempty(ex, groups, "export holds no closed NVTX ranges: the program pushed or started none")
    return _timed_rows(["Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", "Med (ns)", "Min (ns)", "Max (ns)",
                        "StdDev (ns)", "Style", "Range"], groups, lambda key: list(key))


def _gpu_ops(ex: Trace) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """(correlationId, globalPid) -> [(start, end)] of every kernel, memcpy and memset."""
    ops: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table not in ex.tables:
            continue
        rows = ex.checked_rows(f"SELECT start, end, correlationId, globalPid FROM {table}", ("int",) * 4, table)
        for start, end, corr, pid in rows:
            ops.setdefault((corr, pid), []).append((start, end))
    return ops


def _parents(ranges: list[NvtxEvent]) -> dict[int, int | None]:
    """Range id -> id of the tightest other range on the same thread that encloses it (None: a root).

    Tightness is the time the parent extends beyond the child on both sides; equally tight
    parents are told apart by the lower id."""
    parent: dict[int, int | None] = {}
    by_tid: dict[int, list[NvtxEvent]] = {}
    for r in ranges:
        by_tid.setdefault(r.tid, []).append(r)
    for rs in by_tid.values():
        rs.sort(key=lambda r: (r.start, r.id))
        active: dict[int, NvtxEvent] = {}
        ends: list[tuple[int, int]] = []
        i = 0
        while i < len(rs):
            start = rs[i].start
            j = i
            while j < len(rs) and rs[j].start == start:  # ranges starting together may enclose each other
                active[rs[j].id] = rs[j]
                heapq.heappush(ends, (rs[j].end, rs[j].id))
                j += 1
            while ends and ends[0][0] < start:  # ended before this start: encloses nothing from here on
                active.pop(heapq.heappop(ends)[1], None)
            for child in rs[i:j]:
                best: tuple[int, int] | None = None
                for p in active.values():
                    if p.id != child.id and p.end >= child.end:
                        key = ((child.start - p.start) + (p.end - child.end), p.id)
                        best = key if best is None or key < best else best
                parent[child.id] = best[1] if best else None
            i = j
    return parent


def _levels(parent: dict[int, int | None]) -> dict[int, int | None]:
    """Depth below a root range (0 for roots); None for ranges that reach no root
    (identical ranges enclose each other)."""
    level: dict[int, int | None] = {}
    for rid in parent:
        chain = []
        cur: int | None = rid
        seen = set()
        while cur is not None and cur not in level and cur not in seen:
            seen.add(cur)
            chain.append(cur)
            cur = parent.get(cur)
        if cur is None:
            base = -1
        elif cur in level:
            base = level[cur] if level[cur] is not None else None
        else:  # a cycle
            base = None
        for depth, node in enumerate(reversed(chain), start=1):
            level[node] = None if base is None else base + depth
    return level


def nvtx_gpu_proj_sum(ex: Trace) -> Report:
    """NVTX GPU Projection Summary: each range projected onto the GPU work it launched."""
    ranges, latest = _nvtx(ex)
    own_thread = [r for r in ranges if r.end_tid is None]
    for r in own_thread:  # nsys ends unclosed ranges at the last NVTX timestamp
        if r.end is None:
            r.end = latest
    ops = _gpu_ops(ex)
    calls = ex.checked_rows("SELECT start, end, globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME",
                            ("int",) * 4, "CUPTI_ACTIVITY_KIND_RUNTIME")

    by_tid: dict[int, list[NvtxEvent]] = {}
    for r in own_thread:
        by_tid.setdefault(r.tid, []).append(r)
    launches: dict[int, list[tuple[int, int, list[tuple[int, int]], int]]] = {}
    for start, end, tid, corr in calls:
        launched = ops.get((corr, tid & PROCESS_MASK))
        if launched and tid in by_tid:
            launches.setdefault(tid, []).append((start, end, launched, corr))

    # range id -> [first op start, last op end, correlation ids]
    proj: dict[int, list] = {}
    for tid, tid_calls in launches.items():
        rs = sorted(by_tid[tid], key=lambda r: r.start)
        tid_calls.sort(key=lambda c: c[0])
        active: dict[int, NvtxEvent] = {}
        ends: list[tuple[int, int]] = []
        i = 0
        for start, end, launched, corr in tid_calls:
            while i < len(rs) and rs[i].start <= start:
                active[rs[i].id] = rs[i]
                heapq.heappush(ends, (rs[i].end, rs[i].id))
                i += 1
            while ends and ends[0][0] < start:
                active.pop(heapq.heappop(ends)[1], None)
            op_start = min(s for s, _ in launched)
            op_end = max(e for _, e in launched)
            for r in active.values():
                if r.end >= end:
                    p = proj.get(r.id)
                    if p is None:
                        proj[r.id] = [op_start, op_end, {corr}]
                    else:
                        p[0] = min(p[0], op_start)
                        p[1] = max(p[1], op_end)
                        p[2].add(corr)
    _nonempty(ex, proj, "no NVTX range encloses a CUDA API call that launched GPU work (kernels, memcpys, "
                        "memsets), so there is nothing to project onto the GPU")

    parent = _parents(own_thread)
    level = _levels(parent)
    children: dict[int, int] = {}
    for rid in proj:
        if parent.get(rid) is not None:
            children[parent[rid]] = children.get(parent[rid], 0) + 1

    by_id = {r.id: r for r in own_thread}
    groups: dict[tuple[str, str], list[tuple[int, int, int, int | None, int]]] = {}
    for rid, (p_start, p_end, corrs) in proj.items():
        r = by_id[rid]
        name = f"{r.domain or ''}:{r.text}"
        groups.setdefault((name, r.style), []).append(
            (p_end - p_start, r.end - r.start, len(corrs), level.get(rid), children.get(rid, 0)))

    def avg(values: list) -> decimal.Decimal | None:
        known = [v for v in values if v is not None]
        return sqlite_round1(sum(known) / len(known)) if known else None

    rows = []
    for (name, style), inst in groups.items():
        s = _Summary([i[0] for i in inst])
        n_ops = [i[2] for i in inst]
        rows.append([name, style, s.total, sum(i[1] for i in inst), s.n, sqlite_round1(s.avg), sqlite_round1(s.med),
                     s.min, s.max, sqlite_round1(s.std), sum(n_ops), avg(n_ops), avg([i[3] for i in inst]),
                     avg([i[4] for i in inst])])
    rows.sort(key=lambda row: (-row[2], row[4], row[0], row[1]))
    return ["Range", "Style", "Total Proj Time (ns)", "Total Range Time (ns)", "Range Instances", "Proj Avg (ns)",
            "Proj Med (ns)", "Proj Min (ns)", "Proj Max (ns)", "Proj StdDev (ns)", "Total GPU Ops", "Avg GPU Ops",
            "Avg Range Lvl", "Avg Num Child"], rows


REPORTS: dict[str, Callable[[Trace], Report]] = {
    "cuda_gpu_kern_sum": cuda_gpu_kern_sum,
    "cuda_gpu_mem_time_sum": cuda_gpu_mem_time_sum,
    "cuda_gpu_mem_size_sum": cuda_gpu_mem_size_sum,
    "cuda_api_sum": cuda_api_sum,
    "nvtx_sum": nvtx_sum,
    "nvtx_gpu_proj_sum": nvtx_gpu_proj_sum,
}


def report(path: str, name: str) -> Report:
    """Open the export at ``path`` (.sqlite or .sqlite.gz) and compute report ``name``."""
    if name not in REPORTS:
        raise ValueError(f"unknown report {name!r}; known: {', '.join(REPORTS)}")
    with Trace(path) as ex:
        return REPORTS[name](ex)


# --- output -----------------------------------------------------------------------------------

def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    return str(value)


def format_csv(header: Header, rows: Rows) -> str:
    """CSV as ``nsys stats --format csv`` writes it: "\\n" line ends, fields quoted when needed."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([_text(v) for v in row])
    return out.getvalue()


def format_md(header: Header, rows: Rows) -> str:
    """A Markdown table; numeric columns right-aligned."""
    def cell(v: Any) -> str:
        return mdtext.cell(_text(v))

    numeric = [bool(rows) and all(isinstance(r[i], (int, decimal.Decimal)) or r[i] is None for r in rows)
               for i in range(len(header))]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def format_json(header: Header, rows: Rows) -> str:
    """A JSON list with one object per row, keyed by the column names."""
    def value(v: Any) -> Any:
        return float(v) if isinstance(v, decimal.Decimal) else v

    return json.dumps([{h: value(v) for h, v in zip(header, row)} for row in rows], indent=1) + "\n"


FORMATS: dict[str, Callable[[Header, Rows], str]] = {"csv": format_csv, "md": format_md, "json": format_json}
