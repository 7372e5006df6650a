"""The GPU job records and reports/gpu_jobs.md, on records written on a host with two H200s:

- reports/reference/h200x2/gpu-jobs: `snakemake profile_all --config 'only_workloads=[pycuda_kernel]'
  gpus=2 --resources gpu=2 --cores 8`, Snakemake running the jobs, the suite's locks choosing GPUs;
- tests/data/gpu_jobs/slurm_h200x2: the lab handout's one-recipe run (cupy_sqdiff) through
  profiles/slurm on a single-node SLURM with both GPUs as gres, plus the hand-run `cold` command of
  the handout's section 4 inside `srun --pty`;
- tests/data/gpu_jobs/shared_gpu0: two `cold` runs started at once with CUDA_VISIBLE_DEVICES=0 set
  by hand, the misuse the shared-GPU verdict exists for.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.model import gpu_jobs
from analysis.common.errors import AnalysisInputError
from analysis.report.gpu_jobs_markdown import gpu_jobs_report
from workloads.registry import BY_NAME, recipe_facts
from workloads.tools.gpu_jobs import GpuCountError, check_gpu_count, parse_gpu_list

from conftest import REPO

LOCAL = REPO / "reports" / "reference" / "h200x2" / "gpu-jobs"
SLURM = REPO / "tests" / "data" / "gpu_jobs" / "slurm_h200x2"
SHARED = REPO / "tests" / "data" / "gpu_jobs" / "shared_gpu0"


def _raw(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _intervals_on_one_gpu_overlap(records: list[dict]) -> bool:
    """Straight from the JSON, independent of the reader: do two jobs on one UUID overlap?"""
    by_uuid: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        by_uuid.setdefault(r["gpu"]["uuid"], []).append((r["started_unix_ns"], r["ended_unix_ns"]))
    for spans in by_uuid.values():
        spans.sort()
        if any(b[0] < a[1] for a, b in zip(spans, spans[1:])):
            return True
    return False


def test_local_run_used_both_gpus_at_once_and_never_one_gpu_twice():
    jobs = gpu_jobs.load_gpu_jobs(str(LOCAL))
    s = gpu_jobs.summarize(jobs)
    assert {j.assigned_by for j in jobs} == {"lock"}
    assert len({j.gpu_uuid for j in jobs}) == 2 and None not in {j.gpu_uuid for j in jobs}
    assert s.max_concurrent == 2
    assert s.overlaps and {o.verdict for o in s.overlaps} == {"separate GPUs"}
    assert not s.shared and not s.failed
    assert not _intervals_on_one_gpu_overlap(_raw(LOCAL))
    assert {j.driver_version for j in jobs} == {"580.159.04"} and len({j.git_commit for j in jobs}) == 1
    # two GPUs side by side: the jobs' summed time exceeds the wall time
    assert s.job_s > 1.5 * s.wall_s


def test_local_run_holds_every_gpu_job_profile_all_makes_for_the_recipe():
    config = recipe_facts("pycuda_kernel")
    jobs = gpu_jobs.load_gpu_jobs(str(LOCAL))
    # the recipe's steps when these records were made (a step added since has no job in them)
    variants = [v for v in BY_NAME["pycuda_kernel"].variants if v != "streams"]
    by_tool: dict[str, list[str]] = {}
    for j in jobs:
        by_tool.setdefault(j.tool, []).append(j.what)
    size = config["sizes"][0]
    assert sorted(by_tool["timed"]) == sorted(f"pycuda_kernel/{v}/n{size}" for v in variants)
    assert sorted(by_tool["nsys"]) == sorted(f"pycuda_kernel/{v}/n{size}" for v in variants)
    assert sorted(by_tool["ncu"]) == sorted(f"pycuda_kernel/{v}/n{size}" for v in config["ncu"]["variants"])
    assert sorted(by_tool["coldwarm"]) == sorted(f"pycuda_kernel/{v}/n{config['coldwarm_size']}" for v in variants)
    assert by_tool["ceilings"] == ["tools.ceilings"]


def test_slurm_run_kept_the_gpus_slurm_assigned_and_ran_two_jobs_at_once():
    jobs = gpu_jobs.load_gpu_jobs(str(SLURM))
    s = gpu_jobs.summarize(jobs)
    assert {j.assigned_by for j in jobs} == {"scheduler"}
    # every job is a SLURM job of its own
    ids = [j.slurm_job_id for j in jobs]
    assert None not in ids and len(set(ids)) == len(ids)
    assert len({j.gpu_uuid for j in jobs}) == 2
    assert s.max_concurrent == 2 and not s.shared and s.overlaps
    assert not _intervals_on_one_gpu_overlap(_raw(SLURM))
    md = gpu_jobs_report([s], "figures/gpu_jobs.png")
    assert "| jobs scheduled by | SLURM |" in md
    # recorded before the records carried them
    assert "| driver | not recorded |" in md and "| suite commit | not recorded |" in md
    assert "never two on one GPU" in md


def test_two_jobs_pinned_to_one_gpu_by_hand_are_flagged():
    jobs = gpu_jobs.load_gpu_jobs(str(SHARED))
    s = gpu_jobs.summarize(jobs)
    assert [j.assigned_by for j in jobs] == ["scheduler", "scheduler"]
    [overlap] = s.shared
    assert overlap.seconds > 0 and overlap.first.gpu_uuid == overlap.second.gpu_uuid
    assert _intervals_on_one_gpu_overlap(_raw(SHARED))
    md = gpu_jobs_report([s], None)
    assert "Two profilers shared a GPU 1 time(s)" in md and "never two on one GPU" not in md


def test_runs_are_split_at_a_pause():
    both = gpu_jobs.load_gpu_jobs(str(LOCAL)) + gpu_jobs.load_gpu_jobs(str(SLURM))
    # the runs were minutes apart (the SLURM one first): one run at the default 30-minute gap; at
    # one minute, the SLURM pipeline, the handout's hand-run command 80 s after it, the local run
    assert len(gpu_jobs.split_runs(both)) == 1
    runs = gpu_jobs.split_runs(both, gap_ns=60 * 10**9)
    assert [len(r) for r in runs] == [len(list(SLURM.glob("*.json"))) - 1, 1, 19]
    assert [j.tool for j in runs[1]] == ["run"]
    md = gpu_jobs_report([gpu_jobs.summarize(r) for r in runs], None)
    assert "## Earlier runs in this work folder" in md and "29 jobs" in md


def test_command_is_named_by_recipe_variant_and_size_under_any_tool():
    raw = {r["tag"]: r for r in _raw(SLURM)}
    assert raw["ncu"]["argv"][0] == "ncu"
    assert gpu_jobs.describe_command(raw["ncu"]["argv"]).count("/") == 2
    assert gpu_jobs.describe_command(["python", "-m", "workloads.harness.ceilings", "--output", "x"]) == "harness.ceilings"
    # the records of runs before the harness package keep their module's name
    assert gpu_jobs.describe_command(["python", "-m", "workloads.tools.ceilings", "--output", "x"]) == "tools.ceilings"
    assert gpu_jobs.describe_command(["python", "-c", "pass"]) == "python"


def test_cli_writes_the_page_and_figure_and_warns_on_a_shared_gpu(tmp_path):
    out = tmp_path / "gpu_jobs.md"
    r = subprocess.run([sys.executable, "-m", "analysis", "gpu-jobs", "--records", str(SHARED), "--output", str(out),
                        "--figure", str(tmp_path / "figures" / "gpu_jobs.png")], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "shared GPU 0" in r.stderr
    assert "![GPU jobs by GPU and time](figures/gpu_jobs.png)" in out.read_text()
    assert (tmp_path / "figures" / "gpu_jobs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_broken_or_missing_record_names_the_file(tmp_path):
    with pytest.raises(AnalysisInputError, match="no GPU job records"):
        gpu_jobs.load_gpu_jobs(str(tmp_path))
    src = sorted(SHARED.glob("*.json"))[0]
    cut = tmp_path / src.name
    cut.write_text(src.read_text()[:200])  # a record cut short, as a full disk would leave it
    with pytest.raises(AnalysisInputError, match=src.name):
        gpu_jobs.load_gpu_jobs(str(tmp_path))
    record = json.loads(src.read_text())
    del record["gpu"]
    cut.write_text(json.dumps(record))
    with pytest.raises(AnalysisInputError, match="lacks gpu"):
        gpu_jobs.load_gpu_jobs(str(tmp_path))
    record["gpu"], record["record_version"] = None, 99
    cut.write_text(json.dumps(record))
    with pytest.raises(AnalysisInputError, match="record_version 99"):
        gpu_jobs.load_gpu_jobs(str(tmp_path))


def test_the_gpu_count_is_checked_against_nvidia_smi():
    """nvidia-smi's own list of the two-GPU host (the run's --query-gpu output)."""
    gpus = parse_gpu_list((REPO / "tests" / "data" / "gpu_jobs" / "local_h200x2_gpus.csv").read_text())
    assert [g["index"] for g in gpus] == [0, 1]
    # the same GPUs the run's records name
    assert {g["uuid"] for g in gpus} == {j.gpu_uuid for j in gpu_jobs.load_gpu_jobs(str(LOCAL))}
    check_gpu_count(2, gpus, "vm")
    with pytest.raises(GpuCountError, match="config gpus=3, but nvidia-smi lists 2 GPU"):
        check_gpu_count(3, gpus, "vm")
    check_gpu_count(8, [], "a host without nvidia-smi")  # nothing to check against


def test_gpus_are_listed_in_number_order():
    labels = ["GPU 10 (00000000:8A:00.0)", "GPU 2 (00000000:1B:00.0)", "GPU 1 (00000000:0A:00.0)"]
    assert sorted(labels, key=gpu_jobs.gpu_label_order) == [labels[2], labels[1], labels[0]]


def test_a_half_written_record_is_not_read(tmp_path):
    shutil.copytree(SHARED, tmp_path / "jobs")
    (tmp_path / "jobs" / ".1-vm-1.json.tmp").write_text("{")
    assert len(gpu_jobs.load_gpu_jobs(str(tmp_path / "jobs"))) == 2


def _driver_samples() -> dict[float, list[tuple[str, int]]]:
    """`nvidia-smi --query-compute-apps=gpu_uuid,pid,...` every 0.5 s during the local run, each line
    prefixed with the host's Unix time just before the query (tests/data/gpu_jobs/)."""
    samples: dict[float, list[tuple[str, int]]] = {}
    path = REPO / "tests" / "data" / "gpu_jobs" / "local_h200x2_compute_apps.csv"
    for line in path.read_text().splitlines():
        t, uuid, pid, _name, _memory = line.split(", ")
        samples.setdefault(float(t), []).append((uuid, int(pid)))
    return samples


def test_the_driver_saw_what_the_records_say():
    """Independent of the suite: every process the driver listed ran on a GPU that a record says
    a job held at that moment; at no moment were two processes on one GPU; and often one on each."""
    jobs = gpu_jobs.load_gpu_jobs(str(LOCAL))
    samples = _driver_samples()
    slack_ns = 0.5e9  # the sample's time is taken just before nvidia-smi queries the driver
    assert len(samples) > 100
    for t, procs in samples.items():
        t_ns = t * 1e9
        for uuid, pid in procs:
            assert any(j.gpu_uuid == uuid and j.started_ns - slack_ns <= t_ns <= j.ended_ns + slack_ns
                       for j in jobs), f"pid {pid} on {uuid} at {t}: no job recorded there"
        uuids = [u for u, _ in procs]
        assert len(uuids) == len(set(uuids)), f"two processes on one GPU at {t}: {procs}"
    both = sum(1 for procs in samples.values() if len({u for u, _ in procs}) == 2)
    assert both > len(samples) / 2


@pytest.mark.parametrize("field,value", [
    ("started_unix_ns", "soon"), ("ended_unix_ns", 1.5), ("argv", "python -m x"), ("gpu", "GPU 0"),
    ("gpu", {"index": "zero", "uuid": "GPU-1", "pci_bus_id": "0", "name": "H200"}), ("returncode", "0"),
    ("host", None), ("tag", ["nsys"]),
])
def test_a_record_with_a_wrong_field_type_names_the_file_and_field(tmp_path, capsys, field, value):
    """Wrong field types gave six different tracebacks, none naming the file (issue 20)."""
    src = sorted(SHARED.glob("*.json"))[0]
    record = json.loads(src.read_text())
    record[field] = value
    (tmp_path / src.name).write_text(json.dumps(record))
    with pytest.raises(AnalysisInputError, match=rf"{src.name}.*field {field}"):
        gpu_jobs.load_gpu_jobs(str(tmp_path))
    from analysis.cli.main import main
    assert main(["gpu-jobs", "--records", str(tmp_path), "--output", str(tmp_path / "o.md"),
                 "--figure", str(tmp_path / "o.png")]) == 2
    assert src.name in capsys.readouterr().err and not (tmp_path / "o.md").exists()


def test_every_committed_record_matches_the_schema():
    for folder in (LOCAL, SLURM, SHARED):
        assert gpu_jobs.load_gpu_jobs(str(folder))


def test_a_one_gpu_run_that_took_turns_says_so_in_its_verdict():
    """The H200 reference's full run: four jobs in flight on one GPU, their turns never overlapping."""
    from conftest import REPO

    s = gpu_jobs.summarize(gpu_jobs.load_gpu_jobs(str(REPO / "reports" / "reference" / "h200" / "gpu-jobs")))
    assert s.max_concurrent > 1 and not s.overlaps and len(s.gpus) == 1
    md = gpu_jobs_report([s], None)
    assert f"Up to {s.max_concurrent} jobs at once, never two holding a GPU together" in md
    assert "pairs of jobs held GPUs" not in md and "shared a GPU" not in md
