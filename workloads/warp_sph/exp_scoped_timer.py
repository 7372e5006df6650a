"""Experiment: Warp's own timers beside Nsight Systems, on the same frames of the same process.

    python -m workloads.warp_sph.exp_scoped_timer --out-dir DIR --nsys NSYS --ncu NCU --python PYTHON

NVIDIA Warp's profiling guide times code with ``wp.ScopedTimer``: with ``synchronize=True``
and ``cuda_filter=wp.TIMING_ALL`` Warp records a CUDA event pair around every launch, memset and
memcpy it issues and reports each activity's elapsed time (its "CUDA timeline"); it documents a
resolution of about 0.5 µs and suggests Nsight Systems for short operations. Without
``synchronize`` the timer measures only the host's part (launches return before the GPU is done).

This experiment runs one child process under ``nsys profile -t cuda,nvtx -s none --cpuctxsw none
--cuda-graph-trace=node`` (node: the kernels inside a CUDA graph get their own records, not just
the graph). The child, per variant (``baseline``: every launch its own activity; ``graph``: one
graph launch per frame), runs a warm-up frame, then ``--frames`` frames in each of three modes,
one ``ScopedTimer`` and one NVTX range (domain ``cookbook.warp_sph``, message
``<variant>/<mode>``, payload = frame index) per frame:

``all``   ``synchronize=True, cuda_filter=wp.TIMING_ALL``: per-activity times (events around each);
``sync``  ``synchronize=True``, no activity timing: the frame's wall time, no events injected;
``host``  ``synchronize=False``: what the timer sees without synchronizing: the host's issue time.

So one process gives both numbers for the same launches: Warp's event times in
``scoped_timer.json`` and nsys' CUPTI kernel records in ``nsys.sqlite``; the report section
``analysis/report/sections/warp_sph_timers.py`` pairs them by frame (NVTX range) and activity name.
Files: ``scoped_timer.json``, ``nsys.sqlite`` (and ``nsys.nsys-rep``, which the reference copy
does not keep).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from typing import Sequence

from workloads.harness import provenance
from workloads.commands import run_command
from workloads.contract import WorkloadError
from workloads.harness.runner import write_json_atomic
from workloads.warp_backend import configured_warp, describe
from workloads.warp_sph import RECIPE

#: the NVTX domain of the experiment's per-frame ranges
NVTX_DOMAIN = "cookbook.warp_sph"
#: mode -> (ScopedTimer synchronize, activity timing on)
MODES = {"all": (True, True), "sync": (True, False), "host": (False, False)}
NSYS_FLAGS = ("-t", "cuda,nvtx", "-s", "none", "--cpuctxsw", "none", "--cuda-graph-trace=node")
#: TimingResult.filter -> kind (warp.TIMING_* values, stable since Warp 1.0)
KINDS = {1: "kernel", 2: "builtin", 4: "memcpy", 8: "memset", 16: "graph"}


def range_message(variant: str, mode: str) -> str:
    return f"{variant}/{mode}"


def _activity(r) -> dict:
    return {"name": r.name, "kind": KINDS.get(r.filter, f"filter {r.filter}"),
            "device": r.device.alias if r.device is not None else None, "elapsed_ms": float(r.elapsed)}


def run_child(size: int, frames: int, variants: Sequence[str]) -> dict:
    """The measured part (runs under nsys): every variant, every mode, ``frames`` frames each."""
    import nvtx

    wp = configured_warp()
    out = {"size": size, "frames": frames, "nvtx_domain": NVTX_DOMAIN, "runs": [], "warp": describe()}
    for name in variants:
        v = RECIPE.variant_class(name)(size=size, seed=0)
        v.setup()
        if not v.device.is_cuda:
            # Warp times activities on CUDA devices only: on the CPU the lists stay empty
            print(f"scoped_timer: {name} on {v.device}: no activity timing off CUDA", flush=True)
        # warm-up: modules loaded, the graph uploaded, the grid's buffers grown
        v.step()
        v.synchronize()
        print(f"scoped_timer: {name}: frame_mode={v.frame_mode}", flush=True)
        for mode, (sync, activities) in MODES.items():
            records = []
            for i in range(frames):
                text = io.StringIO()
                with nvtx.annotate(range_message(name, mode), domain=NVTX_DOMAIN, payload=i):
                    # the report (Warp's "CUDA timeline") goes to a buffer: kept for the first frame
                    with contextlib.redirect_stdout(text):
                        with wp.ScopedTimer(f"{name} {mode} frame {i}", synchronize=sync,
                                            cuda_filter=wp.TIMING_ALL if activities else 0) as timer:
                            v.step()
                if not sync:
                    v.synchronize()  # outside the range: the range, like the timer, holds the host's part
                rec = {"index": i, "elapsed_ms": float(timer.elapsed),
                       "activities": [_activity(r) for r in (timer.timing_results or [])]}
                if i == 0 and activities:
                    rec["report_text"] = text.getvalue()
                records.append(rec)
            total = sum(r["elapsed_ms"] for r in records) / len(records)
            print(f"scoped_timer: {name} {mode}: mean frame {total:.3f} ms "
                  f"({sum(len(r['activities']) for r in records)} activities)", flush=True)
            out["runs"].append({"variant": name, "mode": mode, "synchronize": sync,
                                "cuda_filter": "TIMING_ALL" if activities else "0",
                                "frame_mode": v.frame_mode, "frames": records})
        v.teardown()
    out["provenance"] = provenance.collect(("warp",))
    return out


def _tool_version(exe: str) -> str | None:
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _run(cmd: Sequence[str], what: str) -> None:
    print(f"scoped_timer: {what}: {' '.join(cmd)}", flush=True)
    done = subprocess.run(list(cmd))
    if done.returncode != 0:
        raise WorkloadError(f"exp_scoped_timer: {what} exited with {done.returncode}: {' '.join(cmd)}")


def run_experiment(out_dir: str, nsys: str, python: str, size: int, frames: int, variants: Sequence[str]) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    rep = os.path.join(out_dir, "nsys.nsys-rep")
    sqlite = os.path.join(out_dir, "nsys.sqlite")
    fd, child_json = tempfile.mkstemp(suffix=".json", prefix="scoped_timer_child-", dir=out_dir)
    os.close(fd)
    try:
        cmd = [nsys, "profile", *NSYS_FLAGS, "--force-overwrite", "true", "-o", rep.removesuffix(".nsys-rep"),
               python, "-m", "workloads.warp_sph.exp_scoped_timer", "--child", child_json,
               "--size", str(size), "--frames", str(frames), "--variants", ",".join(variants)]
        _run(cmd, "nsys profile")
        _run([nsys, "export", "--type", "sqlite", "--force-overwrite", "true", "-o", sqlite, rep], "nsys export")
        with open(child_json) as f:
            text = f.read()
        if not text:
            raise WorkloadError(f"exp_scoped_timer: the child wrote no record ({child_json})")
        record = json.loads(text)
    finally:
        os.unlink(child_json)
    record.update(experiment="scoped_timer", workload="warp_sph",
                  nsys={"command": cmd, "flags": list(NSYS_FLAGS), "version": _tool_version(nsys),
                        "export": os.path.basename(sqlite)})
    write_json_atomic(os.path.join(out_dir, "scoped_timer.json"), record)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.warp_sph.exp_scoped_timer",
                                description=__doc__.split("\n")[0])
    p.add_argument("--out-dir")
    p.add_argument("--nsys", default="nsys")
    p.add_argument("--ncu", default="ncu", help="unused: the experiment needs no ncu run")
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--size", type=int, default=RECIPE.default_size)
    p.add_argument("--frames", type=int, default=3, help="timed frames per variant and mode")
    p.add_argument("--variants", default="baseline,graph")
    p.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    return run_command("exp_scoped_timer", lambda: _command(p, a, RECIPE))


def _command(p: argparse.ArgumentParser, a: argparse.Namespace, recipe) -> str | None:
    variants = [v for v in a.variants.split(",") if v]
    for v in variants:
        recipe.variant_class(v)
    if a.size < 1 or a.frames < 1:
        raise WorkloadError("--size and --frames must be positive")
    if a.child:
        write_json_atomic(a.child, run_child(a.size, a.frames, variants))
        return None
    if not a.out_dir:
        p.error("--out-dir is required")
    run_experiment(a.out_dir, a.nsys, a.python, a.size, a.frames, variants)
    return f"scoped_timer: wrote {os.path.join(a.out_dir, 'scoped_timer.json')} and nsys.sqlite"


if __name__ == "__main__":
    sys.exit(main())
