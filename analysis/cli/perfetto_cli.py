"""``python -m analysis perfetto``: an nsys SQLite export as a Chrome/Perfetto JSON trace (the
conversion itself: :mod:`analysis.report.perfetto`)."""
from __future__ import annotations

import argparse
import os
import sys

from analysis.cli.commands import add_command
from analysis.common.errors import AnalysisInputError
from analysis.report.perfetto import convert


def cmd_perfetto(a: argparse.Namespace) -> int:
    """Write the export's NVTX ranges and CUDA API calls (per CPU thread) and its kernels, memcpys and
    memsets (per GPU stream) as a Chrome trace-event JSON file, for ui.perfetto.dev."""
    out_dir = os.path.dirname(os.path.abspath(a.output))
    if not os.path.isdir(out_dir):
        raise AnalysisInputError(a.output, "the output's folder does not exist")
    n = convert(a.export, a.output)
    print(f"wrote {a.output}: {n} events (open it in https://ui.perfetto.dev)", file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    """Register ``perfetto FILE.sqlite[.gz] -o trace.json``."""
    s = add_command(subparsers, "perfetto", cmd_perfetto, "an nsys SQLite export as a Chrome/Perfetto JSON trace")
    s.add_argument("export", metavar="FILE.sqlite[.gz]", help="an nsys SQLite export")
    s.add_argument("-o", "--output", required=True, metavar="trace.json", help="the JSON trace to write")

