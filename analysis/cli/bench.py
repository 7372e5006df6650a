"""Benchmark (not a test): every ``stats`` report and ``multiprocess-report`` on a synthetic export
of ten million kernel launches.

    python -m analysis.cli.bench [--kernels 10000000] [--flat-ranges 80000] [--nested-levels 20000]
                             [--long-name-bytes 20000000] [--keep BIG.sqlite | --export BIG.sqlite]
                             [--timeout-s 600] [--memory-limit-gb N] [--code-root DIR]

Builds the export with :func:`analysis.readers.nsys.synthetic.build_scale` in a temporary folder (10M
kernels, 10M runtime calls, 100K NVTX ranges of which 20K nest in one chain, one range named by
a 20 MB text: about 1.2 GB), then runs each command as the user would, ``python -m analysis ...``,
once, in a fresh child per command, and prints a table of wall seconds and peak resident memory.

The peak is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` read by a small intermediate
process that starts the command and waits for it: RUSAGE_CHILDREN is the largest of all waited
children, so each measurement needs a parent of its own. ``--code-root`` runs the commands of
another checkout (the code before a change) on the same export.
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

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = REPO / "reports" / "reference" / "h200" / "cupy_sqdiff" / "baseline" / "n16384" / "nsys.sqlite.gz"
REPORTS = ("cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "cuda_api_sum", "nvtx_sum",
           "nvtx_gpu_proj_sum")
#: the targets of issue 48: every command on the 10M-launch export within these
TARGET_S = 60.0
TARGET_RSS_MIB = 2048.0


def commands(export: str, out_dir: str) -> dict[str, list[str]]:
    """Label -> the command line (after ``python -m analysis``) of each measured command."""
    cmds = {f"stats {r}": ["stats", "--report", r, "--format", "csv", export] for r in REPORTS}
    cmds["multiprocess-report"] = ["multiprocess-report", export, "--output", os.path.join(out_dir, "mp.md"),
                                   "--figure", os.path.join(out_dir, "mp.png"), "--json",
                                   os.path.join(out_dir, "mp.json")]
    return cmds


def measure_one(argv: list[str], cwd: str, timeout_s: float, memory_limit_gb: float | None) -> dict:
    """Run ``python -m analysis argv`` in ``cwd`` and wait: wall seconds, peak RSS, exit status."""
    def limit() -> None:
        if memory_limit_gb:
            nbytes = int(memory_limit_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (nbytes, nbytes))

    t0 = time.perf_counter()
    try:
        child = subprocess.run([sys.executable, "-m", "analysis", *argv], cwd=cwd, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=timeout_s, preexec_fn=limit)
        rc, err = child.returncode, child.stderr
    except subprocess.TimeoutExpired as e:
        rc, err = "timeout", (e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else ""
    seconds = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # kB on Linux
    last = err.strip().splitlines()[-1][:200] if err and err.strip() else ""
    return {"seconds": round(seconds, 1), "peak_rss_mib": round(peak_mib), "rc": rc, "stderr_tail": last}


def table(results: dict[str, dict], timeout_s: float) -> str:
    lines = ["| command | seconds | peak RSS (MiB) | exit | within 60 s / 2 GiB | last stderr line |",
             "|---|---:|---:|---|---|---|"]
    for label, r in results.items():
        seconds = f"> {timeout_s:.0f} (killed)" if r["rc"] == "timeout" else f"{r['seconds']:.1f}"
        ok = r["rc"] == 0 and r["seconds"] < TARGET_S and r["peak_rss_mib"] < TARGET_RSS_MIB
        tail = r["stderr_tail"].replace("|", "\\|")
        lines.append(f"| {label} | {seconds} | {r['peak_rss_mib']} | {r['rc']} | {'yes' if ok else 'NO'} | {tail} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m analysis.cli.bench", description=__doc__.split("\n")[0])
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help="a reference export (.sqlite or .sqlite.gz)")
    p.add_argument("--kernels", type=int, default=10_000_000)
    p.add_argument("--flat-ranges", type=int, default=80_000)
    p.add_argument("--nested-levels", type=int, default=20_000)
    p.add_argument("--long-name-bytes", type=int, default=20_000_000)
    p.add_argument("--keep", help="build the export here and keep it (default: a temporary folder)")
    p.add_argument("--export", help="measure this export, built earlier with --keep, instead of building one")
    p.add_argument("--only", action="append", help="measure only these commands (a label of the table)")
    p.add_argument("--timeout-s", type=float, default=600.0, help="stop a command after this long")
    p.add_argument("--memory-limit-gb", type=float, help="address-space limit of each command (RLIMIT_AS)")
    p.add_argument("--code-root", default=str(REPO), help="the checkout whose `python -m analysis` is measured")
    p.add_argument("--json", help="also write the results here")
    # the two steps, each in its own process (see measure_one)
    p.add_argument("--build-into", metavar="EXPORT", help=argparse.SUPPRESS)
    p.add_argument("--measure", metavar="JSON_ARGV", help=argparse.SUPPRESS)
    a = p.parse_args(argv)

    if a.build_into:
        # only the build step needs the synthetic-export writer, not the timed children
        from analysis.readers.nsys.synthetic import build_scale  # noqa: PLC0415

        t0 = time.perf_counter()
        built = build_scale(a.source, a.build_into, a.kernels, a.flat_ranges, a.nested_levels, a.long_name_bytes)
        built["build_s"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(built))
        return 0
    if a.measure:
        print(json.dumps(measure_one(json.loads(a.measure), a.code_root, a.timeout_s, a.memory_limit_gb)))
        return 0

    with tempfile.TemporaryDirectory(prefix="analysis-bench-") as tmp:
        export = a.export
        if export is None:
            export = a.keep or os.path.join(tmp, "big.sqlite")
            built = subprocess.run([sys.executable, "-m", "analysis.cli.bench", "--build-into", export, "--source",
                                    a.source, "--kernels", str(a.kernels), "--flat-ranges", str(a.flat_ranges),
                                    "--nested-levels", str(a.nested_levels), "--long-name-bytes",
                                    str(a.long_name_bytes)], capture_output=True, text=True, cwd=REPO)
            if built.returncode != 0:
                sys.stderr.write(built.stderr)
                return built.returncode
            print(f"built {export}: {built.stdout.strip()}", flush=True)
        export = os.path.abspath(export)
        results: dict[str, dict] = {}
        for label, cmd in commands(export, tmp).items():
            if a.only and label not in a.only:
                continue
            step = [sys.executable, "-m", "analysis.cli.bench", "--measure", json.dumps(cmd), "--code-root", a.code_root,
                    "--timeout-s", str(a.timeout_s)]
            if a.memory_limit_gb:
                step += ["--memory-limit-gb", str(a.memory_limit_gb)]
            child = subprocess.run(step, capture_output=True, text=True, cwd=REPO)
            if child.returncode != 0:
                sys.stderr.write(child.stderr)
                return child.returncode
            results[label] = json.loads(child.stdout)
            print(f"{label}: {results[label]}", flush=True)
        print(f"\n{os.cpu_count()} CPUs (os.cpu_count), load average {os.getloadavg()[0]:.1f} at the end; "
              f"export {os.path.getsize(export) / 1e9:.2f} GB; code {a.code_root}\n")
        print(table(results, a.timeout_s))
        if a.json:
            with open(a.json, "w") as f:
                json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
