"""The JAX matmul recipe's captures -> numbers, for its report sections (no markdown here).

Pure functions of the files in the recipe's capture folder (``results/captures/jax_matmul`` or
``reports/reference/h200/jax_matmul``):

- :func:`compute_calls`: per ``compute`` range of a run's nsys export, the GPU work inside it
  (kernels, copies, their time and union), the CUDA API calls made meanwhile, and the longest
  kernel. Work is matched to a range by *time*, not by thread: the runner synchronizes inside every
  ``compute`` range, so the GPU work a call launched starts and ends inside it, and nothing else
  runs then; this holds whichever thread launches (JAX 0.11 launches on the calling thread, but
  PJRT may move launches to threads of its own).
- :func:`device_memory`: the device-memory allocations nsys recorded with
  ``--cuda-memory-usage true`` (table CUDA_GPU_MEMORY_USAGE_EVENTS: one row per allocation or
  free, its bytes, memory kind and operation; the kinds and operations are labelled in
  ENUM_CUDA_MEM_KIND and ENUM_CUDA_DEV_MEM_EVENT_OPER), and the peak of what was held at once.
- :func:`allocator_experiment`, :func:`run_folders`, :func:`ceilings`, :func:`timing`: the JSON
  records.

Times in ns (ms where named so), sizes in bytes.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections import Counter

from analysis.common.errors import AnalysisInputError
from analysis.common import layout
from analysis.common.gzfiles import existing_capture
from analysis.readers.nsys.trace import Trace, api_family
from analysis.model.run_summary import SUITE_DOMAIN, load_json, union_ns

#: memory kinds (ENUM_CUDA_MEM_KIND labels) that live in the GPU's own memory
DEVICE_MEMORY_KINDS = ("Device", "Device Static", "Array")
#: allocations from this size up are listed one by one (how an allocator's pool grows)
LARGE_ALLOCATION_BYTES = 1 << 20
#: CUDA API calls that put work on the GPU (without nsys' version suffix)
LAUNCH_APIS = ("cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel", "cudaLaunchKernelExC",
               "cuGraphLaunch", "cudaGraphLaunch", "cuLaunchCooperativeKernel")
GRAPH_LAUNCH_APIS = ("cuGraphLaunch", "cudaGraphLaunch")
#: kernel names of GEMM libraries: cuBLAS (nvjet_*, *gemm*, sm90_xmma_*), CUTLASS, XLA's Triton GEMMs
_LIBRARY_GEMM = re.compile(r"gemm|nvjet|xmma|cutlass|cublas|wgmma|hmma", re.IGNORECASE)


def is_library_gemm(kernel_name: str) -> bool:
    """Whether a kernel's name is that of a GEMM library kernel (cuBLAS, CUTLASS, a Triton GEMM)
    rather than a kernel XLA emitted from its own loop code. A name says what ran, not how fast."""
    return bool(_LIBRARY_GEMM.search(kernel_name))


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str
    duration_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class Call:
    """One ``compute`` range: one call of the variant's step (the whole loop over sides)."""

    index: int | None
    range_ns: int
    kernels: int
    memcpys: int
    memsets: int
    kernel_ns: int
    #: time the GPU was running anything of the call (union of its operations)
    busy_ns: int
    api_calls: int
    launches: int
    graph_launches: int
    #: kernels that XLA launched as nodes of a CUDA graph (graphNodeId set)
    graph_kernels: int
    longest: Kernel | None
    kernel_names: tuple[tuple[str, int], ...]

    @property
    def mean_kernel_ns(self) -> float | None:
        return self.kernel_ns / self.kernels if self.kernels else None


def _compute_ranges(ex: Trace, workload: str, variant: str):
    name = f"{workload}/{variant}/compute"
    ranges = sorted((r for r in ex.nvtx_ranges(name) if r.domain == SUITE_DOMAIN),
                    key=lambda r: r.start_ns)
    if not ranges:
        raise AnalysisInputError(ex.path, f"no NVTX range {SUITE_DOMAIN}:{name} (a run of the suite's runner "
                                          "under nsys -t nvtx)")
    return ranges


def compute_calls(ex: Trace, workload: str, variant: str) -> list[Call]:
    """Every ``compute`` range of ``workload/variant`` in the export, in order (see the module doc)."""
    ranges = _compute_ranges(ex, workload, variant)
    ops = ex.gpu_ops()
    api = ex.api_calls()
    node_ids = ex.kernel_graph_node_ids()
    calls = []
    for r in ranges:
        inside = [o for o in ops if o.start_ns >= r.start_ns and o.end_ns <= r.end_ns]
        kernels = [o for o in inside if o.kind == "kernel"]
        made = [c for c in api if r.start_ns <= c.start_ns <= r.end_ns]
        families = [api_family(c.name) for c in made]
        longest = max(kernels, key=lambda k: k.duration_ns, default=None)
        calls.append(Call(
            index=r.payload,
            range_ns=r.duration_ns,
            kernels=len(kernels),
            memcpys=sum(o.kind == "memcpy" for o in inside),
            memsets=sum(o.kind == "memset" for o in inside),
            kernel_ns=sum(k.duration_ns for k in kernels),
            busy_ns=union_ns((o.start_ns, o.end_ns) for o in inside),
            api_calls=len(made),
            launches=sum(f in LAUNCH_APIS for f in families),
            graph_launches=sum(f in GRAPH_LAUNCH_APIS for f in families),
            graph_kernels=sum(node_ids.get((k.start_ns, k.correlation_id)) is not None for k in kernels),
            longest=None if longest is None else Kernel(longest.name, longest.duration_ns, longest.grid,
                                                        longest.block),
            kernel_names=tuple(sorted(Counter(k.name for k in kernels).items())),
        ))
    return calls


def steady(calls: list[Call]) -> list[Call]:
    """The calls after the first (the first of a process pays compilation), or the only one."""
    return calls[1:] if len(calls) > 1 else calls


def device_memory(ex: Trace) -> dict:
    """Device memory nsys recorded (``--cuda-memory-usage true``): allocations, frees, and the peak
    of the bytes held at once, events taken in time order (frees subtract)."""
    events = ex.device_memory_events()
    gpus = ex.gpu_info()
    held = peak = 0
    allocs = frees = 0
    allocated = freed = largest = 0
    large: list[int] = []
    by_kind: dict[str, dict[str, int]] = {}
    for _start, nbytes, label, op in events:
        if label is None or op not in ("Allocation", "Deallocation"):
            raise AnalysisInputError(ex.path, f"memory event with unknown kind {label} or operation {op}")
        k = by_kind.setdefault(label, {"allocations": 0, "allocated_bytes": 0, "frees": 0, "freed_bytes": 0})
        if op == "Allocation":
            k["allocations"] += 1
            k["allocated_bytes"] += nbytes
        else:
            k["frees"] += 1
            k["freed_bytes"] += nbytes
        if label not in DEVICE_MEMORY_KINDS:
            continue
        if op == "Allocation":
            held += nbytes
            allocs += 1
            allocated += nbytes
            largest = max(largest, nbytes)
            peak = max(peak, held)
            if nbytes >= LARGE_ALLOCATION_BYTES:
                large.append(nbytes)
        else:
            held -= nbytes
            frees += 1
            freed += nbytes
    return {
        "peak_bytes": peak,
        "allocations": allocs,
        "allocated_bytes": allocated,
        "frees": frees,
        "freed_bytes": freed,
        "largest_allocation_bytes": largest,
        #: device allocations of LARGE_ALLOCATION_BYTES or more, in time order: how a pool grows
        "large_allocations_bytes": large,
        "by_kind": by_kind,
        "gpu_total_memory_bytes": gpus[0].total_memory_bytes if gpus else None,
    }


def longest_doubling(sizes: list[int]) -> list[int]:
    """The longest run of consecutive sizes each twice the one before (a pool that doubles)."""
    best: list[int] = sizes[:1]
    run: list[int] = sizes[:1]
    for prev, cur in zip(sizes, sizes[1:]):
        run = run + [cur] if cur == 2 * prev else [cur]
        if len(run) > len(best):
            best = run
    return best


def allocations_per_call(ex: Trace, workload: str, variant: str) -> list[int]:
    """Device-memory allocations recorded inside each ``compute`` range (time order)."""
    ranges = _compute_ranges(ex, workload, variant)
    starts = [start for start, _, kind, op in ex.device_memory_events()
              if op == "Allocation" and kind in DEVICE_MEMORY_KINDS]
    return [sum(r.start_ns <= s <= r.end_ns for s in starts) for r in ranges]


# --- JSON records --------------------------------------------------------------------------------

def run_folders(workload_root: str) -> dict[str, dict[int, str]]:
    """variant -> size -> run folder, for the ``<variant>/n<size>/`` folders under the root."""
    if not os.path.isdir(workload_root):
        raise AnalysisInputError(workload_root, "no such capture folder")
    out: dict[str, dict[int, str]] = {}
    for variant in sorted(os.listdir(workload_root)):
        vdir = os.path.join(workload_root, variant)
        if variant == layout.EXPERIMENTS or not os.path.isdir(vdir):
            continue
        for entry in os.listdir(vdir):
            m = re.fullmatch(r"n(\d+)", entry)
            if m and os.path.isdir(os.path.join(vdir, entry)):
                out.setdefault(variant, {})[int(m.group(1))] = os.path.join(vdir, entry)
    return out


def timing(run_dir: str) -> dict:
    """The timed run's record (``timing.json``): median etc. under ``timing``, the declared ``work``."""
    rec = load_json(os.path.join(run_dir, layout.TIMING))
    if "timing" not in rec or "work" not in rec:
        raise AnalysisInputError(os.path.join(run_dir, layout.TIMING), "not a timed run's record (no timing/work)")
    return rec


def ceilings(workload_root: str) -> dict:
    """The ``ceilings`` mapping of the run's ceilings.json: the recipe's own when it was merged into
    the reference from a later run (analysis.readers.captures.merge_reference), else the one beside its folder."""
    path = os.path.join(workload_root, layout.CEILINGS)
    if not os.path.isfile(path):
        path = os.path.join(os.path.dirname(os.path.normpath(workload_root)), layout.CEILINGS)
    rec = load_json(path)
    if "ceilings" not in rec:
        raise AnalysisInputError(path, "no 'ceilings' mapping")
    return rec["ceilings"]


def allocator_experiment(workload_root: str) -> dict:
    """``experiments/allocator/allocator.json`` with each setting's nsys memory numbers added
    (``device_memory``, ``allocations_per_call``; None where nsys made no export, ``nsys_error``)."""
    exp_dir = os.path.join(workload_root, layout.EXPERIMENTS, "allocator")
    path = os.path.join(exp_dir, "allocator.json")
    rec = load_json(path)
    settings = rec.get("settings")
    if not isinstance(settings, list) or not settings:
        raise AnalysisInputError(path, "no 'settings' list")
    for s in settings:
        for key in ("setting", "sqlite", "run"):
            if key not in s:
                raise AnalysisInputError(path, f"a setting lacks {key!r}")
        if s["sqlite"] is None:
            # nsys made no export for this setting; the record says why (nsys_error)
            if not s.get("nsys_error"):
                raise AnalysisInputError(path, f"setting {s['setting']}: no sqlite and no nsys_error")
            s["device_memory"] = None
            s["allocations_per_call"] = None
            continue
        sqlite = existing_capture(exp_dir, s["sqlite"])
        if sqlite is None:
            raise AnalysisInputError(os.path.join(exp_dir, s["sqlite"]), "no such file (nor .gz)")
        with Trace(sqlite) as ex:
            s["device_memory"] = device_memory(ex)
            s["allocations_per_call"] = allocations_per_call(ex, rec.get("recipe", "jax_matmul"),
                                                             s["run"]["variant"])
    return rec
