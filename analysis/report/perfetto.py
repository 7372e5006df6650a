"""An nsys SQLite export as a Chrome/Perfetto JSON trace (opens in ui.perfetto.dev or chrome://tracing).

    python -m analysis perfetto FILE.sqlite[.gz] -o trace.json

Complete events (``"ph": "X"``), ``ts`` and ``dur`` in µs, on these rows:

- per CPU process (``pid``: the process id) and thread: one row of the thread's NVTX push/pop
  ranges (``tid``: the thread id, nested as pushed), one of its NVTX start/end ranges (they may
  overlap, so they get their own row) and one of its CUDA API calls (runtime and driver);
- per GPU (``pid``: :data:`GPU_PID_BASE` + device id) and stream (``tid``: the stream id): the
  stream's kernels, memcpys and memsets.

Rows are named with metadata events (``"ph": "M"``). Each event's ``args`` carry the
correlation id that joins a CUDA API call to the GPU work it launched. Events are written as they
are read, so a trace of millions of operations needs little memory.
"""
from __future__ import annotations

import json
import os
from typing import IO, Iterator

from analysis.readers.nsys.trace import Trace
from analysis.common.outputs import atomic_output

#: GPU "processes" get pids above any real one (Linux pids stay below 2^22)
GPU_PID_BASE = 1 << 30
#: rows of concurrent kernels on one stream (graph launches): tid = stream + lane * LANE_STRIDE
LANE_STRIDE = 1 << 20
#: the NVTX start/end and CUDA API rows of thread T get tids T + these (thread ids stay below 2^22)
START_END_ROW = 1 << 24
API_ROW = 2 << 24


def _pid(global_tid: int) -> int:
    return (global_tid >> 24) & 0xFFFFFF


def _tid(global_tid: int) -> int:
    return global_tid & 0xFFFFFF


def _us(ns: int) -> float:
    return ns / 1000


def _meta(kind: str, pid: int, tid: int | None, name: str, sort: int | None = None) -> list[dict]:
    args = {"name": name}
    ev = {"ph": "M", "name": kind, "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    out = [ev]
    if sort is not None:
        key = "thread_sort_index" if tid is not None else "process_sort_index"
        out.append({"ph": "M", "name": key, "pid": pid, **({"tid": tid} if tid is not None else {}),
                    "args": {"sort_index": sort}})
    return out


def _names(ex: Trace) -> tuple[dict[int, str], dict[int, str]]:
    """Process names by pid and thread names by globalTid, where the export has them."""
    procs = {pid: os.path.basename(name) or name for pid, name in ex.process_names().items()}
    threads = {gtid: names[-1] for gtid, names in ex.thread_names().items()}
    return procs, threads


def _gpu_events(ex: Trace, streams: set[tuple[int, int]]) -> Iterator[dict]:
    kinds = ex.enum_labels("ENUM_CUDA_MEMCPY_OPER")
    # Kernels of one CUDA graph launch can run at the same time on one stream; Perfetto draws a row
    # as a stack, so a kernel that overlaps the previous one goes to the stream's next free lane
    lane_ends: dict[tuple[int, int], list[int]] = {}
    for st, en, dev, strm, corr, name, gx, gy, gz, bx, by, bz, regs in ex.iter_kernel_rows():
        ends = lane_ends.setdefault((dev, strm), [])
        lane = next((i for i, e in enumerate(ends) if e <= st), len(ends))
        if lane == len(ends):
            ends.append(en)
        else:
            ends[lane] = en
        tid = strm + lane * LANE_STRIDE
        streams.add((dev, tid))
        yield {"name": name or "kernel", "cat": "kernel", "ph": "X", "ts": _us(st), "dur": _us(en - st),
               "pid": GPU_PID_BASE + dev, "tid": tid,
               "args": {"correlationId": corr, "grid": [gx, gy, gz], "block": [bx, by, bz],
                        "registersPerThread": regs}}
    for st, en, dev, strm, corr, nbytes, ck in ex.iter_memcpy_rows():
        streams.add((dev, strm))
        yield {"name": f"[CUDA memcpy {kinds.get(ck, f'copyKind {ck}')}]", "cat": "memcpy", "ph": "X",
               "ts": _us(st), "dur": _us(en - st), "pid": GPU_PID_BASE + dev, "tid": strm,
               "args": {"correlationId": corr, "bytes": nbytes}}
    for st, en, dev, strm, corr, nbytes in ex.iter_memset_rows():
        streams.add((dev, strm))
        yield {"name": "[CUDA memset]", "cat": "memset", "ph": "X", "ts": _us(st), "dur": _us(en - st),
               "pid": GPU_PID_BASE + dev, "tid": strm, "args": {"correlationId": corr, "bytes": nbytes}}


def _cpu_events(ex: Trace, rows: set[tuple[int, int, str]]) -> Iterator[dict]:
    if ex.has_nvtx:
        for r in ex.nvtx_events():
            if r.end is None:
                continue
            push_pop = r.style == "PushPop"
            pid, tid = _pid(r.tid), _tid(r.tid) + (0 if push_pop else START_END_ROW)
            rows.add((r.tid, tid, "NVTX" if push_pop else "NVTX start/end"))
            yield {"name": r.text, "cat": f"nvtx:{r.domain}" if r.domain else "nvtx", "ph": "X",
                   "ts": _us(r.start), "dur": _us(r.end - r.start), "pid": pid, "tid": tid,
                   "args": {"domain": r.domain}}
    for st, en, gtid, corr, name in ex.iter_api_rows():
        tid = _tid(gtid) + API_ROW
        rows.add((gtid, tid, "CUDA API"))
        yield {"name": name, "cat": "cuda_api", "ph": "X", "ts": _us(st),
               "dur": _us(en - st), "pid": _pid(gtid), "tid": tid, "args": {"correlationId": corr}}


def trace_events(ex: Trace) -> Iterator[dict]:
    """Every event of the trace: the complete events first, then the metadata naming the rows."""
    rows: set[tuple[int, int, str]] = set()
    streams: set[tuple[int, int]] = set()
    yield from _cpu_events(ex, rows)
    yield from _gpu_events(ex, streams)
    procs, threads = _names(ex)
    for pid in sorted({_pid(g) for g, _, _ in rows}):
        yield from _meta("process_name", pid, None, f"{procs.get(pid, 'process')} (pid {pid})", sort=pid)
    order = {"NVTX": 0, "NVTX start/end": 1, "CUDA API": 2}
    for gtid, tid, what in sorted(rows):
        thread = threads.get(gtid, f"thread {_tid(gtid)}")
        yield from _meta("thread_name", _pid(gtid), tid, f"{thread} {what}", sort=_tid(gtid) * 4 + order[what])
    for dev in sorted({d for d, _ in streams}):
        yield from _meta("process_name", GPU_PID_BASE + dev, None, f"GPU {dev}", sort=GPU_PID_BASE + dev)
    for dev, tid in sorted(streams):
        strm, lane = tid % LANE_STRIDE, tid // LANE_STRIDE
        label = f"stream {strm}" + (f" (concurrent kernels, lane {lane})" if lane else "")
        yield from _meta("thread_name", GPU_PID_BASE + dev, tid, label, sort=strm * 64 + lane)


def write_trace(ex: Trace, out: IO[str]) -> int:
    """Write the JSON trace to ``out``, an event per line; returns the number of events."""
    out.write('{"displayTimeUnit": "ns", "traceEvents": [\n')
    n = 0
    for ev in trace_events(ex):
        out.write((",\n" if n else "") + json.dumps(ev, separators=(",", ":")))
        n += 1
    out.write("\n]}\n")
    return n


def convert(export: str, output: str) -> int:
    """Write ``output`` (atomically) from the export at ``export``; returns the number of events."""
    with Trace(export) as ex, atomic_output(output) as tmp, open(tmp, "w") as f:
        return write_trace(ex, f)
