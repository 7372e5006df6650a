"""What the run summaries keep for the new figures and report sections, and that the figures are
deterministic (the committed PNGs are rebuilt byte for byte)."""
from __future__ import annotations

import pytest

from analysis import figures, markdown
from analysis.ncu import read_launches

from analysis import run_summary
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
    by_size = _by_size("pycuda_kernel")
    points = figures.roofline_points(by_size)
    profiled = {(r.parts[-2], launch.kernel_name) for r in RUNS if r.parts[-3] == "pycuda_kernel"
                and (r / "ncu.ncu-rep.gz").exists() for launch in read_launches(r / "ncu.ncu-rep.gz")}
    assert {(p["variant"], p["kernel"]) for p in points} == {(v, k) for v, k in profiled}
    for p in points:
        assert p["intensity"] == pytest.approx(p["flops"] / p["dram_bytes"])
        assert p["flop_per_s"] == pytest.approx(p["flops"] / p["duration_ns"] * 1e9)
        assert p["fp32"]  # PyCUDA's kernels scale float32 arrays


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

    from analysis import report_model
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
    assert figures.short_kernel_name("void ns::k<int>(float)") == "k"
    assert figures.short_kernel_name("cupy_square__float64_float64") == "cupy_square__float64_float64"
    long = _summary(next(r for r in RUNS if r.parts[-3] == "numba_ufunc"))["nsys"]["compute_kernels"][0]["name"]
    assert figures.short_kernel_name(long) in long and "(" not in figures.short_kernel_name(long)


def test_a_caption_over_traces_of_both_kinds_says_so():
    from analysis.figures import trace_span

    ranged, whole = {"nsys_capture_range": True}, {"nsys_capture_range": False}
    assert trace_span([ranged, ranged]) == "capture range (the calls only)"
    assert trace_span([whole]) == "whole run"
    assert trace_span([whole, ranged]) == "whole run or capture range (the calls only), by step"
