"""The runner's --device switch and the one-line refusals (workloads/harness/runner.py, workloads/frameworks.py).

Every recipe run by hand on a machine without a GPU (this one, in CI) says in one line what is
missing and how to run its CPU path, with exit status 2 and no traceback; --device cpu runs the CPU
path through the framework's own switch; a new framework needs its record in the recipe's folder, nothing else."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
from workloads import frameworks
from workloads.registry import RECIPES

#: the frameworks' own CPU switches: a hand run must not inherit them from the test's environment
CPU_SWITCHES = {k for f in frameworks.FRAMEWORKS.values() for k in (f.cpu_env or {})}
HAS_GPU = frameworks.driver_problem() is None


def _bare_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in CPU_SWITCHES}


def _run(args, cwd=REPO, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, env=env or _bare_env(), capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("recipe", RECIPES, ids=[r.name for r in RECIPES])
def test_a_hand_run_without_a_gpu_says_one_line_and_exits_2(recipe):
    r = _run([f"workloads.{recipe.name}", "--variant", recipe.variants[0], "--size", "64"])
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"{recipe.name}: ") and "Traceback" not in r.stderr
    if frameworks.framework(recipe.framework).cpu_env is not None:
        assert f"python -m workloads.{recipe.name} --device cpu" in lines[0]
    else:
        assert "no CPU path" in lines[0]


@pytest.mark.parametrize("recipe", [r for r in RECIPES if frameworks.framework(r.framework).cpu_env is None],
                         ids=lambda r: r.name)
def test_a_framework_without_a_cpu_path_refuses_device_cpu_in_one_line(recipe):
    r = _run([f"workloads.{recipe.name}", "--device", "cpu", "--variant", recipe.variants[0]])
    assert r.returncode == 2
    assert r.stderr.strip() == f"{recipe.name}: {frameworks.framework(recipe.framework).title} has no CPU path: " \
                               "this recipe needs a CUDA GPU (--device cuda)"


def test_every_recipe_names_a_framework_with_a_record():
    for recipe in RECIPES:
        assert frameworks.framework(recipe.framework).name == recipe.framework


def test_the_framework_records_import_no_gpu_package():
    code = ("import sys, workloads.frameworks, workloads.harness.provenance, workloads.harness.cold, analysis.report.kernel_page\n"
            "print(sorted(m for m in ('cupy', 'numba', 'pycuda', 'warp', 'jax', 'cudf', 'rmm') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_run_records_whether_it_compiled_afresh_or_loaded_a_steps_shared_programs(tmp_path):
    """Provenance: a cold run has JAX's cache on in its private folder; a run given a step's shared
    folder says where."""
    from workloads.harness import provenance
    from workloads.harness.cold import fresh_cache_env

    env, run_dir = fresh_cache_env(tmp_path, "t", {"HOME": "/root"})
    cold = frameworks.compile_cache_settings(env)
    assert cold["JAX_ENABLE_COMPILATION_CACHE"] == "true"
    assert cold["JAX_COMPILATION_CACHE_DIR"] == str(run_dir / "jax") and (run_dir / "jax").is_dir()
    assert cold["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] == "0"
    shared = frameworks.shared_compile_caches("/w/cache/shared/jax_matmul")
    # JAX, Warp, PyCUDA and cuDF (CuPy's generator in setup) compile outside what timed and ncu runs measure
    assert set(shared) == {"jax", "warp", "pycuda", "cudf"}
    assert shared["cudf"] == {"CUPY_CACHE_DIR": "/w/cache/shared/jax_matmul/cudf"}
    assert shared["warp"] == {"WARP_CACHE_PATH": "/w/cache/shared/jax_matmul/warp"}
    assert shared["pycuda"] == {"PYCUDA_CACHE_DIR": "/w/cache/shared/jax_matmul/pycuda"}
    settings = frameworks.compile_cache_settings({**shared["jax"], "NUMBA_CACHE_DIR": "/x", "CUPY_CACHE_DIR": "/y"})
    assert settings["JAX_COMPILATION_CACHE_DIR"] == "/w/cache/shared/jax_matmul/jax"
    assert settings["JAX_ENABLE_COMPILATION_CACHE"] == "true" and "NUMBA_CACHE_DIR" not in settings
    # CuPy's folder says whether a cuDF run loaded its step's kernels (shared) or compiled them
    assert settings["CUPY_CACHE_DIR"] == "/y"
    assert "compile_cache" in provenance.collect()


FAKE_INIT = '''\
from workloads.contract import Recipe
from workloads.frameworks import Framework

# a framework the suite does not know: its record lives in the recipe's own folder
FRAMEWORK = Framework(
    name="fakenp", title="FakeNP",
    distributions={"numpy": ("numpy",)},
    cache_variables={},
    cuda_problem=lambda: "FakeNP has no GPU backend",
    timer="a host clock",
    cpu_env={"FAKENP_ON_CPU": "1"},
)

RECIPE = Recipe(name="fake_axpy", title="Fake axpy", seed_document="a test of the suite itself", framework="fakenp",
                requires=("numpy",), variants=("baseline",), default_size=1000, size_meaning="elements")
'''

FAKE_MAIN = '''\
import sys

from workloads.fake_axpy import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
'''

FAKE_VARIANT = '''\
import os
import time

import numpy as np

from workloads.backend import EventPair
from workloads.contract import Variant, Work, WorkloadError


class HostPair(EventPair):
    def start(self): self.t0 = time.perf_counter()
    def stop(self): self.t1 = time.perf_counter()
    def elapsed_ms(self): return (self.t1 - self.t0) * 1e3


class Axpy(Variant):
    name = "baseline"
    summary = "2 x + y on the host"

    def setup(self):
        if os.environ.get("FAKENP_ON_CPU") != "1":
            raise WorkloadError("the framework's CPU switch was not applied")
        rng = np.random.default_rng(self.seed)
        self.x, self.y = rng.random(self.size), rng.random(self.size)

    def step(self): self.out = 2.0 * self.x + self.y
    def result(self): return self.out
    def reference(self): return 2.0 * self.x + self.y
    def work(self): return Work(bytes_read=16 * self.size, bytes_written=8 * self.size, flops=2 * self.size)
    def synchronize(self): pass
    def event_pair(self): return HostPair()


VARIANT = Axpy
'''


def test_a_recipe_of_a_new_framework_runs_its_cpu_path_through_device_cpu(tmp_path):
    """A throwaway framework and recipe in a copy of the tracked files: the recipe's folder alone,
    its Framework record in its __init__.py; no existing file changes to run it."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    copy = tmp_path / "repo"
    for rel in files.decode().split("\0"):
        # the captures and reports are not needed to run a workload
        if not rel or rel.startswith(("reports/", "tests/data/")):
            continue
        dst = copy / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes((REPO / rel).read_bytes())
    folder = copy / "workloads" / "fake_axpy"
    folder.mkdir()
    (folder / "__init__.py").write_text(FAKE_INIT)
    (folder / "__main__.py").write_text(FAKE_MAIN)
    (folder / "baseline.py").write_text(FAKE_VARIANT)

    out = tmp_path / "rec.json"
    r = _run(["workloads.fake_axpy", "--device", "cpu", "--variant", "baseline", "--mode", "timed", "--warmup",
              "1", "--repeats", "3", "--output", str(out)], cwd=copy)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "device=cpu" in r.stdout and 'timer="a host clock"' in r.stdout
    rec = json.loads(out.read_text())
    assert rec["device"] == "cpu" and rec["relative_error"] < 1e-15 and len(rec["times_ms"]) == 3
    r = _run(["workloads.fake_axpy", "--variant", "baseline"], cwd=copy)
    assert r.returncode == 2
    assert r.stderr.strip() == ("fake_axpy: no CUDA GPU: " + (frameworks.driver_problem() or "FakeNP has no GPU backend")
                                + "; its CPU path: python -m workloads.fake_axpy --device cpu --variant ...")
    # the registry of the copy finds it, last in report order, and its framework record with it
    r = subprocess.run([sys.executable, "-c", "from workloads.registry import RECIPES; from workloads import frameworks; "
                        "print(RECIPES[-1].name, frameworks.framework(RECIPES[-1].framework).title)"],
                       cwd=copy, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "fake_axpy FakeNP", r.stderr
