"""analysis.cli.pipeline_time on real GPU job records: the two-GPU pipeline run of
pycuda_kernel (reports/reference/h200x2/gpu-jobs) and the SLURM run (tests/data/gpu_jobs)."""
from __future__ import annotations

import glob
import json
import shutil
import subprocess
import sys

import pytest

from analysis.model import gpu_jobs
from conftest import REPO
from analysis.cli import pipeline_time

TWO_GPU_RUN = REPO / "reports" / "reference" / "h200x2" / "gpu-jobs"
SLURM_RUN = REPO / "tests" / "data" / "gpu_jobs" / "slurm_h200x2"


def _printed(capsys, *argv) -> str:
    """What ``python -m analysis.cli.pipeline_time ARGV`` prints, from its entry point in this process (the
    command's exit status and stderr as a process are the refusal tests')."""
    capsys.readouterr()
    assert pipeline_time.main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


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
    out = subprocess.run([sys.executable, "-m", "analysis.cli.pipeline_time", str(TWO_GPU_RUN)],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "| kind | jobs | GPU-job s |" in out and "| recipe/variant |" in out and "wall" in out
    bad = subprocess.run([sys.executable, "-m", "analysis.cli.pipeline_time", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no GPU job records" in bad.stderr


H100_REFERENCE = REPO / "reports" / "reference" / "h100"


def _record_files(kind_file: str) -> list[str]:
    return sorted(glob.glob(str(H100_REFERENCE / "*" / "*" / "n*" / f"{kind_file}*")))


def test_phases_add_up_to_the_run_records_of_the_h100_reference():
    """The phase tables of one real run (the H100 reference's records): one row per kind with as many
    runs as it has records, each phase the records' own seconds summed, the same total by recipe."""
    import gzip

    by_kind, by_recipe = pipeline_time.phases(str(H100_REFERENCE))
    kinds = {r.key: r for r in by_kind}
    assert set(kinds) == {"timed", "nsys", "ncu"}
    for name, kind in pipeline_time.RECORD_KINDS.items():
        files = _record_files(name)
        assert kinds[kind].runs == len(files) > 10
        records = [json.load(gzip.open(f, "rt") if f.endswith(".gz") else open(f)) for f in files]
        assert kinds[kind].seconds["setup"] == pytest.approx(sum(r["host_wall_s"]["setup"] for r in records))
    timed = [json.load(gzip.open(f, "rt")) for f in _record_files("timing.json")]
    assert kinds["timed"].seconds["sampling"] == pytest.approx(sum(r["sampling"]["elapsed_s"] for r in timed))
    # profiled calls only where a profiler ran them; ncu's replays make them its largest phase
    assert kinds["timed"].seconds["compute"] == 0 and kinds["ncu"].seconds["compute"] == max(kinds["ncu"].seconds.values())
    total = sum(sum(r.seconds.values()) for r in by_kind)
    assert sum(sum(r.seconds.values()) for r in by_recipe) == pytest.approx(total)
    assert {r.key for r in by_recipe} == {"cudf_groupby", "cupy_sqdiff", "jax_matmul", "numba_ufunc",
                                          "pycuda_kernel", "warp_sph"}


def test_command_line_prints_the_phases_of_a_reference_alone(tmp_path, capsys):
    out = _printed(capsys, "--captures", H100_REFERENCE)
    assert out.startswith("## Phases inside the runs")
    assert "| kind | runs |" in out and "| setup s | warm-up s | timed samples s |" in out
    empty = subprocess.run([sys.executable, "-m", "analysis.cli.pipeline_time", "--captures", str(tmp_path)],
                           capture_output=True, text=True, cwd=REPO)
    assert empty.returncode == 2 and "no run records" in empty.stderr
    neither = subprocess.run([sys.executable, "-m", "analysis.cli.pipeline_time"], capture_output=True, text=True,
                             cwd=REPO)
    assert neither.returncode == 2 and "give RESULTS_DIR, --captures DIR, or both" in neither.stderr


H200_REFERENCE = REPO / "reports" / "reference" / "h200"


def test_ncu_replays_sum_what_ncu_recorded_of_each_launch(tmp_path):
    """Each profiled step of the H200 reference: its launches' passes and saved bytes, as ncu recorded them
    (read here straight from the report), beside the profiled call's time from the run's own record."""
    import gzip
    import shutil

    from analysis.readers import ncu
    from analysis.readers.ncu_child import import_ncu_report
    from analysis.model.run_summary import load_json

    rows = pipeline_time.ncu_replays(str(H200_REFERENCE))
    assert [r.call_s for r in rows] == sorted((r.call_s for r in rows), reverse=True)
    assert len(rows) == len(list(H200_REFERENCE.glob("*/*/n*/ncu.ncu-rep.gz")))
    by_step = {r.step: r for r in rows}
    ncu_report = import_ncu_report()
    for step in ("cudf_groupby/agg_all/n50000000", "warp_sph/plane_threads/n62500"):
        plain = tmp_path / "report.ncu-rep"
        with gzip.open(H200_REFERENCE / step / "ncu.ncu-rep.gz") as f, open(plain, "wb") as out:
            shutil.copyfileobj(f, out)
        ctx = ncu_report.load_report(str(plain))
        actions = [ctx.range_by_idx(i).action_by_idx(j) for i in range(ctx.num_ranges())
                   for j in range(ctx.range_by_idx(i).num_actions())]
        row = by_step[step]
        assert row.launches == len(actions)
        assert row.passes == sum(a.metric_by_name("profiler__replayer_passes").as_uint64() for a in actions)
        assert row.backed_up_bytes == pytest.approx(
            sum(a.metric_by_name("profiler__replayer_bytes_mem_backed_up.sum").as_double() for a in actions))
        assert row.call_s == load_json(str(H200_REFERENCE / step / "ncu-run.json"))["host_wall_s"]["compute"]
        assert row.ms_per_pass == pytest.approx(row.call_s / row.passes * 1e3)
    # the replay record is read, never asked of ncu: it is in every report whatever was collected
    assert set(ncu.REPLAY_METRICS) <= set(ncu.read_metrics())
    assert not set(ncu.REPLAY_METRICS) & set(",".join(ncu.metrics_only_args()).split(","))


def test_command_line_prints_the_replays_only_when_asked(tmp_path, capsys):
    out = _printed(capsys, "--captures", H200_REFERENCE, "--ncu")
    assert "## Nsight Compute's replays" in out and "| cudf_groupby/agg_all/n50000000 | full_set_less | 1 |" in out
    assert "Nsight Compute's replays" not in _printed(capsys, "--captures", H200_REFERENCE)


ONE_GPU_RUN = H200_REFERENCE / "gpu-jobs"


def test_a_turn_whose_process_died_ends_when_another_job_takes_the_gpu():
    """The H200 reference's full run: JAX's platform-allocator setting crashed under nsys, so its
    turn has no end of its own; its record bounds it by the experiment's next turn, 12 s later. The
    GPU's lock is exclusive, so the timed run that took the GPU meanwhile ends that turn: no two jobs
    held the GPU at once, and the experiment's held time counts only its processes' turns."""
    raw = [gpu_jobs.parse_record(p) for p in sorted(glob.glob(str(ONE_GPU_RUN / "*.json")))]
    (crashed,) = [j for j in raw if any(j.turn_end_unknown)]
    assert crashed.what == "jax_matmul.exp_allocator"
    assert any(o.verdict == "shared GPU" for o in gpu_jobs.overlaps(raw))  # the record's bound alone
    jobs = gpu_jobs.load_gpu_jobs(str(ONE_GPU_RUN))
    assert not gpu_jobs.overlaps(jobs)
    bounded = next(j for j in jobs if j.path == crashed.path)
    i = crashed.turn_end_unknown.index(True)
    start, end = bounded.turns[i]
    next_taker = min(s for j in jobs if j.path != crashed.path for s, _ in j.held if s > start)
    assert end == next_taker < crashed.turns[i][1]
    assert bounded.held_s < crashed.held_s
    # the union of held times, the run's GPU busy time, barely changes: others held the GPU meanwhile
    assert pipeline_time.budget(jobs).busy_s == pytest.approx(pipeline_time.budget(raw).busy_s, abs=0.01)


HANDED_RUN = REPO / "tests" / "data" / "pipeline_time_h200_handed"


def _startups(folder):
    jobs = gpu_jobs.load_gpu_jobs(str(folder / "gpu-jobs"))
    return pipeline_time.startups(jobs, str(folder))


@pytest.mark.parametrize("folder", [H100_REFERENCE, HANDED_RUN], ids=["whole_job_h100", "handed_turns_h200"])
def test_start_ups_set_each_jobs_gpu_time_against_its_processes_first_results(folder):
    """Per cold/warm job: its held time is its record's (the whole job, or its turns), its measured
    time the record's launch-to-first-result times; a process measures inside what the job held."""
    rows, missing = _startups(folder)
    assert missing == ()
    records = {f"{r['argv'][2].split('.')[1]}/{r['argv'][4]}": r for r in _records(folder / "gpu-jobs")
               if r["tag"] == "coldwarm"}
    assert {r.step for r in rows} == set(records) and len(rows) == 11
    for row in rows:
        record = records[row.step]
        spans = record.get("gpu_turns") or [record]
        assert row.held_s == pytest.approx(sum(s["ended_unix_ns"] - s["started_unix_ns"] for s in spans) / 1e9)
        coldstart = json.loads((folder / "coldstart" / f"{row.step.replace('/', '_')}.json").read_text())
        measured = [r["phases"]["time_to_first_result_s"] for r in coldstart["runs"].values() if "phases" in r]
        assert row.processes == len(measured) and row.measured_s == pytest.approx(sum(measured))
        assert 0 < row.beyond_s < row.held_s
    # worst first
    assert [r.beyond_s for r in rows] == sorted((r.beyond_s for r in rows), reverse=True)


def test_handed_turns_hold_the_gpu_for_less_beyond_the_start_ups_than_whole_jobs():
    """The handed turns' run (H200) against the H100 reference (jobs holding the GPU from start to end),
    the same eleven steps: less GPU time beyond the measured start-ups in every JAX-free step."""
    whole = {r.step: r for r in _startups(H100_REFERENCE)[0]}
    handed = {r.step: r for r in _startups(HANDED_RUN)[0]}
    assert set(whole) == set(handed)
    assert sum(r.beyond_s for r in handed.values()) < 0.5 * sum(r.beyond_s for r in whole.values())
    assert all(handed[s].beyond_s < whole[s].beyond_s for s in handed if not s.startswith("jax_matmul/"))


def test_command_line_prints_the_start_ups_and_names_a_job_whose_record_is_missing(tmp_path, capsys):
    """A work folder as the pipeline lays it out (gpu-jobs/, captures/coldstart/) whose steps wrote no
    run record yet: the start-ups, and a line instead of the phases."""
    run = tmp_path / "results"
    shutil.copytree(HANDED_RUN / "gpu-jobs", run / "gpu-jobs")
    shutil.copytree(HANDED_RUN / "coldstart", run / "captures" / "coldstart")
    (run / "captures" / "coldstart" / "cupy_sqdiff_fused.json").unlink()
    out = _printed(capsys, run)
    assert f"No step's run records in {run / 'captures'} yet: no phases." in out
    assert "| recipe/variant | processes | launch to first result s | GPU held s | GPU held beyond s |" in out
    assert "Left out, their record not written yet: cupy_sqdiff/fused." in out
    assert "| cupy_sqdiff/baseline | 3 |" in out and "| all | 25 |" in out
