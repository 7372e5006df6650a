"""Read an Nsight Compute report (``.ncu-rep``) into one record per profiled launch.

Uses NVIDIA's ``ncu_report`` module: the ``ncu-report`` package from PyPI (no
ncu install needed), else the copy under an Nsight Compute install's
``extras/python``, always in a child process (analysis/readers/ncu_child.py: the native
module aborts on damaged reports). Values are converted to the units the suite uses
everywhere: durations in ns, percentages as 0-100, bytes as bytes.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import os
import re
import shutil
import subprocess
import zlib
from typing import Any

from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import open_capture_text, plain_file, text_capture_exists
from analysis.readers.ncu_child import NCU_REP_MAGIC, import_ncu_report, read_report
from analysis.readers.ncu_metrics import METRICS
from analysis.readers.ncu_metrics import FALLBACK_METRICS, STALL_METRICS
from analysis.readers.ncu_metrics import TENSOR_PRECISIONS

#: the metrics every summary carries, named as ncu names them
SUMMARY_METRICS = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
)
#: further metrics the reports use when the report holds them (``--set full`` does)
EXTRA_METRICS = (
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "launch__waves_per_multiprocessor",
    "sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    # collected by the InstructionStats section alone: see INSTRUMENTED_MARKER
    "smsp__inst_executed.sum",
)
#: the sections of ``--set full`` whose passes patch the kernel's code (source counters, instruction
#: mix): most of a large kernel's profiling time (docs/measurement.md), and no report page but the
#: kernel pages reads their metrics
INSTRUMENTED_SECTIONS = ("SourceCounters", "InstructionStats")
#: a metric only InstructionStats collects: a launch without it was profiled without the
#: instrumented sections (a recipe's ``ncu: sections:`` in its profile.yaml)
INSTRUMENTED_MARKER = "smsp__inst_executed.sum"

#: how a launch was profiled (Launch.collection): every section of ``--set full``; the full set less some
#: sections (a recipe's ``ncu: sections:``; Launch.sections_left_out names them); or only the metrics the
#: analysis reads (:func:`metrics_only_args`), which carries none of ncu's rule results
COLLECTION_FULL = "full"
COLLECTION_SECTIONS = "full_set_less"
COLLECTION_METRICS = "metrics"
#: the sections of ``--set full`` in Nsight Compute 2025.3.1 (``ncu --list-sets``), by identifier: what
#: a launch profiled with a recipe's own list is said to lack
FULL_SET_SECTIONS = (
    "ComputeWorkloadAnalysis", "InstructionStats", "LaunchStats", "MemoryWorkloadAnalysis",
    "MemoryWorkloadAnalysis_Chart", "MemoryWorkloadAnalysis_Tables", "NumaAffinity", "Nvlink_Tables",
    "Nvlink_Topology", "Occupancy", "PmSampling", "SchedulerStats", "SourceCounters", "SpeedOfLight",
    "SpeedOfLight_HierarchicalDoubleRooflineChart", "SpeedOfLight_HierarchicalHalfRooflineChart",
    "SpeedOfLight_HierarchicalSingleRooflineChart", "SpeedOfLight_HierarchicalTensorRooflineChart",
    "SpeedOfLight_RooflineChart", "WarpStateStats", "WorkloadDistribution",
)
#: the section the metrics-only collection adds: the limiter's ``derived__`` bandwidths (L2 to the
#: crossbar, L1 writeback) cannot be asked for with ``--metrics``, and this section computes them
#: without a pass of its own (H100, ncu 2025.3.1: 15 passes with it or without it)
METRICS_ONLY_SECTIONS = ("SpeedOfLight_HierarchicalDoubleRooflineChart",)

#: what ncu's roofline counts FLOPs from (``--set full``): executed FP instructions per cycle,
#: summed over the SM sub-partitions, times the elapsed cycles; an FMA counts two
FLOP_METRICS = (
    "smsp__sass_thread_inst_executed_op_dadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_dmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_dfma_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum.per_cycle_elapsed",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum.per_cycle_elapsed",
    "smsp__cycles_elapsed.avg",
    "launch__sm_count",
)

def _limiter_metrics() -> tuple[str, ...]:
    # analysis.model.limiter owns the names it classifies launches by; imported late (it imports nothing
    # from here, but keeping the reader importable on its own costs nothing)

    return METRICS


def analysis_metrics() -> tuple[str, ...]:
    """Every metric the analysis asks ncu for (the summaries, the FLOP count, the limiter)."""
    return tuple(dict.fromkeys(SUMMARY_METRICS + EXTRA_METRICS + FLOP_METRICS + _limiter_metrics()))


#: what ncu records about its own replay of each launch, in every report whatever was collected: the
#: passes it replayed the kernel for, and the device memory it saved before them and restored between
#: them (analysis.cli.pipeline_time: what a profiled step cost)
REPLAY_METRICS = ("profiler__replayer_passes", "profiler__replayer_bytes_mem_backed_up.sum")


def read_metrics() -> tuple[str, ...]:
    """Every metric the readers take from a launch: the analysis', ncu's replay record and, where the
    report holds them, the warp stall reasons and the breakdown's names in reports of other sets
    (analysis.readers.ncu_metrics.STALL_METRICS, FALLBACK_METRICS; never asked for by the metrics-only
    collection)."""

    extra = REPLAY_METRICS + STALL_METRICS + FALLBACK_METRICS
    return analysis_metrics() + tuple(m for m in extra if m not in analysis_metrics())


#: what a metrics-only launch lacks when its recipe's ``ncu.tensor_ops`` is false (Launch.metrics_left_out)
TENSOR_OPS_LEFT_OUT = "tensor-core operation counts"


def tensor_ops_metrics() -> tuple[str, ...]:
    """The tensor-core operation counts by input precision and their peaks (analysis.model.limiter's
    TENSOR_PRECISIONS): what names the precision of a tensor-pipe limiter and places tensor-core work
    on the roofline. The tensor pipe's own activity is another metric, collected either way."""

    return tuple(m for _, ops, peaks in TENSOR_PRECISIONS for m in (ops, *peaks))


def metrics_only_args(tensor_ops: bool = True) -> list[str]:
    """ncu arguments that collect what the recipe pages read and nothing else: the metrics (less the
    ``derived__`` ones, which METRICS_ONLY_SECTIONS computes, and the instrumented marker, which only
    kernel pages read) and that section. On an H100 (ncu 2025.3.1, a CuPy elementwise kernel on 6 GiB)
    one launch took 15 passes and 2.8 s of process wall time against 38 passes and 7.8 s under
    ``--set full``, and the metrics the two shared differed by at most 0.27%.

    ``tensor_ops`` False leaves out :func:`tensor_ops_metrics`, for a recipe whose kernels run no
    tensor-core operations (``ncu.tensor_ops`` in its profile.yaml): they cost 4 of the 15 passes
    (docs/measurement.md)."""
    left_out = set() if tensor_ops else set(tensor_ops_metrics())
    names = [m for m in analysis_metrics()
             if not m.startswith("derived__") and m != INSTRUMENTED_MARKER and m not in left_out]
    return ["--metrics", ",".join(names), *(a for s in METRICS_ONLY_SECTIONS for a in ("--section", s))]



#: unit -> factor to the suite's unit (time: ns; bytes: bytes)
_UNIT_SCALE = {
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
}

# ncu_report.MsgType_* values
_MSG_TYPES = {0: "none", 1: "ok", 2: "optimization", 3: "warning", 4: "error"}


@dataclasses.dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # "optimization" | "warning" | ...
    title: str
    message: str
    estimated_speedup_pct: float | None


#: where a launch's ``kernel_name`` came from (see :func:`printed_kernel_names`)
NAMES_FROM_RAW_PAGE = "ncu's raw page"
NAMES_FROM_NCU = "ncu --import"
NAMES_FROM_REPORT_MODULE = "ncu_report's demangled name, shortened by the suite"


@dataclasses.dataclass(frozen=True)
class Launch:
    id: int
    #: the name as ncu prints it (its raw page), unless ``name_source`` says otherwise
    kernel_name: str
    demangled_name: str
    metrics: dict[str, float | int | None]
    findings: tuple[Finding, ...]
    name_source: str = NAMES_FROM_RAW_PAGE
    #: the kernel's symbol (what nsys' kernel table also records); empty when read from a raw page
    mangled_name: str = ""
    #: the identifiers of the sections ncu collected for the launch; None when read from a raw page
    sections: tuple[str, ...] | None = None

    @property
    def collection(self) -> str:
        """How ncu profiled the launch: :data:`COLLECTION_FULL`, :data:`COLLECTION_SECTIONS` (the full set
        less :attr:`sections_left_out`) or :data:`COLLECTION_METRICS`. A raw page names no sections: its
        launches count as sectioned ones, with or without the instrumented sections by
        :data:`INSTRUMENTED_MARKER` (the metrics-only collection leaves the marker out, and its reports
        are kept whole)."""
        if self.sections is not None and "SpeedOfLight" not in self.sections:
            return COLLECTION_METRICS
        return COLLECTION_SECTIONS if self.sections_left_out else COLLECTION_FULL

    @property
    def sections_left_out(self) -> tuple[str, ...]:
        """The sections of the full set (:data:`FULL_SET_SECTIONS`) ncu did not collect for a sectioned
        launch, in that order; from a raw page, the instrumented ones or none (by the marker); () for a
        metrics-only launch, which had no sections to leave out."""
        if self.sections is None:
            return () if self.metrics.get(INSTRUMENTED_MARKER) is not None else INSTRUMENTED_SECTIONS
        if "SpeedOfLight" not in self.sections:
            return ()
        return tuple(s for s in FULL_SET_SECTIONS if s not in self.sections)

    @property
    def metrics_left_out(self) -> tuple[str, ...]:
        """For a metrics-only launch, the group of the pages' metrics it was not asked for:
        :data:`TENSOR_OPS_LEFT_OUT` when none of :func:`tensor_ops_metrics` came (a recipe's
        ``ncu.tensor_ops`` false); () otherwise, and for every other collection."""
        if self.collection != COLLECTION_METRICS:
            return ()
        return (TENSOR_OPS_LEFT_OUT,) if all(self.metrics.get(m) is None for m in tensor_ops_metrics()) else ()


def cli_kernel_name(demangled: str) -> str:
    """The suite's shortening of a demangled name toward the form ``ncu --page raw`` prints
    (Nsight Compute 2025.3): without the function's namespace, ABI tags ("abi:") or casts on
    integer template arguments ("(int)1"), which ncu_report's own demangler keeps. It equals ncu's
    name for C-named kernels (CuPy, PyCUDA, Warp, XLA, cuBLAS) and Numba's; ncu shortens C++
    namespaces in a way no rule over the name reproduces (see :func:`raw_page_beside`), so it is
    the fallback where :func:`printed_kernel_names` has nothing."""
    name = demangled.replace("abi:", "")
    name = re.sub(r"\((?:unsigned )?(?:int|long|long long|short|char|bool)\)(?=-?\d)", "", name)
    depth, cut = 0, 0
    for i, ch in enumerate(name):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            cut = i + 2
    return name[cut:]


def counted_flops(metrics: dict) -> dict[str, int] | None:
    """FP64 and FP32 floating-point operations the launch executed, as ncu's roofline counts them
    (adds and multiplies one, FMAs two); None when the report lacks the metrics."""
    cycles = metrics.get("smsp__cycles_elapsed.avg")
    per_cycle = {m: metrics.get(f"smsp__sass_thread_inst_executed_op_{m}_pred_on.sum.per_cycle_elapsed")
                 for m in ("dadd", "dmul", "dfma", "fadd", "fmul", "ffma")}
    if cycles is None or any(v is None for v in per_cycle.values()):
        return None
    fp64 = (per_cycle["dadd"] + per_cycle["dmul"] + 2 * per_cycle["dfma"]) * cycles
    fp32 = (per_cycle["fadd"] + per_cycle["fmul"] + 2 * per_cycle["ffma"]) * cycles
    return {"fp64": int(round(fp64)), "fp32": int(round(fp32))}


def _metric_value(metric) -> float | int | str | None:
    if metric is None or not metric.has_value():
        return None
    unit = metric.unit() or ""
    kind = metric.kind()
    if kind == metric.ValueKind_STRING:
        return metric.as_string()
    if kind in (metric.ValueKind_UINT32, metric.ValueKind_UINT64) and unit not in _UNIT_SCALE:
        return int(metric.as_uint64())
    value = float(metric.as_double())
    return value * _UNIT_SCALE.get(unit, 1.0)


_MARKUP = re.compile(r"@(section|url):([^@]*)@")


def clean_message(text: str) -> str:
    """ncu rule messages carry GUI links (``@section:Id:Name@``, ``@url:Title:URL@``): keep the words."""
    def repl(m: re.Match) -> str:
        kind, body = m.group(1), m.group(2)
        if kind == "url":
            title, _, url = body.partition(":")
            return f"{title} ({url})" if url else title
        return body.split(":", 1)[-1]

    return _MARKUP.sub(repl, text)


def _findings(action) -> tuple[Finding, ...]:
    out = []
    for r in action.rule_results():
        if not r.has_rule_message():
            continue
        msg = r.rule_message()  # a dict: title, message, type
        severity = _MSG_TYPES.get(int(msg.get("type", 0)), str(msg.get("type")))
        if severity in ("none", "ok"):
            continue
        est = r.speedup_estimation() if r.has_speedup_estimation() else None
        speedup = float(est["speedup"]) if isinstance(est, dict) and "speedup" in est else None
        out.append(Finding(r.rule_identifier(), severity, msg.get("title", ""),
                           clean_message(msg.get("message", "")), speedup))
    return tuple(out)


def read_launches(path: str | os.PathLike, raw_page: str | None = None) -> list[Launch]:
    """Every profiled launch in the report, in profiling order (ncu's ID), named as ncu prints
    them where ncu's own names can be had (:func:`printed_kernel_names`)."""
    path = str(path)
    launches = read_report("launches", path)
    names, source = printed_kernel_names(path, raw_page)
    if names is None:
        return [dataclasses.replace(x, name_source=NAMES_FROM_REPORT_MODULE) for x in launches]
    if [i for i, _ in names] != [x.id for x in launches]:
        raise AnalysisInputError(source, f"its launches (IDs {_id_span([i for i, _ in names])}) are not those of "
                                         f"{path} (IDs {_id_span([x.id for x in launches])}): a raw page of "
                                         "another report?")
    return [dataclasses.replace(x, kernel_name=name, name_source=NAMES_FROM_NCU if source == "ncu" else
                                NAMES_FROM_RAW_PAGE) for x, (_, name) in zip(launches, names)]


def _id_span(ids: list[int]) -> str:
    return f"{ids[0]}-{ids[-1]}, {len(ids)} launches" if ids else "none"


# Why ncu's printed names are read, not derived: ncu 2025.3 shortens the C++ namespaces of a
# demangled name with state of its own. One kernel symbol,
# _ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_25bfloat16_copy_kernel_cudaE..., printed as
# "void at::vectorized_elementwise_kernel<8, at::bfloat16_copy_kernel_cuda(..." in one report and as
# "void native::vectorized_elementwise_kernel<8, native::bfloat16_copy_kernel_cuda(..." in another,
# from the same ncu version on the same GPU model (tests/test_thirdparty_captures.py shows it). No rule over the
# symbol alone can give both; ncu_report's name API has no base that gives either.
def raw_page_beside(path: str) -> str | None:
    """ncu's raw page saved next to the report: ``<stem>-raw.csv`` (the pipeline's ``ncu-raw.csv``
    beside ``ncu.ncu-rep``) or ``<stem>_raw.csv``, plain or gzipped; None when there is none."""
    folder, base = os.path.split(path)
    stem = re.sub(r"\.ncu-rep(\.gz)?$", "", base)
    for name in (f"{stem}-raw.csv", f"{stem}_raw.csv"):
        candidate = os.path.join(folder, name)
        if text_capture_exists(candidate):
            return candidate
    return None


def parse_raw_page_names(text: str, source: str) -> list[tuple[int, str]]:
    """(ID, Kernel Name) of each launch row of ncu's raw page as CSV text (header, units, rows);
    lines ncu writes before the table (``==PROF==``, ``==WARNING==``) are skipped."""
    lines = text.splitlines(keepends=True)
    while lines and lines[0].startswith("=="):
        lines.pop(0)
    rows = list(csv.reader(io.StringIO("".join(lines))))
    if len(rows) < 3 or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        raise AnalysisInputError(source, "not ncu's raw page as CSV: no header with ID and Kernel Name, "
                                         "a units row and launch rows")
    i, k = rows[0].index("ID"), rows[0].index("Kernel Name")
    try:
        return [(int(r[i]), r[k]) for r in rows[2:]]
    except (ValueError, IndexError) as e:
        raise AnalysisInputError(source, f"a launch row without an integer ID and a name ({e})") from None


def printed_kernel_names(path: str, raw_page: str | None = None) -> tuple[list[tuple[int, str]] | None, str]:
    """The kernel names ncu prints for the report at ``path``, by launch ID, and where they came
    from: ``raw_page`` if given, else the raw page saved beside the report, else the installed
    ``ncu`` (``ncu --import``). ``(None, "")`` where neither exists: the caller keeps the suite's
    shortening of ncu_report's demangled name, which matches ncu for C-named kernels (CuPy, PyCUDA,
    Warp, XLA, cuBLAS) and Numba's, not always for C++ namespaces."""
    page = raw_page or raw_page_beside(path)
    if page:
        if not text_capture_exists(page):
            raise AnalysisInputError(page, "no such file (nor .gz)")
        with open_capture_text(page, newline="") as f:
            return parse_raw_page_names(f.read(), page), page
    exe = shutil.which("ncu")
    if exe is None:
        return None, ""
    with plain_file(path) as plain:
        try:
            done = subprocess.run([exe, "--import", plain, "--page", "raw", "--csv", "--metrics", "launch__grid_size"],
                                  capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            raise AnalysisInputError(path, "ncu --import took over 300 s") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise AnalysisInputError(path, f"ncu --import exited {done.returncode}: {last}")
    return parse_raw_page_names(done.stdout, f"{path} (ncu --import)"), "ncu"


#: a report that loads with no launch: ncu writes no report file when its -k/-c filters match no
#: kernel, so an empty one was cut short or damaged
NO_LAUNCHES = ("damaged report: it holds no profiled kernel launch (truncated or damaged; ncu writes no "
               "report when its -k/-c filters match no kernel)")


def load_actions(path: str, plain: str) -> tuple[Any, list]:
    """(report context, its profiled launches in ncu's ID order) of the plain file ``plain`` that
    ``path`` names; the context must outlive the actions. Typed errors name ``path``. Runs in the
    reader's child process only (analysis/readers/ncu_child.py)."""
    with open(plain, "rb") as f:
        head = f.read(64)
    if not head.startswith(NCU_REP_MAGIC):
        raise AnalysisInputError(path, "not an Nsight Compute report (.ncu-rep): wrong magic bytes")
    try:
        ncu_report = import_ncu_report()
    except ImportError as e:
        raise AnalysisInputError(path, str(e)) from None
    try:
        ctx = ncu_report.load_report(plain)
    except Exception as e:  # the module raises plain exceptions for unreadable files
        raise AnalysisInputError(path, f"not a readable Nsight Compute report ({e})") from None
    actions = [ctx.range_by_idx(r).action_by_idx(a)
               for r in range(ctx.num_ranges()) for a in range(ctx.range_by_idx(r).num_actions())]
    return ctx, actions


def _read_plain(path: str, plain: str) -> list[Launch]:
    _ctx, actions = load_actions(path, plain)
    launches: list[Launch] = []
    for action in actions:
        metrics: dict[str, Any] = {}
        for name in read_metrics():
            metrics[name] = _metric_value(action.metric_by_name(name))
        launches.append(Launch(
            id=len(launches),
            kernel_name=cli_kernel_name(action.name(action.NameBase_DEMANGLED) or ""),
            demangled_name=action.name(action.NameBase_DEMANGLED),
            metrics=metrics,
            findings=_findings(action),
            mangled_name=action.name(action.NameBase_MANGLED) or "",
            sections=tuple(section.identifier() for section in action.sections()),
        ))
    if not launches:
        raise AnalysisInputError(path, NO_LAUNCHES)
    for launch in launches:
        # a truncated file still loads: its last launch comes back without a name or metrics
        if not launch.kernel_name or all(launch.metrics[m] is None for m in SUMMARY_METRICS):
            raise AnalysisInputError(path, f"launch {launch.id} has no kernel name or metrics: the report is "
                                           "truncated or damaged")
    return launches


#: ncu's raw page (``ncu --page raw --csv``) prints each value in a unit scaled for reading
#: ("Kbyte/cycle", "Tbyte", "ms"); these are the factors back to the units the report module gives
#: (bytes, hertz, ns), so that both readers give the same numbers
_RAW_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
_RAW_TIME_NS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
                "s": 1e9, "second": 1e9}
_RAW_PER_TIME = {"ns": 1e9, "us": 1e6, "ms": 1e3, "s": 1.0}


def _raw_scale(unit: str) -> float:
    if unit in _RAW_TIME_NS:
        return _RAW_TIME_NS[unit]
    head, _, per = unit.partition("/")
    scale = 1.0
    m = re.fullmatch(r"([KMGT]?)(byte|hz)", head)
    if m:
        scale = _RAW_PREFIX[m.group(1)]
    elif head in ("Ghz", "Mhz", "Khz"):
        scale = _RAW_PREFIX[head[0]]
    return scale * _RAW_PER_TIME.get(per, 1.0)


def _raw_value(text: str, unit: str) -> float | int | str | None:
    text = text.strip()
    if not text or text == "n/a":
        return None
    plain = text.replace(",", "")
    try:
        value = float(plain)
    except ValueError:
        return text
    scale = _raw_scale(unit)
    if scale == 1.0 and re.fullmatch(r"-?\d+", plain):
        return int(plain)
    return value * scale


def read_raw_csv(path: str | os.PathLike) -> list[Launch]:
    """The launches of ncu's raw page saved as CSV (``ncu --page raw --csv``, the suite's
    ``ncu-raw.csv``), with the same metric names and units as :func:`read_launches`. The raw page
    carries no rule results: every launch's ``findings`` is empty."""
    path = str(path)
    if not text_capture_exists(path):
        raise AnalysisInputError(path, "no such file (nor .gz)")
    try:
        with open_capture_text(path, newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise AnalysisInputError(path, f"not readable ({e})") from None
    if len(rows) < 3 or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        raise AnalysisInputError(path, "not ncu's raw page as CSV: no header with ID and Kernel Name, "
                                       "a units row and launch rows")
    header, units = rows[0], rows[1]
    col = {name: i for i, name in enumerate(header)}
    wanted = read_metrics()
    missing = [n for n in SUMMARY_METRICS if n not in col]
    if missing:
        raise AnalysisInputError(path, f"raw page lacks {', '.join(missing)}")
    launches = []
    for row in rows[2:]:
        if len(row) != len(header):
            raise AnalysisInputError(path, f"row {len(launches) + 3} has {len(row)} cells, the header {len(header)}")
        name = row[col["Kernel Name"]]
        metrics = {n: (_raw_value(row[col[n]], units[col[n]]) if n in col else None) for n in wanted}
        launches.append(Launch(id=int(row[col["ID"]]), kernel_name=name, demangled_name=name,
                               metrics=metrics, findings=()))
    if not launches:
        raise AnalysisInputError(path, "raw page holds no profiled kernel launches")
    return launches
