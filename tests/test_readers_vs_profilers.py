"""The readers give the profilers' own numbers on real captures (nsys stats CSVs, ncu's raw page)."""
from __future__ import annotations

import csv
import contextlib
import gzip
import shutil
import sqlite3

import pytest

from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import open_capture_text
from analysis.readers.ncu import SUMMARY_METRICS, read_launches
from analysis.readers.nsys.trace import Trace

from conftest import nsys_stats_rows, reference_runs, reference_trace

RUNS = reference_runs(with_nsys_stats=True)


def test_there_are_reference_runs():
    assert len(RUNS) >= 8


def test_kernels_equal_cuda_gpu_kern_sum(run):
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        kernels = ex.kernels()
    mine = {}
    for k in kernels:
        n, total = mine.get(k.name, (0, 0))
        mine[k.name] = (n + 1, total + k.duration_ns)
    theirs = {r["Name"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in nsys_stats_rows(run, "cuda_gpu_kern_sum")}
    assert mine == theirs


def test_copies_and_memsets_equal_cuda_gpu_mem_time_sum(run):
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        ops = ex.memcpys() + ex.memsets()
    mine = {}
    for o in ops:
        n, total = mine.get(o.name, (0, 0))
        mine[o.name] = (n + 1, total + o.duration_ns)
    theirs = {r["Operation"]: (int(r["Count"]), int(r["Total Time (ns)"]))
              for r in nsys_stats_rows(run, "cuda_gpu_mem_time_sum")}
    assert mine == theirs


def test_api_calls_equal_cuda_api_sum(run):
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        calls = ex.api_calls()
    mine = {}
    for c in calls:
        n, total = mine.get(c.name, (0, 0))
        mine[c.name] = (n + 1, total + c.duration_ns)
    theirs = {r["Name"]: (int(r["Num Calls"]), int(r["Total Time (ns)"])) for r in nsys_stats_rows(run, "cuda_api_sum")}
    assert mine == theirs


def test_nvtx_ranges_equal_nvtx_sum(run):
    with contextlib.nullcontext(reference_trace(run / "nsys.sqlite.gz")) as ex:
        ranges = ex.nvtx_ranges()
    mine = {}
    for r in ranges:
        key = f"{r.domain}:{r.name}" if r.domain else r.name
        n, total = mine.get(key, (0, 0))
        mine[key] = (n + 1, total + r.duration_ns)
    theirs = {r["Range"]: (int(r["Instances"]), int(r["Total Time (ns)"])) for r in nsys_stats_rows(run, "nvtx_sum")}
    assert mine == theirs


# ncu's raw page prints each metric in a unit it picks per report (ms, usecond, Gbyte, ...)
_SCALE = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9,
          "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}


def _raw_value(text, unit):
    value = float(text.replace(",", ""))
    return value * _SCALE.get(unit, 1)


NCU_RUNS = [r for r in RUNS if (r / "ncu.ncu-rep.gz").exists()]


@pytest.mark.parametrize("run", NCU_RUNS, ids=lambda p: "/".join(p.parts[-3:]))
def test_ncu_summary_equals_the_raw_page(run):
    # the reference keeps the raw page gzipped (ncu-raw.csv.gz)
    with open_capture_text(str(run / "ncu-raw.csv"), newline="") as f:
        rows = list(csv.reader(f))
    header, units, data = rows[0], rows[1], rows[2:]
    launches = read_launches(run / "ncu.ncu-rep.gz")
    assert len(launches) == len(data)
    for launch, row in zip(launches, data):
        assert launch.id == int(row[header.index("ID")])
        assert launch.kernel_name == row[header.index("Kernel Name")]
        for metric in SUMMARY_METRICS:
            i = header.index(metric)
            # the raw page rounds to 6 significant digits, and to 6 decimals below 1
            assert launch.metrics[metric] == pytest.approx(_raw_value(row[i], units[i]), rel=1e-5, abs=1e-6), metric


def test_not_sqlite_is_a_clear_error(tmp_path):
    bad = tmp_path / "trace.sqlite"
    bad.write_bytes(b"this is not a database" * 10)
    with pytest.raises(AnalysisInputError, match="not an SQLite file"):
        Trace(bad)


def test_truncated_export_is_a_clear_error(tmp_path, reference_dir):
    src = next(reference_dir.glob("*/*/n*/nsys.sqlite.gz"))
    data = gzip.open(src).read()
    cut = tmp_path / "cut.sqlite"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(AnalysisInputError, match="cut.sqlite"):
        with Trace(cut) as ex:
            ex.kernels()
            ex.nvtx_ranges()


def test_export_without_kernel_table_says_cuda_tracing_was_off(tmp_path, reference_dir):
    src = next(reference_dir.glob("*/*/n*/nsys.sqlite.gz"))
    db = tmp_path / "nokernels.sqlite"
    with gzip.open(src) as f_in, open(db, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(AnalysisInputError, match="CUDA tracing was off"):
        Trace(db)


def test_not_an_ncu_report_is_a_clear_error(tmp_path, reference_dir):
    src = next(reference_dir.glob("*/*/n*/nsys.sqlite.gz"))
    with pytest.raises(AnalysisInputError, match="not an Nsight Compute report"):
        read_launches(src)
    junk = tmp_path / "junk.ncu-rep"
    junk.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(AnalysisInputError, match="not an Nsight Compute report"):
        read_launches(junk)
