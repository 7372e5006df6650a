"""``python -m analysis kernel-page``: one kernel's page (key metrics, hottest source lines) from an
Nsight Compute report and, if given, the ``kernel-run.json`` of its capture
(workloads/tools/kernel_profile.py)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import re

from analysis.cli.commands import add_command
from analysis.common.errors import AnalysisInputError
from analysis.report.markdown import write_page
from analysis.common.outputs import check_targets, write_text_atomic
from analysis.model.records import load_record


def load_run(path: str) -> dict:
    """The capture's kernel-run.json, checked (analysis.model.records.KERNEL_RUN)."""
    return load_record(path, "kernel-run.json")


def _run(a: argparse.Namespace) -> int:
    """Read one profiled kernel of an Nsight Compute report (.ncu-rep or .ncu-rep.gz, best with --set
    full, -lineinfo and --import-source yes) and write a markdown page: key metrics, warp states,
    the hottest source lines with their text, how to open the report."""
    # here, not at the top: `python -m analysis` imports every command's module to build its parser,
    # and these bring the provenance reader (importlib.metadata)
    from analysis.report.kernel_page import kernel_page  # noqa: PLC0415
    from analysis.readers.ncu_source import read_kernel_profile  # noqa: PLC0415

    run = load_run(a.run) if a.run else None
    check_targets(a.output, *([a.json] if a.json else []))
    k = read_kernel_profile(a.report, a.launch)
    # the run record names the pattern ncu selected by (older records also the kernel it selected)
    if run and (re.fullmatch(run["kernel_regex"], k.function_name) is None
                or k.function_name != run.get("profiled_kernel", k.function_name)):
        raise AnalysisInputError(a.report, f"profiled {k.function_name!r}, but {a.run} asked for "
                                           f"-k regex:{run['kernel_regex']}: report and run record do not belong together")
    page = kernel_page(k, run, top=a.top, report_hint=a.report)
    check_targets(a.output, *([a.json] if a.json else []))
    write_page(a.output, page)
    if a.json:
        write_text_atomic(a.json, json.dumps(dataclasses.asdict(k), indent=1, sort_keys=True) + "\n")
    where = f"{len(k.source.lines)} source lines" if k.source.has_line_info else "no line information"
    print(f"wrote {a.output}: {k.display_name[:80]}, {where}")
    return 0


def add_parser(subparsers) -> None:
    """Register ``kernel-page --report R [--run kernel-run.json] --output page.md``."""
    s = add_command(subparsers, "kernel-page", _run, "one kernel's metrics and hottest source lines as a markdown page")
    s.add_argument("--report", required=True, metavar="FILE.ncu-rep[.gz]", help="the Nsight Compute report")
    s.add_argument("--run", help="the capture's kernel-run.json (workloads.tools.kernel_profile)")
    s.add_argument("--launch", type=int, default=0, help="which profiled launch of the report (default the first)")
    s.add_argument("--top", type=int, default=15, help="source lines to show (default 15)")
    s.add_argument("--output", required=True, help="the markdown page")
    s.add_argument("--json", help="also write everything read from the report as JSON here")
