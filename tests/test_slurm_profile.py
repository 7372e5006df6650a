"""profiles/slurm: every GPU rule asks SLURM for one GPU and the analysis runs on the submit host
(checked on the rules and on a dry run); and a real single-node SLURM runs part of the workflow
through the profile: jobs submitted with sbatch, followed with squeue, logged by SLURM, with the
same outputs as a local run; a GPU job sees the GPU SLURM gave it, not one the suite picked.

The real-SLURM test needs Debian's slurm-wlm and munge and root (tests/slurm_cluster.py). Where
they are missing it is skipped, except with COOKBOOK_REQUIRE_SLURM=1 (set by .ci/run), where it
fails instead: CI must run it.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import slurm_cluster
from conftest import REPO, copy_checkout
import snakemake_forks
from workloads import settings

SNAKEMAKE = [sys.executable, "-m", "snakemake"]
PROFILE = REPO / "profiles" / "slurm" / "config.yaml"
SITE_ENV = ("COOKBOOK_SLURM_PARTITION", "COOKBOOK_SLURM_ACCOUNT", "COOKBOOK_SLURM_GPU_TYPE")
#: the code and settings a pipeline run reads; the reference captures are copied per test
WORKFLOW_PARTS = ("Snakefile", "rules", "profiles", "workloads", "analysis", "profiles/environment-cuda12.yml",
                  "environment.yml")
#: a rule runs on a GPU when its command runs the suite's GPU code (workloads, its tools)
RUNS_GPU_CODE = re.compile(r"-m workloads\.")
GRES_ONE_GPU = re.compile(r"^gpu(:[A-Za-z0-9_.]+)?:1$")


def _copy_workflow(dst: Path, reference_runs: str | tuple[str, ...] = ()) -> Path:
    """The workflow's files (tracked and new, not ignored) into dst, and the named folders of the
    reference captures ("link": all of them, linked), so that runs leave the checkout alone."""
    return copy_checkout(dst, WORKFLOW_PARTS, reference_runs)


def _render_profile(env: dict[str, str]) -> dict:
    """The profile as Snakemake reads it: a YTE template rendered in the given environment."""
    import yte

    saved = {k: os.environ.pop(k) for k in SITE_ENV if k in os.environ}
    try:
        os.environ.update(env)
        with open(PROFILE) as f:
            return yte.process_yaml(f, require_use_yte=True)
    finally:
        for k in env:
            os.environ.pop(k, None)
        os.environ.update(saved)


# --- the profile against the rules (no SLURM needed) --------------------------------------------

RULE_DUMP = """\
include: "Snakefile"
import json as _json
_json.dump([{"name": r.name, "shell": r.shellcmd or "", "norun": bool(r.norun),
             "declared_gpu": r.resources.get("gpu") if isinstance(r.resources.get("gpu"), int) else None,
             "envmodules": list(r.env_modules.names) if r.env_modules else []}
            for r in workflow.rules], open(os.environ["COOKBOOK_RULE_DUMP"], "w"))
"""


@pytest.fixture(scope="module")
def rules(tmp_path_factory):
    """Every rule of the workflow (name, shell command, declared gpu, environment modules), read by
    Snakemake itself with a site configuration that names two modules."""
    # dry runs only: the reference captures are looked at, never written
    wf = _copy_workflow(tmp_path_factory.mktemp("workflow"), "link")
    (wf / "dump.smk").write_text(RULE_DUMP)
    (wf / "site.yaml").write_text("cluster:\n  envmodules: [cuda/13.0, nsight-compute/2025.3.1]\n")
    r = snakemake_forks.run(["-s", "dump.smk", "--configfile", "site.yaml", "--list-rules"], wf, timeout=120,
                            env=dict(os.environ, COOKBOOK_RULE_DUMP=str(wf / "rules.json")))
    assert r.returncode == 0, r.stderr[-3000:]
    config = yaml.safe_load((wf / "rules" / "config.yaml").read_text())
    return {"rules": {d["name"]: d for d in json.loads((wf / "rules.json").read_text())},
            "local": set(config["cluster"]["local_rules"]), "workflow": wf}


def test_every_gpu_rule_asks_slurm_for_one_gpu_and_nothing_else_is_submitted(rules):
    profile = _render_profile({})
    gpu_rules = {n for n, d in rules["rules"].items() if RUNS_GPU_CODE.search(d["shell"])}
    assert {"preflight", "ceilings", "timed", "nsys", "ncu", "coldwarm", "nsys_multiprocess"} <= gpu_rules
    # the rules that declare a GPU for Snakemake's own count are GPU rules by this test's rule too
    assert {n for n, d in rules["rules"].items() if d["declared_gpu"]} <= gpu_rules
    # exactly the GPU rules have a GPU request: none forgotten, none stale
    assert set(profile["set-resources"]) == gpu_rules
    for name, res in profile["set-resources"].items():
        assert GRES_ONE_GPU.match(eval(res["gres"])), (name, res)  # the profile quotes strings for Snakemake
        # SLURM hands out the GPUs; Snakemake's own GPU count must not serialize the cluster's jobs
        assert res["gpu"] == 0, name
        assert res["runtime"] > 0 and res["mem_mb"] > 0 and res["cpus_per_task"] >= 1, name
    # every other rule runs on the submit host: the analysis and reports, and the targets
    submitted = {n for n, d in rules["rules"].items() if n not in rules["local"] and not d["norun"]}
    assert submitted == gpu_rules
    assert not gpu_rules & rules["local"], "a GPU rule would run on the login node"
    for name, d in rules["rules"].items():
        if "-m analysis" in d["shell"]:
            assert name in rules["local"], name


def test_gpu_and_profiler_rules_load_the_configured_modules(rules):
    modules = ["cuda/13.0", "nsight-compute/2025.3.1"]
    for name, d in rules["rules"].items():
        uses_profiler = "params.nsys" in d["shell"] or "params.ncu" in d["shell"]
        if RUNS_GPU_CODE.search(d["shell"]) or uses_profiler:
            assert d["envmodules"] == modules, name
        else:
            assert d["envmodules"] == [], name


def test_site_settings_come_from_the_environment():
    default = _render_profile({})
    assert default["executor"] == "slurm"
    assert eval(default["default-resources"]["slurm_partition"]) == "gpu"  # the placeholder
    assert "slurm_account" not in default["default-resources"]  # the plugin's guess, or none
    assert eval(default["set-resources"]["ncu"]["gres"]) == "gpu:1"
    site = _render_profile({"COOKBOOK_SLURM_PARTITION": "all", "COOKBOOK_SLURM_ACCOUNT": "proj7",
                            "COOKBOOK_SLURM_GPU_TYPE": "h200"})
    # quoted: a partition called `all` must not turn into Python's all()
    assert eval(site["default-resources"]["slurm_partition"]) == "all"
    assert eval(site["default-resources"]["slurm_account"]) == "proj7"
    assert {eval(r["gres"]) for r in site["set-resources"].values()} == {"gpu:h200:1"}


def _dry_run_jobs(wf: Path, target: str) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in SITE_ENV}
    env["COOKBOOK_SLURM_PARTITION"] = "p1"
    r = snakemake_forks.run(["--profile", "profiles/slurm", "-n", "--forceall", target], wf, timeout=120, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    jobs = []
    # a checkpoint's job (the preflight) is printed as "checkpoint <name>:"
    for block in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) \w+:\n)", r.stdout):
        m = re.match(r"(local)?(?:rule|checkpoint) (\w+):\n", block)
        if not m:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        jobs.append({"local": bool(m.group(1)), "rule": m.group(2), **fields})
    return jobs


def test_dry_run_through_the_profile(rules):
    """What the executor is given for each job of a whole run: one GPU and the site's partition for
    the GPU jobs; and no two jobs write the same file."""
    jobs = _dry_run_jobs(rules["workflow"], "profile_all")
    # the ncu captures wait on the preflight's counter check (a checkpoint: none without counters),
    # so a dry run of the whole run cannot list them yet: one is dry-run as a target of its own
    jobs += [j for j in _dry_run_jobs(rules["workflow"], "results/captures/numba_ufunc/baseline/n268435456/ncu.ncu-rep")
             if j["rule"] == "ncu"]
    # numba_ufunc imports without a GPU, so this machine's DAG has GPU jobs
    assert {"preflight", "ceilings", "timed", "nsys", "ncu", "coldwarm"} <= {j["rule"] for j in jobs}
    for j in jobs:
        if RUNS_GPU_CODE.search(rules["rules"][j["rule"]]["shell"]):
            res = dict(kv.split("=", 1) for kv in j["resources"].split(", "))
            assert res["gres"] == "gpu:1" and res["gpu"] == "0", j
            assert res["slurm_partition"] == "p1", j
        else:
            assert j["rule"] in rules["local"] or rules["rules"][j["rule"]]["norun"], j["rule"]
    written = [f for j in jobs for key in ("output", "log") if key in j for f in j[key].split(", ")]
    assert len(written) == len(set(written)), "two jobs write the same file"
    # the rebuild from the committed captures needs no GPU and submits nothing
    for j in _dry_run_jobs(rules["workflow"], "rebuild_reports"):
        assert j["rule"] in rules["local"] or rules["rules"][j["rule"]]["norun"], j["rule"]


# --- a real SLURM ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    reason = slurm_cluster.why_unavailable()
    if reason is None and importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        reason = "snakemake-executor-plugin-slurm is not installed"
    if reason is not None:
        if settings.flag("COOKBOOK_REQUIRE_SLURM"):
            pytest.fail(f"COOKBOOK_REQUIRE_SLURM=1 but no test SLURM here: {reason}")
        pytest.skip(reason)
    try:
        c = slurm_cluster.start_cluster()
    except slurm_cluster.ClusterError as e:
        pytest.fail(f"the test SLURM did not start: {e}")
    try:
        yield c
    finally:
        problems = c.stop()
        slurm_cluster.remove(c)
        assert not problems, problems


PROBE_RULES = """\
include: "Snakefile"


rule gpu_probe:
    \"\"\"A GPU rule's situation in its SLURM job: the cold runner, told of two GPUs, keeps the one
    SLURM assigned; the site's environment modules are loaded.\"\"\"
    output:
        "probe/gpu_probe.json",
    log:
        "probe/gpu_probe.log",
    params:
        cold=COLD,
        python=PYTHON,
    resources:
        gpu=1,
    envmodules:
        *ENVMODULES,
    shell:
        "{params.cold} --tag probe -- {params.python} probe.py {output} > {log} 2>&1"
"""

PROBE = """\
import json, os, sys
json.dump({k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_STEP_ID")},
          open(sys.argv[1], "w"))
"""

# environment modules' `module` command, replaced by one that records how it was called
FAKE_MODULE = """\
#!/bin/sh
echo "$* job=${SLURM_JOB_ID:-none}" >> "$COOKBOOK_MODULE_LOG"
"""

# Inside a job the plugin runs the rule with `srun`, after removing every SLURM_* variable but the
# job's identity, SLURM_CONF too. A real cluster's slurm.conf is where srun looks by default; the
# test cluster's is in its own folder, so srun is given it again.
SRUN_WITH_CONF = """\
#!/bin/sh
SLURM_CONF={conf} exec {srun} "$@"
"""

SUMMARIES = [f"results/analysis/reference/cupy_sqdiff/{v}/n4096.json" for v in ("baseline", "fused")]
LOCAL_TARGET = "results/reports/reference/nvtx_multiprocess.md"


def _squeue(cluster) -> dict[str, tuple[str, str]]:
    out = subprocess.run(["squeue", "--states=all", "-h", "-o", "%i|%T|%j"], env=cluster.env, capture_output=True,
                         text=True, check=True, timeout=30).stdout
    return {i: (state, name) for i, state, name in (ln.split("|") for ln in out.split())}


@pytest.mark.slow
def test_workflow_runs_through_the_profile_on_a_real_slurm(cluster, tmp_path_factory):
    t0 = time.monotonic()
    wf = _copy_workflow(tmp_path_factory.mktemp("workflow"),
                        ("cupy_sqdiff/baseline/n4096", "cupy_sqdiff/fused/n4096", "nvtx_multiprocess"))
    (wf / "probe.smk").write_text(PROBE_RULES)
    (wf / "probe.py").write_text(PROBE)
    bin_dir = wf / "bin"
    bin_dir.mkdir()
    (bin_dir / "module").write_text(FAKE_MODULE)
    (bin_dir / "srun").write_text(SRUN_WITH_CONF.format(conf=cluster.conf, srun=shutil.which("srun")))
    for tool in ("module", "srun"):
        (bin_dir / tool).chmod(0o755)
    # the site: the summaries go to the queue as well (normally they run on the login node), so
    # that CPU jobs are submitted; two GPUs per node; one environment module
    local = yaml.safe_load((wf / "rules" / "config.yaml").read_text())["cluster"]["local_rules"]
    assert "summarize_run" in local and "multiprocess_report" in local
    (wf / "site.yaml").write_text(yaml.safe_dump({
        "gpus": 2, "cluster": {"local_rules": [r for r in local if r != "summarize_run"],
                               "envmodules": ["cookbook-probe/1.0"]}}))
    # the probe asks for its GPU as the profile's GPU rules do
    gpu_request = _render_profile({})["set-resources"]["timed"]
    env = dict(cluster.env, COOKBOOK_SLURM_PARTITION=slurm_cluster.PARTITION,
               COOKBOOK_MODULE_LOG=str(wf / "module.log"), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for k in ("COOKBOOK_SLURM_ACCOUNT", "COOKBOOK_SLURM_GPU_TYPE", "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)

    # another job holds the node's first GPU: SLURM gives the probe the second one, while the
    # suite's own GPU locks (used when nobody chose a GPU) would hand out the first
    holder = subprocess.run(["sbatch", "--parsable", "--gres=gpu:1", "--mem=100", "-o", "/dev/null",
                             "--wrap", "sleep 120"], env=env, cwd=wf, capture_output=True, text=True, timeout=30)
    assert holder.returncode == 0, holder.stderr

    r = subprocess.run(
        SNAKEMAKE + ["-s", "probe.smk", "--profile", "profiles/slurm", "--configfile", "site.yaml",
                     # no accounting database on the test SLURM: squeue, not sacct, reports job
                     # states, and there is no account to charge
                     "--slurm-status-command", "squeue", "--slurm-no-account",
                     "--slurm-init-seconds-before-status-checks", "2",
                     "--set-resources", *(f"gpu_probe:{k}={gpu_request[k]}" for k in ("gres", "gpu")),
                     "gpu_probe:cpus_per_task=1", "gpu_probe:mem_mb=500", "gpu_probe:runtime=5",
                     "--", *SUMMARIES, LOCAL_TARGET, "probe/gpu_probe.json"],
        cwd=wf, env=env, capture_output=True, text=True, timeout=180)
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-4000:] + "\n" + cluster.logs()

    # the summaries and the probe went through SLURM: a SLURM log per job, named by its job id,
    # and squeue knows each job, finished, under this run's name
    slurm_logs = wf / ".snakemake" / "slurm_logs"
    summary_logs = sorted((slurm_logs / "rule_summarize_run").rglob("*.log"))
    probe_logs = sorted((slurm_logs / "rule_gpu_probe").rglob("*.log"))
    assert len(summary_logs) == 2 and len(probe_logs) == 1, sorted(slurm_logs.rglob("*"))
    queue = _squeue(cluster)
    run_names = set()
    for p in summary_logs + probe_logs:
        assert p.stem in queue, (p, queue)
        state, name = queue[p.stem]
        assert state == "COMPLETED", (p, state)
        run_names.add(name)
        assert f"submitted with SLURM jobid {p.stem} " in log, f"Snakemake never reported job {p.stem}"
    assert len(run_names) == 1  # one Snakemake run, one job name: what the status checks ask squeue for
    # the local rule did not: no SLURM log, and Snakemake says it ran locally
    assert not (slurm_logs / "rule_multiprocess_report").exists()
    assert "localrule multiprocess_report" in log

    # the same summaries as a local run, and each rule's own log
    for target in SUMMARIES:
        variant = target.split("/")[-2]
        local_out = wf / f"local-{variant}.json"
        subprocess.run([sys.executable, "-m", "analysis", "summarize-run", "--run-dir",
                        f"reports/reference/h200/cupy_sqdiff/{variant}/n4096", "--output", str(local_out)],
                       cwd=wf, check=True, capture_output=True, timeout=120)
        assert (wf / target).read_bytes() == local_out.read_bytes(), target
        assert (wf / f"results/logs/analysis/reference/cupy_sqdiff_{variant}_n4096.log").exists()
    assert (wf / LOCAL_TARGET).stat().st_size > 0
    assert (wf / "results/logs/report/reference/nvtx_multiprocess.log").exists()

    # the GPU job: SLURM's GPU, kept; modules loaded inside that job
    probe = json.loads((wf / "probe/gpu_probe.json").read_text())
    assert probe["CUDA_VISIBLE_DEVICES"] == "1", probe
    assert probe["SLURM_JOB_ID"] == probe_logs[0].stem and probe["SLURM_STEP_ID"] is not None  # in srun's step
    module_calls = (wf / "module.log").read_text().splitlines()
    assert f"load cookbook-probe/1.0 job={probe['SLURM_JOB_ID']}" in module_calls, module_calls
    assert time.monotonic() - t0 < 60
