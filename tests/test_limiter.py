"""The measured limiter (analysis.limiter) and the hierarchical roofline (analysis.roofline) on real
launches and runs of the committed H200 reference captures: one test per classification rule."""
from __future__ import annotations

import copy
import functools
import json
import shutil

import pytest

from analysis import floors, limiter, markdown, roofline
from analysis.ncu import read_launches, read_raw_csv

from conftest import REFERENCE, has_timing_record, reference_ceilings, summary_of


@functools.lru_cache(maxsize=None)
def _run(workload: str, variant: str, size: int) -> dict:
    # the session's summary (conftest), this module's own copy
    return copy.deepcopy(summary_of(REFERENCE / workload / variant / f"n{size}"))


def _runs(workload: str, size: int) -> list[dict]:
    from workloads.registry import BY_NAME

    return [_run(workload, v, size) for v in BY_NAME[workload].variants
            if has_timing_record(REFERENCE / workload / v / f"n{size}")]


def _by_size(workload: str) -> dict[int, list[dict]]:
    sizes = sorted({int(p.name[1:]) for p in (REFERENCE / workload).glob("*/n*") if has_timing_record(p)})
    return {s: _runs(workload, s) for s in sizes}


def _step(workload: str, variant: str, size: int) -> limiter.StepLimiter:
    return limiter.step_limiter(_run(workload, variant, size), limiter.pool_of(_runs(workload, size)))


def _launch(workload: str, variant: str, size: int, kernel_prefix: str) -> dict:
    launches = _run(workload, variant, size)["ncu"]
    return next(launch for launch in launches if limiter.kernel_key(launch["kernel_name"]).startswith(kernel_prefix))


# --- one launch: one test per rule -------------------------------------------------------------

def test_compute_rule_names_the_fp64_pipe_of_the_numba_ufunc():
    """SM 83%, DRAM 33%: compute-bound; its busiest pipe is FP64 (declared 10 FLOPs, executes 128)."""
    lim = limiter.classify(_launch("numba_ufunc", "baseline", 268435456, "__vectorized_mycalculation")["metrics"])
    assert (lim.kind, lim.unit) == ("compute", "FP64 pipe")
    assert 50 < lim.pct_of_peak < 60


def test_compute_rule_names_the_tensor_pipe_and_its_precision_for_the_jax_bf16_gemm():
    lim = limiter.classify(_launch("jax_matmul", "bf16", 8192, "nvjet_sm90_tss_256x128")["metrics"])
    assert (lim.kind, lim.unit) == ("compute", "tensor pipe (BF16)")
    assert lim.pct_of_peak > 90


def test_compute_rule_names_the_fma_pipe_for_the_fp32_gemm_read_from_the_raw_page():
    lim = limiter.classify(_launch("jax_matmul", "float32", 8192, "sm80_xmma_gemm_f32")["metrics"])
    assert (lim.kind, lim.unit) == ("compute", "FMA (FP32) pipe")


def test_memory_rule_names_dram_for_the_fused_cupy_kernel_not_the_busier_l2():
    m = _launch("cupy_sqdiff", "fused", 16384, "cookbook_squared_diff")["metrics"]
    # L2 is busier than DRAM (the same bytes pass through it): the deepest level at its peak is named
    assert m["lts__throughput.avg.pct_of_peak_sustained_elapsed"] > m["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    lim = limiter.classify(m)
    assert (lim.kind, lim.unit) == ("memory", "DRAM")
    assert lim.pct_of_peak == pytest.approx(91.1, abs=0.5)


def test_memory_rule_names_l2_for_the_cudf_hash_aggregation_kernel():
    """The hash kernel's atomics keep L2 at 67% while DRAM sits at 6.4%."""
    lim = limiter.classify(_launch("cudf_groupby", "agg_all", 50000000, "static_kernel")["metrics"])
    assert (lim.kind, lim.unit) == ("memory", "L2")


def test_latency_rule_names_grid_under_one_wave_and_registers_for_warp_get_acceleration():
    path = REFERENCE / "kernels" / "warp_sph_baseline_get_acceleration" / "kernel.ncu-rep.gz"
    (launch,) = read_launches(path)
    lim = limiter.classify(launch.metrics)
    assert lim.kind == "latency"
    assert lim.reasons[0].startswith("grid under one wave (245 blocks on 132 SMs")
    assert lim.reasons[1] == "registers (62 registers per thread: theoretical occupancy 50%)"


def test_latency_rule_names_registers_when_the_grid_fills_the_gpu():
    """The cuDF hash kernel's third split_agg pass: 370 waves, 128 registers, 25% occupancy, L2 under 60%."""
    launches = [launch for launch in _run("cudf_groupby", "split_agg", 50000000)["ncu"]]
    lim = limiter.classify(launches[2]["metrics"])
    assert lim.kind == "latency"
    assert lim.reasons == ("registers (128 registers per thread: theoretical occupancy 25%)",)


# --- one step: one test per rule ---------------------------------------------------------------

def test_step_host_link_rule_on_pycuda_pinned_async():
    step = _step("pycuda_kernel", "pinned_async", 268435456)
    assert step.kind == "host link" and step.share > 0.9
    assert "keep the data resident" in step.next_move()


@pytest.mark.parametrize("workload, variant, size, kind", [
    # small calls: the GPU idles for 65% of jit's fastest steady call at 512. (CuPy's fused step at
    # 4096 idles 43% of its fastest one: one disturbed call of three no longer makes it host-bound)
    ("jax_matmul", "jit", 512, "launch/host"),
    ("cupy_sqdiff", "fused", 4096, "not profiled"),
    ("cudf_groupby", "split_agg", 50000000, "synchronization"),
    # ncu leaves tf32 out (rules/config.yaml) and no profiled step runs its cuBLAS TF32 kernels
    ("jax_matmul", "tf32", 8192, "not profiled"),
])
def test_step_rule_names_the_kind(workload, variant, size, kind):
    assert _step(workload, variant, size).kind == kind


def test_a_kernel_name_reused_at_another_launch_shape_is_not_profiled():
    """XLA names its own dot kernels `wrapped_dot` (`wrapped_dot_1`, ...) whatever they compute. float32's
    profile at 8192 holds the `wrapped_dot` launches of its loop's small sides, which float32's loop at
    512 runs at the same launch shapes: profiled. The int32 loop at 512 (baseline) runs a `wrapped_dot`
    too, at another shape: other work, so the name alone does not make it profiled."""
    by_kernel = limiter.launches_by_kernel(limiter.pool_of([_run("jax_matmul", "float32", 8192)]))
    assert "wrapped_dot" in by_kernel

    def wrapped(variant: str) -> dict[str, bool]:
        rows = limiter.step_kernels(_run("jax_matmul", variant, 512), by_kernel)
        return {limiter.kernel_key(r["name"]): bool(r["launches"]) for r in rows
                if limiter.kernel_key(r["name"]).startswith("wrapped_dot")}

    assert wrapped("float32") == {"wrapped_dot": True, "wrapped_dot_1": True}
    assert wrapped("baseline") == {"wrapped_dot": False}
    profiled = {(int(launch["metrics"]["launch__grid_size"]), int(launch["metrics"]["launch__block_size"]))
                for _, launch in by_kernel["wrapped_dot"]}
    ran = {(s["grid_blocks"], s["block_threads"])
           for s in _run("jax_matmul", "baseline", 512)["nsys"]["compute_launch_shapes"]
           if limiter.kernel_key(s["name"]) == "wrapped_dot"}
    assert ran and not ran <= profiled


def test_step_kernel_rule_borrows_the_profile_of_the_variant_running_the_same_kernel():
    """device_resident was not profiled: Numba's abi:v5 kernel is baseline's abi:v3 one."""
    step = _step("numba_ufunc", "device_resident", 268435456)
    assert step.label() == "compute: FP64 pipe (55% of peak)"
    assert step.ncu_variants == ("baseline",)
    assert step.next_move().startswith("Limited by the FP64 pipe") and "lower precision" in step.next_move()


def test_step_kernel_rule_on_cupy_fused_and_warp():
    assert _step("cupy_sqdiff", "fused", 16384).label() == "memory: DRAM (91% of peak)"
    warp = _step("warp_sph", "baseline", 62500)
    assert warp.kind == "latency" and warp.share > 0.7
    assert "launch more blocks" in warp.next_move()


@pytest.mark.parametrize("pool_step, twin", [("split_agg_pool", "split_agg"), ("agg_all_pool", "agg_all")])
def test_a_pool_step_borrows_its_twin(pool_step, twin):
    """The pool steps were not profiled: each kernel of theirs takes the launches of its twin, which
    runs the same kernels, and a step whose limiter stands on its kernels names the twin's profile. (One
    whose GPU idles half its fastest steady call is named by that instead, and borrows no profile.)"""
    run, pool = _run("cudf_groupby", pool_step, 50000000), limiter.pool_of(_runs("cudf_groupby", 50000000))
    rows = [r for r in limiter.step_kernels(run, limiter.launches_by_kernel(pool)) if r["launches"]]
    assert rows and {v for r in rows for v, _ in r["launches"]} == {twin}
    step = limiter.step_limiter(run, pool)
    on_kernels = step.kind not in ("host link", "launch/host", "synchronization")
    assert step.ncu_variants == ((twin,) if on_kernels else ())


# --- declared beside measured -------------------------------------------------------------------

def test_work_check_flags_the_numba_ufunc_transcendentals():
    check = limiter.work_check(_run("numba_ufunc", "device_resident", 268435456), limiter.pool_of(
        _runs("numba_ufunc", 268435456)))
    n = 268435456
    assert check.declared_flops / n == 10
    assert check.measured_flops["FP64"] / n == pytest.approx(128, rel=0.01)
    assert check.mismatches() == [f"measured FLOPs {check.flops_ratio():.2f}× declared"]


def test_work_check_agrees_with_a_fused_streaming_kernel():
    check = limiter.work_check(_run("cupy_sqdiff", "fused", 16384), limiter.pool_of(_runs("cupy_sqdiff", 16384)))
    assert check.bytes_ratio() == pytest.approx(1.0, abs=0.01)
    assert check.mismatches() == []
    # effective rate on the minimum bytes and the DRAM throughput ncu measured are two numbers
    assert 4000 < check.dram_gb_per_s() < 4800


# --- readers, floors, rules ---------------------------------------------------------------------

def test_raw_page_reader_gives_the_report_modules_numbers():
    run = REFERENCE / "cupy_sqdiff" / "fused" / "n16384"
    rep, raw = read_launches(run / "ncu.ncu-rep.gz"), read_raw_csv(run / "ncu-raw.csv")
    assert len(rep) == len(raw)
    for a, b in zip(rep, raw):
        assert a.kernel_name == b.kernel_name
        for name in limiter.METRICS:
            x, y = a.metrics.get(name), b.metrics.get(name)
            assert (x is None) == (y is None), name
            if isinstance(x, (int, float)):
                assert y == pytest.approx(x, rel=1e-4, abs=1e-6), name  # the raw page prints 6 digits
        assert limiter.classify(a.metrics).label() == limiter.classify(b.metrics).label()


def test_a_step_at_the_copy_rate_runs_at_it():
    r = _run("cupy_sqdiff", "fused", 16384)
    ceilings = json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"]
    fl = floors.floor(r["work"], ceilings)
    # within the measurement's reach of the floor, on either side: the rate is a measurement too
    assert abs(r["timing"]["median_ms"] / fl.ms - 1) < floors.AT_RATE_FACTOR - 1
    assert floors.time_vs_floor(r["timing"]["median_ms"], fl) == \
        f"{r['timing']['median_ms'] / fl.ms:.2f}× (runs at the measured device-to-device copy rate)"


def test_ncu_rules_are_quoted_only_where_they_fit_the_limiter():
    memory = limiter.classify(_launch("cupy_sqdiff", "fused", 16384, "cookbook_squared_diff")["metrics"])
    compute = limiter.classify(_launch("numba_ufunc", "baseline", 268435456, "__vectorized")["metrics"])
    assert not limiter.rule_consistent("HighPipeUtilization", memory)
    assert limiter.rule_consistent("HighPipeUtilization", compute)
    assert not limiter.rule_consistent("MemoryL2Compression", compute)


# --- the hierarchical roofline ------------------------------------------------------------------

def test_jax_roofline_places_the_bf16_gemm_under_the_bf16_tensor_roof():
    r = roofline.roofline(_by_size("jax_matmul"))
    gemm = next(p for p in r.points if p.kernel.startswith("nvjet_sm90_tss_256x128"))
    assert gemm.precision == "BF16 tensor"
    assert gemm.flops == pytest.approx(2 * 8192 ** 3, rel=0.01)
    assert gemm.flop_per_s / 1e12 == pytest.approx(894, rel=0.01)
    assert gemm.flop_per_s < r.peaks["BF16 tensor FLOP/s"]
    # the int32 loops (baseline, jit) run at 512 only (rules/config.yaml variant_sizes): no point here
    assert {p.variant for p in r.points} == {"float32", "bf16"}


def test_integer_only_kernels_are_listed_not_drawn():
    """Warp's counting sort scatters particle indices into cells: integer work only, no FLOPs to place."""
    r = roofline.roofline(_by_size("warp_sph"))
    assert r.integer_only and all(k.startswith("scatter_to_cells_") for _, k in r.integer_only)
    # the two steps that build the cell list with a counting sort (rules/config.yaml: both profiled)
    assert {v for v, _ in r.integer_only} == {"cell_list", "plane_threads"}
    assert not any(p.kernel.startswith("scatter_to_cells_") for p in r.points)


def test_roofline_roofs_are_the_precisions_executed_and_three_memory_levels():
    ceilings = reference_ceilings("warp_sph")["ceilings"]
    r = roofline.roofline(_by_size("warp_sph"))
    compute, memory = roofline.roofs(r, ceilings)
    assert [label for label, _, _ in compute] == ["FP32 peak", "FP32, measured (fp32_fma)"]
    assert [label for label, _, _ in memory] == ["DRAM peak", "L2 peak", "L1 peak", "device-to-device copy, measured"]
    assert all(set(p.bytes_by_level) == {"DRAM", "L2", "L1"} for p in r.points)


def test_roofline_figure_draws(tmp_path):
    ceilings = reference_ceilings("jax_matmul")["ceilings"]
    out = tmp_path / "jax_roofline.png"
    roofline.figure(_by_size("jax_matmul"), ceilings, str(out), "JAX")
    assert out.stat().st_size > 10_000


# --- the report hooks ---------------------------------------------------------------------------

def test_cudf_report_shows_its_ncu_launches_with_their_limiter(tmp_path):
    from analysis import report_model
    from analysis.run_summary import summarize_run
    from workloads.registry import BY_NAME

    by_size = _by_size("cudf_groupby")
    ceilings = reference_ceilings("cudf_groupby")
    m = report_model.build(BY_NAME["cudf_groupby"], by_size, ceilings, ncu_metric_keys=markdown.NCU_METRIC_KEYS)
    rows = m.ncu[50000000]
    assert any(row.variant == "agg_all" and "static_kernel<policy_selector" in row.kernel for row in rows)
    # the pool step, which runs split_agg's kernels and has no profile of its own, takes its device
    # limiter from its twin's profile; where the host's synchronization dominates its call (as in the
    # H200 reference of 2026-11-27, 51%), the headline is that, read from its own nsys capture
    pool_step = next(s for s in m.ladder[50000000] if s.variant == "split_agg_pool")
    assert pool_step.limiter.what == _step("cudf_groupby", "split_agg_pool", 50000000).label()
    if pool_step.limiter.source == "nsys":
        assert pool_step.limiter.what in ("synchronization", "launch/host", "host link")
    else:
        assert "profile of `split_agg`" in pool_step.limiter.source
    assert "(raw page only)" not in m.ncu_coverage
    # a folder that kept ncu's raw page but not its report (as references once did) says so
    raw_only = tmp_path / "agg_all"
    shutil.copytree(REFERENCE / "cudf_groupby" / "agg_all" / "n50000000", raw_only,
                    ignore=shutil.ignore_patterns("ncu.ncu-rep*"))
    runs = [summarize_run(str(raw_only)) if r["variant"] == "agg_all" else r for r in by_size[50000000]]
    assert "`agg_all` (raw page only)" in report_model.ncu_coverage({50000000: runs})


def test_coverage_line_names_the_profiled_variants_and_the_twins():
    from analysis import report_model

    line = report_model.ncu_coverage(_by_size("numba_ufunc"))
    assert "profiled at size 268435456: `baseline`, `streams`" in line
    assert "`device_resident` (runs the kernels of `baseline`)" in line


def test_diagnose_gives_every_step_of_a_recipe_from_its_summaries():
    from workloads.registry import BY_NAME

    steps = limiter.diagnose(_runs("pycuda_kernel", 268435456))
    assert [s.variant for s in steps] == list(BY_NAME["pycuda_kernel"].variants)
    assert {s.variant: s.limiter.kind for s in steps} == {
        "baseline": "latency", "grid_sized": "host link", "pinned_async": "host link", "streams": "host link",
        "device_resident": "memory", "vectorized": "memory"}
    assert all(s.next_move.endswith(".") for s in steps)
    assert steps[-1].work.bytes_ratio() == pytest.approx(1.0, abs=0.02)


# --- the floor of the measured limiter ----------------------------------------------------------

def _kernel_ns_per_call(run: dict) -> float:
    return sum(k["total_ns"] for k in run["nsys"]["compute_kernels"]) / len(run["nsys"]["calls"])


def test_the_floor_of_a_dram_bound_step_is_its_kernel_time_at_dram_peak():
    """cupy `fused`: one kernel at 91% of DRAM's peak needs 91% of its time with DRAM at 100%."""
    step = _step("cupy_sqdiff", "fused", 16384)
    run = _run("cupy_sqdiff", "fused", 16384)
    assert step.floor_covered_share == 1.0
    assert step.floor_ns == pytest.approx(_kernel_ns_per_call(run) * step.kernel.pct_of_peak / 100, rel=1e-9)
    assert 1.05 < run["timing"]["median_ms"] / (step.floor_ns / 1e6) < 1.2


def test_a_step_with_unprofiled_kernels_keeps_a_lower_bound_and_says_how_much_was_profiled():
    """Warp's frame: the neighbour kernels were profiled, the grid build and integration were not;
    those count as free, so the floor is lower than the profiled kernels' time alone."""
    step = _step("warp_sph", "baseline", 62500)
    run = _run("warp_sph", "baseline", 62500)
    assert 0.5 < step.floor_covered_share < limiter.COVERAGE_COMPLETE
    assert step.floor_ns < step.floor_covered_share * _kernel_ns_per_call(run)


def test_host_and_unprofiled_steps_have_no_kernel_floor():
    assert _step("cupy_sqdiff", "fused", 4096).floor_ns is None  # launch/host
    assert _step("jax_matmul", "tf32", 8192).floor_ns is None  # its kernels not profiled


def test_numba_device_resident_stands_on_its_fp64_floor_not_on_device_memory():
    """The report's ratio for the FP64-bound step comes from the FP64 pipe's measured share; the
    minimum-work floor (declared bytes at the copy rate) stays beside it, named as such."""
    from analysis import report_model

    runs = _runs("numba_ufunc", 268435456)
    ceilings = json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"]
    from workloads.registry import BY_NAME

    steps = {s.variant: s for s in report_model.build_steps(BY_NAME["numba_ufunc"], runs, ceilings)}
    dr = steps["device_resident"]
    assert dr.limiter.what.startswith("compute: FP64 pipe")
    assert dr.time_over_limiter_floor == pytest.approx(100 / 55, rel=0.05)
    assert dr.floor_resource == "device memory" and dr.time_over_floor > dr.time_over_limiter_floor
    # a host-link-bound step's floor is its declared copies at the pinned rate
    streams = steps["streams"]
    assert streams.limiter.what == "host link"
    assert streams.limiter.floor_ms == pytest.approx(streams.floor_ms)
    assert "pinned" in streams.limiter.floor_what


def test_one_disturbed_steady_call_does_not_make_a_gpu_bound_step_host_bound():
    """The reference's CuPy ``fused`` step at 16384 (DRAM-bound), with its second call replaced by
    the one a later H200 run recorded under nsys: 7.94 ms of wall, 6.45 ms of it with the GPU idle,
    for 1.49 ms of kernel. The limiter reads the fastest steady call, so one slow call leaves it
    DRAM-bound; a step whose every steady call idles the GPU is launch/host-bound."""
    run = copy.deepcopy(_run("cupy_sqdiff", "fused", 16384))
    assert len(run["nsys"]["calls"]) == 3
    assert _step("cupy_sqdiff", "fused", 16384).kind == "memory"
    run["nsys"]["calls"][1].update(wall_ns=7_937_565, gpu_idle_ns=6_446_731)
    pool = limiter.pool_of(_runs("cupy_sqdiff", 16384))
    step = limiter.step_limiter(run, pool)
    assert (step.kind, step.unit) == ("memory", "DRAM")
    run["nsys"]["calls"][2].update(wall_ns=7_937_565, gpu_idle_ns=6_446_731)
    step = limiter.step_limiter(run, pool)
    assert step.kind == "launch/host" and "the fastest steady call" in step.detail


def test_jax_ncu_filter_matches_the_kernel_that_dominates_each_profiled_step_at_8192():
    """The JAX recipe's ncu filter (workloads/jax_matmul/profile.yaml), against the H200 reference's nsys kernel tables: the
    kernel that takes most of each profiled step's time is matched in the name form ncu is told to
    match (float32's largest products run cuBLAS's `void cutlass::Kernel2<cutlass_80_simt_sgemm...>`,
    whose function name `Kernel2` the regex never matched: the step had no measured limiter), and
    the launch count reaches every product of the one profiled call (sides 2 ... 8192)."""
    import re

    from workloads.registry import recipe_facts


    ncu = recipe_facts("jax_matmul")["ncu"]
    assert ncu.get("kernel_name_base") == "demangled" and ncu.get("calls", 1) == 1
    assert ncu["launch_count"] >= 13
    for variant in ncu["variants"]:
        kernels = _run("jax_matmul", variant, 8192)["nsys"]["compute_kernels"]
        top = max(kernels, key=lambda k: k["total_ns"])
        assert re.search(ncu["kernel_regex"], top["name"]), (variant, top["name"])
    top = max(_run("jax_matmul", "float32", 8192)["nsys"]["compute_kernels"], key=lambda k: k["total_ns"])
    assert "cutlass::Kernel2<" in top["name"]
