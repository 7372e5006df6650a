"""The measured limiter (analysis.model.limiter) and the hierarchical roofline (analysis.report.roofline) on real
launches and runs of the committed H200 reference captures: one test per classification rule."""
from __future__ import annotations

import copy
import functools
import json
import shutil

import pytest

from analysis.model import floors, limiter

from analysis.report import markdown, page_text, roofline
from analysis.model.limiter import Kind, Unit, advice
from analysis.readers.ncu import read_launches, read_raw_csv

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


# --- one launch: the speed-of-light rule -------------------------------------------------------

def _lim(workload: str, variant: str, size: int, kernel_prefix: str) -> limiter.LaunchLimiter:
    return limiter.classify_launch(_launch(workload, variant, size, kernel_prefix)["metrics"])


def test_the_issue_slots_are_a_unit_numba_fp64_ufunc():
    """SM 83.6% is the issue-active share (FP64 pipe 55%): compute-bound on the issue slots, 1.2× its floor."""
    m = _launch("numba_ufunc", "baseline", 268435456, "__vectorized_mycalculation")["metrics"]
    lim = limiter.classify_launch(m)
    assert (lim.kind, lim.unit) == (Kind.COMPUTE, Unit.ISSUE)
    assert lim.pct_of_peak == pytest.approx(m["sm__issue_active.avg.pct_of_peak_sustained_elapsed"])
    assert m["sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active"] < lim.pct_of_peak
    assert lim.floor_ratio == pytest.approx(1.2, abs=0.02)


@pytest.mark.parametrize("workload, variant, size, prefix, floor_ratio", [
    ("numba_ufunc", "float32", 268435456, "mycalculation_f32", 1.49),  # XU 37%, issue 67%
    ("cupy_sqdiff", "fused_pow", 16384, "cookbook_squared_diff_pow", 1.20),  # FP64 62%, issue 83%
    ("jax_matmul", "float32", 8192, "sm80_xmma_gemm_f32", 1.15),  # FMA 79%, issue 87%
])
def test_issue_bound_launches(workload, variant, size, prefix, floor_ratio):
    lim = _lim(workload, variant, size, prefix)
    assert (lim.kind, lim.unit) == (Kind.COMPUTE, Unit.ISSUE)
    assert lim.floor_ratio == pytest.approx(floor_ratio, abs=0.02)


def test_compute_rule_names_the_tensor_pipe_and_its_precision_for_the_jax_bf16_gemm():
    lim = _lim("jax_matmul", "bf16", 8192, "nvjet_sm90_tss_256x128")
    assert (lim.kind, lim.unit) == (Kind.COMPUTE, Unit.TENSOR_BF16)
    assert lim.pct_of_peak > 90 and lim.floor_ratio < 1.1


def test_memory_rule_names_dram_for_the_fused_cupy_kernel_not_the_busier_l2():
    m = _launch("cupy_sqdiff", "fused", 16384, "cookbook_squared_diff")["metrics"]
    # L2 is busier than DRAM (the same bytes pass through it): the deepest level at its peak is named
    assert m["lts__throughput.avg.pct_of_peak_sustained_elapsed"] > m["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"]
    lim = limiter.classify_launch(m)
    assert (lim.kind, lim.unit) == (Kind.MEMORY, Unit.DRAM)
    assert lim.pct_of_peak == pytest.approx(91.5, abs=0.5)
    assert lim.floor_ratio == pytest.approx(100 / lim.pct_of_peak)


def test_memory_rule_names_l2_for_the_cudf_hash_aggregation_kernel():
    """The hash kernel's atomics keep L2 at 68% while DRAM sits at 6.4%."""
    lim = _lim("cudf_groupby", "agg_all", 50000000, "static_kernel")
    assert (lim.kind, lim.unit) == (Kind.MEMORY, Unit.L2)


def test_a_latency_bound_launch_names_occupancy_waves_and_stalls_and_has_no_floor():
    """Numba fastmath: SM 39%, memory 53%: latency-bound; 993 waves, 69% of a possible 100%
    occupancy, warps stalled on long scoreboard (the full set's warp-state section)."""
    lim = _lim("numba_ufunc", "fastmath", 268435456, "mycalculation_f32_fastmath")
    assert lim.kind is Kind.LATENCY and lim.unit is None
    assert lim.floor_ratio is None and lim.pct_of_peak is None
    assert lim.occupancy_achieved_pct == pytest.approx(69.3, abs=0.5) and lim.occupancy_theoretical_pct == 100.0
    assert lim.occupancy_limiter is None
    assert lim.waves_per_sm == pytest.approx(992.97, abs=0.01) and lim.last_wave_fill == pytest.approx(0.97, abs=0.01)
    assert lim.stall_reasons[0][0] == "long_scoreboard"
    assert not any("imbalance" in r or "tail" in r for r in lim.reasons)


def test_latency_rule_names_grid_under_one_wave_and_registers_for_warp_get_acceleration():
    path = REFERENCE / "kernels" / "warp_sph_baseline_get_acceleration" / "kernel.ncu-rep.gz"
    (launch,) = read_launches(path)
    lim = limiter.classify_launch(launch.metrics)
    assert lim.kind is Kind.LATENCY
    assert lim.reasons[0].startswith("grid under one wave (245 blocks on 132 SMs")
    assert lim.reasons[1] == "registers (62 registers per thread: theoretical occupancy 50%)"
    assert lim.occupancy_limiter == "registers"


def test_warp_plane_threads_names_its_partial_last_wave():
    """733 blocks on 660 slots: 1.11 waves, the second 11% full."""
    lim = next(x for launch in _run("warp_sph", "plane_threads", 62500)["ncu"]
               if (x := limiter.classify_launch(launch["metrics"])).waves_per_sm and 1 < x.waves_per_sm < 1.2)
    assert lim.kind is Kind.LATENCY and lim.last_wave_fill == pytest.approx(0.11, abs=0.01)
    assert any("the last one 11% full" in r for r in lim.reasons)
    assert advice.latency_key(lim) in ("registers", "waves")


def test_the_launch_classifier_takes_a_metrics_dict_with_nothing_else():
    """No speed-of-light metrics: no limiter; the enums compare by value with their page names."""
    assert limiter.classify_launch({}) is None
    assert Kind.MEMORY == "memory" and Unit.ISSUE == "issue slots"


# --- one step ----------------------------------------------------------------------------------

def _ceilings() -> dict:
    return json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"]


def _step_c(workload: str, variant: str, size: int) -> limiter.StepLimiter:
    return limiter.step_limiter(_run(workload, variant, size), limiter.pool_of(_runs(workload, size)), _ceilings())


def test_step_host_link_rule_on_pycuda_pinned_async():
    step = _step("pycuda_kernel", "pinned_async", 268435456)
    assert step.kind is Kind.HOST_LINK and step.share > 0.9
    assert "keep the data resident" in advice.next_move(step)


def test_numba_device_resident_is_issue_bound_at_about_1_2_times_its_floor():
    step = _step_c("numba_ufunc", "device_resident", 268435456)
    assert (step.kind, step.unit) == (Kind.COMPUTE, Unit.ISSUE)
    assert step.ncu_variants == ("baseline",)  # Numba's abi:v5 kernel is baseline's abi:v3 one
    median_ms = _run("numba_ufunc", "device_resident", 268435456)["timing"]["median_ms"]
    assert median_ms / step.floor_ms == pytest.approx(1.2, abs=0.03)


def test_numba_fastmath_step_is_latency_bound_with_no_floor():
    step = _step_c("numba_ufunc", "fastmath", 268435456)
    assert step.kind is Kind.LATENCY and step.floor_ns is None and "latency-bound" in step.floor_what
    assert step.kernel.occupancy_achieved_pct is not None and step.kernel.waves_per_sm is not None


def test_pycuda_baseline_floor_is_at_least_its_host_link_floor():
    """The single-block kernel's counters give a floor of 0.54 ms; the 199 ms of copies cannot go
    faster than the declared bytes at the measured pinned rate (19.4 ms)."""
    run = _run("pycuda_kernel", "baseline", 268435456)
    fl = floors.floor(run["work"], _ceilings())
    link_ms = max(t.ms for t in fl.terms if t.resource.endswith("link"))
    step = _step_c("pycuda_kernel", "baseline", 268435456)
    assert step.floor_ms >= link_ms == pytest.approx(19.4, abs=0.3)


def test_pycuda_streams_is_not_charged_with_the_full_size_profile():
    """streams' eight chunks per call share device_resident's launch shape at 1/8 the time: other work."""
    run, pool = _run("pycuda_kernel", "streams", 268435456), limiter.pool_of(_runs("pycuda_kernel", 268435456))
    rows = limiter.step_kernels(run, limiter.launches_by_kernel(pool))
    assert rows and not any(r["launches"] for r in rows)
    assert limiter.work_check(run, pool) is None
    # the full-size step matches its own profile
    dr = _run("pycuda_kernel", "device_resident", 268435456)
    check = limiter.work_check(dr, pool)
    assert check.bytes_ratio() == pytest.approx(1.0, abs=0.05)


def test_cudf_steps_are_decided_on_the_timed_clock_and_twins_agree():
    """On the CUDA-event medians the GPU idles under half of each pool step's call: no step is
    'synchronization' and split_agg and split_agg_pool, whose decision sits within the noise, get
    the same kind from the same kernels. agg_all's 2.3 ms of cudaMalloc per call (62% idle on the
    timed clock, beyond the noise) is what the pool removes."""
    steps = {v: _step_c("cudf_groupby", v, 50000000) for v in ("split_agg", "split_agg_pool", "agg_all", "agg_all_pool")}
    assert all(s.kind != "synchronization" for s in steps.values())
    assert (steps["split_agg"].kind, steps["split_agg"].unit) == (steps["split_agg_pool"].kind,
                                                                  steps["split_agg_pool"].unit) == (Kind.MEMORY, Unit.L2)
    assert steps["split_agg"].borderline and steps["split_agg_pool"].borderline
    assert steps["agg_all_pool"].host.idle_share == pytest.approx(0.43, abs=0.02)
    assert (steps["agg_all_pool"].kind, steps["agg_all_pool"].unit) == (Kind.MEMORY, Unit.L2)
    assert steps["agg_all"].kind is Kind.LAUNCH_HOST and steps["agg_all"].floor_ns is None


def test_warp_plane_threads_has_no_idle_time_on_the_timed_clock():
    """Its event median (2.095 ms) is below nsys' busy time (2.111 ms): no GPU idle time per call."""
    step = _step_c("warp_sph", "plane_threads", 62500)
    assert step.host.timed_median_ms < step.host.gpu_busy_ms and step.host.idle_ms == 0.0


@pytest.mark.parametrize("workload, variant, size, kind", [
    ("jax_matmul", "jit", 512, Kind.LAUNCH_HOST),
    ("cupy_sqdiff", "fused", 4096, Kind.NOT_PROFILED),
    # ncu leaves tf32 out (rules/config.yaml) and no profiled step runs its cuBLAS TF32 kernels
    ("jax_matmul", "tf32", 8192, Kind.NOT_PROFILED),
])
def test_step_rule_names_the_kind(workload, variant, size, kind):
    assert _step(workload, variant, size).kind is kind


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


def test_step_kernel_rule_on_cupy_fused_and_warp():
    assert _step("cupy_sqdiff", "fused", 16384).label() == "memory: DRAM (91% of peak)"
    warp = _step("warp_sph", "baseline", 62500)
    assert warp.kind is Kind.LATENCY and warp.share > 0.7
    # the quoted kernel is the one that holds the time, not the first one listed
    assert limiter.kernel_key(warp.kernel_name).startswith("get_acceleration")


@pytest.mark.parametrize("pool_step, twin", [("split_agg_pool", "split_agg"), ("agg_all_pool", "agg_all")])
def test_a_pool_step_borrows_its_twin(pool_step, twin):
    run, pool = _run("cudf_groupby", pool_step, 50000000), limiter.pool_of(_runs("cudf_groupby", 50000000))
    rows = [r for r in limiter.step_kernels(run, limiter.launches_by_kernel(pool)) if r["launches"]]
    assert rows and {v for r in rows for v, _ in r["launches"]} == {twin}
    assert limiter.step_limiter(run, pool).ncu_variants == (twin,)


def test_step_class_gives_kind_and_unit_for_comparisons():
    run = _run("cupy_sqdiff", "fused", 16384)
    assert limiter.step_class(run) == (Kind.MEMORY, Unit.DRAM)


def test_one_disturbed_nsys_call_does_not_decide_host_or_device_the_timed_median_does():
    """The reference's CuPy ``fused`` step at 16384 (DRAM-bound) with a steady nsys call replaced by a
    disturbed one (7.94 ms of wall, 6.45 ms idle): still DRAM-bound, since the timed median decides.
    A timed median five times the GPU busy time makes it host-bound."""
    run = copy.deepcopy(_run("cupy_sqdiff", "fused", 16384))
    pool = limiter.pool_of(_runs("cupy_sqdiff", 16384))
    run["nsys"]["calls"][1].update(wall_ns=7_937_565, gpu_idle_ns=6_446_731)
    assert (limiter.step_limiter(run, pool).kind, limiter.step_limiter(run, pool).unit) == (Kind.MEMORY, Unit.DRAM)
    busy_ms = limiter.host_time(run).gpu_busy_ms
    run["timing"] = dict(run["timing"], median_ms=5 * busy_ms)
    step = limiter.step_limiter(run, pool)
    assert step.kind is Kind.LAUNCH_HOST and "timed median" in step.detail


# --- advice ------------------------------------------------------------------------------------

def _framework_advice(name: str) -> dict:
    from workloads import frameworks
    return dict(frameworks.framework(name).advice)


def test_advice_is_in_the_frameworks_terms():
    assert "fastmath=True" in advice.next_move(_step_c("numba_ufunc", "device_resident", 268435456),
                                               _framework_advice("numba"))
    assert "@cuda.jit" in advice.next_move(_step_c("numba_ufunc", "fastmath", 268435456), _framework_advice("numba"))
    warp = advice.next_move(_step_c("warp_sph", "plane_threads", 62500), _framework_advice("warp"))
    assert "maxrregcount" not in warp and ("block_dim" in warp)
    cudf = advice.next_move(_step_c("cudf_groupby", "agg_all", 50000000), _framework_advice("cudf"))
    assert "agg" in cudf and "synchronize once" not in cudf


def test_jax_bf16_is_told_about_its_host_wait_before_lower_precision():
    step = _step_c("jax_matmul", "bf16", 8192)
    assert step.unit is Unit.TENSOR_BF16 and step.host.idle_share > 0.2
    text = advice.next_move(step, _framework_advice("jax"))
    assert text.startswith("The GPU idles") and text.index("host wait") < text.index("tensor")


def test_library_kernels_get_no_launch_configuration_advice():
    assert limiter.is_library_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1")
    assert limiter.is_library_kernel("void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)")
    assert not limiter.is_library_kernel("get_acceleration_5a783dae_cuda_kernel_forward")
    lim = _lim("jax_matmul", "bf16", 8192, "nvjet_sm90_tss_64x8")  # one block: a grid under one wave
    assert lim.kind is Kind.LATENCY and advice.latency_key(lim) == "grid"
    assert not limiter.rule_consistent("LaunchConfiguration", lim, "nvjet_sm90_tss_64x8_64x16_1x1_h_bz_NNT")


def test_ncu_rules_are_quoted_only_where_they_fit_the_limiter():
    memory = _lim("cupy_sqdiff", "fused", 16384, "cookbook_squared_diff")
    compute = _lim("numba_ufunc", "baseline", 268435456, "__vectorized")
    assert not limiter.rule_consistent("HighPipeUtilization", memory)
    assert limiter.rule_consistent("HighPipeUtilization", compute)
    assert not limiter.rule_consistent("MemoryL2Compression", compute)
    # L2 compression's knob (compressible allocations) is no Python framework's: never quoted
    l2 = _lim("cudf_groupby", "agg_all", 50000000, "static_kernel")
    assert not limiter.rule_consistent("MemoryL2Compression", l2)
    assert not limiter.rule_consistent("MemoryL2Compression", memory)


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
    assert 4000 < check.dram_gb_per_s() < 4800


# --- readers, floors ----------------------------------------------------------------------------

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
        assert limiter.classify_launch(a.metrics).label() == limiter.classify_launch(b.metrics).label()


def test_a_step_at_the_copy_rate_runs_at_it():
    r = _run("cupy_sqdiff", "fused", 16384)
    fl = floors.floor(r["work"], _ceilings())
    assert abs(r["timing"]["median_ms"] / fl.ms - 1) < floors.AT_RATE_FACTOR - 1
    assert floors.time_vs_floor(r["timing"]["median_ms"], fl) == \
        f"{r['timing']['median_ms'] / fl.ms:.2f}× (runs at the measured device-to-device copy rate)"


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
    from analysis.model import report_model
    from analysis.model.run_summary import summarize_run
    from workloads.registry import BY_NAME

    by_size = _by_size("cudf_groupby")
    ceilings = reference_ceilings("cudf_groupby")
    m = report_model.build(BY_NAME["cudf_groupby"], by_size, ceilings, ncu_metric_keys=markdown.NCU_METRIC_KEYS)
    rows = m.ncu[50000000]
    assert any(row.variant == "agg_all" and "static_kernel<policy_selector" in row.kernel for row in rows)
    pool_step = next(s for s in m.ladder[50000000] if s.variant == "split_agg_pool")
    assert (pool_step.limiter.kind, pool_step.limiter.unit) == (Kind.MEMORY, Unit.L2)
    assert "profile of `split_agg`" in pool_step.limiter.source
    assert "(raw page only)" not in page_text.coverage_text(m)
    raw_only = tmp_path / "agg_all"
    shutil.copytree(REFERENCE / "cudf_groupby" / "agg_all" / "n50000000", raw_only,
                    ignore=shutil.ignore_patterns("ncu.ncu-rep*"))
    runs = [summarize_run(str(raw_only)) if r["variant"] == "agg_all" else r for r in by_size[50000000]]
    assert "`agg_all` (raw page only)" in page_text.ncu_coverage_text(report_model.ncu_coverage({50000000: runs}))


def test_coverage_line_names_the_profiled_variants_and_the_twins():
    from analysis.model import report_model

    line = page_text.ncu_coverage_text(report_model.ncu_coverage(_by_size("numba_ufunc")))
    assert "profiled at size 268435456: `baseline`, `streams`" in line
    assert "`device_resident` (runs the kernels of `baseline`)" in line


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


def test_host_and_unprofiled_steps_have_no_kernel_floor():
    assert _step("jax_matmul", "jit", 512).floor_ns is None  # launch/host
    assert _step("jax_matmul", "tf32", 8192).floor_ns is None  # its kernels not profiled


def test_the_report_names_each_floor_for_what_it_is():
    """numba device_resident stands on its issue-slot floor; the minimum-work floor (declared bytes at
    the measured copy rate) stays beside it; a host-link step's floor is its copies at the pinned rate."""
    from analysis.model import report_model
    from workloads.registry import BY_NAME

    runs = _runs("numba_ufunc", 268435456)
    steps = {s.variant: s for s in report_model.build_steps(BY_NAME["numba_ufunc"], runs, _ceilings())}
    dr = steps["device_resident"]
    assert (dr.limiter.kind, dr.limiter.unit) == (Kind.COMPUTE, Unit.ISSUE)
    assert dr.time_over_limiter_floor == pytest.approx(1.2, abs=0.03)
    assert dr.floor_resource == "device memory" and dr.time_over_floor > dr.time_over_limiter_floor
    streams = steps["streams"]
    assert streams.limiter.kind is Kind.HOST_LINK
    assert streams.limiter.floor_ms == pytest.approx(streams.floor_ms)
    assert "pinned" in streams.limiter.floor_what


def test_cupy_fused_under_its_minimum_work_floor_is_explained_as_a_copy_rate():
    from analysis.model import report_model
    from workloads.registry import BY_NAME

    m = report_model.build(BY_NAME["cupy_sqdiff"], _by_size("cupy_sqdiff"),
                           json.loads((REFERENCE / "ceilings.json").read_text()), verdicts_wanted="result")
    text = page_text.takeaway(m.result)
    assert "served from L2" not in text
    fused = next(s for s in m.ladder[16384] if s.variant == "fused")
    if fused.time_over_floor < 1.0:
        assert "measured copy rate" in page_text.floors_text(fused)


def test_warp_minimum_work_floor_rests_on_the_bytes_ncu_measured():
    from analysis.model import report_model

    runs = _runs("warp_sph", 62500)
    pool = limiter.pool_of(runs)
    run = next(r for r in runs if r["variant"] == "plane_threads")
    check = limiter.work_check(run, pool)
    fl = report_model.minimum_work_floor(run, _ceilings(), pool)
    if check is not None and check.measured_bytes_below_declared():
        assert "ncu measured" in next(t.resource for t in fl.terms if t.resource.startswith("device memory"))
        assert fl.ms < floors.floor(run["work"], _ceilings()).ms
    else:
        assert fl == floors.floor(run["work"], _ceilings())
    # 414 MB of DRAM traffic against 983 MB declared (an L2-resident working set)
    assert check.bytes_ratio() == pytest.approx(0.42, abs=0.02) and check.measured_bytes_below_declared()


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


@pytest.mark.parametrize("workload", ["cupy_sqdiff", "numba_ufunc", "pycuda_kernel", "cudf_groupby", "warp_sph",
                                      "jax_matmul"])
def test_no_ncu_rule_the_pages_carry_contradicts_the_limiter(workload):
    """Every rule a page's ncu table carries is consistent with the measured limiter of the launch it
    comes from: each step's own launch of the kernel that holds its time."""
    from analysis.model import report_model

    for size, runs in _by_size(workload).items():
        rows = report_model.ncu_rule_rows(runs)
        by_variant = {r["variant"]: r for r in runs}
        for rule, cells, _worst, _msg in rows:
            for variant, value in cells.items():
                if value is None:
                    continue
                launch = report_model.hot_launch(by_variant[variant])
                assert limiter.rule_consistent(rule, limiter.classify_launch(launch["metrics"]),
                                               launch["kernel_name"]), (size, variant, rule)


def test_a_dram_bound_kernel_does_not_quote_the_under_utilized_pipes_rule():
    """ncu flags HighPipeUtilization ('all compute pipelines are under-utilized') on CuPy's DRAM-bound
    raw kernel; the page leaves it out."""
    from analysis.model import report_model

    run = _run("cupy_sqdiff", "raw_kernel", 16384)
    launch = report_model.hot_launch(run)
    flagged = {f["rule"] for f in launch["findings"]}
    rows = {rule: cells for rule, cells, _, _ in report_model.ncu_rule_rows(_runs("cupy_sqdiff", 16384))}
    dropped = {r for r in flagged if not limiter.rule_consistent(r, limiter.classify_launch(launch["metrics"]))}
    assert "HighPipeUtilization" in dropped, flagged
    assert all(rows.get(r, {}).get("raw_kernel") is None for r in dropped)


def test_warp_quotes_rules_of_its_hot_kernel_not_the_first_profiled_one():
    """Warp's first profiled launch is `count_cells` (4 µs); the time is in the neighbour kernels."""
    from analysis.model import report_model

    run = _run("warp_sph", "cell_list", 62500)
    assert not limiter.kernel_key(run["ncu"][0]["kernel_name"]).startswith(
        limiter.kernel_key(report_model.hot_launch(run)["kernel_name"]))


def _all_launch_metrics() -> list[dict]:
    """Every profiled launch of the H200 reference, and the PyTorch program's (cuDNN convolution, ATen
    elementwise kernels: tests/data/thirdparty_h100)."""
    from conftest import REPO

    out = [launch["metrics"] for p in sorted(REFERENCE.glob("*/*/n*")) if has_timing_record(p)
           for launch in _run(p.parts[-3], p.parts[-2], int(p.name[1:]))["ncu"] or []]
    out += [launch.metrics for launch in read_launches(REPO / "tests" / "data" / "thirdparty_h100" /
                                                        "torch_kernels.ncu-rep.gz")]
    return out


def test_every_launch_follows_the_speed_of_light_rule():
    """Kind from max(SM, memory) against 60%; a compute unit is the top SM entry (issue slots or a
    pipe) and its floor ratio 100 / its share; a latency-bound launch has neither unit nor floor."""
    from analysis.readers import ncu_metrics as M

    launches = _all_launch_metrics()
    assert len(launches) > 40
    kinds = set()
    for m in launches:
        lim = limiter.classify_launch(m)
        sm, mem = m[M.SOL["sm"]], m[M.SOL["memory"]]
        kinds.add(lim.kind)
        if max(sm, mem) < limiter.BOUND_PCT:
            assert lim.kind is Kind.LATENCY and lim.unit is None and lim.floor_ratio is None
            continue
        assert lim.kind is (Kind.MEMORY if mem >= sm else Kind.COMPUTE)
        assert lim.floor_ratio == pytest.approx(100 / lim.pct_of_peak)
        if lim.kind is Kind.COMPUTE and lim.unit is not Unit.SM_OTHER:
            entries = [m[M.ISSUE]] + [m[key] for _, key in M.PIPES if m.get(key) is not None]
            assert lim.pct_of_peak == pytest.approx(max(entries))
    assert kinds == {Kind.COMPUTE, Kind.MEMORY, Kind.LATENCY}


def test_launch_advice_for_any_programs_capture():
    """One launch's advice with no recipe around it: the cuDNN convolution of a PyTorch program gets
    no launch-configuration advice; Warp's partial last wave gets its framework's knob."""
    from conftest import REPO

    (conv,) = [x for x in read_launches(REPO / "tests" / "data" / "thirdparty_h100" / "torch_kernels.ncu-rep.gz")
               if "implicit_convolve_sgemm" in x.kernel_name]
    lim = limiter.classify_launch(conv.metrics)
    text = limiter.launch_advice(lim, conv.kernel_name)
    assert advice.launch_advice_key(lim, conv.kernel_name) == "library"
    assert "library" in text and "grid" not in text
    plane = _step_c("warp_sph", "plane_threads", 62500)
    assert "block_dim" in limiter.launch_advice(plane.kernel, plane.kernel_name, _framework_advice("warp"))


def test_a_report_with_only_the_breakdowns_elapsed_names_gets_the_same_unit():
    """A ``--set basic`` report holds each pipe's share over elapsed cycles and L1 over active cycles
    only: the JAX bf16 GEMM's launches, with just those names kept, still read as tensor-bound (and
    every launch keeps its kind)."""
    from analysis.readers import ncu_metrics as M

    run = REFERENCE / "jax_matmul" / "bf16" / "n8192"
    launches = read_launches(run / "ncu.ncu-rep.gz")
    catalog_only = {key for _, key in M.PIPES} | {M.MEMORY_LEVELS[2][1]}
    checked = 0
    for launch in launches:
        full = limiter.classify_launch(launch.metrics)
        if any(launch.metrics.get(key) is None for _, key in M.PIPE_FALLBACKS):
            continue
        basic = {k: v for k, v in launch.metrics.items() if k not in catalog_only}
        lim = limiter.classify_launch(basic)
        assert lim.kind is full.kind
        if full.unit in (Unit.TENSOR_BF16, Unit.TENSOR):
            assert lim.unit is full.unit
            checked += 1
    assert checked >= 1


def test_a_kernel_at_drams_peak_is_not_told_to_do_what_it_already_does():
    """PyCUDA's float4 step and CuPy's fused step stream DRAM at over 80% of its peak: the advice is
    fewer bytes, not the vector loads or the fusion they already have."""
    vec = _step_c("pycuda_kernel", "vectorized", 268435456)
    fused = _step_c("cupy_sqdiff", "fused", 16384)
    assert vec.unit is Unit.DRAM and vec.pct_of_peak >= advice.DRAM_AT_PEAK_PCT
    text = advice.next_move(vec, _framework_advice("pycuda"))
    assert "practical peak" in text and "vector loads (" not in text
    text = advice.next_move(fused, _framework_advice("cupy"))
    assert "practical peak" in text and "instead of chained" not in text
    # below the peak the access pattern is still the move
    assert advice._dram_key(advice.DRAM_AT_PEAK_PCT - 20) == "DRAM"
