"""``python -m analysis multiprocess-report``: per-process NVTX ranges, thread names and GPU work of an
nsys SQLite export, as a markdown page and a timeline figure (see :mod:`analysis.report.multiprocess`)."""
from __future__ import annotations

from analysis.cli.commands import add_command
from analysis.report.markdown import write_page
from analysis.common.outputs import check_figure_target, check_targets, write_text_atomic

import argparse
import json
import os

from analysis.model.records import load_record




def cmd_multiprocess_report(a: argparse.Namespace) -> int:
    """For every process in an nsys SQLite export that made CUDA calls or NVTX annotations: its named
    threads, the suite's NVTX ranges, third-party function ranges and the GPU work it launched;
    written as a markdown page and one timeline figure on a shared time axis."""
    # here, not at the top: `python -m analysis` imports every command's module to build its parser,
    # and this one brings nvtx and the workloads' annotations
    from analysis.report import multiprocess  # noqa: PLC0415

    # the run record and the outputs first: refused before the export is read
    run = load_record(a.run, "a multi-process run record") if a.run else None
    check_targets(a.output, *([a.json] if a.json else []))
    check_figure_target(a.figure)
    procs = multiprocess.read_processes(a.export)
    multiprocess.require_processes(procs, a.export)
    # the page links the figure relative to itself, so both can move together
    figure_link = os.path.relpath(os.path.abspath(a.figure), os.path.dirname(os.path.abspath(a.output)))
    multiprocess.timeline_figure(procs, a.figure, a.title)
    write_page(a.output, multiprocess.markdown_report(procs, a.export, figure_link.replace(os.sep, "/"), run))
    if a.json:
        write_text_atomic(a.json, json.dumps(multiprocess.summary(procs), indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.output} and {a.figure}: " + ", ".join(p.label for p in procs))
    return 0


def add_parser(subparsers) -> None:
    """Register ``multiprocess-report FILE.sqlite[.gz] --output MD --figure PNG [--json JSON]``."""
    s = add_command(subparsers, "multiprocess-report", cmd_multiprocess_report,
                    "per-process NVTX ranges, thread names and GPU work of an nsys export")
    s.add_argument("export", metavar="FILE.sqlite[.gz]", help="an nsys SQLite export of the multi-process run")
    s.add_argument("--output", required=True, help="the markdown page to write")
    s.add_argument("--figure", required=True, help="the timeline PNG to write")
    s.add_argument("--run", help="the run record the workload wrote (run.json): the page's provenance")
    s.add_argument("--json", help="also write the per-process numbers as JSON here")
    s.add_argument("--title", default="NVTX ranges and GPU work per process", help="the figure's title")
