"""Benchmark (not a test): summarizing a trace of one million kernel launches.

    python -m analysis.cli.bench_summarize [--source EXPORT.sqlite.gz] [--kernels 1000000]
                                      [--kernels-per-call 100] [--keep BIG.sqlite]

Builds a large export from a real reference export: it copies the export and appends compute
calls made from the rows of the export's own last ``compute`` range (its kernel rows, the
runtime rows that launched them, its synchronize call and the NVTX range itself), shifted in
time and given fresh correlation ids, until ``--kernels`` kernel rows were inserted. Then it
times, in a fresh process so that building the file does not count, the summary path:
``run_summary.summarize_nsys`` (with everything it computes) and ``nsys_stats.cuda_gpu_kern_sum``,
and prints wall time and peak RSS (``resource.getrusage``) as JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

from analysis.readers.nsys.synthetic import build

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = REPO / "reports" / "reference" / "h200" / "cupy_sqdiff" / "baseline" / "n16384" / "nsys.sqlite.gz"
SUITE_DOMAIN = "cookbook"

def measure(export: str, workload: str, variant: str) -> dict:
    """Time the summary path on ``export`` in this process; peak RSS is this process's."""
    # imported here so that the measured process's peak RSS includes the readers it loads
    from analysis.readers.nsys import stats as nsys_stats
    from analysis.readers.nsys.trace import Trace
    from analysis.model.run_summary import summarize_nsys

    t0 = time.perf_counter()
    with Trace(export) as ex:
        summary = summarize_nsys(ex, workload, variant)
    t1 = time.perf_counter()
    with Trace(export) as ex:
        _, rows = nsys_stats.cuda_gpu_kern_sum(ex)
    t2 = time.perf_counter()
    return {
        "summarize_nsys_s": round(t1 - t0, 3),
        "cuda_gpu_kern_sum_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "calls_summarized": len(summary["calls"]),
        "kernels_in_compute_calls": sum(c["kernels"] for c in summary["calls"]),
        "kern_sum_rows": [[r[1], r[2], r[-1]] for r in rows],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.cli.bench_summarize", description=__doc__.split("\n")[0])
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help="a reference export (.sqlite or .sqlite.gz)")
    p.add_argument("--kernels", type=int, default=1_000_000)
    p.add_argument("--kernels-per-call", type=int, default=100)
    p.add_argument("--keep", help="write the large export here and keep it (default: a temporary file)")
    # the two steps of the benchmark, each in its own process (see main)
    p.add_argument("--build-into", metavar="EXPORT", help=argparse.SUPPRESS)
    p.add_argument("--measure", metavar="EXPORT", help=argparse.SUPPRESS)
    p.add_argument("--workload", help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.build_into:
        t0 = time.perf_counter()
        built = build(a.source, a.build_into, a.kernels, a.kernels_per_call)
        built["build_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps({"source": os.path.relpath(os.path.abspath(a.source), REPO), **built}))
        return 0
    if a.measure:
        print(json.dumps(measure(a.measure, a.workload, a.variant)))
        return 0
    parts = pathlib.Path(a.source).resolve().parts
    workload, variant = parts[-4], parts[-3]  # reference layout: <workload>/<variant>/n<size>/nsys.sqlite.gz
    # Building and measuring each run in a child process, and this one stays small: a child's
    # ru_maxrss starts from its parent's resident size at fork and survives exec, so a parent that
    # had built the export itself would set the "peak" the measurement reports.
    with tempfile.TemporaryDirectory() as tmp:
        big = a.keep or os.path.join(tmp, "big.sqlite")
        steps = [["--build-into", big, "--source", a.source, "--kernels", str(a.kernels),
                  "--kernels-per-call", str(a.kernels_per_call)],
                 ["--measure", big, "--workload", workload, "--variant", variant]]
        for step in steps:
            child = subprocess.run([sys.executable, "-m", "analysis.cli.bench_summarize", *step],
                                   capture_output=True, text=True, cwd=REPO)
            if child.returncode != 0:
                sys.stderr.write(child.stderr)
                return child.returncode
            result = json.loads(child.stdout)
            if step[0] == "--measure":
                result["cpu_count"] = os.cpu_count()
            print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
