"""Where Nsight Compute may not read counters: the preflight detects ncu's refusal, the rule graph
schedules no ncu capture, and the reports rest on what needs no counters, each number labelled.
The counter-free launch resources and theoretical occupancy are checked against what ncu measured
on the committed launches."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from analysis.model import limiter, no_counters, run_summary

from analysis.report import markdown
from analysis.model.limiter import advice
from analysis.common.gzfiles import existing_capture
from analysis.readers.nsys.trace import Trace
from analysis.model.run_summary import load_json
from workloads.harness import preflight

from conftest import REFERENCE
import snakemake_forks
from test_preflight_and_pipeline import _repo_copy


#: what ncu 2025.x prints when the driver restricts the counters to administrators (as quoted in
#: NVIDIA's ERR_NVGPUCTRPERM page and users' reports), and the exit status it then returns
REFUSED_LINE = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                "Counters on the target device 0. For instructions on enabling permissions and to get more "
                "information see https://developer.nvidia.com/ERR_NVGPUCTRPERM")
REFUSED_EXIT_STATUS = 1

#: committed runs profiled by ncu: one per framework, each launch shape and resource case
#: (grid-stride, one block, 2-D grid and large dynamic shared memory, static shared memory, 1024-thread blocks)
PROFILED_RUNS = ["cupy_sqdiff/baseline/n16384", "pycuda_kernel/baseline/n268435456",
                 "pycuda_kernel/vectorized/n268435456", "warp_sph/baseline/n62500", "jax_matmul/bf16/n8192",
                 "jax_matmul/float32/n8192", "numba_ufunc/baseline/n268435456", "cudf_groupby/agg_all/n50000000"]


def _stand_in_ncu(tmp_path):
    """An `ncu` that fails the way the real one does where counters are refused."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n"
                   "echo '==PROF== Connected to process 4242 (/usr/bin/python3.12)'\n"
                   f"echo '{REFUSED_LINE}' >&2\n"
                   "echo '==PROF== Disconnected from process 4242'\n"
                   f"exit {REFUSED_EXIT_STATUS}\n")
    exe.chmod(0o755)
    return str(exe)


@pytest.mark.parametrize("run", PROFILED_RUNS)
def test_counter_free_resources_and_occupancy_equal_ncus(run):
    d = REFERENCE / run
    ncu_path = d / "ncu-raw.csv"
    launches = run_summary.summarize_ncu(str(ncu_path))
    with Trace(existing_capture(str(d), "nsys.sqlite")) as ex:
        res = ex.kernel_launch_resources()
    assert res["device"]["sm_count"] == 132 and res["device"]["max_warps_per_sm"] == 64
    compared = 0
    for launch in launches:
        m = launch["metrics"]
        key = limiter.kernel_key(launch["kernel_name"])
        same = [k for k in res["kernels"] if limiter.kernel_key(k["name"]) == key
                and k["grid"][0] * k["grid"][1] * k["grid"][2] == m["launch__grid_size"]
                and k["block"][0] * k["block"][1] * k["block"][2] == m["launch__block_size"]
                and k["registers_per_thread"] == m["launch__registers_per_thread"]]
        if not any(limiter.kernel_key(k["name"]) == key for k in res["kernels"]):
            # the ncu run is another process: a GEMM library may pick another kernel there (cuBLAS's
            # nvjet_*_NNN under ncu for the traced nvjet_*_NNT at one matrix side); nothing to compare
            continue
        assert same, f"{run}: ncu launch {launch['kernel_name'][:60]} has no launch of that shape in the trace"
        occ = no_counters.theoretical_occupancy(same[0], res["device"])
        assert occ.pct == pytest.approx(m["sm__maximum_warps_per_active_cycle_pct"]), launch["kernel_name"][:60]
        assert occ.blocks_limit["registers"] == m["launch__occupancy_limit_registers"]
        assert occ.blocks_limit["warps"] == m["launch__occupancy_limit_warps"]
        assert occ.blocks_limit["blocks"] == m["launch__occupancy_limit_blocks"]
        assert occ.blocks_limit["shared memory"] == m["launch__occupancy_limit_shared_mem"]
        compared += 1
    assert compared >= max(1, len(launches) - 1)


def test_preflight_detects_refused_counters_and_says_the_fix(tmp_path):
    counters = preflight.counter_access(_stand_in_ncu(tmp_path))
    assert counters["readable"] is False
    assert counters["exit_status"] == REFUSED_EXIT_STATUS
    assert counters["message"] == REFUSED_LINE
    note = preflight.counters_note(counters)
    assert "NVreg_RestrictProfilingToAdminUsers=0" in note and "administrator" in note
    assert "without counters" in note and "no step runs under ncu" in note
    off = preflight.counter_access("none")
    assert off["readable"] is False and "ncu=none" in preflight.counters_note(off)


def test_preflight_tells_readable_counters_from_a_probe_that_failed_otherwise(tmp_path):
    ok = tmp_path / "ok" / "ncu"
    ok.parent.mkdir()
    ok.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/argv\"\n"
                  "echo '==PROF== Connected to process 4242 (/usr/bin/python3.12)'\n"
                  "echo '==PROF== Profiling \"cookbook_counter_probe\" - 0: 0%....50%....100% - 1 pass'\n"
                  "echo '==PROF== Disconnected from process 4242'\n")
    ok.chmod(0o755)
    assert preflight.counter_access(str(ok)) == {"readable": True}
    # the probe leaves the GPU's clocks as found, as every ncu run of the suite does
    assert (ok.parent / "argv").read_text().startswith("--clock-control none --metrics sm__cycles_elapsed.sum ")
    assert preflight.counters_note({"readable": True}) is None
    broken = tmp_path / "broken" / "ncu"
    broken.parent.mkdir()
    broken.write_text("#!/bin/sh\necho '==ERROR== Failed to prepare kernel for profiling' >&2\nexit 1\n")
    broken.chmod(0o755)
    failed = preflight.counter_access(str(broken))
    assert failed["readable"] is None and "exit status 1" in failed["reason"]
    assert "Failed to prepare kernel" in failed["detail"]


def _dry_run(repo, *config):
    fake = repo.parent / "fakemods"
    for mod in ("pycuda", "numpy"):  # importable names only, so that the recipe is planned
        if mod == "pycuda":
            (fake / mod).mkdir(parents=True, exist_ok=True)
            (fake / mod / "__init__.py").write_text("")
    env = dict(os.environ, PYTHONPATH=str(fake))
    r = snakemake_forks.run(["-n", "profile_all", "--config", "only_workloads=[pycuda_kernel]", *config], repo,
                            env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def _write_preflight(repo, counters):
    # the record the preflight writes, its counters from a probe of the stand-in ncu
    out = repo / "results" / "captures" / "preflight.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"tools": {}, "recipes_skipped": {}, "counters": counters}))


def test_rule_graph_schedules_no_ncu_capture_without_counters(tmp_path):
    repo = _repo_copy(tmp_path)
    _write_preflight(repo, preflight.counter_access(_stand_in_ncu(tmp_path)))
    refused = _dry_run(repo)
    assert "rule timed:" in refused and "rule nsys:" in refused
    assert "rule ncu:" not in refused and "ncu.ncu-rep" not in refused
    # the same graph with counters readable profiles the configured variants under ncu
    _write_preflight(repo, {"readable": True})
    allowed = _dry_run(repo)
    assert "rule ncu:" in allowed and "pycuda_kernel/vectorized/n268435456/ncu.ncu-rep" in allowed
    # --config ncu=none switches it off whatever the preflight found
    switched_off = _dry_run(repo, "ncu=none")
    assert "rule ncu:" not in switched_off and "rule timed:" in switched_off


def test_report_without_ncu_files_labels_derived_numbers_and_lists_what_needs_counters(tmp_path):
    repo = _repo_copy(tmp_path)
    ref = tmp_path / "no_counters_ref"
    shutil.copytree(REFERENCE / "pycuda_kernel", ref / "pycuda_kernel",
                    ignore=shutil.ignore_patterns("ncu*"))
    shutil.copy(REFERENCE / "ceilings.json", ref / "ceilings.json")
    # the run's preflight, as a run whose counters were refused records it
    pre = json.loads((REFERENCE / "preflight.json").read_text())
    pre["counters"] = preflight.counter_access(_stand_in_ncu(tmp_path))
    (ref / "preflight.json").write_text(json.dumps(pre))
    assert not list(ref.rglob("ncu*"))
    r = snakemake_forks.run(["--cores", "1", "results/reports/reference/pycuda_kernel.md", "--config",
                             f"reference={{name: nocounters, dir: {ref}}}"], repo, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md = (repo / "results" / "reports" / "reference" / "pycuda_kernel.md").read_text()
    assert "**No performance counters**" in md
    assert "No variant ran under Nsight Compute" not in md
    # derived numbers, labelled
    assert "theoretical occupancy (derived without counters)" in md
    # the trace's columns are the trace's launches (mean duration of the step's scale_vec4 launches)
    vec = REFERENCE / "pycuda_kernel" / "vectorized" / "n268435456"
    with Trace(existing_capture(str(vec), "nsys.sqlite")) as ex:
        (k,) = [k for k in ex.kernel_launch_resources()["kernels"] if k["name"] == "scale_vec4"]
    avg_us = k["total_ns"] / k["launches"] / 1e3
    assert (f"| `vectorized` | `scale_vec4` | {avg_us:.1f} | (1056, 1, 1) | (256, 1, 1) | 20 | 0 | 100% | warps | 1 "
            "| n/a |") in md
    # the limiter as far as the evidence reaches: 90% of the measured copy rate is memory-bound;
    # the one-block baseline is below every rate, and why is not available
    assert "**evidence-limited: device memory-bound** (derived without counters)" in md
    # the share is the record's declared bytes over its median against the run's measured copy rate
    rec = load_json(str(vec / "timing.json"))
    d2d = json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"]["d2d_copy"]["gb_per_s"]
    share = (rec["work"]["bytes_read"] + rec["work"]["bytes_written"]) / rec["timing"]["median_ms"] / 1e6 / d2d
    assert share >= no_counters.BOUND_SHARE  # what makes it memory-bound as far as the evidence reaches
    assert f"{share:.0%} of the measured device-to-device copy rate" in md
    assert "whether latency, occupancy or an SM pipe limits it is not available (needs counters)" in md
    # nsys' own measurements stand as they are
    assert re.search(r"\*\*host link \(\d+% of the call in copies\)\*\* \(measured without counters \(nsys/CUPTI trace\)\)", md)
    # what needs counters is listed, not dropped
    assert "### Needs counters, size 268435456" in md
    for what, _ in no_counters.NEEDS_COUNTERS:
        assert what in md
    assert "NVreg_RestrictProfilingToAdminUsers=0" in md


def test_diagnose_without_any_ncu_profile_is_evidence_limited(tmp_path):
    runs = []
    for variant in ("pinned_async", "device_resident", "vectorized"):
        d = tmp_path / variant
        shutil.copytree(REFERENCE / "pycuda_kernel" / variant / "n268435456", d, ignore=shutil.ignore_patterns("ncu*"))
        runs.append(run_summary.summarize_run(str(d)))
    ceilings = json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"]
    steps = {r["variant"]: no_counters.step_limiter(r, ceilings) for r in runs}
    # the timed call's host-link share stands; the kernels' steps go as far as declared work reaches
    assert steps["pinned_async"].kind == limiter.Kind.HOST_LINK
    assert steps["device_resident"].label() == "evidence-limited"
    assert steps["vectorized"].label() == "evidence-limited: device memory-bound"
    assert steps["vectorized"].unit is limiter.Unit.DRAM
    assert advice.next_move(steps["vectorized"]).startswith(
        "Bound by device memory as far as the evidence without counters")
    # without ceilings the measured limiter is unchanged: nothing profiled
    assert limiter.step_limiter(runs[2], []).kind == limiter.Kind.NOT_PROFILED
    # the index says the run had no counters, and why
    pre = json.loads((REFERENCE / "preflight.json").read_text())
    pre["counters"] = preflight.counter_access(_stand_in_ncu(tmp_path))
    from analysis.model import report_model
    from workloads.registry import BY_NAME

    ceilings_record = json.loads((REFERENCE / "ceilings.json").read_text())
    model = report_model.build(BY_NAME["pycuda_kernel"], {268435456: runs}, ceilings_record)
    md = markdown.index_report([model], ceilings_record, pre)
    assert "**Without performance counters** (counters refused by the driver (ERR_NVGPUCTRPERM))" in md
    assert "| evidence-limited: device memory-bound (trace and declared work, derived without counters) |" in md
    # the launch resources ride along in every run summary
    (k,) = runs[2]["counter_free"]
    assert (k["name"], k["registers_per_thread"], k["theoretical_occupancy_pct"]) == ("scale_vec4", 20, 100.0)


def test_a_one_block_kernel_is_limited_by_its_grid_without_counters(tmp_path):
    d = tmp_path / "baseline"
    shutil.copytree(REFERENCE / "pycuda_kernel" / "baseline" / "n268435456", d, ignore=shutil.ignore_patterns("ncu*"))
    run = run_summary.summarize_run(str(d))
    step = no_counters.step_limiter(run, json.loads((REFERENCE / "ceilings.json").read_text())["ceilings"])
    assert step.label() == "evidence-limited: grid under one wave"
    assert "`scale_one_block` launches 1 block(s) of 256 threads" in step.detail
    assert advice.next_move(step).startswith("Limited by a grid under one wave (derived without counters)")
