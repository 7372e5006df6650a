"""What the suite's NVTX annotation costs: ``python -m workloads.nvtx_multiprocess.overhead --output X.json``.

Runs a recipe's timed mode (by default ``python -m workloads.cupy_sqdiff --variant fused
--size 4096 --mode timed --repeats 200``) as fresh processes with ``COOKBOOK_NVTX=1`` and
``COOKBOOK_NVTX=0``, alternating the order pair by pair (on/off, then off/on, ...) so that a
slow drift of the machine (clocks, temperature) falls on both settings alike. With
``--nsys PATH`` the same pairs run again under
``nsys profile -t cuda,nvtx -s none --cpuctxsw none``, where NVTX calls reach a tool and cost
the most.

Two measurements, because they answer different questions:

* the recipe's median time per call (CUDA events, and the host's launch + synchronize time)
  with and without annotation. The runner starts its timers inside each ``compute`` range, so
  the push and pop themselves fall outside the timed interval: this shows whether annotating
  changes the timed work, and it should not;
* the cost of one range itself, timed in a tight loop in its own process with the same
  setting (and under nsys with ``--nsys``): ``annotate.phase`` around an empty call, and an
  ``annotate_functions`` wrapper around an empty function. Divided by the recipe's time per
  call it is the share of a call the annotation costs (one range per call).

The JSON record (written atomically) holds every run, the medians and the relative overheads,
and provenance; a short table is printed at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from workloads import annotate
from workloads.harness import provenance
from workloads.harness.runner import write_json_atomic
from workloads.nvtx_multiprocess.recipe import positive

#: the repository root: subprocesses run there so that ``-m workloads...`` resolves
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETTINGS = {"on": "1", "off": "0"}
NSYS_ARGS = ("profile", "-t", "cuda,nvtx", "-s", "none", "--cpuctxsw", "none", "--force-overwrite", "true")
#: the dotted path the wrapper measurement wraps (this module's own empty function)
NOOP_PATH = "workloads.nvtx_multiprocess.overhead.noop"


class OverheadError(RuntimeError):
    """A measurement could not be made: a command failed, timed out, or wrote no usable record."""


def noop() -> None:
    """Does nothing: what the range-cost loop wraps, so the loop measures annotation alone."""


# --- the range-cost loop (runs in its own process) ---------------------------------------------


def measure_range_cost(n_ranges: int, trials: int) -> dict:
    """Nanoseconds per ``annotate.phase`` range and per annotate_functions wrapper call, above an
    empty call, in this process (its COOKBOOK_NVTX, its profiler if any). Best of ``trials``:
    interruptions only ever add time."""
    import importlib

    module = importlib.import_module(NOOP_PATH.rsplit(".", 1)[0])  # not __main__: the path must resolve
    phase, call = annotate.phase, module.noop

    def loop_ns(body) -> int:
        best = None
        for _ in range(trials):
            t0 = time.perf_counter_ns()
            body()
            dt = time.perf_counter_ns() - t0
            best = dt if best is None else min(best, dt)
        return best

    def bare():
        for _ in range(n_ranges):
            call()

    def ranged():
        for i in range(n_ranges):
            with phase("nvtx_overhead", "loop", "compute", i):
                call()

    def through_module():
        for _ in range(n_ranges):
            module.noop()  # looked up at each call, as third-party callers do

    base_ns = loop_ns(bare)
    range_ns = loop_ns(ranged)
    base_module_ns = loop_ns(through_module)
    wrapped = annotate.annotate_functions([NOOP_PATH])
    try:
        wrapper_ns = loop_ns(through_module)
    finally:
        annotate.unannotate_functions(wrapped)
    return {
        "nvtx_enabled": annotate.ENABLED,
        "ranges_per_trial": n_ranges,
        "trials": trials,
        "range_ns": (range_ns - base_ns) / n_ranges,
        "wrapper_ns": (wrapper_ns - base_module_ns) / n_ranges,
        "empty_call_ns": base_ns / n_ranges,
    }


# --- running the subprocesses -------------------------------------------------------------------


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join((text or "").strip().splitlines()[-lines:])


def _run(cmd: list[str], env: dict, timeout_s: float) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise OverheadError(f"{' '.join(cmd)}: still running after {timeout_s:g} s (--timeout-s)") from None
    except OSError as e:
        raise OverheadError(f"{' '.join(cmd)}: could not start ({e})") from None
    if proc.returncode != 0:
        raise OverheadError(f"{' '.join(cmd)} exited with code {proc.returncode}:\n"
                            f"{_tail(proc.stderr) or _tail(proc.stdout) or '(no output)'}")
    return proc


def _env(setting: str) -> dict:
    env = dict(os.environ)
    env["COOKBOOK_NVTX"] = SETTINGS[setting]
    # the repository first on the path, so the subprocess imports this checkout's workloads
    env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    return env


def _prefix(nsys: str | None, work_dir: str, name: str) -> list[str]:
    return [nsys, *NSYS_ARGS, "-o", os.path.join(work_dir, name)] if nsys else []


def run_workload(args: argparse.Namespace, setting: str, nsys: str | None, work_dir: str, tag: str) -> dict:
    """One timed run of the workload; returns its per-call medians."""
    out = os.path.join(work_dir, f"{tag}.json")
    cmd = _prefix(nsys, work_dir, tag) + [
        args.python, "-m", args.workload, "--variant", args.variant, "--size", str(args.size), "--mode", "timed",
        "--warmup", str(args.warmup), "--repeats", str(args.repeats), "--output", out]
    t0 = time.perf_counter()
    _run(cmd, _env(setting), args.timeout_s)
    wall_s = time.perf_counter() - t0
    try:
        with open(out) as f:
            record = json.load(f)
        median_ms = float(record["timing"]["median_ms"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise OverheadError(f"{' '.join(cmd)}: no timed record in {out} ({type(e).__name__}: {e})") from None
    host = record.get("host_synced_ms") or []
    return {"setting": setting, "nvtx": SETTINGS[setting], "under_nsys": bool(nsys), "median_ms": median_ms,
            "host_synced_median_ms": statistics.median(host) if host else None,
            "repeats": len(record.get("times_ms") or []), "process_wall_s": wall_s}


def run_range_cost(args: argparse.Namespace, setting: str, nsys: str | None, work_dir: str, tag: str) -> dict:
    """The range-cost loop in a fresh process with ``setting`` (under nsys when given)."""
    cmd = _prefix(nsys, work_dir, tag) + [
        args.python, "-m", "workloads.nvtx_multiprocess.overhead", "--measure-ranges", str(args.loop_ranges),
        "--trials", str(args.loop_trials)]
    proc = _run(cmd, _env(setting), args.timeout_s)
    # nsys prints its own lines around the program's; the program's JSON is the last line that parses
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            result = json.loads(line)
        except ValueError:
            continue
        if isinstance(result, dict) and "range_ns" in result:
            return {"setting": setting, "under_nsys": bool(nsys), **result}
    raise OverheadError(f"{' '.join(cmd)}: printed no measurement:\n{_tail(proc.stdout)}")


def _relative(on: float | None, off: float | None) -> float | None:
    return None if on is None or off is None or off == 0 else on / off - 1.0


def summarize(runs: Sequence[dict], loops: Sequence[dict]) -> dict:
    """Per setting: the median over runs of each run's median per call; and the relative overheads."""
    out = {}
    for under_nsys in sorted({r["under_nsys"] for r in runs}):
        key = "nsys" if under_nsys else "plain"
        block: dict = {}
        for setting in SETTINGS:
            rs = [r for r in runs if r["under_nsys"] == under_nsys and r["setting"] == setting]
            ls = [x for x in loops if x["under_nsys"] == under_nsys and x["setting"] == setting]
            hosts = [r["host_synced_median_ms"] for r in rs if r["host_synced_median_ms"] is not None]
            block[setting] = {
                "runs": len(rs),
                "median_ms": statistics.median(r["median_ms"] for r in rs) if rs else None,
                "run_medians_ms": [r["median_ms"] for r in rs],
                "host_synced_median_ms": statistics.median(hosts) if hosts else None,
                "range_ns": statistics.median(x["range_ns"] for x in ls) if ls else None,
                "wrapper_ns": statistics.median(x["wrapper_ns"] for x in ls) if ls else None,
            }
        on, off = block["on"], block["off"]
        range_cost = None if on["range_ns"] is None or off["range_ns"] is None else on["range_ns"] - off["range_ns"]
        block["relative_overhead"] = {
            "median_ms": _relative(on["median_ms"], off["median_ms"]),
            "host_synced_median_ms": _relative(on["host_synced_median_ms"], off["host_synced_median_ms"]),
            # one compute range per timed call: its cost as a share of the call
            "one_range_per_call": None if range_cost is None or not off["median_ms"]
            else range_cost / (off["median_ms"] * 1e6),
        }
        out[key] = block
    return out


def format_table(summary: dict) -> str:
    def num(v, fmt):
        return "n/a" if v is None else format(v, fmt)

    header = f"{'setting':<8}{'NVTX':<6}{'runs':>5}{'median ms/call':>16}{'host ms/call':>14}" \
             f"{'range ns':>10}{'wrapper ns':>12}"
    lines = [header, "-" * len(header)]
    for key, block in summary.items():
        for setting in SETTINGS:
            b = block[setting]
            lines.append(f"{key:<8}{setting:<6}{b['runs']:>5}{num(b['median_ms'], '.4f'):>16}"
                         f"{num(b['host_synced_median_ms'], '.4f'):>14}{num(b['range_ns'], '.0f'):>10}"
                         f"{num(b['wrapper_ns'], '.0f'):>12}")
        rel = block["relative_overhead"]
        pct = lambda v: "n/a" if v is None else f"{v * 100:+.3f} %"  # noqa: E731
        lines.append(f"{key:<8}on vs off: {pct(rel['median_ms'])} per call (CUDA events), "
                     f"{pct(rel['host_synced_median_ms'])} (host); one range = {pct(rel['one_range_per_call'])} "
                     "of a call")
    return "\n".join(lines)


def _resolve_nsys(path: str) -> str:
    found = shutil.which(path)
    if found is None:
        raise OverheadError(f"--nsys {path}: no such executable (give the path to nsys, or put it on PATH)")
    return found


def run_all(args: argparse.Namespace) -> dict:
    configs: list[str | None] = [None] + ([_resolve_nsys(args.nsys)] if args.nsys else [])
    runs, loops = [], []
    with tempfile.TemporaryDirectory(prefix="nvtx-overhead-") as work_dir:
        for nsys in configs:
            where = "nsys" if nsys else "plain"
            for pair in range(args.pairs):
                # alternate which setting goes first, so drift over the session hits both alike
                order = ("on", "off") if pair % 2 == 0 else ("off", "on")
                for setting in order:
                    tag = f"{where}-{pair}-{setting}"
                    r = run_workload(args, setting, nsys, work_dir, tag)
                    r["pair"] = pair
                    runs.append(r)
                    print(f"  {tag}: median {r['median_ms']:.4f} ms/call", file=sys.stderr)
            for setting in SETTINGS:
                loops.append(run_range_cost(args, setting, nsys, work_dir, f"{where}-loop-{setting}"))
    return {
        "what": "NVTX annotation overhead: recipe time per call with COOKBOOK_NVTX=1 vs 0, and one range's cost",
        "workload": args.workload, "variant": args.variant, "size": args.size, "warmup": args.warmup,
        "repeats": args.repeats, "pairs": args.pairs, "nsys": os.path.basename(configs[-1]) if args.nsys else None,  # the tool, not this host's path to it
        "nsys_args": list(NSYS_ARGS) if args.nsys else None,
        "note": "the runner times each call inside its compute range, so push/pop are outside the timed "
                "interval; range_ns is their cost, measured separately",
        "runs": runs, "range_cost_loops": loops, "summary": summarize(runs, loops),
        "provenance": provenance.collect(("cupy",)),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.nvtx_multiprocess.overhead",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--output", help="write the JSON record here (atomically); required unless --measure-ranges")
    p.add_argument("--pairs", type=positive(int), default=5, help="on/off pairs per setting (default %(default)s)")
    p.add_argument("--workload", default="workloads.cupy_sqdiff", help="the recipe module (default %(default)s)")
    p.add_argument("--variant", default="fused")
    p.add_argument("--size", type=positive(int), default=4096)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=positive(int), default=200)
    p.add_argument("--nsys", metavar="PATH", help="also run every pair under nsys profile -t cuda,nvtx -s none "
                                                  "--cpuctxsw none (this nsys)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the runs (default: this one)")
    p.add_argument("--timeout-s", type=positive(float), default=600.0, help="limit per subprocess")
    p.add_argument("--loop-ranges", type=positive(int), default=50_000, help="ranges per trial of the cost loop")
    p.add_argument("--loop-trials", type=positive(int), default=5)
    # internal: what each range-cost subprocess runs
    p.add_argument("--measure-ranges", type=positive(int), help=argparse.SUPPRESS)
    p.add_argument("--trials", type=positive(int), default=5, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.measure_ranges:
        print(json.dumps(measure_range_cost(args.measure_ranges, args.trials)))
        return 0
    if not args.output:
        p.error("--output is required")
    try:
        record = run_all(args)
    except OverheadError as e:
        print(f"nvtx overhead: {e}", file=sys.stderr)
        return 1
    write_json_atomic(args.output, record)
    print(format_table(record["summary"]))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
