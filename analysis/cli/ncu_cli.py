"""``python -m analysis ncu-summary``: one row per profiled launch of an Nsight Compute report.

Columns: ``ID``, ``Kernel Name`` (as ``ncu --page raw`` prints it: from the raw page saved beside
the report or given with ``--raw-page``, else from the installed ``ncu``; without either, the suite's
shortening of the demangled name, and a note on stderr says so), the metrics of
:data:`analysis.readers.ncu.SUMMARY_METRICS` named as ncu names them, in the suite's units (durations in
ns, percentages 0-100, counts as integers), and ``Findings``: the rule results ncu attached to the
launch (rule id, severity, estimated speedup in %).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from typing import Any, Callable

from analysis.cli.commands import add_command
from analysis.readers.ncu import NAMES_FROM_REPORT_MODULE, SUMMARY_METRICS, Launch, read_launches
from analysis.report import mdtext

HEADER = ["ID", "Kernel Name", *SUMMARY_METRICS, "Findings"]


def finding_records(launch: Launch) -> list[dict]:
    return [{"rule": f.rule, "severity": f.severity, "estimated_speedup_pct": f.estimated_speedup_pct,
             "title": f.title} for f in launch.findings]


def summary_rows(path: str, raw_page: str | None = None) -> list[dict[str, Any]]:
    """One dict per launch, in launch order, keyed by :data:`HEADER`."""
    rows = []
    launches = read_launches(path, raw_page)
    if launches and launches[0].name_source == NAMES_FROM_REPORT_MODULE:
        print(f"ncu-summary: kernel names are {NAMES_FROM_REPORT_MODULE} (no raw page beside {path} and no ncu "
              "installed); ncu prints some C++ namespaces differently", file=sys.stderr)
    for launch in launches:
        row: dict[str, Any] = {"ID": launch.id, "Kernel Name": launch.kernel_name}
        row.update({m: launch.metrics.get(m) for m in SUMMARY_METRICS})
        row["Findings"] = finding_records(launch)
        rows.append(row)
    return rows


def _number(v: Any) -> str:
    """A metric as text: integers as integers, other numbers with 12 significant digits (ncu's own
    raw page prints 6), missing values empty."""
    if v is None:
        return ""
    if isinstance(v, float):
        return format(v, ".12g")
    return str(v)


def _findings_text(findings: list[dict]) -> str:
    """``rule:severity:speedup`` per finding, ``;``-separated; the speedup empty where ncu gave none."""
    parts = []
    for f in findings:
        est = f["estimated_speedup_pct"]
        parts.append(f"{f['rule']}:{f['severity']}:{'' if est is None else format(est, '.3g')}")
    return ";".join(parts)


def format_csv(rows: list[dict]) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(HEADER)
    for r in rows:
        w.writerow([r["ID"], r["Kernel Name"], *(_number(r[m]) for m in SUMMARY_METRICS),
                    _findings_text(r["Findings"])])
    return out.getvalue()


def format_json(rows: list[dict]) -> str:
    return json.dumps(rows, indent=1) + "\n"


def format_md(rows: list[dict]) -> str:
    def cell(v: Any) -> str:
        return mdtext.cell(v)

    lines = ["| " + " | ".join(HEADER) + " |", "|---:|---|" + "---:|" * len(SUMMARY_METRICS) + "---|"]
    for r in rows:
        findings = "; ".join(
            f"{f['rule']} ({f['severity']}" + (f", est. {f['estimated_speedup_pct']:.3g}%" if
                                               f["estimated_speedup_pct"] is not None else "") + ")"
            for f in r["Findings"])
        lines.append("| " + " | ".join(cell(c) for c in [r["ID"], r["Kernel Name"],
                                                          *(_number(r[m]) for m in SUMMARY_METRICS),
                                                          findings]) + " |")
    return "\n".join(lines) + "\n"


FORMATS: dict[str, Callable[[list[dict]], str]] = {"csv": format_csv, "json": format_json, "md": format_md}


def cmd_ncu_summary(a: argparse.Namespace) -> int:
    sys.stdout.write(FORMATS[a.format](summary_rows(a.report, a.raw_page)))
    return 0


def add_parser(subparsers) -> None:
    """Register ``ncu-summary [--format csv|json|md] FILE.ncu-rep[.gz]``."""
    s = add_command(
        subparsers, "ncu-summary", cmd_ncu_summary, "one row per profiled launch of an Nsight Compute report",
        # the metrics' names come from the code: no docstring can say them
        description="Print, per profiled launch in launch order, ncu's ID and kernel name, the suite's summary "
                    f"metrics ({', '.join(SUMMARY_METRICS)}; durations in ns) and the rule findings ncu "
                    "attached (rule:severity:estimated speedup %). Reads .ncu-rep or gzipped .ncu-rep.gz; needs "
                    "the ncu_report module (pip install ncu-report).")
    s.add_argument("--format", choices=list(FORMATS), default="csv", help="csv (the default), json or md")
    s.add_argument("--raw-page", metavar="RAW.csv[.gz]", default=None,
                   help="ncu's raw page of this report (ncu --import FILE --page raw --csv), whose kernel names are "
                        "used; default: <stem>-raw.csv or <stem>_raw.csv beside the report, else the installed ncu")
    s.add_argument("report", metavar="FILE.ncu-rep[.gz]", help="an Nsight Compute report")
