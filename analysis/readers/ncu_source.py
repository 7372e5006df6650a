"""Read one profiled kernel of an Nsight Compute report down to its source lines.

What Nsight Compute's *Source* page shows, as numbers: for the kernel's key metrics (duration,
DRAM and SM throughput, occupancy, registers, where the warps stalled) and, per source line, the
source counters ncu collected per instruction address (``--set full`` includes them):

``smsp__pcsamp_sample_count``
    warp-state samples taken at the instruction (PC sampling); one per sampled warp, whatever
    its state. The per-reason metrics ``smsp__pcsamp_warps_issue_stalled_<reason>`` split it:
    their sum over the reasons is the sample count (``selected`` = the warp was issuing), and the
    ``..._not_issued`` variants count the samples in which no warp issued.
``inst_executed``
    warp-level SASS instructions executed at the instruction.
``memory_l2_theoretical_sectors_global``
    32-byte L2 sectors the global loads/stores at the instruction need (ideal, from the
    addresses), present for memory instructions only.

Each of these metrics has one *instance* per instruction address, and its correlation ids are
those addresses; ``IAction.source_info(address)`` gives the file and line the compiler's line
information assigns to the address (None without ``-lineinfo``), and ``IAction.source_files()``
the text ncu imported (``--import-source yes``; an empty string when the file could not be found
at capture time). Summed over addresses, each instance metric equals its kernel-level value.

Numba's kernels (``lineinfo=True``) name the Python files themselves: the debug information holds
each function's file as directory and base name, which NVVM writes as one absolute path in the PTX's
``.file`` lines (``<checkout>/workloads/numba_ufunc/body.py``, and Numba's own ``numbers.py`` for the
integer power ``x ** 2``); ncu imports them from there at capture time, and the page shows the suite's
files from ``workloads/`` on (analysis/report/kernel_page.py).
PyCUDA's kernels and CuPy's raw kernel are compiled with a ``#line`` directive in front of their
source (workloads/cuda_source.py): their lines are those of the Python file that holds the CUDA
text, which ncu imports like any other file, so the text comes from the report wherever it is read.
Warp's generated CUDA (``warp.config.line_directives = False``) is correlated to the ``.cu`` file
in the kernel cache; Warp writes each Python statement above its CUDA as a comment ending in
``<L n>``, which :func:`warp_python_lines` maps back to the Python line.

Pure: a function of the report file. Values are in the suite's units (ns, bytes, 0-100 %).
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections import defaultdict
from typing import Any

from analysis.common.errors import AnalysisInputError
from analysis.readers.ncu import NO_LAUNCHES, _metric_value, cli_kernel_name, load_actions
from analysis.readers.ncu_child import read_report

#: kernel-level metrics the page shows, named as ncu names them
KEY_METRICS = (
    "gpu__time_duration.sum",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
    "smsp__inst_executed.sum",
    "lts__t_sector_hit_rate.pct",
    "l1tex__t_sector_hit_rate.pct",
    "smsp__pcsamp_sample_count",
    "smsp__pcsamp_interval_cycles",
)

SAMPLES = "smsp__pcsamp_sample_count"
INSTRUCTIONS = "inst_executed"
L2_SECTORS = "memory_l2_theoretical_sectors_global"
STALL_PREFIX = "smsp__pcsamp_warps_issue_stalled_"
NOT_ISSUED_SUFFIX = "_not_issued"

#: a comment Warp writes above the CUDA of one Python statement: ``// <statement>   <L 42>``
_WARP_COMMENT = re.compile(r"^\s*//\s?(?P<text>.*?)\s*<L (?P<line>\d+)>\s*$")


@dataclasses.dataclass(frozen=True)
class PythonLine:
    """The Python statement a line of Warp-generated CUDA came from (Warp's ``<L n>`` comment)."""

    line: int
    text: str


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """One source line and the source counters of every instruction the line information puts there."""

    file: str
    line: int
    #: the line's text from the source imported into the report; None when ncu imported no text
    text: str | None
    #: for Warp-generated CUDA: the Python statement above it; None elsewhere
    python: PythonLine | None
    samples: int
    samples_pct: float
    not_issued_samples: int
    instructions: int
    #: ideal 32-byte L2 sectors of the line's global loads/stores; None: the report has no such metric
    l2_sectors: int | None
    #: SASS instructions (addresses) the line compiled to
    sass_count: int
    #: stall reason -> samples at this line, largest first, zero counts left out
    stalls: tuple[tuple[str, int], ...]


@dataclasses.dataclass(frozen=True)
class Instruction:
    """One SASS instruction and its counters (the page's fallback when there is no line information)."""

    offset: int  # bytes from the kernel's first instruction
    sass: str
    samples: int
    instructions: int
    file: str | None
    line: int | None


@dataclasses.dataclass(frozen=True)
class SourceFile:
    name: str
    #: whether ncu imported the file's text into the report
    imported: bool
    samples: int


@dataclasses.dataclass(frozen=True)
class SourceView:
    """The per-line part of the report. ``has_line_info`` is False when no instruction has a source
    line (compiled without ``-lineinfo``); ``lines`` is then empty and ``reason`` says why."""

    has_line_info: bool
    reason: str
    lines: tuple[SourceLine, ...]
    files: tuple[SourceFile, ...]
    #: samples and instructions at addresses the line information does not cover
    unattributed_samples: int
    unattributed_instructions: int
    #: sums over all addresses (equal the kernel-level values)
    total_samples: int
    total_instructions: int
    hottest_instructions: tuple[Instruction, ...]


@dataclasses.dataclass(frozen=True)
class KernelProfile:
    report: str
    launch: int
    launches_in_report: int
    #: the name as ``ncu -k`` matches it (``--kernel-name-base function``), demangled and mangled
    function_name: str
    display_name: str
    demangled_name: str
    mangled_name: str
    metrics: dict[str, float | int | None]
    #: stall reason -> warp-state samples over the whole kernel, largest first
    stalls: tuple[tuple[str, int], ...]
    source: SourceView


def warp_python_lines(cu_text: str) -> list[PythonLine | None]:
    """For each line of Warp-generated CUDA/C++ (index 0 = line 1): the Python statement whose
    ``// ... <L n>`` comment is the nearest one above it in the same function, else None (code
    Warp adds around the kernel body: the grid-stride loop, declarations). A line starting in
    column 0 that is neither a comment nor a preprocessor line starts or ends a function."""
    current: PythonLine | None = None
    out: list[PythonLine | None] = []
    for raw in cu_text.splitlines():
        m = _WARP_COMMENT.match(raw)
        if m:
            current = PythonLine(int(m.group("line")), m.group("text").strip())
        elif raw and not raw[0].isspace() and not raw.startswith(("//", "#")):
            current = None
        out.append(current)
    return out


def has_warp_comments(cu_text: str) -> bool:
    return any(_WARP_COMMENT.match(line) for line in cu_text.splitlines())


def _instances(action, name: str) -> dict[int, int | float] | None:
    """address -> value of a source-correlated metric; None when the report lacks the metric."""
    m = action.metric_by_name(name)
    if m is None or not m.has_correlation_ids():
        return None
    ids = m.correlation_ids()
    n = m.num_instances()
    if ids.num_instances() != n:
        raise ValueError(f"{name}: {n} values but {ids.num_instances()} addresses")
    out: dict[int, int | float] = {}
    for i in range(n):
        address, value = ids.value(i), m.value(i)
        # a damaged report gives None or strings here; the sums below need numbers
        if not isinstance(address, int) or isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{name}: instance {i} holds {value!r} at address {address!r}, not a number")
        out[address] = value
    return out


def _stall_metrics(action) -> list[str]:
    return sorted(n for n in action.metric_names()
                  if n.startswith(STALL_PREFIX) and not n.endswith(NOT_ISSUED_SUFFIX))


def _file_texts(action) -> dict[str, str]:
    return {str(k): str(v) for k, v in dict(action.source_files()).items()}


def _text_for(files: dict[str, str], name: str) -> str:
    """The imported text of ``name``: exact key, else the one key with the same basename
    (NVRTC programs are named by their basename, ncu may store the path it found)."""
    if name in files:
        return files[name]
    same = [k for k in files if os.path.basename(k) == os.path.basename(name)]
    return files[same[0]] if len(same) == 1 else ""


def _sorted_stalls(counts: dict[str, int | float]) -> tuple[tuple[str, int], ...]:
    items = [(r, int(v)) for r, v in counts.items() if v]
    return tuple(sorted(items, key=lambda kv: (-kv[1], kv[0])))


def _source_view(action, total_samples_metric: int | None) -> SourceView:
    samples = _instances(action, SAMPLES) or {}
    instructions = _instances(action, INSTRUCTIONS) or {}
    l2 = _instances(action, L2_SECTORS)
    stall_names = _stall_metrics(action)
    stalls = {n[len(STALL_PREFIX):]: _instances(action, n) or {} for n in stall_names}
    not_issued = [(_instances(action, n + NOT_ISSUED_SUFFIX) or {}) for n in stall_names]

    addresses = sorted(set(samples) | set(instructions) | set(l2 or {}))
    where: dict[int, tuple[str, int] | None] = {}
    for pc in addresses:
        info = action.source_info(pc)
        where[pc] = (str(info.file_name()), int(info.line())) if info is not None else None

    total_samples = int(sum(samples.values()))
    total_instructions = int(sum(instructions.values()))
    start = min(addresses) if addresses else 0
    fn_pcs = action.metric_by_name("launch__function_pcs")
    if fn_pcs is not None and fn_pcs.num_instances() > 0:
        start = int(fn_pcs.value(0))
    hottest = sorted(addresses, key=lambda pc: (-samples.get(pc, 0), -instructions.get(pc, 0), pc))[:20]
    hottest_instructions = tuple(
        Instruction(pc - start, str(action.sass_by_pc(pc)).strip(), int(samples.get(pc, 0)),
                    int(instructions.get(pc, 0)), *(where[pc] or (None, None)))
        for pc in hottest if samples.get(pc, 0) or instructions.get(pc, 0))

    by_line: dict[tuple[str, int], list[int]] = defaultdict(list)
    for pc in addresses:
        if where[pc] is not None:
            by_line[where[pc]].append(pc)
    unattributed = [pc for pc in addresses if where[pc] is None]
    un_samples = int(sum(samples.get(pc, 0) for pc in unattributed))
    un_instructions = int(sum(instructions.get(pc, 0) for pc in unattributed))

    if not by_line and addresses and _file_texts(action):
        # ncu imports source files only through the line information: files without it mean the
        # line table was lost, not that the kernel was compiled without it
        raise ValueError("the report imported source files, yet no instruction maps to a source line: "
                         "its line information is damaged")
    if not by_line:
        reason = ("no instruction of this kernel maps to a source line: it was compiled without line "
                  "information (Warp: warp.config.lineinfo = True; Numba: @cuda.jit(lineinfo=True); "
                  "PyCUDA and CuPy raw kernels: the -lineinfo compile option)")
        if not addresses:
            reason = "no source counters: the report holds no per-instruction metrics (profile with --set full)"
        return SourceView(False, reason, (), (), un_samples, un_instructions, total_samples, total_instructions,
                          hottest_instructions)

    files = _file_texts(action)
    texts: dict[str, list[str]] = {}
    python_maps: dict[str, list[PythonLine | None]] = {}
    for name in {f for f, _ in by_line}:
        content = _text_for(files, name)
        texts[name] = content.splitlines()
        if content and has_warp_comments(content):
            python_maps[name] = warp_python_lines(content)

    lines = []
    for (name, line), pcs in by_line.items():
        s = int(sum(samples.get(pc, 0) for pc in pcs))
        text_lines = texts[name]
        pmap = python_maps.get(name)
        lines.append(SourceLine(
            file=name,
            line=line,
            text=text_lines[line - 1] if 0 < line <= len(text_lines) else None,
            python=pmap[line - 1] if pmap is not None and 0 < line <= len(pmap) else None,
            samples=s,
            samples_pct=100.0 * s / total_samples if total_samples else 0.0,
            not_issued_samples=int(sum(ni.get(pc, 0) for ni in not_issued for pc in pcs)),
            instructions=int(sum(instructions.get(pc, 0) for pc in pcs)),
            l2_sectors=None if l2 is None else int(sum(l2.get(pc, 0) for pc in pcs)),
            sass_count=len(pcs),
            stalls=_sorted_stalls({r: sum(v.get(pc, 0) for pc in pcs) for r, v in stalls.items()}),
        ))
    lines.sort(key=lambda sl: (-sl.samples, -sl.instructions, sl.file, sl.line))
    file_rows = tuple(sorted(
        (SourceFile(name, bool(_text_for(files, name)), int(sum(sl.samples for sl in lines if sl.file == name)))
         for name in texts),
        key=lambda f: (-f.samples, f.name)))
    if total_samples_metric is not None and total_samples != total_samples_metric:
        raise ValueError(f"per-address samples sum to {total_samples}, the kernel's {SAMPLES} is "
                         f"{total_samples_metric}")
    return SourceView(True, "", tuple(lines), file_rows, un_samples, un_instructions, total_samples,
                      total_instructions, hottest_instructions)


def read_kernel_profile(path: str | os.PathLike, launch: int = 0) -> KernelProfile:
    """The ``launch``-th profiled kernel (ncu's ID) of an ``.ncu-rep`` or ``.ncu-rep.gz``."""
    return read_report("kernel_profile", path, str(launch))


def _read_kernel_profile(path: str, plain: str, launch_arg: str) -> KernelProfile:
    """In the reader's child process (analysis/readers/ncu_child.py)."""
    launch = int(launch_arg)
    _ctx, actions = load_actions(path, plain)
    if not actions:
        raise AnalysisInputError(path, NO_LAUNCHES)
    if not 0 <= launch < len(actions):
        raise AnalysisInputError(path, f"no launch {launch}: the report holds {len(actions)}")
    action = actions[launch]
    metrics: dict[str, Any] = {m: _metric_value(action.metric_by_name(m)) for m in KEY_METRICS}
    if metrics["gpu__time_duration.sum"] is None:
        raise AnalysisInputError(path, f"launch {launch} has no duration: the report is truncated or damaged")
    stall_totals = {n[len(STALL_PREFIX):]: _metric_value(action.metric_by_name(n)) or 0
                    for n in _stall_metrics(action)}
    try:
        source = _source_view(action, metrics[SAMPLES])
    except ValueError as e:
        raise AnalysisInputError(path, f"damaged report: launch {launch}'s source counters are inconsistent "
                                       f"({e})") from None
    demangled = str(action.name(action.NameBase_DEMANGLED))
    return KernelProfile(
        report=path,
        launch=launch,
        launches_in_report=len(actions),
        function_name=str(action.name(action.NameBase_FUNCTION)),
        display_name=cli_kernel_name(demangled),
        demangled_name=demangled,
        mangled_name=str(action.name(action.NameBase_MANGLED)),
        metrics=metrics,
        stalls=_sorted_stalls(stall_totals),
        source=source,
    )


def kernel_names(path: str | os.PathLike) -> list[str]:
    """The function names (what ``ncu -k`` matches) of every profiled kernel in the report, in order."""
    return read_report("kernel_names", path)


def _kernel_names(path: str, plain: str) -> list[str]:
    _ctx, actions = load_actions(path, plain)
    return [str(a.name()) for a in actions]
