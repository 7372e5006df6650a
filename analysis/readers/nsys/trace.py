"""One Nsight Systems SQLite export (``nsys export --type sqlite``) as a :class:`Trace`.

This package is the only code that issues SQL against an export. A :class:`Trace` reads, when
asked and at most once where a reader is costly: processes and threads with their names, NVTX
events with their domains' names resolved per process, CUDA kernels, memcpys and memsets, CUDA
API calls (runtime and driver), CUDA-graph node ids, device-memory events and the GPU
description; :mod:`analysis.readers.nsys.columns`, built on this module, reads the same tables
as numpy columns for traces of millions of rows. The file is opened read-only; a file that is not
an SQLite database, an export that lacks the CUDA activity tables, or a value of the wrong type
raises :class:`AnalysisInputError` naming the file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sqlite3
import weakref
from typing import Iterable, Iterator, Sequence

from analysis.common.errors import AnalysisInputError, DamagedExport
from analysis.common.gzfiles import gunzip_to_temp
from analysis.common.sqlite_files import open_read_only

SQLITE_MAGIC = b"SQLite format 3\x00"

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE)
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
#: an instantaneous mark (ENUM_NSYS_EVENT_TYPE "NvtxMark")
NVTX_MARK = 34
# ranges from NVTX's text API (nvtxt); nsys reports them with the others
NVTXT_PUSH_POP = 70
NVTXT_START_END = 71
RANGE_STYLE = {NVTX_PUSH_POP: "PushPop", NVTX_START_END: "StartEnd",
               NVTXT_PUSH_POP: "PushPop", NVTXT_START_END: "StartEnd"}
#: the process part of a globalTid (nsys packs the pid and the tid into one integer)
PROCESS_ONLY_MASK = 0x0000FFFFFF000000


ALLOCATION_APIS = ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cudaMallocAsync",
                   "cudaFreeAsync", "cuMemAllocAsync", "cuMemFreeAsync", "cudaMallocHost",
                   "cudaFreeHost", "cuMemHostAlloc", "cuMemFreeHost", "cudaHostAlloc")


class Interval:
    """Base of a record that ran from ``start_ns`` to ``end_ns``: its ``duration_ns``."""

    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclasses.dataclass(frozen=True)
class NvtxRange(Interval):
    start_ns: int
    end_ns: int
    name: str
    domain: str | None
    global_tid: int
    payload: int | None


@dataclasses.dataclass(frozen=True)
class GpuOp(Interval):
    """One kernel, memcpy or memset as the GPU ran it."""

    kind: str  # "kernel" | "memcpy" | "memset"
    start_ns: int
    end_ns: int
    name: str
    correlation_id: int
    stream_id: int
    bytes: int | None = None
    copy_kind: str | None = None  # "Host-to-Device", ... (memcpy only)
    src_kind: str | None = None  # "Pageable", "Pinned", "Device", ...
    dst_kind: str | None = None
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    registers_per_thread: int | None = None
    global_pid: int | None = None  # the launching process, as nsys packs it (pid << 24)


@dataclasses.dataclass(frozen=True)
class ApiCall(Interval):
    """One CUDA runtime or driver API call on the CPU."""

    start_ns: int
    end_ns: int
    name: str  # without nsys' version suffix
    correlation_id: int
    global_tid: int

    @property
    def is_allocation(self) -> bool:
        return api_family(self.name) in ALLOCATION_APIS


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    name: str
    sm_count: int | None
    memory_bandwidth_bytes_per_s: int | None
    l2_cache_bytes: int | None
    total_memory_bytes: int | None


def api_family(name: str) -> str:
    """The function a program called, without any version suffix (cuMemAlloc_v2 -> cuMemAlloc,
    cudaMalloc_v3020 -> cudaMalloc): ``api_base_name`` keeps the suffixes ``nsys stats`` keeps,
    which would hide the driver API's allocations (cuMemAlloc_v2, cuMemFree_v2) from a name list."""
    return re.sub(r"_v\d+$", "", name)


def api_base_name(name: str) -> str:
    """nsys suffixes CUDA API names with a version (cudaMalloc_v3020). ``nsys stats`` drops a
    suffix of exactly six characters starting "_v" and keeps others (cuGetProcAddress_v2,
    cudaStreamIsCapturing_v10000); so do we, to print the same names."""
    return name[:-6] if name[-6:-4] == "_v" else name


@dataclasses.dataclass
class NvtxEvent:
    """One NVTX_EVENTS row (a range, open or closed, or a mark) as the export holds it, the
    domain's name resolved in the event's process. ``end`` is None for a range never closed."""

    id: int  # the row id
    start: int
    end: int | None
    event_type: int
    tid: int  # globalTid
    end_tid: int | None  # endGlobalTid: set when a start/end range ended on another thread
    domain: str | None
    text: str
    payload: int | None  # the integer payload, if any
    payload_real: float | None  # the floating-point payload, if any
    category: int | None

    @property
    def style(self) -> str | None:
        return RANGE_STYLE.get(self.event_type)


#: allowed Python types of a checked column ("int", "str?" for a text or NULL, ...)
_KINDS: dict[str, tuple[type, ...]] = {
    "int": (int,), "int?": (int, type(None)), "str": (str,), "str?": (str, type(None)),
    "num?": (int, float, type(None)),
}
#: the same as exact types (what sqlite3 returns): a column whose values are all of these passes
#: :meth:`Trace._check` row by row, so it is checked at once
_EXACT_KINDS: dict[str, frozenset[type]] = {k: frozenset(v) for k, v in _KINDS.items()}


def _remove_file(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class Trace:
    """An open, validated nsys SQLite export."""

    REQUIRED_TABLES = ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        #: removes the expanded copy of a gzipped export: on close(), or when the Trace is collected
        #: or the interpreter exits without close() (a Trace cached for a whole test session)
        self._remove_tmp = None
        self._domains: dict[tuple[int, int], str | None] | None = None
        self._gpu_ops: tuple[GpuOp, ...] | None = None
        self._gpu_op_index: dict[tuple, GpuOp] | None = None
        #: NVTX_EVENTS rows, checked, by the event types asked for (readers ask several times per trace)
        self._nvtx_rows: dict[tuple[int, ...], list[tuple]] = {}
        if not os.path.isfile(self.path):
            raise AnalysisInputError(self.path, "no such file")
        db_path = self.path
        if self.path.endswith(".gz"):
            # committed reference captures are gzipped; SQLite needs a plain file
            db_path = gunzip_to_temp(self.path, ".sqlite")
            self._remove_tmp = weakref.finalize(self, _remove_file, db_path)
        with open(db_path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
        if head != SQLITE_MAGIC:
            self.close()
            raise AnalysisInputError(self.path, "not an SQLite file (make one with `nsys export --type sqlite`)")
        try:
            self._db_path = db_path
            self._db = open_read_only(db_path)
            self.tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema's message may not be UTF-8
            self.close()
            raise AnalysisInputError(self.path, f"unreadable SQLite database ({e})") from None
        missing = [t for t in self.REQUIRED_TABLES if t not in self.tables]
        if missing:
            self.close()
            raise AnalysisInputError(
                self.path,
                f"export has no {', '.join(missing)} table: CUDA tracing was off (nsys -t cuda) "
                "or nothing ran on the GPU",
            )
        try:
            self._validate()
        except AnalysisInputError:
            self.close()
            raise

    #: tables of timed rows (GPU work, API calls, NVTX ranges) whose rows must not end before they
    #: start, nor lie outside 0..2^63 ns (a timestamp below 0 makes ``end - start`` wrap in int64)
    TIMED_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                    "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")

    def _validate(self) -> None:
        """Refuse an export that nsys cannot have written: without names every kernel, API call and
        range would be reported unnamed (or not at all), a negative or wrapped duration would be
        summed, and a copy of a kind nsys does not name would be reported as no copy at all."""
        if not self._query("SELECT 1 FROM StringIds LIMIT 1"):
            raise DamagedExport(self.path, "damaged export: the StringIds table is empty, so no kernel, CUDA API "
                                           "call or NVTX range has a name")
        for table in self.TIMED_TABLES:
            if table not in self.tables or not {"start", "end"} <= self.columns_of(table):
                continue
            # a value of the wrong type is the readers' to report (SQLite orders any text after any number);
            # a NULL end is an NVTX range never closed or a mark
            # (the comparisons first: the type test runs only on the rare row they pick)
            # a negative timestamp alone is real: nsys counts from the session's start, and an NVTX
            # range a program opened before it starts before zero (tests/data/thirdparty_h100/jax_prog);
            # an int64 wrap shows as an end before its start
            # an int64 wrap shows as an end before its start, or as a duration no capture lasts (2^62 ns:
            # 146 years; SQLite turns the overflowing difference into a float, which still compares)
            bad = self._query(f"SELECT rowid, start, end FROM {table} WHERE (end < start OR end - start > {1 << 62}) "
                              "AND typeof(start) = 'integer' AND typeof(end) = 'integer' LIMIT 1")
            if bad:
                rowid, start, end = bad[0]
                what = "ends before it starts" if end < start else "has a duration beyond int64"
                raise DamagedExport(self.path, f"damaged export: {table} row {rowid} {what} "
                                               f"(start {start}, end {end})")
        if {"CUPTI_ACTIVITY_KIND_MEMCPY", "ENUM_CUDA_MEMCPY_OPER"} <= self.tables:
            unknown = self._query("SELECT rowid, copyKind FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IS NULL "
                                  "OR copyKind NOT IN (SELECT id FROM ENUM_CUDA_MEMCPY_OPER) LIMIT 1")
            if unknown:
                rowid, kind = unknown[0]
                raise DamagedExport(self.path, f"damaged export: CUPTI_ACTIVITY_KIND_MEMCPY row {rowid} has copyKind "
                                               f"{kind!r}, which ENUM_CUDA_MEMCPY_OPER does not name")

    def close(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
            self._db = None
        if self._remove_tmp is not None:
            self._remove_tmp()  # runs at most once

    def __enter__(self) -> "Trace":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def another_connection(self) -> sqlite3.Connection:
        """A second read-only connection to the same file, for a reader thread (a connection runs one
        statement at a time)."""
        return open_read_only(self._db_path)

    def _query(self, sql: str, params: Iterable = ()) -> list[tuple]:
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema's message may not be UTF-8
            raise AnalysisInputError(self.path, f"query failed, the export's schema differs ({e})") from None

    def checked_rows(self, sql: str, kinds: Sequence[str], what: str, params: Iterable = ()) -> list[tuple]:
        """The rows of ``sql``, every value checked against ``kinds`` ("int", "str", "int?" for an
        int or NULL, ...): a damaged export can hold anything anywhere, and that is its error to report."""
        rows = self._query(sql, params)
        self._check_rows(rows, kinds, what)
        return rows

    def stream_rows(self, sql: str, kinds: Sequence[str], what: str) -> Iterator[tuple]:
        """:meth:`checked_rows` as the rows come (``fetchmany``): little memory for millions of rows."""
        try:
            cur = self._db.execute(sql)
            while batch := cur.fetchmany(10_000):
                if self._rows_fit(batch, kinds):
                    yield from batch
                    continue
                for row in batch:
                    self._check(row, kinds, what)
                    yield row
        except (sqlite3.Error, UnicodeDecodeError) as e:
            raise AnalysisInputError(self.path, f"query on {what} failed, the export is damaged or its schema "
                                                f"differs ({e})") from None

    def _check_rows(self, rows: Sequence[tuple], kinds: Sequence[str], what: str) -> None:
        """:meth:`_check` of every row, column by column: the set of a column's value types against
        the kind's (a bool or a subclass is not among them); where a column holds another type,
        row by row, so that the same first wrong value is reported."""
        if self._rows_fit(rows, kinds):
            return
        for row in rows:
            self._check(row, kinds, what)

    @staticmethod
    def _rows_fit(rows: Sequence[tuple], kinds: Sequence[str]) -> bool:
        """Whether every value of ``rows`` is of an exact type its column's kind allows."""
        return all(set(map(type, column)) <= _EXACT_KINDS[kind] for column, kind in zip(zip(*rows), kinds))

    def _check(self, row: tuple, kinds: Sequence[str], what: str) -> None:
        for value, kind in zip(row, kinds):
            if not isinstance(value, _KINDS[kind]) or isinstance(value, bool):
                wanted = "a text" if kind.startswith("str") else "a number" if kind == "num?" else "an integer"
                raise AnalysisInputError(self.path, f"damaged export: {what} holds {value!r} where {wanted} belongs")

    def columns_of(self, table: str) -> set[str]:
        """The column names of ``table`` (empty when the export has no such table)."""
        if table not in self.tables:
            return set()
        return {r[1] for r in self.checked_rows(f"PRAGMA table_info({table})", ("int", "str"), table)}

    #: TARGET_INFO_GPU columns the theoretical occupancy needs -> the names the suite uses
    DEVICE_LIMIT_COLUMNS = {
        "name": "name", "smCount": "sm_count", "threadsPerWarp": "threads_per_warp",
        "maxWarpsPerSm": "max_warps_per_sm", "maxBlocksPerSm": "max_blocks_per_sm",
        "maxRegistersPerSm": "max_registers_per_sm", "maxShmemPerSm": "max_shared_bytes_per_sm",
        "maxThreadsPerBlock": "max_threads_per_block", "computeMajor": "compute_major", "computeMinor": "compute_minor",
    }

    def kernel_launch_resources(self) -> dict:
        """What CUPTI recorded about each kernel launch without performance counters: per distinct
        (kernel, grid, block, registers, shared memory) the launches and their summed duration, and
        the device's per-SM limits (TARGET_INFO_GPU; ``device`` None where the export has no such
        table or lacks a limit column), for the no-counters mode (analysis.model.no_counters).

        Returns ``{"device": {...} | None, "kernels": [{"name", "grid", "block", "registers_per_thread",
        "static_shared_bytes", "dynamic_shared_bytes", "shared_config_bytes", "local_bytes_per_thread",
        "launches", "total_ns"}, ...]}``; ``shared_config_bytes`` is the shared-memory carveout the
        launch ran with (CUPTI's sharedMemoryExecuted)."""
        cols = self.DEVICE_LIMIT_COLUMNS
        device = None
        if "TARGET_INFO_GPU" in self.tables and set(cols) <= self.columns_of("TARGET_INFO_GPU"):
            rows = self._query(f"SELECT {', '.join(cols)} FROM TARGET_INFO_GPU ORDER BY id LIMIT 1")
            if rows:
                device = dict(zip(cols.values(), rows[0]))
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in self.tables:
            return {"device": device, "kernels": []}
        rows = self._query(
            "SELECT s.value, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.registersPerThread, "
            "k.staticSharedMemory, k.dynamicSharedMemory, k.sharedMemoryExecuted, k.localMemoryPerThread, "
            "COUNT(*), SUM(k.end - k.start), MIN(k.start) "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
            "GROUP BY k.demangledName, k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.registersPerThread, "
            "k.staticSharedMemory, k.dynamicSharedMemory, k.sharedMemoryExecuted, k.localMemoryPerThread "
            "ORDER BY MIN(k.start)")
        kernels = [{"name": nm, "grid": [gx, gy, gz], "block": [bx, by, bz], "registers_per_thread": reg,
                    "static_shared_bytes": ssm, "dynamic_shared_bytes": dsm, "shared_config_bytes": cfg,
                    "local_bytes_per_thread": loc, "launches": n, "total_ns": tot}
                   for nm, gx, gy, gz, bx, by, bz, reg, ssm, dsm, cfg, loc, n, tot, _ in rows]
        return {"device": device, "kernels": kernels}

    def capture_metadata(self) -> dict:
        """What nsys recorded about the capture itself: the Nsight Systems version that exported it and
        the command it launched (program and arguments), so that a report shows what ran, not what a
        template says ran. Exports without the META_DATA tables give None for each."""
        version, argv = None, None
        if "META_DATA_EXPORT" in self.tables:
            rows = dict(self.checked_rows("SELECT name, value FROM META_DATA_EXPORT "
                                          "WHERE name = 'EXPORT_PRODUCT_VERSION'", ("str", "str"), "META_DATA_EXPORT"))
            version = rows.get("EXPORT_PRODUCT_VERSION")
        if "META_DATA_CAPTURE" in self.tables:
            rows = self.checked_rows("SELECT name, value FROM META_DATA_CAPTURE WHERE name = 'PROCESS_0:COMMAND' "
                                     "OR name LIKE 'PROCESS_0:ARGUMENT_%'", ("str", "str"), "META_DATA_CAPTURE")
            command = [v for n, v in rows if n == "PROCESS_0:COMMAND"]
            args = sorted((int(n.rsplit("_", 1)[1]), v) for n, v in rows if n != "PROCESS_0:COMMAND")
            if command:
                argv = command + [v for _, v in args]
        return {"nsys_version": version, "argv": argv}

    def enum_labels(self, table: str) -> dict[int, str]:
        """One of nsys' ENUM_* tables as id -> label ({} when the export lacks it)."""
        if table not in self.tables:
            return {}
        return {i: label for i, label in self.checked_rows(f"SELECT id, label FROM {table}", ("int", "str"), table)}

    @property
    def has_nvtx(self) -> bool:
        """Whether NVTX was traced (``nsys -t nvtx``) and the program made NVTX calls."""
        return "NVTX_EVENTS" in self.tables

    # --- processes and threads -----------------------------------------------------------------

    def process_names(self) -> dict[int, str]:
        """OS pid -> executable, from the PROCESSES table ({} when the export has none)."""
        if not {"pid", "name"} <= self.columns_of("PROCESSES"):
            return {}
        rows = self.checked_rows("SELECT pid, name FROM PROCESSES ORDER BY rowid", ("int?", "str?"), "PROCESSES")
        return {pid: name for pid, name in rows if pid is not None and name is not None}

    def thread_names(self) -> dict[int, tuple[str, ...]]:
        """globalTid -> every name nsys recorded for the thread, oldest first (a renamed thread has several)."""
        if not {"nameId", "globalTid"} <= self.columns_of("ThreadNames"):
            return {}
        out: dict[int, list[str]] = {}
        for gtid, name in self.checked_rows("SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s "
                                            "ON s.id = t.nameId ORDER BY t.rowid", ("int", "str"), "ThreadNames"):
            names = out.setdefault(gtid, [])
            if name not in names:
                names.append(name)
        return {gtid: tuple(n) for gtid, n in out.items()}

    # --- records -----------------------------------------------------------------------------

    def gpu_info(self) -> list[GpuInfo]:
        if "TARGET_INFO_GPU" not in self.tables:
            return []
        rows = self.checked_rows(
            "SELECT name, smCount, memoryBandwidth, l2CacheSize, totalMemory FROM TARGET_INFO_GPU ORDER BY id",
            ("str?", "int?", "int?", "int?", "int?"), "TARGET_INFO_GPU")
        return [GpuInfo(*r) for r in rows]

    def api_calls(self) -> list[ApiCall]:
        rows = self.checked_rows(
            "SELECT r.start, r.end, s.value, r.correlationId, r.globalTid "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId ORDER BY r.start",
            ("int", "int", "str", "int?", "int"), "CUPTI_ACTIVITY_KIND_RUNTIME")
        return [ApiCall(st, en, api_base_name(nm), corr, tid) for st, en, nm, corr, tid in rows]

    def kernels(self) -> list[GpuOp]:
        rows = self.checked_rows(
            "SELECT k.start, k.end, s.value, k.correlationId, k.streamId, k.gridX, k.gridY, k.gridZ, "
            "k.blockX, k.blockY, k.blockZ, k.registersPerThread, k.globalPid "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start",
            ("int", "int", "str", "int?", "int?") + ("int?",) * 7 + ("int?",), "CUPTI_ACTIVITY_KIND_KERNEL")
        return [
            GpuOp("kernel", st, en, nm, corr, strm, grid=(gx, gy, gz), block=(bx, by, bz), registers_per_thread=reg,
                  global_pid=gpid)
            for st, en, nm, corr, strm, gx, gy, gz, bx, by, bz, reg, gpid in rows
        ]

    def memcpys(self) -> list[GpuOp]:
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in self.tables:
            return []
        kinds = self.enum_labels("ENUM_CUDA_MEMCPY_OPER")
        mem = self.enum_labels("ENUM_CUDA_MEM_KIND")
        rows = self.checked_rows(
            "SELECT start, end, correlationId, streamId, bytes, copyKind, srcKind, dstKind, globalPid "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start",
            ("int", "int", "int?", "int?", "int?", "int?", "int?", "int?", "int?"), "CUPTI_ACTIVITY_KIND_MEMCPY")
        out = []
        for st, en, corr, strm, nbytes, ck, sk, dk, gpid in rows:
            label = kinds[ck]  # Trace._validate refused a copyKind the enum lacks
            out.append(GpuOp("memcpy", st, en, f"[CUDA memcpy {label}]", corr, strm, bytes=nbytes,
                             copy_kind=label, src_kind=mem.get(sk), dst_kind=mem.get(dk), global_pid=gpid))
        return out

    def memsets(self) -> list[GpuOp]:
        if "CUPTI_ACTIVITY_KIND_MEMSET" not in self.tables:
            return []
        rows = self.checked_rows(
            "SELECT start, end, correlationId, streamId, bytes, globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start",
            ("int", "int", "int?", "int?", "int?", "int?"), "CUPTI_ACTIVITY_KIND_MEMSET")
        return [GpuOp("memset", st, en, "[CUDA memset]", corr, strm, bytes=nbytes, global_pid=gpid)
                for st, en, corr, strm, nbytes, gpid in rows]

    def gpu_ops(self) -> list[GpuOp]:
        """Every kernel, memcpy and memset by start (read once: a section asks for them once per range)."""
        if self._gpu_ops is None:
            ops = self.kernels() + self.memcpys() + self.memsets()
            ops.sort(key=lambda o: (o.start_ns, o.end_ns))
            self._gpu_ops = tuple(ops)
        return list(self._gpu_ops)

    def gpu_op_index(self) -> dict[tuple, GpuOp]:
        """(kind, start, end, correlationId or -1, globalPid or -1) -> the operation, of every
        :meth:`gpu_ops` record (built once): how the columnar readers find a record by its row."""
        if self._gpu_op_index is None:
            self._gpu_op_index = {
                (o.kind, o.start_ns, o.end_ns, o.correlation_id if o.correlation_id is not None else -1,
                 o.global_pid if o.global_pid is not None else -1): o
                for o in self.gpu_ops()}
        return self._gpu_op_index

    def kernel_graph_node_ids(self) -> dict[tuple[int, int], int | None]:
        """(start, correlationId) -> graphNodeId of every kernel ({} when the export has no such column:
        graph kernels are then not told apart). A CUDA-graph launch is one API call, so one correlation
        id, for all its kernels: the start tells them apart."""
        if "graphNodeId" not in self.columns_of("CUPTI_ACTIVITY_KIND_KERNEL"):
            return {}
        rows = self.checked_rows("SELECT start, correlationId, graphNodeId FROM CUPTI_ACTIVITY_KIND_KERNEL",
                                 ("int", "int", "int?"), "CUPTI_ACTIVITY_KIND_KERNEL")
        return {(st, corr): node for st, corr, node in rows}

    def device_memory_events(self) -> list[tuple[int, int, str | None, str | None]]:
        """(start, bytes, memory kind, operation) of every device-memory event nsys recorded
        (``--cuda-memory-usage true``), in time order; a label the export's enums lack is None."""
        if "CUDA_GPU_MEMORY_USAGE_EVENTS" not in self.tables:
            raise AnalysisInputError(self.path, "export has no CUDA_GPU_MEMORY_USAGE_EVENTS table: capture with "
                                                "nsys profile --cuda-memory-usage true")
        kinds = self.enum_labels("ENUM_CUDA_MEM_KIND")
        opers = self.enum_labels("ENUM_CUDA_DEV_MEM_EVENT_OPER")
        rows = self.checked_rows("SELECT start, bytes, memKind, memoryOperationType FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                 "ORDER BY start, rowid", ("int", "int", "int", "int"), "CUDA_GPU_MEMORY_USAGE_EVENTS")
        return [(st, nbytes, kinds.get(kind), opers.get(oper)) for st, nbytes, kind, oper in rows]

    # --- streamed rows (a trace may hold millions) -----------------------------------------------

    def iter_kernel_rows(self) -> Iterator[tuple]:
        """(start, end, deviceId, streamId, correlationId or -1, name or None, gridX, gridY, gridZ,
        blockX, blockY, blockZ, registersPerThread), by device, stream and start."""
        return self.stream_rows(
            "SELECT k.start, k.end, k.deviceId, k.streamId, COALESCE(k.correlationId, -1), s.value, "
            "k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ, k.registersPerThread "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k LEFT JOIN StringIds s ON s.id = k.demangledName "
            "ORDER BY k.deviceId, k.streamId, k.start",
            ("int", "int", "int", "int", "int", "str?") + ("int",) * 7, "CUPTI_ACTIVITY_KIND_KERNEL")

    def iter_memcpy_rows(self) -> Iterator[tuple]:
        """(start, end, deviceId, streamId, correlationId or -1, bytes, copyKind)."""
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in self.tables:
            return iter(())
        return self.stream_rows("SELECT start, end, deviceId, streamId, COALESCE(correlationId, -1), bytes, copyKind "
                                "FROM CUPTI_ACTIVITY_KIND_MEMCPY", ("int",) * 7, "CUPTI_ACTIVITY_KIND_MEMCPY")

    def iter_memset_rows(self) -> Iterator[tuple]:
        """(start, end, deviceId, streamId, correlationId or -1, bytes)."""
        if "CUPTI_ACTIVITY_KIND_MEMSET" not in self.tables:
            return iter(())
        return self.stream_rows("SELECT start, end, deviceId, streamId, COALESCE(correlationId, -1), bytes "
                                "FROM CUPTI_ACTIVITY_KIND_MEMSET", ("int",) * 6, "CUPTI_ACTIVITY_KIND_MEMSET")

    def iter_api_rows(self) -> Iterator[tuple]:
        """(start, end, globalTid, correlationId or -1, name without nsys' version suffix)."""
        names = {i: api_base_name(v) for i, v in self.checked_rows(
            "SELECT id, value FROM StringIds WHERE id IN (SELECT DISTINCT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME)",
            ("int", "str"), "StringIds")}
        rows = self.stream_rows("SELECT start, end, globalTid, COALESCE(correlationId, -1), nameId "
                                "FROM CUPTI_ACTIVITY_KIND_RUNTIME", ("int",) * 5, "CUPTI_ACTIVITY_KIND_RUNTIME")
        return ((st, en, gtid, corr, names.get(name_id, f"string {name_id}")) for st, en, gtid, corr, name_id in rows)

    # --- NVTX --------------------------------------------------------------------------------------

    def nvtx_domain_names(self) -> dict[tuple[int, int], str | None]:
        """NVTX domain names by (domainId, process part of the globalTid): a domain id is a handle
        valid only in the process that created it, and the first creation in a process names it."""
        if self._domains is not None:
            return self._domains
        cols = self.columns_of("NVTX_EVENTS")
        names: dict[tuple[int, int], str | None] = {}
        if "domainId" in cols:
            text = "COALESCE(e.text, s.value)" if "textId" in cols else "e.text"
            join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""
            for dom, tid, name in self._query(
                    f"SELECT e.domainId, e.globalTid, {text} FROM NVTX_EVENTS e {join} WHERE e.eventType = ? "
                    "ORDER BY e.start, e.rowid", (NVTX_DOMAIN_CREATE,)):
                if dom is None:
                    continue
                if not isinstance(dom, int) or not isinstance(tid, int) or not isinstance(name, (str, type(None))):
                    raise AnalysisInputError(self.path, f"damaged export: an NVTX domain creation holds {dom!r}, "
                                                        f"{tid!r}, {name!r}")
                names.setdefault((dom, tid & PROCESS_ONLY_MASK), name)
        self._domains = names
        return names

    def domain_name(self, domain_id: int | None, global_tid: int) -> str | None:
        """The name of NVTX domain ``domain_id`` in the process of ``global_tid`` (None: the default domain)."""
        if not domain_id:  # 0 or NULL: the default domain
            return None
        return self.nvtx_domain_names().get((domain_id, global_tid & PROCESS_ONLY_MASK))

    def nvtx_events(self, event_types: Sequence[int] = tuple(RANGE_STYLE)) -> list[NvtxEvent]:
        """Every NVTX event of ``event_types`` (default: every push/pop and start/end range, closed or
        not), by start then row id, its domain named in its own process."""
        if "NVTX_EVENTS" not in self.tables:
            raise AnalysisInputError(self.path, "export has no NVTX_EVENTS table: NVTX tracing was off "
                                                "(nsys -t nvtx) or the program made no NVTX calls")
        return [NvtxEvent(rid, st, en, et, tid, etid, self.domain_name(dom, tid), txt or "", pl, real, cat)
                for rid, st, en, et, tid, etid, dom, txt, pl, real, cat in self._cached_nvtx_rows(event_types)]

    def _cached_nvtx_rows(self, event_types: Sequence[int]) -> list[tuple]:
        key = tuple(event_types)
        if key not in self._nvtx_rows:
            self._nvtx_rows[key] = self._nvtx_event_rows(key)
        return self._nvtx_rows[key]

    def _nvtx_event_rows(self, event_types: tuple[int, ...]) -> list[tuple]:
        cols = self.columns_of("NVTX_EVENTS")
        missing = {"start", "end", "eventType", "globalTid"} - cols
        if missing:
            raise AnalysisInputError(self.path, f"NVTX_EVENTS lacks the columns {sorted(missing)}: not an nsys export")
        text = "coalesce(s.value, e.text)" if {"textId", "text"} <= cols else \
            "s.value" if "textId" in cols else "e.text" if "text" in cols else "NULL"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""

        def first_of(names: Sequence[str]) -> str:
            present = [f"e.{c}" for c in names if c in cols]
            return f"COALESCE({', '.join(present)})" if len(present) > 1 else present[0] if present else "NULL"

        optional = {c: f"e.{c}" if c in cols else "NULL" for c in ("endGlobalTid", "domainId", "category")}
        marks = ", ".join("?" * len(event_types))
        rows = self.checked_rows(
            f"SELECT e.rowid, e.start, e.end, e.eventType, e.globalTid, {optional['endGlobalTid']}, "
            f"{optional['domainId']}, {text}, {first_of(('int64Value', 'uint64Value', 'int32Value', 'uint32Value'))}, "
            f"{first_of(('doubleValue', 'floatValue'))}, {optional['category']} "
            f"FROM NVTX_EVENTS e {join} WHERE e.eventType IN ({marks}) ORDER BY e.start, e.rowid",
            ("int", "int", "int?", "int", "int", "int?", "int?", "str?", "int?", "num?", "int?"), "NVTX_EVENTS",
            event_types)
        return rows

    def nvtx_ranges(self, name: str | None = None) -> list[NvtxRange]:
        """Closed push/pop and start/end ranges, with their domain names ([] without NVTX_EVENTS);
        only those called ``name`` when given: a reader after a few ranges of an export that holds
        tens of thousands (XLA's) builds only those."""
        if "NVTX_EVENTS" not in self.tables:
            return []
        rows = self._cached_nvtx_rows((NVTX_PUSH_POP, NVTX_START_END))
        if any(dom for _, _, _, _, _, _, dom, *_ in rows):
            # the domains are read (and a damaged one refused) whether or not ``name`` keeps their ranges
            self.nvtx_domain_names()
        return [NvtxRange(st, en, txt or "", self.domain_name(dom, tid), tid, pl)
                for _rid, st, en, _type, tid, _end_tid, dom, txt, pl, _real, _cat in rows
                if en is not None and (name is None or (txt or "") == name)]
