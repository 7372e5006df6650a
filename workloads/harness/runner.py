"""Command line shared by every workload: ``python -m workloads.<name> --variant V ...``.

Two modes:

``run`` (default)
    setup, ``--calls`` calls of the computation (each in its own ``compute``
    range, payload = call index), transfer, check. This is what runs under
    nsys and ncu: short, annotated, verified.
``timed``
    setup, ``--warmup`` calls, then timed calls (device events) until the median's
    interval is narrow enough or the budget is spent (``workloads/harness/sampling.py``;
    ``--repeats N``: exactly N), with NVML telemetry around each (``workloads/harness/telemetry.py``)
    and the L2 mode of ``--l2`` (``workloads/harness/l2.py``); samples, median and spread go to
    ``--output`` as JSON with provenance. The result of the last timed call is checked too.
``first``
    setup and one call, timestamped on the wall clock: with the launch time that
    ``workloads.tools.coldwarm`` passes in, the time to the first result of a new
    process (interpreter start, imports, JIT compilation, module load, first launch).

``--device cuda`` (default) runs on a CUDA GPU and refuses, in one line and with exit status 2,
when the recipe's packages or a GPU are missing. ``--device cpu`` runs the recipe's CPU path
through its framework's own switch (``Framework.cpu_env`` in :mod:`workloads.frameworks`: Warp's
CPU device, JAX's CPU platform, Numba's CUDA simulator, pandas for cuDF); a framework without one
is refused the same way.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import sys
import time

#: when this module was imported: the interpreter and the suite are up, no GPU library yet
_IMPORTED_UNIX_NS = time.time_ns()
from typing import Sequence

import numpy as np

from analysis.common import outputs
from workloads import annotate, frameworks, hostmath, settings, sources
from workloads.harness import gpu_turn, hostload, l2, provenance, sampling, telemetry
from workloads.contract import Recipe, Variant, WorkloadError, check_result
from workloads.profiler_range import cuda_profiler_range


DEVICES = ("cuda", "cpu")
#: how much of the result the check compares (--check)
CHECKS = ("full", "sample")
#: exit status of a run refused before it starts (missing package, GPU or CPU path)
EXIT_UNAVAILABLE = 2


def at_least(minimum: int):
    """An argparse type: an integer no smaller than ``minimum`` (``--repeats 0`` would time nothing
    and fail later, far from the cause, on statistics of no samples)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the least allowed, {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


def _parser(recipe: Recipe) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=f"python -m workloads.{recipe.name}",
        description=f"{recipe.title}, from {sources.cite(recipe.seed_document)}. Variants, in recipe order: "
        + ", ".join(recipe.variants),
    )
    p.add_argument("--variant", required=True, choices=recipe.variants, help="the step of the recipe to run")
    p.add_argument("--device", choices=DEVICES, default="cuda",
                   help="cuda (default): a CUDA GPU; cpu: the recipe's CPU path, through its framework's "
                        "own switch (slow: for tests at small sizes)")
    p.add_argument("--size", type=at_least(1), default=recipe.default_size, help=recipe.size_meaning)
    p.add_argument("--mode", choices=("run", "timed", "first"), default="run",
                   help="run: setup, --calls calls, check (what the profilers run); timed: warm-up, then "
                        "timed calls until the median is known (or exactly --repeats); first: time to the "
                        "first result of a fresh process")
    p.add_argument("--calls", type=at_least(1), default=3, help="run mode: calls of the computation")
    p.add_argument("--warmup", type=at_least(0), default=5, help="timed mode: untimed calls first")
    p.add_argument("--repeats", type=at_least(1), help="timed mode: exactly this many timed calls (no adaptive stop)")
    p.add_argument("--min-samples", type=at_least(1), default=10,
                   help="timed mode: at least this many timed calls, then stop when the median is known well enough")
    p.add_argument("--max-samples", type=at_least(1), default=2000, help="timed mode: at most this many timed calls")
    p.add_argument("--target-rel-halfwidth", type=float, default=0.01,
                   help="timed mode: stop when the median's 95%% interval is within this fraction of it")
    p.add_argument("--budget-s", type=float, default=20.0,
                   help="timed mode: stop after this many seconds of sampling (the minimum is always taken)")
    p.add_argument("--energy-burst-s", type=float, default=telemetry.ENERGY_BURST_S,
                   help="timed mode: seconds of calls back to back after the samples, whose energy per call NVML's "
                        "coarse counter can resolve (0: none)")
    p.add_argument("--l2", choices=l2.L2_MODES, default="warm",
                   help="timed mode: warm = samples back to back; cold-l2 = scrub L2 before each sample "
                        "(outside the timed window, timed apart)")
    p.add_argument("--check", choices=CHECKS, default="full",
                   help="full (default): every element of the last result against the float64 reference; "
                        "sample: a seeded sample of elements (the profiled runs: the timed run checks in full)")
    p.add_argument("--no-provenance", action="store_true",
                   help="first mode: leave the record's provenance out (workloads.tools.coldwarm keeps the cold "
                        "run's: nvidia-smi, git and the library versions took 0.3-1 s a process)")
    p.add_argument("--seed", type=int, default=0, help="random inputs' seed")
    p.add_argument("--output", help="write the run's JSON record here (atomically)")
    return p


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        return False


def required_packages(recipe: Recipe, device: str) -> tuple[str, ...]:
    """The import names a run of ``recipe`` on ``device`` needs: the framework's CPU set for
    ``cpu`` where it has one, else the recipe's own."""
    if device == "cpu":
        return frameworks.framework(recipe.framework).cpu_requires or recipe.requires
    return recipe.requires


class DeviceUnavailableError(WorkloadError):
    """The recipe's framework finds no usable CUDA GPU (:func:`framework_device_problem`)."""


def device_problem(recipe: Recipe, device: str) -> str | None:
    """Why ``recipe`` cannot run on ``device`` here, in one line; None when it can. For ``cpu``,
    applies the framework's CPU switch to this process's environment first (before any import of
    the framework, which reads it at import time). For ``cuda`` it asks only the CUDA driver
    (``cuInit``, which creates no context): the framework's own check creates a context (JAX's
    backend takes its share of the GPU's memory), so it waits for the GPU's turn
    (:func:`framework_device_problem`)."""
    fw = frameworks.framework(recipe.framework)
    command = f"python -m workloads.{recipe.name} --device cpu --variant ..."
    if device == "cpu":
        if fw.cpu_env is None:
            return f"{fw.title} has no CPU path: this recipe needs a CUDA GPU (--device cuda)"
        os.environ.update(fw.cpu_env)
        missing = [m for m in required_packages(recipe, device) if not _importable(m)]
        if missing:
            return f"its CPU path needs the Python package(s) {', '.join(missing)}, not importable here"
        return None
    cpu_hint = f"; its CPU path: {command}" if fw.cpu_env is not None else "; it has no CPU path"
    missing = [m for m in required_packages(recipe, device) if not _importable(m)]
    if missing:
        return f"needs the Python package(s) {', '.join(missing)}, not importable here{cpu_hint}"
    reason = frameworks.driver_problem()
    return None if reason is None else f"no CUDA GPU: {reason}{cpu_hint}"


def framework_device_problem(recipe: Recipe, device: str) -> str | None:
    """Why the recipe's framework cannot use a CUDA GPU here, in one line (as :func:`device_problem`
    says it); None when it can, or on the CPU. Its check may create a CUDA context: call it once the
    run holds the GPU's turn."""
    if device != "cuda":
        return None
    fw = frameworks.framework(recipe.framework)
    reason = fw.cuda_problem()
    if reason is None:
        return None
    cpu_hint = (f"; its CPU path: python -m workloads.{recipe.name} --device cpu --variant ..."
                if fw.cpu_env is not None else "; it has no CPU path")
    return f"no CUDA GPU: {reason}{cpu_hint}"


def write_json_atomic(path: str, record: dict) -> None:
    """Write JSON so that a reader never sees a half-written file (analysis/common/outputs.py)."""
    outputs.write_json_atomic(path, record, indent=2)


def _summary_ms(times_ms: Sequence[float]) -> dict:
    a = np.asarray(times_ms, dtype=np.float64)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {
        "median_ms": float(med),
        "q1_ms": float(q1),
        "q3_ms": float(q3),
        "iqr_ms": float(q3 - q1),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "mean_ms": float(a.mean()),
    }


def sampling_rule(args: argparse.Namespace) -> sampling.SamplingRule:
    if args.repeats is not None:
        return sampling.SamplingRule.fixed(args.repeats)
    return sampling.SamplingRule(args.min_samples, args.max_samples, args.target_rel_halfwidth, args.budget_s)


def timed_step(v: Variant, ph, i: int) -> float:
    """Milliseconds of one ``v.step()`` between the variant's events, in the ``i``-th compute range
    (which holds the wait for the stop event too)."""
    ev = v.event_pair()
    with ph("compute", payload=i):
        ev.start()
        v.step()
        ev.stop()
        return ev.elapsed_ms()


def energy_burst(v, gpu, min_s: float, clock=time.perf_counter, max_s: float | None = None) -> dict | None:
    """The energy per call of calls run back to back, each followed by a synchronize as in the timed
    samples, for at least ``min_s`` seconds and until NVML's counter has updated
    :data:`telemetry.MIN_BURST_UPDATES` times among them (at most ``max_s``, default 4 x ``min_s``
    + 1 s): the counter updates every ~100 ms, so a call of a few ms needs many in a row, and its
    energy is read between two updates the watch thread saw (:func:`telemetry.burst_energy`),
    not between two arbitrary reads. None without NVML or an energy counter."""
    if min_s <= 0 or not gpu.available:
        return None
    v.synchronize()
    if gpu.energy_mj() is None:
        return None
    max_s = 4 * min_s + 1.0 if max_s is None else max_s
    calls = 0
    with telemetry.EnergyWatch(gpu.energy_mj, clock) as watch:
        t0 = clock()
        while True:
            v.step()
            v.synchronize()
            calls += 1
            elapsed = clock() - t0
            if elapsed >= max_s or (elapsed >= min_s and
                                    sum(1 for t, _ in watch.updates if t > t0) >= telemetry.MIN_BURST_UPDATES):
                break
        t1 = clock()
    return telemetry.burst_energy(watch.updates, t0, t1, calls)


def timed_calls(v, ph, rule: sampling.SamplingRule, l2_mode: str, *, scrubber=None, gpu=None,
                clock=time.perf_counter, energy_burst_s: float = telemetry.ENERGY_BURST_S) -> dict:
    """The timed samples of one variant and what was recorded around them.

    Each sample: (cold-l2) the L2 scrub, timed apart; an NVML snapshot; the call between device
    events; a synchronize; a second snapshot. Only the events' interval is the sample. The
    snapshots read the energy counter only where the samples' own windows give the energy per
    call: warm, with no energy burst to follow (``energy_burst_s`` 0), because that read takes
    milliseconds and would cut the samples a budget holds for sub-millisecond calls
    (docs/measurement.md). A warm run's burst gives its energy instead; no report reads a
    cold-L2 run's energy (its "Warm and cold L2" section reads the times).
    ``scrubber`` and ``gpu`` default to the real ones; tests pass their own.
    """
    if l2_mode not in l2.L2_MODES:
        raise WorkloadError(f"unknown L2 mode {l2_mode!r}, expected one of {l2.L2_MODES}")
    if l2_mode == "cold-l2" and scrubber is None:
        scrubber = l2.L2Scrubber()
    if gpu is None:
        gpu = telemetry.Telemetry.open()
    state_start = gpu.device_state()
    host_call_ms, host_synced_ms, scrub_ms, per_sample = [], [], [], []
    burst_follows = l2_mode == "warm" and energy_burst_s > 0
    read_sample_energy = l2_mode == "warm" and not burst_follows
    energy_start = gpu.snapshot()

    def take_sample(i: int) -> float:
        if scrubber is not None:
            scrub_ms.append(scrubber.scrub() * 1e3)
        before = gpu.snapshot(energy=read_sample_energy)
        ev = v.event_pair()
        with ph("compute", payload=i):
            t_start = clock()
            ev.start()
            v.step()
            # what a host timer around the call alone sees (the PyCUDA article's time.time()):
            # launches return before the GPU is done
            t_returned = clock()
            ev.stop()
            v.synchronize()
            t_synced = clock()
            elapsed_ms = ev.elapsed_ms()
        per_sample.append({"before": before, "after": gpu.snapshot(energy=read_sample_energy)})
        host_call_ms.append((t_returned - t_start) * 1e3)
        host_synced_ms.append((t_synced - t_start) * 1e3)
        return elapsed_ms

    result = sampling.sample_adaptively(take_sample, rule, clock)
    energy_end = gpu.snapshot()
    # outside the samples: calls back to back, for an energy per call the counter can resolve
    burst = energy_burst(v, gpu, energy_burst_s, clock) if burst_follows else None
    out = {
        "times_ms": result.samples,
        "timing": _summary_ms(result.samples),
        "samples": len(result.samples),
        "sampling": {"rule": rule.as_dict(), **result.as_dict()},
        "host_call_ms": host_call_ms,
        "host_synced_ms": host_synced_ms,
        "l2_mode": l2_mode,
        "telemetry": telemetry.summarize(per_sample, ((energy_start or {}).get("energy_mj"),
                                                      (energy_end or {}).get("energy_mj")), len(result.samples),
                                          burst, sample_energy_read=read_sample_energy)
        if gpu.available else telemetry.not_available(gpu.reason),
        "_gpu_state_start": state_start,
        "_gpu_state_end": gpu.device_state(),
    }
    if scrubber is not None:
        out["l2_scrub"] = {"buffer_bytes": scrubber.buffer_bytes, "l2_bytes": scrubber.l2_bytes,
                           "scrub_ms": scrub_ms}
    return out


def _capture_range(recipe: Recipe):
    """The profiler capture range around the compute calls, for recipes that declare one (the HPC-center guide's
    method: nsys --capture-range=cudaProfilerApi then records only these calls). It starts only when
    COOKBOOK_CAPTURE_RANGE=1, which the pipeline's nsys rule sets."""
    if not recipe.capture_range:
        return contextlib.nullcontext()

    return cuda_profiler_range()


def free_device_and_end_turn(v: Variant, turn: gpu_turn.GpuTurn | None) -> dict | None:
    """Free the variant's device memory (``teardown``, then its framework's cached blocks) and give
    the GPU's ``turn`` back if the process now holds little of it (:meth:`gpu_turn.GpuTurn.release`);
    what was decided, or None without a turn. After it the process uses the GPU no more, and its
    host work shares the cores with the next run's (:func:`workloads.hostmath.share_cores`)."""
    v.teardown()
    v.free_cached_device_memory()
    if turn is None or not turn.held:
        return None
    turn_end = turn.release(*telemetry.process_gpu_memory())
    if turn_end["released"]:
        hostmath.share_cores()
    return turn_end


def _check(v: Variant, recipe: Recipe, ph, how: str = "full",
           turn: gpu_turn.GpuTurn | None = None) -> tuple[float, dict, dict | None]:
    """The relative error of the last result, what was compared (every element, or the variant's
    seeded sample: ``sampled_result`` against ``reference_at``, :mod:`workloads.harness.check`), and
    the end of the run's GPU ``turn`` (:meth:`gpu_turn.GpuTurn.release`).

    Once the result is on the host, and with it the host copy of any input drawn on the device
    (``keep_reference_inputs``), the variant frees the device (``teardown`` and its framework's
    cached memory); the run then gives its GPU turn back, if it holds a tenth of the GPU's memory
    or less, so that the float64 reference and the comparison, CPU work of seconds for a 2 GiB
    result, run beside the next run's turn rather than in it. A reference that computes on the
    device (``reference_uses_device``) is computed before the teardown."""
    what = f"{recipe.name}/{v.name} size {v.size}"
    with ph("transfer"):
        if how == "sample":
            out, idx, total = v.sampled_result()
        else:
            out, idx = v.result(), None
            total = int(out.size)
        v.keep_reference_inputs(idx)

    def reference() -> np.ndarray:
        return v.reference() if idx is None else v.reference_at(idx)

    ref = None
    if v.reference_uses_device:
        with ph("check"):
            ref = reference()
    turn_end = free_device_and_end_turn(v, turn)
    with ph("check"):
        if ref is None:
            ref = reference()
        if idx is not None:
            err = check_result(out, ref, v.tolerance, f"{what} (sampled check)")
            return err, {"method": "sample", "elements": int(idx.size), "of": total}, turn_end
        err = check_result(out, ref, v.tolerance, what)
        return err, {"method": "full", "elements": total, "of": total}, turn_end


def run(recipe: Recipe, args: argparse.Namespace) -> dict:
    # third-party functions named in COOKBOOK_NVTX_FUNCTIONS get NVTX ranges, unedited
    annotated = [w.path for w in annotate.annotate_from_environment()]
    cls = recipe.variant_class(args.variant)
    v = cls(size=args.size, seed=args.seed)

    def ph(name: str, payload: int | None = None):
        return annotate.phase(recipe.name, v.name, name, payload)

    wall_s: dict[str, float] = {}
    # the packages first: importing them is CPU work that need not hold a GPU other runs wait for
    for name in required_packages(recipe, args.device):
        importlib.import_module(name)
    # so is provenance (nvidia-smi, git, CuPy's version calls: 0.3-1 s a process; in "first" mode
    # after the first result, which it would delay), and the statistics the sampling rule computes
    # after each sample: imported inside the samples, SciPy's first import (~0.5 s) was counted in
    # the budget, and at the lab's 1 s budget most runs stopped at their 10th sample
    provenance_record = None if args.mode == "first" else provenance.collect(recipe.requires)
    if args.mode == "timed":
        sampling.load_binomial_functions()
    t0 = time.perf_counter()
    v.prepare_host(args.check)
    wall_s["prepare_host"] = time.perf_counter() - t0
    # from here to the process's exit this run uses the GPU: on a GPU shared by the pipeline's
    # runs, wait for its turn (a no-op otherwise; workloads/harness/gpu_turn.py)
    turn = gpu_turn.take_turn(f"{recipe.name}/{v.name} size {v.size}", setup_on_every_core=True)
    problem = framework_device_problem(recipe, args.device)
    if problem is not None:
        raise DeviceUnavailableError(problem)
    t0 = time.perf_counter()
    with ph("setup"):
        v.setup()
        v.synchronize()
    wall_s["setup"] = time.perf_counter() - t0
    # the setup ran on every core (nothing is measured in it); what follows, on the holder's alone
    if turn is not None:
        turn.measure_on_holder_cores()
    setup_done = time.time_ns()
    record: dict = {
        # analysis.model.timed_record.SCHEMA_VERSION reads it; records without the field are version 1
        "schema_version": 2,
        "workload": recipe.name,
        "variant": v.name,
        "summary": v.summary,
        "size": v.size,
        "mode": args.mode,
        "device": args.device,
        "timer": frameworks.framework(recipe.framework).timer,
        "work": v.work().as_dict(),
        "annotated_functions": annotated,
    }
    if turn is not None:
        record["gpu_turn_waited_s"] = turn.waited_s
        if turn.cpu_cores:
            # the CPU cores this run had to itself while it held the GPU (gpu_turn.split_cores)
            record["gpu_turn_cpu_cores"] = turn.cpu_cores
    # how busy this run's cores and the others are while it measures (workloads/harness/hostload.py); a
    # cold/warm start holds the GPU from its launch and records none (nothing read before its first call)
    load = None if args.mode == "first" else hostload.HostLoad()
    if load is not None:
        load.start()
    if args.mode == "first":
        with ph("compute", payload=0):
            v.step()
            v.synchronize()
        first_result = time.time_ns()
        # a few more calls in the same process: the steady state the first call is compared with
        steady_ms = [timed_step(v, ph, i) for i in range(1, 6)]
        record["steady_call_ms"] = _summary_ms(steady_ms)["median_ms"]
        launch = settings.text("COOKBOOK_LAUNCH_UNIX_NS")
        record["first_result"] = {
            "launch_unix_ns": int(launch) if launch else None,
            "imported_unix_ns": _IMPORTED_UNIX_NS,
            "setup_done_unix_ns": setup_done,
            "first_result_unix_ns": first_result,
        }
    elif args.mode == "run":
        t0 = time.perf_counter()
        with _capture_range(recipe) as in_range:
            for i in range(args.calls):
                with ph("compute", payload=i):
                    v.step()
                    # one synchronize per call, so each compute range holds its own GPU work
                    v.synchronize()
        wall_s["compute"] = time.perf_counter() - t0
        record["calls"] = args.calls
        # whether the calls ran inside cuProfilerStart/Stop: a profiler honouring it recorded only them
        record["capture_range"] = bool(in_range)
    else:
        t0 = time.perf_counter()
        with ph("warmup"):
            for _ in range(args.warmup):
                v.step()
            v.synchronize()
        wall_s["warmup"] = time.perf_counter() - t0
        record["warmup_calls"] = args.warmup
        record.update(timed_calls(v, ph, sampling_rule(args), args.l2, energy_burst_s=args.energy_burst_s))
    if load is not None:
        # over the profiled calls, or the warm-up, samples and energy burst
        record["host_load"] = load.stop()
    t0 = time.perf_counter()
    record["relative_error"], record["check"], turn_end = _check(v, recipe, ph, args.check, turn)
    wall_s["transfer_and_check"] = time.perf_counter() - t0
    if turn_end is not None:
        record["gpu_turn_end"] = turn_end
    record["tolerance"] = v.tolerance
    record["host_wall_s"] = wall_s
    if args.mode == "first" and args.no_provenance:
        record["provenance"] = None
    else:
        record["provenance"] = provenance_record or provenance.collect(recipe.requires)
    if args.mode == "timed":
        record["provenance"]["l2_mode"] = args.l2
        record["provenance"]["gpu_state"] = {"start": record.pop("_gpu_state_start"),
                                             "end": record.pop("_gpu_state_end")}
    return record


def main(recipe: Recipe, argv: Sequence[str] | None = None) -> int:
    try:
        # a cold/warm start's parent took the GPU's turn before launching it: held from here on,
        # before anything could start a process that inherits the lock (gpu_turn.turn_for_child)
        gpu_turn.adopt_handed_turn()
    except WorkloadError as e:
        print(f"{recipe.name}: {e}", file=sys.stderr)
        return 1
    args = _parser(recipe).parse_args(argv)
    problem = device_problem(recipe, args.device)
    if problem is not None:
        print(f"{recipe.name}: {problem}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        record = run(recipe, args)
    except DeviceUnavailableError as e:
        print(f"{recipe.name}: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except WorkloadError as e:
        print(f"{recipe.name}: {e}", file=sys.stderr)
        return 1
    line = f"{recipe.name}/{record['variant']} size={record['size']} mode={record['mode']} device={record['device']}"
    if "timing" in record:
        t = record["timing"]
        line += f" timer=\"{record['timer'].replace('`', '')}\""
        gbs = record["work"]["bytes_read"] + record["work"]["bytes_written"]
        line += (f" median={t['median_ms']:.4f} ms iqr={t['iqr_ms']:.4f} ms ({gbs / t['median_ms'] / 1e6:.1f} GB/s)"
                 f" samples={record['samples']} ({record['sampling']['stopped_because']}) l2={record['l2_mode']}")
    line += f" rel_err={record['relative_error']:.2e}"
    print(line)
    if args.output:
        write_json_atomic(args.output, record)
    return 0
