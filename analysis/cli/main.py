"""Command line of the analysis: ``python -m analysis <command> ...``.

  summarize-run   one run's captures -> JSON of numbers
  report          one workload's run summaries -> reports/<workload>.md and figures
  index           all run summaries -> reports/index.md
  copy-captures   keep the small raw captures as a reference
  check-rebuild   compare rebuilt reports with the committed ones
  ncu-summary     one row per profiled launch of an ncu report (metrics and ncu's rule findings)
  perfetto        an nsys SQLite export as a Chrome/Perfetto JSON trace
  kernel-page     one kernel's metrics and hottest source lines -> markdown
  gpu-jobs        the GPU job records -> reports/gpu_jobs.md: which job ran on which GPU, when
  compare         two run folders -> per step the speedup with its interval and verdict (exit 1: slower)
  cross-gpu       two GPUs' references -> which steps scale with bandwidth, compute rate or neither
  diagnose        any program's ncu report (and nsys export) -> per launch its limiter and advice
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys

from analysis.cli.commands import add_command
from analysis.cli import (coldstart_cli, compare_cli, diagnose_cli, kernel_page_cli, multiprocess_cli, ncu_cli,
                          perfetto_cli, stats_cli)
from analysis.common import layout, leftovers
from analysis.common.errors import AnalysisInputError
from analysis.common.outputs import check_figure_target, check_target, check_targets, write_text_atomic
from analysis.model import gpu_jobs, l2_modes, report_model
from analysis.model.records import load_record
from analysis.model.run_summary import load_json, load_summary, summarize_run
from analysis.readers import captures
from analysis.report import gpu_jobs_markdown, kernel_page, markdown, report_sections
from workloads.registry import BY_NAME




def _load_summaries(paths: list[str]) -> list[dict]:
    """The run summaries, checked (field types, and a registered workload and variant)."""

    summaries = []
    for path in paths:
        s = load_summary(path)
        if s["workload"] not in BY_NAME:
            raise AnalysisInputError(path, f"field workload: {s['workload']!r} is no registered workload")
        if s["variant"] not in BY_NAME[s["workload"]].variants:
            raise AnalysisInputError(path, f"field variant: {s['variant']!r} is no variant of {s['workload']}")
        summaries.append(s)
    return summaries


def _by_size(summaries: list[dict], workload: str) -> dict[int, list[dict]]:

    order = BY_NAME[workload].variants
    out: dict[int, list[dict]] = {}
    for s in summaries:
        if s["workload"] == workload:
            out.setdefault(s["size"], []).append(s)
    for runs in out.values():
        runs.sort(key=lambda r: order.index(r["variant"]))
    return out


def cmd_summarize_run(a) -> None:
    """Read run folders (timing.json, the nsys SQLite export, the ncu report if any) and write each
    one's numbers: time per call, bandwidth, kernels, transfers. Several ``--run-dir``/``--output``
    pairs share one process, so that a whole reference pays Python's start-up and imports once."""
    if len(a.run_dir) != len(a.output):
        raise AnalysisInputError(a.run_dir[-1], f"{len(a.run_dir)} --run-dir but {len(a.output)} --output: "
                                                "give one --output per --run-dir, in the same order")
    for output in a.output:
        check_target(output)
    for run_dir, output in zip(a.run_dir, a.output):
        _summarize_one_run(run_dir, output)


def _summarize_one_run(run_dir: str, output: str) -> None:
    load_record(os.path.join(run_dir, layout.TIMING), "a timed run's record")
    for name in (layout.NSYS_RUN, layout.NCU_RUN):
        if os.path.exists(os.path.join(run_dir, name)):
            load_record(os.path.join(run_dir, name), "a profiled run's record")
    record = summarize_run(run_dir)
    write_text_atomic(output, json.dumps(record, indent=1, sort_keys=True) + "\n")
    n = record["nsys"]["calls"]
    print(f"{run_dir}: median {record['timing']['median_ms']:.4f} ms, "
          f"{record['achieved_gb_per_s']:.0f} GB/s, kernels per call {[c['kernels'] for c in n]}")


def _gpu_job_records(folder: str | None) -> list[dict]:
    """The GPU job records (workloads/tools/gpu_jobs.py) of the latest run in ``folder`` (a folder
    collects every run's records); none without a folder or records."""
    import glob

    if not folder or not glob.glob(os.path.join(folder, "*.json")):
        return []

    latest = gpu_jobs.split_runs(gpu_jobs.load_gpu_jobs(folder))[-1]
    return [load_json(j.path) for j in sorted(latest, key=lambda j: j.started_ns)]


def cmd_report(a) -> None:
    """Write a workload's report and figures from the summaries of its runs (python -m analysis
    summarize-run), against the ceilings measured in the same run."""
    # matplotlib: imported only by the commands that draw, not by every `python -m analysis`
    from analysis.report import figures, roofline

    recipe = BY_NAME[a.workload]
    by_size = _by_size(_load_summaries(a.summaries), a.workload)
    if not by_size:
        raise AnalysisInputError(a.summaries[0] if a.summaries else a.workload, "no run summaries for this workload")
    ceilings_record = load_record(a.ceilings, "a ceilings record")
    model = report_model.build(recipe, by_size, ceilings_record,
                               tools=load_record(a.preflight, "a preflight record") if a.preflight else None,
                               gpu_jobs=_gpu_job_records(a.gpu_jobs), ncu_metric_keys=markdown.NCU_METRIC_KEYS)
    largest = max(by_size)
    timeline_runs = figures.timeline_variants(by_size[largest])
    shown = " and ".join(f"`{r['variant']}`" for r in timeline_runs)
    fig_dir = os.path.join(a.out_dir, "figures")
    md_path = os.path.join(a.out_dir, f"{a.workload}.md")

    def fig(name: str) -> str:
        return os.path.join(fig_dir, f"{a.workload}_{name}.png")

    names = [
        (f"Time per step against its floors ({model.timer.split(' (')[0]})", f"{a.workload}_ladder.png"),
        ("Where each steady call's time went on the GPU: busy (union of GPU work) and idle (nsys)",
         f"{a.workload}_busy.png"),
        (f"Timelines of {shown} at size {largest} (nsys): the {figures.trace_span(timeline_runs)}, "
         "and one compute call",
         f"{a.workload}_timeline.png"),
    ]
    # a roofline with no floating-point kernel to place is neither drawn nor shown
    with_roofline = roofline.roofline(by_size).drawable()
    if with_roofline:
        names.append(("Hierarchical roofline of the kernels ncu profiled (DRAM, L2, L1 bytes), under the device's "
                      "peaks at the clocks the launches ran at (dashed) and the rates measured in the same run "
                      "(solid)", f"{a.workload}_roofline.png"))
    # the page first: malformed summaries or L2 records and unsafe output paths are refused before any
    # figure is written
    md = markdown.workload_report(model, names)
    l2_section = None
    if a.l2_runs:

        l2_section = l2_modes.section(l2_modes.rows([load_record(p, "a timed run's record") for p in a.l2_runs],
                                                    ceilings_record["ceilings"],
                                                    where=a.l2_runs[0]), model.timer)
    check_targets(md_path, *(os.path.join(fig_dir, n) for _, n in names))
    figures.ladder_figure(model, fig("ladder"))
    figures.busy_figure(model, fig("busy"))
    figures.timeline_figure(by_size, fig("timeline"), recipe.title)
    if with_roofline:
        figures.roofline_figure(by_size, ceilings_record["ceilings"], fig("roofline"), recipe.title)
    elif os.path.exists(fig("roofline")):
        os.remove(fig("roofline"))  # an earlier run's chart would stand beside a page that no longer shows it
    parts = report_sections.render_all(recipe, a.captures, fig_dir, with_experiments=not a.without_experiments)
    kernel_links = kernel_page.links_section(a.workload, a.captures, recipe.variants)
    if kernel_links:
        parts.append(kernel_links)
    if l2_section:
        parts.append(l2_section)
    if parts:
        # the recipe's own sections go before the appendix
        at = md.index("\n## Appendix\n")
        md = md[:at].rstrip("\n") + "\n\n" + "\n\n".join(p.rstrip("\n") for p in parts) + "\n" + md[at:]
    markdown.write_page(md_path, markdown.with_run_label(md, a.run_label).rstrip("\n") + "\n")
    print(f"wrote {os.path.join(a.out_dir, a.workload + '.md')}")


def cmd_index(a) -> None:
    """Write the index page: every recipe's best step against its baseline and its floor, the device
    ceilings, cold starts, and the recipes skipped and why."""

    # the run's small records first, then the summaries
    ceilings = load_record(a.ceilings, "a ceilings record")
    preflight = load_record(a.preflight, "a preflight record")
    coldstart = load_record(a.coldstart, "a cold-start summary") if a.coldstart else []
    summaries = _load_summaries(a.summaries)
    workloads = [w for w in BY_NAME if any(s["workload"] == w for s in summaries)]
    extra = [("The NVTX blog's multi-process example", "nvtx_multiprocess.md")] if a.multiprocess else []
    own = {}
    for item in a.workload_ceilings or []:
        w, _, path = item.partition("=")
        own[w] = load_record(path, "a ceilings record")
    # the index states one verdict per recipe (its result box): not the 10-odd bootstraps of its page
    models = [report_model.build(BY_NAME[w], _by_size(summaries, w), own.get(w, ceilings), verdicts_wanted="result")
              for w in workloads]
    see_also = []
    for item in a.see_also:
        label, sep, link = item.partition("=")
        if not sep or not label or not link:
            raise AnalysisInputError("--see-also", f"{item!r} is not LABEL=LINK")
        see_also.append((label, link))
    check_target(a.output)
    md = markdown.index_report(models, ceilings, preflight, coldstart, extra, sorted(own),
                               see_also=see_also)
    markdown.write_page(a.output, markdown.with_run_label(md, a.run_label))
    print(f"wrote {a.output}")


def cmd_copy_captures(a) -> None:
    """Copy the SQLite exports and ncu reports (gzipped), timing JSON and nsys' own CSVs of a run into
    the reference folder that rebuild_reports reads."""
    if a.merge and a.gpu_jobs:
        raise AnalysisInputError(a.gpu_jobs, "--gpu-jobs keeps a whole run's records; a --merge keeps the "
                                             "reference's own")
    if a.merge:
        copied = captures.merge_reference(a.src, a.dst, a.merge)
    else:
        copied = captures.replace_reference(a.src, a.dst, a.gpu_jobs)
    print(f"copied {len(copied)} files from {a.src} to {a.dst}")


def cmd_gpu_jobs(a) -> None:
    """Chart the pipeline's GPU jobs per physical GPU over time, list the longest, and say whether two
    jobs ever shared a GPU."""
    from analysis.report import figures  # matplotlib: only the commands that draw

    runs = [gpu_jobs.summarize(r) for r in gpu_jobs.split_runs(gpu_jobs.load_gpu_jobs(a.records))]
    latest = runs[-1]
    check_figure_target(a.figure)
    check_targets(a.output)
    figures.gpu_jobs_figure(latest.jobs, a.figure, "Pipeline")
    rel = os.path.relpath(a.figure, os.path.dirname(os.path.abspath(a.output)))
    markdown.write_page(a.output, gpu_jobs_markdown.gpu_jobs_report(runs, rel))
    print(f"{a.output}: {len(latest.jobs)} jobs, up to {latest.max_concurrent} at once, "
          f"{len(latest.shared)} overlaps on a shared GPU")
    for o in latest.shared:
        print(f"warning: {o.first.what} ({o.first.tool}) and {o.second.what} ({o.second.tool}) shared "
              f"{o.first.gpu_label} for {o.seconds:.1f} s", file=sys.stderr)


def cmd_check_rebuild(a) -> int:
    """Exit 1 and print the differences when the rebuilt markdown reports differ from the committed
    ones."""
    diffs = captures.compare_reports(a.rebuilt, a.committed)
    if diffs:
        print("rebuilt reports differ from the committed ones:", file=sys.stderr)
        print("\n".join(diffs), file=sys.stderr)
        return 1
    print(f"rebuilt reports in {a.rebuilt} equal the committed ones in {a.committed}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m analysis",
        description="Read what nsys and ncu recorded and write the suite's numbers and reports; needs no GPU. "
                    "`python -m analysis COMMAND --help` describes a command.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = add_command(sub, "summarize-run", cmd_summarize_run, "one run's captures -> one JSON of numbers")
    s.add_argument("--run-dir", required=True, action="append",
                   help="the run folder, <work_dir>/captures/<workload>/<variant>/n<size>; repeated with "
                        "--output, several runs in one process")
    s.add_argument("--output", required=True, action="append",
                   help="the JSON to write, one per --run-dir in the same order")
    s = add_command(sub, "report", cmd_report, "one workload's run summaries -> reports/<workload>.md and its figures")
    s.add_argument("--workload", required=True, help="the recipe's name, e.g. cupy_sqdiff")
    s.add_argument("--ceilings", required=True, help="ceilings.json of the run (workloads.harness.ceilings)")
    s.add_argument("--out-dir", required=True, help="folder for <workload>.md; the figures go to its figures/")
    s.add_argument("--captures", help="the workload's capture folder, for the recipe's own report sections")
    s.add_argument("--preflight", help="the run's preflight.json: the Nsight Systems and Compute versions")
    s.add_argument("--gpu-jobs", help="a folder of GPU job records: the exact commands the report shows")
    # one flag per file: a list option before the positional summaries would swallow them
    s.add_argument("--l2-run", dest="l2_runs", action="append", metavar="TIMING.json",
                   help="a timed record of a step run warm or cold-l2 (l2_modes), once per file: the 'Warm and "
                        "cold L2' section")
    s.add_argument("--without-experiments", action="store_true",
                   help="the run made no experiments: leave out the sections that read them, and say so")
    s.add_argument("--run-label", help="what this run is when not the full suite (e.g. lab): said under the title")
    s.add_argument("summaries", nargs="+", metavar="SUMMARY.json", help="the workload's run summaries")
    s = add_command(sub, "gpu-jobs", cmd_gpu_jobs,
                    "GPU job records -> reports/gpu_jobs.md: which job ran on which GPU, when")
    s.add_argument("--records", required=True, help="the folder of GPU job records (<work_dir>/gpu-jobs)")
    s.add_argument("--output", required=True, help="the markdown page to write")
    s.add_argument("--figure", required=True, help="the chart (PNG) to write")
    s = add_command(sub, "index", cmd_index, "all run summaries -> reports/index.md")
    s.add_argument("--ceilings", required=True, help="ceilings.json of the run")
    s.add_argument("--preflight", required=True,
                   help="preflight.json of the run (tool versions, recipes skipped)")
    s.add_argument("--coldstart", help="the capture set's coldstart.json (python -m analysis coldstart)")
    s.add_argument("--multiprocess", action="store_true", help="link the multi-process page")
    s.add_argument("--workload-ceilings", action="append", metavar="WORKLOAD=PATH",
                   help="a workload captured in a later run: the ceilings of that run")
    s.add_argument("--output", required=True, help="the markdown page to write")
    s.add_argument("--run-label", help="what this run is when not the full suite (e.g. lab): said under the title")
    s.add_argument("--see-also", action="append", default=[], metavar="LABEL=LINK",
                   help="the index of another GPU's reference, linked under the title")
    s.add_argument("summaries", nargs="+", metavar="SUMMARY.json", help="every run summary")
    s = add_command(sub, "copy-captures", cmd_copy_captures, "keep a run's small raw captures as the reference")
    s.add_argument("--from", dest="src", required=True, help="the run's capture folder (<work_dir>/captures)")
    s.add_argument("--to", dest="dst", required=True, help="the reference folder (reports/reference/<name>)")
    s.add_argument("--merge", nargs="+", metavar="WORKLOAD",
                   help="merge only these workloads' captures into the existing reference")
    s.add_argument("--gpu-jobs", metavar="DIR",
                   help="the run's GPU job records (<work_dir>/gpu-jobs), kept in <reference>/gpu-jobs (a whole run "
                        "only: a merge keeps the reference's records)")
    s = add_command(sub, "check-rebuild", cmd_check_rebuild, "compare rebuilt reports with the committed ones")
    s.add_argument("--rebuilt", required=True, help="the folder of rebuilt reports")
    s.add_argument("--committed", required=True, help="the folder of committed reports (reports/)")
    stats_cli.add_parser(sub)
    coldstart_cli.add_parser(sub)
    multiprocess_cli.add_parser(sub)
    ncu_cli.add_parser(sub)
    perfetto_cli.add_parser(sub)
    kernel_page_cli.add_parser(sub)
    compare_cli.add_parser(sub)
    diagnose_cli.add_parser(sub)
    return p


#: commands that, run from the shell, leave their reference cycles to the process's end: the collector's
#: full passes walk every object scipy and matplotlib made, and took 0.6 s of `report`'s 2.9 s to free
#: some 30 MB of matplotlib's figures; the collection at the interpreter's shutdown took 0.25 s more
EXIT_FREES_CYCLES = ("report", "index")


def _one_line(text: str) -> str:
    """An error's text on one line (a name or a message from a file may hold line breaks)."""
    return " ".join(text.split())


def _inputs(a: argparse.Namespace) -> str:
    """The files and folders the command was given, for an error that could not name its own."""
    given = []
    for key, value in sorted(vars(a).items()):
        if key in ("func", "command", "output", "figure", "json", "out_dir") or value is None or isinstance(value, bool):
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and os.path.exists(v):
                given.append(v)
    return ", ".join(given[:6]) + (f" and {len(given) - 6} more" if len(given) > 6 else "") or "none given"


def main(argv=None, process_exits: bool = False) -> int:
    """``process_exits``: the process ends when this returns (``python -m analysis``), not a caller's."""
    a = build_parser().parse_args(argv)
    if process_exits:
        leftovers.exit_cleanly_on_signals()
    leave_cycles = process_exits and a.command in EXIT_FREES_CYCLES
    if leave_cycles:
        gc.disable()
    try:
        rc = a.func(a)
    except AnalysisInputError as e:
        print(f"analysis {a.command}: {_one_line(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # the files it was writing are removed on the way out (analysis/common/leftovers.py)
        print(f"analysis {a.command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except OSError as e:
        # a file the command could not open, read or write: the system names it
        where = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None) or "an input or output"
        print(f"analysis {a.command}: {where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except (TypeError, KeyError, ValueError, AttributeError, IndexError, ZeroDivisionError, OverflowError) as e:
        # what a record of an unexpected shape makes a reader raise where no schema caught it
        # first: said in one line with the inputs, exit 2; ANALYSIS_TRACEBACK=1 shows where
        if os.environ.get("ANALYSIS_TRACEBACK"):
            raise
        print(f"analysis {a.command}: cannot use its inputs ({_inputs(a)}): {type(e).__name__}: "
              f"{_one_line(str(e))} (ANALYSIS_TRACEBACK=1 shows where)", file=sys.stderr)
        return 2
    finally:
        if leave_cycles:
            # the shutdown's collection runs even with the collector off; frozen objects it skips
            gc.freeze()
    return rc or 0


if __name__ == "__main__":
    sys.exit(main(process_exits=True))
