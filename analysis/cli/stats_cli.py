"""``python -m analysis stats``: nsys' summary reports (``nsys stats``) from an SQLite export, without nsys."""
from __future__ import annotations

import argparse
import sys

from analysis.cli.commands import add_command
from analysis.readers.nsys import stats as nsys_stats
from analysis.report import stats_text
from analysis.common.errors import NoDataInExport


def cmd_stats(a: argparse.Namespace) -> int:
    """Print what `nsys stats --report NAME --format csv FILE.sqlite` prints, computed from the export
    alone (.sqlite, or gzipped .sqlite.gz)."""
    try:
        header, rows = nsys_stats.report(a.export, a.report)
    except NoDataInExport as e:
        # what nsys stats does: an empty report, and a line on stderr saying why
        print(f"SKIPPED: {e}", file=sys.stderr)
        return 0
    sys.stdout.write(stats_text.FORMATS[a.format](header, rows))
    return 0


def add_parser(subparsers) -> None:
    """Register ``stats --report NAME [--format csv|json|md] FILE.sqlite[.gz]``."""
    s = add_command(subparsers, "stats", cmd_stats, "an `nsys stats` report from an nsys SQLite export")
    s.add_argument("--report", required=True, choices=list(nsys_stats.REPORTS), metavar="NAME",
                   help=f"one of: {', '.join(nsys_stats.REPORTS)}")
    s.add_argument("--format", choices=list(stats_text.FORMATS), default="csv",
                   help="csv (as nsys writes it, the default), json or md")
    s.add_argument("export", metavar="FILE.sqlite[.gz]", help="an nsys SQLite export (nsys export --type sqlite)")
