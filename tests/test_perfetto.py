"""`python -m analysis perfetto`: a Chrome/Perfetto JSON trace with every kernel, copy, memset,
NVTX range and CUDA API call of the export, with their durations."""
from __future__ import annotations

import collections
import json
import contextlib

import pytest

from analysis.cli.main import main

from conftest import nsys_stats_rows, reference_runs, reference_trace

RUNS = reference_runs(with_nsys_stats=True)


def _stats_total(run, report, column):
    return sum(int(r[column]) for r in nsys_stats_rows(run, report))


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    out = {}
    tmp = tmp_path_factory.mktemp("perfetto")
    for i, run in enumerate(RUNS):
        path = tmp / f"trace{i}.json"
        assert main(["perfetto", str(run / "nsys.sqlite.gz"), "-o", str(path)]) == 0
        with open(path) as f:
            out[run] = json.load(f)  # valid JSON
    return out


def _complete(trace, cat=None):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"].startswith(cat))]


def test_event_counts_equal_the_export(run, traces):
    t = traces[run]
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        assert len(_complete(t, "kernel")) == len(ex.kernels())
        assert len(_complete(t, "memcpy")) == len(ex.memcpys())
        assert len(_complete(t, "memset")) == len(ex.memsets())
        assert len(_complete(t, "nvtx")) == len(ex.nvtx_ranges())
    assert len(_complete(t, "nvtx")) == _stats_total(run, "nvtx_sum", "Instances")
    assert len(_complete(t, "cuda_api")) == _stats_total(run, "cuda_api_sum", "Num Calls")


def test_durations_and_times_match(run, traces):
    t = traces[run]
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        expected = {
            "kernel": [(o.name, o.start_ns, o.duration_ns) for o in ex.kernels()],
            "memcpy": [(o.name, o.start_ns, o.duration_ns) for o in ex.memcpys()],
            "memset": [(o.name, o.start_ns, o.duration_ns) for o in ex.memsets()],
            "nvtx": [(r.name, r.start_ns, r.duration_ns) for r in ex.nvtx_ranges()],
        }
    for cat, want in expected.items():
        got = [(e["name"], round(e["ts"] * 1000), round(e["dur"] * 1000)) for e in _complete(t, cat)]
        assert collections.Counter(got) == collections.Counter(want), cat
    # per kind, the total time equals nsys' own summaries
    kern = sum(round(e["dur"] * 1000) for e in _complete(t, "kernel"))
    assert kern == _stats_total(run, "cuda_gpu_kern_sum", "Total Time (ns)")


def test_rows_are_named_and_properly_nested(run, traces):
    """Every row a slice is on has a name, and slices on one row nest (Perfetto draws a row as a
    stack: partly overlapping slices would be misdrawn)."""
    t = traces[run]
    named = {(e["pid"], e["tid"]) for e in t["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    rows = collections.defaultdict(list)
    for e in _complete(t):
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int) and e["dur"] >= 0
        rows[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    assert set(rows) <= named
    for key, spans in rows.items():
        stack: list[int] = []
        for start, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start:
                stack.pop()
            assert not stack or end <= stack[-1], f"row {key}: a slice overlaps its enclosing slice's end"
            stack.append(end)


def test_gpu_streams_get_their_own_rows():
    run = next(r for r in RUNS if r.parts[-3:-1] == ("numba_ufunc", "streams"))
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        streams = {o.stream_id for o in ex.gpu_ops()}
    from analysis.report import perfetto
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        events = list(perfetto.trace_events(ex))
    gpu_rows = {e["tid"] for e in events if e["ph"] == "X" and e["pid"] >= perfetto.GPU_PID_BASE}
    assert gpu_rows == streams and len(streams) == 3


def test_not_an_export_exits_2_and_names_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database" * 20)
    assert main(["perfetto", str(bad), "-o", str(tmp_path / "t.json")]) == 2
    assert "bad.sqlite" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
