"""Cold runs get private cache folders; deletion never leaves the suite's cache folder."""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from workloads.harness.cold import CACHE_VARIABLES, UnsafePathError, cache_root, fresh_cache_env, safe_rmtree

from conftest import REPO
import snakemake_forks


def test_refuses_root_home_and_outside(tmp_path):
    root = cache_root(tmp_path)
    root.mkdir()
    for bad in ("/", os.path.expanduser("~"), str(tmp_path), str(tmp_path / "elsewhere")):
        with pytest.raises(UnsafePathError):
            safe_rmtree(bad, root)
    with pytest.raises(UnsafePathError):
        safe_rmtree(root, root)  # the cache folder itself, not a run's folder in it


def test_refuses_a_symlink_that_leads_outside(tmp_path):
    root = cache_root(tmp_path)
    root.mkdir()
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    (root / "link").symlink_to(victim)
    with pytest.raises(UnsafePathError, match="outside"):
        safe_rmtree(root / "link", root)
    assert (victim / "keep.txt").exists()


def test_refuses_a_root_that_is_not_a_cache_folder(tmp_path):
    (tmp_path / "data" / "x").mkdir(parents=True)
    with pytest.raises(UnsafePathError, match="not a suite cache folder"):
        safe_rmtree(tmp_path / "data" / "x", tmp_path / "data")


def test_deletes_a_run_folder_inside(tmp_path):
    env, run_dir = fresh_cache_env(tmp_path, "t", {})
    (run_dir / "cupy" / "kernel.cubin").write_bytes(b"\0")
    safe_rmtree(run_dir, cache_root(tmp_path))
    assert not run_dir.exists()


def test_every_cache_variable_points_into_a_fresh_private_folder(tmp_path):
    env1, d1 = fresh_cache_env(tmp_path, "a", {"HOME": "/home/x"})
    env2, d2 = fresh_cache_env(tmp_path, "a", {})
    assert d1 != d2
    for var, sub in CACHE_VARIABLES.items():
        assert env1[var] == str(d1 / sub) and os.path.isdir(env1[var])
        assert env2[var] != env1[var]
    assert env1["HOME"] == "/home/x"
    # JAX keeps a persistent cache only when given a folder: a cold start gives it its private one
    assert env1["JAX_ENABLE_COMPILATION_CACHE"] == "true"
    assert env1["JAX_COMPILATION_CACHE_DIR"] == str(d1 / "jax")


def test_two_concurrent_cold_runs_stay_apart(tmp_path):
    """Two runs started together see different caches, and both folders are gone afterwards."""
    probe = ("import json, os, sys, time; time.sleep(0.5); "
             "json.dump({v: os.environ[v] for v in %r}, open(sys.argv[1], 'w'))" % sorted(CACHE_VARIABLES))
    procs = [subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path),
                               "--tag", "par", "--", sys.executable, "-c", probe, str(tmp_path / f"env{i}.json")],
                              cwd=REPO) for i in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    seen = [json.loads((tmp_path / f"env{i}.json").read_text()) for i in range(2)]
    for var in CACHE_VARIABLES:
        assert seen[0][var] != seen[1][var]
    assert list(cache_root(tmp_path).iterdir()) == []


def test_cold_run_passes_the_exit_status_through(tmp_path):
    rc = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--",
                         sys.executable, "-c", "raise SystemExit(7)"], cwd=REPO).returncode
    assert rc == 7


@pytest.mark.slow
def test_coldwarm_runs_in_one_private_cache_and_removes_it(tmp_path):
    """Under the CUDA simulator: the runs share one cache folder, which is gone afterwards. On one
    GPU each run gets its turn before its launch (gpu_turn.turn_for_child): the job record lists one
    handed turn per process, one after the other."""
    pytest.importorskip("numba")
    out = tmp_path / "cw.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run([sys.executable, "-m", "workloads.tools.coldwarm", "--work-dir", str(tmp_path),
                        "--output", str(out), "--", sys.executable, "-m", "workloads.numba_ufunc",
                        "--device", "cpu", "--variant", "streams", "--size", "1000"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(out.read_text())
    assert set(rec["runs"]) == {"cold", "warm", "warm_driver_cache_off"}
    # the simulator loads no PTX through the driver: its cache stays empty and the third run is not made
    assert rec["driver_cache_after_cold"] == {"files": 0, "bytes": 0}
    assert "PTX" in rec["runs"].pop("warm_driver_cache_off")["skipped"]
    for run in rec["runs"].values():
        ph = run["phases"]
        parts = ph["interpreter_and_suite_import_s"] + ph["setup_s"] + ph["first_call_s"]
        assert ph["time_to_first_result_s"] == pytest.approx(parts)
        assert all(v > 0 for v in ph.values())
        # the seeded sample (the step's timed run checks every element)
        assert run["check"]["method"] == "sample" and 0 < run["check"]["elements"] <= run["check"]["of"] == 1000
    assert list(cache_root(tmp_path).iterdir()) == []
    [job] = _job_records(tmp_path)
    assert job["tag"] == "coldwarm" and job["assigned_by"] == "turns"
    cold, warm = job["gpu_turns"]
    assert cold["handed_by_parent"] is True and warm["handed_by_parent"] is True
    assert job["started_unix_ns"] < cold["started_unix_ns"] < cold["ended_unix_ns"] <= warm["started_unix_ns"]
    assert warm["ended_unix_ns"] <= job["ended_unix_ns"]


def test_coldwarm_reports_a_failing_command(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workloads.tools.coldwarm", "--work-dir", str(tmp_path),
                        "--output", str(tmp_path / "x.json"), "--", sys.executable, "-c", "raise SystemExit(3)"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "cold run exited with 3" in r.stderr
    assert not (tmp_path / "x.json").exists()
    assert list(cache_root(tmp_path).iterdir()) == []


def _probe_gpu(tmp_path, i, env):
    code = ("import os, sys, time; time.sleep(0.6); "
            "open(sys.argv[1], 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')); "
            "open(sys.argv[1] + '.order', 'w').write(os.environ.get('CUDA_DEVICE_ORDER', 'unset'))")
    return subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus", "2",
                             "--", sys.executable, "-c", code, str(tmp_path / f"gpu{i}.txt")], cwd=REPO, env=env)


def test_two_concurrent_runs_on_a_two_gpu_machine_get_different_gpus(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    procs = [_probe_gpu(tmp_path, i, env) for i in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert sorted((tmp_path / f"gpu{i}.txt").read_text() for i in range(2)) == ["0", "1"]
    # index i means nvidia-smi's GPU i (PCI bus order), not CUDA's i-th fastest
    assert {(tmp_path / f"gpu{i}.txt.order").read_text() for i in range(2)} == {"PCI_BUS_ID"}
    records = _job_records(tmp_path)
    assert sorted(r["cuda_visible_devices"] for r in records) == ["0", "1"]
    assert {r["assigned_by"] for r in records} == {"lock"} and {r["returncode"] for r in records} == {0}
    a, b = records
    assert max(a["started_unix_ns"], b["started_unix_ns"]) < min(a["ended_unix_ns"], b["ended_unix_ns"])


def test_with_one_gpu_two_jobs_let_through_at_once_take_turns(tmp_path):
    """--resources gpu=2 without --config gpus=2: both would use GPU 0; the second waits."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    code = "import time; time.sleep(0.6)"
    procs = [subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus", "1",
                               "--", sys.executable, "-c", code], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    errs = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert sum("waiting for GPU index-0: another job holds it" in e for e in errs) == 1
    # the lock is the host's, not the work folder's: without nvidia-smi, GPU 0 in PCI bus order
    assert _gpu_lock("index-0").is_file() and not (tmp_path / "gpu-locks").exists()
    first, second = sorted(_job_records(tmp_path), key=lambda r: r["started_unix_ns"])
    assert {first["assigned_by"], second["assigned_by"]} == {"default"}
    assert first["ended_unix_ns"] <= second["started_unix_ns"]


def _gpu_lock(key: str):
    """A GPU's lock file in the host's lock folder (tests get a private one: conftest.py)."""
    from workloads.tools.gpu_jobs import lock_path

    return lock_path(key)


def _job_records(work_dir):
    return [json.loads(p.read_text()) for p in sorted((work_dir / "gpu-jobs").glob("*.json"))]


def test_a_gpu_chosen_by_the_scheduler_is_kept(tmp_path):
    # SLURM's own variables tell its allocation from a CUDA_VISIBLE_DEVICES set by hand
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="3", SLURM_JOB_ID="42", SLURM_JOB_GPUS="3")
    assert _probe_gpu(tmp_path, 0, env).wait(timeout=60) == 0
    assert (tmp_path / "gpu0.txt").read_text() == "3"
    [record] = _job_records(tmp_path)
    assert (record["assigned_by"], record["cuda_visible_devices"]) == ("scheduler", "3")


def test_a_failing_job_is_recorded_with_its_exit_status(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--tag", "nsys",
                        "--", sys.executable, "-c", "raise SystemExit(3)"], cwd=REPO, timeout=60)
    assert r.returncode == 3
    [record] = _job_records(tmp_path)
    assert (record["tag"], record["returncode"], record["assigned_by"]) == ("nsys", 3, "default")
    assert record["git_commit"]  # the suite's commit, for the page's provenance
    assert record["ended_unix_ns"] >= record["started_unix_ns"]
    assert not list((tmp_path / "gpu-jobs").glob(".*.tmp"))


def test_a_third_run_waits_for_a_free_gpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    procs = [_probe_gpu(tmp_path, i, env) for i in range(3)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0]
    assert sorted((tmp_path / f"gpu{i}.txt").read_text() for i in range(3)) in (["0", "0", "1"], ["0", "1", "1"])
    # the two jobs on one GPU ran one after the other
    on_gpu = {}
    for r in _job_records(tmp_path):
        on_gpu.setdefault(r["cuda_visible_devices"], []).append(r)
    [(first, second)] = [sorted(rs, key=lambda r: r["started_unix_ns"]) for rs in on_gpu.values() if len(rs) == 2]
    assert first["ended_unix_ns"] <= second["started_unix_ns"]


# --- signals, tags and cache roots (issue 20) ---------------------------------------------------

def _wait_for(predicate, timeout_s=20.0):
    import time
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_the_wrapper_stops_the_job_before_the_gpu_is_let_go(tmp_path, sig):
    """The wrapper passes the signal to the command's process group, waits for it, records the job
    as killed, removes its caches, and only then releases the GPU lock."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    pid_file = tmp_path / "child.pid"
    # the command ignores nothing, but takes a moment to exit after the signal: the lock must be held meanwhile
    code = ("import os, signal, sys, time\n"
            "def bye(*_):\n    time.sleep(1.0); sys.exit(5)\n"
            f"signal.signal({int(sig)}, bye)\n"
            # written whole, then renamed: the test reads it as soon as the name exists
            f"open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid()))\n"
            f"os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r})\n"
            "time.sleep(30)\n")
    wrapper = subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path),
                                "--tag", "sig", "--", sys.executable, "-c", code], cwd=REPO, env=env,
                               stderr=subprocess.PIPE, text=True)
    assert _wait_for(pid_file.exists), "the command did not start"
    child = int(pid_file.read_text())
    assert os.getpgid(child) == child  # its own process group
    wrapper.send_signal(sig)
    # while the command is still exiting, the GPU lock is held
    lock = _gpu_lock("index-0")
    with open(lock, "w") as f:
        with pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    err = wrapper.communicate(timeout=30)[1]
    assert wrapper.returncode == 128 + int(sig), err
    assert not _alive(child)
    [record] = _job_records(tmp_path)
    assert record["killed_by"] == sig.name and record["returncode"] == 5
    assert list(cache_root(tmp_path).iterdir()) == []
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free now
    assert f"got {sig.name}" in err and "exited with status 5" in err


def test_a_sigkilled_wrapper_takes_its_command_with_it(tmp_path):
    pid_file = tmp_path / "child.pid"
    code = (f"import os, time; open({str(pid_file)!r} + '.tmp', 'w').write(str(os.getpid())); "
            f"os.rename({str(pid_file)!r} + '.tmp', {str(pid_file)!r}); time.sleep(30)")
    wrapper = subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path),
                                "--", sys.executable, "-c", code], cwd=REPO)
    assert _wait_for(pid_file.exists)
    child = int(pid_file.read_text())
    wrapper.kill()
    wrapper.wait(timeout=10)
    assert _wait_for(lambda: not _alive(child), 10), "the command outlived its SIGKILLed wrapper"


def test_a_failing_command_leaves_its_status_and_stderr_tail_last(tmp_path):
    code = "import sys; print('x' * 10000, file=sys.stderr); print('the real cause', file=sys.stderr); sys.exit(9)"
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--tag", "exp",
                        "--", sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 9
    last = r.stderr.rstrip().splitlines()[-4:]
    assert any("exited with status 9" in line for line in last) and last[-1] == "the real cause", last


@pytest.mark.parametrize("tag", ["../../x", "a/b", "..", "", "-x", "x y"])
def test_a_tag_that_is_not_one_folder_name_is_refused_before_anything_runs(tmp_path, tag):
    marker = tmp_path / "ran"
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path / "w"), "--tag", tag,
                        "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--tag" in r.stderr and not marker.exists()
    assert not (tmp_path / "x").exists() and not (tmp_path / "w").exists()


def test_a_cache_root_that_is_a_symlink_is_refused_before_anything_runs(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "cache").symlink_to(elsewhere)
    marker = tmp_path / "ran"
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(work),
                        "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "symlink" in r.stderr and not marker.exists()
    assert list(elsewhere.iterdir()) == [] and not (work / "gpu-jobs").exists()


def test_a_steps_runs_share_the_compile_cache_they_are_given_and_nothing_else(tmp_path):
    """--shared-cache: JAX's compile cache is on and in <work>/cache/shared/KEY for every run given
    KEY, and kept, and so are Warp's kernel cache, PyCUDA's nvcc cache and CuPy's (for cuDF); every other cache is still
    private and removed; without it JAX's cache is private too."""
    probe = ("import json, os, sys; env = {v: os.environ.get(v) for v in %r}; "
             "d = env['JAX_COMPILATION_CACHE_DIR']; d and open(os.path.join(d, sys.argv[2]), 'w'); "
             "env['seen'] = sorted(os.listdir(d)) if d else None; json.dump(env, open(sys.argv[1], 'w'))"
             % sorted({*CACHE_VARIABLES, "JAX_ENABLE_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR"}))

    def run(name, *shared):
        rc = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--tag", name,
                             *shared, "--", sys.executable, "-c", probe, str(tmp_path / f"{name}.json"), name],
                            cwd=REPO, timeout=60).returncode
        assert rc == 0
        return json.loads((tmp_path / f"{name}.json").read_text())

    first = run("timed", "--shared-cache", "jax_matmul")
    second = run("ncu", "--shared-cache", "jax_matmul")
    other = run("ncu-warp", "--shared-cache", "warp_sph")
    alone = run("coldwarm")
    shared = cache_root(tmp_path) / "shared" / "jax_matmul" / "jax"
    assert first["JAX_COMPILATION_CACHE_DIR"] == second["JAX_COMPILATION_CACHE_DIR"] == str(shared)
    assert first["JAX_ENABLE_COMPILATION_CACHE"] == "true"
    assert second["seen"] == ["ncu", "timed"]  # the second run sees what the first stored
    assert other["seen"] == ["ncu-warp"]  # another recipe's runs have their own
    # without a shared key JAX's cache is on too, in the run's private folder, which sees nothing of the others
    assert alone["JAX_ENABLE_COMPILATION_CACHE"] == "true" and alone["seen"] == ["coldwarm"]
    # Warp's kernel cache, PyCUDA's nvcc cache and CuPy's kernel cache (cuDF's generator) are shared
    # the same way; the other caches are not
    shared_folders = {"JAX_COMPILATION_CACHE_DIR": "jax", "WARP_CACHE_PATH": "warp", "PYCUDA_CACHE_DIR": "pycuda",
                      "CUPY_CACHE_DIR": "cudf"}
    for var, folder in shared_folders.items():
        assert first[var] == second[var] == str(shared.parent / folder)
        assert len({first[var], other[var], alone[var]}) == 3
    for var in set(CACHE_VARIABLES) - set(shared_folders):
        assert len({first[var], second[var], other[var], alone[var]}) == 4
    assert sorted(p.name for p in cache_root(tmp_path).iterdir()) == ["shared"]
    assert sorted(os.listdir(shared)) == ["ncu", "timed"]


def test_a_shared_cache_key_that_is_not_one_folder_name_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path),
                        "--shared-cache", "../x", "--", sys.executable, "-c", "pass"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--shared-cache '../x'" in r.stderr and not (tmp_path / "cache").exists()


def _planned_shell_lines(tmp_path, targets, *options):
    """The lines of a dry run (``-n -p --forceall``) of ``targets`` in a copy of the checkout: the
    shell commands the rules would run, among Snakemake's own lines."""
    from test_preflight_and_pipeline import _repo_copy

    repo = _repo_copy(tmp_path)
    r = snakemake_forks.run(["-n", "-p", "--forceall", *targets, *options], repo, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout.splitlines()


def test_jax_warp_and_pycuda_runs_get_their_recipes_shared_folder_except_nsys_runs_whose_first_call_compiles(tmp_path):
    """The rules: a JAX, Warp or PyCUDA step's timed and ncu runs name the recipe's shared folder,
    and so does its nsys run where the step compiles in setup (JAX's float32, Warp's pruned, PyCUDA's
    baseline); the nsys run of
    Warp's baseline, which builds its module in its first call (the cold-start page's), does not,
    nor do a CuPy step's runs (CuPy compiles at the first call) or cold/warm starts. A sharing nsys
    run comes after the step's timed run, which fills the cache."""
    targets = ["results/captures/jax_matmul/float32/n8192/timing.json",
               "results/captures/jax_matmul/float32/n8192/nsys-run.json",
               "results/captures/jax_matmul/float32/n8192/ncu-run.json", "results/captures/coldstart/jax_matmul_jit.json",
               "results/captures/warp_sph/pruned/n62500/timing.json",
               "results/captures/warp_sph/pruned/n62500/nsys-run.json",
               "results/captures/warp_sph/pruned/n62500/ncu-run.json",
               "results/captures/warp_sph/baseline/n62500/nsys-run.json",
               "results/captures/pycuda_kernel/baseline/n268435456/timing.json",
               "results/captures/pycuda_kernel/baseline/n268435456/nsys-run.json",
               "results/captures/pycuda_kernel/baseline/n268435456/ncu-run.json",
               "results/captures/coldstart/pycuda_kernel_baseline.json",
               "results/captures/cudf_groupby/agg_all/n50000000/timing.json",
               "results/captures/cudf_groupby/agg_all/n50000000/nsys-run.json",
               "results/captures/cudf_groupby/agg_all/n50000000/ncu-run.json",
               "results/captures/coldstart/cudf_groupby_agg_all_pool.json",
               "results/captures/cupy_sqdiff/fused/n4096/timing.json"]
    lines = _planned_shell_lines(tmp_path, targets)
    commands = [line for line in lines if "workloads." in line and " --variant " in line]
    shared = []
    for workload, variant in (("jax_matmul", "float32"), ("warp_sph", "pruned"), ("pycuda_kernel", "baseline"),
                              ("cudf_groupby", "agg_all")):
        runs = [c for c in commands if f"workloads.{workload} " in c and f"--variant {variant} " in c
                and "workloads.harness.cold " in c]
        assert {c.split("--tag ")[1].split()[0] for c in runs} == {"timed", "nsys", "ncu"}
        assert all(f"--shared-cache {workload} " in c for c in runs)
        shared += runs
    others = [c for c in commands if c not in shared]
    assert any("workloads.tools.coldwarm" in c for c in others) and any("cupy_sqdiff" in c for c in others)
    assert any("workloads.tools.coldwarm" in c and "pycuda_kernel" in c for c in others)
    assert any("workloads.tools.coldwarm" in c and "cudf_groupby" in c for c in others)
    assert any("--variant baseline " in c and "--tag nsys " in c for c in others)
    assert not any("--shared-cache" in c for c in others)
    # and JAX's nsys run leaves XLA's own NVTX domains out (nsys could not always resolve their
    # strings), Warp's keeps every domain
    nsys = {w: [c for c in commands if f"workloads.{w} " in c and "--tag nsys " in c] for w in ("jax_matmul", "warp_sph")}
    assert len(nsys["jax_matmul"]) == 1 and "--nvtx-domain-exclude=TSL,default " in nsys["jax_matmul"][0]
    assert len(nsys["warp_sph"]) == 2 and not any("--nvtx-domain-exclude" in c for c in nsys["warp_sph"])
    # a sharing nsys run waits for its step's timed run; the cold one does not
    inputs = {line.split("output: ")[1].split(",")[0]: previous.split("input: ")[1]
              for previous, line in zip(lines, lines[1:]) if line.strip().startswith("output: ")
              and previous.strip().startswith("input: ")}
    assert "warp_sph/pruned/n62500/timing.json" in inputs["results/captures/warp_sph/pruned/n62500/nsys.nsys-rep"]
    assert "timing.json" not in inputs["results/captures/warp_sph/baseline/n62500/nsys.nsys-rep"]
    assert "jax_matmul/float32/n8192/timing.json" in inputs["results/captures/jax_matmul/float32/n8192/nsys.nsys-rep"]
    assert ("pycuda_kernel/baseline/n268435456/timing.json"
            in inputs["results/captures/pycuda_kernel/baseline/n268435456/nsys.nsys-rep"])
    assert "cudf_groupby/agg_all/n50000000/timing.json" in inputs["results/captures/cudf_groupby/agg_all/n50000000/nsys.nsys-rep"]
    # JAX's timed, nsys and ncu runs preallocate nothing (Framework.measurement_env); its cold/warm
    # starts run as a user's would, and no other recipe's run gets the setting
    jax = {c.split("--tag ")[1].split()[0]: c for c in commands if "workloads.jax_matmul " in c and "--tag " in c}
    assert {"timed", "nsys", "ncu"} <= set(jax) and all(
        "XLA_PYTHON_CLIENT_PREALLOCATE=false " in jax[t].split("-m workloads.harness.cold")[0] for t in ("timed", "nsys", "ncu"))
    assert sum("XLA_PYTHON_CLIENT_PREALLOCATE" in c for c in commands) == 3


# a workload-like child: imports (here a sleep) beside the others, then its turn on the GPU until it
# exits; with a barrier folder, it first waits until `count` children have started (a loaded test
# machine may start them seconds apart)
_TURN_CHILD = ("import os, sys, time; time.sleep({before}); b = {barrier!r}\n"
               "if b:\n os.makedirs(b, exist_ok=True); open(os.path.join(b, str(os.getpid())), 'w').close()\n"
               " while len(os.listdir(b)) < {count}: time.sleep(0.02)\n"
               "from workloads.harness import gpu_turn\n"
               "t = gpu_turn.take_turn('probe'); print(t.waited_s if t else 'none'); time.sleep({inside})")


def _cold_turns(work_dir, before, inside, env, *extra, barrier="", count=0):
    code = _TURN_CHILD.format(before=before, inside=inside, barrier=str(barrier), count=count)
    return subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(work_dir), "--gpus", "1",
                             *extra, "--", sys.executable, "-c", code],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_with_turns_jobs_run_at_once_but_hold_the_gpu_one_after_the_other(tmp_path):
    """Three measurement runs let through at once: all three start together, their turns do not
    overlap, and each job's record lists its turn inside the job."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    work = tmp_path / "work"
    procs = [_cold_turns(work, 0.0, 0.7, env, "--turns", barrier=tmp_path / "started", count=3) for _ in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e for _, e in outs]
    assert sum("waiting for the GPU's turn" in e for _, e in outs) == 2
    records = sorted(_job_records(work), key=lambda r: r["gpu_turns"][0]["started_unix_ns"])
    assert {r["assigned_by"] for r in records} == {"turns"}
    # the jobs overlap: they all started before the first turn ended
    assert max(r["started_unix_ns"] for r in records) < records[0]["gpu_turns"][0]["ended_unix_ns"]
    turns = [r["gpu_turns"][0] for r in records]
    for r, t in zip(records, turns):
        assert r["started_unix_ns"] <= t["started_unix_ns"] < t["ended_unix_ns"] <= r["ended_unix_ns"]
    for a, b in zip(turns, turns[1:]):
        assert a["ended_unix_ns"] <= b["started_unix_ns"]
    assert turns[2]["waited_s"] > 1.0  # it waited for the other two 0.7 s turns
    # nothing is left behind for the records
    assert not list((work / "gpu-turns").glob("turn-*"))
    # the reader agrees: three jobs at once, never two on the GPU
    from analysis.model import gpu_jobs as reader

    s = reader.summarize(reader.load_gpu_jobs(str(work / "gpu-jobs")))
    assert s.max_concurrent == 3 and s.overlaps == []
    # and would flag turns that did overlap (a job holding the GPU throughout, pinned by hand)
    held_throughout = dataclasses.replace(s.jobs[0], turns=None, path="whole")
    assert {o.verdict for o in reader.overlaps([*s.jobs, held_throughout])} == {"GPU unknown"}


def test_a_job_holding_the_gpu_throughout_keeps_turn_takers_off_it(tmp_path):
    """A cold/warm start or experiment (no --turns) holds GPU 0's lock for its whole run: a run
    that takes turns waits for it, and a run inside such a job never waits for its own wrapper."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    release = tmp_path / "release"
    # the whole job's run: its take_turn (a no-op inside a job without --turns) says "none", then it
    # keeps the job running until the test has seen the turn-taker wait
    code = ("import os, time\nfrom workloads.harness import gpu_turn\n"
            "t = gpu_turn.take_turn('probe'); print(t['waited_s'] if t else 'none', flush=True)\n"
            f"while not os.path.exists({str(release)!r}): time.sleep(0.02)")
    whole = subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus",
                              "1", "--", sys.executable, "-c", code],
                             cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # its run has started, so its wrapper holds GPU 0
        first_out = whole.stdout.readline()
        assert first_out.strip() == "none", whole.communicate(timeout=60)
        with open(_gpu_lock("index-0")) as f, pytest.raises(BlockingIOError):
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        turn = _cold_turns(tmp_path, 0.0, 0.1, env, "--turns")
        turn_err = ""
        while "waiting for the GPU's turn" not in turn_err:
            line = turn.stderr.readline()
            assert line, f"the turn-taker ended without waiting: {turn_err}"
            turn_err += line
        time.sleep(0.3)  # the wait the turn-taker's record must show
    finally:
        release.touch()
    rest_out, _ = whole.communicate(timeout=60)
    turn_out, rest_err = turn.communicate(timeout=60)
    turn_err += rest_err
    assert whole.returncode == 0 and turn.returncode == 0, turn_err
    assert rest_out == ""
    assert float(turn_out.strip()) > 0.2 and "waiting for the GPU's turn" in turn_err
    records = {r["assigned_by"]: r for r in _job_records(tmp_path)}
    assert records["turns"]["gpu_turns"][0]["started_unix_ns"] >= records["default"]["ended_unix_ns"]
    assert "gpu_turns" not in records["default"]


def test_a_turn_whose_process_died_ends_when_the_jobs_next_turn_starts(tmp_path):
    """A process that dies inside its turn (os._exit skips the end it would write, as a crash under
    nsys did) held the GPU until the OS let go of its lock: no later than the next turn's start."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    take = "from workloads.harness import gpu_turn; import os, time; gpu_turn.take_turn('p'); time.sleep(0.2)"
    script = f"{sys.executable} -c \"{take}; os._exit(0)\"; sleep 0.5; {sys.executable} -c \"{take}\""
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus", "1",
                        "--turns", "--", "sh", "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    [record] = _job_records(tmp_path)
    died, lived = record["gpu_turns"]
    assert died["end_unknown"] is True and died["ended_unix_ns"] == lived["started_unix_ns"]
    assert "end_unknown" not in lived and lived["ended_unix_ns"] < record["ended_unix_ns"]
    assert lived["started_unix_ns"] - died["started_unix_ns"] > 0.6e9


def test_a_run_that_fails_before_its_turn_records_none(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus", "1",
                        "--turns", "--", sys.executable, "-c", "raise SystemExit(3)"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 3
    [record] = _job_records(tmp_path)
    assert record["assigned_by"] == "turns" and record["gpu_turns"] == []


@pytest.mark.parametrize("capture_range", [False, True])
def test_a_capture_range_is_used_only_when_the_run_asks_for_one_and_the_recipe_declares_one(tmp_path, capture_range):
    """nsys_profile.capture_range (off by default): JAX's nsys run, whose recipe declares a capture
    range, gets nsys' --capture-range flags and COOKBOOK_CAPTURE_RANGE=1 only when it is on; CuPy's,
    which declares none, never."""
    # a config file: Snakemake's --config gives nested values as strings
    (tmp_path / "range.yaml").write_text("nsys_profile: {capture_range: true}\n")
    options = ["--configfile", str(tmp_path / "range.yaml")] if capture_range else []
    lines = _planned_shell_lines(tmp_path, ["results/captures/jax_matmul/bf16/n512/nsys-run.json",
                                            "results/captures/cupy_sqdiff/fused/n4096/nsys-run.json"], *options)
    nsys = {w: [c for c in lines if "--tag nsys " in c and f"workloads.{w} " in c] for w in ("jax_matmul", "cupy_sqdiff")}
    assert all(len(c) == 1 for c in nsys.values())
    jax, cupy = nsys["jax_matmul"][0], nsys["cupy_sqdiff"][0]
    assert ("--capture-range=cudaProfilerApi --capture-range-end=stop " in jax) == capture_range
    assert ("COOKBOOK_CAPTURE_RANGE=1 " in jax) == capture_range
    assert "--capture-range" not in cupy and "COOKBOOK_CAPTURE_RANGE" not in cupy


def test_a_step_measurement_runs_take_turns_and_cold_warm_starts_take_theirs_before_each_launch(tmp_path):
    """The step's runs go through the cold wrapper with --turns; the cold/warm starts through their own
    driver, which takes each process's turn before launching it (the command has no --turns)."""
    lines = _planned_shell_lines(tmp_path, ["results/captures/cupy_sqdiff/fused/n4096/timing.json",
                                            "results/captures/cupy_sqdiff/fused/n4096/nsys-run.json",
                                            "results/captures/cupy_sqdiff/fused/n16384/ncu-run.json",
                                            "results/captures/coldstart/cupy_sqdiff_fused.json"])
    commands = [line for line in lines if "workloads.cupy_sqdiff " in line]
    cold = [c for c in commands if "workloads.harness.cold " in c]
    assert {c.split("--tag ")[1].split()[0] for c in cold} == {"timed", "nsys", "ncu"}
    assert all(" --turns " in c for c in cold)
    warm = [c for c in commands if "workloads.tools.coldwarm" in c]
    assert warm and not any("--turns" in c for c in warm)


def test_ncu_runs_collect_the_full_set_or_sections_on_full_variants_and_the_page_metrics_elsewhere(tmp_path):
    """rules/config.yaml: a step in its recipe's ``ncu.full_variants`` gets the recipe's own sections
    (cuDF: the full set less the instrumented ones, analysis.readers.ncu.INSTRUMENTED_SECTIONS) or else
    ncu_profile's set; every other step collects only the metrics the page reads, and each ncu run
    makes one call of the computation."""
    from analysis.readers.ncu import INSTRUMENTED_SECTIONS, analysis_metrics, metrics_only_args, tensor_ops_metrics

    lines = _planned_shell_lines(tmp_path, ["results/captures/cudf_groupby/agg_all/n50000000/ncu-run.json",
                                            "results/captures/numba_ufunc/fastmath/n268435456/ncu-run.json",
                                            "results/captures/numba_ufunc/baseline/n268435456/ncu-run.json",
                                            "results/captures/jax_matmul/float32/n8192/ncu-run.json"])
    ncu = {(w, v): [c for c in lines if "--tag ncu " in c and f"workloads.{w} " in c and f"--variant {v} " in c]
           for w, v in (("cudf_groupby", "agg_all"), ("numba_ufunc", "fastmath"), ("numba_ufunc", "baseline"))}
    assert all(len(c) == 1 for c in ncu.values())
    cudf, full, lean = (c[0] for c in ncu.values())
    assert "--set " not in cudf and "--section SpeedOfLight " in cudf and "--section WarpStateStats " in cudf
    assert not any(f"--section {s} " in cudf for s in INSTRUMENTED_SECTIONS)
    # and less MemoryWorkloadAnalysis, whose passes took most of the launch's replay; its chart and tables stay
    assert "--section MemoryWorkloadAnalysis " not in cudf and "--section MemoryWorkloadAnalysis_Chart " in cudf
    assert "--set full " in full and "--section " not in full and "--metrics" not in full
    assert "--set " not in lean and "--section SpeedOfLight_HierarchicalDoubleRooflineChart " in lean
    listed = lean.split("--metrics ")[1].split()[0].split(",")
    assert "dram__bytes_read.sum" in listed and "sm__throughput.avg.pct_of_peak_sustained_elapsed" in listed
    assert set(listed) < set(analysis_metrics()) and not any(m.startswith("derived__") for m in listed)
    assert all(" --calls 1 " in c for c in (cudf, full, lean))
    # Numba's kernels run no tensor-core operations (ncu.tensor_ops: false): its metrics-only steps
    # leave their counts out; JAX's, whose GEMMs run on the tensor pipe, keep them
    assert not set(tensor_ops_metrics()) & set(listed) and set(listed) | set(tensor_ops_metrics()) == set(
        metrics_only_args()[1].split(","))
    jax = [c for c in lines if "--tag ncu " in c and "workloads.jax_matmul " in c and "--variant float32 " in c]
    assert len(jax) == 1 and set(tensor_ops_metrics()) < set(jax[0].split("--metrics ")[1].split()[0].split(","))


def test_the_allocator_experiment_loads_jaxs_shared_cache_after_the_timed_run_that_fills_it(tmp_path):
    """Recipe.experiments_from_cache: JAX's allocator settings load the programs float32's timed run at
    8192 compiled (the experiment's own defaults), so the experiment names the recipe's shared folder
    and waits for that run; Warp's cold-start experiment, which measures compiling, gets fresh caches."""
    from workloads.jax_matmul import RECIPE
    from workloads.jax_matmul.exp_allocator import _parser

    defaults = _parser().parse_args([])
    assert RECIPE.experiments_from_cache == (("allocator", defaults.variant, defaults.size),)
    lines = _planned_shell_lines(tmp_path, ["results/captures/jax_matmul/experiments/allocator",
                                            "results/captures/warp_sph/experiments/coldstart"])
    commands = [c for c in lines if "--tag experiment " in c]
    allocator = [c for c in commands if "exp_allocator" in c]
    coldstart = [c for c in commands if "exp_coldstart" in c]
    assert len(allocator) == len(coldstart) == 1
    assert " --shared-cache jax_matmul " in allocator[0] and "--shared-cache" not in coldstart[0]
    # the allocator's processes take turns (Recipe.experiments_in_turns); so do the cold-start one's,
    # each from before its launch (gpu_turn.turn_for_child)
    assert " --turns " in allocator[0] and " --turns " in coldstart[0]
    timed = next(i for i, c in enumerate(lines) if "--tag timed " in c and "--variant float32 --size 8192 " in c)
    assert timed < lines.index(allocator[0])


def test_a_recipe_names_only_its_own_experiments_as_taking_turns():
    from workloads.contract import Recipe, WorkloadError

    common = dict(name="r", title="R", seed_document="000", framework="jax", requires=(), variants=("a",),
                  default_size=1, size_meaning="n", experiments=("e",))
    assert Recipe(**common, experiments_in_turns=("e",)).experiments_in_turns == ("e",)
    with pytest.raises(WorkloadError, match="experiments_in_turns names unknown experiments"):
        Recipe(**common, experiments_in_turns=("x",))


def test_a_recipe_cannot_load_an_experiment_from_a_step_that_does_not_compile_in_setup():
    from workloads.contract import Recipe, WorkloadError

    common = dict(name="r", title="R", seed_document="000", framework="jax", requires=(), variants=("a", "b"),
                  default_size=1, size_meaning="n", experiments=("e",),
                  compiles_in_setup=("b",))
    Recipe(**common, experiments_from_cache=(("e", "b", 8),))
    for bad in (("e", "a", 8), ("x", "b", 8), ("e", "b", 0)):
        with pytest.raises(WorkloadError, match="experiments_from_cache"):
            Recipe(**common, experiments_from_cache=(bad,))


FAKE_FIRST_RESULT = """
import json, os, sys, time
args = sys.argv[1:]
out = args[args.index("--output") + 1]
if os.environ.get("WRITE_DRIVER_CACHE") and not os.environ.get("CUDA_CACHE_DISABLE"):
    # what the driver does after JIT-compiling PTX
    with open(os.path.join(os.environ["CUDA_CACHE_PATH"], "index"), "w") as f:
        f.write("x" * 100)
now = time.time_ns()
with open(out, "w") as f:
    json.dump({"first_result": {"launch_unix_ns": int(os.environ["COOKBOOK_LAUNCH_UNIX_NS"]), "imported_unix_ns": now,
                                "setup_done_unix_ns": now + 1, "first_result_unix_ns": now + 2},
               "relative_error": 0.0, "check": {"method": "sample", "elements": 1, "of": 1},
               "steady_call_ms": 1.0, "provenance": {"disabled": os.environ.get("CUDA_CACHE_DISABLE")},
               "workload": "w", "variant": "v", "size": 1}, f)
"""


@pytest.mark.parametrize("writes", [False, True])
def test_coldwarm_turns_the_driver_cache_off_only_where_the_cold_run_filled_it(tmp_path, monkeypatch, writes):
    """The driver's compute cache holds PTX the driver JIT-compiled: the third run is made only where the
    cold run left something in it, with the cache off; otherwise the record says why it is missing."""
    from workloads.tools import coldwarm

    script = tmp_path / "fake.py"
    script.write_text(FAKE_FIRST_RESULT)
    if writes:
        monkeypatch.setenv("WRITE_DRIVER_CACHE", "1")
    rec = coldwarm.measure([sys.executable, str(script)], str(tmp_path))
    off = rec["runs"]["warm_driver_cache_off"]
    if writes:
        assert rec["driver_cache_after_cold"] == {"files": 1, "bytes": 100}
        assert "skipped" not in off and off["phases"]["time_to_first_result_s"] > 0
    else:
        assert rec["driver_cache_after_cold"] == {"files": 0, "bytes": 0}
        assert set(off) == {"skipped", "short"} and "no PTX" in off["skipped"] and off["short"] == "no PTX JIT"
    assert list(cache_root(tmp_path).iterdir()) == []


def test_coldwarm_leaves_the_driver_cache_run_to_the_step_named_even_where_the_cold_run_filled_it(tmp_path,
                                                                                                  monkeypatch):
    """The pipeline measures the driver cache's share on one step a recipe: the others make two runs and
    name that step, whatever their cold run left in the driver's cache."""
    from workloads.tools import coldwarm

    script = tmp_path / "fake.py"
    script.write_text(FAKE_FIRST_RESULT)
    monkeypatch.setenv("WRITE_DRIVER_CACHE", "1")
    out = tmp_path / "rec.json"
    assert coldwarm.main(["--work-dir", str(tmp_path), "--output", str(out), "--driver-cache-measured-on", "base",
                          "--", sys.executable, str(script)]) == 0
    rec = json.loads(out.read_text())
    off = rec["runs"]["warm_driver_cache_off"]
    assert rec["driver_cache_after_cold"] == {"files": 1, "bytes": 100}
    assert off["measured_on"] == "base" and off["short"] == "measured on `base`" and "`base`" in off["skipped"]
    assert "phases" in rec["runs"]["warm"] and "phases" not in off


def test_a_recipe_measures_the_driver_caches_share_on_one_cold_warm_step(tmp_path):
    """rules/config.yaml: only the first of a recipe's cold/warm steps (or its
    ``coldwarm_driver_cache_variant``) makes the driver-cache-off run; the others name it."""
    lines = _planned_shell_lines(tmp_path, ["results/captures/coldstart/jax_matmul_baseline.json",
                                            "results/captures/coldstart/jax_matmul_jit.json",
                                            "results/captures/coldstart/jax_matmul_bf16.json"])
    warm = {v: [c for c in lines if "workloads.tools.coldwarm" in c and f"--variant {v} " in c]
            for v in ("baseline", "jit", "bf16")}
    assert all(len(c) == 1 for c in warm.values())
    assert "--driver-cache-measured-on" not in warm["baseline"][0]
    assert all(" --driver-cache-measured-on baseline " in warm[v][0] for v in ("jit", "bf16"))


def test_a_recipes_timed_first_steps_start_right_after_the_ceilings(tmp_path):
    """rules/config.yaml's timed_first (JAX float32 and tf32, whose setups autotune on every core):
    their timed runs outrank the experiments and the other timed runs; only the ceilings come first."""
    lines = _planned_shell_lines(tmp_path, ["results/captures/jax_matmul/float32/n8192/timing.json",
                                            "results/captures/jax_matmul/tf32/n8192/timing.json",
                                            "results/captures/jax_matmul/bf16/n8192/timing.json",
                                            "results/captures/warp_sph/experiments/coldstart"])
    priorities, job = {}, None
    for line in lines:
        if line.startswith(("rule ", "localrule ")):
            job = line.split()[1].rstrip(":")
        elif line.strip().startswith("output:") and job:
            job = (job, line.split("output:")[1].split(",")[0].strip())
        elif line.strip().startswith("priority:") and isinstance(job, tuple):
            priorities[job] = int(line.split(":")[1])
    by_output = {out.split("captures/")[1]: (rule, p) for (rule, out), p in priorities.items()}
    assert by_output["jax_matmul/float32/n8192/timing.json"] == ("timed", 30)
    assert by_output["jax_matmul/tf32/n8192/timing.json"] == ("timed", 30)
    assert by_output["jax_matmul/bf16/n8192/timing.json"] == ("timed", 10)
    assert by_output["warp_sph/experiments/coldstart"] == ("experiment", 20)
    assert by_output["ceilings.json"] == ("ceilings", 50)
