"""The Warp SPH recipe on Warp's CPU device, at small sizes (no GPU needed).

Every variant runs its real code: the same kernels, the same hash grid, and for the graph variants
Warp 1.19's CPU capture (CUDA graphs are CUDA-only; on the CPU Warp records the launches and
replays them from C++), or plain launches with COOKBOOK_WARP_CPU_CAPTURE=0.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO

# Warp is imported by the tests that run it, not at collection
pytestmark = pytest.mark.skipif(importlib.util.find_spec("warp") is None, reason="could not import 'warp'")

from workloads.contract import ResultMismatch, check_result, relative_error  # noqa: E402
from workloads.warp_sph import RECIPE, common  # noqa: E402

N = 1500  # particles: a 10 x 40 x 10 column, filled to 1500 (one frame ~0.1 s on one core)
GRAPH_VARIANTS = ("graph", "fused", "pruned", "sorted", "cell_list", "plane_threads")


@pytest.fixture(scope="module", autouse=True)
def cpu_device(tmp_path_factory):
    import warp as wp

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COOKBOOK_WARP_DEVICE", "cpu")
        mp.delenv("COOKBOOK_WARP_CPU_CAPTURE", raising=False)
        if wp.config.kernel_cache_dir is None and wp._src.context.runtime is not None:
            # an earlier test in this session set the folder back to None after Warp had resolved
            # it; Warp then cannot load modules. Give this module a folder of its own.
            mp.setattr(wp.config, "kernel_cache_dir", str(tmp_path_factory.mktemp("warp-cache")))
        yield


def make(name: str, size: int = N):
    v = RECIPE.variant_class(name)(size=size, seed=0)
    v.setup()
    return v


@pytest.fixture(scope="module")
def variants():
    out = {name: make(name) for name in RECIPE.variants}
    yield out
    for v in out.values():
        v.teardown()


@pytest.fixture(scope="module")
def reference_one_frame(variants):
    return variants["baseline"].reference()


def test_recipe_declares_its_variants_experiments_and_sections():
    assert RECIPE.variants == ("baseline", "graph", "fused", "pruned", "sorted", "cell_list", "plane_threads")
    assert RECIPE.default_size == 62500
    assert common.Params(n=62500).lattice == (25, 100, 25)
    assert RECIPE.experiments == ("scoped_timer", "coldstart")
    for name in RECIPE.experiments:
        assert (REPO / "workloads" / "warp_sph" / f"exp_{name}.py").is_file()
    for name in RECIPE.sections:
        assert (REPO / "analysis" / "report" / "sections" / f"warp_sph_{name}.py").is_file()


@pytest.mark.parametrize("name", RECIPE.variants)
def test_variant_matches_float64_reference(variants, reference_one_frame, name):
    v = variants[name]
    # step() restarts from the starting state: the second call gives the first call's frame
    v.step()
    v.step()
    v.synchronize()
    err = check_result(v.result(), reference_one_frame.copy(), v.tolerance, f"warp_sph/{name}")
    assert err < v.tolerance


@pytest.mark.parametrize("name", GRAPH_VARIANTS)
def test_graph_variants_capture_on_cpu(variants, name):
    # CUDA graphs exist only on CUDA devices; Warp 1.19 captures and replays on its CPU device itself
    assert variants[name].frame_mode == "cpu_capture"
    assert variants[name].graph is not None
    assert variants["baseline"].frame_mode == "launches"


def test_graph_variant_falls_back_to_launches_on_cpu(monkeypatch, variants):
    monkeypatch.setenv("COOKBOOK_WARP_CPU_CAPTURE", "0")
    v = make("fused")
    assert v.frame_mode == "launches" and v.graph is None
    v.step()
    captured = variants["fused"]
    captured.step()
    assert np.array_equal(v.result(), captured.result())
    v.teardown()


def test_optimized_variants_agree_with_baseline_after_five_frames(variants):
    after = {}
    for name, v in variants.items():
        v.step()
        v.advance(4)
        after[name] = v.result()
    base = after["baseline"]
    # same kernels replayed from a capture: the same numbers
    assert np.array_equal(after["graph"], base)
    # the fused kernel does the three passes' float32 operations in the same order
    assert relative_error(after["fused"], base.copy()) <= 1e-7
    # pruned sums neighbours in another order and divides differently: float32 rounding only
    err = relative_error(after["pruned"], base.copy())
    assert 0 < err <= variants["pruned"].tolerance
    # sorted, cell_list and plane_threads keep the particles in another order and hand positions
    # back in the original one: rounding-level differences from pruned, not a shuffled array
    for name in ("sorted", "cell_list", "plane_threads"):
        assert 0 < relative_error(after[name], after["pruned"].copy()) <= 1e-7, name
    ref = common.reference_frames(variants["baseline"], frames=5)
    assert relative_error(base, ref) <= variants["baseline"].tolerance


@pytest.mark.parametrize("name", RECIPE.variants)
def test_neighbour_passes_match_float64_on_an_interacting_cluster(variants, name):
    # the first frame's lattice barely interacts; a random cluster of side 6h has ~25 neighbours each
    rng = np.random.default_rng(1)
    x = rng.random((N, 3)) * 6 * 0.8 + np.array([10.0, 1.0, 10.0])
    vel = rng.standard_normal((N, 3)) * 0.5
    v = variants[name]
    rho, a = v.forces(x, vel)
    rho64, a64 = common.reference_forces(v, x, vel)
    assert common.pairs_within(x, v.params.h) > 20 * N
    assert relative_error(rho, rho64.copy()) < 1e-5
    assert relative_error(a, a64.copy()) < 1e-5


def test_check_catches_a_corrupted_step(reference_one_frame):
    v = make("baseline")
    # the SPH forces left out (gravity and walls only): off by ~1e-4 after one frame
    v.params = dataclasses.replace(v.params, stiffness=0.0, dynamic_visc=0.0)
    v.step()
    with pytest.raises(ResultMismatch, match="exceeds tolerance"):
        check_result(v.result(), reference_one_frame.copy(), v.tolerance, "warp_sph/corrupted")

    class NoDrift(RECIPE.variant_class("baseline")):
        def launch_integration_on(self, x, v) -> None:  # walls and kick, but positions never move
            from workloads.warp_sph import kernels

            p = self.params
            self.wp.launch(kernels.kick, dim=self.size, inputs=[self.v, self.a, p.dt], device=self.device)

    w = NoDrift(size=N, seed=0)
    w.setup()
    w.step()
    with pytest.raises(ResultMismatch):
        check_result(w.result(), reference_one_frame.copy(), w.tolerance, "warp_sph/no-drift")


def test_declared_work_is_positive_and_scales_with_size():
    small, large = make("baseline", 1000), make("baseline", 4000)
    ws, wl = small.work(), large.work()
    for w in (ws, wl):
        assert w.bytes_read > 0 and w.bytes_written > 0 and w.flops > 0 and w.flops_kind == "fp32"
    assert 3.5 < wl.bytes_read / ws.bytes_read < 4.5
    assert 3.0 < wl.flops / ws.flops < 5.0
    # the pruned step's grid has 100^3 buckets: its build clears far more cell memory
    pr = make("pruned", 1000)
    assert pr.work().bytes_written - ws.bytes_written == 40 * 8 * (100 ** 3 - 25 ** 3)
    for v in (small, large, pr):
        v.teardown()


def test_sorted_steps_keep_particles_in_cell_order():
    # after a frame, slot order follows the cells: the cell of each slot never decreases (cell_list
    # and plane_threads: by construction of the counting sort; sorted: the grid's order from the
    # last substep's build, so nearly); every particle is in exactly one slot
    for name in ("sorted", "cell_list", "plane_threads"):
        v = make(name)
        v.step()
        ids = v.ids.numpy()
        assert np.array_equal(np.sort(ids), np.arange(v.size))
        assert not np.array_equal(ids, np.arange(v.size))  # the particles really moved between slots
        if name != "sorted":
            x = v.x.numpy().astype(np.float64)
            dims = np.array(v.grid_dims)
            c = np.clip(np.floor(x / v.params.h).astype(np.int64), 0, dims - 1)
            cell = (c[:, 2] * dims[1] + c[:, 1]) * dims[0] + c[:, 0]
            # positions moved by one integration after the sort: at most a few particles crossed a cell
            assert np.count_nonzero(np.diff(cell) < 0) < 0.01 * v.size
            start = v.cell_start.numpy()
            assert start[-1] == v.size and np.all(np.diff(start) >= 0)
        v.teardown()


def test_cell_list_work_counts_its_own_build():
    cl, pr = make("cell_list", 1000), make("pruned", 1000)
    cells = 100 ** 3
    # writes per substep: the counts cleared and scanned (1M+1 each) instead of the hash grid's two
    # cleared cell arrays; cell and rank per particle, then x, v and id scattered, instead of the
    # grid's four id/key arrays
    n = 1000
    own = 2 * 4 * (cells + 1) + 2 * 4 * n + (2 * 12 * n + 4 * n)
    grid = 4 * 4 * n + 2 * 4 * cells
    assert cl.work().bytes_written - pr.work().bytes_written == 40 * (own - grid)
    assert cl.work().flops == pr.work().flops
    cl.teardown()
    pr.teardown()


def test_candidate_counts_behind_the_pruned_prediction():
    p = common.Params(n=62500)
    x, _ = common.starting_state(p, 0)
    # the numbers the pruned step's docstring quotes, per particle
    assert common.candidate_count(x, p.h, p.example_grid_dims) / p.n == pytest.approx(108.0, abs=0.05)
    assert common.candidate_count(x, p.h, p.box_grid_dims) / p.n == pytest.approx(25.2, abs=0.05)
    assert common.pairs_within(x, p.h) / p.n == pytest.approx(3.9, abs=0.05)


def test_variant_modules_import_without_warp():
    code = ("import sys; import workloads.warp_sph, workloads.warp_sph.baseline, workloads.warp_sph.graph, "
            "workloads.warp_sph.fused, workloads.warp_sph.pruned, workloads.warp_sph.sorted, "
            "workloads.warp_sph.cell_list, workloads.warp_sph.plane_threads, workloads.warp_sph.exp_scoped_timer, "
            "workloads.warp_sph.exp_coldstart; assert 'warp' not in sys.modules, 'warp imported'")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_coldstart_child_records_warps_module_loads(tmp_path):
    # a real child process on the CPU device; Warp's own module-load line, captured via set_logger
    out = tmp_path / "child.json"
    env = dict(os.environ, COOKBOOK_WARP_DEVICE="cpu")
    subprocess.run([sys.executable, "-m", "workloads.warp_sph.exp_coldstart", "--child", str(out),
                    "--variant", "baseline", "--size", "300"], cwd=REPO, env=env, check=True,
                   capture_output=True, text=True)
    rec = json.loads(out.read_text())
    loads = {m["module"]: m for m in rec["module_loads"]}
    assert loads["workloads.warp_sph.kernels"]["how"] in ("compiled", "cached")
    assert loads["workloads.warp_sph.kernels"]["ms"] > 0
    assert rec["stamps"]["first_frame_unix_ns"] > rec["stamps"]["setup_done_unix_ns"]


@pytest.mark.parametrize("driver_jit", [True, False])
def test_coldstart_deletes_only_its_own_cache_folders(tmp_path, monkeypatch, driver_jit):
    """Every state's caches are its own and gone afterwards; the run with the driver's cache off is made only
    where the cold run left that cache non-empty (the driver JIT-compiled PTX)."""
    from workloads.warp_sph import exp_coldstart

    seen = []

    def fake_child(python, variant, size, env, label):
        # stands in for the child process: leaves a file in the kernel cache it was given
        cache = env["COOKBOOK_WARP_KERNEL_CACHE"]
        assert cache.startswith(str(tmp_path / "out" / "cache"))
        assert (env.get("CUDA_CACHE_DISABLE") == "1") == (label == "cold_cache_disabled")
        with open(os.path.join(cache, "marker"), "w") as f:
            f.write(label)
        if driver_jit and env.get("CUDA_CACHE_DISABLE") != "1":
            with open(os.path.join(env["CUDA_CACHE_PATH"], "jitted"), "w") as f:
                f.write(label)
        seen.append((label, cache, env["CUDA_CACHE_PATH"]))
        return {"variant": variant, "state": label, "phases": {"time_to_first_result_s": 1.0},
                "module_loads": [], "provenance": {}}

    monkeypatch.setattr(exp_coldstart, "_run_child", fake_child)
    mine = tmp_path / "out" / "keep.json"
    mine.parent.mkdir()
    mine.write_text("{}")
    exp_coldstart.run_experiment(str(tmp_path / "out"), sys.executable, ["baseline"], 100)
    labels = [s[0] for s in seen]
    record = json.loads((tmp_path / "out" / "coldstart.json").read_text())
    if driver_jit:
        assert labels == list(exp_coldstart.STATES) and record["skipped"] == {}
    else:
        assert labels == [s for s in exp_coldstart.STATES if s != "cold_cache_disabled"]
        assert "no PTX" in record["skipped"]["baseline"]["cold_cache_disabled"]
    # warm reuses the first cold run's folders; the other cold runs get fresh ones
    assert seen[1][1:] == seen[0][1:] and all(s[1] != seen[0][1] for s in seen[2:])
    assert not (tmp_path / "out" / "cache").exists()
    assert mine.exists()
    assert record["states"] == list(exp_coldstart.STATES)


def test_coldstart_section_leaves_out_a_state_that_was_not_run():
    from analysis.report.sections import warp_sph_coldstart as section

    run = {"variant": "baseline", "phases": {"time_to_first_result_s": 2.0}, "binaries": ["a.cubin"],
           "module_loads": [{"module": "m", "ms": 5.0, "how": "compiled"}]}
    record = {"size": 10, "runs": [dict(run, state="cold_fresh_cache"), dict(run, state="warm")],
              "skipped": {"baseline": {"cold_cache_disabled": "empty"}}}
    text = section.render_markdown(record, section.table_data(record))
    assert "CUDA_CACHE_DISABLE=1 |" not in text and "| `baseline`: cold, fresh CUDA_CACHE_PATH | `baseline`: warm |" in text
    assert "JIT-compiled no PTX" in text


def test_scoped_timer_child_times_every_variant_and_mode(tmp_path):
    # the measured part of exp_scoped_timer, run without nsys on the CPU device: Warp's activity
    # timing is CUDA-only, so the activity lists stay empty here, but every frame has its timer
    from workloads.warp_sph import exp_scoped_timer as exp

    out = tmp_path / "child.json"
    env = dict(os.environ, COOKBOOK_WARP_DEVICE="cpu")
    subprocess.run([sys.executable, "-m", "workloads.warp_sph.exp_scoped_timer", "--child", str(out),
                    "--size", "300", "--frames", "2"], cwd=REPO, env=env, check=True, capture_output=True)
    rec = json.loads(out.read_text())
    assert [(r["variant"], r["mode"]) for r in rec["runs"]] == [
        (v, m) for v in ("baseline", "graph") for m in exp.MODES]
    for r in rec["runs"]:
        assert [f["index"] for f in r["frames"]] == [0, 1]
        assert all(f["elapsed_ms"] > 0 for f in r["frames"])
    assert rec["nvtx_domain"] == exp.NVTX_DOMAIN


def test_a_coldstart_child_holds_the_turn_its_experiment_took_before_launching_it(tmp_path):
    """In the pipeline each cold or warm process gets its GPU turn from the experiment before its
    launch (gpu_turn.turn_for_child, via coldwarm.run_recording): the child's turn record starts
    before the child's own launch stamp and says it was handed over."""
    from workloads.harness import gpu_turn
    from workloads.tools.coldwarm import run_recording

    env = dict(os.environ, COOKBOOK_WARP_DEVICE="cpu", PYTHONPATH=str(REPO),
               **{gpu_turn.LOCK_VARIABLE: str(tmp_path / "gpu0.lock"),
                  gpu_turn.RECORD_VARIABLE: str(tmp_path / "turn")})
    rec = run_recording(lambda out: [sys.executable, "-m", "workloads.warp_sph.exp_coldstart", "--child", out,
                                     "--variant", "baseline", "--size", "300"], env, "probe")
    [turn_path] = tmp_path.glob("turn-*.json")
    turn = json.loads(turn_path.read_text())
    assert turn["handed_by_parent"] is True
    assert turn["started_unix_ns"] <= rec["stamps"]["launch_unix_ns"] < turn["ended_unix_ns"]
    assert rec["stamps"]["second_frame_unix_ns"] < turn["ended_unix_ns"]
