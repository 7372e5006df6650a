"""The cuDF groupby recipe on the CPU, through pandas (COOKBOOK_DATAFRAME=pandas): the same recipe
code, checked against the float64 reference. Tests marked ``gpu`` run cuDF itself where a GPU and
cuDF are; the NVTX section's cuDF-specific numbers wait for a real capture."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

# pandas is imported by the recipe when a test runs it, not at collection
pytestmark = pytest.mark.skipif(importlib.util.find_spec("pandas") is None, reason="could not import 'pandas'")

from analysis.common.errors import AnalysisInputError  # noqa: E402
from analysis.report.sections import cudf_groupby_nvtx as section  # noqa: E402
from workloads.contract import ResultMismatch, WorkloadError, check_result  # noqa: E402
from workloads.cudf_backend import HostEventPair, frame_library  # noqa: E402
from workloads.cudf_groupby import RECIPE  # noqa: E402
from workloads.cudf_groupby.common import NUM_GROUPS, summation_tolerance  # noqa: E402

from conftest import REFERENCE, REPO  # noqa: E402

#: about 6 rows per group: every step aggregates real groups, and some 25 groups stay empty
SIZE = 60_000


@pytest.fixture
def pandas_mode(monkeypatch):
    monkeypatch.setenv("COOKBOOK_DATAFRAME", "pandas")


def _made(variant: str, size: int = SIZE, seed: int = 0):
    v = RECIPE.variant_class(variant)(size=size, seed=seed)
    v.setup()
    return v


def _pandas_env() -> dict:
    return dict(os.environ, COOKBOOK_DATAFRAME="pandas")


# --- the recipe's numbers, through pandas -----------------------------------------------------------


@pytest.mark.parametrize("variant", RECIPE.variants)
def test_every_step_matches_the_float64_reference(pandas_mode, variant):
    v = _made(variant)
    v.step()
    v.synchronize()
    out, ref = v.result(), v.reference()
    assert out.shape == ref.shape == (NUM_GROUPS, 3)
    assert (ref[:, 0] == 0).any()  # empty groups are exercised
    np.testing.assert_array_equal(out[:, 0], ref[:, 0])  # counts are exact
    assert check_result(out, ref, v.tolerance, variant) <= v.tolerance


def test_split_and_agg_all_give_the_same_groups(pandas_mode):
    split, agg = _made("split_agg"), _made("agg_all")
    split.step()
    agg.step()
    a, b = split.result(), agg.result()
    np.testing.assert_array_equal(a[:, 0], b[:, 0])
    np.testing.assert_allclose(a, b, rtol=split.tolerance, atol=0)


def test_tolerance_is_the_summation_bound_of_the_largest_group(pandas_mode):
    v = _made("agg_all")
    largest = int(v.reference()[:, 0].max())
    assert v.tolerance == summation_tolerance(largest) == 2 * (largest + 1) * 2.0 ** -53
    # the recipe's docstring numbers: a group of ~5,300 rows at 50 M rows
    assert summation_tolerance(5_300) == pytest.approx(1.18e-12, rel=0.01)


def test_a_row_moved_to_another_group_is_caught(pandas_mode):
    v = _made("agg_all")
    # the frame changes, the reference draws the inputs again from the seed
    v.frame.loc[0, "key"] = (v.frame.loc[0, "key"] + 1) % NUM_GROUPS
    v.step()
    with pytest.raises(ResultMismatch, match="relative error"):
        check_result(v.result(), v.reference(), v.tolerance, "moved row")


def test_one_wrong_value_is_caught(pandas_mode):
    v = _made("split_agg")
    v.frame.loc[123, "value"] += 1.0
    v.step()
    with pytest.raises(ResultMismatch, match="relative error"):
        check_result(v.result(), v.reference(), v.tolerance, "wrong value")


def test_a_result_with_keys_outside_the_groups_is_refused(pandas_mode):
    v = _made("agg_all")
    v.step()
    v.out.index = v.out.index + NUM_GROUPS
    with pytest.raises(ResultMismatch, match="outside"):
        v.result()


def test_a_result_without_the_three_columns_is_refused(pandas_mode):
    v = _made("agg_all")
    v.step()
    v.out = v.out.drop(columns=["mean"])
    with pytest.raises(ResultMismatch, match="lacks"):
        v.result()


def test_declared_work_is_one_pass_for_every_step(pandas_mode):
    works = {name: RECIPE.variant_class(name)(size=SIZE).work() for name in RECIPE.variants}
    assert len(set(works.values())) == 1
    w = works["split_agg"]
    assert w.bytes_read == 16 * SIZE and w.bytes_written == 32 * NUM_GROUPS and w.flops == 2 * SIZE


def test_pandas_times_with_host_timestamps(pandas_mode):
    v = _made("agg_all", size=1000)
    ev = v.event_pair()
    assert isinstance(ev, HostEventPair)
    ev.start()
    v.step()
    ev.stop()
    assert ev.elapsed_ms() > 0


# --- the pool step on pandas, the library switch, imports -----------------------------------------------


def test_pool_steps_skip_the_pool_on_pandas_and_never_import_rmm():
    code = ("import sys\n"
            "from workloads.cudf_groupby import RECIPE\n"
            "from workloads.contract import check_result\n"
            "for name in ('split_agg_pool', 'agg_all_pool'):\n"
            "    v = RECIPE.variant_class(name)(size=5000)\n"
            "    v.setup(); v.step()\n"
            "    check_result(v.result(), v.reference(), v.tolerance, name)\n"
            "    print(v.allocator)\n"
            "print(sorted(m for m in ('rmm', 'cudf', 'cupy') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_pandas_env(), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[:2] == ["pandas: host memory, RMM pool step skipped"] * 2
    assert lines[2] == "[]"


@pytest.mark.parametrize("mode", ["run", "timed"])
def test_the_command_line_runs_and_checks_through_pandas(tmp_path, mode):
    out = tmp_path / "rec.json"
    args = [sys.executable, "-m", "workloads.cudf_groupby", "--device", "cpu", "--variant", "split_agg", "--size", "20000",
            "--mode", mode, "--output", str(out)]
    if mode == "timed":
        args += ["--warmup", "1", "--repeats", "3"]
    r = subprocess.run(args, cwd=REPO, env=_pandas_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["relative_error"] <= rec["tolerance"] < 1e-13
    assert rec["work"]["bytes_read"] == 16 * 20000
    if mode == "timed":
        assert len(rec["times_ms"]) == 3 and all(t > 0 for t in rec["times_ms"])


def test_importing_the_recipe_and_its_section_needs_no_gpu_library():
    code = ("import sys, importlib\n"
            "from workloads.cudf_groupby import RECIPE\n"
            "for v in RECIPE.variants: RECIPE.variant_class(v)\n"
            "import workloads.cudf_groupby.common, analysis.report.sections.cudf_groupby_nvtx\n"
            "print(sorted(m for m in ('rmm', 'cudf', 'cupy', 'pylibcudf') if m in sys.modules))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip() == "[]"
    assert RECIPE.requires == ("cudf", "rmm") and RECIPE.variants[0] == "split_agg"
    assert RECIPE.sections == ("nvtx",)


def test_an_unknown_dataframe_library_is_refused(monkeypatch):
    monkeypatch.setenv("COOKBOOK_DATAFRAME", "polars")
    with pytest.raises(WorkloadError, match="COOKBOOK_DATAFRAME='polars'"):
        RECIPE.variant_class("agg_all")(size=10)
    assert frame_library({}) == "cudf" and frame_library({"COOKBOOK_DATAFRAME": " Pandas "}) == "pandas"


@pytest.mark.skipif(importlib.util.find_spec("cudf") is not None, reason="cuDF is installed here")
def test_without_cudf_the_default_run_fails_with_one_clear_line(monkeypatch):
    env = {k: v for k, v in os.environ.items() if k != "COOKBOOK_DATAFRAME"}
    r = subprocess.run([sys.executable, "-m", "workloads.cudf_groupby", "--variant", "agg_all", "--size", "100"],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()]
    assert "cudf" in r.stderr and "--device cpu" in r.stderr


# --- the NVTX section, on what can be read without a cuDF capture ------------------------------------


def test_the_section_refuses_a_folder_without_cudf_runs(tmp_path):
    with pytest.raises(AnalysisInputError, match="no such capture folder"):
        section.render(str(tmp_path / "cudf_groupby"), str(tmp_path / "figures"))
    (tmp_path / "cudf_groupby").mkdir()
    with pytest.raises(AnalysisInputError, match="split_agg: no run folder"):
        section.render(str(tmp_path / "cudf_groupby"), str(tmp_path / "figures"))


def test_the_section_refuses_a_capture_without_libcudf_ranges():
    run = REFERENCE / "cupy_sqdiff" / "baseline" / "n4096"
    with pytest.raises(AnalysisInputError, match="no libcudf NVTX ranges"):
        section.read_run(str(run), "baseline", workload="cupy_sqdiff")


def test_the_section_presents_real_captures_of_another_recipe(tmp_path):
    # the generic half (steady calls, allocations, outline, figure) on the CuPy recipe's captures:
    # its baseline allocates in call 1 (CuPy's pool still growing), rmm_pool never does
    runs = [section.read_run(str(REFERENCE / "cupy_sqdiff" / v / "n4096"), v, workload="cupy_sqdiff",
                             require_domain=None) for v in ("baseline", "rmm_pool")]
    assert [c.payload for c in runs[0].calls] == [1, 2]
    assert runs[1].allocation_by_api == () and all(c.allocation_calls == 0 for c in runs[1].calls)
    assert all(c.groupby_passes == 0 and c.kernels >= 1 for r in runs for c in r.calls)
    text = section.markdown(runs, "cudf_groupby_nvtx.png")
    assert text.startswith("## ") and "| `rmm_pool` | none | 0 | 0.000 |" in text
    assert "cookbook  cupy_sqdiff/baseline/compute" in text
    fig = tmp_path / "cudf_groupby_nvtx.png"
    section.timeline_figure(runs, str(fig))
    assert fig.stat().st_size > 1000


# --- cuDF itself, where it is -----------------------------------------------------------------------


def _gpu_ready() -> bool:
    return shutil.which("nvidia-smi") is not None and importlib.util.find_spec("cudf") is not None


gpu = pytest.mark.skipif(not _gpu_ready(), reason="needs an NVIDIA GPU and cuDF")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("variant", RECIPE.variants)
def test_cudf_step_is_correct_at_a_small_size(tmp_path, variant):
    # its own process: the pool steps reinitialize RMM for the whole process
    env = {k: v for k, v in os.environ.items() if k != "COOKBOOK_DATAFRAME"}
    out = tmp_path / "rec.json"
    r = subprocess.run([sys.executable, "-m", "workloads.cudf_groupby", "--variant", variant, "--size", "1000003",
                        "--mode", "timed", "--warmup", "1", "--repeats", "3", "--output", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["relative_error"] <= rec["tolerance"]
    assert "cudf" in rec["provenance"]["packages"]


@pytest.mark.gpu
@gpu
def test_cudf_pool_step_installs_an_rmm_pool():
    code = ("from workloads.cudf_groupby import RECIPE\n"
            "import rmm\n"
            "v = RECIPE.variant_class('agg_all_pool')(size=100000); v.setup()\n"
            "print(type(rmm.mr.get_current_device_resource()).__name__)\n"
            "print(type(v.event_pair()).__name__)\n")
    env = {k: v for k, v in os.environ.items() if k != "COOKBOOK_DATAFRAME"}
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["PoolMemoryResource", "CupyEventPair"]


# --- synchronization per call in the committed H200 captures (the recipe docstring's counts) ---------

def _sync_and_copies(variant: str, call: int) -> dict:
    """The synchronizing CUDA calls and cudaMemcpyAsync calls of one steady compute call, by API and by
    the innermost cuDF range around them ('runner' outside every cuDF range), and the longest copy."""
    from analysis.common import layout
    from analysis.model.breakdown import is_hot_range, synchronization
    from analysis.readers.nsys.columns import is_sync_api
    from analysis.readers.nsys.trace import api_family

    from conftest import reference_trace

    ex = reference_trace(layout.nsys_export(str(REFERENCE / "cudf_groupby" / variant / "n50000000")))
    hot = sorted((r for r in ex.nvtx_ranges() if is_hot_range(r)), key=lambda r: r.start_ns)
    r = hot[call]
    inner = [x for x in ex.nvtx_ranges() if x.global_tid == r.global_tid and x is not r
             and r.start_ns <= x.start_ns and x.end_ns <= r.end_ns and x.domain in ("cudf_python", "libcudf")]
    calls = [c for c in ex.api_calls()
             if c.global_tid == r.global_tid and r.start_ns <= c.start_ns and c.end_ns <= r.end_ns]
    out = {"sync": {}, "copies": {}, "in_aggregate": {"sync": 0, "copies": 0}, "python_layer_sync": 0,
           "longest_copy_ms": 0.0, "call_ms": r.duration_ns / 1e6,
           "sync_per_range": synchronization(ex)["per_hot_range_calls"][call]}
    for c in calls:
        name = api_family(c.name)
        sync, copy = is_sync_api(c.name), name == "cudaMemcpyAsync"
        if not (sync or copy):
            continue
        around = [x for x in inner if x.start_ns <= c.start_ns and c.end_ns <= x.end_ns]
        top = min(around, key=lambda x: x.start_ns).name if around else "runner"
        key = "sync" if sync else "copies"
        out[key][(top, name)] = out[key].get((top, name), 0) + 1
        if any(x.domain == "libcudf" and x.name == "aggregate" for x in around):
            out["in_aggregate"][key] += 1
        elif sync and around:
            out["python_layer_sync"] += 1
        if copy:
            out["longest_copy_ms"] = max(out["longest_copy_ms"], c.duration_ns / 1e6)
    return out


@pytest.mark.parametrize("call", [1, 2])
def test_agg_all_synchronizes_16_times_a_call_10_of_them_inside_libcudf_aggregate(call):
    for variant in ("agg_all", "agg_all_pool"):
        got = _sync_and_copies(variant, call)
        assert got["sync_per_range"] == 16
        assert got["sync"] == {("GroupBy.agg", "cudaStreamSynchronize"): 8, ("GroupBy.agg", "cuStreamSynchronize"): 7,
                               ("runner", "cudaDeviceSynchronize"): 1}
        assert got["copies"] == {("GroupBy.agg", "cudaMemcpyAsync"): 6}
        assert got["in_aggregate"] == {"sync": 10, "copies": 6} and got["python_layer_sync"] == 5
        # the 8-byte group-count read waits for the aggregation kernel
        assert 2.6 < got["longest_copy_ms"] < 2.9
    assert 9.5 < _sync_and_copies("agg_all", call)["call_ms"] < 10.1  # the docstring's 9.7-9.9 ms


@pytest.mark.parametrize("call", [1, 2])
def test_split_agg_synchronizes_88_times_a_call_52_of_them_combining_the_results(call):
    got = _sync_and_copies("split_agg", call)
    assert got["sync_per_range"] == 88
    by_range = {}
    for (top, _), n in got["sync"].items():
        by_range[top] = by_range.get(top, 0) + n
    # the mean and the sum are both GroupBy.agg: 12 + 11
    assert by_range == {"GroupBy.count": 12, "GroupBy.agg": 23, "DataFrame.__init__": 52, "runner": 1}
    copies = {top: n for (top, _), n in got["copies"].items()}
    assert copies == {"GroupBy.count": 6, "GroupBy.agg": 12, "DataFrame.__init__": 36}
    assert sum(n for (_, api), n in got["sync"].items() if api == "cudaStreamSynchronize") == 68
    assert sum(n for (_, api), n in got["sync"].items() if api == "cuStreamSynchronize") == 19
