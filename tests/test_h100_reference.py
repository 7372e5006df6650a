"""The second GPU's reference (reports/reference/h100: one profile_all of the six recipes on an NVIDIA
H100 80GB HBM3) and what is built from it: its pages (reports/h100/), the cross-GPU page against the
H200 reference, and the gzipped text records a reference now keeps."""
from __future__ import annotations

import gzip
import json
import pathlib
import shutil

import pytest

from analysis.model import compare

from analysis.report import cross_gpu
from analysis.readers.captures import copy_captures
from analysis.common.errors import AnalysisInputError
from analysis.readers.ncu import read_raw_csv
from analysis.model.run_summary import load_json, summarize_run
from tests.conftest import copy_checkout
import snakemake_forks

REPO = pathlib.Path(__file__).resolve().parents[1]
H100 = REPO / "reports" / "reference" / "h100"
H200 = REPO / "reports" / "reference" / "h200"


def test_the_h100_reference_holds_all_six_recipes_from_one_h100():
    pre = json.loads((H100 / "preflight.json").read_text())
    assert [g["name"] for g in pre["provenance"]["gpus"]] == ["NVIDIA H100 80GB HBM3"]
    # beside the recipes: the kernel pages' captures, the cold/warm starts, the GPU job records and the
    # multi-process example of the same run
    recipes = sorted(p.name for p in H100.iterdir() if p.is_dir()
                     and p.name not in ("kernels", "coldstart", "gpu-jobs", "nvtx_multiprocess"))
    assert recipes == ["cudf_groupby", "cupy_sqdiff", "jax_matmul", "numba_ufunc", "pycuda_kernel", "warp_sph"]
    jobs = [json.loads(p.read_text()) for p in (H100 / "gpu-jobs").glob("*.json")]
    assert jobs and {j["gpu"]["name"] for j in jobs} == {"NVIDIA H100 80GB HBM3"}
    # the steps the H200 reference predates are there
    for step in ("warp_sph/plane_threads", "numba_ufunc/fastmath", "pycuda_kernel/streams", "jax_matmul/tf32",
                 "cupy_sqdiff/raw_kernel"):
        assert list((H100 / step).glob("n*/timing.json.gz")), step


def test_h100_pages_rebuild_alone_and_start_no_further_reference(tmp_path):
    """`snakemake rebuild_reports` rebuilds the H100 pages with the H200's (tests/test_preflight_and_pipeline.py);
    under the H100's own config file it plans that reference's pages in its own work folder and runs
    no further one (its more_references is null), so the nested run cannot recurse."""
    repo = copy_checkout(tmp_path, reference="link")
    r = snakemake_forks.run(["-n", "-p", "rebuild_reports", "--configfile", "rules/reference_h100.yaml"], repo,
                            timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "results/h100/reports/reference/CHECKED" in r.stdout
    # the loop over further references' config files has none to run
    assert "for file in ;" in r.stdout and "for file in rules/" not in r.stdout


def test_each_index_links_the_other_gpu_and_both_runs_hold_the_whole_suite():
    h200_index = (REPO / "reports" / "index.md").read_text()
    h100_index = (REPO / "reports" / "h100" / "index.md").read_text()
    assert "[NVIDIA H100 80GB HBM3](h100/index.md)" in h200_index
    assert "[NVIDIA H200](../index.md)" in h100_index
    # both runs were full ones: JAX's verdict is against the same step on both GPUs (float32: at 8192 the
    # ladder starts there), and the experiments' sections are there
    for index in (h200_index, h100_index):
        jax_row = next(line for line in index.splitlines() if line.startswith("| [JAX"))
        assert "(vs `float32`: " in jax_row
    assert (H100 / "warp_sph" / "experiments").is_dir()
    for pages in (REPO / "reports", REPO / "reports" / "h100"):
        sections = [line for line in (pages / "warp_sph.md").read_text().splitlines() if line.startswith("## ")]
        assert "## Cold starts, per module" in sections and "## Left out of this run" not in sections


def test_cross_gpu_page_is_rebuilt_from_the_two_references(tmp_path, monkeypatch, capsys):
    """The command's page, from the folders as the pipeline names them (relative to the checkout); the
    command's entry point in this process, which shares the two references' reads with the tests below."""
    from analysis.cli.main import main

    out = tmp_path / "cross_gpu.md"
    monkeypatch.chdir(REPO)
    rc = main(["cross-gpu", str(H200.relative_to(REPO)), str(H100.relative_to(REPO)), "--output-md", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert out.read_text() == (REPO / "reports" / "cross_gpu.md").read_text()


@pytest.fixture(scope="module")
def h200_against_h100():
    """The H200 reference compared with the H100's, once for the tests that read it (none changes it)."""
    return compare.compare_folders(str(H200), str(H100))


@pytest.fixture(scope="module")
def cross_steps(h200_against_h100):
    return {(x.workload, x.variant, x.size): x for x in cross_gpu.cross_steps(h200_against_h100)}


def test_dram_bound_steps_scale_with_the_measured_bandwidth_ratio(cross_steps):
    steps = cross_steps
    bw = lambda root: json.loads((root / "ceilings.json").read_text())["ceilings"]["d2d_copy"]["gb_per_s"]  # noqa: E731
    ratio = bw(H100) / bw(H200)
    assert 0.65 < ratio < 0.78  # HBM3 against HBM3e, as measured by the two runs' copies
    fused = steps[("cupy_sqdiff", "fused", 16384)]
    assert fused.limiter_a.startswith("memory: DRAM") and fused.rate_ratio == pytest.approx(ratio)
    assert fused.verdict == "scales with its limiter"
    assert fused.interval[1] < 1  # slower on the H100, as its bandwidth says
    # host-link steps do not care which of the two GPUs runs them
    pinned = steps[("pycuda_kernel", "pinned_async", 268435456)]
    assert pinned.resource.startswith("host link") and pinned.verdict == "scales with its limiter"
    assert 0.95 < pinned.speedup < 1.05
    # launch-bound steps have no rate to follow
    assert steps[("jax_matmul", "jit", 512)].verdict == "no single rate"


def test_an_issue_bound_gemm_is_placed_on_the_fp32_rate(cross_steps, h200_against_h100):
    """JAX float32 at 8192: cuBLAS' SIMT SGEMM is bound by the issue slots (87%), which the FP32 FMA
    loop measures: the step is placed on that rate, matched by (kind, unit), never by label text."""
    from analysis.model.limiter import Kind, Unit

    x = cross_steps[("jax_matmul", "float32", 8192)]
    assert x.resource is not None and x.resource.startswith("FP32 FMA rate")
    assert x.verdict in ("scales with its limiter", "does not follow its limiter")
    c = h200_against_h100
    s = next(s for s in c.steps if (s.base.workload, s.base.variant, s.base.size) == ("jax_matmul", "float32", 8192))
    assert s.base.limiter_class == (Kind.COMPUTE, Unit.ISSUE)


def test_a_step_off_its_limiters_rate_is_said_not_to_follow_it(h200_against_h100):
    c = h200_against_h100
    s = next(s for s in c.steps if (s.base.workload, s.base.variant, s.base.size) == ("cupy_sqdiff", "fused", 16384))
    # the same step with its candidate times halved: twice as fast on a GPU with 0.71x the bandwidth
    faster = [compare.Step(**{**r.__dict__, "times_ms": [t / 2 for t in r.times_ms]}) for r in s.cand_runs]
    planted = compare.StepComparison(s.base_runs, faster, compare.verdicts.compare_runs(
        [r.times_ms for r in s.base_runs], [r.times_ms for r in faster]))
    assert cross_gpu.cross_step(planted, str(H200), str(H100)).verdict == "does not follow its limiter"


# --- gzipped text records -------------------------------------------------------------------------


def test_a_reference_keeps_timed_records_and_raw_pages_gzipped_and_readers_take_either(tmp_path):
    run = H200 / "pycuda_kernel" / "vectorized" / "n268435456"
    # the run as a live run writes it: every capture plain
    src = tmp_path / "captures" / "pycuda_kernel" / "vectorized" / "n268435456"
    src.mkdir(parents=True)
    for f in ("nsys-run.json", "ncu-run.json"):
        shutil.copy2(run / f, src / f)
    for f in ("timing.json", "ncu-raw.csv", "nsys.sqlite"):
        with gzip.open(run / f"{f}.gz") as g, open(src / f, "wb") as out:
            shutil.copyfileobj(g, out)
    dst = tmp_path / "reports" / "reference" / "x"
    copied = copy_captures(str(tmp_path / "captures"), str(dst))
    kept = dst / "pycuda_kernel" / "vectorized" / "n268435456"
    assert {"pycuda_kernel/vectorized/n268435456/timing.json.gz",
            "pycuda_kernel/vectorized/n268435456/ncu-raw.csv.gz",
            "pycuda_kernel/vectorized/n268435456/nsys-run.json"} <= set(copied)
    assert not (kept / "timing.json").exists() and not (kept / "ncu-raw.csv").exists()
    # the plain path finds the gzipped copy, with the same content: the reference's own gzipped bytes
    assert load_json(str(kept / "timing.json")) == json.loads((src / "timing.json").read_text())
    assert (kept / "timing.json.gz").read_bytes() == (run / "timing.json.gz").read_bytes()
    assert [launch.metrics for launch in read_raw_csv(kept / "ncu-raw.csv")] == \
        [launch.metrics for launch in read_raw_csv(src / "ncu-raw.csv")]
    # a summary of the gzipped run reads its raw page (no ncu report kept) and equals the plain run's
    (src / "ncu.ncu-rep").unlink(missing_ok=True)
    assert summarize_run(str(kept))["ncu"] == summarize_run(str(src))["ncu"]
    # compare finds gzipped records
    assert compare.load_steps(str(dst))[("pycuda_kernel", "vectorized", 268435456)][0].times_ms == \
        json.loads((src / "timing.json").read_text())["times_ms"]


def test_a_damaged_gzipped_record_is_a_typed_error_naming_the_file(tmp_path):
    bad = tmp_path / "timing.json.gz"
    bad.write_bytes(gzip.compress(b'{"times_ms": [1, 2')[:-8])
    with pytest.raises(AnalysisInputError) as e:
        load_json(str(tmp_path / "timing.json"))
    assert "timing.json" in str(e.value)
