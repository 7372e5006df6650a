"""The comparison of two runs (:mod:`analysis.model.compare`) in words: its markdown and its one-line summary."""
from __future__ import annotations

from analysis.model import verdicts
from analysis.model.compare import Comparison, Step, StepComparison
from analysis.report.mdtext import table


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
    def samples(runs: list[Step]) -> str:
        n = sum(len(r.times_ms) for r in runs)
        return f"{n}" if len(runs) == 1 else f"{n} in {len(runs)} processes"

    rows = [(s.base.workload, f"`{s.base.variant}`", s.base.size, f"{samples(s.base_runs)} / {samples(s.cand_runs)}",
             f"**{verdicts.format_verdict(s.verdict)}**"
             + (f" (one run: {verdicts.format_verdict(s.within_run)})" if s.within_run else "")
             + "".join(f"; {p}" for p in s.packages_differ),
             s.base.step_class[0], f"{_over_floor(s.base)} / {_over_floor(s.cand)}",
             _limiters(s),
             f"{_clocks(s.base)} / {_clocks(s.cand)}" + (" (different clocks)" if s.clocks_differ else ""))
            for s in c.steps]
    lines = [
        "# Comparison of two runs",
        "",
        f"- base: `{c.base_root}` ({_machine_text(c.base_machine)})",
        f"- candidate: `{c.cand_root}` ({_machine_text(c.cand_machine)})",
        "- " + summary_line(c),
    ]
    if c.gpu_models_differ:
        lines.append(f"- **different GPU models** ({c.base_machine['gpu']} / {c.cand_machine['gpu']}): a cross-GPU "
                     "comparison, not a regression test; `python -m analysis cross-gpu` says which steps scale "
                     "with which resource")
    if c.host_differs:
        lines.append("- **different hosts** (CPU model or core count) that the noise model's runs did not cover: "
                     "host-bound steps called faster or slower say \"host differs\" and do not fail the gate")
    if c.base_machine.get("driver_version") != c.cand_machine.get("driver_version"):
        lines.append(f"- different drivers: {c.base_machine.get('driver_version')} / "
                     f"{c.cand_machine.get('driver_version')}")
    lines += [
        "- " + (f"intervals widened by the between-run spread of `{c.noise_path}` (analysis.model.noise): a verdict "
                "across runs; the within-run verdict follows it" if c.noise_path else
                "within-run intervals (no noise model): they hold no run-to-run variance"),
        "",
        f"Speedup = base median / candidate median (> 1: the candidate is faster), with its "
        f"{verdicts.CONFIDENCE:.0%} interval. "
        f"**same**: the interval lies within ±{verdicts.THRESHOLD:.0%}; **faster**/**slower**: wholly outside; "
        "**uncertain**: it straddles the band. Where both sides hold at least "
        f"{verdicts.MIN_PROCESSES} timed processes of a step, the process is the unit (Welch interval on the "
        "logarithms of the process medians); otherwise the samples are pooled and process-to-process variance "
        "is not in the interval. Across runs (a noise model above) each pooled interval is widened on each side "
        "by the step's between-run margin (its class's where the model has no runs of it) before it is judged; "
        "**uncertain** there means the step moves between runs by more than the change, which more runs of the "
        "noise model, not more samples, would resolve. **host differs**: a host-bound step on a host the noise "
        "model's runs did not cover; it does not fail the gate.",
        "",
        table(("recipe", "variant", "size", "samples base / cand", "verdict, speedup [interval]", "class",
               "time / floor base / cand", "measured limiter base → cand", "SM clock base / cand"), rows),
    ]
    unresolved = [s for s in c.steps if s.verdict.resolution]
    if unresolved:
        lines += ["", "What the uncertain steps' processes can resolve:", ""]
        lines += [f"- {s.base.workload}/`{s.base.variant}`/n{s.base.size}: {s.verdict.resolution}" for s in unresolved]
    lines += only_on_one_side(c, "Only in the base", "Only in the candidate")
    return "\n".join(lines) + "\n"


def summary_line(c: Comparison) -> str:
    """``43 steps in both: 0 faster, 0 slower, 40 same, 3 uncertain`` (and any "host differs")."""
    kinds = [s.verdict.kind for s in c.steps]
    names = ("faster", "slower", "same", "uncertain") + (("host differs",) if "host differs" in kinds else ())
    return f"{len(c.steps)} steps in both: " + ", ".join(f"{kinds.count(k)} {k}" for k in names)


def _machine_text(m: dict) -> str:
    cpu = f"{m['cpu_model']}, {m['cpu_count']} cores" if m.get("cpu_model") else "CPU not recorded"
    return f"{m.get('gpu') or 'GPU not recorded'}, driver {m.get('driver_version') or 'not recorded'}, {cpu}"


def only_on_one_side(c: Comparison, base_title: str, cand_title: str) -> list[str]:
    """Markdown lines naming the steps only one side holds (none when both hold the same)."""
    lines = []
    for title, keys in ((base_title, c.only_base), (cand_title, c.only_cand)):
        if keys:
            lines += ["", f"{title}: " + ", ".join(f"{w}/{v}/n{n}" for w, v, n in keys)]
    return lines
