"""Compare two sets of timed captures step by step: is the candidate faster, and is it real?

``BASE`` and ``CAND`` are two run folders or two references (any folder holding
``<workload>/<variant>/n<size>/timing.json``; each record names its own workload, variant and
size, so the folders' layout beyond that does not matter). For each step both sides have, the
verdict engine of the reports (``analysis.model.verdicts``) gives the speedup base/candidate with its
interval; beside it, each side's time over its floor (from the nearest ``ceilings.json`` above the
record), its measured limiter (analysis.model.limiter, from the step's nsys capture and the ncu
profiles of its recipe at that size in the same folder) and whether that changed, and its clocks
where NVML telemetry was recorded.

Across runs (a reference against a fresh run, on another machine of the same GPU model) a step's
interval is widened by the between-run spread the base reference keeps for it (``noise.json``,
analysis.model.noise) before it is judged; within one run (``--within-run``, or a base without a noise
model) the interval is the run's own. Both sides' provenance is read: a different GPU model makes
the comparison a cross-GPU one (``python -m analysis cross-gpu``), not a regression test; a
different host (CPU model or core count) that the noise model's runs did not cover marks host-bound
steps "host differs"; a package whose version differs is named beside the steps that import it.

The result is a CI gate: ``any_slower`` is true when some step is slower beyond the threshold
with confidence.
"""
from __future__ import annotations

import dataclasses

from analysis.model import noise, verdicts
from analysis.common.errors import AnalysisInputError
from analysis.model.compare_steps import Step, load_steps, step_order

@dataclasses.dataclass(frozen=True)
class StepComparison:
    base_runs: list[Step]
    cand_runs: list[Step]
    verdict: verdicts.Verdict
    #: the verdict from the runs' own interval, before the between-run spread widened it
    within_run: verdicts.Verdict | None = None
    #: "name old → new" for each package this step imports whose version differs between the sides
    packages_differ: tuple[str, ...] = ()

    # the first process of each side names the step and gives time/floor and clocks
    @property
    def base(self) -> Step:
        return self.base_runs[0]

    @property
    def cand(self) -> Step:
        return self.cand_runs[0]

    @property
    def limiter_changed(self) -> bool | None:
        """Does the measured limiter differ between the sides? None: not measured on both."""
        if self.base.limiter_class is None or self.cand.limiter_class is None:
            return None
        return self.base.limiter_class != self.cand.limiter_class

    @property
    def clocks_differ(self) -> bool | None:
        """Did the two sides run at SM clocks whose ranges do not overlap? None: not recorded on both."""
        b, c = self.base.sm_clock_mhz_range, self.cand.sm_clock_mhz_range
        if not b or not c:
            return None
        return b[1] < c[0] or c[1] < b[0]

    def as_dict(self) -> dict:
        def side(runs: list[Step]) -> dict:
            s = runs[0]
            return {"paths": [r.path for r in runs], "processes": len(runs),
                    "samples": sum(len(r.times_ms) for r in runs), "time_over_floor": s.time_over_floor,
                    "sm_clock_mhz_range": s.sm_clock_mhz_range, "energy_per_call_j": s.energy_per_call_j,
                    "limiter": s.limiter, "host_load": s.provenance.get("host_load")}

        cls, cls_from = self.base.step_class
        return {"workload": self.base.workload, "variant": self.base.variant, "size": self.base.size,
                "verdict": self.verdict.as_dict(), "text": verdicts.format_verdict(self.verdict),
                "within_run": self.within_run.as_dict() if self.within_run else None,
                "class": cls, "class_from": cls_from, "packages_differ": list(self.packages_differ),
                "clocks_differ": self.clocks_differ, "limiter_changed": self.limiter_changed,
                "base": side(self.base_runs), "cand": side(self.cand_runs)}


@dataclasses.dataclass(frozen=True)
class Comparison:
    base_root: str
    cand_root: str
    steps: list[StepComparison]
    only_base: list[tuple[str, str, int]]
    only_cand: list[tuple[str, str, int]]
    #: the noise model whose spread widened the intervals; None: within-run intervals
    noise_path: str | None = None
    #: each side's machine, from its first record's provenance (None where not recorded)
    base_machine: dict = dataclasses.field(default_factory=dict)
    cand_machine: dict = dataclasses.field(default_factory=dict)
    #: the two sides ran on different hosts (CPU model or core count) the noise model did not cover
    host_differs: bool = False

    @property
    def gpu_models_differ(self) -> bool:
        """Different GPU models: a cross-GPU comparison, not a regression test (None on a side: unknown)."""
        b, c = self.base_machine.get("gpu"), self.cand_machine.get("gpu")
        return b is not None and c is not None and b != c

    @property
    def any_slower(self) -> bool:
        return any(s.verdict.kind == "slower" for s in self.steps)

    def as_dict(self) -> dict:
        return {"base": self.base_root, "cand": self.cand_root, "any_slower": self.any_slower,
                "noise_model": self.noise_path, "base_machine": self.base_machine,
                "cand_machine": self.cand_machine, "gpu_models_differ": self.gpu_models_differ,
                "host_differs": self.host_differs,
                "rule": {"threshold": verdicts.THRESHOLD, "confidence": verdicts.CONFIDENCE},
                "steps": [s.as_dict() for s in self.steps],
                "only_in_base": [list(k) for k in self.only_base], "only_in_cand": [list(k) for k in self.only_cand]}


def machine(steps: dict[tuple[str, str, int], list[Step]]) -> dict:
    """A side's machine as its records say: GPU model, driver, CPU model and core count (the first
    record that names each; None where no record does, as in records older than the field)."""
    out: dict = {"gpu": None, "driver_version": None, "cpu_model": None, "cpu_count": None}
    for runs in steps.values():
        for s in runs:
            found = {"gpu": s.gpu_model, "driver_version": s.provenance.get("driver_version"),
                     "cpu_model": s.host[0], "cpu_count": s.host[1]}
            out = {k: out[k] if out[k] is not None else found[k] for k in out}
    return out


def _packages_differ(b: Step, c: Step) -> tuple[str, ...]:
    bp, cp = b.provenance.get("packages") or {}, c.provenance.get("packages") or {}
    return tuple(f"{name} {bp[name]} → {cp[name]}" for name in sorted(set(bp) & set(cp)) if bp[name] != cp[name])


def judge(base_runs: list[Step], cand_runs: list[Step], model: noise.NoiseModel | None,
          host_differs: bool) -> tuple[verdicts.Verdict, verdicts.Verdict | None]:
    """A step's verdict, and the within-run one it was widened from (None: not widened). Several
    processes a side (at least verdicts.MIN_PROCESSES) make the process the unit: their spread is
    measured, nothing is added. Otherwise, with a noise model, the interval is widened by the step's
    (or its class's) between-run spread; a host-bound step called faster or slower on a host the
    model's runs did not cover is "host differs"."""
    v = verdicts.compare_runs([s.times_ms for s in base_runs], [s.times_ms for s in cand_runs])
    cls, _ = base_runs[0].step_class
    wide, within = v, None
    if model is not None and v.method != "Welch interval over processes":
        log_sd, rests_on = model.spread(base_runs[0].key, cls)
        wide, within = verdicts.across_runs(v, noise.margin_of(log_sd), rests_on), v
    if host_differs and cls != "device" and wide.kind in ("faster", "slower"):
        wide = dataclasses.replace(wide, kind="host differs",
                                   reason=f"{cls}-bound step on another host than the noise model's runs: {wide.reason}")
    return wide, within


def compare_folders(base_root: str, cand_root: str, noise_model: noise.NoiseModel | None = None,
                    within_run: bool = False) -> Comparison:
    """``noise_model``: the between-run spread to widen intervals by; default, the base's
    ``noise.json`` where it keeps one. ``within_run``: the two folders hold one run's processes,
    judged on their own intervals."""
    base, cand = load_steps(base_root), load_steps(cand_root)
    shared = sorted(set(base) & set(cand), key=step_order)
    if not shared:
        raise AnalysisInputError(cand_root, f"no step in common with {base_root}")
    base_machine, cand_machine = machine(base), machine(cand)
    gpus = {base_machine["gpu"], cand_machine["gpu"]}
    # one GPU model's between-run spread says nothing of two models' difference
    across_gpus = None not in gpus and len(gpus) == 2
    model = None if within_run or across_gpus else (noise_model or noise.find_noise(base_root))
    b_host, c_host = (base_machine["cpu_model"], base_machine["cpu_count"]), (cand_machine["cpu_model"], cand_machine["cpu_count"])
    # an unrecorded host (older records) is not evidence of a different one
    hosts_differ = None not in b_host and None not in c_host and b_host != c_host
    host_differs = bool(hosts_differ and (model is None or not model.covers_host(*c_host)))
    steps = []
    for k in shared:
        verdict, within = judge(base[k], cand[k], model, host_differs)
        steps.append(StepComparison(base[k], cand[k], verdict, within, _packages_differ(base[k][0], cand[k][0])))
    return Comparison(base_root, cand_root, steps, sorted(set(base) - set(cand), key=step_order),
                      sorted(set(cand) - set(base), key=step_order), model.path if model else None,
                      base_machine, cand_machine, host_differs)
