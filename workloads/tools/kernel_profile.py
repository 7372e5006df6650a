"""Profile one kernel of one workload variant under Nsight Compute, with line information.

The capture behind a kernel page (analysis/report/kernel_page.py): the kernel's metrics and its hottest
source lines, with the source imported into the report.

    python -m workloads.tools.kernel_profile --workload warp_sph --variant baseline \\
        --kernel get_acceleration --ncu ncu --python python3 --work-dir results \\
        --output-dir results/captures/kernels/warp_sph_baseline_get_acceleration

What it does, in order:

1. resolves the kernel's Python name to the regular expression ``ncu -k`` matches: frameworks add
   to the name (Warp: ``get_acceleration_a9fb4286_cuda_kernel_forward``; Numba: ``...[abi:v1,...]``),
   see :func:`kernel_regex`;
2. starts the variant cold (fresh private caches, as every profiled run: workloads/harness/cold.py)
   with line information on (``COOKBOOK_LINEINFO=1``; for Warp also the kernel cache in that fresh
   folder and, with ``--no-line-directives``, ``warp.config.line_directives = False``);
3. runs ``ncu --set full --import-source yes --source-folders <kernel cache>`` on one call of the
   variant, limited to the kernels launched inside its NVTX ``compute`` range and to the first
   launch matching the pattern (``-c 1``);
4. writes ``kernel-run.json``: what ran, the environment it set, the pattern, and provenance. The
   report itself is read on the analysis side (``python -m analysis kernel-page``), which also
   checks that the kernel it holds is one the pattern selects.

Exit status: 0 done; 2 bad arguments; 3 ncu or the workload failed; 4 no kernel matched (no report).
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from workloads import frameworks

from workloads.harness import provenance
from workloads.contract import WorkloadError
from workloads.harness.runner import write_json_atomic
from workloads.harness.cold import cache_root, fresh_cache_env, run_command, safe_rmtree
from workloads.registry import BY_NAME
from workloads.tools.gpu_jobs import gpu_job

#: report name inside the output folder (ncu adds .ncu-rep)
REPORT_STEM = "kernel"
RUN_RECORD = "kernel-run.json"

#: a Python function name: the only kind of base name the patterns are built from
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")



def kernel_regex(framework: str, name: str) -> str:
    """The ``ncu -k regex:`` pattern for kernel ``name`` (its Python or CUDA name) of ``framework``.

    The pattern matches the whole name ncu compares (``--kernel-name-base function``: no
    namespace, no parameters), so it works whether ncu searches or matches in full."""
    if not _IDENTIFIER.fullmatch(name):
        raise WorkloadError(f"kernel name {name!r} is not a Python/CUDA identifier")
    known = [f.name for f in frameworks.FRAMEWORKS.values() if f.kernel_pattern is not None]
    record = frameworks.FRAMEWORKS.get(framework)
    pattern = record.kernel_regex(name) if record is not None else None
    if pattern is None:
        raise WorkloadError(f"no kernel-name rule for framework {framework!r} (have: {', '.join(known)}); "
                            "pass --kernel-regex")
    return pattern


def name_matches(pattern: str, function_name: str) -> bool:
    """Whether ncu's function name is one the pattern selects (Python's re reads these patterns as
    ncu does: anchors, classes, groups and counted repeats only)."""
    return re.fullmatch(pattern, function_name) is not None


def nvtx_include(workload: str, variant: str) -> str:
    """The variant's compute ranges for ``--nvtx-include``. ncu reads "/" as its push/pop nesting
    separator, so the slashes inside the suite's range names are escaped (as rules/common.smk's
    nvtx_include() does)."""
    return "cookbook@" + "\\/".join((workload, variant, "compute")) + "/"


def profiled_env(framework: str, cache_dir: Path, line_directives: bool) -> dict[str, str]:
    """Environment added to the profiled process (beyond cold.py's fresh caches)."""
    env = {"COOKBOOK_LINEINFO": "1"}
    record = frameworks.FRAMEWORKS.get(framework)  # None: an overridden name with no record
    if record is None:
        return env
    if record.kernel_cache_variable:
        env[record.kernel_cache_variable] = str(cache_dir / framework)
    if record.line_directives_variable:
        env[record.line_directives_variable] = "1" if line_directives else "0"
    return env


def ncu_command(ncu: str, python: str, workload: str, variant: str, size: int, pattern: str,
                source_folders: Sequence[str], report_stem: str, launch_skip: int = 0) -> list[str]:
    # -s: skip that many matching launches first (a later substep, after the first has changed the data)
    skip = ["-s", str(launch_skip)] if launch_skip else []
    return [
        ncu, "--set", "full", "--import-source", "yes", "--source-folders", ",".join(source_folders),
        "--kernel-name-base", "function", "-k", f"regex:{pattern}", *skip, "-c", "1",
        "--clock-control", "none", "--nvtx", "--nvtx-include", nvtx_include(workload, variant),
        "--force-overwrite", "--export", report_stem,
        python, "-m", f"workloads.{workload}", "--variant", variant, "--size", str(size), "--calls", "1",
    ]


def _ncu_version(ncu: str) -> str | None:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    # "NVIDIA (R) Nsight Compute Command Line Profiler / Copyright ... / Version 2025.3.1.0 (build ...)"
    m = re.search(r"^Version\s+(\S+)", out.stdout, re.MULTILINE)
    if m:
        return m.group(1)
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return lines[-1] if lines else None


def _fail(code: int, message: str) -> int:
    print(f"kernel_profile: {message}", file=sys.stderr, flush=True)
    return code


def run(args: argparse.Namespace) -> int:
    recipe = BY_NAME.get(args.workload)
    if recipe is None:
        return _fail(2, f"no workload {args.workload!r} (have: {', '.join(BY_NAME)})")
    if args.variant not in recipe.variants:
        return _fail(2, f"workload {args.workload!r} has no variant {args.variant!r} "
                        f"(have: {', '.join(recipe.variants)})")
    framework = args.framework or recipe.framework
    try:
        pattern = args.kernel_regex or kernel_regex(framework, args.kernel)
    except WorkloadError as e:
        return _fail(2, str(e))
    size = args.size or recipe.default_size
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / f"{REPORT_STEM}.ncu-rep"
    if report.exists():
        report.unlink()  # a stale report would pass for this run's

    env, cache_dir = fresh_cache_env(args.work_dir, "kernel", os.environ)
    added = profiled_env(framework, cache_dir, args.line_directives)
    env.update(added)
    # ncu looks for source files that are missing at their recorded path in these folders,
    # recursively: Warp's generated .cu is recorded by its base name (the NVRTC program name)
    source_folders = [str(cache_dir / f.name) for f in frameworks.FRAMEWORKS.values() if f.kernel_cache_variable]
    cmd = ncu_command(args.ncu, args.python, args.workload, args.variant, size, pattern, source_folders,
                      str(out_dir / REPORT_STEM), args.launch_skip)
    print(f"kernel_profile: caches in {cache_dir}\nkernel_profile: {shlex.join(cmd)}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    try:
        with gpu_job(args.work_dir, args.gpus, env, "kernel", cmd) as job:
            for key in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
                if key in env and os.environ.get(key) != env[key]:
                    added[key] = env[key]  # recorded with the profile's settings
            rc = run_command(cmd, env, job, "kernel")
    finally:
        wall_s = time.perf_counter() - t0
        if not args.keep_cache:
            safe_rmtree(cache_dir, cache_root(args.work_dir))

    if rc != 0:
        what = ("it wrote a report, so the workload failed after the kernel was profiled" if report.exists()
                else "it wrote no report: the workload or ncu failed")
        return _fail(3, f"ncu exited with status {rc}: {what}; the output above says why")
    if not report.exists():
        return _fail(4, f"no kernel matched: ncu profiled nothing for -k regex:{pattern} inside "
                        f"{args.workload}/{args.variant}'s compute range (is {args.kernel!r} launched by that "
                        "variant? `nsys profile` it and read the kernel names, or pass --kernel-regex)")
    record = {
        "workload": args.workload,
        "variant": args.variant,
        "size": size,
        "kernel": args.kernel,
        "framework": framework,
        "kernel_regex": pattern,
        "launch_skip": args.launch_skip,
        "line_directives": args.line_directives if getattr(frameworks.FRAMEWORKS.get(framework), "line_directives",
                                                           False) else None,
        "report": report.name,
        "command": cmd,
        "environment": added,
        "cache_dir": str(cache_dir),
        "source_folders": source_folders,
        "ncu_version": _ncu_version(args.ncu),
        "ncu_wall_s": round(wall_s, 3),
        "provenance": provenance.collect(recipe.requires),
    }
    write_json_atomic(str(out_dir / RUN_RECORD), record)
    print(f"kernel_profile: profiled -k regex:{pattern} -> {report}")
    return 0


def _positive(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {v}")
    return v


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.kernel_profile", description=__doc__.split("\n")[0])
    p.add_argument("--workload", required=True)
    p.add_argument("--variant", required=True)
    p.add_argument("--kernel", required=True, help="the kernel's Python (or CUDA) name, e.g. get_acceleration")
    p.add_argument("--size", type=_positive, help="the workload's size (default: the recipe's)")
    p.add_argument("--line-directives", action=argparse.BooleanOptionalAction, default=True,
                   help="Warp only: correlate SASS with the Python source (default) or, with "
                        "--no-line-directives, with the generated CUDA-C in the kernel cache")
    p.add_argument("--framework", help="override the recipe's framework for the name rule")
    p.add_argument("--kernel-regex", help="use this ncu -k regex instead of the framework's rule")
    p.add_argument("--launch-skip", type=int, default=0,
                   help="matching launches to skip before the profiled one (ncu -s); 0: the first")
    p.add_argument("--ncu", default=os.environ.get("NCU", "ncu"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--work-dir", required=True, help="the suite's work folder (fresh caches go in <work-dir>/cache)")
    p.add_argument("--output-dir", required=True, help="gets kernel.ncu-rep and kernel-run.json")
    p.add_argument("--gpus", type=_positive, default=1, help="GPUs on this machine (see workloads.harness.cold)")
    p.add_argument("--keep-cache", action="store_true", help="keep the fresh cache folder (Warp's generated .cu)")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
