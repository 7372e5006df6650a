"""The report model and the pages made from it: ladder order from the recipe, busy time as a union,
the first screen, the length budgets, provenance on every page and reproduce commands that are the
recorded ones. Model tests run on summaries of the committed captures; page tests read the committed
reports (which `snakemake rebuild_reports` checks equal the pages rebuilt from those captures)."""
from __future__ import annotations

import copy
import functools
import glob
import json
import re
import subprocess
import sys

import pytest

from analysis.model import report_model
from analysis.report import page_text
from conftest import REFERENCE, REPO, has_timing_record, reference_ceilings, reference_runs, summary_of
from workloads.contract import Recipe, WorkloadError
from workloads.registry import BY_NAME, RECIPES

REPORTS = REPO / "reports"
RECIPE_PAGES = [REPORTS / f"{r.name}.md" for r in RECIPES]
ALL_PAGES = sorted(REPORTS.glob("*.md")) + sorted((REPORTS / "kernels").glob("*.md"))
GPU_JOBS = REPO / "reports" / "reference" / "h200x2" / "gpu-jobs"
#: the GPU job records of the reference's own run (config reference: gpu_jobs)
REFERENCE_GPU_JOBS = REPO / "reports" / "reference" / "h200" / "gpu-jobs"


@functools.lru_cache(maxsize=None)
def _by_size(workload: str) -> dict[int, list[dict]]:
    by_size: dict[int, list[dict]] = {}
    for r in reference_runs():
        if r.parts[-3] == workload:
            s = copy.deepcopy(summary_of(r))  # the session's summary (conftest), this module's own copy
            by_size.setdefault(s["size"], []).append(s)
    return by_size


@functools.lru_cache(maxsize=None)
def _model(workload: str) -> report_model.ReportModel:
    by_size = _by_size(workload)
    return report_model.build(BY_NAME[workload], by_size, reference_ceilings(workload))


# --- the recipe's declaration -----------------------------------------------------------------------

def _recipe(**kw) -> Recipe:
    base = dict(name="r", title="t", seed_document="000", framework="cupy", requires=(),
                variants=("baseline", "a", "b"), default_size=1, size_meaning="n")
    return Recipe(**{**base, **kw})


def test_a_ladder_names_only_its_branches_each_a_parent_listed_before_the_step():
    r = _recipe()
    assert [r.parent_of(v) for v in r.variants] == [None, "baseline", "a"]  # each on the one before it
    r = _recipe(improves_on=(("b", "baseline"),))
    assert r.parent_of("baseline") is None and r.parent_of("a") == "baseline" and r.parent_of("b") == "baseline"
    with pytest.raises(WorkloadError, match="listed before"):
        _recipe(improves_on=(("a", "b"),))  # a parent after its step
    with pytest.raises(WorkloadError, match="unknown"):
        _recipe(improves_on=(("b", "baseline"), ("c", "a")))
    with pytest.raises(WorkloadError, match="baseline 'baseline' cannot improve"):
        _recipe(improves_on=(("baseline", "a"),))
    with pytest.raises(WorkloadError, match="the step listed just before it"):
        _recipe(improves_on=(("b", "a"),))  # what every step's parent is already
    with pytest.raises(WorkloadError, match="named twice"):
        _recipe(improves_on=(("b", "baseline"), ("b", "baseline")))


def test_a_ladder_that_starts_after_the_recipes_baseline_says_so():
    """JAX's int32 steps run at 512 only (rules/config.yaml variant_sizes): the reference's runs at 8192
    (none of them) start the ladder at float32, and the result box compares with "the first step run
    at size 8192", not with "the baseline"; at 512 it is the baseline."""
    from analysis.report import markdown

    by_size = _by_size("jax_matmul")
    assert {r["variant"] for r in by_size[8192]}.isdisjoint({"baseline", "jit"})
    assert {"baseline", "jit"} <= {r["variant"] for r in by_size[512]}
    model = report_model.build(BY_NAME["jax_matmul"], by_size, reference_ceilings("jax_matmul"))
    assert model.result.size == 8192 and model.result.baseline.variant == "float32"
    assert page_text.baseline_label(model.result) == "the first step run at size 8192"
    box = "\n".join(markdown.result_box(model))
    assert "**Best step against the first step run at size 8192:**" in box and "against the baseline" not in box
    small = report_model.result_box(model.ladder[512])
    assert small.baseline.variant == "baseline" and page_text.baseline_label(small) == "the baseline"


def test_cudf_pool_steps_compare_with_their_parents():
    steps = {s.variant: s for s in _model("cudf_groupby").ladder[50_000_000]}
    assert [s for s in steps] == list(BY_NAME["cudf_groupby"].variants)
    assert steps["split_agg_pool"].vs_parent.against == "split_agg"
    assert steps["agg_all_pool"].vs_parent.against == "agg_all"
    # the pool helps the step it is added to (not "slower than agg_all", which list order gave)
    assert steps["split_agg_pool"].vs_parent.label == "faster"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_the_index_model_computes_only_the_result_boxs_verdict_and_states_the_same(recipe):
    """``verdicts_wanted="result"`` (the index's): the fastest step's verdict against the baseline at
    the largest size, equal to the page's, and no other; the index line made from it is the same."""
    from analysis.report import markdown

    full = _model(recipe.name)
    ceilings = json.loads((REFERENCE / "ceilings.json").read_text())
    lean = report_model.build(recipe, _by_size(recipe.name), reference_ceilings(recipe.name), verdicts_wanted="result")
    assert lean.result.best_vs_baseline == full.result.best_vs_baseline
    computed = [(s.variant, s.size) for steps in lean.ladder.values() for s in steps if s.vs_baseline or s.vs_parent]
    assert computed == ([] if lean.result.best_vs_baseline is None else [(lean.result.best.variant, lean.result.size)])
    assert lean.result.best.vs_parent is None
    preflight = json.loads((REFERENCE / "preflight.json").read_text())
    assert markdown.index_report([lean], ceilings, preflight) == markdown.index_report([full], ceilings, preflight)


def test_a_step_whose_parent_is_the_baseline_has_one_verdict_against_both():
    steps = _model("cupy_sqdiff").ladder[max(_model("cupy_sqdiff").sizes)]
    children = [s for s in steps if s.improves_on == steps[0].variant]
    assert children and all(s.vs_parent is s.vs_baseline for s in children)
    with pytest.raises(ValueError, match="verdicts_wanted"):
        report_model.build_steps(BY_NAME["cupy_sqdiff"], _by_size("cupy_sqdiff")[4096], {}, verdicts_wanted="some")


# --- busy time --------------------------------------------------------------------------------------

def test_busy_time_is_the_union_numba_streams_below_pinned():
    steps = {s.variant: s for s in _model("numba_ufunc").ladder[max(_model("numba_ufunc").sizes)]}
    streams, pinned = steps["streams"].busy, steps["pinned"].busy
    assert streams.busy_ms < pinned.busy_ms
    # streams overlap copies with kernels: the kinds' sums exceed the union by tens of ms
    assert streams.overlap_ms > 10 and pinned.overlap_ms < 0.01 * pinned.busy_ms
    for s in steps.values():
        assert s.busy.busy_ms + s.busy.idle_ms == pytest.approx(s.busy.wall_ms, rel=1e-9)


def test_library_kernels_get_no_launch_configuration_finding():
    m = _model("cudf_groupby")
    # every under-one-wave kernel of cuDF is CUB's or cuDF's own: no finding, no advice about its grid
    assert all(g.id != "under_one_wave" for g in m.findings)
    assert report_model.is_library_kernel("void cub::detail::for_each::static_kernel<int>(int)")
    assert report_model.is_library_kernel("gemm_fusion_dot_1") and report_model.is_library_kernel("nvjet_sm90_tss")
    assert not report_model.is_library_kernel("get_acceleration_5a783dae_cuda_kernel_forward")
    assert not report_model.is_library_kernel("cookbook_squared_diff")


def test_findings_are_grouped_by_fix_and_sorted_by_time_at_stake():
    m = _model("cupy_sqdiff")
    ids = [g.id for g in m.findings]
    assert len(ids) == len(set(ids))
    stakes = [g.time_at_stake_ms for g in m.findings]
    assert stakes == sorted(stakes, reverse=True)
    alloc = next(g for g in m.findings if g.id == "hot_range_allocations")
    assert {p.variant for p in alloc.places} >= {"baseline", "fused"}


def test_the_limiter_slot_is_one_swappable_function(monkeypatch):
    from analysis.model.limiter import Kind, StepLimiter, Unit

    planted = StepLimiter(Kind.MEMORY, Unit.L2, 1.0, "planted", source="ncu", advice="next")
    monkeypatch.setattr(report_model, "LIMITER", lambda *args: planted)
    _model.cache_clear()
    try:
        m = _model("cupy_sqdiff")
        assert all(s.limiter is planted for steps in m.ladder.values() for s in steps)
        assert m.result.limiter.advice == "next"
    finally:
        _model.cache_clear()


def test_markdown_does_not_import_matplotlib():
    r = subprocess.run([sys.executable, "-c", "import sys, analysis.report.markdown, analysis.model.report_model; "
                        "print('matplotlib' in sys.modules)"], cwd=REPO, capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


def test_timeline_legend_has_one_colour_per_kind():
    from analysis.report import figures

    colours = [*figures.PHASE_COLORS.values(), *figures.GPU_ROWS.values(), *figures.API_COLORS.values()]
    assert len(colours) == len(set(colours))


# --- the committed pages ----------------------------------------------------------------------------

def _ladder_rows(text: str) -> list[str]:
    head = text.index("| step | improves on |")
    rows = []
    for line in text[head:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line.split(" | ")[0].strip("| `"))
    return rows


def _captured_variants(workload: str, size: int | None = None) -> list[str]:
    """The recipe's variants, in its order, that the reference holds captures of (at ``size``, or at
    any): a step added after the reference run is absent from the pages rebuilt from it, and a step
    the configuration runs at other sizes only (rules/config.yaml variant_sizes) from that size's ladder."""
    return [v for v in BY_NAME[workload].variants
            if any(has_timing_record(r) for r in (REFERENCE / workload / v).glob(f"n{size or '*'}"))]


def _first_ladder_size(workload: str) -> int:
    """The size of the ladder on the first screen: the result box's."""
    return _model(workload).result.size


@pytest.mark.parametrize("page", RECIPE_PAGES, ids=lambda p: p.stem)
def test_first_screen_holds_the_result_box_and_the_ladder(page):
    lines = page.read_text().splitlines()
    first = "\n".join(lines[:30])
    # against the baseline, or the first step run at the result's size where the baseline is not (JAX)
    against = page_text.baseline_label(_model(page.stem).result)
    assert "> **Result at size" in first and f"**Best step against {against}:**" in first
    # the box's limiter and advice are about the step it reports, named
    assert f"**What limits `{_model(page.stem).result.best.variant}`:**" in first and "**Next thing to try:**" in first
    captured = _captured_variants(page.stem, _first_ladder_size(page.stem))
    # the whole ladder of the steps captured at its size, in the recipe's order, with one sentence per
    # step; the steps run at other sizes only are named as such
    assert _ladder_rows(first) == captured
    for v in BY_NAME[page.stem].variants:
        assert (f"- `{v}`: " in first) == (v in captured)
    for v in _captured_variants(page.stem):
        assert (v in captured) != (f"`{v}` (ran at size" in first), v
    header = next(line for line in lines if line.startswith("| step | improves on |"))
    assert header.count(" | ") + 1 <= 8


@pytest.mark.parametrize("page", RECIPE_PAGES, ids=lambda p: p.stem)
def test_ladder_compares_each_step_with_the_step_it_improves_on(page):
    recipe = BY_NAME[page.stem]
    text = page.read_text()
    head = text.index("| step | improves on |")
    for line in text[head:].splitlines()[2:2 + len(_captured_variants(page.stem, _first_ladder_size(page.stem)))]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        step, parent = cells[0].strip("`"), cells[1].strip("`")
        assert parent == (recipe.parent_of(step) or "—")


@pytest.mark.parametrize("page", RECIPE_PAGES + [REPORTS / "h100" / p.name for p in RECIPE_PAGES],
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_recipe_pages_keep_their_length_budget(page):
    # the Warp page, with seven steps, both experiments' sections, its run's exact commands and the
    # links to its kernel pages, is the longest
    assert len(page.read_text().splitlines()) <= 260


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: p.name)
def test_no_table_row_over_400_characters(page):
    long = [line[:80] for line in page.read_text().splitlines() if line.startswith("|") and len(line) > 400]
    assert not long


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: p.name)
def test_no_line_over_400_bytes(page):
    """Prose and commands are folded where they would run longer (markdown.fold_long_lines)."""
    long = [line[:80] for line in page.read_text().splitlines() if len(line.encode("utf-8")) > 400]
    assert not long


def test_folding_keeps_quotes_list_items_and_commands_whole():
    import shlex

    from analysis.report.markdown import fold_long_lines

    quote = "> - **What limits:** " + " ".join(["latency µs"] * 80)
    folded = fold_long_lines(quote).split("\n")
    assert len(folded) > 1 and all(len(x.encode()) <= 400 for x in folded)
    assert all(x.startswith(">   ") for x in folded[1:])
    assert " ".join(x.removeprefix(">   ") for x in folded).removeprefix("> - ") == quote.removeprefix("> - ")
    command = "ncu " + " ".join(f"--opt{i} 'a b'" for i in range(60))
    lines = fold_long_lines(f"```sh\n{command}\n```").split("\n")[1:-1]
    assert len(lines) > 1 and all(x.endswith(" \\") for x in lines[:-1])
    assert shlex.split(" ".join(lines).replace(" \\ ", " ")) == shlex.split(command)
    table_row = "| " + "x" * 500 + " |"
    assert fold_long_lines(table_row) == table_row


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: p.name)
def test_every_page_has_provenance_without_host_paths(page):
    text = page.read_text()
    assert re.search(r"^#+ (Provenance|How this was captured)$", text, re.M) or page.name == "gpu_jobs.md" \
        and "driver" in text and "commit" in text
    assert "/opt/" not in text and "/work/" not in text and ".venv/" not in text


@pytest.mark.parametrize("page", RECIPE_PAGES, ids=lambda p: p.stem)
def test_reproduce_commands_are_the_recorded_ones(page):
    """Every command in the Commands block is a GPU job's argv, or the program an nsys capture recorded
    itself launching, with the interpreter by its name."""
    recorded = set()
    for path in glob.glob(str(GPU_JOBS / "*.json")) + glob.glob(str(REFERENCE_GPU_JOBS / "*.json")):
        recorded.add(" ".join(report_model.portable_argv(json.loads(open(path).read())["argv"])))
    for run in reference_runs():
        if run.parts[-3] == page.stem:
            argv = summarize_nsys_capture(run)
            if argv:
                recorded.add(" ".join(report_model.portable_argv(argv)))
    text = page.read_text()
    block = text[text.index("### Commands"):]
    lines = (block[block.index("```sh\n") + 6:block.index("\n```", block.index("```sh"))]
             .replace(" \\\n    ", " ").splitlines())  # folded commands continue with a backslash
    assert lines
    # what bash runs, argv by argv: a loop over variants runs one command per variant, and a long
    # list is a variable set on the lines before it
    script = []
    for line in lines:
        loop = re.fullmatch(r"(for v in [^;]+; do )(.*)(; done)", line)
        if loop:
            script.append(f"{loop[1]}printf '%s\\x1f' {loop[2]}; printf '\\n'{loop[3]}")
        elif re.match(r"LIST\d+=", line):
            script.append(line)
        else:
            script.append(f"printf '%s\\x1f' {line}; printf '\\n'")
    out = subprocess.run(["bash", "-c", "\n".join(script)], capture_output=True, text=True, check=True).stdout
    printed = [" ".join(c.split("\x1f")[:-1]) for c in out.splitlines()]
    assert len(printed) >= len([line for line in lines if not re.match(r"LIST\d+=", line)])
    for c in printed:
        assert c in recorded


def summarize_nsys_capture(run) -> list[str] | None:
    from analysis.common.gzfiles import existing_capture
    from analysis.readers.nsys.trace import Trace

    with Trace(existing_capture(str(run), "nsys.sqlite")) as ex:
        return ex.capture_metadata()["argv"]


def test_commands_come_from_the_gpu_job_records_of_the_latest_run():
    from analysis.cli.main import _gpu_job_records

    records = _gpu_job_records(str(GPU_JOBS))
    by_size = _by_size("pycuda_kernel")
    cmds, from_records, commits = report_model.commands(BY_NAME["pycuda_kernel"], by_size, records)
    note = page_text.commands_note(from_records, commits)
    assert {c.tool for c in cmds} == {"timed", "nsys", "ncu"}
    assert len(cmds) == len(set(cmds))
    assert all(c.argv[c.argv.index("-m") - 1] == "python" for c in cmds)  # no host path to the interpreter
    # records from another run say so: the records' commit (reports/reference/h200x2/gpu-jobs) and the captures'
    capture_commits = {r["provenance"]["git_commit"] for runs in by_size.values() for r in runs}
    assert "faaee1d" not in capture_commits
    assert "faaee1d" in note and all(c in note for c in capture_commits)
    # without records: the program each nsys capture recorded, and the page says the rest is unknown
    cmds, from_records, commits = report_model.commands(BY_NAME["pycuda_kernel"], by_size, [])
    note = page_text.commands_note(from_records, commits)
    assert "no GPU job records" in note and {c.tool for c in cmds} == {"nsys"}
    assert len(cmds) == sum(len(runs) for runs in by_size.values())


@pytest.mark.parametrize("draw", ["ladder_figure", "busy_figure"])
def test_model_figures_are_deterministic(tmp_path, draw):
    from analysis.report import figures

    paths = [tmp_path / f"{draw}{i}.png" for i in range(2)]
    for p in paths:
        getattr(figures, draw)(_model("numba_ufunc"), str(p))
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_steps_rests_on_cell_shows_clocks_and_the_bursts_joules_of_a_real_run():
    """The per-step "rests on" cell fed the telemetry of a real H100 timed run that has its energy
    burst (tests/data/telemetry_h100): SM clock, throttled samples and joules per call from the burst."""
    import dataclasses
    import gzip

    from analysis.report import markdown

    with gzip.open(REPO / "tests" / "data" / "telemetry_h100" / "cupy_fused_16384.json.gz", "rt") as f:
        record = json.load(f)
    model = _model("cupy_sqdiff")
    step = next(s for s in model.ladder[max(model.sizes)] if s.variant == "fused")
    # the CPU load of the reference's own run left out: this test is about the telemetry
    cell = markdown.rests_on(dataclasses.replace(step, telemetry=record["telemetry"], samples=record["samples"],
                                                 host_load=None))
    assert cell.startswith(f"{record['samples']}")
    assert cell.endswith(f"; 1980 MHz, 0 of {record['samples']} samples throttled, 1.09 J (458 calls back to back)")


def test_provenance_names_the_clocks_nvml_recorded_and_both_nsys_versions():
    """The H200 reference: NVML recorded the SM clock of every timed step; the run's nsys says
    2025.3.1.0 while its SQLite exports name 2025.3.2.0, and the page says which is which."""
    import dataclasses

    preflight = json.loads((REFERENCE / "preflight.json").read_text())
    model = report_model.build(BY_NAME["jax_matmul"], _by_size("jax_matmul"), reference_ceilings("jax_matmul"),
                               tools=preflight, verdicts_wanted="none")
    rows = dict(page_text.provenance_rows(model.provenance))
    assert rows["clocks"].startswith("SM clock while timed (NVML) ") and "MHz" in rows["clocks"]
    assert "not recorded" not in rows["clocks"]
    nsys = rows["Nsight Systems; Nsight Compute"].split("; ")[0]
    assert nsys == "2025.3.1.0 (its SQLite exports name 2025.3.2.0)"
    assert dataclasses.is_dataclass(model.provenance)


def test_ncu_coverage_names_the_steps_profiled_without_the_instrumented_sections():
    """Two real raw pages of one cuDF launch on an H100 (tests/data/ncu_sections_h100): under the
    full set and under cuDF's lean sections. Every metric the reports read is in both; the lean one
    lacks the marker only InstructionStats collects, and the coverage line says which step was
    profiled so instead of claiming the full set for it."""
    from analysis.readers import ncu
    from analysis.model.report_model import ncu_coverage
    from analysis.report.page_text import ncu_coverage_text
    from analysis.model.run_summary import summarize_ncu

    folder = REPO / "tests" / "data" / "ncu_sections_h100"
    full, lean = (summarize_ncu(str(folder / f"cudf_{kind}.csv.gz")) for kind in ("full", "lean"))
    read = [m for m in ncu.SUMMARY_METRICS + ncu.EXTRA_METRICS + ncu.FLOP_METRICS if m != ncu.INSTRUMENTED_MARKER]
    assert all(full[0]["metrics"][m] is not None and lean[0]["metrics"][m] is not None for m in read)
    assert full[0]["metrics"][ncu.INSTRUMENTED_MARKER] > 0 and lean[0]["metrics"][ncu.INSTRUMENTED_MARKER] is None
    # the same measured limiter: L2 (72% and 75% of its peak)
    assert (full[0]["limiter"]["kind"], full[0]["limiter"]["unit"]) == (lean[0]["limiter"]["kind"], lean[0]["limiter"]["unit"]) == ("memory", "L2")

    def run(variant, launches):
        return {"variant": variant, "ncu": launches, "ncu_source": "ncu-raw.csv"}

    both = ncu_coverage_text(ncu_coverage({10_000_000: [run("split_agg", full), run("agg_all", lean)]}))
    assert both.startswith("Nsight Compute (`--set full`: `split_agg`; `--set full` less SourceCounters and "
                           "InstructionStats, the sections that patch the kernel's code and whose metrics only kernel "
                           "pages read: `agg_all`) profiled")
    assert ncu_coverage_text(ncu_coverage({10_000_000: [run("split_agg", full)]})).startswith("Nsight Compute (`--set full`) profiled")


def test_a_finding_of_the_first_calls_alone_says_so_instead_of_up_to_0_ms():
    """The H200 reference's Warp baseline allocates in its first call only (0.027 ms there, none in the
    fastest steady call): its finding costs the steady calls nothing, and the list says so."""
    import types

    from analysis.report import markdown
    from analysis.model import report_model as rm
    from conftest import REFERENCE, summary_of

    run = summary_of(REFERENCE / "warp_sph" / "baseline" / "n62500")
    (finding,) = [f for f in run["findings"] if f["id"] == "hot_range_allocations"]
    assert finding["evidence"]["first_call_allocation_calls"] > 0
    assert rm.time_at_stake_ms(finding, run) == 0
    places = (rm.FindingPlace("baseline", 62500, rm.time_at_stake_ms(finding, run), finding["message"]),)
    group = rm.FindingGroup(finding["id"], finding["title"], finding["fix"], places)
    (line,) = markdown.findings_lines(types.SimpleNamespace(findings=(group,)))
    assert "in the first calls only, none in the steady calls" in line and "up to 0 ms" not in line


def test_a_launch_profiled_with_a_recipes_own_section_list_names_the_full_set_sections_it_lacks():
    """Real reports of the H100 reference (NVIDIA H100 80GB HBM3, ncu 2025.3.1): cuDF's list leaves
    MemoryWorkloadAnalysis out beside the instrumented sections, and the launch says so from the section
    identifiers its report holds; a full-set and a metrics-only report lack none. The coverage line
    names both reasons."""
    from analysis.readers import ncu
    from analysis.model.report_model import ncu_coverage
    from analysis.report.page_text import ncu_coverage_text

    h100 = REPO / "reports" / "reference" / "h100"

    def launch(step):
        (first, *_) = ncu.read_launches(str(h100 / step / "ncu.ncu-rep.gz"))
        return first

    lean = launch("cudf_groupby/agg_all/n50000000")
    assert lean.collection == ncu.COLLECTION_SECTIONS
    assert lean.sections_left_out == ("InstructionStats", "MemoryWorkloadAnalysis", "SourceCounters")
    full = launch("cupy_sqdiff/raw_kernel/n16384")
    assert (full.collection, full.sections_left_out) == (ncu.COLLECTION_FULL, ())
    only_metrics = launch("cudf_groupby/split_agg/n50000000")
    assert (only_metrics.collection, only_metrics.sections_left_out) == (ncu.COLLECTION_METRICS, ())

    def run(variant, one):
        return {"variant": variant, "ncu": [{"kernel_name": one.kernel_name, "collection": one.collection,
                                             "sections_left_out": list(one.sections_left_out)}]}

    line = ncu_coverage_text(ncu_coverage({50_000_000: [run("split_agg", only_metrics), run("agg_all", lean)]}))
    assert line.startswith("Nsight Compute (`--set full` less SourceCounters and InstructionStats, the sections "
                           "that patch the kernel's code and whose metrics only kernel pages read; and less "
                           "MemoryWorkloadAnalysis, left out for the replay passes it costs (`rules/config.yaml` "
                           "gives the measurement): `agg_all`; only the metrics this page reads")
