"""``python -m analysis compare`` on the committed reference: with itself, with a planted slowdown, against
the A/A runs of other H200 machines (tests/data/aa_runs_h200), against the H100 reference, and on inputs
it cannot trust (exit 2)."""
from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest

from analysis.model import noise
from analysis.cli.main import main
from analysis.model.compare import compare_folders
from analysis.model.compare_steps import step_order as _order
from analysis.report.compare_text import markdown as compare_markdown
from analysis.common.gzfiles import existing_capture
from analysis.model.run_summary import load_json

from conftest import reference_runs
import snakemake_forks

REF = os.path.join(os.path.dirname(__file__), "..", "reports", "reference", "h200")
PLANTED = ("cupy_sqdiff", "fused", 16384)
#: the reference's timed steps: one timed record (timing.json, gzipped there) per run folder
STEPS = len(reference_runs())


def _copy_timings(dst) -> None:
    """The reference's timing records (gzipped, as it keeps them) and ceilings, in their folders (the
    traces are not needed)."""
    for folder, _, files in os.walk(REF):
        for name in files:
            if name in ("timing.json", "timing.json.gz", "ceilings.json"):
                rel = os.path.relpath(os.path.join(folder, name), REF)
                os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
                shutil.copy(os.path.join(folder, name), os.path.join(dst, rel))


def _edit_timing(folder, edit) -> None:
    """Change the timed record in ``folder`` in place (``edit(record)``), plain or gzipped as it is."""
    path = existing_capture(str(folder), "timing.json")
    rec = load_json(path)
    edit(rec)
    with (gzip.open(path, "wt") if path.endswith(".gz") else open(path, "w")) as f:
        f.write(json.dumps(rec))  # one write: json.dump streams through the pure-Python encoder


def test_the_reference_compared_with_itself_is_the_same_everywhere(tmp_path, capsys):
    out_md, out_json = tmp_path / "c.md", tmp_path / "c.json"
    assert main(["compare", REF, REF, "--output-md", str(out_md), "--output-json", str(out_json)]) == 0
    c = json.loads(out_json.read_text())
    assert len(c["steps"]) == STEPS and not c["any_slower"]
    assert {s["verdict"]["kind"] for s in c["steps"]} == {"same"}
    md = out_md.read_text()
    assert f"{STEPS} steps in both: 0 faster, 0 slower, {STEPS} same, 0 uncertain" in md
    # time/floor of each side comes from the ceilings of its own run
    fused = next(s for s in c["steps"] if (s["workload"], s["variant"], s["size"]) == PLANTED)
    assert fused["base"]["time_over_floor"] == pytest.approx(fused["cand"]["time_over_floor"])
    # the SM clock range NVML recorded over the timed samples
    rec = load_json(os.path.join(REF, PLANTED[0], PLANTED[1], f"n{PLANTED[2]}", "timing.json"))
    assert fused["base"]["sm_clock_mhz_range"] == rec["telemetry"]["sm_clock_mhz_range"] is not None
    assert fused["base"]["sm_clock_mhz_range"] == fused["cand"]["sm_clock_mhz_range"]


def test_a_planted_10_percent_slowdown_in_one_step_fails_the_gate(tmp_path, capsys):
    cand = tmp_path / "cand"
    _copy_timings(cand)

    def slower(rec):
        rec["times_ms"] = [t * 1.10 for t in rec["times_ms"]]
        rec["timing"]["median_ms"] *= 1.10

    _edit_timing(cand / PLANTED[0] / PLANTED[1] / f"n{PLANTED[2]}", slower)
    assert main(["compare", REF, str(cand), "--output-json", str(tmp_path / "c.json")]) == 1
    assert "slower: cupy_sqdiff/fused/n16384 slower 0.909× [" in capsys.readouterr().out
    kinds = _kinds_of(json.loads((tmp_path / "c.json").read_text()))
    assert kinds.pop(PLANTED) == "slower"
    assert set(kinds.values()) == {"same"}


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert main(["compare", REF, str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not a folder of captures" in err
    (tmp_path / "empty").mkdir()
    assert main(["compare", REF, str(tmp_path / "empty")]) == 2
    assert "no timing.json records" in capsys.readouterr().err
    broken = tmp_path / "broken" / "x"
    broken.mkdir(parents=True)
    (broken / "timing.json").write_text("{")
    assert main(["compare", REF, str(tmp_path / "broken")]) == 2
    assert "cannot read JSON" in capsys.readouterr().err


def test_snakemake_compare_writes_both_files_and_fails_on_a_slowdown(tmp_path):

    root = os.path.join(os.path.dirname(__file__), "..")
    # the reference's timed records and noise model without its traces: the rule's wiring is under test
    # here, and a folder without traces is compared on its times alone, with no limiters to read
    base, cand = tmp_path / "base", tmp_path / "cand"
    _copy_timings(base)
    shutil.copy(NOISE, base / "noise.json")
    _copy_timings(cand)
    _edit_timing(cand / PLANTED[0] / PLANTED[1] / f"n{PLANTED[2]}",
                 lambda rec: rec.update(times_ms=[t * 1.10 for t in rec["times_ms"]]))

    def run(cand_dir, work):
        return snakemake_forks.run(["compare", "--cores", "1", "--config", f"compare_base={base}",
                                    f"compare_cand={cand_dir}", f"work_dir={work}"], root)

    same = run(base, tmp_path / "w1")
    assert same.returncode == 0, same.stderr[-2000:]
    assert json.loads((tmp_path / "w1" / "compare" / "compare.json").read_text())["any_slower"] is False
    slower = run(cand, tmp_path / "w2")
    assert slower.returncode != 0
    assert "slower: cupy_sqdiff/fused/n16384" in slower.stdout + slower.stderr


def _scaled_runs(dst, factors, planted_factors=None) -> None:
    """Several runs side by side (run0/, run1/, ...): the reference with each run's times scaled."""
    for i, f in enumerate(factors):
        run = dst / f"run{i}"
        _copy_timings(run)
        for folder, _, files in os.walk(run):
            if "timing.json" in files or "timing.json.gz" in files:
                def scale(rec, i=i, f=f):
                    step = (rec["workload"], rec["variant"], rec["size"])
                    k = planted_factors[i] if planted_factors and step == PLANTED else f
                    rec["times_ms"] = [t * k for t in rec["times_ms"]]

                _edit_timing(folder, scale)


@pytest.fixture(scope="module")
def three_base_runs(tmp_path_factory):
    """Three runs of the reference (times x1.00, x1.01, x0.99) as one base side; read only."""
    base = tmp_path_factory.mktemp("compare") / "base"
    _scaled_runs(base, (1.00, 1.01, 0.99))
    return base


def test_several_processes_per_step_make_the_process_the_unit(tmp_path, three_base_runs):
    base, cand = three_base_runs, tmp_path / "cand"
    _scaled_runs(cand, (0.99, 1.00, 1.01), planted_factors=(1.10, 1.11, 1.09))
    c = compare_folders(str(base), str(cand))
    by_step = {(s.base.workload, s.base.variant, s.base.size): s for s in c.steps}
    planted = by_step.pop(PLANTED)
    assert planted.verdict.kind == "slower" and planted.verdict.method == "Welch interval over processes"
    assert planted.verdict.samples == (3, 3)
    assert {s.verdict.kind for s in by_step.values()} == {"same"}  # the same three process medians
    assert c.as_dict()["steps"][0]["base"]["processes"] == 3


def test_clock_ranges_that_do_not_overlap_are_flagged():
    from analysis.model.compare import Step, StepComparison
    from analysis.model.verdicts import compare

    def step(clocks):
        return Step("jax_matmul", "bf16", 8192, "x", [1.0, 1.1, 1.2], None, clocks, None)

    v = compare([1.0, 1.1, 1.2], [1.0, 1.1, 1.2])
    assert StepComparison([step([1755, 1785])], [step([1980, 1980])], v).clocks_differ is True
    assert StepComparison([step([1900, 1980])], [step([1980, 1980])], v).clocks_differ is False
    assert StepComparison([step(None)], [step([1980, 1980])], v).clocks_differ is None


def test_each_side_names_its_measured_limiter_and_a_change_is_flagged(tmp_path):
    """The reference with itself: every step has the same limiter on both sides. A candidate whose
    cupy_sqdiff captures lost their ncu profiles: the DRAM-bound steps become "not profiled", flagged
    as a change; a timed-only candidate has no limiter to compare."""
    same = compare_folders(REF, REF)
    assert all(s.base.limiter and s.base.limiter == s.cand.limiter and s.limiter_changed is False
               for s in same.steps)
    fused = next(s for s in same.steps if (s.base.workload, s.base.variant, s.base.size) == PLANTED)
    assert fused.base.limiter == "memory: DRAM (91% of peak)"

    cand = tmp_path / "cand"
    shutil.copytree(os.path.join(REF, "cupy_sqdiff"), cand / "cupy_sqdiff")
    shutil.copy(os.path.join(REF, "ceilings.json"), cand / "ceilings.json")
    for profile in cand.glob("cupy_sqdiff/*/n*/ncu*"):
        profile.unlink()
    c = compare_folders(REF, str(cand))
    planted = next(s for s in c.steps if (s.base.workload, s.base.variant, s.base.size) == PLANTED)
    assert planted.cand.limiter == "not profiled" and planted.limiter_changed is True
    assert "memory: DRAM (91% of peak) → not profiled (changed)" in compare_markdown(c)
    # launch/host comes from nsys alone: unchanged without the profiles
    small = next(s for s in c.steps if (s.base.workload, s.base.variant, s.base.size) == ("cupy_sqdiff", "fused", 4096))
    assert small.limiter_changed is False

    timed_only = tmp_path / "timed"
    _copy_timings(timed_only)
    c = compare_folders(REF, str(timed_only))
    assert {s.limiter_changed for s in c.steps} == {None}
    assert c.as_dict()["steps"][0]["cand"]["limiter"] is None


def test_an_uncertain_step_over_processes_says_what_its_processes_can_resolve(tmp_path, three_base_runs):
    from analysis.report.compare_text import markdown

    base, cand = three_base_runs, tmp_path / "cand"
    _scaled_runs(cand, (0.99, 1.00, 1.01), planted_factors=(1.00, 1.05, 1.02))
    c = compare_folders(str(base), str(cand))
    planted = next(s for s in c.steps if (s.base.workload, s.base.variant, s.base.size) == PLANTED)
    assert planted.verdict.kind == "uncertain"
    assert planted.verdict.resolution.startswith("the process medians spread ")
    assert "3 processes a side call changes beyond about" in planted.verdict.resolution
    md = markdown(c)
    assert "What the uncertain steps' processes can resolve:" in md
    assert f"/n{PLANTED[2]}: {planted.verdict.resolution}" in md
    # the steps called "same" carry none
    assert all(not s.verdict.resolution for s in c.steps if s.verdict.kind != "uncertain")


# --- verdicts across runs: the A/A runs of tests/data/aa_runs_h200 against the reference --------------

AA = os.path.join(os.path.dirname(__file__), "data", "aa_runs_h200")
NOISE = os.path.join(REF, "noise.json")
#: two device-bound steps whose stated detectable slowdown (noise.json) is below 8%
PLANTED_8 = (("warp_sph", "pruned", 62500), ("cupy_sqdiff", "rmm_pool", 16384))


def _kinds(c) -> dict:
    return {(s.base.workload, s.base.variant, s.base.size): s.verdict.kind for s in c.steps}


def _kinds_of(written: dict) -> dict:
    """_kinds of a comparison as the command writes it (--output-json), in its order."""
    return {(s["workload"], s["variant"], s["size"]): s["verdict"]["kind"] for s in written["steps"]}


@pytest.mark.parametrize("run", ["a1", "a2", "b1", "b2"])
def test_identical_code_on_another_machine_passes_the_gate(run, tmp_path, capsys):
    out_json = tmp_path / "c.json"
    assert main(["compare", REF, os.path.join(AA, run), "--output-json", str(out_json)]) == 0
    c = json.loads(out_json.read_text())
    assert c["noise_model"] == NOISE and not c["gpu_models_differ"] and not c["host_differs"]
    assert not {s["verdict"]["kind"] for s in c["steps"]} & {"faster", "slower"}
    assert len(c["steps"]) == 43
    err = capsys.readouterr().err
    assert "compare: 43 steps in both: 0 faster, 0 slower, " in err
    # the within-run verdict is kept beside the widened one
    assert all(s["within_run"] is not None for s in c["steps"])


def test_an_8_percent_slowdown_in_two_device_bound_steps_fails_the_gate(tmp_path, capsys):
    cand = tmp_path / "a1"
    shutil.copytree(os.path.join(AA, "a1"), cand)
    for w, v, n in PLANTED_8:
        _edit_timing(cand / w / v / f"n{n}", lambda rec: rec.update(times_ms=[t * 1.08 for t in rec["times_ms"]]))
    assert main(["compare", REF, str(cand), "--output-json", str(tmp_path / "c.json")]) == 1
    out = capsys.readouterr()
    assert sorted(line.split()[1] for line in out.out.splitlines() if line.startswith("slower: ")) == [
        "cupy_sqdiff/rmm_pool/n16384", "warp_sph/pruned/n62500"]
    assert "compare: 43 steps in both: 0 faster, 2 slower, " in out.err
    kinds = _kinds_of(json.loads((tmp_path / "c.json").read_text()))
    assert [k for k, kind in kinds.items() if kind in ("faster", "slower")] == sorted(PLANTED_8, key=_order)


def test_different_gpu_models_are_a_cross_gpu_comparison_with_exit_3(tmp_path, capsys):
    out_json = tmp_path / "c.json"
    assert main(["compare", REF, os.path.join(REF, "..", "h100"), "--output-json", str(out_json)]) == 3
    err = capsys.readouterr().err
    assert "different GPU models (NVIDIA H200 / NVIDIA H100 80GB HBM3)" in err
    assert "python -m analysis cross-gpu" in err
    # the H200's between-run spread is not applied to two GPU models' difference
    c = json.loads(out_json.read_text())
    assert c["gpu_models_differ"] and c["noise_model"] is None and all(s["within_run"] is None for s in c["steps"])


def _one_record(tmp_path, edit=None, text=None, ceilings=None):
    """A candidate folder holding one of a1's timed records, edited, or replaced by ``text``."""
    folder = tmp_path / "cand" / "warp_sph" / "pruned" / "n62500"
    folder.mkdir(parents=True)
    rec = load_json(os.path.join(AA, "a1", "warp_sph", "pruned", "n62500", "timing.json"))
    if edit:
        edit(rec)
    (folder / "timing.json").write_text(text if text is not None else json.dumps(rec))
    if ceilings is not None:
        (tmp_path / "cand" / "ceilings.json").write_text(ceilings)
    return str(tmp_path / "cand")


BAD = {
    "a list": (None, "[1, 2, 3]", None, "a JSON list, not an object"),
    "a string": (None, '"fast"', None, "a JSON str, not an object"),
    "a number": (None, "3.5", None, "a JSON float, not an object"),
    "NaN time": (lambda r: r["times_ms"].__setitem__(0, float("nan")), None, None, "field times_ms/0: not a finite"),
    "infinite time": (lambda r: r["times_ms"].__setitem__(1, float("inf")), None, None,
                      "field times_ms/1: not a finite"),
    "negative time": (lambda r: r["times_ms"].__setitem__(2, -1.0), None, None, "field times_ms/2: -1.0 is less"),
    "zero time": (lambda r: r["times_ms"].__setitem__(0, 0), None, None, "field times_ms/0: 0 is less"),
    "text times": (lambda r: r.update(times_ms="fast"), None, None, "field times_ms: 'fast' is not of type 'array'"),
    "null times": (lambda r: r.update(times_ms=None), None, None, "field times_ms: None is not of type 'array'"),
    "size big": (lambda r: r.update(size="big"), None, None, "field size: 'big' is not of type 'integer'"),
    "telemetry list": (lambda r: r.update(telemetry=[1]), None, None, "field telemetry: [1] is not of type"),
    "ceilings list": (None, None, "[1, 2]", "not a ceilings record: field (top level): [1, 2] is not of type"),
    "unknown schema": (lambda r: r.update(schema_version=99), None, None, "field schema_version: 99, this code reads"),
}


@pytest.mark.parametrize("case", BAD)
def test_an_input_it_cannot_trust_exits_2_with_one_line_naming_the_file_and_field(case, tmp_path, capsys):
    edit, text, ceilings, message = BAD[case]
    cand = _one_record(tmp_path, edit, text, ceilings)
    assert main(["compare", os.path.join(AA, "a2"), cand]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err, err
    assert ("ceilings.json" if ceilings else "timing.json") in err


@pytest.mark.parametrize("version", [None, 1, 2])
def test_records_of_each_known_schema_version_are_read(version, tmp_path):
    def edit(rec):
        rec.pop("schema_version", None)
        if version is not None:
            rec["schema_version"] = version

    c = compare_folders(os.path.join(AA, "a2"), _one_record(tmp_path, edit))
    assert len(c.steps) == 1


def test_another_host_marks_host_bound_steps_and_names_changed_packages(tmp_path, capsys):
    """A candidate on a host the noise model's runs did not cover (another CPU model and core count):
    a host-bound step five times slower is "host differs", not slower; a device-bound step slowed 8%
    still fails the gate; a package whose version changed is named beside its steps."""
    cand = tmp_path / "a1"
    shutil.copytree(os.path.join(AA, "a1"), cand)
    for folder, _, files in os.walk(cand):
        if any(f.startswith("timing.json") for f in files):
            def elsewhere(rec):
                rec["provenance"].update(cpu_model="AMD EPYC 9654", cpu_count=192)
                step = (rec["workload"], rec["variant"], rec["size"])
                if step == ("jax_matmul", "baseline", 512):
                    rec["times_ms"] = [t * 5 for t in rec["times_ms"]]
                if rec["workload"] == "warp_sph":
                    rec["provenance"]["packages"]["warp"] = "1.20.0"

            _edit_timing(folder, elsewhere)
    base = os.path.join(AA, "a2")
    model = noise.load_noise(NOISE)
    assert main(["compare", base, str(cand), "--noise", NOISE, "--output-json", str(tmp_path / "c.json")]) == 0
    c = json.loads((tmp_path / "c.json").read_text())
    assert c["host_differs"]
    kinds = _kinds_of(c)
    assert kinds[("jax_matmul", "baseline", 512)] == "host differs"
    assert "faster" not in kinds.values() and "slower" not in kinds.values()
    warp = next(s for s in c["steps"] if s["workload"] == "warp_sph")
    assert warp["packages_differ"] == ["warp 1.19.0 → 1.20.0"]
    assert all(not s["packages_differ"] for s in c["steps"] if s["workload"] != "warp_sph")
    md = capsys.readouterr().out
    assert "**different hosts**" in md and "; warp 1.19.0 → 1.20.0" in md
    # the same host as the model's runs: the spread covers it, no "host differs"
    same_host = compare_folders(base, os.path.join(AA, "b1"), noise_model=model)
    assert not same_host.host_differs
