"""The generic NVTX nesting reader on the committed H200 captures, against what nsys itself said
(its nvtx_sum CSVs kept beside each run) and against the suite's nsys-compatible NVTX projection
report (range level and children, checked against nsys' own CSVs in test_nsys_stats)."""
from __future__ import annotations

import csv
import json

import pytest

from analysis.common.errors import AnalysisInputError
from analysis.readers.nsys.stats import nvtx_gpu_proj_sum
from analysis.readers.nsys.trace import Trace
from analysis.readers.nvtx_tree import counts_by_label, domain_totals, outline, read_tree

from conftest import REFERENCE, reference_runs, reference_trace

RUNS_WITH_STATS = [r for r in reference_runs() if (r / "nsys-stats" / "stats_nvtx_sum.csv").is_file()]
MULTIPROCESS = REFERENCE / "nvtx_multiprocess" / "nsys.sqlite.gz"


def _ids(runs):
    return ["/".join(r.parts[-3:]) for r in runs]


@pytest.mark.parametrize("run", RUNS_WITH_STATS, ids=_ids(RUNS_WITH_STATS))
def test_instances_and_totals_equal_nsys_nvtx_sum(run):
    tree = read_tree(reference_trace(run / "nsys.sqlite.gz"), include_start_end=True)
    with open(run / "nsys-stats" / "stats_nvtx_sum.csv", newline="") as f:
        want = {(row["Style"], row["Range"]): (int(row["Instances"]), int(row["Total Time (ns)"]))
                for row in csv.DictReader(f)}
    assert counts_by_label(tree.ranges) == want


@pytest.mark.parametrize("run", RUNS_WITH_STATS, ids=_ids(RUNS_WITH_STATS))
def test_suite_ranges_nest_in_nothing_and_compute_calls_are_numbered(run):
    workload, variant = run.parts[-3], run.parts[-2]
    tree = read_tree(reference_trace(run / "nsys.sqlite.gz"))
    suite = tree.find(domain="cookbook")
    assert suite
    for r in suite:
        # the suite's ranges are outermost; the frameworks' own ranges (cuDF's, XLA's) nest inside them
        assert r.parent is None and r.depth == 0
        assert all(k.domain != "cookbook" for k in tree.kids(r.index))
        assert r.name.startswith(f"{workload}/{variant}/")
    if workload in ("cupy_sqdiff", "numba_ufunc", "pycuda_kernel", "warp_sph"):
        assert len(suite) == len(tree.ranges)  # no annotated library inside
    calls = json.loads((run / "nsys-run.json").read_text())["calls"]
    compute = tree.find(domain="cookbook", name=f"{workload}/{variant}/compute")
    assert [r.payload for r in compute] == list(range(calls))
    assert all(a.end_ns <= b.start_ns for a, b in zip(compute, compute[1:]))


def test_multiprocess_capture_nests_three_domains_per_process():
    tree = read_tree(reference_trace(MULTIPROCESS))
    assert {r.domain for r in tree.ranges} == {"cookbook", "cookbook.thirdparty", "CCCL"}
    for size in (1024, 4096):
        (compute,) = tree.find(domain="cookbook", name=f"nvtx_multiprocess/n{size}/compute")
        (mean,) = tree.kids(compute.index)
        assert (mean.domain, mean.name, mean.depth) == ("cookbook.thirdparty", "cupy.mean", 1)
        (cub,) = tree.kids(mean.index)
        assert (cub.domain, cub.name, cub.depth) == ("CCCL", "cub::DeviceReduce::Sum", 2)
        assert [a.index for a in tree.ancestors(cub.index)] == [mean.index, compute.index]
        assert cub.global_tid == mean.global_tid == compute.global_tid
        rows = outline(tree, compute.index)
        assert [(r.depth, r.label, r.count) for r in rows] == [
            (0, f"cookbook:nvtx_multiprocess/n{size}/compute", 1), (1, "cookbook.thirdparty:cupy.mean", 1),
            (2, "CCCL:cub::DeviceReduce::Sum", 1)]
        assert rows[1].total_ns == mean.duration_ns
        totals = domain_totals(tree, compute.index)
        assert totals["CCCL"] == {"ranges": 1, "total_ns": cub.duration_ns, "min_depth": 2, "max_depth": 2}
        (setup,) = tree.find(domain="cookbook", name=f"nvtx_multiprocess/n{size}/setup")
        assert [(k.name, k.depth) for k in tree.kids(setup.index)] == [("cupy.random.Generator.random", 1)]


def test_levels_and_children_equal_the_suite_projection_report():
    # nvtx_gpu_proj_sum's "Avg Range Lvl" and "Avg Num Child" per range label (ranges with GPU work)
    tree = read_tree(reference_trace(MULTIPROCESS))
    with Trace(MULTIPROCESS) as ex:
        header, rows = nvtx_gpu_proj_sum(ex)
    lvl, nchild = header.index("Avg Range Lvl"), header.index("Avg Num Child")
    checked = 0
    for row in rows:
        mine = [r for r in tree.ranges if r.label == row[0]]
        assert mine, row[0]
        assert float(row[lvl]) == sum(r.depth for r in mine) / len(mine)
        assert float(row[nchild]) == sum(len(tree.children[r.index]) for r in mine) / len(mine)
        checked += 1
    assert checked == len(rows) >= 8


def test_payloads_and_domains_come_from_the_export():
    tree = read_tree(reference_trace(REFERENCE / "cupy_sqdiff" / "fused" / "n4096" / "nsys.sqlite.gz"))
    compute = tree.find(domain="cookbook", name="cupy_sqdiff/fused/compute")
    assert [r.payload for r in compute] == [0, 1, 2]
    assert {r.category for r in compute} == {3}  # the suite's fixed category of the compute phase
    assert tree.find(domain="cookbook", name="cupy_sqdiff/fused/setup")[0].payload is None


def test_not_an_export_is_refused(tmp_path):
    bad = tmp_path / "x.sqlite"
    bad.write_text("not a database")
    with pytest.raises(AnalysisInputError, match="not an SQLite file"):
        read_tree(Trace(bad))
    gz = tmp_path / "x.sqlite.gz"
    gz.write_bytes(b"not gzip")
    with pytest.raises(AnalysisInputError, match="gzip"):
        read_tree(Trace(gz))
