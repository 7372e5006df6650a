"""``python -m analysis compare BASE CAND``: step-by-step verdicts between two runs, as a CI gate.

Exit status: 0 no step slower (same, faster, uncertain, host differs); 1 some step slower with
confidence; 2 an input it cannot trust (a typed error, one line naming the file and the field);
3 the two sides ran on different GPU models: a cross-GPU comparison, not a regression test.
"""
from __future__ import annotations

import json
import sys

from analysis.cli.commands import add_command
from analysis.report.markdown import write_page
from analysis.common.outputs import write_text_atomic
from analysis.model import compare
from analysis.model import noise
from analysis.model import verdicts
from analysis.common.errors import AnalysisInputError
from analysis.report import compare_text, cross_gpu


def cmd_compare(a) -> int:
    """Per recipe, variant and size that both folders hold: the speedup base/candidate with its
    confidence interval and verdict (the reports' verdict engine), time/floor, the measured limiter
    (where the folders hold the nsys and ncu captures) and clocks on each side. Across runs the
    interval is widened by the between-run spread of BASE's noise.json. Exit status: 0 no step
    slower; 1 some step slower with confidence; 2 an input it cannot trust; 3 the sides ran on
    different GPU models (a cross-GPU comparison: use cross-gpu)."""
    # here, not at the top: `python -m analysis` imports every command's module to build its parser

    model = noise.load_noise(a.noise) if a.noise else None
    c = compare.compare_folders(a.base, a.cand, noise_model=model, within_run=a.within_run)
    md = compare_text.markdown(c)
    if a.output_md:
        write_page(a.output_md, md)
    if a.output_json:
        write_text_atomic(a.output_json, json.dumps(c.as_dict(), indent=1, sort_keys=True) + "\n")
    if not a.output_md:
        print(md, end="")
    print(f"compare: {compare_text.summary_line(c)}", file=sys.stderr)
    if c.gpu_models_differ:
        print(f"compare: different GPU models ({c.base_machine['gpu']} / {c.cand_machine['gpu']}): a cross-GPU "
              f"comparison, not a regression test; see python -m analysis cross-gpu (exit {EXIT_CROSS_GPU})",
              file=sys.stderr)
        return EXIT_CROSS_GPU
    slower = [s for s in c.steps if s.verdict.kind == "slower"]
    for s in slower:
        print(f"slower: {s.base.workload}/{s.base.variant}/n{s.base.size} "
              f"{compare.verdicts.format_verdict(s.verdict)}")
    return 1 if slower else 0


#: compare's exit status when the sides ran on different GPU models (neither pass nor fail)
EXIT_CROSS_GPU = 3


def cmd_noise(a) -> int:
    """From several full runs of identical code (NAME=FOLDER each; the reference among them): per step
    the SD of the log median across runs, per class the pooled spread, and the margin compare adds
    to a verdict's interval. Exit status 0, 2 on bad input."""

    runs = {}
    for item in a.runs:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise AnalysisInputError(item, "not NAME=FOLDER")
        runs[name] = folder
    model = noise.derive(runs, a.classify_from, verdicts.THRESHOLD)
    write_text_atomic(a.output, json.dumps(model, indent=1, sort_keys=True) + "\n")
    print(f"wrote {a.output}: {len(model['steps'])} steps from {len(runs)} runs")
    return 0


def cmd_cross_gpu(a) -> int:
    """For every step both references hold: the speedup from GPU A to GPU B with its interval, the
    measured limiter on each, and the ratio of the rate of the limiter's resource measured on the
    two GPUs (their ceilings); a step scales with its limiter when its speedup matches that ratio.
    Exit status 0, 2 on bad input."""

    # two GPUs' own intervals: the between-run spread of one GPU's runs says nothing of the other's
    write_page(a.output_md, cross_gpu.markdown(compare.compare_folders(a.base, a.cand, within_run=True)))
    print(f"wrote {a.output_md}")
    return 0


def _two_folders(s, base_help: str, cand_help: str) -> None:
    """The two positional folders both commands compare: base, then candidate."""
    s.add_argument("base", help=base_help)
    s.add_argument("cand", help=cand_help)


def add_parser(sub) -> None:
    s = add_command(sub, "compare", cmd_compare,
                    "two run folders or references: per step the speedup with its interval and verdict")
    _two_folders(s, "folder of the base run's captures (e.g. reports/reference/h200)",
                 "folder of the candidate run's captures")
    s.add_argument("--output-md", help="write the markdown here (default: print it)")
    s.add_argument("--output-json", help="write the comparison as JSON here")
    s.add_argument("--noise", help="the noise model (noise.json) to widen intervals by (default: BASE/noise.json)")
    s.add_argument("--within-run", action="store_true",
                   help="both folders hold processes of one run: judge on their own intervals, no noise model")
    s = add_command(sub, "noise", cmd_noise,
                    "A/A runs of one commit -> the between-run noise model a reference keeps (noise.json)")
    s.add_argument("runs", nargs="+", help="NAME=FOLDER of each run")
    s.add_argument("--classify-from", required=True,
                   help="the folder whose nsys and ncu captures give each step's measured limiter (the reference)")
    s.add_argument("--output", required=True, help="the noise.json to write")
    s = add_command(sub, "cross-gpu", cmd_cross_gpu,
                    "two references of two GPUs: which steps scale with bandwidth, compute rate or neither")
    _two_folders(s, "GPU A's reference (e.g. reports/reference/h200)", "GPU B's reference (e.g. reports/reference/h100)")
    s.add_argument("--output-md", required=True, help="the page to write")
