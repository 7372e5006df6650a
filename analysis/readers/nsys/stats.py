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

import decimal
import heapq
import math
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np

from analysis.readers.nsys import columns
from analysis.common.errors import AnalysisInputError, DamagedExport, NoDataInExport
from analysis.readers.nsys.trace import NvtxEvent, Trace, api_base_name

Header = list[str]
Rows = list[list[Any]]
Report = tuple[Header, Rows]

# globalTid = (hardware/VM id, pid, tid) packed; these keep the process part
PROCESS_MASK = np.int64(~0xFFFFFF)

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

def _groups_by_name(ex: Trace, ids: np.ndarray, values: np.ndarray,
                    name_of: Callable[[str], str] = lambda name: name) -> dict[str, np.ndarray]:
    """``values`` grouped by the name of their StringIds id (``name_of`` of it: ids whose names
    map to one name form one group), without a Python object per value."""
    names = columns.string_ids(ex, np.unique(ids))
    order = np.argsort(ids, kind="stable")
    ids, values = ids[order], values[order]
    cut = np.flatnonzero(np.append(True, ids[1:] != ids[:-1])) if len(ids) else np.zeros(0, np.int64)
    groups: dict[str, np.ndarray] = {}
    for a, b in zip(cut, np.append(cut[1:], len(ids))):
        name = name_of(names[int(ids[a])])
        groups[name] = np.concatenate([groups[name], values[a:b]]) if name in groups else values[a:b]
    return groups


def _durations(ex: Trace, table: str, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``end - start`` (ns), refused where negative or where int64 cannot hold it (a wrapped value
    would pass as a plausible negative or huge duration)."""
    duration = end - start
    bad = np.flatnonzero((end < start) | ((start < 0) & (duration < 0)) | ((start >= 0) & (end < 0)))
    if len(bad):
        i = int(bad[0])
        raise DamagedExport(ex.path, f"damaged export: a {table} row runs from {int(start[i])} to {int(end[i])} ns "
                                     "(a duration that is negative or beyond int64)")
    return duration


def cuda_gpu_kern_sum(ex: Trace) -> Report:
    """CUDA GPU Kernel Summary: kernels by (demangled) name. Read as columns (a trace may hold
    millions of kernels): names are looked up once per distinct name."""
    k = columns.int_columns(ex, "CUPTI_ACTIVITY_KIND_KERNEL", ("demangledName", "start", "end"),
                            ("name", "start", "end"))
    _nonempty(ex, k["name"], "export holds no CUDA kernels: nothing ran on the GPU while nsys traced CUDA")
    durations = _durations(ex, "CUPTI_ACTIVITY_KIND_KERNEL", k.pop("start"), k.pop("end"))
    groups = _groups_by_name(ex, k.pop("name"), durations)
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
    """CUDA API Summary: runtime and driver calls by name, without nsys' version suffix. Read as
    columns, as the kernels are: a trace of millions of launches holds millions of calls."""
    c = columns.int_columns(ex, "CUPTI_ACTIVITY_KIND_RUNTIME", ("nameId", "start", "end"), ("name", "start", "end"))
    _nonempty(ex, c["name"], "export holds no CUDA API calls: CUDA tracing was off (nsys -t cuda)")
    groups = _groups_by_name(ex, c.pop("name"), _durations(ex, "CUPTI_ACTIVITY_KIND_RUNTIME", c.pop("start"),
                                                           c.pop("end")), api_base_name)
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


def _launching_calls(ex: Trace, tids: np.ndarray) -> dict[int, tuple[np.ndarray, ...]]:
    """Per thread of ``tids``: the CUDA API calls made on it that launched GPU work (kernels,
    memcpys, memsets), as (call start, call end, first op start, last op end), by call start.

    Read and joined as int64 columns (``(process, correlationId)`` keys, sorted and searched):
    a trace of ten million launches never becomes ten million Python objects."""
    cols, op_start, op_end = [], [], []
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        if table in ex.tables:
            cols.append(columns.int_columns(ex, table, ("start", "end", "correlationId", "globalPid"),
                                            ("start", "end", "corr", "pid")))
    pids = np.unique(np.concatenate([o["pid"] for o in cols]))
    key = np.concatenate([_process_key(ex, pids, o["pid"], o["corr"]) for o in cols])
    op_start = np.concatenate([o["start"] for o in cols])
    op_end = np.concatenate([o["end"] for o in cols])
    del cols
    order = np.argsort(key, kind="stable")
    key = key[order]
    cut = np.flatnonzero(np.append(True, key[1:] != key[:-1])) if len(key) else np.zeros(0, np.int64)
    op_key = key[cut]
    first_start = np.minimum.reduceat(op_start[order], cut) if len(cut) else key
    last_end = np.maximum.reduceat(op_end[order], cut) if len(cut) else key
    del key, order, op_start, op_end

    c = columns.int_columns(ex, "CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "end", "globalTid", "correlationId"),
                            ("start", "end", "tid", "corr"))

    def keep(mask: np.ndarray) -> None:
        """Filter the call columns in place of the old ones (no copy where every call is kept)."""
        if not mask.all():
            for k in list(c):
                c[k] = c[k][mask]

    keep(np.isin(c["tid"], tids))
    call_pid = c["tid"] & PROCESS_MASK
    rank = np.minimum(np.searchsorted(pids, call_pid), max(len(pids) - 1, 0))
    keep(pids[rank] == call_pid if len(pids) else np.zeros(len(call_pid), bool))
    del call_pid, rank
    call_key = _process_key(ex, pids, c["tid"] & PROCESS_MASK, c.pop("corr"))
    pos = np.minimum(np.searchsorted(op_key, call_key), max(len(op_key) - 1, 0))
    launched = op_key[pos] == call_key if len(op_key) else np.zeros(len(call_key), bool)
    del call_key
    keep(launched)
    pos = pos[launched] if not launched.all() else pos
    tid, start, end = c.pop("tid"), c.pop("start"), c.pop("end")
    if not (bool(np.all(tid[1:] == tid[:-1])) and bool(np.all(start[1:] >= start[:-1]))):  # one thread in order
        order = np.lexsort((start, tid))
        tid, start, end, pos = tid[order], start[order], end[order], pos[order]
        del order
    first, last = first_start[pos], last_end[pos]
    del pos, first_start, last_end
    out = {}
    cut = np.flatnonzero(np.append(True, tid[1:] != tid[:-1])) if len(tid) else np.zeros(0, np.int64)
    for a, b in zip(cut, np.append(cut[1:], len(tid))):
        out[int(tid[a])] = (start[a:b], end[a:b], first[a:b], last[a:b])
    return out


def _process_key(ex: Trace, pids: np.ndarray, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """(process, correlation id) as one int64: the process's rank in ``pids`` (every globalPid, sorted)
    above 32 bits, the correlation id (below 2^32 in any export nsys writes) below them."""
    if len(corr) and (corr.min() < 0 or corr.max() >= 1 << 32):
        raise DamagedExport(ex.path, "damaged export: a correlationId outside 0..2^32")
    return (np.searchsorted(pids, pid).astype(np.int64) << np.int64(32)) | corr


class _RangeExtreme:
    """Minimum (or maximum) of ``values[lo:hi]`` for many (lo, hi) at once, in time linear in the
    values and the queries: a minimum per block of ``BLOCK`` values, a sparse table over the blocks,
    and the partial blocks at each end reduced directly (each under ``BLOCK`` long)."""

    BLOCK = 256

    def __init__(self, values: np.ndarray, ufunc: np.ufunc) -> None:
        self.values, self.ufunc = values, ufunc
        n = len(values)
        self.blocks = [ufunc.reduceat(values, np.arange(0, n, self.BLOCK))] if n else [values]
        width = 1
        while 2 * width <= len(self.blocks[0]):
            prev = self.blocks[-1]
            self.blocks.append(ufunc(prev[:-width], prev[width:]))
            width *= 2

    def _partial(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """``ufunc`` over values[lo:hi] for spans under BLOCK long and not empty."""
        out = self.values[lo].copy()
        for step in range(1, self.BLOCK):
            inside = lo + step < hi
            if not inside.any():
                break
            idx = np.flatnonzero(inside)
            out[idx] = self.ufunc(out[idx], self.values[lo[idx] + step])
        return out

    def query(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """One value per non-empty span [lo, hi)."""
        b = self.BLOCK
        first_full, last_full = (lo + b - 1) // b, hi // b  # blocks wholly inside: [first_full, last_full)
        short = first_full >= last_full
        out = np.empty(len(lo), self.values.dtype)
        if short.any():
            s = np.flatnonzero(short)
            # a span inside one or two blocks: its head up to a block boundary, then its tail
            mid = np.minimum(hi[s], np.maximum(first_full[s] * b, lo[s] + 1))
            head = self._partial(lo[s], mid)
            tail_lo = np.minimum(mid, hi[s] - 1)
            tail = self._partial(tail_lo, hi[s])
            out[s] = self.ufunc(head, tail)
        long_ = np.flatnonzero(~short)
        if len(long_):
            fb, lb = first_full[long_], last_full[long_]
            level = np.floor(np.log2(lb - fb)).astype(np.int64)
            mid = np.empty(len(long_), self.values.dtype)
            for k in np.unique(level):
                sel = np.flatnonzero(level == k)
                table = self.blocks[k]
                mid[sel] = self.ufunc(table[fb[sel]], table[lb[sel] - (1 << k)])
            val = mid
            head = np.flatnonzero(lo[long_] < fb * b)
            if len(head):
                val[head] = self.ufunc(val[head], self._partial(lo[long_][head], fb[head] * b))
            tail = np.flatnonzero(lb * b < hi[long_])
            if len(tail):
                val[tail] = self.ufunc(val[tail], self._partial(lb[tail] * b, hi[long_][tail]))
            out[long_] = val
        return out


def _parents(ranges: list[NvtxEvent]) -> dict[int, int | None]:
    """Range id -> id of the tightest other range on the same thread that encloses it (None: a root).

    Tightness is the time the parent extends beyond the child on both sides; equally tight
    parents are told apart by the lower id. Ranges that nest properly (push/pop ranges always
    do) are resolved with a stack in one pass; a cluster of ranges that overlap without nesting,
    or start at the same instant, is resolved by :func:`_parents_overlapping`."""
    parent: dict[int, int | None] = {}
    by_tid: dict[int, list[NvtxEvent]] = {}
    for r in ranges:
        by_tid.setdefault(r.tid, []).append(r)
    for rs in by_tid.values():
        rs.sort(key=lambda r: (r.start, r.id))
        # ranges apart in time (none open when the next starts) cannot enclose each other: each
        # cluster of overlapping ones is resolved alone, so one cluster that does not nest costs
        # the general search only for itself
        cluster_end, first = None, 0
        for i, r in enumerate(rs + [None]):
            if r is None or (cluster_end is not None and r.start > cluster_end):
                parent.update(_parents_nested(rs[first:i]))
                first, cluster_end = i, None
            if r is not None:
                cluster_end = r.end if cluster_end is None else max(cluster_end, r.end)
    return parent


def _parents_nested(rs: list[NvtxEvent]) -> dict[int, int | None]:
    """:func:`_parents` of ranges sorted by (start, id): with a stack where they nest properly
    (distinct starts, each range inside the one open before it or after its end)."""
    found: dict[int, int | None] = {}
    stack: list[NvtxEvent] = []
    for i, r in enumerate(rs):
        if i and rs[i - 1].start == r.start:
            return _parents_overlapping(rs)
        while stack and stack[-1].end < r.start:
            stack.pop()
        if stack and stack[-1].end < r.end:  # overlaps its predecessor without enclosing it
            return _parents_overlapping(rs)
        found[r.id] = stack[-1].id if stack else None
        stack.append(r)
    return found


def _parents_overlapping(rs: list[NvtxEvent]) -> dict[int, int | None]:
    """:func:`_parents` of one thread's ranges sorted by (start, id), any overlaps allowed: each
    child against every range open at its start (quadratic in the depth of overlap)."""
    parent: dict[int, int | None] = {}
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


def _project(ranges: list[NvtxEvent], calls: tuple[np.ndarray, ...]) -> dict[int, tuple[int, int, int]]:
    """Range id -> (first op start, last op end, launching calls) of the ranges of one thread that
    enclose at least one launching call (start and end inside the range)."""
    start, end, first, last = calls
    r_start = np.fromiter((r.start for r in ranges), np.int64, len(ranges))
    r_end = np.fromiter((r.end for r in ranges), np.int64, len(ranges))
    lo = np.searchsorted(start, r_start, side="left")
    hi = np.searchsorted(start, r_end, side="right")
    if len(end) < 2 or bool(np.all(end[1:] >= end[:-1])):
        # calls that end in start order (none inside another): those ending inside a range are a prefix
        hi = np.clip(np.searchsorted(end, r_end, side="right"), lo, hi)
        n_calls = hi - lo
        keep = np.flatnonzero(n_calls > 0)
        first_start = _RangeExtreme(first, np.minimum).query(lo[keep], hi[keep])
        last_end = _RangeExtreme(last, np.maximum).query(lo[keep], hi[keep])
        return {ranges[i].id: (int(f), int(e), int(n_calls[i]))
                for i, f, e in zip(keep.tolist(), first_start.tolist(), last_end.tolist())}
    out = {}
    for i, r in enumerate(ranges):  # calls nest (a driver call inside a runtime call): filter each range's
        inside = np.flatnonzero(end[lo[i]:hi[i]] <= r_end[i]) + lo[i]
        if len(inside):
            out[r.id] = (int(first[inside].min()), int(last[inside].max()), len(inside))
    return out


def nvtx_gpu_proj_sum(ex: Trace) -> Report:
    """NVTX GPU Projection Summary: each range projected onto the GPU work it launched."""
    ranges, latest = _nvtx(ex)
    own_thread = [r for r in ranges if r.end_tid is None]
    for r in own_thread:  # nsys ends unclosed ranges at the last NVTX timestamp
        if r.end is None:
            r.end = latest
    by_tid: dict[int, list[NvtxEvent]] = {}
    for r in own_thread:
        by_tid.setdefault(r.tid, []).append(r)
    launching = _launching_calls(ex, np.array(sorted(by_tid), np.int64))
    proj: dict[int, tuple[int, int, int]] = {}
    for tid, calls in launching.items():
        proj.update(_project(by_tid[tid], calls))
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
    for rid, (p_start, p_end, n_calls) in proj.items():
        r = by_id[rid]
        name = f"{r.domain or ''}:{r.text}"
        groups.setdefault((name, r.style), []).append(
            (p_end - p_start, r.end - r.start, n_calls, level.get(rid), children.get(rid, 0)))

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
