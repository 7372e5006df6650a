"""What the run summaries keep for the new figures and report sections, and that the figures are
deterministic (the committed PNGs are rebuilt byte for byte)."""
from __future__ import annotations

import pytest

from analysis.report import figures, markdown, mdtext, plotting
from analysis.readers.ncu import read_launches

from analysis.model import run_summary
from conftest import REFERENCE, reference_runs, summary_of

RUNS = reference_runs()


_summary = summary_of


def _by_size(workload) -> dict[int, list[dict]]:
    from workloads.registry import BY_NAME

    order = BY_NAME[workload].variants
    out: dict[int, list[dict]] = {}
    for run in RUNS:
        if run.parts[-3] == workload:
            s = _summary(run)
            out.setdefault(s["size"], []).append(s)
    for runs in out.values():
        runs.sort(key=lambda r: order.index(r["variant"]))
    return out


@pytest.fixture
def run(any_run):
    return any_run


def test_timeline_is_compact_and_inside_the_run(run):
    s = _summary(run)
    t = s["nsys"]["timeline"]
    ov, zoom = t["overview"], t["zoom"]
    intervals = [iv for spans in ov["nvtx"].values() for iv in spans] + \
                [iv for spans in ov["gpu"].values() for iv in spans]
    cap = run_summary.TIMELINE_ZOOM_MAX_OPS
    assert len(ov["nvtx"]) + len(ov["gpu"]) < 200 and len(zoom["api"]) <= cap
    for a, b in intervals:
        assert 0 <= a <= b <= t["end_ns"]
    # the zoom is the last compute call, with its GPU operations up to the cap, and says what it dropped
    last = s["nsys"]["calls"][-1]
    assert zoom["call"] == last["index"]
    shown = sum(len(v) for v in zoom["gpu"].values())
    assert shown == min(last["gpu_ops"], cap) and zoom["dropped_ops"] == last["gpu_ops"] - shown
    if not zoom["dropped_ops"]:
        assert len(zoom["gpu"].get("kernels", [])) == last["kernels"]
    assert zoom["start_ns"] <= min((a for v in zoom["gpu"].values() for a, _, _ in v), default=zoom["start_ns"])
    assert "compute" in ov["nvtx"]
    # a run traced inside a capture range (JAX, as in the HPC-center guide) has no setup in the trace
    assert ("setup" in ov["nvtx"]) != s["nsys_capture_range"]


def test_counted_flops_of_the_fused_kernel_are_the_declared_work():
    """ncu counts one FP64 subtract and one multiply per element in the fused kernel: exactly the
    FLOPs the variant declares per call (one kernel per call); pow() costs far more."""
    fused = next(r for r in RUNS if r.parts[-3:] == ("cupy_sqdiff", "fused", "n16384"))
    s = _summary(fused)
    for launch in s["ncu"]:
        assert launch["flops_fp64"] == s["work"]["flops"]
        assert launch["flops_fp32"] == 0
    pow_run = next(r for r in RUNS if r.parts[-3:] == ("cupy_sqdiff", "fused_pow", "n16384"))
    assert _summary(pow_run)["ncu"][0]["flops_fp64"] > 10 * _summary(pow_run)["work"]["flops"]


def test_roofline_points_come_from_ncu():
    from analysis.report import roofline

    by_size = _by_size("pycuda_kernel")
    r = roofline.roofline(by_size)
    profiled = {(run.parts[-2], launch.kernel_name) for run in RUNS if run.parts[-3] == "pycuda_kernel"
                and (run / "ncu.ncu-rep.gz").exists() for launch in read_launches(run / "ncu.ncu-rep.gz")}
    assert {(p.variant, p.kernel) for p in r.points} == profiled
    for p in r.points:
        assert p.precision == "FP32"  # PyCUDA's kernels scale float32 arrays
        for level in roofline.LEVELS:
            assert p.intensity(level) == pytest.approx(p.flops / p.bytes_by_level[level])
        assert p.flop_per_s == pytest.approx(p.flops / p.duration_ns * 1e9)


@pytest.mark.parametrize("draw", ["timeline", "roofline"])
def test_figures_are_deterministic(tmp_path, draw):
    import json

    by_size = _by_size("cupy_sqdiff")
    with open(REFERENCE / "ceilings.json") as f:
        ceilings = json.load(f)["ceilings"]
    paths = [tmp_path / f"{draw}{i}.png" for i in range(2)]
    for p in paths:
        if draw == "timeline":
            figures.timeline_figure(by_size, str(p), "title")
        else:
            figures.roofline_figure(by_size, ceilings, str(p), "title")
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_lists_findings_and_copy_throughput():
    import json

    from analysis.model import report_model
    from workloads.registry import BY_NAME

    with open(REFERENCE / "ceilings.json") as f:
        ceilings = json.load(f)
    model = report_model.build(BY_NAME["numba_ufunc"], _by_size("numba_ufunc"), ceilings,
                               ncu_metric_keys=markdown.NCU_METRIC_KEYS)
    md = markdown.workload_report(model, [("the ladder", "numba_ufunc_ladder.png"),
                                          ("a timeline", "numba_ufunc_timeline.png")])
    assert "## Findings, by time at stake" in md
    # one fix, printed once, with the places it applies to (the ladder names the step's limiter too)
    findings = md[md.index("## Findings"):md.index("## Details")]
    assert findings.count("Copies from or to pageable host memory") == 1
    assert findings.count("*Fix:*") == len(model.findings) and md.count("*Fix:*") == len(model.findings)
    # copies by phase: the compute phase's pageable copies of the baseline, pinned ones of the next step
    compute_h2d = next(line for line in md.splitlines() if line.startswith("| compute | H→D | pageable |"))
    assert compute_h2d.split(" | ")[3] != "—"
    assert any(line.startswith("| compute | H→D | pinned |") for line in md.splitlines())
    assert "figures/numba_ufunc_ladder.png" in md and "figures/numba_ufunc_timeline.png" in md


def test_short_kernel_names():
    assert mdtext.short_kernel_name("void ns::k<int>(float)") == "k"
    assert mdtext.short_kernel_name("cupy_square__float64_float64") == "cupy_square__float64_float64"
    long = _summary(next(r for r in RUNS if r.parts[-3] == "numba_ufunc"))["nsys"]["compute_kernels"][0]["name"]
    assert mdtext.short_kernel_name(long) in long and "(" not in mdtext.short_kernel_name(long)


def test_a_caption_over_traces_of_both_kinds_says_so():
    from analysis.report.figures import trace_span

    ranged, whole = {"nsys_capture_range": True}, {"nsys_capture_range": False}
    assert trace_span([ranged, ranged]) == "capture range (the calls only)"
    assert trace_span([whole]) == "whole run"
    assert trace_span([whole, ranged]) == "whole run or capture range (the calls only), by step"


# --- the roofline and the ladder/busy layouts (issue 45, item 8) ------------------------------------

def _ceilings(workload: str) -> dict:
    from conftest import reference_ceilings

    return reference_ceilings(workload)["ceilings"]


def _drawn(monkeypatch, draw) -> list:
    """The matplotlib figures ``draw`` makes, kept open instead of saved."""
    kept = []
    monkeypatch.setattr(plotting, "save_figure", lambda fig, path: kept.append(fig))
    draw()
    for fig in kept:
        fig.canvas.draw()  # lays out the text, so that extents are final
    return kept


def test_a_roofline_with_nothing_to_draw_is_not_written(tmp_path):
    from analysis.report import roofline

    by_size = _by_size("cudf_groupby")
    r = roofline.roofline(by_size)
    # cuDF's hash aggregation: integer and atomic work only, no floating-point kernel to place
    assert r.integer_only and not r.points and not r.drawable()
    out = tmp_path / "cudf_roofline.png"
    assert figures.roofline_figure(by_size, _ceilings("cudf_groupby"), str(out), "cuDF") is False
    assert not out.exists()
    assert figures.roofline_figure(_by_size("cupy_sqdiff"), _ceilings("cupy_sqdiff"), str(out), "CuPy") is True
    assert out.exists()


def test_roofline_peaks_are_at_the_clock_each_precisions_launch_ran_at():
    from analysis.model import limiter
    from analysis.report import roofline
    from analysis.readers import ncu_metrics as metrics

    by_size = _by_size("jax_matmul")
    r = roofline.roofline(by_size)
    launches: dict[tuple[str, str], dict] = {}
    for run in by_size[r.size]:
        for launch in run.get("ncu") or []:  # a point is its kernel's first profiled launch
            launches.setdefault((run["variant"], launch["kernel_name"]), launch["metrics"])
    for precision in ("BF16 tensor", "FP32"):
        longest = max((p for p in r.points if p.precision == precision), key=lambda p: p.duration_ns)
        m = launches[(longest.variant, longest.kernel)]
        assert r.clocks_hz[precision] == m[metrics.SM_CLOCK]
        assert r.peaks[f"{precision} FLOP/s"] == pytest.approx(limiter.device_peaks(m)[f"{precision} FLOP/s"])
        # and each point keeps the peak of its own launch
        for p in r.points:
            assert p.peaks == limiter.device_peaks(launches[(p.variant, p.kernel)])
    # the bf16 GEMMs ran at a lower SM clock than the float32 ones under ncu: one clock for both would
    # put the BF16 roof where no bf16 launch could reach
    assert r.clocks_hz["BF16 tensor"] < 0.95 * r.clocks_hz["FP32"]


def test_l1_points_of_gemms_that_bypass_l1_are_not_drawn():
    from analysis.report import roofline

    r = roofline.roofline(_by_size("jax_matmul"))
    for p in r.points:
        assert p.bypassed("L1") == (p.bytes_by_level["L1"] < roofline.BYPASSED_SHARE * p.bytes_by_level["L2"])
    nvjet = [p for p in r.points if p.kernel.startswith("nvjet_")]
    assert nvjet and all(p.bypassed("L1") and "L1" not in p.drawn_levels() for p in nvjet)
    # their L1 intensity would sit far right of every roof's ridge
    assert all(p.intensity("L1") > 1e4 for p in nvjet)
    # a streaming kernel's loads go through L1: its L1 point stays
    cupy = roofline.roofline(_by_size("cupy_sqdiff"))
    assert all(p.drawn_levels() == list(roofline.LEVELS) for p in cupy.points)


def _inside(inner, outer, slack: float = 1.0) -> bool:
    return (inner.x0 >= outer.x0 - slack and inner.y0 >= outer.y0 - slack and inner.x1 <= outer.x1 + slack
            and inner.y1 <= outer.y1 + slack)


def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("workload", ["jax_matmul", "warp_sph", "cupy_sqdiff"])
def test_roof_labels_sit_on_their_lines_and_the_legend_is_off_the_data(monkeypatch, tmp_path, workload):
    import math

    from analysis.report import roofline

    (fig,) = _drawn(monkeypatch, lambda: roofline.figure(_by_size(workload), _ceilings(workload),
                                                         str(tmp_path / "r.png"), workload))
    ax = fig.axes[0]
    r = roofline.roofline(_by_size(workload))
    compute, memory = roofline.roofs(r, _ceilings(workload))
    texts = {t.get_text(): t for t in ax.texts}
    for label, bw, _ in memory:
        t = next(t for s, t in texts.items() if s.startswith(f"{label} "))
        x, y = t.get_position()
        assert y == pytest.approx(bw * x, rel=1e-9)  # anchored on the line
        (x0, y0), (x1, y1) = ax.transData.transform([(x, bw * x), (10 * x, 10 * bw * x)])
        assert t.get_rotation() == pytest.approx(math.degrees(math.atan2(y1 - y0, x1 - x0)) % 360, abs=0.5)
        assert ax.get_xlim()[0] <= x <= ax.get_xlim()[1] and ax.get_ylim()[0] <= y <= ax.get_ylim()[1]
    for label, peak, _ in compute:
        t = next(t for s, t in texts.items() if s.startswith(f"{label} "))
        assert t.get_position()[1] == peak
    renderer = fig.canvas.get_renderer()
    axes_box = ax.get_window_extent(renderer)
    (legend,) = fig.legends
    assert not _overlaps(legend.get_window_extent(renderer), axes_box)
    assert _inside(legend.get_window_extent(renderer), fig.bbox)
    for t in fig.texts:  # the kernels not drawn, listed below the chart
        assert not _overlaps(t.get_window_extent(renderer), axes_box)
        assert _inside(t.get_window_extent(renderer), fig.bbox)
        assert not _overlaps(t.get_window_extent(renderer), legend.get_window_extent(renderer))


@pytest.mark.parametrize("workload", ["cudf_groupby", "warp_sph", "jax_matmul"])
def test_ladder_and_busy_titles_fit_and_legends_stay_off_the_data(monkeypatch, tmp_path, workload):
    import json

    from analysis.model import report_model
    from workloads.registry import BY_NAME

    with open(REFERENCE / "ceilings.json") as f:
        ceilings = json.load(f)
    model = report_model.build(BY_NAME[workload], _by_size(workload), ceilings,
                               ncu_metric_keys=markdown.NCU_METRIC_KEYS)
    figs = _drawn(monkeypatch, lambda: (figures.ladder_figure(model, str(tmp_path / "l.png")),
                                        figures.busy_figure(model, str(tmp_path / "b.png"))))
    assert len(figs) == 2
    for fig in figs:
        renderer = fig.canvas.get_renderer()
        title = fig._suptitle
        assert model.title.split(":")[0] in title.get_text()
        assert _inside(title.get_window_extent(renderer), fig.bbox)
        assert all(ax.get_legend() is None for ax in fig.axes)
        (legend,) = fig.legends
        for ax in fig.axes:
            assert not _overlaps(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
