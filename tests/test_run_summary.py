"""Run summaries from the real captures: what the report's claims rest on."""
from __future__ import annotations

import json
import shutil

import pytest

from analysis.common import layout
from analysis.common.errors import AnalysisInputError, UnknownSchemaVersion
from analysis.model.run_summary import SCHEMA_VERSION, captured_in_range, load_summary, union_ns

from conftest import REFERENCE, REPO, summary_of, write_tree
import snakemake_forks


def _summary(variant, size=16384):
    return summary_of(REFERENCE / "cupy_sqdiff" / variant / f"n{size}")


def test_a_summary_carries_its_schema_version_and_a_reader_refuses_another(tmp_path):
    record = _summary("fused")
    assert record["schema_version"] == SCHEMA_VERSION
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(record))
    assert load_summary(str(path))["nsys"] == record["nsys"]
    for version in (SCHEMA_VERSION + 1, None):
        path.write_text(json.dumps({**record, "schema_version": version}))
        with pytest.raises(UnknownSchemaVersion, match="summary.json"):
            load_summary(str(path))


def test_the_layout_names_the_files_of_a_reference_run_folder():
    run = REFERENCE / "cupy_sqdiff" / "fused" / "n4096"
    assert layout.run_dir(str(REFERENCE), "cupy_sqdiff", "fused", 4096) == str(run)
    for name in (layout.NSYS_RUN, layout.NSYS_STATS):
        assert (run / name).exists(), name
    # a reference keeps the captures and the records that grow with the samples gzipped
    assert layout.capture(str(run), layout.TIMING) == str(run / (layout.TIMING + layout.GZIP_SUFFIX))
    assert not (run / layout.TIMING).exists()
    assert layout.nsys_export(str(run)) == str(run / (layout.NSYS_EXPORT + layout.GZIP_SUFFIX))
    assert layout.capture(str(run.parent / "n16384"), layout.NCU_REPORT).endswith(".ncu-rep.gz")
    with pytest.raises(AnalysisInputError, match="ncu.ncu-rep"):
        layout.capture(str(run), layout.NCU_REPORT)  # ncu profiled the largest size only


@pytest.mark.parametrize("size", [4096, 16384])
def test_fused_launches_one_kernel_per_call_and_baseline_two(size):
    for variant, expected in (("baseline", 2), ("rmm_pool", 2), ("fused_pow", 1), ("fused", 1),
                              ("fused_pool", 1)):
        calls = _summary(variant, size)["nsys"]["calls"]
        assert len(calls) >= 2
        assert [c["kernels"] for c in calls] == [expected] * len(calls), variant


def test_calls_are_numbered_by_their_nvtx_payload():
    calls = _summary("fused")["nsys"]["calls"]
    assert [c["index"] for c in calls] == list(range(len(calls)))


def test_pool_variants_make_no_allocation_calls_while_computing():
    for variant in ("rmm_pool", "fused_pool"):
        assert all(c["allocation_calls"] == 0 for c in _summary(variant)["nsys"]["calls"]), variant
    # CuPy's own pool still calls cudaMalloc while it grows, in the first calls of a cold process
    assert _summary("baseline")["nsys"]["calls"][0]["allocation_calls"] > 0


def test_gpu_time_of_a_call_fits_in_its_wall_time():
    for variant in ("baseline", "fused"):
        for c in _summary(variant)["nsys"]["calls"]:
            assert 0 < c["gpu_busy_ns"] <= c["wall_ns"]
            assert c["gpu_busy_ns"] + c["gpu_idle_ns"] == c["wall_ns"]
            assert c["gpu_kernel_ns"] >= c["gpu_busy_ns"] - c["gpu_memcpy_ns"] - c["gpu_memset_ns"]


def test_achieved_bandwidth_is_declared_bytes_over_median_time():
    s = _summary("fused")
    w = s["work"]
    assert s["achieved_gb_per_s"] == pytest.approx((w["bytes_read"] + w["bytes_written"])
                                                   / s["timing"]["median_ms"] / 1e6)


def test_ncu_launches_are_the_compute_kernels_only():
    names = {launch["kernel_name"] for launch in _summary("baseline")["ncu"]}
    assert names == {"cupy_subtract__float64_float64_float64", "cupy_square__float64_float64"}
    assert {launch["kernel_name"] for launch in _summary("fused")["ncu"]} == {"cookbook_squared_diff"}


def test_union_of_overlapping_intervals():
    assert union_ns([]) == 0
    assert union_ns([(0, 10), (5, 15), (20, 30)]) == 25
    assert union_ns([(0, 10), (2, 3)]) == 10


def test_a_new_reference_replaces_the_old_one_whole(tmp_path):
    from analysis.readers.captures import replace_reference
    from analysis.common.errors import AnalysisInputError

    src = tmp_path / "captures" / "w" / "v" / "n1"
    src.mkdir(parents=True)
    (src / "timing.json").write_text("{}")
    (src / "nsys.nsys-rep").write_bytes(b"big")
    (src / "nsys-stats").mkdir()
    (src / "nsys-stats" / "stats_cuda_gpu_kern_sum.csv").write_text("Time (%)\n")
    (src / "nsys-stats" / "stats_cuda_gpu_trace.csv").write_text("Start (ns)\n")
    dst = tmp_path / "reports" / "reference" / "h200"
    (dst / "w" / "gone" / "n1").mkdir(parents=True)
    (dst / "w" / "gone" / "n1" / "timing.json").write_text("{}")
    copied = replace_reference(str(tmp_path / "captures"), str(dst))
    # the per-launch trace CSV stays behind: the export holds the same rows; the timed record is kept
    # gzipped (its telemetry per sample makes it 0.1-0.4 MB)
    assert copied == ["w/v/n1/nsys-stats/stats_cuda_gpu_kern_sum.csv", "w/v/n1/timing.json.gz"]
    assert not (dst / "w" / "gone").exists()
    with pytest.raises(AnalysisInputError, match="refusing"):
        replace_reference(str(tmp_path / "captures"), str(tmp_path / "reports"))


def test_a_new_reference_keeps_the_noise_model_of_the_old_one(tmp_path, capsys):
    """The noise model is derived from several runs (docs/compare.md), not captured by one: a refresh
    of the reference keeps it, says so, and compare still finds it."""
    from analysis.model import noise
    from analysis.readers.captures import replace_reference

    src = tmp_path / "captures" / "w" / "v" / "n1"
    src.mkdir(parents=True)
    (src / "timing.json").write_text("{}")
    dst = tmp_path / "reports" / "reference" / "h200"
    dst.mkdir(parents=True)
    shutil.copy2(REFERENCE / noise.NOISE_FILE, dst / noise.NOISE_FILE)
    copied = replace_reference(str(tmp_path / "captures"), str(dst))
    assert noise.NOISE_FILE in copied and "kept noise.json" in capsys.readouterr().err
    assert (dst / noise.NOISE_FILE).read_bytes() == (REFERENCE / noise.NOISE_FILE).read_bytes()
    assert noise.find_noise(str(dst)).steps == noise.find_noise(str(REFERENCE)).steps


def test_a_whole_run_keeps_its_gpu_job_records_with_the_reference(tmp_path):
    """capture_reference after profile_all: the run's GPU job records come along (gpu_jobs.md and the
    pages' exact commands are made from them), replacing the old ones; a folder without records is refused."""
    from analysis.readers.captures import GPU_JOBS, replace_reference
    from analysis.common.errors import AnalysisInputError

    src = tmp_path / "captures" / "w" / "v" / "n1"
    src.mkdir(parents=True)
    (src / "timing.json").write_text("{}")
    jobs = tmp_path / "gpu-jobs"
    jobs.mkdir()
    (jobs / "1-vm-2.json").write_text('{"tag": "timed"}')
    (jobs / ".1-vm-3.json.tmp").write_text("half")
    dst = tmp_path / "reports" / "reference" / "h200"
    (dst / GPU_JOBS).mkdir(parents=True)
    (dst / GPU_JOBS / "0-old-1.json").write_text("{}")
    copied = replace_reference(str(tmp_path / "captures"), str(dst), str(jobs))
    assert f"{GPU_JOBS}/1-vm-2.json" in copied
    assert sorted(p.name for p in (dst / GPU_JOBS).iterdir()) == ["1-vm-2.json"]
    (jobs / "1-vm-2.json").unlink()
    with pytest.raises(AnalysisInputError, match="no GPU job records"):
        replace_reference(str(tmp_path / "captures"), str(dst), str(jobs))


def test_a_partial_run_merges_into_the_reference_with_its_own_ceilings(tmp_path):
    from analysis.readers.captures import merge_reference
    from analysis.common.errors import AnalysisInputError

    src = write_tree(tmp_path / "captures", {
        "numba_ufunc/v/n1/timing.json": "{}", "ceilings.json": '{"run": "new"}', "coldstart/numba_ufunc_v.json": "{}",
        "kernels/new_v_k/kernel-run.json": "{}"})
    dst = write_tree(tmp_path / "reports" / "reference" / "h200", {
        "jax_matmul/stale/n1/timing.json": "{}", "numba_ufunc/stale/n1/timing.json": "{}",
        "ceilings.json": '{"run": "old"}', "coldstart/numba_ufunc_stale.json": "{}",
        "coldstart/jax_matmul_v.json": "{}", "kernels/new_v_k/stale.json": "{}"})
    copied = merge_reference(str(src), str(dst), ["numba_ufunc"])
    assert copied == ["coldstart/numba_ufunc_v.json", "kernels/new_v_k/kernel-run.json", "numba_ufunc/ceilings.json",
                      "numba_ufunc/v/n1/timing.json.gz"]
    assert not (dst / "kernels" / "new_v_k" / "stale.json").exists()
    # the merged workload is replaced whole and carries its run's ceilings; the others are untouched
    assert not (dst / "numba_ufunc" / "stale").exists()
    assert (dst / "numba_ufunc" / "ceilings.json").read_text() == '{"run": "new"}'
    assert (dst / "ceilings.json").read_text() == '{"run": "old"}'
    assert (dst / "jax_matmul" / "stale" / "n1" / "timing.json").exists()
    assert sorted(p.name for p in (dst / "coldstart").iterdir()) == ["jax_matmul_v.json", "numba_ufunc_v.json"]
    with pytest.raises(AnalysisInputError, match="no captures of workload 'cupy_sqdiff'"):
        merge_reference(str(src), str(dst), ["cupy_sqdiff"])
    with pytest.raises(AnalysisInputError, match="refusing"):
        merge_reference(str(src), str(tmp_path / "reports"), ["numba_ufunc"])


@pytest.mark.parametrize("name", ["absent", ".", "..", "/", "numba_ufunc/../..", "kernels"])
def test_merge_accepts_only_registered_workloads_and_deletes_nothing_else(tmp_path, name):
    """`--merge /some/dir` deleted files there and `--merge .` emptied the reference (issue 20)."""
    from analysis.readers.captures import merge_reference
    from analysis.common.errors import AnalysisInputError

    src = tmp_path / "captures"
    (src / "numba_ufunc" / "v" / "n1").mkdir(parents=True)
    (src / "numba_ufunc" / "v" / "n1" / "timing.json").write_text("{}")
    (src / "ceilings.json").write_text("{}")
    dst = tmp_path / "reports" / "reference" / "h200"
    (dst / "jax_matmul").mkdir(parents=True)
    (dst / "jax_matmul" / "timing.json").write_text("{}")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    with pytest.raises(AnalysisInputError, match="no such workload"):
        merge_reference(str(src), str(dst), [name])
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_merge_refuses_a_workload_folder_that_links_outside(tmp_path):
    from analysis.readers.captures import merge_reference
    from analysis.common.errors import AnalysisInputError

    src = tmp_path / "captures"
    (src / "numba_ufunc" / "v").mkdir(parents=True)
    (src / "numba_ufunc" / "v" / "timing.json").write_text("{}")
    (src / "ceilings.json").write_text("{}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep")
    dst = tmp_path / "reports" / "reference" / "h200"
    dst.mkdir(parents=True)
    (dst / "numba_ufunc").symlink_to(elsewhere)
    with pytest.raises(AnalysisInputError, match="outside the reference"):
        merge_reference(str(src), str(dst), ["numba_ufunc"])
    assert (elsewhere / "precious.txt").read_text() == "keep"


def test_config_schema_needs_a_workload_in_only_workloads():
    r = snakemake_forks.run(["-n", "rebuild_reports", "--cores", "1", "--config", "only_workloads=[]"], REPO)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "only_workloads" in out and "non-empty" in out, out[-800:]


def test_check_rebuild_names_a_missing_folder(tmp_path, capsys):
    from analysis.cli.main import main

    assert main(["check-rebuild", "--rebuilt", str(tmp_path / "absent"), "--committed", "reports"]) == 2
    assert "absent: no such folder" in capsys.readouterr().err
    (tmp_path / "rebuilt").mkdir()
    (tmp_path / "rebuilt" / "x.md").write_text("x\n")
    assert main(["check-rebuild", "--rebuilt", str(tmp_path / "rebuilt"), "--committed", str(tmp_path / "nope")]) == 2
    assert "nope: no such folder" in capsys.readouterr().err


@pytest.mark.parametrize("option,value", [("--repeats", "0"), ("--calls", "0"), ("--warmup", "-1"),
                                          ("--size", "0"), ("--repeats", "many")])
def test_a_count_below_its_least_is_refused_by_the_runner(option, value):
    import subprocess
    import sys

    from conftest import REPO

    r = subprocess.run([sys.executable, "-m", "workloads.numba_ufunc", "--variant", "baseline", "--mode", "timed",
                        option, value], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and option in r.stderr and "Traceback" not in r.stderr, r.stderr[-600:]


def test_a_run_record_says_whether_its_trace_holds_only_the_calls():
    """nsys-run.json's capture_range, as the runner wrote it; records older than the key come from
    pipelines that used the range for exactly the recipes declaring one (JAX's)."""
    assert captured_in_range({"capture_range": False}, "jax_matmul") is False
    assert captured_in_range({"capture_range": True}, "cupy_sqdiff") is True
    assert captured_in_range({}, "jax_matmul") is True and captured_in_range({}, "cupy_sqdiff") is False
