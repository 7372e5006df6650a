"""``python -m analysis compare BASE CAND``: step-by-step verdicts between two runs, as a CI gate."""
from __future__ import annotations

import json

from analysis.markdown import write_page
from analysis.outputs import write_text_atomic


def cmd_compare(a) -> int:
    # here, not at the top: `python -m analysis` imports every command's module to build its parser
    from analysis import compare  # noqa: PLC0415

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


def cmd_cross_gpu(a) -> int:
    from analysis import compare, cross_gpu  # noqa: PLC0415

    write_page(a.output_md, cross_gpu.markdown(compare.compare_folders(a.base, a.cand)))
    print(f"wrote {a.output_md}")
    return 0


def _two_folders(s, base_help: str, cand_help: str) -> None:
    """The two positional folders both commands compare: base, then candidate."""
    s.add_argument("base", help=base_help)
    s.add_argument("cand", help=cand_help)


def add_parser(sub) -> None:
    s = sub.add_parser(
        "compare", help="two run folders or references: per step the speedup with its interval and verdict",
        description="Per recipe, variant and size that both folders hold: the speedup base/candidate with "
                    "its confidence interval and verdict (the reports' verdict engine), time/floor, the measured "
                    "limiter (where the folders hold the nsys and ncu captures) and clocks on each side. Exit status: 1 when any step is slower with confidence, 0 otherwise, "
                    "2 on bad input.")
    _two_folders(s, "folder of the base run's captures (e.g. reports/reference/h200)",
                 "folder of the candidate run's captures")
    s.add_argument("--output-md", help="write the markdown here (default: print it)")
    s.add_argument("--output-json", help="write the comparison as JSON here")
    s.set_defaults(func=cmd_compare)
    s = sub.add_parser(
        "cross-gpu", help="two references of two GPUs: which steps scale with bandwidth, compute rate or neither",
        description="For every step both references hold: the speedup from GPU A to GPU B with its interval, the "
                    "measured limiter on each, and the ratio of the rate of the limiter's resource measured on the "
                    "two GPUs (their ceilings); a step scales with its limiter when its speedup matches that ratio. "
                    "Exit status 0, 2 on bad input.")
    _two_folders(s, "GPU A's reference (e.g. reports/reference/h200)", "GPU B's reference (e.g. reports/reference/h100)")
    s.add_argument("--output-md", required=True, help="the page to write")
    s.set_defaults(func=cmd_cross_gpu)
