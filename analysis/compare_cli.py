"""``python -m analysis compare BASE CAND``: step-by-step verdicts between two runs, as a CI gate."""
from __future__ import annotations

import json

from analysis import compare
from analysis.markdown import write_page
from analysis.outputs import write_text_atomic


def cmd_compare(a) -> int:
    c = compare.compare_folders(a.base, a.cand)
    md = compare.markdown(c)
    if a.output_md:
        write_page(a.output_md, md)
    if a.output_json:
        write_text_atomic(a.output_json, json.dumps(c.as_dict(), indent=1, sort_keys=True) + "\n")
    if not a.output_md:
        print(md, end="")
    slower = [s for s in c.steps if s.verdict.kind == "slower"]
    for s in slower:
        print(f"slower: {s.base.workload}/{s.base.variant}/n{s.base.size} "
              f"{compare.verdicts.format_verdict(s.verdict)}")
    return 1 if slower else 0


def add_parser(sub) -> None:
    s = sub.add_parser(
        "compare", help="two run folders or references: per step the speedup with its interval and verdict",
        description="Per recipe, variant and size that both folders hold: the speedup base/candidate with "
                    "its confidence interval and verdict (the reports' verdict engine), time/floor, the measured "
                    "limiter (where the folders hold the nsys and ncu captures) and clocks on each side. Exit status: 1 when any step is slower with confidence, 0 otherwise, "
                    "2 on bad input.")
    s.add_argument("base", help="folder of the base run's captures (e.g. reports/reference/h200)")
    s.add_argument("cand", help="folder of the candidate run's captures")
    s.add_argument("--output-md", help="write the markdown here (default: print it)")
    s.add_argument("--output-json", help="write the comparison as JSON here")
    s.set_defaults(func=cmd_compare)
