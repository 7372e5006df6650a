"""workloads.tools.pipeline_time on real GPU job records: the two-GPU pipeline run of
pycuda_kernel (reports/reference/h200x2/gpu-jobs) and the SLURM run (tests/data/gpu_jobs)."""
from __future__ import annotations

import glob
import json
import subprocess
import sys

import pytest

from analysis import gpu_jobs
from conftest import REPO
from workloads.tools import pipeline_time

TWO_GPU_RUN = REPO / "reports" / "reference" / "h200x2" / "gpu-jobs"
SLURM_RUN = REPO / "tests" / "data" / "gpu_jobs" / "slurm_h200x2"


def _records(folder) -> list[dict]:
    return [json.loads(open(p).read()) for p in sorted(glob.glob(str(folder / "*.json")))]


@pytest.mark.parametrize("folder", [TWO_GPU_RUN, SLURM_RUN], ids=["two_gpus", "slurm"])
def test_every_table_adds_up_to_the_records(folder):
    records = _records(folder)
    b = pipeline_time.budget(gpu_jobs.load_gpu_jobs(str(folder)))
    total = sum(r["ended_unix_ns"] - r["started_unix_ns"] for r in records) / 1e9
    assert b.jobs == len(records)
    assert b.job_s == pytest.approx(total)
    for rows in (b.by_kind, b.by_recipe):
        assert sum(r.job_s for r in rows) == pytest.approx(total)
        assert sum(r.jobs for r in rows) == len(records)
    assert {r.key for r in b.by_kind} == {r["tag"] for r in records}
    # rows are sorted by time, the most first
    assert [r.job_s for r in b.by_variant] == sorted((r.job_s for r in b.by_variant), reverse=True)
    assert b.busy_s <= b.wall_s + 1e-9


def test_two_gpus_ran_the_jobs_in_about_half_their_sum():
    """The run that put two jobs at once on two GPUs: the wall is the union, about half the sum."""
    b = pipeline_time.budget(gpu_jobs.load_gpu_jobs(str(TWO_GPU_RUN)))
    assert b.gpus == 2
    assert b.wall_s < 0.6 * b.job_s
    assert b.busy_s == pytest.approx(b.wall_s, rel=0.02)  # jobs followed each other on both GPUs
    baseline = next(r for r in b.by_variant if r.key == "pycuda_kernel/baseline")
    assert baseline.jobs == 4  # timed, nsys, ncu, coldwarm


def test_suite_jobs_are_not_a_recipe():
    b = pipeline_time.budget(gpu_jobs.load_gpu_jobs(str(TWO_GPU_RUN)))
    assert {r.key for r in b.by_recipe} == {"pycuda_kernel", "(suite)"}


def test_command_line_prints_the_tables_and_refuses_a_folder_without_records(tmp_path):
    out = subprocess.run([sys.executable, "-m", "workloads.tools.pipeline_time", str(TWO_GPU_RUN)],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "| kind | jobs | GPU-job s |" in out and "| recipe/variant |" in out and "wall" in out
    bad = subprocess.run([sys.executable, "-m", "workloads.tools.pipeline_time", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no GPU job records" in bad.stderr
