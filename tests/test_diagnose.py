"""`python -m analysis diagnose` (analysis/report/diagnose.py) on real captures: a PyTorch program's (H100,
tests/data/thirdparty_h100) and the recipes' (H200 reference)."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from analysis.report import diagnose
from analysis.common.errors import AnalysisInputError

from conftest import REFERENCE, REPO

THIRD = REPO / "tests" / "data" / "thirdparty_h100"
TORCH_NCU = THIRD / "torch_kernels.ncu-rep.gz"
TORCH_NSYS = THIRD / "torch_train.sqlite.gz"
#: words of advice about a launch's grid or block: never given for a library's kernel
LAUNCH_CONFIG_WORDS = ("more blocks", "registers per thread", "launch bounds", "block size", "larger blocks",
                       "grid-stride", "shared memory per block", "whole waves")


def _json(*args: str) -> list[dict]:
    return json.loads(diagnose.run(*args, fmt="json") if len(args) == 1 else diagnose.run(args[0], args[1], "json"))


def _raw_rows(path) -> list[dict]:
    """ncu's own raw page (ncu --import --page raw --csv), the independent source of the numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    return rows[1:]  # the units row


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def test_a_pytorch_report_is_classified_by_the_sol_rule_launch_by_launch():
    records = _json(str(TORCH_NCU))
    raw = _raw_rows(THIRD / "torch_kernels_raw.csv")
    assert [r["launch_id"] for r in records] == list(range(len(raw))) == list(range(12))
    for r, row in zip(records, raw):
        assert r["scope"] == "launch" and r["kernel_name"] == row["Kernel Name"]
        sm = _number(row["sm__throughput.avg.pct_of_peak_sustained_elapsed"])
        mem = _number(row["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"])
        assert r["sm_pct"] == pytest.approx(sm, rel=1e-3, abs=1e-3)
        bound = max(sm, mem) >= 60.0
        assert (r["kind"] != "latency") == bound
        if not bound:
            # latency-bound: no unit, no floor, and what is known about occupancy and waves
            assert r["unit"] is None and r["pct_of_peak"] is None and r["floor_ratio"] is None
            assert r["occupancy"]["achieved_pct"] == pytest.approx(
                _number(row["sm__warps_active.avg.pct_of_peak_sustained_active"]), rel=1e-3)
            # the raw page prints waves to two places
            assert r["waves"] == pytest.approx(_number(row["launch__waves_per_multiprocessor"]), abs=0.005)
            assert r["reasons"]
    # the capture's launches: ATen elementwise and batch-norm kernels and one cuDNN convolution
    libraries = {r["library"] for r in records}
    assert libraries == {"PyTorch (ATen)", "cuDNN"}
    conv = next(r for r in records if "implicit_convolve_sgemm" in r["kernel_name"])
    assert conv["library"] == "cuDNN"
    for r in records:
        assert not any(w in r["advice"] for w in LAUNCH_CONFIG_WORDS), r


@pytest.mark.parametrize("run, kind, unit", [
    ("cupy_sqdiff/fused/n16384", "memory", "DRAM"),
    ("cupy_sqdiff/fused_pow/n16384", "compute", "issue slots"),
    ("numba_ufunc/float32/n268435456", "compute", "issue slots"),
    ("jax_matmul/bf16/n8192", "compute", "tensor pipe (BF16)"),
])
def test_recipe_captures_get_the_limiter_of_their_main_launch(run, kind, unit):
    records = _json(str(REFERENCE / run / "ncu.ncu-rep.gz"))
    main = max(records, key=lambda r: r["duration_ns"])
    assert (main["kind"], main["unit"]) == (kind, unit)
    # the floor ratio is the time over the time with that unit at its peak
    assert main["floor_ratio"] == pytest.approx(100.0 / main["pct_of_peak"])
    assert 1.0 <= main["floor_ratio"] < 1.7
    if kind == "compute" and unit == "issue slots":
        assert main["pct_of_peak"] == pytest.approx(main["issue_pct"])


def test_a_latency_bound_recipe_launch_has_no_floor_and_says_occupancy_and_waves():
    records = _json(str(REFERENCE / "numba_ufunc" / "fastmath" / "n268435456" / "ncu.ncu-rep.gz"))
    (r,) = records
    assert r["kind"] == "latency" and r["floor_ratio"] is None and r["pct_of_peak"] is None
    assert max(r["sm_pct"], r["memory_pct"]) < 60
    assert r["occupancy"]["achieved_pct"] > 0 and r["occupancy"]["theoretical_pct"] >= r["occupancy"]["achieved_pct"]
    assert r["waves"] > 100  # 2^28 elements in one grid: hundreds of waves
    assert r["library"] is None and r["advice"].startswith("Latency-bound: ")


def test_library_gemms_get_no_launch_configuration_advice():
    records = _json(str(REFERENCE / "jax_matmul" / "float32" / "n8192" / "ncu.ncu-rep.gz"))
    assert {r["library"] for r in records} >= {"CUTLASS", "XLA"}
    tiny = [r for r in records if r["kind"] == "latency"]
    assert tiny and all(r["waves"] < 1 and r["library"] for r in tiny)
    for r in records:
        assert not any(w in r["advice"] for w in LAUNCH_CONFIG_WORDS), r


def test_library_names():
    assert diagnose.library_of("nvjet_sm90_tss_128x128_64x6_2x1_v_bz_NNT") == "nvjet (cuBLAS)"
    assert diagnose.library_of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64") == "xmma (cuBLAS/cuDNN)"
    assert diagnose.library_of("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>(int)") == "cuDNN"
    assert diagnose.library_of("loop_add_fusion") == "XLA"
    assert diagnose.library_of("wrapped_dot") == "XLA"
    # kernels the program compiles itself
    for own in ("triton_poi_fused_add_mul_sigmoid_tanh_0", "cookbook_squared_diff", "scale_vec4",
                "get_acceleration_5a783dae_cuda_kernel_forward", "cupy_power__float64_int64_float64"):
        assert diagnose.library_of(own) is None, own


def test_with_nsys_every_kernel_of_the_trace_is_weighted_by_its_gpu_time():
    records = _json(str(TORCH_NCU), str(TORCH_NSYS))
    launches = [r for r in records if r["scope"] == "launch"]
    kernels = [r for r in records if r["scope"] == "kernel"]
    trace = [r for r in records if r["scope"] == "trace"]
    assert len(launches) == 12
    # nsys' own kernel summary of the same export: every kernel name, its time and launches
    with open(THIRD / "torch_train_stats_cuda_gpu_kern_sum.csv", newline="") as f:
        stats = {row["Name"]: (int(row["Total Time (ns)"]), int(row["Instances"])) for row in csv.DictReader(f)}
    assert {r["kernel_name"]: (r["gpu_time_ns"], r["launches"]) for r in kernels} == stats
    assert [r["gpu_time_ns"] for r in kernels] == sorted((r["gpu_time_ns"] for r in kernels), reverse=True)
    assert sum(r["share_of_kernel_time"] for r in kernels) == pytest.approx(1.0)
    # each profiled launch stands behind exactly one kernel of the trace
    assert sum(r["profiled_launches"] for r in kernels) == len(launches)
    profiled = [r for r in kernels if r["profiled_launches"]]
    assert all(r["kind"] == "latency" for r in profiled)
    assert {r["kind"] for r in kernels if not r["profiled_launches"]} == {"not profiled"}
    assert [r["kind"] for r in trace] == ["host link", "launch/host"]
    for r in trace:
        assert 0.0 <= r["share_of_window"] <= 1.0 and r["time_ns"] <= r["window_ns"]


def test_the_three_formats_hold_the_same_rows(tmp_path):
    records = _json(str(TORCH_NCU), str(TORCH_NSYS))
    rows = list(csv.DictReader(io.StringIO(diagnose.run(str(TORCH_NCU), str(TORCH_NSYS), "csv"))))
    assert [(r["scope"], r["kernel_name"], r["kind"]) for r in rows] == \
        [(r["scope"], r["kernel_name"] or "", r["kind"]) for r in records]
    md = diagnose.run(str(TORCH_NCU), str(TORCH_NSYS), "md")
    table = [ln for ln in md.splitlines() if ln.startswith("| ") and ln.split(" | ")[0][2:].isdigit()]
    assert len(table) == 12
    assert "## By kernel, weighted by GPU time (nsys)" in md and "launch/host:" in md


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "analysis", "diagnose", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_the_command_writes_json_and_refuses_unreadable_input_in_one_line(tmp_path):
    done = _cli(str(REFERENCE / "cupy_sqdiff" / "fused" / "n16384" / "ncu.ncu-rep.gz"), "--format", "json")
    assert done.returncode == 0, done.stderr
    (r,) = json.loads(done.stdout)
    assert {"kernel_name", "kind", "unit", "pct_of_peak", "floor_ratio", "occupancy", "waves", "advice"} <= set(r)
    not_a_report = tmp_path / "x.ncu-rep"
    not_a_report.write_bytes(b"hello")
    for args in ([str(tmp_path / "missing.ncu-rep")], [str(not_a_report)],
                 [str(TORCH_NCU), "--nsys", str(not_a_report)]):
        done = _cli(*args)
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("analysis diagnose: "), done.stderr


def test_an_unreadable_report_is_a_typed_error(tmp_path):
    bad = tmp_path / "bad.ncu-rep"
    bad.write_bytes(b"NVR\x00" + b"\x00" * 64)
    with pytest.raises(AnalysisInputError, match="bad.ncu-rep"):
        diagnose.run(str(bad))


def test_ncu_rules_quoted_fit_the_limiter_and_spare_library_launch_shapes():
    from analysis.model.limiter.advice import RULE_KINDS
    from analysis.readers.ncu import read_launches

    # a launch profiled with the full set, so with ncu's rule results (the metrics-only steps have none)
    vectorized = REFERENCE / "pycuda_kernel" / "vectorized" / "n268435456" / "ncu.ncu-rep.gz"
    (r,) = _json(str(vectorized))
    (launch,) = read_launches(vectorized)
    assert (r["kind"], r["unit"]) == ("memory", "DRAM")
    quoted = {f["rule"] for f in r["ncu_rules"]}
    # ncu attached rules to the launch, and the quoted ones are those that speak to a DRAM-bound launch
    assert quoted and quoted <= {f.rule for f in launch.findings}
    assert all(r["kind"] in RULE_KINDS.get(rule, {r["kind"]}) for rule in quoted)
    left_out = {f.rule for f in launch.findings} - quoted
    assert "HighPipeUtilization" not in quoted and left_out
    for r in _json(str(REFERENCE / "jax_matmul" / "float32" / "n8192" / "ncu.ncu-rep.gz")):
        assert r["library"] and not {f["rule"] for f in r["ncu_rules"]} & diagnose.LAUNCH_CONFIGURATION_RULES


def test_captures_of_two_programs_are_diagnosed_and_said_to_differ(capsys):
    # the PyTorch program's ncu report beside the JAX program's nsys export: no kernel in common
    records = _json(str(TORCH_NCU), str(THIRD / "jax_prog.sqlite.gz"))
    kernels = [r for r in records if r["scope"] == "kernel"]
    assert kernels and all(r["kind"] == "not profiled" for r in kernels)
    assert "captures of two different programs?" in capsys.readouterr().err
