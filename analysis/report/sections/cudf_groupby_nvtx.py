"""Report section of ``cudf_groupby``: cuDF's own NVTX ranges inside the suite's, the groupby passes
each step runs, and the time it spends allocating.

Inputs: each step's run folder ``<workload_root>/<variant>/n<size>/`` (the largest size), its
``nsys.sqlite`` (or ``.gz``), captured with ``-t cuda,nvtx``. For every steady call (a
``cookbook`` range ``cudf_groupby/<variant>/compute`` with call index payload >= 1; call 0 pays
for first-use work) it reads:

- the NVTX ranges nested in the call (:mod:`analysis.readers.nvtx_tree`): cuDF's Python layer annotates in
  the domain ``cudf_python`` (``_performance_tracking``: one range per public method, named by its
  qualified name), libcudf in ``libcudf`` (``CUDF_FUNC_RANGE``: one range per public function,
  named by the C++ function's bare name), and CUB algorithms may add ``CCCL`` ranges;
- **groupby passes**: libcudf ranges named ``aggregate`` (``cudf::groupby::groupby::aggregate``,
  the entry of every hash or sort groupby aggregation) not nested in another such range. As a
  cross-check, **aggregation kernels**: kernels launched from the call whose demangled name holds
  ``single_pass`` (libcudf's hash groupby runs exactly one per aggregate: the shared-memory kernel
  ``single_pass_shmem_aggs_kernel``, or a ``for_each`` over ``compute_single_pass_aggs_*_fn``);
- **allocation**: cudaMalloc/cudaFree-family CUDA API calls (runtime and driver, sync and async,
  :data:`analysis.readers.nsys.trace.ALLOCATION_APIS`) made on the call's thread inside the call, counted
  and timed as the rest of the suite counts them (:func:`analysis.model.breakdown.allocations`). RMM's
  pool sub-allocates without any CUDA call: with a pool large enough, the count is zero.

Parsing (files to dataclasses) is :func:`read_run` / :func:`read_workload`; :func:`markdown` and
:func:`timeline_figure` present; :func:`render` is the entry point the report calls.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import re
import statistics
from typing import Sequence

import numpy as np

from analysis.common import layout
from analysis.readers.nsys import columns as cols
from analysis.model.breakdown import allocations
from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.trace import Trace
from analysis.readers.nvtx_tree import NvtxTree, OutlineRow, TreeRange, domain_totals, outline, read_tree
from workloads.cudf_groupby import RECIPE  # the recipe's definition only: no cuDF import
from analysis.report import mdtext

WORKLOAD = RECIPE.name

#: what render() reads, relative to the capture folder, beyond the run folders (inputs of the run summaries): the report rule's inputs
INPUTS: tuple[str, ...] = ()
#: the figures render() writes into its figure folder (the report rule's outputs)
FIGURES: tuple[str, ...] = ("cudf_groupby_nvtx.png",)
SUITE_DOMAIN = "cookbook"
LIBCUDF = "libcudf"
CUDF_PYTHON = "cudf_python"
#: libcudf's groupby entry: NVTX3_FUNC_RANGE names a range by __func__ ("aggregate"); a pretty name
#: ("cudf::groupby::groupby::aggregate(...)") matches too
GROUPBY_RANGE = re.compile(r"(?:^|[\s:])aggregate(?:\(|$)")
#: libcudf's hash-groupby aggregation kernels (one per aggregate call)
AGGREGATION_KERNEL = re.compile(r"single_pass")
#: outline rows shown per step before the rest is summarized in one line
MAX_OUTLINE_ROWS = 60
DOMAIN_COLORS = {SUITE_DOMAIN: "#2ca02c", CUDF_PYTHON: "#1f77b4", LIBCUDF: "#ff7f0e", "CCCL": "#9467bd"}
OTHER_COLOR = "#7f7f7f"
ALLOC_COLOR = "#d62728"


@dataclasses.dataclass(frozen=True)
class CallNvtx:
    """One steady compute call of a step."""

    payload: int
    duration_ns: int
    groupby_passes: int
    aggregation_kernels: int
    kernels: int
    allocation_calls: int
    allocation_ns: int
    #: domain -> {"ranges", "total_ns", "min_depth", "max_depth"} inside the call
    domains: dict


@dataclasses.dataclass(frozen=True)
class Bar:
    """A range of the outlined call, for the timeline figure: times relative to the call's start."""

    start_ns: int
    end_ns: int
    depth: int
    domain: str | None
    name: str


@dataclasses.dataclass(frozen=True)
class RunNvtx:
    variant: str
    size: int
    sqlite: str
    calls: tuple[CallNvtx, ...]
    outline_payload: int
    outline: tuple[OutlineRow, ...]
    #: (api, calls, ns) over all steady calls
    allocation_by_api: tuple[tuple[str, int, int], ...]
    bars: tuple[Bar, ...]
    allocation_marks: tuple[tuple[int, int], ...]


# --- parsing ----------------------------------------------------------------------------------------


def steady_compute_ranges(tree: NvtxTree, workload: str, variant: str) -> list[TreeRange]:
    name = f"{workload}/{variant}/compute"
    steady = [r for r in tree.find(domain=SUITE_DOMAIN, name=name) if r.payload is not None and r.payload >= 1]
    if not steady:
        raise AnalysisInputError(tree.path, f"no steady {SUITE_DOMAIN}:{name} range (call index payload >= 1): "
                                            "the run needs --calls 2 or more and nsys -t nvtx")
    return sorted(steady, key=lambda r: r.payload)


def groupby_passes(tree: NvtxTree, root: TreeRange) -> int:
    """libcudf ``aggregate`` ranges inside ``root`` that no other such range encloses."""
    n = 0
    for r in tree.subtree(root.index)[1:]:
        if r.domain == LIBCUDF and GROUPBY_RANGE.search(r.name):
            outer = [a for a in tree.ancestors(r.index)
                     if a.depth > root.depth and a.domain == LIBCUDF and GROUPBY_RANGE.search(a.name)]
            n += not outer
    return n


def _kernels_in(ex: Trace, ranges: Sequence[TreeRange]) -> list[list[str]]:
    """Per range: demangled names of the kernels launched from it (its thread, calls inside it)."""
    trace = cols.launches(ex)
    per = cols.ops_in_ranges(trace, ranges)
    ids = np.unique(np.concatenate([trace.ops.name[i][trace.ops.kind[i] == cols.KERNEL] for i in per]
                                   or [np.zeros(0, np.int64)]))
    names = cols.string_ids(ex, ids) if len(ids) else {}
    return [[names[int(n)] for n in trace.ops.name[i][trace.ops.kind[i] == cols.KERNEL]] for i in per]


def _allocation_marks(ex: Trace, r: TreeRange) -> list[tuple[int, int]]:
    calls, _ = cols.calls_named(ex, cols.is_allocation_api)
    mask = (calls.tid == r.global_tid) & (calls.start >= r.start_ns) & (calls.end <= r.end_ns)
    starts, ends = calls.start[mask] - r.start_ns, calls.end[mask] - r.start_ns
    return [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]


def read_run(run_dir: str, variant: str, workload: str = WORKLOAD,
             require_domain: str | None = LIBCUDF) -> RunNvtx:
    """The NVTX, pass and allocation record of one step's run folder. ``require_domain``: a domain
    whose ranges must appear inside the steady calls (a cuDF capture without libcudf ranges was
    taken without NVTX tracing, and would report zero passes)."""
    sqlite = layout.nsys_export(run_dir)
    m = re.fullmatch(r"n(\d+)", os.path.basename(os.path.normpath(run_dir)))
    if m is None:
        raise AnalysisInputError(run_dir, "run folder is not named n<size>")
    with Trace(sqlite) as ex:
        tree = read_tree(ex)
        steady = steady_compute_ranges(tree, workload, variant)
        kernels = _kernels_in(ex, steady)
        alloc = allocations(ex, hot=steady)
        calls = []
        for r, names, n_alloc, ns_alloc in zip(steady, kernels, alloc["per_hot_range_calls"],
                                               alloc["per_hot_range_ns"], strict=True):
            calls.append(CallNvtx(
                payload=r.payload, duration_ns=r.duration_ns, groupby_passes=groupby_passes(tree, r),
                aggregation_kernels=sum(bool(AGGREGATION_KERNEL.search(k)) for k in names), kernels=len(names),
                allocation_calls=n_alloc, allocation_ns=ns_alloc, domains=domain_totals(tree, r.index)))
        if require_domain is not None and not any(require_domain in c.domains for c in calls):
            raise AnalysisInputError(sqlite, f"no {require_domain} NVTX ranges inside the steady compute ranges of "
                                             f"{workload}/{variant}: not a cuDF run, or nsys ran without -t nvtx")
        first = steady[0]
        bars = tuple(Bar(r.start_ns - first.start_ns, r.end_ns - first.start_ns, r.depth - first.depth,
                         r.domain, r.name) for r in tree.subtree(first.index))
        marks = tuple(_allocation_marks(ex, first))
    by_api = tuple((a["name"], a["in_hot_ranges_calls"], a["in_hot_ranges_ns"])
                   for a in alloc["by_api"] if a["in_hot_ranges_calls"])
    return RunNvtx(variant, int(m.group(1)), sqlite, tuple(calls), first.payload,
                   tuple(outline(tree, first.index)), by_api, bars, marks)


def run_folder(workload_root: str, variant: str) -> str:
    """The variant's run folder of the largest size."""
    found = []
    for d in glob.glob(os.path.join(workload_root, variant, "n*")):
        m = re.fullmatch(r"n(\d+)", os.path.basename(d))
        if m and os.path.isdir(d):
            found.append((int(m.group(1)), d))
    if not found:
        raise AnalysisInputError(os.path.join(workload_root, variant), "no run folder n<size> for this step")
    return max(found)[1]


def read_workload(workload_root: str, variants: Sequence[str] = RECIPE.variants) -> list[RunNvtx]:
    if not os.path.isdir(workload_root):
        raise AnalysisInputError(workload_root, "no such capture folder")
    return [read_run(run_folder(workload_root, v), v) for v in variants]


# --- presentation ------------------------------------------------------------------------------------


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _span(values: Sequence[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def _median(run: RunNvtx, field: str) -> float:
    return statistics.median(getattr(c, field) for c in run.calls)


def _domain_ranges(run: RunNvtx, domain: str) -> str:
    return _span([c.domains.get(domain, {}).get("ranges", 0) for c in run.calls])


#: outline rows a report shows per step (the recipe report keeps to its length budget)
OUTLINE_ROWS_IN_REPORT = 15


def outline_text(rows: Sequence[OutlineRow], max_rows: int = MAX_OUTLINE_ROWS) -> str:
    shown = list(rows[:max_rows])
    labels = ["  " * r.depth + (r.domain or "(default)") + "  " + r.name for r in shown]
    width = max(len(s) for s in labels)
    lines = [f"{s:<{width}}  {r.count:>4}x  {_ms(r.total_ns):>10} ms" for s, r in zip(labels, shown, strict=True)]
    if len(rows) > max_rows:
        lines.append(f"... {len(rows) - max_rows} more paths")
    return "\n".join(lines)


def _table(header: Sequence[str], align: str, rows: Sequence[Sequence[object]]) -> list[str]:
    """A markdown table's lines; ``align`` has one letter per column, ``l`` (left) or ``r`` (right)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    return lines + ["| " + " | ".join(mdtext.cell(c, backslash=False) for c in row) + " |" for row in rows]


def _call_row(run: RunNvtx) -> tuple:
    dur = statistics.median(c.duration_ns for c in run.calls)
    alloc = statistics.median(c.allocation_ns for c in run.calls)
    return (f"`{run.variant}`", run.size, len(run.calls), _ms(dur), _span([c.groupby_passes for c in run.calls]),
            _span([c.aggregation_kernels for c in run.calls]), _span([c.kernels for c in run.calls]),
            _domain_ranges(run, CUDF_PYTHON), _domain_ranges(run, LIBCUDF),
            _span([c.allocation_calls for c in run.calls]), _ms(alloc), f"{100 * alloc / dur if dur else 0:.0f}%")


def _allocation_rows(run: RunNvtx) -> list[tuple]:
    if not run.allocation_by_api:
        return [(f"`{run.variant}`", "none", 0, "0.000")]
    return [(f"`{run.variant}`", f"`{api}`", f"{n / len(run.calls):.1f}", _ms(ns / len(run.calls)))
            for api, n, ns in run.allocation_by_api]


def _domain_rows(run: RunNvtx) -> list[tuple]:
    """The first steady call's domains, shallowest first."""
    first = run.calls[0]
    return [(f"`{run.variant}`", f"`{domain or '(default)'}`", d["ranges"], _span([d["min_depth"], d["max_depth"]]),
             _ms(d["total_ns"]))
            for domain, d in sorted(first.domains.items(), key=lambda kv: (kv[1]["min_depth"], str(kv[0])))]


def markdown(runs: Sequence[RunNvtx], figure: str | None) -> str:
    out = [
        "## cuDF's NVTX ranges: groupby passes and allocation",
        "",
        "Read from each step's nsys capture, per steady call (call index 1 and up): the ranges cuDF "
        f"annotates itself, `{CUDF_PYTHON}` (its Python methods) and `{LIBCUDF}` (its C++ functions), "
        "nested in the suite's `compute` range; **groupby passes**, the libcudf `aggregate` ranges "
        "(`cudf::groupby::groupby::aggregate`, not nested in one another), and beside them the hash "
        "groupby's aggregation kernels (demangled name holding `single_pass`, one per pass); "
        "**allocation**, the cudaMalloc/cudaFree-family CUDA calls made inside the call on its thread. "
        "A range of values means the steady calls differ.",
        "",
    ]
    out += _table(("step", "size", "steady calls", "compute per call (ms, median)", "groupby passes",
                   "aggregation kernels", "kernels", f"`{CUDF_PYTHON}` ranges", f"`{LIBCUDF}` ranges",
                   "allocation calls", "allocation time per call (ms, median)", "share of the call"),
                  "lrrrrrrrrrrr", [_call_row(run) for run in runs])
    out += ["", "Allocation calls inside the steady calls, by CUDA API (per call, averaged):", ""]
    out += _table(("step", "API", "calls per call", "ms per call"), "llrr",
                  [row for run in runs for row in _allocation_rows(run)])
    by_name = {run.variant: run for run in runs}
    pairs = [(run, by_name[f"{run.variant}_pool"]) for run in runs if f"{run.variant}_pool" in by_name]
    if pairs:
        out += ["", "With and without the pool (medians per call):", ""]
        for plain, pool in pairs:
            out.append(f"- `{plain.variant}` -> `{pool.variant}`: allocation calls "
                       f"{_median(plain, 'allocation_calls'):g} -> {_median(pool, 'allocation_calls'):g}, "
                       f"allocation time {_ms(_median(plain, 'allocation_ns'))} -> "
                       f"{_ms(_median(pool, 'allocation_ns'))} ms, call {_ms(_median(plain, 'duration_ns'))} -> "
                       f"{_ms(_median(pool, 'duration_ns'))} ms")
    out += ["", "Where cuDF's ranges sit, by domain (depth below the `compute` range, first steady call):", ""]
    out += _table(("step", "domain", "ranges", "depth", "total (ms)"), "llrlr",
                  [row for run in runs for row in _domain_rows(run)])
    if figure:
        out += ["", f"![The NVTX ranges of one steady call per step, by depth; allocation calls in red]"
                    f"(figures/{figure})"]
    # a pool step runs the same ranges as the step it adds the pool to (same counts above): one outline each
    outlined = [run for run in runs if not (run.variant.endswith("_pool") and run.variant[:-5] in by_name)]
    for run in outlined:
        out += ["", f"### `{run.variant}`: the ranges of call {run.outline_payload}, folded by path", "",
                "```", outline_text(run.outline, OUTLINE_ROWS_IN_REPORT), "```"]
    if len(outlined) < len(runs):
        out += ["", "The pool steps run the same range paths as the steps they add the pool to (counts above)."]
    return "\n".join(out) + "\n"


def timeline_figure(runs: Sequence[RunNvtx], path: str) -> None:
    """One panel per step: the outlined call's ranges as bars by depth, allocation calls below; one
    time axis for all, so that the steps' lengths compare at a glance."""
    from analysis.report.plotting import plt, save_figure as _save  # matplotlib only where a figure is drawn

    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.6 + 1.1 * len(runs) + 0.25 * sum(
        max(b.depth for b in r.bars) for r in runs)), squeeze=False, sharex=True)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        depth = max(b.depth for b in run.bars)
        for b in run.bars:
            ax.barh(b.depth, (b.end_ns - b.start_ns) / 1e6, left=b.start_ns / 1e6, height=0.8,
                    color=DOMAIN_COLORS.get(b.domain, OTHER_COLOR), edgecolor="none")
        for s, e in run.allocation_marks:
            ax.barh(depth + 1, max((e - s) / 1e6, 1e-3), left=s / 1e6, height=0.8, color=ALLOC_COLOR,
                    edgecolor="none")
        ax.set_yticks(list(range(depth + 2)))
        ax.set_yticklabels([str(d) for d in range(depth + 1)] + ["alloc"], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(f"{run.variant}, call {run.outline_payload}", fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    axes[-1, 0].set_xlabel("ms from the start of the compute range")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in (*DOMAIN_COLORS.values(), OTHER_COLOR, ALLOC_COLOR)]
    fig.legend(handles, [*DOMAIN_COLORS, "other", "cudaMalloc/cudaFree"], loc="upper right", ncol=6, fontsize=7,
               frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    _save(fig, path)


def render(workload_root: str, figure_dir: str) -> str:
    runs = read_workload(workload_root)
    name = f"{WORKLOAD}_nvtx.png"
    timeline_figure(runs, os.path.join(figure_dir, name))
    return markdown(runs, name)
