"""``python -m analysis coldstart``: the cold/warm records and first-call splits of a capture set."""
from __future__ import annotations

import json

from analysis.cli.commands import add_command
from analysis.common.outputs import check_target, write_text_atomic
from analysis.model.records import load_record


def _run(a) -> None:
    """Gather the cold, warm and cache-disabled start records of every variant
    (workloads.tools.coldwarm) with the first calls the nsys exports show, as one JSON for the
    reports."""
    # here, not at the top: `python -m analysis` imports every command's module to build its parser
    from analysis.model import coldstart  # noqa: PLC0415

    for path in a.records:
        load_record(path, "a cold-start record")
    check_target(a.output)
    rows = coldstart.summarize(a.records, a.captures)
    write_text_atomic(a.output, json.dumps(rows, indent=1, sort_keys=True) + "\n")
    for r in rows:
        cold, warm = r["runs"]["cold"]["phases"], r["runs"]["warm"]["phases"]
        print(f"{r['workload']}/{r['variant']}: first result cold {cold['time_to_first_result_s']:.2f} s, "
              f"warm {warm['time_to_first_result_s']:.2f} s")


def add_parser(sub) -> None:
    s = add_command(sub, "coldstart", _run, "cold/warm start records -> one JSON")
    s.add_argument("--captures", required=True, help="capture folder holding <workload>/<variant>/n<size>/")
    s.add_argument("--output", required=True, help="the JSON to write")
    s.add_argument("records", nargs="+", help="coldstart/<workload>_<variant>.json files")
