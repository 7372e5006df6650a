"""The report of one recipe as data, built once from its run summaries: steps in ladder order with
their floors, verdicts, busy time and limiter, the result box, findings grouped by fix, copies by
phase, provenance and the commands the captures ran. The numbers only: the words are
:mod:`analysis.report.page_text`'s, and :mod:`analysis.report.markdown` and
:mod:`analysis.report.figures` format this model; they never read captures or compute numbers.

Ladder order is the recipe's declaration (``Recipe.parent_of``: the step listed before, or the
branch its ``improves_on`` table in ``workloads/<recipe>/__init__.py`` names, readable without the
GPU packages): each step is compared with the step it improves on, so a branch (a pool added to an
earlier step) meets its parent.

The per-step limiter is one slot, :data:`LIMITER`: a pure function of a step's run summary, its
floor, the size's runs, the ceilings and the framework's advice table, returning an
:class:`analysis.model.limiter.StepLimiter` with its source and the next thing to try.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable, Sequence

from analysis.model import verdicts
from analysis.model.floors import Floor, floor
from analysis.model.limiter import Kind, StepLimiter, fastest_steady_call
from analysis.model.limiter import is_library_kernel  # noqa: F401 - tests read it here
from analysis.model.limiter import advice as limiter_advice
from analysis.readers.ncu import COLLECTION_FULL, COLLECTION_METRICS, COLLECTION_SECTIONS
from analysis.model.run_summary import PHASES as RUN_PHASES
from workloads import sources
from workloads import frameworks
from analysis.model import limiter
from analysis.model.limiter import kernel_key
from analysis.model.limiter import host_time
from analysis.model import no_counters
from analysis.model.limiter.work_check import WorkCheck

CUDA_EVENTS = "CUDA events"

#: the phases whose copies the pages show, in run order (analysis.model.run_summary.PHASES): not the check,
#: whose copies are the suite's own gathering of a sampled result, no work of the recipe
COPY_PHASES = tuple(p for p in RUN_PHASES if p != "check")

def timer_of(framework: str) -> str:
    return frameworks.framework(framework).timer


def _steady(calls: Sequence[dict]) -> Sequence[dict]:
    return calls[1:] if len(calls) > 1 else calls


# --- the model --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Comparison:
    against: str  # the variant compared with
    label: str  # faster | slower | same | uncertain (analysis.model.verdicts)
    speedup: float  # against's median / this step's median
    reason: str
    interval: tuple[float, float] | None = None  # confidence interval of the speedup (analysis.model.verdicts)
    text: str = ""  # verdicts.format_verdict: "faster 1.85× [1.84, 1.86]"


@dataclasses.dataclass(frozen=True)
class BusyTime:
    """Mean of the steady calls (after the first), ms. ``busy_ms`` is the union of the GPU's
    operations (overlapping kernels and copies count once); the kinds are each kind's own sum."""
    wall_ms: float
    busy_ms: float
    idle_ms: float
    kernel_ms: float
    h2d_ms: float
    d2h_ms: float
    other_copy_ms: float
    memset_ms: float

    @property
    def overlap_ms(self) -> float:
        """How much the kinds' sums exceed the union: work that ran at the same time."""
        return max(self.kernel_ms + self.h2d_ms + self.d2h_ms + self.other_copy_ms + self.memset_ms
                   - self.busy_ms, 0.0)


@dataclasses.dataclass(frozen=True)
class Moved:
    """A measured quantity that moved against the parent step: ``unit`` "ms" (kernel time, copy time,
    GPU idle, GPU busy per call), "" for counts (allocation calls in the steady calls) and for the set
    of kernels per call (tuples)."""
    quantity: str
    before: float | int | tuple[int, ...]
    after: float | int | tuple[int, ...]
    unit: str = ""


@dataclasses.dataclass(frozen=True)
class Step:
    variant: str
    improves_on: str | None
    summary: str
    size: int
    median_ms: float
    q1_ms: float
    q3_ms: float
    floor_ms: float
    floor_resource: str
    floor_rate_name: str  # the reference rate the floor's binding resource is measured at
    achieved: float  # on the floor's resource, in floor_unit
    floor_unit: str
    achieved_of_ceiling: float  # floor_ms / median_ms
    vs_baseline: Comparison | None
    vs_parent: Comparison | None
    busy: BusyTime
    kernels_per_call: tuple[int, ...]
    alloc_calls_first: int
    alloc_calls_later: int
    host_call_ms: float | None
    host_synced_ms: float | None
    relative_error: float
    first_call_ms: float
    first_call_idle_ms: float
    limiter: StepLimiter
    #: what moved against the parent, measured (:func:`moved`): the two largest time moves over 5%,
    #: then the kernels per call and the allocation calls where they changed; None where the parent
    #: did not run at this size (the page then gives the step's own busy time)
    moved: tuple[Moved, ...] | None
    #: what the numbers rest on: timed samples (and why sampling stopped), warm-up calls, the calls
    #: recorded under nsys, and the GPU's state during the samples (NVML; None in older captures)
    samples: int = 0
    stopped_because: str | None = None
    warmup_calls: int | None = None
    nsys_calls: int = 0
    telemetry: dict | None = None
    #: how busy the timed run's own CPU cores and the others were while it measured
    #: (workloads/harness/hostload.py; None in older captures)
    host_load: dict | None = None

    @property
    def time_over_floor(self) -> float:
        return self.median_ms / self.floor_ms

    @property
    def time_over_limiter_floor(self) -> float | None:
        return self.median_ms / self.limiter.floor_ms if self.limiter.floor_ms else None

    @property
    def noise(self) -> float:
        """Interquartile range over median: what the verdicts weigh a change against."""
        return (self.q3_ms - self.q1_ms) / self.median_ms


@dataclasses.dataclass(frozen=True)
class CopyRow:
    phase: str
    variant: str
    direction: str
    host_memory: str | None
    count: int
    bytes: int
    duration_ms: float
    gb_per_s: float | None
    best_copy_gb_per_s: float
    of_pinned_ceiling: float | None


@dataclasses.dataclass(frozen=True)
class FindingPlace:
    variant: str
    size: int
    time_at_stake_ms: float | None  # per call; None where the rule gives no time
    message: str


@dataclasses.dataclass(frozen=True)
class FindingGroup:
    """One distinct fix, printed once, with every step and size it applies to."""
    id: str
    title: str
    fix: str
    places: tuple[FindingPlace, ...]

    @property
    def time_at_stake_ms(self) -> float:
        return max((p.time_at_stake_ms or 0.0 for p in self.places), default=0.0)

    @property
    def first_calls_only(self) -> bool:
        """The finding's cost fell in the first calls of every place, none in the steady calls (its
        time at stake is read from the steady calls: STEADY_STATE_STAKES)."""
        return self.id in STEADY_STATE_STAKES and not self.time_at_stake_ms


@dataclasses.dataclass(frozen=True)
class KernelRow:
    variant: str
    name: str
    launches: int
    per_call: float
    avg_us: float


@dataclasses.dataclass(frozen=True)
class NcuRow:
    variant: str
    launch_id: object
    kernel: str
    metrics: dict  # metric name -> value (None: not in the report)
    dram_gb_per_s: float | None


@dataclasses.dataclass(frozen=True)
class ResultBox:
    size: int
    best: Step
    baseline: Step  # the first step at this size: the recipe's baseline unless variant_sizes left it out
    best_vs_baseline: Comparison | None  # None: the baseline is the fastest step
    final: Step
    limiter: StepLimiter

    @property
    def starts_at_baseline(self) -> bool:
        """False where the recipe's first steps did not run at this size (variant_sizes)."""
        return self.baseline.improves_on is None


@dataclasses.dataclass(frozen=True)
class OtherRun:
    """A step captured apart from the main run (another commit, day or package set)."""
    variant: str
    size: int
    provenance: dict


@dataclasses.dataclass(frozen=True)
class Provenance:
    #: the main run's provenance record (its baseline at the largest size: workloads.harness.provenance)
    record: dict
    #: the run's own nsys (``nsys --version`` in the preflight of the same run; "" where not that run)
    nsys_cli: str
    #: the versions of the exporter that wrote the captures' SQLite files
    nsys_exported: tuple[str, ...]
    #: ncu's version from the preflight of the same run; None: not recorded for this run
    ncu_version: str | None
    #: the SM clocks NVML saw while the steps were timed (MHz), lowest first
    sm_clocks_mhz: tuple[int, ...]
    other_runs: tuple[OtherRun, ...]


@dataclasses.dataclass(frozen=True)
class SizeCoverage:
    """Which steps of one size ran under Nsight Compute, and whose kernels the others run."""
    size: int
    profiled: tuple[tuple[str, bool], ...]  # (variant, only its raw page was read)
    not_profiled: tuple[tuple[str, tuple[str, ...]], ...]  # (variant, profiled variants it shares kernels with)


@dataclasses.dataclass(frozen=True)
class NcuCoverage:
    profiled_sizes: tuple[SizeCoverage, ...]
    unprofiled_sizes: tuple[int, ...]
    #: each way ncu profiled the steps ((collection, what it left out), the variants), in page order
    collections: tuple[tuple[tuple[str, tuple[str, ...]], tuple[str, ...]], ...]


@dataclasses.dataclass(frozen=True)
class WorkCheckRow:
    variant: str
    check: WorkCheck
    median_ms: float


@dataclasses.dataclass(frozen=True)
class Command:
    tool: str  # timed | nsys | ncu
    what: str  # variant/n<size>
    argv: tuple[str, ...]
    source: str  # where the argv was read


@dataclasses.dataclass(frozen=True)
class ReportModel:
    name: str
    title: str
    seed_document: str
    framework: str
    timer: str
    size_meaning: str
    sizes: tuple[int, ...]
    ladder: dict[int, tuple[Step, ...]]
    result: ResultBox
    findings: tuple[FindingGroup, ...]
    copies: dict[int, tuple[CopyRow, ...]]
    kernels: dict[int, tuple[KernelRow, ...]]
    ncu: dict[int, tuple[NcuRow, ...]]
    ncu_rules: dict[int, tuple[tuple[str, dict[str, float | None | str], str, str], ...]]
    seed_split: tuple[tuple[str, tuple[tuple[str, float], ...]], ...]  # (measured on, ((part, %), ...))
    ceilings: tuple[tuple[str, float, str, float], ...]  # (name, rate, unit, median ms)
    provenance: Provenance
    commands: tuple[Command, ...]
    #: where the commands were read: the GPU job records (with the commits of those jobs and of the
    #: captures, which differ where the records come from another run), or the nsys captures
    commands_from_job_records: bool
    command_commits: tuple[tuple[str, ...], tuple[str, ...]]  # (the jobs', the captures')
    #: which steps ran under Nsight Compute; None: none did (the page reads the evidence without
    #: counters, analysis.model.no_counters, from ``runs``)
    ncu_coverage: NcuCoverage | None
    #: the pipeline's preflight record (tool versions, whether counters could be read)
    preflight: dict | None
    #: the ladder's run summaries per size and the ceilings record's rates, for the evidence without
    #: counters
    runs: dict[int, tuple[dict, ...]]
    ceiling_records: dict
    work_checks: dict[int, tuple[WorkCheckRow, ...]] = dataclasses.field(default_factory=dict)

    @property
    def counters(self) -> bool:
        return self.ncu_coverage is not None


# --- the limiter slot -------------------------------------------------------------------------------

def _findings_move(run: dict, fl: Floor) -> tuple[str, str] | None:
    """For a step ncu did not profile: the finding with the most time at stake (over 5% of the
    call), as (what, its fix's first sentence)."""
    ranked = sorted(((time_at_stake_ms(f, run), f) for f in run.get("findings") or []),
                    key=lambda tf: -(tf[0] or 0.0))
    if ranked and (ranked[0][0] or 0.0) > 0.05 * run["timing"]["median_ms"]:
        t, f = ranked[0]
        return f"{f['title']} (up to {t:.3g} ms per call)", _first_sentence(f["fix"])
    return None


def measured_limiter(run: dict, fl: Floor, runs: Sequence[dict] = (), ceilings: dict | None = None,
                     framework_advice: dict | None = None) -> StepLimiter:
    """The step's limiter from measurement (analysis.model.limiter.step: the timed call against nsys' busy
    time, then ncu's speed-of-light breakdown of its kernels, borrowed from a step whose launches
    match), with its source and the next thing to try in the framework's terms."""

    step = limiter.step_limiter(run, limiter.pool_of(runs or [run]), ceilings)
    if step.kind is Kind.NOT_PROFILED:
        found = _findings_move(run, fl)
        if found:
            return dataclasses.replace(step, detail=found[0], source="a finding, no ncu profile matched",
                                       advice=found[1])
        ratio = run["timing"]["median_ms"] / fl.ms
        move = (f"Little is left on {fl.binding.resource}: a faster step has to do less work" if ratio < 1.3 else
                limiter_advice.next_move(step, framework_advice).rstrip("."))
        return dataclasses.replace(step, source="no ncu profile matched its launches", advice=move)
    borrowed = [v for v in step.ncu_variants if v != run["variant"]]
    source = ("timed median and nsys" if step.kernel is None else
              "ncu" + (f", profile of {', '.join(f'`{v}`' for v in borrowed)}" if borrowed else ""))
    return dataclasses.replace(step, source=source,
                               advice=limiter_advice.next_move(step, framework_advice).rstrip("."))


#: the function that gives each step its limiter and next move:
#: (run summary, floor, the size's runs, ceilings, the framework's advice table) -> StepLimiter
LIMITER: Callable[..., StepLimiter] = measured_limiter


def _first_sentence(text: str) -> str:
    head = re.split(r"(?<=[a-z0-9)])[.;] ", text, maxsplit=1)[0]
    return head.rstrip(".")


# --- findings ---------------------------------------------------------------------------------------

def _kernel_ms_per_call(run: dict, names: Sequence[str]) -> float:
    """nsys time per call of the kernels named (in ncu's or nsys' form: matched by kernel key)."""
    wanted = {kernel_key(n) for n in names}
    calls = len(run["nsys"]["calls"]) or 1
    return sum(k["total_ns"] for k in run["nsys"]["compute_kernels"] if kernel_key(k["name"]) in wanted) / calls / 1e6


#: findings whose time at stake is the fastest steady call's (time_at_stake_ms), not a mean over
#: every call: zero there means the cost was the first calls' alone (FindingGroup.first_calls_only)
STEADY_STATE_STAKES = frozenset({"hot_range_allocations"})


def time_at_stake_ms(finding: dict, run: dict) -> float | None:
    """Per compute call, the time the finding's fix could win at most (ms): the time of the copies,
    allocations, gaps, synchronization or kernels it names."""
    e = finding["evidence"]
    calls = len(run["nsys"]["calls"]) or 1
    fid = finding["id"]
    if fid == "pageable_memcpy":
        return e["duration_ns"] / calls / 1e6
    if fid == "hot_range_allocations":  # one of STEADY_STATE_STAKES
        # in the steady state (the fastest steady call, as the measured limiter reads it): a cache or
        # pool still filling up costs the first calls only, not the calls the median times (CuPy's fused
        # step at 4096 on an H200 allocated 0.11 and 0.25 ms in its first two calls, none in its third)
        return (fastest_steady_call(run["nsys"]["calls"]).get("allocation_ns") or 0) / 1e6
    if fid == "gpu_gaps":
        # gaps measured under nsys, at most the idle time the timed run confirms
        return min(e["gap_ns"] / 1e6, _timed_idle_ms(run))
    if fid == "sync_in_loop":
        return e["sync_ns"] / calls / 1e6
    if fid == "under_one_wave":
        # each kernel's time charged by the share of its launches that ran under one wave
        return sum(_kernel_ms_per_call(run, [k["kernel"]]) * k.get("launch_share", 1.0) for k in e["kernels"])
    if fid == "low_throughput":
        return _kernel_ms_per_call(run, [k["kernel"] for k in e["kernels"]])
    return None


def group_findings(runs: Sequence[dict]) -> tuple[FindingGroup, ...]:
    """Findings of every run, one group per rule (one fix), sorted by time at stake (library kernels
    never appear: analysis.model.findings leaves their launch configuration out)."""
    groups: dict[str, dict] = {}
    for r in runs:
        for f in r.get("findings") or []:
            g = groups.setdefault(f["id"], {"title": f["title"], "fix": f["fix"], "places": []})
            g["places"].append(FindingPlace(r["variant"], r["size"], time_at_stake_ms(f, r), f["message"]))
    out = [FindingGroup(fid, g["title"], g["fix"],
                        tuple(sorted(g["places"], key=lambda p: -(p.time_at_stake_ms or 0.0))))
           for fid, g in groups.items()]
    out.sort(key=lambda g: -g.time_at_stake_ms)
    return tuple(out)


# --- steps ------------------------------------------------------------------------------------------

def busy_time(run: dict) -> BusyTime:
    calls = _steady(run["nsys"]["calls"])
    n = len(calls)

    def mean(key: str) -> float:
        return sum(c.get(key, 0) for c in calls) / n / 1e6

    h2d, d2h, copies = mean("gpu_memcpy_h2d_ns"), mean("gpu_memcpy_d2h_ns"), mean("gpu_memcpy_ns")
    return BusyTime(wall_ms=mean("wall_ns"), busy_ms=mean("gpu_busy_ns"), idle_ms=mean("gpu_idle_ns"),
                    kernel_ms=mean("gpu_kernel_ns"), h2d_ms=h2d, d2h_ms=d2h,
                    other_copy_ms=max(copies - h2d - d2h, 0.0), memset_ms=mean("gpu_memset_ns"))


def _compare(before: dict, after: dict) -> Comparison:
    v = verdicts.compare(before["times_ms"], after["times_ms"])
    return Comparison(before["variant"], v.label, v.speedup, v.reason, v.interval, verdicts.format_verdict(v))


def _timed_idle_ms(run: dict) -> float:
    return host_time(run).idle_ms


def moved(run: dict, parent: dict | None, busy: BusyTime, parent_busy: BusyTime | None) -> tuple[Moved, ...] | None:
    """What moved against the parent, from the captures: the two time quantities that moved most
    (over 5%), then the kernels per call and the steady calls' allocation calls where they changed;
    None without a parent run."""
    if parent is None or parent_busy is None:
        return None
    pairs = (("kernel time", parent_busy.kernel_ms, busy.kernel_ms),
             ("copy time", parent_busy.h2d_ms + parent_busy.d2h_ms + parent_busy.other_copy_ms,
              busy.h2d_ms + busy.d2h_ms + busy.other_copy_ms),
             # idle on the timed clock (analysis.model.limiter.host_time), not the traced calls' own
             ("GPU idle", _timed_idle_ms(parent), _timed_idle_ms(run)),
             ("GPU busy", parent_busy.busy_ms, busy.busy_ms))
    ranked = sorted(((abs(b - a), name, a, b) for name, a, b in pairs if abs(b - a) > 0.05 * max(a, b, 1e-9)),
                    reverse=True)
    out = [Moved(name, a, b, "ms") for _, name, a, b in ranked[:2]]
    k_before = tuple(sorted({c["kernels"] for c in _steady(parent["nsys"]["calls"])}))
    k_after = tuple(sorted({c["kernels"] for c in _steady(run["nsys"]["calls"])}))
    if k_before != k_after:
        out.append(Moved("kernels per call", k_before, k_after))
    a_before = sum(c["allocation_calls"] for c in _steady(parent["nsys"]["calls"]))
    a_after = sum(c["allocation_calls"] for c in _steady(run["nsys"]["calls"]))
    if a_before != a_after:
        out.append(Moved("allocation calls in steady calls", a_before, a_after))
    return tuple(out)


def evidence_limiter(run: dict, fl: Floor, runs: Sequence[dict], ceilings: dict,
                     framework_advice: dict | None = None) -> StepLimiter:
    """A recipe without any ncu profile (counters refused, or ncu=none): the limiter as far as the
    trace and the declared work reach (analysis.model.no_counters), labelled so."""

    step = no_counters.step_limiter(run, ceilings)
    source = ("nsys, measured without counters" if step.kind is not Kind.NO_COUNTERS
              else "trace and declared work, derived without counters")
    return dataclasses.replace(step, source=source,
                               advice=limiter_advice.next_move(step, framework_advice).rstrip("."))


#: which verdicts :func:`build_steps` computes (each is a bootstrap of 9,999 resamples, the bulk of a
#: model's time): "all", every step against the baseline and its parent (a recipe's page); "result",
#: only the fastest step against the baseline (what :func:`result_box` states, all the index shows);
#: "none". A verdict not computed is None.
VERDICTS_WANTED = ("all", "result", "none")


def _framework_advice(recipe) -> dict:
    try:
        return dict(frameworks.framework(recipe.framework).advice)
    except (frameworks.UnknownFramework, AttributeError):
        return {}


def limiter_pool(runs: Sequence[dict]) -> list:
    return limiter.pool_of(runs)


def minimum_work_floor(run: dict, ceilings: dict, pool: Sequence = ()) -> Floor:
    """The step's minimum-work floor: its declared work at the measured reference rates; where ncu saw
    the whole call and measured fewer DRAM bytes than declared beyond the mismatch factor (an
    L2-resident working set, reuse the declaration does not count), the device-memory term rests
    on the measured bytes and says so."""
    fl = floor(run["work"], ceilings)
    check = limiter.work_check(run, pool) if pool else None
    if check is None or not check.measured_bytes_below_declared():
        return fl
    work = dict(run["work"], bytes_read=check.measured_dram_bytes, bytes_written=0)
    measured = floor(work, ceilings)
    seen = "" if check.complete() else f" on {check.covered_share:.0%} of kernel time"
    terms = tuple(dataclasses.replace(t, resource=f"{t.resource}: the DRAM bytes ncu measured{seen}, "
                                      f"{check.bytes_ratio():.2f}× the declared") if t.resource == "device memory"
                  else t for t in measured.terms)
    binding = max(terms, key=lambda t: t.ms)
    return Floor(binding.ms, binding, terms)


def build_steps(recipe, runs: Sequence[dict], ceilings: dict, counters: bool = True,
                verdicts_wanted: str = "all") -> tuple[Step, ...]:
    """One size's runs -> steps in the recipe's ladder order, each compared with its parent
    (``verdicts_wanted``: see :data:`VERDICTS_WANTED`)."""
    if verdicts_wanted not in VERDICTS_WANTED:
        raise ValueError(f"verdicts_wanted {verdicts_wanted!r}: not one of {VERDICTS_WANTED}")
    by_variant = {r["variant"]: r for r in runs}
    ordered = [by_variant[v] for v in recipe.variants if v in by_variant]
    base = ordered[0]
    # the step result_box picks: the first of the fastest, in ladder order
    fastest = min(ordered, key=lambda r: r["timing"]["median_ms"])
    busy = {r["variant"]: busy_time(r) for r in ordered}
    framework_advice = _framework_advice(recipe)
    pool = limiter_pool(runs)
    steps = []
    for r in ordered:
        fl = minimum_work_floor(r, ceilings, pool)
        parent_name = recipe.parent_of(r["variant"])
        parent = by_variant.get(parent_name) if parent_name else None
        calls = r["nsys"]["calls"]
        first = calls[0]
        vs_baseline = vs_parent = None
        if r is not base and (verdicts_wanted == "all" or (verdicts_wanted == "result" and r is fastest)):
            vs_baseline = _compare(base, r)
        if parent and verdicts_wanted == "all":
            # the same seeded bootstrap when the parent is the baseline: computed once
            vs_parent = vs_baseline if parent is base else _compare(parent, r)
        steps.append(Step(
            variant=r["variant"], improves_on=parent_name, summary=sources.name_sources(r["summary"]), size=r["size"],
            median_ms=r["timing"]["median_ms"], q1_ms=r["timing"]["q1_ms"], q3_ms=r["timing"]["q3_ms"],
            floor_ms=fl.ms, floor_resource=fl.binding.resource, floor_rate_name=fl.binding.rate_name, achieved=fl.achieved(r["timing"]["median_ms"]),
            floor_unit=fl.binding.unit, achieved_of_ceiling=fl.ms / r["timing"]["median_ms"],
            vs_baseline=vs_baseline, vs_parent=vs_parent,
            busy=busy[r["variant"]],
            kernels_per_call=tuple(sorted({c["kernels"] for c in _steady(calls)})),
            alloc_calls_first=first["allocation_calls"],
            alloc_calls_later=sum(c["allocation_calls"] for c in _steady(calls)),
            host_call_ms=r.get("host_call_ms"), host_synced_ms=r.get("host_synced_ms"),
            relative_error=r["relative_error"],
            first_call_ms=first["wall_ns"] / 1e6, first_call_idle_ms=(first["wall_ns"] - first["gpu_busy_ns"]) / 1e6,
            limiter=(LIMITER(r, fl, runs, ceilings, framework_advice) if counters
                     else evidence_limiter(r, fl, runs, ceilings, framework_advice)),
            moved=moved(r, parent, busy[r["variant"]], busy.get(parent_name) if parent else None),
            samples=len(r["times_ms"]), stopped_because=(r.get("sampling") or {}).get("stopped_because"),
            warmup_calls=r.get("warmup_calls"), nsys_calls=len(calls), telemetry=r.get("telemetry"),
            host_load=r.get("host_load"),
        ))
    return tuple(steps)


def result_box(steps: Sequence[Step]) -> ResultBox:
    """The largest size's outcome: the fastest step (the first of the fastest, in ladder order) against
    the first step at that size."""
    base, final = steps[0], steps[-1]
    best = min(steps, key=lambda s: s.median_ms)
    return ResultBox(size=base.size, best=best, baseline=base, best_vs_baseline=best.vs_baseline, final=final,
                     limiter=best.limiter)


# --- the rest of the page ---------------------------------------------------------------------------

def copy_rows(runs: Sequence[dict], ceilings: dict) -> tuple[CopyRow, ...]:
    """Every memcpy of the recipe's phases (:data:`COPY_PHASES`) by phase, direction and host memory,
    0-byte rows dropped."""
    pinned = {"Host-to-Device": ceilings.get("h2d_pinned"), "Device-to-Host": ceilings.get("d2h_pinned")}
    out = []
    for phase in COPY_PHASES:
        for r in runs:
            for c in (r["nsys"].get("phase_copy_throughput") or {}).get(phase, []):
                if not c["bytes"]:
                    continue
                ceiling = pinned.get(c["direction"])
                rate = c["gb_per_s"]
                out.append(CopyRow(phase, r["variant"], c["direction"], c["host_memory"], c["count"], c["bytes"],
                                   c["total_ns"] / 1e6, rate, c["best_copy_gb_per_s"],
                                   rate / ceiling["gb_per_s"] if ceiling and rate is not None else None))
    return tuple(out)


#: kernels listed per step (by total time); the rest are summed in one row
KERNELS_PER_STEP = 3


def kernel_rows(runs: Sequence[dict]) -> tuple[KernelRow, ...]:
    """Each step's kernels in the compute ranges, the longest first; beyond KERNELS_PER_STEP, one row
    of the rest (name "N other kernels", its average the rest's mean launch)."""
    out = []
    for r in runs:
        n_calls = len(r["nsys"]["calls"])
        ks = r["nsys"]["compute_kernels"]  # longest total first (run_summary)
        for k in ks[:KERNELS_PER_STEP]:
            out.append(KernelRow(r["variant"], k["name"], k["count"], k["count"] / n_calls, k["avg_ns"] / 1e3))
        rest = ks[KERNELS_PER_STEP:]
        if rest:
            count = sum(k["count"] for k in rest)
            out.append(KernelRow(r["variant"], f"{len(rest)} other kernels", count, count / n_calls,
                                 sum(k["total_ns"] for k in rest) / count / 1e3))
    return tuple(out)


def ncu_rows(runs: Sequence[dict], metric_keys: Sequence[str]) -> tuple[NcuRow, ...]:
    """Each step's first profiled launch of each kernel (later launches of one kernel repeat it)."""
    out = []
    for r in runs:
        seen = set()
        for launch in r["ncu"] or []:
            if launch["kernel_name"] in seen:
                continue
            seen.add(launch["kernel_name"])
            out.append(NcuRow(r["variant"], launch["id"], launch["kernel_name"],
                              {k: launch["metrics"].get(k) for k in metric_keys}, launch.get("dram_gb_per_s")))
    return tuple(out)


#: ncu rule messages quoted per size: the rules with the largest estimated speedups (the table has them all)
NCU_RULES_QUOTED = 3
#: ncu rules whose estimated speedup stays under this (%) on every step are not listed
NCU_RULE_MIN_PCT = 5.0


def hot_launch(run: dict) -> dict | None:
    """The run's own profiled launch of the kernel that holds the most of its nsys kernel time (the
    first profiled launch where nsys names none of them)."""
    if not run.get("ncu"):
        return None
    if not run.get("nsys"):  # no trace to rank the kernels by time
        return run["ncu"][0]
    rows = limiter.step_kernels(run, limiter.launches_by_kernel(limiter.pool_of([run])))
    own = [(r["ns_per_call"], launch) for r in rows for v, launch in r["launches"][:1] if v == run["variant"]]
    return max(own, key=lambda x: x[0])[1] if own else run["ncu"][0]


def ncu_rule_rows(runs: Sequence[dict]) -> tuple:
    """ncu's rules on each variant's hot launch (:func:`hot_launch`), only those consistent with that
    launch's measured limiter (analysis.model.limiter.rule_consistent): (rule, {variant: estimated speedup
    %, "flagged" or None}, the variant it flags most, its message there)."""
    # a step profiled for the page's metrics alone has no rule results: it is no column ("—" would
    # say that ncu did not flag it)
    variants = [r for r in runs if r["ncu"] and ncu_collection(r)[0] != COLLECTION_METRICS]
    by_rule: dict[str, dict[str, dict]] = {}
    for r in variants:
        launch = hot_launch(r)
        lim = limiter.classify_launch(launch["metrics"])
        for f in launch["findings"]:
            if limiter.rule_consistent(f["rule"], lim, launch["kernel_name"]):
                by_rule.setdefault(f["rule"], {})[r["variant"]] = f
    out = []
    for rule, fs in by_rule.items():
        cells = {r["variant"]: (None if r["variant"] not in fs else
                                fs[r["variant"]].get("estimated_speedup_pct")
                                if fs[r["variant"]].get("estimated_speedup_pct") is not None else "flagged")
                 for r in variants}
        worst_variant, worst = max(fs.items(), key=lambda kv: kv[1].get("estimated_speedup_pct") or 0.0)
        out.append((rule, cells, worst_variant, _first_sentence(worst["message"]) + "."))
    # rules that estimate under NCU_RULE_MIN_PCT everywhere (and never flag without an estimate) are left out
    out = [row for row in out if any(v == "flagged" or (isinstance(v, (int, float)) and v >= NCU_RULE_MIN_PCT)
                                     for v in row[1].values())]
    quoted = {rule for rule, cells, _, _ in sorted(
        out, key=lambda row: -max((v for v in row[1].values() if isinstance(v, (int, float))), default=0.0))
        [:NCU_RULES_QUOTED]}
    return tuple((rule, cells, worst, msg if rule in quoted else None) for rule, cells, worst, msg in out)


def run_key(prov: dict) -> tuple:
    """What tells two runs of the pipeline apart: commit, day, packages."""
    return prov.get("git_commit"), (prov.get("date_utc") or "")[:10], tuple(sorted((prov.get("packages") or {}).items()))


def provenance(by_size: dict[int, Sequence[dict]], tools: dict | None) -> Provenance:
    """The main run's provenance (the baseline at the largest size), nsys as the captures recorded
    it, ncu from the pipeline's preflight where it belongs to the same run; runs captured apart named."""
    prov = by_size[max(by_size)][0]["provenance"]
    nsys_versions = sorted({v for runs in by_size.values() for r in runs
                            if (v := ((r["nsys"].get("capture") or {}).get("nsys_version")))})
    preflight_commit = ((tools or {}).get("provenance") or {}).get("git_commit")
    same_run = bool(tools) and preflight_commit == prov.get("git_commit")
    # the captures name the version of the exporter that wrote their SQLite file; the run's own nsys
    # (`nsys --version` in the preflight) is the one the index names
    nsys_cli = ((tools or {}).get("tools") or {}).get("nsys", {}).get("version", "") if same_run else ""
    clocks = sorted({c for runs in by_size.values() for r in runs
                     for c in ((r.get("telemetry") or {}).get("sm_clock_mhz_range") or ()) if c})
    other = tuple(OtherRun(r["variant"], size, r["provenance"]) for size in sorted(by_size) for r in by_size[size]
                  if run_key(r["provenance"]) != run_key(prov))
    return Provenance(record=prov, nsys_cli=nsys_cli.removeprefix("NVIDIA Nsight Systems version ").strip(),
                      nsys_exported=tuple(nsys_versions),
                      ncu_version=tools["tools"]["ncu"]["version"] if same_run else None,
                      sm_clocks_mhz=tuple(clocks), other_runs=other)


def portable_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """The command without host paths: the interpreter by its name, everything else as run."""
    out = []
    for i, w in enumerate(argv):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        out.append("python" if nxt == "-m" and "python" in w.rsplit("/", 1)[-1] else w)
    return tuple(out)


def commands(recipe, by_size: dict[int, Sequence[dict]],
             gpu_jobs: Sequence[dict]) -> tuple[tuple[Command, ...], bool, tuple[tuple[str, ...], tuple[str, ...]]]:
    """The exact commands the GPU jobs ran for this recipe, from the GPU job records; without records,
    the program and arguments each nsys capture recorded itself (nsys' own flags are not in it).
    Returns (commands, read from job records, (the jobs' commits, the captures' commits))."""
    shown = {f"{r['variant']}/n{size}" for size, runs in by_size.items() for r in runs}
    mine = [j for j in gpu_jobs if f"workloads.{recipe.name}" in j["argv"] and j.get("tag") in ("timed", "nsys", "ncu")
            and _what(j["argv"]) in shown]
    if mine:
        order = {v: i for i, v in enumerate(recipe.variants)}

        def ladder_key(c: Command) -> tuple:
            variant, _, size = c.what.partition("/n")
            return _tool_order(c.tool), int(size) if size.isdigit() else 0, order.get(variant, len(order))

        cmds = sorted({Command(j["tag"], _what(j["argv"]), portable_argv(j["argv"]), "GPU job record") for j in mine},
                      key=ladder_key)
        job_commits = tuple(sorted({j.get("git_commit") or "not recorded" for j in mine}))
        capture_commits = tuple(sorted({r["provenance"].get("git_commit") or "not recorded"
                                        for runs in by_size.values() for r in runs}))
        return tuple(cmds), True, (job_commits, capture_commits)
    out = []
    for size in sorted(by_size):
        for r in by_size[size]:
            argv = (r["nsys"].get("capture") or {}).get("argv")
            if argv:
                out.append(Command("nsys", f"{r['variant']}/n{size}", portable_argv(argv), "nsys capture"))
    return tuple(out), False, ((), ())


def _tool_order(tool: str) -> int:
    return ("timed", "nsys", "ncu").index(tool) if tool in ("timed", "nsys", "ncu") else 3


def _what(argv: Sequence[str]) -> str:
    def opt(name: str) -> str:
        return argv[argv.index(name) + 1] if name in argv[:-1] else "?"
    return f"{opt('--variant')}/n{opt('--size')}"


def build(recipe, by_size: dict[int, Sequence[dict]], ceilings_record: dict, tools: dict | None = None,
          gpu_jobs: Sequence[dict] = (), ncu_metric_keys: Sequence[str] = (),
          verdicts_wanted: str = "all") -> ReportModel:
    """The model of one recipe's report. ``tools``: the pipeline's preflight record (nsys and ncu
    versions); ``gpu_jobs``: GPU job records (analysis.model.gpu_jobs), any recipe's. ``verdicts_wanted``
    "result" (the index): only the result box's verdict, at the largest size (:data:`VERDICTS_WANTED`)."""
    ceilings = ceilings_record["ceilings"]
    timer = timer_of(recipe.framework)
    sizes = tuple(sorted(by_size))

    counters = no_counters.recipe_has_counters(by_size)
    # the result box is the largest size's: with "result", the other sizes need no verdict
    ladder = {s: build_steps(recipe, by_size[s], ceilings, counters,
                             "none" if verdicts_wanted == "result" and s != sizes[-1] else verdicts_wanted)
              for s in sizes}
    all_runs = [r for s in sizes for r in ladder_runs(recipe, by_size[s])]
    groups = group_findings(all_runs)
    split = ()
    if recipe.seed_split:
        base = ladder[sizes[-1]][0]
        run = next(r for r in by_size[sizes[-1]] if r["variant"] == base.variant)
        steady = _steady(run["nsys"]["calls"])
        parts = {"H2D": sum(c.get("gpu_memcpy_h2d_ns", 0) for c in steady),
                 "kernel": sum(c["gpu_kernel_ns"] for c in steady),
                 "D2H": sum(c.get("gpu_memcpy_d2h_ns", 0) for c in steady)}
        total = sum(parts.values()) or 1
        gpus = run["provenance"].get("gpus") or [{"name": "this GPU"}]
        split = ((recipe.seed_split_device, tuple(recipe.seed_split)),
                 (f"{gpus[0]['name']}, `{base.variant}` n{base.size}",
                  tuple((n, 100 * parts[n] / total) for n, _ in recipe.seed_split)))
    cmds, from_records, commits = commands(recipe, by_size, gpu_jobs)
    rates = tuple((name, c.get("gb_per_s", c.get("tflop_per_s")), "GB/s" if "gb_per_s" in c else "TFLOP/s",
                   c["median_ms"]) for name, c in sorted(ceilings.items()))
    return ReportModel(
        name=recipe.name, title=recipe.title, seed_document=recipe.seed_document, framework=recipe.framework,
        timer=timer, size_meaning=recipe.size_meaning, sizes=sizes, ladder=ladder,
        result=result_box(ladder[sizes[-1]]), findings=groups,
        copies={s: copy_rows(ladder_runs(recipe, by_size[s]), ceilings) for s in sizes},
        kernels={s: kernel_rows(ladder_runs(recipe, by_size[s])) for s in sizes},
        ncu={s: ncu_rows(ladder_runs(recipe, by_size[s]), ncu_metric_keys) for s in sizes},
        ncu_rules={s: ncu_rule_rows(ladder_runs(recipe, by_size[s])) for s in sizes},
        seed_split=split, ceilings=rates, provenance=provenance(by_size, tools),
        commands=cmds, commands_from_job_records=from_records, command_commits=commits,
        ncu_coverage=ncu_coverage(by_size), preflight=tools,
        runs={s: tuple(ladder_runs(recipe, by_size[s])) for s in sizes}, ceiling_records=ceilings,
        work_checks={s: work_check_rows(ladder_runs(recipe, by_size[s])) for s in sizes})


def ncu_collection(run: dict) -> tuple[str, tuple[str, ...]] | None:
    """How ncu profiled a step: its launches' one collection (analysis.readers.ncu.COLLECTION_*) and what of
    it was left out (the full set's sections, or the tensor-core operation counts of a metrics-only
    collection); None when ncu did not profile it."""
    kinds = {(launch["collection"], (*(launch.get("sections_left_out") or ()),
                                     *(launch.get("metrics_left_out") or ())))
             for launch in run.get("ncu") or []}
    if len(kinds) > 1:
        raise ValueError(f"{run['workload']} {run['variant']} n{run['size']}: launches profiled in different ways "
                         f"({', '.join(sorted(k for k, _ in kinds))}): one ncu process profiles a step one way")
    return next(iter(kinds), None)


#: in what order the coverage line names the collections
_COLLECTION_ORDER = (COLLECTION_FULL, COLLECTION_SECTIONS, COLLECTION_METRICS)


def collections(by_size: dict[int, Sequence[dict]]) -> tuple[tuple[tuple[str, tuple[str, ...]], tuple[str, ...]], ...]:
    """Each way ncu profiled the steps, with the variants profiled that way, in the coverage line's order."""
    steps: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for runs in by_size.values():
        for r in runs:
            how = ncu_collection(r)
            if how is not None and r["variant"] not in steps.setdefault(how, []):
                steps[how].append(r["variant"])
    ordered = sorted(steps, key=lambda how: (_COLLECTION_ORDER.index(how[0]), how[1]))
    return tuple((how, tuple(steps[how])) for how in ordered)


def ncu_coverage(by_size: dict[int, Sequence[dict]]) -> NcuCoverage | None:
    """Which variants ran under Nsight Compute, at which sizes, and what stands for the others; None
    where no step did."""
    if not any(r.get("ncu") for runs in by_size.values() for r in runs):
        return None
    profiled_sizes = []
    for size in sorted(by_size):
        runs = by_size[size]
        profiled = tuple((r["variant"], r.get("ncu_source") == "ncu-raw.csv") for r in runs if r.get("ncu"))
        if not profiled:
            continue
        by_kernel = limiter.launches_by_kernel(limiter.pool_of(runs))
        others = tuple((r["variant"], tuple(dict.fromkeys(v for k in limiter.step_kernels(r, by_kernel)
                                                          for v, _ in k["launches"][:1])))
                       for r in runs if not r.get("ncu"))
        profiled_sizes.append(SizeCoverage(size, profiled, others))
    unprofiled = tuple(size for size in sorted(by_size) if not any(r.get("ncu") for r in by_size[size]))
    return NcuCoverage(tuple(profiled_sizes), unprofiled, collections(by_size))


def work_check_rows(runs: Sequence[dict]) -> tuple[WorkCheckRow, ...]:
    """Declared work (the minimum bytes and FLOPs) beside what ncu measured per steady call, for each
    step whose kernels ncu measured."""
    pool = limiter.pool_of(runs)
    return tuple(WorkCheckRow(r["variant"], check, r["timing"]["median_ms"])
                 for r in runs if (check := limiter.work_check(r, pool)) is not None)


def ladder_runs(recipe, runs: Sequence[dict]) -> list[dict]:
    """Runs in the recipe's ladder order."""
    return sorted(runs, key=lambda r: recipe.variants.index(r["variant"]))
