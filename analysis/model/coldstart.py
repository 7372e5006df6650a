"""Cold and warm starts across recipes: what each library pays before its first result, and where
the first call's time goes in the nsys capture of a cold process.

Inputs are the coldwarm records (``workloads.tools.coldwarm``: new processes per variant, caches
empty / filled / filled with the driver cache off where the cold run JIT-compiled PTX) and the nsys SQLite exports of the
profiled runs, whose first ``compute`` range is the first call of a cold process.
"""
from __future__ import annotations

import os
from typing import Iterable

from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import Trace
from analysis.readers.nsys import columns as cols
from analysis.model.run_summary import SUITE_DOMAIN, load_json

#: CUDA API calls that load GPU code into the context (after the JIT made it)
MODULE_LOAD_APIS = ("cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoad", "cuModuleLoadFatBinary",
                    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cudaLibraryLoadData")
LAUNCH_APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel", "cudaLaunchKernelExC")
#: synchronous and asynchronous copies and memsets (a pageable copy waits for the GPU and the DMA)
COPY_API_PREFIXES = ("cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")
SYNC_APIS = ("cudaStreamSynchronize", "cuStreamSynchronize", "cudaDeviceSynchronize", "cuCtxSynchronize",
             "cudaEventSynchronize", "cuEventSynchronize")


def first_call_costs(ex: Trace, workload: str, variant: str) -> dict:
    """CPU time of the first and of a later call, split by the CUDA API calls made in them.

    ``other`` is the call's time outside those API calls: Python, and in a cold process the
    JIT compilation (NVRTC, nvcc, LLVM), which the CUDA trace does not show as API time."""
    ranges = [r for r in ex.nvtx_ranges(f"{workload}/{variant}/compute") if r.domain == SUITE_DOMAIN]
    if not ranges:
        raise AnalysisInputError(ex.path, f"no NVTX range {SUITE_DOMAIN}:{workload}/{variant}/compute")
    ranges.sort(key=lambda r: r.start_ns)

    def split(rng) -> dict:
        [(calls, _)] = cols.launched_in(ex, [rng])
        module = sum(c.duration_ns for c in calls if c.name in MODULE_LOAD_APIS)
        launch = sum(c.duration_ns for c in calls if c.name in LAUNCH_APIS)
        sync = sum(c.duration_ns for c in calls if c.name in SYNC_APIS)
        alloc = sum(c.duration_ns for c in calls if c.is_allocation)
        copies = sum(c.duration_ns for c in calls if c.name.startswith(COPY_API_PREFIXES))
        accounted = module + launch + sync + alloc + copies
        return {"wall_ns": rng.duration_ns, "module_load_ns": module, "launch_api_ns": launch,
                "synchronize_ns": sync, "allocation_ns": alloc, "copy_api_ns": copies,
                "other_ns": max(rng.duration_ns - accounted, 0)}

    out = {"first": split(ranges[0])}
    if len(ranges) > 1:
        out["later"] = split(ranges[-1])
    return out


def summarize(coldstart_paths: Iterable[str], capture_root: str) -> list[dict]:
    """One row per (workload, variant): the coldwarm record, plus the first-call split from the
    nsys capture of the variant's smallest profiled size, when there is one."""
    rows = []
    for path in sorted(coldstart_paths):
        rec = load_json(path)
        for key in ("workload", "variant", "runs"):
            if key not in rec:
                raise AnalysisInputError(path, f"missing key {key!r}")
        w, v = rec["workload"], rec["variant"]
        vdir = os.path.join(capture_root, w, v)
        sizes = sorted((int(d[1:]) for d in os.listdir(vdir) if d.startswith("n")) if os.path.isdir(vdir) else [])
        split = None
        for size in sizes:
            for name in ("nsys.sqlite", "nsys.sqlite.gz"):
                candidate = os.path.join(vdir, f"n{size}", name)
                if os.path.exists(candidate):
                    with Trace(candidate) as ex:
                        split = {"size": size, **first_call_costs(ex, w, v)}
                    break
            if split:
                break
        rows.append({"workload": w, "variant": v, "size": rec.get("size"), "runs": rec["runs"],
                     # what the driver JIT-compiled in the cold run (absent from older records)
                     "driver_cache_after_cold": rec.get("driver_cache_after_cold"),
                     "nsys_first_call": split})
    return rows
