"""Read an Nsight Systems SQLite export (``nsys export --type sqlite``) into plain records.

Only the tables the suite needs are read: CUDA kernels, memcpys, memsets, CUDA
API calls (runtime and driver), NVTX ranges, and the GPU description. The file
is opened read-only; a file that is not an SQLite database, or an export that
lacks the CUDA activity tables, raises :class:`AnalysisInputError` naming it.
"""
from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
from typing import Iterable

from analysis.errors import AnalysisInputError
from analysis.gzfiles import gunzip_to_temp

SQLITE_MAGIC = b"SQLite format 3\x00"

# NVTX_EVENTS.eventType values (ENUM_NSYS_EVENT_TYPE)
NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_DOMAIN_CREATE = 75
#: the process part of a globalTid (nsys packs the pid and the tid into one integer)
PROCESS_ONLY_MASK = 0x0000FFFFFF000000


ALLOCATION_APIS = ("cudaMalloc", "cudaFree", "cuMemAlloc", "cuMemFree", "cudaMallocAsync",
                   "cudaFreeAsync", "cuMemAllocAsync", "cuMemFreeAsync", "cudaMallocHost",
                   "cudaFreeHost", "cuMemHostAlloc", "cuMemFreeHost", "cudaHostAlloc")


@dataclasses.dataclass(frozen=True)
class NvtxRange:
    start_ns: int
    end_ns: int
    name: str
    domain: str | None
    global_tid: int
    payload: int | None

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclasses.dataclass(frozen=True)
class GpuOp:
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

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclasses.dataclass(frozen=True)
class ApiCall:
    """One CUDA runtime or driver API call on the CPU."""

    start_ns: int
    end_ns: int
    name: str  # without nsys' version suffix
    correlation_id: int
    global_tid: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

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


class NsysExport:
    """An open, validated nsys SQLite export."""

    REQUIRED_TABLES = ("StringIds", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL")

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = str(path)
        self._tmp: str | None = None
        if not os.path.isfile(self.path):
            raise AnalysisInputError(self.path, "no such file")
        db_path = self.path
        if self.path.endswith(".gz"):
            # committed reference captures are gzipped; SQLite needs a plain file
            db_path = self._tmp = gunzip_to_temp(self.path, ".sqlite")
        with open(db_path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
        if head != SQLITE_MAGIC:
            self.close()
            raise AnalysisInputError(self.path, "not an SQLite file (make one with `nsys export --type sqlite`)")
        try:
            self._db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
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

    def close(self) -> None:
        db = getattr(self, "_db", None)
        if db is not None:
            db.close()
            self._db = None
        if self._tmp is not None:
            os.unlink(self._tmp)
            self._tmp = None

    def __enter__(self) -> "NsysExport":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _query(self, sql: str, params: Iterable = ()) -> list[tuple]:
        try:
            return self._db.execute(sql, tuple(params)).fetchall()
        except (sqlite3.Error, UnicodeDecodeError) as e:  # a damaged schema's message may not be UTF-8
            raise AnalysisInputError(self.path, f"query failed, the export's schema differs ({e})") from None

    def query(self, sql: str, params: Iterable = ()) -> list[tuple]:
        """Run one read-only SQL statement on the export; a failing query raises AnalysisInputError."""
        return self._query(sql, params)

    def _columns(self, table: str) -> set[str]:
        return {r[1] for r in self._query(f"PRAGMA table_info({table})")}

    def _enum(self, table: str) -> dict[int, str]:
        if table not in self.tables:
            return {}
        return {i: label for i, label in self._query(f"SELECT id, label FROM {table}")}

    # --- records -----------------------------------------------------------------------------

    def gpu_info(self) -> list[GpuInfo]:
        if "TARGET_INFO_GPU" not in self.tables:
            return []
        rows = self._query(
            "SELECT name, smCount, memoryBandwidth, l2CacheSize, totalMemory FROM TARGET_INFO_GPU ORDER BY id"
        )
        return [GpuInfo(*r) for r in rows]

    def api_calls(self) -> list[ApiCall]:
        rows = self._query(
            "SELECT r.start, r.end, s.value, r.correlationId, r.globalTid "
            "FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId ORDER BY r.start"
        )
        return [ApiCall(st, en, api_base_name(nm), corr, tid) for st, en, nm, corr, tid in rows]

    def kernels(self) -> list[GpuOp]:
        rows = self._query(
            "SELECT k.start, k.end, s.value, k.correlationId, k.streamId, k.gridX, k.gridY, k.gridZ, "
            "k.blockX, k.blockY, k.blockZ, k.registersPerThread "
            "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start"
        )
        return [
            GpuOp("kernel", st, en, nm, corr, strm, grid=(gx, gy, gz), block=(bx, by, bz), registers_per_thread=reg)
            for st, en, nm, corr, strm, gx, gy, gz, bx, by, bz, reg in rows
        ]

    def memcpys(self) -> list[GpuOp]:
        if "CUPTI_ACTIVITY_KIND_MEMCPY" not in self.tables:
            return []
        kinds = self._enum("ENUM_CUDA_MEMCPY_OPER")
        mem = self._enum("ENUM_CUDA_MEM_KIND")
        rows = self._query(
            "SELECT start, end, correlationId, streamId, bytes, copyKind, srcKind, dstKind "
            "FROM CUPTI_ACTIVITY_KIND_MEMCPY ORDER BY start"
        )
        out = []
        for st, en, corr, strm, nbytes, ck, sk, dk in rows:
            label = kinds.get(ck, f"copyKind {ck}")
            out.append(GpuOp("memcpy", st, en, f"[CUDA memcpy {label}]", corr, strm, bytes=nbytes,
                             copy_kind=label, src_kind=mem.get(sk), dst_kind=mem.get(dk)))
        return out

    def memsets(self) -> list[GpuOp]:
        if "CUPTI_ACTIVITY_KIND_MEMSET" not in self.tables:
            return []
        rows = self._query(
            "SELECT start, end, correlationId, streamId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET ORDER BY start"
        )
        return [GpuOp("memset", st, en, "[CUDA memset]", corr, strm, bytes=nbytes)
                for st, en, corr, strm, nbytes in rows]

    def gpu_ops(self) -> list[GpuOp]:
        ops = self.kernels() + self.memcpys() + self.memsets()
        ops.sort(key=lambda o: (o.start_ns, o.end_ns))
        return ops

    def nvtx_domain_names(self) -> dict[tuple[int, int], str | None]:
        """NVTX domain names by (domainId, process part of the globalTid): a domain id is a handle
        valid only in the process that created it, and the first creation in a process names it."""
        if "NVTX_EVENTS" not in self.tables:
            return {}
        cols = self._columns("NVTX_EVENTS")
        if "domainId" not in cols:
            return {}
        text = "COALESCE(e.text, s.value)" if "textId" in cols else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""
        names: dict[tuple[int, int], str | None] = {}
        for dom, tid, name in self._query(
                f"SELECT e.domainId, e.globalTid, {text} FROM NVTX_EVENTS e {join} WHERE e.eventType = ? "
                "ORDER BY e.start, e.rowid", (NVTX_DOMAIN_CREATE,)):
            if dom is None:
                continue
            if not isinstance(dom, int) or not isinstance(tid, int) or not isinstance(name, (str, type(None))):
                raise AnalysisInputError(self.path, f"damaged export: an NVTX domain creation holds {dom!r}, "
                                                    f"{tid!r}, {name!r}")
            names.setdefault((dom, tid & PROCESS_ONLY_MASK), name)
        return names

    def nvtx_ranges(self) -> list[NvtxRange]:
        """Closed push/pop and start/end ranges, with their domain names."""
        if "NVTX_EVENTS" not in self.tables:
            return []
        cols = self._columns("NVTX_EVENTS")
        text = "COALESCE(e.text, s.value)" if "textId" in cols else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in cols else ""
        domain_col = "e.domainId" if "domainId" in cols else "NULL"
        payload = "COALESCE(e.int64Value, e.uint64Value, e.int32Value, e.uint32Value)" \
            if {"int64Value", "uint64Value"} <= cols else "NULL"
        domains = self.nvtx_domain_names()
        rows = self._query(
            f"SELECT e.start, e.end, {text}, {domain_col}, e.globalTid, {payload} FROM NVTX_EVENTS e {join} "
            "WHERE e.eventType IN (?, ?) AND e.end IS NOT NULL ORDER BY e.start",
            (NVTX_PUSH_POP, NVTX_START_END),
        )
        return [NvtxRange(st, en, nm or "", domains.get((dom, tid & PROCESS_ONLY_MASK))
                          if isinstance(dom, int) and isinstance(tid, int) else None, tid, pl)
                for st, en, nm, dom, tid, pl in rows]


# --- launch resources, for the no-counters mode (analysis.no_counters) -------------------------

#: TARGET_INFO_GPU columns the theoretical occupancy needs -> the names the suite uses
_DEVICE_LIMIT_COLUMNS = {
    "name": "name", "smCount": "sm_count", "threadsPerWarp": "threads_per_warp",
    "maxWarpsPerSm": "max_warps_per_sm", "maxBlocksPerSm": "max_blocks_per_sm",
    "maxRegistersPerSm": "max_registers_per_sm", "maxShmemPerSm": "max_shared_bytes_per_sm",
    "maxThreadsPerBlock": "max_threads_per_block", "computeMajor": "compute_major", "computeMinor": "compute_minor",
}


def kernel_launch_resources(path: str | os.PathLike) -> dict:
    """What CUPTI recorded about each kernel launch without performance counters, from an nsys
    export: per distinct (kernel, grid, block, registers, shared memory) the launches and their
    summed duration, and the device's per-SM limits (TARGET_INFO_GPU; ``device`` None where the
    export has no such table or lacks a limit column).

    Returns ``{"device": {...} | None, "kernels": [{"name", "grid", "block", "registers_per_thread",
    "static_shared_bytes", "dynamic_shared_bytes", "shared_config_bytes", "local_bytes_per_thread",
    "launches", "total_ns"}, ...]}``; ``shared_config_bytes`` is the shared-memory carveout the
    launch ran with (CUPTI's sharedMemoryExecuted)."""
    with NsysExport(path) as ex:
        device = None
        if "TARGET_INFO_GPU" in ex.tables and set(_DEVICE_LIMIT_COLUMNS) <= ex._columns("TARGET_INFO_GPU"):
            rows = ex.query(f"SELECT {', '.join(_DEVICE_LIMIT_COLUMNS)} FROM TARGET_INFO_GPU ORDER BY id LIMIT 1")
            if rows:
                device = dict(zip(_DEVICE_LIMIT_COLUMNS.values(), rows[0]))
        rows = ex.query(
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
