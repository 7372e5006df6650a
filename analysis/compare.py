"""Compare two sets of timed captures step by step: is the candidate faster, and is it real?

``BASE`` and ``CAND`` are two run folders or two references (any folder holding
``<workload>/<variant>/n<size>/timing.json``; each record names its own workload, variant and
size, so the folders' layout beyond that does not matter). For each step both sides have, the
verdict engine of the reports (``analysis.verdicts``) gives the speedup base/candidate with its
interval; beside it, each side's time over its floor (from the nearest ``ceilings.json`` above the
record), its measured limiter (analysis.limiter, from the step's nsys capture and the ncu
profiles of its recipe at that size in the same folder) and whether that changed, and its clocks
where NVML telemetry was recorded.

The result is a CI gate: ``any_slower`` is true when some step is slower beyond the threshold
with confidence.
"""
from __future__ import annotations

import dataclasses
import functools
import os

from analysis import layout, limiter, verdicts
from analysis.errors import AnalysisInputError
from analysis.gzfiles import existing_capture
from analysis.floors import floor
from workloads.telemetry import energy_per_call
from analysis.run_summary import load_json, summarize_run

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
    #: the measured limiter's (kind, unit) (analysis.limiter.step_class); None: not measured
    limiter_class: tuple | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.workload, self.variant, self.size)


def nearest_ceilings(folder: str, root: str) -> dict | None:
    """The ceilings a record in ``folder`` uses: the nearest ``ceilings.json`` above it, up to ``root``
    (a workload merged in from a later run keeps its own)."""
    while True:
        path = os.path.join(folder, "ceilings.json")
        if os.path.exists(path):
            return load_json(path).get("ceilings")
        if os.path.samefile(folder, root) or os.path.dirname(folder) == folder:
            return None
        folder = os.path.dirname(folder)


def load_steps(root: str) -> dict[tuple[str, str, int], list[Step]]:
    """Every timed process under ``root``, grouped by step (workload, variant, size). A folder that
    holds several runs (side by side, e.g. ``run1/``, ``run2/``) has several processes per step."""
    if not os.path.isdir(root):
        raise AnalysisInputError(root, "not a folder of captures")
    steps: dict[tuple[str, str, int], list[Step]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        # a live run's record, or a reference's gzipped copy
        name = next((n for n in (layout.TIMING, layout.TIMING + layout.GZIP_SUFFIX) if n in files), None)
        if name is None:
            continue
        path = os.path.join(folder, name)
        rec = load_json(path)
        missing = [k for k in ("workload", "variant", "size", "times_ms", "work") if k not in rec]
        if missing:
            raise AnalysisInputError(path, f"not a timed record: missing {', '.join(missing)}")
        if len(rec["times_ms"]) < verdicts.MIN_SAMPLES:
            raise AnalysisInputError(path, f"{len(rec['times_ms'])} samples, need at least {verdicts.MIN_SAMPLES}")
        ceilings = nearest_ceilings(folder, root)
        tel = rec.get("telemetry") or {}
        step = Step(rec["workload"], rec["variant"], int(rec["size"]), path, [float(t) for t in rec["times_ms"]],
                    None, tel.get("sm_clock_mhz_range"), energy_per_call(tel)[0])
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
                step = limiter.step_limiter(run, pool)
                s = dataclasses.replace(s, limiter=step.label(), limiter_class=(step.kind, step.unit))
            labelled.append(s)
        out[key] = labelled
    return out


@dataclasses.dataclass(frozen=True)
class StepComparison:
    base_runs: list[Step]
    cand_runs: list[Step]
    verdict: verdicts.Verdict

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
                    "limiter": s.limiter}

        return {"workload": self.base.workload, "variant": self.base.variant, "size": self.base.size,
                "verdict": self.verdict.as_dict(), "text": verdicts.format_verdict(self.verdict),
                "clocks_differ": self.clocks_differ, "limiter_changed": self.limiter_changed,
                "base": side(self.base_runs), "cand": side(self.cand_runs)}


@dataclasses.dataclass(frozen=True)
class Comparison:
    base_root: str
    cand_root: str
    steps: list[StepComparison]
    only_base: list[tuple[str, str, int]]
    only_cand: list[tuple[str, str, int]]

    @property
    def any_slower(self) -> bool:
        return any(s.verdict.kind == "slower" for s in self.steps)

    def as_dict(self) -> dict:
        return {"base": self.base_root, "cand": self.cand_root, "any_slower": self.any_slower,
                "rule": {"threshold": verdicts.THRESHOLD, "confidence": verdicts.CONFIDENCE},
                "steps": [s.as_dict() for s in self.steps],
                "only_in_base": [list(k) for k in self.only_base], "only_in_cand": [list(k) for k in self.only_cand]}


def _order(key: tuple[str, str, int]) -> tuple:
    from workloads.registry import BY_NAME

    w, v, n = key
    variants = BY_NAME[w].variants if w in BY_NAME else ()
    return (w, n, variants.index(v) if v in variants else len(variants), v)


def compare_folders(base_root: str, cand_root: str) -> Comparison:
    base, cand = load_steps(base_root), load_steps(cand_root)
    shared = sorted(set(base) & set(cand), key=_order)
    if not shared:
        raise AnalysisInputError(cand_root, f"no step in common with {base_root}")
    # several processes per step on both sides: the process is the unit (verdicts.compare_runs)
    steps = [StepComparison(base[k], cand[k], verdicts.compare_runs([s.times_ms for s in base[k]],
                                                                   [s.times_ms for s in cand[k]]))
             for k in shared]
    return Comparison(base_root, cand_root, steps, sorted(set(base) - set(cand), key=_order),
                      sorted(set(cand) - set(base), key=_order))


def _limiters(s: StepComparison) -> str:
    b, c = (x.limiter or "not captured" for x in (s.base, s.cand))
    # one label where the (kind, unit) is the same on both sides: the shares of peak move with noise
    if s.limiter_changed is False or (s.base.limiter is None and s.cand.limiter is None):
        return b
    return f"{b} → {c}" + (" (changed)" if s.limiter_changed else "")


def _clocks(s: Step) -> str:
    return "not recorded" if not s.sm_clock_mhz_range else "{}–{} MHz".format(*s.sm_clock_mhz_range)


def _over_floor(s: Step) -> str:
    return "n/a" if s.time_over_floor is None else f"{s.time_over_floor:.2f}×"


def markdown(c: Comparison) -> str:
    from analysis.markdown import table

    def samples(runs: list[Step]) -> str:
        n = sum(len(r.times_ms) for r in runs)
        return f"{n}" if len(runs) == 1 else f"{n} in {len(runs)} processes"

    rows = [(s.base.workload, f"`{s.base.variant}`", s.base.size, f"{samples(s.base_runs)} / {samples(s.cand_runs)}",
             f"**{verdicts.format_verdict(s.verdict)}**", f"{_over_floor(s.base)} / {_over_floor(s.cand)}",
             _limiters(s),
             f"{_clocks(s.base)} / {_clocks(s.cand)}" + (" (different clocks)" if s.clocks_differ else ""))
            for s in c.steps]
    kinds = [s.verdict.kind for s in c.steps]
    lines = [
        "# Comparison of two runs",
        "",
        f"- base: `{c.base_root}`",
        f"- candidate: `{c.cand_root}`",
        f"- {len(c.steps)} steps in both: " + ", ".join(f"{kinds.count(k)} {k}"
                                                         for k in ("faster", "slower", "same", "uncertain")),
        "",
        f"Speedup = base median / candidate median (> 1: the candidate is faster), with its "
        f"{verdicts.CONFIDENCE:.0%} interval. "
        f"**same**: the interval lies within ±{verdicts.THRESHOLD:.0%}; **faster**/**slower**: wholly outside; "
        "**uncertain**: it straddles the band. Where both sides hold at least "
        f"{verdicts.MIN_PROCESSES} timed processes of a step, the process is the unit (Welch interval on the "
        "logarithms of the process medians); otherwise the samples are pooled and process-to-process variance "
        "is not in the interval.",
        "",
        table(("recipe", "variant", "size", "samples base / cand", "verdict, speedup [interval]",
               "time / floor base / cand", "measured limiter base → cand", "SM clock base / cand"), rows),
    ]
    unresolved = [s for s in c.steps if s.verdict.resolution]
    if unresolved:
        lines += ["", "What the uncertain steps' processes can resolve:", ""]
        lines += [f"- {s.base.workload}/`{s.base.variant}`/n{s.base.size}: {s.verdict.resolution}" for s in unresolved]
    lines += only_on_one_side(c, "Only in the base", "Only in the candidate")
    return "\n".join(lines) + "\n"


def only_on_one_side(c: Comparison, base_title: str, cand_title: str) -> list[str]:
    """Markdown lines naming the steps only one side holds (none when both hold the same)."""
    lines = []
    for title, keys in ((base_title, c.only_base), (cand_title, c.only_cand)):
        if keys:
            lines += ["", f"{title}: " + ", ".join(f"{w}/{v}/n{n}" for w, v, n in keys)]
    return lines
