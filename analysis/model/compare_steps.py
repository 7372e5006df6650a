"""The timed steps of a folder of captures, what both a comparison (analysis.model.compare) and the
between-run noise model (analysis.model.noise) read: each process's times, time over its floor,
clocks, measured limiter and provenance, grouped by step; and what sets a step's time (its class).
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Literal, Mapping

import numpy as np

from analysis.common import layout
from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import existing_capture
from analysis.model import limiter, verdicts
from analysis.model.floors import floor
from analysis.model.run_summary import summarize_run
from analysis.model.records import load_record
from analysis.model.timed_record import load_timed
from workloads.harness.telemetry import energy_per_call
from workloads.registry import BY_NAME

StepClass = Literal["device", "host", "host-link"]
CLASSES: tuple[StepClass, ...] = ("device", "host", "host-link")

#: measured limiter kinds (analysis.model.limiter.StepLimiter.kind) and the class they put a step in
_KIND_CLASS: dict[str, StepClass] = {
    "memory": "device", "compute": "device", "latency": "device",
    "launch/host": "host", "synchronization": "host",
    "host link": "host-link",
}
#: without a measured limiter: a call whose host side (host_call_ms) takes at least this share of its
#: CUDA-event time is set by its launches, not its kernels
HOST_SHARE = 0.15


def step_class(limiter_kind: str | None, record: Mapping) -> tuple[StepClass, str]:
    """What sets a step's time, and what that rests on. The measured limiter (nsys and ncu) decides
    where there is one; otherwise the timed record: copies over the host link in the declared work ->
    host-link-bound; host call time at least HOST_SHARE of the CUDA-event time -> host-bound; else
    device-bound."""
    if limiter_kind in _KIND_CLASS:
        return _KIND_CLASS[limiter_kind], f"measured limiter: {limiter_kind}"
    work = record.get("work") or {}
    if (work.get("bytes_h2d") or 0) + (work.get("bytes_d2h") or 0) > 0:
        return "host-link", "timed record: its work copies over the host link"
    host_ms, event_ms = record.get("host_call_ms"), record.get("times_ms")
    if host_ms and event_ms:
        share = float(np.median(host_ms)) / float(np.median(event_ms))
        if share >= HOST_SHARE:
            return "host", f"timed record: host call time {share:.0%} of the CUDA-event time"
        return "device", f"timed record: host call time {share:.0%} of the CUDA-event time"
    return "device", "timed record: no host call time recorded"


#: experiment folders hold timing records of other programs (allocator studies), not steps
SKIPPED_FOLDERS = ("experiments",)


@dataclasses.dataclass(frozen=True)
class Step:
    workload: str
    variant: str
    size: int
    path: str
    times_ms: list[float]
    time_over_floor: float | None
    sm_clock_mhz_range: list[int] | None
    energy_per_call_j: float | None
    limiter: str | None = None  # the measured limiter's label; None: no nsys capture beside the record
    #: the measured limiter's (kind, unit) (analysis.model.limiter.step_class); None: not measured
    limiter_class: tuple | None = None
    limiter_kind: str | None = None  # analysis.model.limiter.StepLimiter.kind, where measured
    #: the provenance fields compare reads (analysis.model.timed_record.TIMED_RECORD_SCHEMA); {} in records without
    provenance: dict = dataclasses.field(default_factory=dict)
    #: host_call_ms, work and times_ms of the record: what step_class reads without a measured limiter
    record_view: dict = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.workload, self.variant, self.size)

    @property
    def step_class(self) -> tuple[StepClass, str]:
        """What sets this step's time, and what that rests on (:func:`step_class`)."""
        return step_class(self.limiter_kind, self.record_view)

    @property
    def gpu_model(self) -> str | None:
        return ((self.provenance.get("gpus") or [{}])[0]).get("name")

    @property
    def host(self) -> tuple[str | None, int | None]:
        return self.provenance.get("cpu_model"), self.provenance.get("cpu_count")


def nearest_ceilings(folder: str, root: str, loaded: dict[str, dict] | None = None) -> dict | None:
    """The ceilings a record in ``folder`` uses: the nearest ``ceilings.json`` above it, up to ``root``
    (a workload merged in from a later run keeps its own). ``loaded``: the ceilings already read, by
    path, shared by the calls for one tree (its steps mostly share one file)."""
    loaded = {} if loaded is None else loaded
    while True:
        path = os.path.join(folder, "ceilings.json")
        if os.path.exists(path):
            if path not in loaded:
                loaded[path] = load_record(path, "a ceilings record")["ceilings"]
            return loaded[path]
        if os.path.samefile(folder, root) or os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)


def load_steps(root: str) -> dict[tuple[str, str, int], list[Step]]:
    """Every timed process under ``root``, grouped by step (workload, variant, size). A folder that
    holds several runs (side by side, e.g. ``run1/``, ``run2/``) has several processes per step."""
    if not os.path.isdir(root):
        raise AnalysisInputError(root, "not a folder of captures")
    steps: dict[tuple[str, str, int], list[Step]] = {}
    ceilings_read: dict[str, dict] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        # a live run's record, or a reference's gzipped copy
        name = next((n for n in (layout.TIMING, layout.TIMING + layout.GZIP_SUFFIX) if n in files), None)
        if name is None:
            continue
        path = os.path.join(folder, name)
        rec = load_timed(path)
        if len(rec["times_ms"]) < verdicts.MIN_SAMPLES:
            raise AnalysisInputError(path, f"{len(rec['times_ms'])} samples, need at least {verdicts.MIN_SAMPLES}")
        ceilings = nearest_ceilings(folder, root, ceilings_read)
        tel = rec.get("telemetry") or {}
        prov = rec.get("provenance") or {}
        step = Step(rec["workload"], rec["variant"], int(rec["size"]), path, [float(t) for t in rec["times_ms"]],
                    None, tel.get("sm_clock_mhz_range"), energy_per_call(tel)[0],
                    provenance={k: prov.get(k) for k in ("gpus", "driver_version", "cpu_model", "cpu_count",
                                                        "packages")} | {"host_load": rec.get("host_load")},
                    record_view={k: rec.get(k) for k in ("work", "host_call_ms", "times_ms")})
        if ceilings:
            try:
                fl = floor(rec["work"], ceilings)
                step = dataclasses.replace(step, time_over_floor=rec["timing"]["median_ms"] / fl.ms)
            except (ValueError, KeyError):
                pass  # no ceiling matches this work: the time/floor column says n/a
        steps.setdefault(step.key, []).append(step)
    if not steps:
        raise AnalysisInputError(root, "no timing.json records under this folder")
    return with_limiters(steps)


@functools.lru_cache(maxsize=None)
def _summary(folder: str) -> dict:
    """A capture folder's run summary, once per process (a folder compared with itself is read once)."""
    return summarize_run(folder)


def with_limiters(steps: dict[tuple[str, str, int], list[Step]]) -> dict[tuple[str, str, int], list[Step]]:
    """Each process's measured limiter, where its folder holds the nsys capture's export (a timed-only
    run has none, nor a folder copied without its traces): its run summary against the ncu launches of
    the recipe's runs at that size in the folder."""
    summaries: dict[str, dict] = {}
    for runs in steps.values():
        for s in runs:
            folder = os.path.dirname(s.path)
            if os.path.exists(os.path.join(folder, layout.NSYS_RUN)) and existing_capture(folder, layout.NSYS_EXPORT):
                summaries[s.path] = _summary(os.path.realpath(folder))
    def pool_key(path: str, run: dict) -> tuple[str, int, str]:
        # one pool per recipe, size and folder of the recipe's variants (a run folder among several):
        # <that folder>/<variant>/n<size>/timing.json
        return run["workload"], run["size"], os.path.dirname(os.path.dirname(os.path.dirname(path)))

    pools: dict[tuple[str, int, str], list] = {}
    for path, run in summaries.items():
        pools.setdefault(pool_key(path, run), []).append(run)
    out = {}
    for key, runs in steps.items():
        labelled = []
        for s in runs:
            run = summaries.get(s.path)
            if run is not None:
                pool = limiter.pool_of(pools[pool_key(s.path, run)])
                measured = limiter.step_limiter(run, pool)
                s = dataclasses.replace(s, limiter=measured.label(), limiter_class=(measured.kind, measured.unit),
                                        limiter_kind=measured.kind)
            labelled.append(s)
        out[key] = labelled
    return out


def step_order(key: tuple[str, str, int]) -> tuple:
    """Steps in report order: by workload, size, then the recipe's order of its variants."""
    w, v, n = key
    variants = BY_NAME[w].variants if w in BY_NAME else ()
    return (w, n, variants.index(v) if v in variants else len(variants), v)
