"""Columnar reading of an nsys SQLite export: numpy arrays, not one Python object per row.

A trace of a million kernel launches holds a million kernel rows and a million runtime rows;
the record readers of :class:`analysis.readers.nsys.trace.Trace` make two million objects of them. The
functions here read the same tables into int64 arrays (one scan per table, every value checked
to be an integer), join GPU operations to the API calls that launched them, and find the
operations each NVTX range launched, with array operations. Every function is a pure function
of the export; a value that is not what the schema says raises :class:`AnalysisInputError`.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import sqlite3
import warnings
import weakref
from typing import Sequence

import numpy as np

from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import ALLOCATION_APIS, ApiCall, GpuOp, NvtxRange, Trace, api_base_name, api_family

# globalTid = (hardware/VM id, pid, tid) packed; clearing the low 24 bits (the tid) keeps the process
# part, as globalPid holds it (trace.PROCESS_ONLY_MASK, as a signed 64-bit number)
PROCESS_MASK = np.int64(~0xFFFFFF)

KINDS = ("kernel", "memcpy", "memset")
KERNEL, MEMCPY, MEMSET = 0, 1, 2

#: CUDA calls that wait for the GPU (runtime and driver API, without nsys' version suffix)
SYNC_APIS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaThreadSynchronize",
             "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")
#: memory-pool calls: a program that uses them allocates from a pool rather than with cudaMalloc
POOL_APIS_PREFIXES = ("cudaMemPool", "cuMemPool", "cudaDeviceSetMemPool", "cudaDeviceGetMemPool",
                      "cuDeviceSetMemPool", "cuDeviceGetMemPool")


def is_allocation_api(name: str) -> bool:
    return api_family(name) in ALLOCATION_APIS


def is_sync_api(name: str) -> bool:
    return api_family(name) in SYNC_APIS


def is_pool_api(name: str) -> bool:
    return api_family(name).startswith(POOL_APIS_PREFIXES)


#: rows read per query: each column comes back as one text of at most ~20 bytes per row
CHUNK_ROWS = 2_000_000
#: chunks read at once, each on its own connection (two: the cores of a small machine, and the
#: memory of two chunks' texts at a time)
READER_THREADS = min(2, os.cpu_count() or 1)


def int_columns(ex: Trace, table: str, exprs: Sequence[str], names: Sequence[str], where: str = "",
                params: Sequence = ()) -> dict[str, np.ndarray]:
    """``SELECT exprs FROM table [WHERE ...]`` as int64 arrays keyed by ``names``, all in the same
    (arbitrary) row order.

    Fast for millions of rows: SQLite joins each column into one comma-separated text
    (``group_concat``) and numpy parses it, so no Python object is made per row. A damaged export
    is an error, never a shifted or truncated number: a NULL is left out of the text (one value
    short of the row count), a real prints with a point and a text with letters or commas, and
    numpy stops at either (see :func:`_parse_ints`)."""
    cond = f"{where} {'AND' if where else 'WHERE'} rowid BETWEEN ? AND ?"
    sql = f"SELECT COUNT(*), {', '.join(f'group_concat({e})' for e in exprs)} FROM {table} {cond}"

    def chunk(bounds: tuple[int, int], db: sqlite3.Connection | None = None) -> tuple:
        own = db is None
        db = ex.another_connection() if own else db
        try:
            return db.execute(sql, (*params, *bounds)).fetchone()
        finally:
            if own:
                db.close()

    try:
        lo, hi = ex._db.execute(f"SELECT MIN(rowid), MAX(rowid) FROM {table} {where}", tuple(params)).fetchone()
        parts: list[list[np.ndarray]] = [[] for _ in exprs]
        if lo is not None:
            bounds = [(first, min(first + CHUNK_ROWS - 1, hi)) for first in range(lo, hi + 1, CHUNK_ROWS)]
            if len(bounds) > 1 and READER_THREADS > 1:
                # SQLite runs each chunk's scan without the GIL: on two cores two chunks at once
                with concurrent.futures.ThreadPoolExecutor(READER_THREADS) as pool:
                    for first in range(0, len(bounds), READER_THREADS):  # at most READER_THREADS texts held
                        for row in list(pool.map(chunk, bounds[first:first + READER_THREADS])):
                            n, texts = row[0], row[1:]
                            for col, text, expr in zip(parts, texts, exprs):
                                col.append(_parse_ints(ex.path, table, expr, text, n))
            else:
                for b in bounds:
                    row = chunk(b, ex._db)
                    n, texts = row[0], row[1:]
                    for col, text, expr in zip(parts, texts, exprs):
                        col.append(_parse_ints(ex.path, table, expr, text, n))
    except (sqlite3.Error, UnicodeDecodeError) as e:
        raise AnalysisInputError(ex.path, f"query on {table} failed, the export is damaged or its schema differs "
                                          f"({e})") from None
    return {name: (np.concatenate(col) if col else np.zeros(0, np.int64)) for name, col in zip(names, parts)}


def _parse_ints(path: str, table: str, expr: str, text, n: int) -> np.ndarray:
    values = None
    if isinstance(text, str) or (text is None and n == 0):
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)  # numpy warns, then stops, at a bad number
            try:
                values = np.fromstring(text or "", dtype=np.int64, sep=",")
            except (ValueError, DeprecationWarning, OverflowError):
                values = None
    if values is None or len(values) != n:
        raise AnalysisInputError(path, f"damaged export: {table}.{expr} holds a NULL, a text or a real number "
                                       "where an integer belongs")
    return values


def string_ids(ex: Trace, ids: Sequence[int] | np.ndarray) -> dict[int, str]:
    """StringIds.value for each id; an id the table lacks is an error."""
    wanted = sorted({int(i) for i in ids})
    out: dict[int, str] = {}
    for lo in range(0, len(wanted), 500):
        chunk = wanted[lo:lo + 500]
        rows = ex._query(f"SELECT id, value FROM StringIds WHERE id IN ({', '.join('?' * len(chunk))})", chunk)
        for i, v in rows:
            if not isinstance(v, str):
                raise AnalysisInputError(ex.path, f"damaged export: StringIds {i} is not a text")
            out[i] = v
    missing = [i for i in wanted if i not in out]
    if missing:
        raise AnalysisInputError(ex.path, f"damaged export: StringIds has no id {missing[0]}")
    return out


@dataclasses.dataclass
class Ops:
    """Every kernel, memcpy and memset, sorted by (start, end); parallel int64 arrays.

    ``name``: the kernel's demangledName string id (-1 for copies and memsets); ``copy_kind``,
    ``src_kind``, ``dst_kind``: ENUM ids for memcpys (-1 otherwise); ``grid_blocks`` and
    ``block_threads``: the kernel's launch shape (0 otherwise)."""

    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    pid: np.ndarray
    stream: np.ndarray
    name: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    src_kind: np.ndarray
    dst_kind: np.ndarray
    grid_blocks: np.ndarray
    block_threads: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start


_OP_FIELDS = [f.name for f in dataclasses.fields(Ops)]


def read_ops(ex: Trace) -> Ops:
    parts = []
    k = int_columns(ex, "CUPTI_ACTIVITY_KIND_KERNEL",
                    ("start", "end", "COALESCE(correlationId, -1)", "COALESCE(globalPid, -1)", "streamId",
                     "demangledName", "gridX * gridY * gridZ", "blockX * blockY * blockZ"),
                    ("start", "end", "corr", "pid", "stream", "name", "grid_blocks", "block_threads"))
    n = len(k["start"])
    parts.append(dict(k, kind=np.full(n, KERNEL), bytes=np.zeros(n, np.int64), copy_kind=np.full(n, -1),
                      src_kind=np.full(n, -1), dst_kind=np.full(n, -1)))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in ex.tables:
        m = int_columns(ex, "CUPTI_ACTIVITY_KIND_MEMCPY",
                        ("start", "end", "COALESCE(correlationId, -1)", "COALESCE(globalPid, -1)", "streamId",
                         "bytes", "copyKind", "COALESCE(srcKind, -1)", "COALESCE(dstKind, -1)"),
                        ("start", "end", "corr", "pid", "stream", "bytes", "copy_kind", "src_kind", "dst_kind"))
        n = len(m["start"])
        parts.append(dict(m, kind=np.full(n, MEMCPY), name=np.full(n, -1), grid_blocks=np.zeros(n, np.int64),
                          block_threads=np.zeros(n, np.int64)))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in ex.tables:
        s = int_columns(ex, "CUPTI_ACTIVITY_KIND_MEMSET",
                        ("start", "end", "COALESCE(correlationId, -1)", "COALESCE(globalPid, -1)", "streamId", "bytes"),
                        ("start", "end", "corr", "pid", "stream", "bytes"))
        n = len(s["start"])
        parts.append(dict(s, kind=np.full(n, MEMSET), name=np.full(n, -1), copy_kind=np.full(n, -1),
                          src_kind=np.full(n, -1), dst_kind=np.full(n, -1), grid_blocks=np.zeros(n, np.int64),
                          block_threads=np.zeros(n, np.int64)))
    cols = {f: np.concatenate([p[f].astype(np.int64, copy=False) for p in parts]) for f in _OP_FIELDS}
    start, end = cols["start"], cols["end"]
    in_order = bool(np.all((start[1:] > start[:-1]) | ((start[1:] == start[:-1]) & (end[1:] >= end[:-1]))))
    if in_order:  # nsys writes each table in start order; one table alone needs no sort
        return Ops(**cols)
    order = np.lexsort((end, start))  # by start, then end; stable for ties
    return Ops(**{f: cols[f][order] for f in _OP_FIELDS})


@dataclasses.dataclass
class Calls:
    """CUDA API calls (runtime and driver), sorted by (globalTid, start); parallel int64 arrays."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    corr: np.ndarray
    name: np.ndarray  # StringIds id


def read_calls(ex: Trace, where: str = "", params: Sequence = ()) -> Calls:
    c = int_columns(ex, "CUPTI_ACTIVITY_KIND_RUNTIME",
                    ("start", "end", "COALESCE(globalTid, -1)", "COALESCE(correlationId, -1)", "nameId"),
                    ("start", "end", "tid", "corr", "name"), where, params)
    order = np.lexsort((c["start"], c["tid"]))
    return Calls(**{k: v[order] for k, v in c.items()})


def calls_named(ex: Trace, predicate) -> tuple[Calls, dict[int, str]]:
    """The API calls whose name satisfies ``predicate``, sorted by (tid, start), and the names
    of every API call by string id."""
    trace = launches(ex)
    if trace.api_names is None:
        trace.api_names = string_ids(ex, np.unique(trace.calls.name))
    ids = [i for i, name in trace.api_names.items() if predicate(name)]
    mask = np.isin(trace.calls.name, np.array(ids, np.int64))
    c = trace.calls
    return Calls(c.start[mask], c.end[mask], c.tid[mask], c.corr[mask], c.name[mask]), trace.api_names


@dataclasses.dataclass
class Launches:
    """GPU operations joined to the calls that launched them. A CUDA-graph launch is one call, one
    correlation id, for all its kernels: each of them joins to that one call."""

    path: str
    ops: Ops
    calls: Calls  # every API call, sorted by (tid, start)
    op_call: np.ndarray  # per op: index into calls of the call that launched it, -1 if none
    by_call: np.ndarray  # op indices ordered by op_call
    by_call_key: np.ndarray  # op_call[by_call], ascending
    api_names: dict[int, str] | None = None  # every API call's name by string id, once asked for


def _join_key(pid: np.ndarray, corr: np.ndarray, pids: np.ndarray, path: str) -> np.ndarray:
    """(process, correlation id) as one sortable int64: the process's rank in ``pids`` above 32 bits."""
    if len(corr) and (corr.min() < -1 or corr.max() >= 1 << 32):
        raise AnalysisInputError(path, "damaged export: a correlationId outside 0..2^32")
    rank = np.searchsorted(pids, pid)
    return (rank.astype(np.int64) << 33) | (corr + 1)


#: each open Trace's launches, read once: its readers ask for them many times; gone with the Trace
_LAUNCHES: weakref.WeakKeyDictionary[Trace, Launches] = weakref.WeakKeyDictionary()


def launches(ex: Trace) -> Launches:
    """Every GPU operation joined to the API call that launched it, as numpy columns (read once per Trace)."""
    got = _LAUNCHES.get(ex)
    if got is None:
        got = _LAUNCHES[ex] = read_launches(ex)
    return got


def read_launches(ex: Trace) -> Launches:
    """Read the GPU operations and the API calls, and join them (:func:`launches` keeps the result)."""
    ops = read_ops(ex)
    calls = read_calls(ex)
    call_pid = calls.tid & PROCESS_MASK
    pids = np.unique(np.concatenate([call_pid, ops.pid]))
    call_key = _join_key(call_pid, calls.corr, pids, ex.path)
    op_key = _join_key(ops.pid, ops.corr, pids, ex.path)
    key_order = np.argsort(call_key, kind="stable")
    sorted_keys = call_key[key_order]
    pos = np.searchsorted(sorted_keys, op_key)
    pos_c = np.minimum(pos, max(len(sorted_keys) - 1, 0))
    found = (pos < len(sorted_keys)) & (ops.corr >= 0)
    if len(sorted_keys):
        found &= sorted_keys[pos_c] == op_key
    op_call = np.where(found, key_order[pos_c] if len(sorted_keys) else -1, -1)
    by_call = np.argsort(op_call, kind="stable")
    return Launches(ex.path, ops, calls, op_call, by_call, op_call[by_call])


def _thread_slices(calls: Calls, tids: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray,
                                                                                                  np.ndarray]:
    """For each (tid, start, end): the slice [lo, hi) of ``calls`` on that thread that start in [start, end]."""
    # calls are sorted by (tid, start): offset starts by the thread's block
    tid_lo = np.searchsorted(calls.tid, tids, side="left")
    tid_hi = np.searchsorted(calls.tid, tids, side="right")
    lo = np.empty(len(tids), np.int64)
    hi = np.empty(len(tids), np.int64)
    for i in range(len(tids)):
        a, b = tid_lo[i], tid_hi[i]
        block = calls.start[a:b]
        lo[i] = a + np.searchsorted(block, starts[i], side="left")
        hi[i] = a + np.searchsorted(block, ends[i], side="right")
    return lo, hi


def range_arrays(ranges: Sequence[NvtxRange]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    tids = np.fromiter((r.global_tid for r in ranges), np.int64, len(ranges))
    starts = np.fromiter((r.start_ns for r in ranges), np.int64, len(ranges))
    ends = np.fromiter((r.end_ns for r in ranges), np.int64, len(ranges))
    return tids, starts, ends


def ops_in_ranges(trace: Launches, ranges: Sequence[NvtxRange]) -> list[np.ndarray]:
    """Per range: indices into ``trace.ops`` of the GPU operations launched by API calls made on
    the range's thread that started and ended inside the range, in launch order (the calls' order,
    then each call's operations by start)."""
    tids, starts, ends = range_arrays(ranges)
    lo, hi = _thread_slices(trace.calls, tids, starts, ends)
    j0 = np.searchsorted(trace.by_call_key, lo, side="left")
    j1 = np.searchsorted(trace.by_call_key, hi, side="left")
    out = []
    for i in range(len(ranges)):
        idx = trace.by_call[j0[i]:j1[i]]
        if len(idx):
            idx = idx[trace.calls.end[trace.op_call[idx]] <= ends[i]]
        out.append(idx)
    return out


def launched_in(ex: Trace, ranges: Sequence[NvtxRange]) -> list[tuple[list[ApiCall], list[GpuOp]]]:
    """Per range, as records: the API calls made on its thread that started and ended inside it
    (in start order), and the GPU operations they launched (:func:`ops_in_ranges`' order). The
    same join as :func:`ops_in_ranges`, for readers that want names and launch shapes."""
    joined = launches(ex)
    op_idx = ops_in_ranges(joined, ranges)
    call_idx = calls_in_ranges(joined.calls, ranges)
    records = ex.gpu_op_index()
    c, ops = joined.calls, joined.ops
    wanted = np.concatenate([c.name[i] for i in call_idx]) if call_idx else np.zeros(0, np.int64)
    names = string_ids(ex, np.unique(wanted))
    out = []
    for calls_i, ops_i in zip(call_idx, op_idx):
        calls = [ApiCall(int(c.start[i]), int(c.end[i]), api_base_name(names[int(c.name[i])]), int(c.corr[i]),
                         int(c.tid[i])) for i in calls_i.tolist()]
        launched = [records[(KINDS[ops.kind[i]], int(ops.start[i]), int(ops.end[i]), int(ops.corr[i]),
                             int(ops.pid[i]))] for i in ops_i.tolist()]
        out.append((calls, launched))
    return out


def calls_in_ranges(calls: Calls, ranges: Sequence[NvtxRange]) -> list[np.ndarray]:
    """Per range: indices into ``calls`` of the calls made on its thread that started and ended inside it."""
    tids, starts, ends = range_arrays(ranges)
    lo, hi = _thread_slices(calls, tids, starts, ends)
    out = []
    for i in range(len(ranges)):
        idx = np.arange(lo[i], hi[i])
        out.append(idx[calls.end[idx] <= ends[i]])
    return out


@dataclasses.dataclass(frozen=True)
class Union:
    """How a set of intervals covers time: busy (their union), span (first start to last end) and
    the gaps inside the span (span - busy), with the longest gap."""

    busy_ns: int
    span_ns: int
    gap_ns: int
    max_gap_ns: int
    first_start_ns: int | None
    last_end_ns: int | None


def union(start: np.ndarray, end: np.ndarray) -> Union:
    if len(start) == 0:
        return Union(0, 0, 0, 0, None, None)
    order = np.argsort(start, kind="stable")
    s, e = start[order], np.maximum.accumulate(end[order])
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > e[:-1]  # touching intervals merge, as union_ns does
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    busy = int((e[last] - s[first]).sum())
    gaps = s[first[1:]] - e[last[:-1]]
    span = int(e[-1] - s[0])
    return Union(busy, span, span - busy, int(gaps.max()) if len(gaps) else 0, int(s[0]), int(e[-1]))


def grouped(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unique keys (in order of first appearance), their counts, exact integer sums of ``values``,
    and the index of each key's first appearance."""
    if len(keys) == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty, empty
    order = np.argsort(keys, kind="stable")
    k = keys[order]
    cut = np.flatnonzero(np.append(True, k[1:] != k[:-1]))
    sums = np.add.reduceat(values[order].astype(np.int64), cut)
    counts = np.diff(np.append(cut, len(k)))
    first = order[cut]
    appearance = np.argsort(first, kind="stable")
    return k[cut][appearance], counts[appearance], sums[appearance], first[appearance]


@dataclasses.dataclass
class ProcessOps:
    """Every kernel, memcpy and memset with the API call that launched it, for per-process views;
    parallel arrays in no particular order (:func:`analysis.report.multiprocess` sorts what it shows).

    ``name``: an index into ``names`` (the kernel's demangled name, ``[CUDA memcpy <kind>]``,
    ``[CUDA memset]``); ``bytes``: -1 for kernels; ``launch_*`` and ``api``: the launching call's
    tid (OS thread id), start and name index, or -1 where no call has the operation's
    (process, correlationId)."""

    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    corr: np.ndarray
    pid: np.ndarray  # globalPid
    stream: np.ndarray
    name: np.ndarray
    bytes: np.ndarray
    launch_tid: np.ndarray
    launch_start: np.ndarray
    api: np.ndarray
    names: list[str]

    def __len__(self) -> int:
        return len(self.start)

    def take(self, idx: np.ndarray) -> "ProcessOps":
        if len(idx) == len(self) and (not len(idx) or (idx[0] == 0 and bool(np.all(np.diff(idx) == 1)))):
            return self  # every operation in order (a capture of one process): no copy of millions
        return ProcessOps(**{f.name: getattr(self, f.name)[idx] for f in dataclasses.fields(self)
                             if f.name != "names"}, names=self.names)


def read_process_ops(ex: Trace) -> tuple[ProcessOps, dict[int, int]]:
    """:class:`ProcessOps` of the export, and per process (globalPid) the number of distinct
    correlation ids of its CUDA API calls (runtime and driver), read as int64 columns: a capture
    of ten million launches stays in arrays."""
    names: list[str] = []
    index: dict[str, int] = {}

    def code(name: str) -> int:
        if name not in index:
            index[name] = len(names)
            names.append(name)
        return index[name]

    parts = []
    k = int_columns(ex, "CUPTI_ACTIVITY_KIND_KERNEL", ("start", "end", "COALESCE(correlationId, -1)", "globalPid",
                                                       "COALESCE(streamId, -1)", "demangledName"),
                    ("start", "end", "corr", "pid", "stream", "name"))
    ids = np.unique(k["name"])
    kernel_names = string_ids(ex, ids)
    k["name"] = np.array([code(kernel_names[int(i)]) for i in ids], np.int64)[np.searchsorted(ids, k["name"])] \
        if len(ids) else k["name"]
    k["bytes"] = np.full(len(k["start"]), -1, np.int64)
    parts.append((KERNEL, k))
    if "CUPTI_ACTIVITY_KIND_MEMCPY" in ex.tables:
        m = int_columns(ex, "CUPTI_ACTIVITY_KIND_MEMCPY", ("start", "end", "COALESCE(correlationId, -1)",
                                                           "globalPid", "COALESCE(streamId, -1)", "COALESCE(bytes, -1)",
                                                           "copyKind"),
                        ("start", "end", "corr", "pid", "stream", "bytes", "copy_kind"))
        labels = ex.enum_labels("ENUM_CUDA_MEMCPY_OPER")
        kinds = np.unique(m["copy_kind"])
        unknown = [int(c) for c in kinds if int(c) not in labels]
        if unknown:
            raise AnalysisInputError(ex.path, f"damaged export: CUPTI_ACTIVITY_KIND_MEMCPY holds copyKind "
                                              f"{unknown[0]}, which ENUM_CUDA_MEMCPY_OPER does not name")
        m["name"] = np.array([code(f"[CUDA memcpy {labels[int(c)]}]") for c in kinds],
                             np.int64)[np.searchsorted(kinds, m.pop("copy_kind"))] if len(kinds) else m.pop("copy_kind")
        parts.append((MEMCPY, m))
    if "CUPTI_ACTIVITY_KIND_MEMSET" in ex.tables:
        s = int_columns(ex, "CUPTI_ACTIVITY_KIND_MEMSET", ("start", "end", "COALESCE(correlationId, -1)", "globalPid",
                                                           "COALESCE(streamId, -1)", "COALESCE(bytes, -1)"),
                        ("start", "end", "corr", "pid", "stream", "bytes"))
        s["name"] = np.full(len(s["start"]), code("[CUDA memset]"), np.int64)
        parts.append((MEMSET, s))
    fields = ("start", "end", "corr", "pid", "stream", "name", "bytes")
    kinds_rows = [(kind, len(p["start"])) for kind, p in parts]
    cols = {f: np.concatenate([p.pop(f) for _, p in parts]) for f in fields}
    del parts, k
    cols["kind"] = np.repeat(np.array([kind for kind, _ in kinds_rows], np.int8), [n for _, n in kinds_rows])
    # small ids in 32 bits: ten million operations are ten million of each column
    for f in ("name", "stream"):
        cols[f] = cols[f].astype(np.int32)

    c = int_columns(ex, "CUPTI_ACTIVITY_KIND_RUNTIME", ("start", "globalTid", "COALESCE(correlationId, -1)", "nameId"),
                    ("start", "tid", "corr", "name"))
    pids = np.unique(np.concatenate([np.unique(cols["pid"]), np.unique(c["tid"] & PROCESS_MASK)]))
    sorted_keys = _join_key(c["tid"] & PROCESS_MASK, c.pop("corr"), pids, ex.path)
    key_order = np.argsort(sorted_keys, kind="stable")
    sorted_keys = sorted_keys[key_order]
    distinct = sorted_keys[np.append(True, sorted_keys[1:] != sorted_keys[:-1])] if len(sorted_keys) else sorted_keys
    calls_per_pid = {int(pids[rank]): int(n) for rank, n in zip(*np.unique(distinct >> np.int64(33),
                                                                            return_counts=True))}
    del distinct
    op_key = _join_key(cols["pid"], cols["corr"], pids, ex.path)
    pos = np.minimum(np.searchsorted(sorted_keys, op_key), max(len(sorted_keys) - 1, 0))
    found = (sorted_keys[pos] == op_key) & (cols["corr"] >= 0) if len(sorted_keys) else np.zeros(len(op_key), bool)
    del op_key, sorted_keys
    call = key_order[pos] if len(key_order) else pos
    del key_order, pos
    api_ids = np.unique(c["name"])
    api_names = string_ids(ex, api_ids)
    api_code = np.array([code(api_base_name(api_names[int(i)])) for i in api_ids], np.int32)
    cols["launch_tid"] = np.where(found, c.pop("tid")[call] & 0xFFFFFF, -1).astype(np.int32)
    cols["launch_start"] = np.where(found, c.pop("start")[call], -1)
    cols["api"] = np.where(found, api_code[np.searchsorted(api_ids, c.pop("name")[call])] if len(api_ids) else -1,
                           -1).astype(np.int32)
    return ProcessOps(**cols, names=names), calls_per_pid
