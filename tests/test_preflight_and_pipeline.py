"""Preflight stops profile_all on a machine without a GPU or profilers; the pipeline parses;
the committed reports are reproducible from the committed captures."""
from __future__ import annotations

import os
import shutil

import pytest

from workloads.harness import preflight

from conftest import copy_checkout
import snakemake_forks



def test_preflight_names_everything_missing_and_writes_nothing(tmp_path, no_gpu_env, capsys):
    out = tmp_path / "preflight.json"
    rc = preflight.main(["--nsys", "nsys", "--ncu", "/opt/none/ncu", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "no NVIDIA GPU" in err
    assert "--config nsys=" in err and "NSYS" in err
    assert "--config ncu=" in err and "NCU" in err
    assert not out.exists()


def _repo_copy(tmp_path, reference=()):
    """A copy of the tracked tree, so that pipeline runs leave the checkout alone."""
    return copy_checkout(tmp_path / "repo", reference=reference)


@pytest.fixture(scope="module")
def planning_copy(tmp_path_factory):
    """One copy of the checkout for the dry runs below, which only read it."""
    return _repo_copy(tmp_path_factory.mktemp("planning"))


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_profile_all_stops_at_preflight_without_a_gpu(tmp_path):
    repo = _repo_copy(tmp_path)
    env = dict(os.environ, NSYS="/nonexistent/nsys", NCU="/nonexistent/ncu")
    r = snakemake_forks.run(["profile_all"], repo, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    # once: Snakemake shows the failed job's log; the preflight does not echo it to the console too
    assert out.count("preflight: profile_all cannot run here") == 1, out
    assert out.count("no NVIDIA GPU") == 1 and "/nonexistent/nsys" in out
    assert "snakemake rebuild_reports" in out
    # nothing half-written that looks valid
    assert not (repo / "results" / "captures" / "preflight.json").exists()
    assert not list((repo / "results").glob("captures/*/*/*/timing.json"))


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_kernel_page_preflight_names_kernel_page_and_its_no_gpu_rebuild(tmp_path):
    repo = _repo_copy(tmp_path)
    env = dict(os.environ, NSYS="/nonexistent/nsys", NCU="/nonexistent/ncu")
    r = snakemake_forks.run(["kernel_page", "--config", "kernel_workload=warp_sph", "kernel_variant=baseline",
                             "kernel_name=get_acceleration"], repo, env=env, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert out.count("preflight: kernel_page cannot run here") == 1, out
    assert "profile_all" not in out
    assert "snakemake rebuild_kernel_pages" in out


def test_profile_all_dry_run_says_once_which_recipes_it_skips(planning_copy):
    repo = planning_copy
    skipped = {w: why for w, why in preflight.recipe_availability().items() if why}
    r = snakemake_forks.run(["-n", "profile_all"], repo, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    if not skipped:
        assert "profile_all skips" not in out
        return
    assert out.count("profile_all skips") == 1, out
    for w, why in skipped.items():
        assert out.count(f"  - {w}: {why}") == 1, (w, out)
    # only what profile_all asks for: other targets stay quiet
    r = snakemake_forks.run(["-n", "rebuild_kernel_pages"], repo, timeout=300)
    assert r.returncode == 0 and "profile_all skips" not in r.stdout + r.stderr


def test_config_schema_rejects_a_typo(planning_copy):
    repo = planning_copy
    r = snakemake_forks.run(["-n", "rebuild_reports", "--config", "work_dir=/"], repo, timeout=300)
    assert r.returncode != 0
    assert "work_dir" in r.stdout + r.stderr


@pytest.mark.slow
def test_rebuild_reports_reproduces_the_committed_markdown(tmp_path):
    # the rebuild only reads the reference captures
    repo = _repo_copy(tmp_path, reference="link")
    # the rebuild's jobs run on the CPU and write files of their own: as many at once as there are
    # cores (the default profile's one job at a time is for the GPU jobs)
    r = snakemake_forks.run(["rebuild_reports", "--cores", "all"], repo, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (repo / "results" / "reports" / "reference" / "CHECKED").exists()
    assert "equal the committed ones" in r.stdout + r.stderr
    # the same command rebuilds and checks the other GPU's reference (rules/config.yaml: more_references)
    assert "rebuild_reports: the reference of rules/reference_h100.yaml" in r.stdout + r.stderr
    assert (repo / "results" / "h100" / "reports" / "reference" / "CHECKED").exists()
    assert "equal the committed ones" in (repo / "results" / "logs" / "rebuild_reference_h100.log").read_text()
    # and it would notice a difference: the check run again on the same rebuilt pages (-F would rebuild
    # every page, the same bytes, for another minute), asked for by its file so that the other
    # reference's workflow is not started again
    md = repo / "reports" / "cupy_sqdiff.md"
    md.write_text(md.read_text().replace("faster", "slower", 1))
    r = snakemake_forks.run(["results/reports/reference/CHECKED", "--forcerun", "check_rebuild"], repo, timeout=600)
    assert r.returncode != 0
    assert "differ from the committed ones" in r.stdout + r.stderr


def _plan_with_cupy(repo, tmp_path, *args):
    """A dry run of profile_all in a copy of the checkout, with cupy and rmm importable (empty
    modules: only the names are checked) so that the CuPy recipe is planned."""
    fake = tmp_path / "fakemods"
    for mod in ("cupy", "rmm"):
        (fake / mod).mkdir(parents=True)
        (fake / mod / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=str(fake))
    r = snakemake_forks.run(["-n", "-p", "profile_all", *args], repo, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r


def test_laptop_profile_plans_smaller_runs(planning_copy, tmp_path):
    r = _plan_with_cupy(planning_copy, tmp_path, "--profile", "profiles/laptop")
    assert "cupy_sqdiff/fused/n8192/timing.json" in r.stdout
    assert "n16384" not in r.stdout


def test_the_smoke_preset_plans_the_smallest_runs(planning_copy, tmp_path):
    """--config preset=smoke: every recipe's `smoke` facts (workloads/<recipe>/profile.yaml)."""
    r = _plan_with_cupy(planning_copy, tmp_path, "--config", "preset=smoke")
    assert "cupy_sqdiff/fused/n1024/timing.json" in r.stdout and "warp_sph/graph/n2000/timing.json" in r.stdout
    assert "n4096" not in r.stdout and "n16384" not in r.stdout and "n62500" not in r.stdout


def test_the_preflight_job_is_the_same_whatever_the_target(tmp_path):
    """The preflight's command names no target (the message reads them from the environment the
    pipeline's onstart sets): with the target as a param, `snakemake capture_reference` after
    `snakemake profile_all` found the preflight's params changed and ran it again, and after it every
    GPU job, whose inputs include its record."""
    from test_cold import _planned_shell_lines

    def preflight_command(target):
        lines = _planned_shell_lines(tmp_path / target, [target])
        return [line.strip() for line in lines if "-m workloads.harness.preflight " in line]

    [profile_all] = preflight_command("profile_all")
    assert "--target" not in profile_all
    assert preflight_command("capture_reference") == [profile_all]
