"""The workload contract: registry, variants, result checks, declared work, CLI."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from workloads import annotate
from workloads.contract import ResultMismatch, Variant, Work, WorkloadError, check_result, relative_error
from workloads.registry import RECIPES, BY_NAME

from conftest import REPO


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.name)
def test_every_variant_loads_without_a_gpu(recipe):
    # the first variant is the baseline every report compares with; it is called "baseline" unless
    # the seed names it (cuDF's split_agg)
    assert recipe.variants[0] in ("baseline", "split_agg"), "a recipe starts with its baseline"
    for name in recipe.variants:
        cls = recipe.variant_class(name)
        assert issubclass(cls, Variant) and cls.name == name
        assert cls.summary.strip(), f"{recipe.name}/{name} needs a one-line summary"


def test_per_variant_facts_are_declared_once_in_the_recipe_table():
    """improves_on and compiles_in_setup live in the recipe's RECIPE table only (the pipeline reads
    them without importing a variant): no variant class states them again."""
    for recipe in RECIPES:
        for name in recipe.variants:
            cls = recipe.variant_class(name)
            assert not hasattr(cls, "improves_on") and not hasattr(cls, "compiles_in_setup"), f"{recipe.name}/{name}"


def test_a_recipe_table_naming_an_unknown_variant_is_refused_with_its_file():
    """Recipe.compiles_in_setup decides which nsys runs load the shared compile cache: a name that is
    not one of the recipe's variants is refused, naming the recipe's __init__.py and the key."""
    import dataclasses

    from workloads.contract import RecipeFactsError

    warp = BY_NAME["warp_sph"]
    assert "baseline" not in warp.compiles_in_setup and "graph" in warp.compiles_in_setup
    with pytest.raises(RecipeFactsError, match=r"workloads/warp_sph/__init__.py: RECIPE: compiles_in_setup names "
                                               r"unknown variants \['turbo'\]") as e:
        dataclasses.replace(warp, compiles_in_setup=("turbo",))
    assert e.value.path == "workloads/warp_sph/__init__.py"
    with pytest.raises(RecipeFactsError, match=r"warp_sph/__init__.py: RECIPE: improves_on names unknown variant 'turbo'"):
        dataclasses.replace(warp, improves_on=(("turbo", "baseline"),))
    # PyCUDA's steps all build their SourceModule in setup
    pycuda = BY_NAME["pycuda_kernel"]
    assert set(pycuda.compiles_in_setup) == set(pycuda.variants)


def test_a_variant_writes_the_authors_hooks_and_gets_the_plumbing_from_its_framework():
    """Variant's own body is the author's contract; synchronize and event_pair are the framework
    mixin's (workloads.backend.Backend), required still: a variant with neither cannot be made."""
    from workloads.backend import Backend
    from workloads.cupy_backend import CupyDevice
    from workloads.harness.check import CheckHooks

    own = {k for k, v in vars(Variant).items() if callable(v) and not k.startswith("_")}
    assert own == {"setup", "step", "result", "reference", "work", "teardown"}
    assert issubclass(Variant, CheckHooks) and issubclass(CupyDevice, Backend)

    class NoPlumbing(Variant):
        name, summary = "baseline", "x"
        def setup(self): pass
        def step(self): pass
        def result(self): return np.zeros(1)
        def reference(self): return np.zeros(1)
        def work(self): return Work(bytes_read=0, bytes_written=8, flops=0)

    with pytest.raises(TypeError, match="event_pair"):
        NoPlumbing(size=1)
    assert CupyDevice.synchronize is BY_NAME["cupy_sqdiff"].variant_class("fused").synchronize


def test_unknown_variant_names_the_choices():
    with pytest.raises(WorkloadError, match="baseline"):
        BY_NAME["cupy_sqdiff"].variant_class("turbo")


def test_sqdiff_declares_two_reads_one_write_per_element():
    cls = BY_NAME["cupy_sqdiff"].variant_class("fused")
    work = cls(size=1000).work()
    assert work.bytes_read == 2 * 8 * 1000 * 1000
    assert work.bytes_written == 8 * 1000 * 1000
    assert work.flops == 2 * 1000 * 1000


def test_check_accepts_rounding_and_rejects_wrong_results():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((64, 64))
    assert check_result(ref.copy(), ref.copy(), 1e-12, "same") == 0.0
    wrong = ref.copy()
    wrong[3, 5] += 1.0
    with pytest.raises(ResultMismatch, match="relative error"):
        check_result(wrong, ref.copy(), 1e-12, "one element off")
    nan = ref.copy()
    nan[0, 0] = np.nan
    with pytest.raises(ResultMismatch, match="1 non-finite"):
        check_result(nan, ref.copy(), 1e-12, "nan")
    with pytest.raises(ResultMismatch, match="shape"):
        relative_error(ref[:10], ref.copy())


def test_relative_error_matches_the_definition():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal(1000)
    out = ref + 1e-9 * rng.standard_normal(1000)
    expect = np.linalg.norm(out - ref) / np.linalg.norm(ref)
    assert relative_error(out, ref.copy()) == pytest.approx(expect, rel=1e-12)


def test_range_names_round_trip_and_phases_have_distinct_colours():
    name = annotate.range_name("cupy_sqdiff", "fused", "compute")
    assert name == "cupy_sqdiff/fused/compute"
    assert annotate.parse_range_name(name) == ("cupy_sqdiff", "fused", "compute")
    assert annotate.parse_range_name("libcudf/groupby") is None
    assert len(set(annotate.PHASE_COLORS.values())) == len(annotate.PHASE_COLORS)
    with pytest.raises(ValueError, match="unknown phase"):
        with annotate.phase("w", "v", "lunch"):
            pass


def test_cli_help_runs_without_a_gpu():
    out = subprocess.run([sys.executable, "-m", "workloads.cupy_sqdiff", "--help"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    for v in BY_NAME["cupy_sqdiff"].variants:
        assert v in out


def test_default_sample_is_seeded_unique_and_its_reference_is_the_full_ones():
    class Squares(Variant):
        name, summary = "baseline", "x^2"
        def setup(self): pass
        def step(self): pass
        def result(self): return np.arange(self.size, dtype=np.float64) ** 2
        def reference(self): return np.arange(self.size, dtype=np.float64) ** 2
        def work(self): return Work(bytes_read=8 * self.size, bytes_written=8 * self.size, flops=self.size)
        def synchronize(self): pass
        def event_pair(self): pass

    v = Squares(size=200_000, seed=3)
    idx = v.sample_indices(v.size)
    assert np.array_equal(idx, Squares(size=200_000, seed=3).sample_indices(v.size))  # seeded
    assert np.all(np.diff(idx) > 0) and 0.7 * v.check_sample_elements < idx.size <= v.check_sample_elements
    np.testing.assert_array_equal(v.reference_at(idx), v.reference()[idx])
    assert Squares(size=10).sample_indices(10).tolist() == list(range(10))  # small results: every element


def test_the_raw_kernel_step_is_registered():
    from workloads.registry import recipe_facts

    cupy = BY_NAME["cupy_sqdiff"]
    assert cupy.parent_of("raw_kernel") == "fused"
    ncu = recipe_facts("cupy_sqdiff")["ncu"]
    # raw_kernel launches a kernel no other step does
    assert "raw_kernel" in ncu["variants"]
    # one call declares the same work as the step it improves on
    assert cupy.variant_class("raw_kernel")(size=4096).work() == cupy.variant_class("fused")(size=4096).work()
