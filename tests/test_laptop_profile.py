"""profiles/laptop sizes every recipe for a GPU with 8 GB: the bytes each configured size declares
(the recipes' own Work: what one call reads and writes in device memory) fit twice over, leaving
room for temporaries, the CUDA context and the libraries' pools."""
from __future__ import annotations

import copy

import pytest
import yaml

from workloads.registry import BY_NAME

from conftest import REPO

LAPTOP_GPU_BYTES = 8 * 10**9
#: a variant's resident data is its declared inputs and outputs, plus at most as much again
HEADROOM = 2


def _merged(base: dict, over: dict) -> dict:
    """Snakemake's merge of --configfile layers: nested keys update, the rest replace."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = _merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _laptop_config() -> dict:
    base = yaml.safe_load((REPO / "rules" / "config.yaml").read_text())
    return _merged(base, yaml.safe_load((REPO / "profiles" / "laptop" / "suite.yaml").read_text()))


def _configured_sizes(c: dict) -> set[int]:
    return set(c["sizes"]) | set(c["ncu"]["sizes"]) | {c.get("coldwarm_size", min(c["sizes"]))}


def test_the_laptop_profile_sizes_every_recipe():
    base = yaml.safe_load((REPO / "rules" / "config.yaml").read_text())["workloads"]
    laptop = yaml.safe_load((REPO / "profiles" / "laptop" / "suite.yaml").read_text())["workloads"]
    assert set(laptop) == set(base), "a recipe missing here keeps the sizes of rules/config.yaml (an H200's)"


CASES = [(w, v, s) for w, c in _laptop_config()["workloads"].items() for s in sorted(_configured_sizes(c))
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
    assert _configured_sizes(_laptop_config()["workloads"]["warp_sph"]) == {62500}


def test_the_h200_sizes_would_not_pass():
    """The check has teeth: the full config's largest CuPy size declares more than 8 GB allows."""
    work = BY_NAME["cupy_sqdiff"].variant_class("baseline")(16384).work()
    assert (work.bytes_read + work.bytes_written) * HEADROOM > LAPTOP_GPU_BYTES
