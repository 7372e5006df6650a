"""``python -m analysis diagnose``: what limits each launch of any program's ncu report, and what to
try next (the diagnosis itself: :mod:`analysis.report.diagnose`)."""
from __future__ import annotations

import sys

from analysis.cli.commands import add_command
from analysis.common.outputs import write_text_atomic
from analysis.report.diagnose import FORMATS, run


def cmd_diagnose(a) -> int:
    """Per launch of an Nsight Compute report, in launch order: kernel, kind (compute, memory,
    latency), unit (issue slots, a pipe, DRAM, L2, L1/shared), its % of peak, the floor ratio (none
    when latency-bound), occupancy, waves per SM, and advice by limiter (none about the launch
    configuration of library kernels). With --nsys, the same per kernel weighted by GPU time, and
    the host-link and launch/host shares of the GPU's active window."""

    text = run(a.report, a.nsys, a.format, a.raw_page)
    if a.output:
        write_text_atomic(a.output, text)
    else:
        sys.stdout.write(text)
    return 0


def add_parser(sub) -> None:
    s = add_command(sub, "diagnose", cmd_diagnose,
                    "what limits each launch of any program's ncu report, and what to try next")
    s.add_argument("report", metavar="FILE.ncu-rep", help="the Nsight Compute report (.ncu-rep, or gzipped)")
    s.add_argument("--nsys", metavar="FILE.sqlite", help="the program's nsys SQLite export (or gzipped)")
    s.add_argument("--format", choices=FORMATS, default="md", help="markdown (default), JSON list of objects, or CSV")
    s.add_argument("--raw-page", help="ncu's raw page as CSV, for ncu's own kernel names (default: one saved "
                                      "beside the report, else the installed ncu)")
    s.add_argument("--output", help="write here instead of standard output")

