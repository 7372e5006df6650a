"""The pieces that make the reports scale to ten million launches (issue 48, item 7) give what the
straightforward algorithms give, on the synthetic export made from a committed capture and on
random inputs checked against brute force."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from analysis.cli import bench
from analysis.report import multiprocess as mp
from analysis.readers.nsys import stats as nsys_stats
from analysis.readers.nsys.synthetic import build_scale
from analysis.readers.nsys.trace import NvtxEvent, Trace

from conftest import REPO

SOURCE = REPO / "reports" / "reference" / "h200" / "cupy_sqdiff" / "baseline" / "n16384" / "nsys.sqlite.gz"
FLAT, NESTED, KERNELS, LONG_NAME = 300, 400, 30_000, 200_000


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    path = tmp_path_factory.mktemp("scale") / "scale.sqlite"
    built = build_scale(str(SOURCE), str(path), KERNELS, FLAT, NESTED, LONG_NAME)
    assert built["inserted_kernels"] == KERNELS
    return path


def test_projection_of_a_deep_chain_and_flat_ranges(synthetic):
    header, rows = nsys_stats.report(str(synthetic), "nvtx_gpu_proj_sum")
    got = {row[0]: dict(zip(header, row)) for row in rows}
    chain = got["cookbook:scale/nested"]
    # each level of the chain encloses the launches after the flat ranges' shares, and the next level
    share = KERNELS // (FLAT + 1)
    assert chain["Range Instances"] == NESTED
    assert chain["Total GPU Ops"] == NESTED * (KERNELS - FLAT * share)
    assert chain["Avg Range Lvl"] == nsys_stats.sqlite_round1((NESTED - 1) / 2)
    assert chain["Avg Num Child"] == nsys_stats.sqlite_round1((NESTED - 1) / NESTED)
    compute = got["cookbook:cupy_sqdiff/baseline/compute"]
    long_named = next(v for k, v in got.items() if k.startswith("cookbook:scale/xxx"))
    assert long_named["Total GPU Ops"] == share and len(long_named["Range"]) == len("cookbook:") + LONG_NAME
    # the source's own compute ranges plus the flat ones but the long-named first
    assert compute["Range Instances"] == FLAT - 1 + 3


def test_api_summary_counts_every_launch(synthetic):
    _, rows = nsys_stats.report(str(synthetic), "cuda_api_sum")
    launches = {row[-1]: row[2] for row in rows}
    with Trace(synthetic) as ex:
        # the template's launching calls are the source's, so the synthetic ones add to theirs
        assert sum(launches.values()) == ex._query("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]


def test_multiprocess_report_caps_lanes_merges_gpu_work_and_cuts_the_long_name(synthetic, tmp_path):
    procs = mp.read_processes(str(synthetic))
    [p] = procs
    assert p.count_of_kind("kernel") == KERNELS + 12
    page = mp.markdown_report(procs, "scale.sqlite", "fig.png")
    assert max(len(line) for line in page.splitlines()) < 10 * mp.MAX_CELL_CHARS
    summary = mp.summary(procs)
    ranges = {r["name"]: r for r in summary["processes"][0]["suite_ranges"]}
    assert ranges["scale/nested"]["calls"] == NESTED
    assert ranges["scale/nested"]["gpu_ops_launched"] == NESTED * (KERNELS - FLAT * (KERNELS // (FLAT + 1)))
    mp.timeline_figure(procs, str(tmp_path / "t.png"), "scale")
    assert (tmp_path / "t.png").stat().st_size > 0


def _old_lanes(intervals):
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i][0], -intervals[i][1]))
    lane_end, lanes = [], [0] * len(intervals)
    for i in order:
        s, e = intervals[i]
        for lane, end in enumerate(lane_end):
            if end <= s:
                lanes[i], lane_end[lane] = lane, e
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(e)
    return lanes


def test_heap_lanes_equal_the_first_free_lane():
    rng = random.Random(3)
    for _ in range(50):
        ivs = [(s, s + rng.randrange(0, 50)) for s in (rng.randrange(200) for _ in range(rng.randrange(1, 80)))]
        assert mp._lanes(ivs) == _old_lanes(ivs)


def test_range_extremes_equal_brute_force():
    rng = np.random.default_rng(5)
    for n in (1, 7, 255, 256, 257, 3000):
        values = rng.integers(-10**12, 10**12, n)
        lo = rng.integers(0, n, 500)
        hi = np.minimum(lo + 1 + rng.integers(0, 2 * n, 500), n)
        for ufunc, brute in ((np.minimum, np.min), (np.maximum, np.max)):
            got = nsys_stats._RangeExtreme(values, ufunc).query(lo, hi)
            assert got.tolist() == [int(brute(values[a:b])) for a, b in zip(lo, hi)]


def _event(i, start, end, tid=1):
    return NvtxEvent(i, start, end, 59, tid, None, None, f"r{i}", None, None, None)


def test_stack_parents_equal_the_general_search_on_nested_ranges():
    rng = random.Random(11)
    for _ in range(30):
        events, t = [], 0

        def grow(depth, start, end):
            nonlocal t
            cur = start + 1
            while cur < end - 2 and depth < 6 and rng.random() < 0.8:
                a = cur + rng.randrange(0, 3)
                b = min(end - 1, a + rng.randrange(1, max(2, (end - a) // 2)))
                events.append(_event(len(events), a, b))
                grow(depth + 1, a, b)
                cur = b + 1
        events.append(_event(0, 0, 10_000))
        grow(1, 0, 10_000)
        rs = sorted(events, key=lambda r: (r.start, r.id))
        if len({r.start for r in rs}) < len(rs):
            continue  # equal starts take the general search anyway
        assert nsys_stats._parents(list(events)) == nsys_stats._parents_overlapping(rs)


def test_overlapping_ranges_fall_back_to_the_general_search():
    events = [_event(0, 0, 10), _event(1, 5, 15), _event(2, 6, 8), _event(3, 6, 9)]
    # 3's two parents are equally tight (7 ns beyond it): the lower id wins
    assert nsys_stats._parents(events) == {0: None, 1: None, 2: 3, 3: 0}


def test_projection_with_nested_calls_equals_the_filter():
    """Calls that nest (a driver call inside a runtime call) take the per-range filter: the same
    answer as the prefix rule where the calls do not nest."""
    ranges = [_event(0, 0, 100), _event(1, 10, 45), _event(2, 50, 60)]
    start = np.array([5, 12, 30, 40, 52], np.int64)
    end = np.array([8, 20, 35, 50, 55], np.int64)  # the call at 40 ends after range 1
    first, last = start + 100, end + 200
    got = nsys_stats._project(ranges, (start, end, first, last))
    assert got == {0: (105, 255, 5), 1: (112, 235, 2), 2: (152, 255, 1)}
    nested_end = end.copy()
    nested_end[1] = 36  # the call at 12 now encloses the one at 30: ends are out of start order
    got = nsys_stats._project(ranges, (start, nested_end, first, last))
    assert got == {0: (105, 255, 5), 1: (112, 235, 2), 2: (152, 255, 1)}
    nested_end[2] = 46  # ... and the one at 30 now ends after range 1
    got = nsys_stats._project(ranges, (start, nested_end, first, last))
    assert got == {0: (105, 255, 5), 1: (112, 220, 1), 2: (152, 255, 1)}


def test_bench_prints_a_table_for_the_commands_asked(capsys):
    assert bench.main(["--kernels", "3000", "--flat-ranges", "20", "--nested-levels", "30", "--long-name-bytes",
                       "5000", "--only", "stats nvtx_gpu_proj_sum", "--only", "stats cuda_api_sum"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| stats ")]
    assert [r.split(" | ")[0] for r in rows] == ["| stats cuda_api_sum", "| stats nvtx_gpu_proj_sum"]
    assert all(" | 0 | yes |" in r for r in rows), rows
    assert json.loads(out.splitlines()[0].split(": ", 1)[1])["rows"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 3012


def test_process_gpu_work_comes_in_time_order():
    """The columns are read in table order (memsets before kernels); the records are by start, end,
    correlation id, as nsys lists them."""
    [p] = mp.read_processes(str(SOURCE))
    ops = p.gpu_ops
    assert {o.kind for o in ops} == {"kernel", "memcpy", "memset"}
    assert [(o.start_ns, o.end_ns, o.correlation_id) for o in ops] == \
        sorted((o.start_ns, o.end_ns, o.correlation_id) for o in ops)
    assert [o.kind for o in p.ops_of_kind("memset")] == ["memset"] * p.count_of_kind("memset")
