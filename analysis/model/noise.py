"""The between-run noise model a reference keeps (``noise.json``): how far one step's median moves from
one full run to another of identical code on machines of one GPU model.

A single run times each step in one process, so the interval of its verdict (analysis.model.verdicts)
holds only the call-to-call noise of that process. Between runs, the host, the process, the GPU's
placement and the allocator's history change too; for host-bound steps that moves the median by far
more than the interval. The model is measured, not assumed: from A/A runs (the same commit, several
full runs on several machines) it takes, per step, the standard deviation of the logarithm of the
step's median across runs, ``log_sd``. Two runs' medians then differ, on the log scale, by a
quantity of standard deviation ``sqrt(2) * log_sd``; a verdict widens its interval on each side by

    margin = K * sqrt(2) * max(log_sd, LOG_SD_FLOOR)        (K: the two-sided 99% normal quantile)

and calls a step faster or slower only when the widened interval lies wholly outside the threshold
band. A step the model holds no runs of uses its class's pooled spread (the root mean square of the
class's steps' ``log_sd``).

A step's class says what sets its time (:func:`analysis.model.compare_steps.step_class`): the GPU's
work (device-bound), the host's calls and launches (host-bound), or the copies over the host link
(host-link-bound). Each step also carries the smallest slowdown its margin lets a comparison call
95% of the time (``detectable_slowdown``): the threshold, the margin, a one-sided 99% draw of the
two runs' difference and the width of its within-run interval; the steps a CI gate can hold to a 5%
change are those whose detectable slowdown is at most 5%.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import os
from typing import Mapping

import numpy as np

from analysis.common import layout
from analysis.common.errors import AnalysisInputError
from analysis.model.run_summary import check_json, load_json
from analysis.model import verdicts
from analysis.model.compare_steps import CLASSES, StepClass, load_steps, step_order

NOISE_FILE = layout.NOISE
WIDTH_RESAMPLES = 999
NOISE_SCHEMA_VERSION = 1
#: two-sided 99% normal quantile: a between-run difference lies within K sqrt(2) log_sd 99% of the time
K = 2.5758
#: one-sided 99% normal quantile: the draw of two runs' difference a detectable slowdown must survive (at
#: 95% the stated slowdown was missed in 6% of held-out trials: the between-run spread has heavier tails)
Z_POWER = 2.3263
#: below this a step's measured log_sd is not trusted: five runs can put it near zero by chance (numba
#: streams: 0.04%), while the quietest device-bound steps move 0.34-0.44% between runs (Warp SPH)
LOG_SD_FLOOR = 0.003
#: the quantile over the A/A pairs of a step's within-run half-width that its detectable slowdown assumes
WIDTH_QUANTILE = 0.9

def log_sd_of(log_medians) -> float:
    """The between-run spread of one step: the SD (n - 1) of the log of its median over the runs."""
    return float(np.std(np.asarray(log_medians, dtype=float), ddof=1))


def pooled_of(log_sds) -> float:
    """A class's spread: the root mean square of its steps' (their variances averaged)."""
    return float(np.sqrt(np.mean(np.square(np.asarray(log_sds, dtype=float)))))


def margin_of(log_sd: float) -> float:
    """The half-width (log scale) a verdict across runs adds on each side of its interval."""
    return K * math.sqrt(2.0) * max(log_sd, LOG_SD_FLOOR)


def detectable_of(log_sd: float, threshold: float, within_halfwidth: float = 0.0) -> float:
    """The smallest slowdown (a fraction) called slower in 95% of comparisons across runs: the band's
    edge, the margin, a one-sided 95% draw of the two runs' difference and the within-run interval's
    own half-width (log scale). The 99% draw and the floor on log_sd are what held-out trials on the
    A/A runs needed for the stated slowdown to be found in 95% of them (tests/test_noise.py)."""
    return math.expm1(math.log1p(threshold) + margin_of(log_sd)
                      + Z_POWER * math.sqrt(2.0) * max(log_sd, LOG_SD_FLOOR) + within_halfwidth)


def within_halfwidth_of(pairs) -> float:
    """The half-width (log scale) of a step's within-run interval that its comparisons reach or stay
    under 90% of the time: the WIDTH_QUANTILE over the A/A pairs ``(base samples, candidate samples)``,
    at the verdicts' confidence (fewer resamples: the edges move by well under 1%)."""

    widths = []
    for base, cand in pairs:
        lo, hi = verdicts.compare(base, cand, n_resamples=WIDTH_RESAMPLES).interval
        widths.append((math.log(hi) - math.log(lo)) / 2)
    return float(np.quantile(widths, WIDTH_QUANTILE))


def step_key(key: tuple[str, str, int]) -> str:
    w, v, n = key
    return f"{w}/{v}/n{n}"


@dataclasses.dataclass(frozen=True)
class NoiseModel:
    path: str
    steps: dict[str, dict]
    classes: dict[str, dict]
    hosts: list[dict]
    runs: dict[str, str]
    method: str

    def spread(self, key: tuple[str, str, int], cls: StepClass) -> tuple[float, str]:
        """The step's between-run log SD, and what it rests on (the step's runs or its class's)."""
        entry = self.steps.get(step_key(key))
        if entry is not None:
            return entry["log_sd"], f"between-run spread of this step over {entry['runs']} runs"
        entry = self.classes.get(cls)
        if entry is None:
            raise AnalysisInputError(self.path, f"field classes/{cls}: no spread for {step_key(key)}'s class")
        return entry["log_sd"], f"between-run spread of {cls}-bound steps (no runs of this step)"

    def covers_host(self, cpu_model: str | None, cpu_count: int | None) -> bool:
        """Were the model's runs taken on a host of this CPU model and core count?"""
        return any(h.get("cpu_model") == cpu_model and h.get("cpu_count") == cpu_count for h in self.hosts)


_SPREAD = {"type": "object", "required": ["log_sd"], "properties": {"log_sd": {"type": "number", "minimum": 0}}}
NOISE_SCHEMA = {
    "type": "object",
    "required": ["schema_version", "steps", "classes", "runs", "method"],
    "properties": {
        "schema_version": {"const": NOISE_SCHEMA_VERSION},
        "steps": {"type": "object", "additionalProperties": _SPREAD},
        "classes": {"type": "object", "additionalProperties": _SPREAD},
        "runs": {"type": "object", "additionalProperties": {"type": "string"}},
        "hosts": {"type": "array", "items": {"type": "object"}},
        "method": {"type": "string"},
    },
}


def load_noise(path: str) -> NoiseModel:
    record = check_json(path, load_json(path), NOISE_SCHEMA, "a noise model")
    for where in ("steps", "classes"):
        for name, entry in record[where].items():
            if not math.isfinite(entry["log_sd"]):
                raise AnalysisInputError(path, f"field {where}/{name}/log_sd: not a finite number")
    return NoiseModel(path, record["steps"], record["classes"], record.get("hosts", []), record["runs"],
                      record["method"])


def find_noise(root: str) -> NoiseModel | None:
    """The noise model a reference keeps beside its captures, if any."""
    path = os.path.join(root, NOISE_FILE)
    return load_noise(path) if os.path.exists(path) else None


def derive(runs: Mapping[str, str], classify_from: str, threshold: float) -> dict:
    """The noise model of the A/A runs ``runs`` (name -> folder of one full run's captures of one
    commit): per step present in at least two runs, the SD of the log median across runs; per class
    (each step's class from its timed record and, where ``classify_from`` holds the nsys and ncu
    captures, its measured limiter), the pooled spread."""
    loaded = {name: load_steps(root) for name, root in runs.items()}
    reference = load_steps(classify_from)
    keys = sorted(set().union(*loaded.values()), key=step_order)
    steps, hosts = {}, []
    for key in keys:
        present = {name: s[key] for name, s in loaded.items() if key in s}
        if len(present) < 2:
            continue
        log_medians = {name: float(np.log(np.median([t for p in procs for t in p.times_ms])))
                       for name, procs in present.items()}
        sd = log_sd_of(list(log_medians.values()))
        cls, why = (reference.get(key) or next(iter(present.values())))[0].step_class
        diffs = {f"{a}/{b}": round(log_medians[a] - log_medians[b], 5)
                 for a, b in itertools.combinations(sorted(log_medians), 2)}
        samples = {name: [t for p in procs for t in p.times_ms] for name, procs in present.items()}
        halfwidth = within_halfwidth_of([(samples[a], samples[b]) for a, b in itertools.combinations(sorted(samples), 2)])
        steps[step_key(key)] = {
            "class": cls, "class_from": why, "runs": len(present), "log_sd": round(sd, 6),
            "margin": round(margin_of(sd), 6), "within_run_halfwidth": round(halfwidth, 6),
            "detectable_slowdown": round(detectable_of(sd, threshold, halfwidth), 4),
            "log_median_differences": diffs,
        }
    for name, s in loaded.items():
        prov = (load_json(next(iter(s.values()))[0].path).get("provenance") or {})
        host = {"run": name, "cpu_model": prov.get("cpu_model"), "cpu_count": prov.get("cpu_count"),
                "gpu": ((prov.get("gpus") or [{}])[0]).get("name"), "driver_version": prov.get("driver_version")}
        hosts.append(host)
    classes = {}
    for cls in CLASSES:
        members = [e for e in steps.values() if e["class"] == cls]
        if members:
            pooled = pooled_of([e["log_sd"] for e in members])
            halfwidth = float(np.quantile([e["within_run_halfwidth"] for e in members], WIDTH_QUANTILE))
            classes[cls] = {"log_sd": round(pooled, 6), "steps": len(members), "margin": round(margin_of(pooled), 6),
                            "within_run_halfwidth": round(halfwidth, 6),
                            "detectable_slowdown": round(detectable_of(pooled, threshold, halfwidth), 4)}
    return {
        "schema_version": NOISE_SCHEMA_VERSION,
        "method": (f"log_sd: SD (n-1) of the log of each step's median over the runs below (identical code); "
                   f"s = max(log_sd, {LOG_SD_FLOOR}); margin = {K} * sqrt(2) * s is added on each side of a "
                   f"verdict's interval; a class's log_sd is the root mean square of its steps'; "
                   f"detectable_slowdown = exp(log(1 + threshold) + margin + {Z_POWER} * sqrt(2) * s + "
                   f"within_run_halfwidth) - 1 at threshold {threshold}; within_run_halfwidth: the "
                   f"{WIDTH_QUANTILE} quantile over the pairs of half the log width of the {WIDTH_RESAMPLES}-"
                   f"resample within-run interval"),
        "runs": dict(runs),
        "pairs": [f"{a}/{b}" for a, b in itertools.combinations(sorted(runs), 2)],
        "hosts": hosts,
        "steps": steps,
        "classes": classes,
    }
