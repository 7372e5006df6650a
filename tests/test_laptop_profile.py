"""profiles/laptop sizes every recipe for a GPU with 8 GB: the bytes each size of the recipes'
`laptop` preset declares (the recipes' own Work: what one call reads and writes in device memory)
fit twice over, leaving room for temporaries, the CUDA context and the libraries' pools."""
from __future__ import annotations

import pytest
import yaml

from workloads.registry import BY_NAME, PRESETS, _facts_file, facts_for_run

from conftest import REPO

LAPTOP_GPU_BYTES = 8 * 10**9
#: a variant's resident data is its declared inputs and outputs, plus at most as much again
HEADROOM = 2


def _configured_sizes(c: dict) -> set[int]:
    return set(c["sizes"]) | set(c["ncu"]["sizes"]) | {c.get("coldwarm_size", min(c["sizes"]))}


def test_the_laptop_profile_runs_the_laptop_preset():
    suite = yaml.safe_load((REPO / "profiles" / "laptop" / "suite.yaml").read_text())
    assert suite["preset"] == "laptop"
    assert "laptop" in yaml.safe_load((REPO / "profiles" / "laptop" / "config.yaml").read_text())["configfiles"][1]


def test_every_recipe_sizes_itself_for_the_laptop():
    """A recipe without a laptop preset would keep its default sizes (an H200's)."""
    assert [w for w in BY_NAME if "sizes" not in (_facts_file(w).get("laptop") or {})] == []


CASES = [(w, v, s) for w, c in facts_for_run("laptop").items() for s in sorted(_configured_sizes(c))
         for v in BY_NAME[w].variants if w != "warp_sph"]


@pytest.mark.parametrize(("workload", "variant", "size"), CASES, ids=lambda x: str(x))
def test_each_laptop_size_fits_8_gb(workload, variant, size):
    work = BY_NAME[workload].variant_class(variant)(size).work()
    declared = work.bytes_read + work.bytes_written
    assert declared * HEADROOM <= LAPTOP_GPU_BYTES, f"{workload}/{variant} at {size}: {declared / 1e9:.2f} GB declared"


def test_warp_keeps_the_example_size():
    """Warp's declared work is per frame of 40 substeps, many passes over the same particles, so it
    does not measure memory; its particles (positions, velocities, densities, the hash grid) take a
    few MB at the example's 62,500."""
    assert _configured_sizes(facts_for_run("laptop")["warp_sph"]) == {62500}


def test_the_h200_sizes_would_not_pass():
    """The check has teeth: the default preset's largest CuPy size declares more than 8 GB allows."""
    assert 16384 in facts_for_run("default")["cupy_sqdiff"]["sizes"]
    work = BY_NAME["cupy_sqdiff"].variant_class("baseline")(16384).work()
    assert (work.bytes_read + work.bytes_written) * HEADROOM > LAPTOP_GPU_BYTES


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_of_every_recipe_is_valid(preset):
    """Each preset laid over each recipe's default passes the schema and names only its steps, and
    every step it runs keeps a size (registry.check_facts raises otherwise)."""
    facts = facts_for_run(preset)
    assert list(facts) == list(BY_NAME)


def test_the_smoke_sizes_are_no_larger_than_the_laptop_ones():
    smoke, laptop = facts_for_run("smoke"), facts_for_run("laptop")
    for w in BY_NAME:
        assert max(smoke[w]["sizes"]) <= min(laptop[w]["sizes"]), w


def test_the_config_schema_offers_the_registrys_presets():
    schema = yaml.safe_load((REPO / "rules" / "schemas" / "config.schema.yaml").read_text())
    assert schema["properties"]["preset"]["enum"] == list(PRESETS)
