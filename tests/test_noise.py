"""The between-run noise model (analysis.model.noise) on real A/A runs, and the rates of the verdicts that use it.

Five full runs of identical measured code on three H200 machines (tests/data/aa_runs_h200/README.md):
the committed reference P, a1 and a2 on machine A, b1 and b2 on machine B. Each ordered pair of runs
is an A/A comparison (20 pairs, 43 steps each): any "faster"/"slower" is a false call.

How a trial with a planted slowdown is built: the candidate's samples are multiplied by the factor.
A percentile bootstrap of the ratio of medians with a fixed seed resamples the same indices either
way, so that divides the within-run interval by the factor exactly (checked below); each pair's
interval is computed once and the planted ones are derived from it.

Honesty of the rates: the committed model was derived from these same five runs, so rates measured
with it on them are in-sample. Each rate is also measured held out: leave one run out, derive the
spread from the other four (six pairs), test on the four pairs between the left-out run and the others.
"""
from __future__ import annotations

import dataclasses
import itertools
import os

import numpy as np
import pytest

from analysis.model import noise, verdicts
from analysis.model.timed_record import load_timed

HERE = os.path.dirname(__file__)
REF = os.path.join(HERE, "..", "reports", "reference", "h200")
AA = os.path.join(HERE, "data", "aa_runs_h200")
RUNS = {"P": REF, **{name: os.path.join(AA, name) for name in ("a1", "a2", "b1", "b2")}}
MODEL = noise.load_noise(os.path.join(REF, noise.NOISE_FILE))
#: fewer resamples than compare's 9999 keep 880 intervals quick; their edges move by well under 1%
RESAMPLES = 999


def _records(root: str) -> dict[tuple[str, str, int], dict]:
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "experiments")
        name = next((n for n in files if n in ("timing.json", "timing.json.gz")), None)
        if name:
            rec = load_timed(os.path.join(folder, name))
            out[(rec["workload"], rec["variant"], rec["size"])] = rec
    return out


@pytest.fixture(scope="module")
def runs() -> dict[str, dict]:
    return {name: _records(root) for name, root in RUNS.items()}


@pytest.fixture(scope="module")
def steps(runs) -> list[tuple[str, str, int]]:
    keys = set(runs["P"])
    assert all(set(r) == keys for r in runs.values())  # every run holds the same 43 timed steps
    return sorted(keys)


@pytest.fixture(scope="module")
def intervals(runs, steps) -> dict[tuple[str, str, tuple], verdicts.Verdict]:
    """The within-run verdict of every ordered pair of runs, every step."""
    return {(x, y, k): verdicts.compare(runs[x][k]["times_ms"], runs[y][k]["times_ms"], n_resamples=RESAMPLES)
            for x, y in itertools.permutations(RUNS, 2) for k in steps}


def _log_median(rec: dict) -> float:
    return float(np.log(np.median(rec["times_ms"])))


def _planted(v: verdicts.Verdict, factor: float) -> verdicts.Verdict:
    """The within-run verdict had the candidate's samples been ``factor`` times longer."""
    return dataclasses.replace(v, ratio=v.ratio / factor, interval=(v.interval[0] / factor, v.interval[1] / factor))


def _call(v: verdicts.Verdict, log_sd: float, factor: float = 1.0) -> str:
    return verdicts.across_runs(_planted(v, factor), noise.margin_of(log_sd), "test").kind


def _held_out_trials(runs, steps, intervals=None):
    """(left-out run, its pairs, per-step log_sd from the other four runs, and where ``intervals`` are
    given each step's detectable slowdown from those four: their pairs' within-run half-width)."""
    for out in RUNS:
        train = [r for r in RUNS if r != out]
        log_sd = {k: noise.log_sd_of([_log_median(runs[r][k]) for r in train]) for k in steps}
        pairs = [p for other in train for p in ((out, other), (other, out))]
        detectable = {}
        if intervals is not None:
            for k in steps:
                widths = [np.log(intervals[(x, y, k)].interval[1] / intervals[(x, y, k)].interval[0]) / 2
                          for x, y in itertools.combinations(train, 2)]
                detectable[k] = noise.detectable_of(log_sd[k], verdicts.THRESHOLD,
                                                    float(np.quantile(widths, noise.WIDTH_QUANTILE)))
        yield out, pairs, log_sd, detectable


def test_the_fixtures_are_one_commit_on_two_h200_machines(runs):
    prov = {name: r[("warp_sph", "pruned", 62500)]["provenance"] for name, r in runs.items()}
    assert {prov[n]["git_commit"] for n in ("a1", "a2", "b1", "b2")} == {"0520a41"}
    assert prov["P"]["git_commit"] == "1496c0e"  # the reference: the same measured code
    uuid = {n: prov[n]["gpus"][0]["uuid"] for n in ("a1", "a2", "b1", "b2")}
    assert uuid["a1"] == uuid["a2"] != uuid["b1"] == uuid["b2"]
    assert {p["gpus"][0]["name"] for p in prov.values()} == {"NVIDIA H200"}


def test_the_committed_noise_model_is_what_the_five_runs_give():
    derived = noise.derive({n: os.path.relpath(r, os.path.join(HERE, "..")) for n, r in RUNS.items()}, REF,
                           verdicts.THRESHOLD)
    assert {k: e["log_sd"] for k, e in derived["steps"].items()} == {k: e["log_sd"] for k, e in MODEL.steps.items()}
    assert derived["classes"] == MODEL.classes
    assert len(MODEL.steps) == 43 and MODEL.runs.keys() == RUNS.keys()
    # the class rests on the measured limiter where the reference has one
    assert MODEL.steps["warp_sph/pruned/n62500"]["class_from"] == "measured limiter: latency"
    assert MODEL.steps["jax_matmul/baseline/n512"]["class"] == "host"
    assert MODEL.steps["numba_ufunc/pinned/n268435456"]["class"] == "host-link"
    # a step the model holds no runs of uses its class's pooled spread
    assert MODEL.spread(("warp_sph", "new", 62500), "device") == (
        MODEL.classes["device"]["log_sd"], "between-run spread of device-bound steps (no runs of this step)")


def test_a_planted_factor_divides_the_within_run_interval_exactly(runs):
    base, cand = (runs[n][("cupy_sqdiff", "fused", 16384)]["times_ms"] for n in ("P", "b1"))
    v = verdicts.compare(base, cand, n_resamples=RESAMPLES)
    slowed = verdicts.compare(base, [t * 1.05 for t in cand], n_resamples=RESAMPLES)
    assert slowed.interval == pytest.approx(_planted(v, 1.05).interval, rel=1e-12)


def test_within_run_intervals_call_identical_code_faster_or_slower_across_runs(intervals):
    """Why the model exists: without it, a fifth of the A/A comparisons are false calls."""
    false = sum(v.kind in ("faster", "slower") for v in intervals.values())
    assert false / len(intervals) > 0.15


def test_identical_code_across_runs_is_called_faster_or_slower_in_at_most_1_percent(runs, steps, intervals):
    in_sample = [_call(v, MODEL.steps[noise.step_key(k)]["log_sd"]) for (x, y, k), v in intervals.items()]
    assert len(in_sample) == 20 * 43
    assert sum(c in ("faster", "slower") for c in in_sample) / len(in_sample) <= 0.01
    held_out = [_call(intervals[(x, y, k)], log_sd[k])
                for _, pairs, log_sd, _ in _held_out_trials(runs, steps) for x, y in pairs for k in steps]
    assert len(held_out) == 5 * 8 * 43
    assert sum(c in ("faster", "slower") for c in held_out) / len(held_out) <= 0.01


def _detection(trials) -> float:
    calls = list(trials)
    return sum(c == "slower" for c in calls) / len(calls)


#: (planted slowdown, device-bound steps of the 25 whose stated detectable slowdown is at most that)
GATEABLE = [(0.05, 1), (0.08, 7), (0.15, 14)]
#: held out, the share of trials called slower falls short of 95% in two places, stated here: at 5%, 60 of
#: 64 (the four misses are CuPy rmm_pool at 16384 against a1, whose within-run interval is wider than the
#: other runs', which the four training runs could not know); host-link steps at their stated slowdown,
#: 227 of 240 (the near-zero spreads of numba streams and PyCUDA pinned_async)
HELD_OUT_SHORT = {0.05: 0.93, "host-link": 0.94}


@pytest.mark.parametrize("planted,gateable_steps", GATEABLE)
def test_a_planted_device_slowdown_is_found_where_the_spread_allows_it(runs, steps, intervals, planted,
                                                                        gateable_steps):
    """A planted 5% slowdown is found in 95% of trials only on the device-bound steps whose between-run
    spread allows it: detectable_slowdown <= 5% holds for one of the 25 (Warp SPH pruned); 8% for seven,
    15% for fourteen. The others' spread (up to 7% SD of the log median between runs) is stated per step
    in noise.json."""
    device = [k for k in steps if MODEL.steps[noise.step_key(k)]["class"] == "device"]
    gateable = [k for k in device if MODEL.steps[noise.step_key(k)]["detectable_slowdown"] <= planted]
    assert len(device) == 25 and len(gateable) == gateable_steps
    assert _detection(_call(intervals[(x, y, k)], MODEL.steps[noise.step_key(k)]["log_sd"], 1 + planted)
                      for x, y in itertools.permutations(RUNS, 2) for k in gateable) >= 0.95
    # held out: the steps the four training runs say can be gated at this slowdown
    assert _detection(_call(intervals[(x, y, k)], log_sd[k], 1 + planted)
                      for _, pairs, log_sd, detectable in _held_out_trials(runs, steps, intervals)
                      for x, y in pairs for k in device if detectable[k] <= planted) >= HELD_OUT_SHORT.get(planted, 0.95)


@pytest.mark.parametrize("cls", noise.CLASSES)
def test_each_step_is_found_at_the_slowdown_its_model_states(runs, steps, intervals, cls):
    """Every step, planted at its own stated detectable_slowdown: called slower in 95% of trials. For
    host-bound steps that is 27-297% (no 15% change of one can be told from a second run's host)."""
    chosen = [k for k in steps if MODEL.steps[noise.step_key(k)]["class"] == cls]
    stated = {k: MODEL.steps[noise.step_key(k)] for k in chosen}
    assert _detection(_call(intervals[(x, y, k)], stated[k]["log_sd"], 1 + stated[k]["detectable_slowdown"])
                      for x, y in itertools.permutations(RUNS, 2) for k in chosen) >= 0.95
    assert _detection(_call(intervals[(x, y, k)], log_sd[k], 1 + detectable[k])
                      for _, pairs, log_sd, detectable in _held_out_trials(runs, steps, intervals)
                      for x, y in pairs for k in chosen) >= HELD_OUT_SHORT.get(cls, 0.95)
