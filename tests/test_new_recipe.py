"""A new recipe is one folder: a throwaway recipe added to a copy of the checkout, touching nothing
outside ``workloads/<its name>/``, runs its CPU path and is planned by a dry run of ``profile_all``
at the sizes its own ``profile.yaml`` gives; without that file the dry run stops and names it."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO
import snakemake_forks

NAME = "toy_scale"

INIT = '''\
from workloads.contract import Recipe
from workloads.frameworks import Framework

FRAMEWORK = Framework(
    name="toynp", title="ToyNP",
    distributions={"numpy": ("numpy",)},
    cache_variables={},
    cuda_problem=lambda: "ToyNP has no GPU backend",
    timer="a host clock",
    cpu_env={"TOYNP_ON_CPU": "1"},
)

RECIPE = Recipe(name="toy_scale", title="Toy scale", seed_document="a test of the suite itself", framework="toynp",
                requires=("numpy",), variants=("baseline", "in_place"),
                default_size=1000, size_meaning="elements")
'''

MAIN = '''\
import sys

from workloads.toy_scale import RECIPE
from workloads.harness.runner import main

sys.exit(main(RECIPE))
'''

VARIANT = '''\
import time

import numpy as np

from workloads.backend import EventPair
from workloads.contract import Variant, Work


class HostPair(EventPair):
    def start(self): self.t0 = time.perf_counter()
    def stop(self): self.t1 = time.perf_counter()
    def elapsed_ms(self): return (self.t1 - self.t0) * 1e3


class Scale(Variant):
    name = "{name}"
    summary = "3 x on the host"

    def setup(self):
        self.x = np.random.default_rng(self.seed).random(self.size)
        self.out = np.empty_like(self.x)

    def step(self): {step}
    def result(self): return self.out
    def reference(self): return 3.0 * self.x
    def work(self): return Work(bytes_read=8 * self.size, bytes_written=8 * self.size, flops=self.size)
    def synchronize(self): pass
    def event_pair(self): return HostPair()


VARIANT = Scale
'''

FACTS = '''\
default:
  sizes: [4096, 65536]
  profiled_calls: 2
  coldwarm_variants: [baseline]
  variant_sizes: {in_place: [65536]}
  ncu: {sizes: [65536], variants: [in_place], full_variants: [], launch_skip: 0, launch_count: 1, kernel_regex: null}
lab:
  sizes: [2048]
  variant_sizes: {in_place: [2048]}
  ncu: {sizes: [2048]}
'''


def _copy_of_the_checkout(dest):
    """The checkout's files as git sees them (tracked and new, not ignored), without the committed
    captures, pages and test data, which a dry run of profile_all does not read."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        src = REPO / rel
        if rel.startswith(("reports/", "tests/data/")) or not src.is_file():
            continue
        dst = dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(src.read_bytes())
    return dest


@pytest.fixture(scope="module")
def copy_with_recipe(tmp_path_factory):
    root = _copy_of_the_checkout(tmp_path_factory.mktemp("new_recipe") / "repo")
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    folder = root / "workloads" / NAME
    folder.mkdir()
    (folder / "__init__.py").write_text(INIT)
    (folder / "__main__.py").write_text(MAIN)
    (folder / "baseline.py").write_text(VARIANT.format(name="baseline",
                                                       step="np.multiply(self.x, 3.0, out=self.out)"))
    (folder / "in_place.py").write_text(VARIANT.format(name="in_place",
                                                       step="self.out[:] = self.x; self.out *= 3.0"))
    (folder / "profile.yaml").write_text(FACTS)
    after = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert [f for f in after if f not in before] == [f"workloads/{NAME}/{f}" for f in
                                                     ("__init__.py", "__main__.py", "baseline.py", "in_place.py",
                                                      "profile.yaml")]
    return root


def _env():
    # the copy's own packages, not the editable install's
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TOYNP_ON_CPU")}


def _dry_run(root, *extra):
    return snakemake_forks.run(["-n", "--cores", "1", "profile_all", "--config", f"only_workloads=[{NAME}]", *extra],
                               root, env=_env(), timeout=600)


def test_the_new_recipe_runs_its_cpu_path(copy_with_recipe, tmp_path):
    out = tmp_path / "in_place.json"
    r = subprocess.run([sys.executable, "-m", f"workloads.{NAME}", "--device", "cpu", "--variant", "in_place",
                        "--size", "4096", "--mode", "timed", "--warmup", "1", "--repeats", "3", "--output", str(out)],
                       cwd=copy_with_recipe, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "device=cpu" in r.stdout
    record = json.loads(out.read_text())
    assert record["device"] == "cpu" and record["relative_error"] < 1e-15 and len(record["times_ms"]) == 3


def test_a_dry_run_of_profile_all_plans_it_from_its_own_facts(copy_with_recipe):
    r = _dry_run(copy_with_recipe)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    # the timed jobs' own outputs: a "reason:" line lists other jobs' files in set order, which
    # changes with each process' hash seed
    planned = {path.removeprefix("results/captures/").rsplit("/", 1)[0] for line in out.splitlines()
               if line.strip().startswith("output: ")
               for path in line.strip().removeprefix("output: ").split(", ")
               if path.startswith(f"results/captures/{NAME}/") and path.endswith("/timing.json")}
    # profile.yaml's sizes, in_place only at its variant_sizes; the recipe's default_size nowhere
    assert planned == {f"{NAME}/baseline/n4096", f"{NAME}/baseline/n65536", f"{NAME}/in_place/n65536"}, \
        (planned, [line for line in out.splitlines() if "timing.json" in line][:20])
    assert "n1000" not in out
    # its cold/warm start (coldwarm_variants), at the smallest size
    assert f"coldstart/{NAME}_baseline.json" in out


def test_a_preset_of_the_new_recipe_is_laid_over_its_default(copy_with_recipe):
    r = _dry_run(copy_with_recipe, "preset=lab")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert f"{NAME}/in_place/n2048/timing.json" in out and "n4096" not in out and "n65536" not in out


def test_a_recipe_without_facts_stops_the_dry_run_and_names_the_file(copy_with_recipe):
    facts = copy_with_recipe / "workloads" / NAME / "profile.yaml"
    kept = facts.read_text()
    facts.unlink()
    try:
        r = _dry_run(copy_with_recipe)
    finally:
        facts.write_text(kept)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert f"workloads/{NAME}/profile.yaml: missing" in out, out[-3000:]


def test_facts_naming_an_unknown_step_are_refused_with_the_key(copy_with_recipe, tmp_path):
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text(f"workloads:\n  {NAME}:\n    ncu: {{variants: [fused]}}\n")
    r = _dry_run(copy_with_recipe, "preset=lab", "--configfile", "rules/config.yaml", str(overrides))
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert f"workloads.{NAME}.ncu.variants: no variant 'fused'" in out, out[-3000:]



def test_the_config_holds_knobs_not_recipe_facts():
    """What a recipe runs lives in its folder: rules/config.yaml sets nothing for a named recipe and
    no facts key (its comments may name a recipe in an example)."""
    from workloads.registry import BY_NAME

    lines = (REPO / "rules" / "config.yaml").read_text().splitlines()
    text = "\n".join(line.split(" #")[0] for line in lines if not line.lstrip().startswith("#"))
    assert [w for w in BY_NAME if w in text] == []
    for key in ("kernel_regex", "launch_count", "full_variants", "tensor_ops", "timed_first", "variant_sizes",
                "coldwarm_variants", "profiled_calls"):
        assert f"{key}:" not in text, key
