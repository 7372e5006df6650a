"""`python -m analysis stats` prints what `nsys stats --format csv` printed for the same export.

Ground truth: the CSVs nsys 2025.3.1 wrote next to every reference capture
(reports/reference/h200/*/*/n*/nsys-stats/stats_<report>.csv).
"""
from __future__ import annotations

import csv
import decimal
import functools
import gzip
import io
import json
import re
import shutil
import sqlite3

import pytest

from analysis.readers.nsys import stats as nsys_stats
from analysis.report import stats_text
from analysis.cli.main import main
from analysis.common.errors import AnalysisInputError, DamagedExport, NoDataInExport
from analysis.readers.nsys.trace import Trace, NvtxRange
from analysis.readers.nsys import columns as cols

from conftest import REPO, reference_runs, reference_trace

RUNS = reference_runs(with_nsys_stats=True)
REPORTS = list(nsys_stats.REPORTS)

# how the columns compare (acceptance rules); every other column is an integer and must be equal
TEXT_COLUMNS = {"Name", "Operation", "Range", "Style"}
PERCENT_COLUMNS = {"Time (%)"}  # within 0.1 point
RATIO_COLUMNS = {"Avg (ns)", "Med (ns)", "StdDev (ns)", "Proj Avg (ns)", "Proj Med (ns)", "Proj StdDev (ns)",
                 "Avg GPU Ops", "Avg Range Lvl", "Avg Num Child", "Total (MB)", "Avg (MB)", "Med (MB)", "Min (MB)",
                 "Max (MB)", "StdDev (MB)"}  # within 0.1 %


def _theirs(run, report: str) -> str:
    return (run / "nsys-stats" / f"stats_{report}.csv").read_text()


@functools.lru_cache(maxsize=None)
def _mine(run, report: str) -> str:
    """Our CSV of ``report``: once per run and report (two tests compare it), from the export opened
    once per session (conftest.reference_trace) rather than unpacked again for each report."""
    return stats_text.format_csv(*nsys_stats.REPORTS[report](reference_trace(run / "nsys.sqlite.gz")))


def _parse(text: str) -> tuple[list[str], list[list[str]]]:
    rows = list(csv.reader(io.StringIO(text)))
    return rows[0], rows[1:]


def _close(column: str, mine: str, theirs: str) -> bool:
    if column in TEXT_COLUMNS:
        return mine == theirs
    if column in PERCENT_COLUMNS:
        return abs(float(mine) - float(theirs)) <= 0.1 + 1e-9
    if column in RATIO_COLUMNS:
        a, b = float(mine), float(theirs)
        half_digit = 0.5 * 10.0 ** -len(theirs.partition(".")[2])  # for values near 0 (a StdDev of 0.0)
        return abs(a - b) <= 1e-3 * abs(b) or abs(a - b) <= half_digit * (1 + 1e-9)
    return int(mine) == int(theirs)


@pytest.mark.parametrize("report", REPORTS)
def test_report_equals_nsys_stats(run, report):
    """Same header, same rows in the same order, numbers within the acceptance rules."""
    if not _theirs(run, report):
        with pytest.raises(NoDataInExport):  # nsys: SKIPPED, an empty report
            _mine(run, report)
        return
    my_header, my_rows = _parse(_mine(run, report))
    their_header, their_rows = _parse(_theirs(run, report))
    assert my_header == their_header
    assert len(my_rows) == len(their_rows), (my_rows, their_rows)
    for mine, theirs in zip(my_rows, their_rows):
        assert len(mine) == len(theirs)
        bad = [(col, m, t) for col, m, t in zip(their_header, mine, theirs) if not _close(col, m, t)]
        assert not bad, f"row {theirs}: {bad}"


@pytest.mark.parametrize("report", REPORTS)
def test_csv_is_byte_identical(run, report):
    theirs = _theirs(run, report)
    if not theirs:
        # nsys wrote an empty report (SKIPPED: nothing of that kind in the capture): so must we
        with pytest.raises(NoDataInExport):
            _mine(run, report)
        assert main(["stats", "--report", report, str(run / "nsys.sqlite.gz")]) == 0
        return
    assert _mine(run, report) == theirs


def test_there_are_reference_runs_for_every_report():
    assert len(RUNS) >= 8
    for run in RUNS:
        for report in REPORTS:
            assert (run / "nsys-stats" / f"stats_{report}.csv").is_file()


# --- rounding as nsys' SQL does it ------------------------------------------------------------

@pytest.mark.parametrize("x, printed", [
    (0.25, "0.3"), (2.75, "2.8"), (1235274.5, "1235274.5"), (636294723.66666, "636294723.7"),
    (0.0, "0.0"), (1.04999, "1.0"), (-0.25, "-0.3"),
])
def test_round_half_away_from_zero(x, printed):
    assert format(nsys_stats.sqlite_round1(x), "f") == printed


def test_summary_statistics():
    s = nsys_stats._Summary([3643, 3178])
    assert (s.total, s.n, s.min, s.max) == (6821, 2, 3178, 3643)
    assert s.avg == 3410.5 and s.med == 3410.5
    assert format(nsys_stats.sqlite_round1(s.std), "f") == "328.8"  # sample standard deviation (n - 1)
    one = nsys_stats._Summary([7])
    assert (one.avg, one.med, one.std) == (7.0, 7.0, 0.0)
    odd = nsys_stats._Summary([5, 1, 100])
    assert odd.med == 5.0


# --- formats and command line ------------------------------------------------------------------

def test_cli_prints_the_nsys_csv(capsys):
    run = RUNS[0]
    for report in REPORTS:
        assert main(["stats", "--report", report, str(run / "nsys.sqlite.gz")]) == 0
        assert capsys.readouterr().out == _theirs(run, report)


def test_cli_json_and_md(capsys):
    run = RUNS[0]
    path = str(run / "nsys.sqlite.gz")
    assert main(["stats", "--report", "cuda_gpu_kern_sum", "--format", "json", path]) == 0
    records = json.loads(capsys.readouterr().out)
    their_header, their_rows = _parse(_theirs(run, "cuda_gpu_kern_sum"))
    assert [list(r) for r in records] == [their_header] * len(their_rows)
    assert [r["Name"] for r in records] == [row[-1] for row in their_rows]
    assert [r["Total Time (ns)"] for r in records] == [int(row[1]) for row in their_rows]

    assert main(["stats", "--report", "nvtx_gpu_proj_sum", "--format", "md", path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| Range | Style | Total Proj Time (ns) |")
    assert len(lines) == 2 + len(_parse(_theirs(run, "nvtx_gpu_proj_sum"))[1])


def test_md_escapes_pipes():
    md = stats_text.format_md(["Count", "Name"], [[1, "a|b"], [2, None]])
    assert md.splitlines() == ["| Count | Name |", "|---:|---|", "| 1 | a\\|b |", "| 2 |  |"]


def test_csv_quotes_names_with_commas():
    text = stats_text.format_csv(["Avg (ns)", "Name"], [[decimal.Decimal("1.5"), 'f(a, "b")']])
    assert text == 'Avg (ns),Name\n1.5,"f(a, ""b"")"\n'


# --- errors -----------------------------------------------------------------------------------

def _plain_copy(tmp_path, name="export.sqlite"):
    # a capture of the suite's ranges alone (cuDF's own ranges would nest inside the compute ranges)
    src = next(r for r in RUNS if r.parts[-3:] == ("cupy_sqdiff", "fused", "n4096")) / "nsys.sqlite.gz"
    db = tmp_path / name
    with gzip.open(src) as f_in, open(db, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    return db


@pytest.mark.parametrize("report", REPORTS)
def test_not_sqlite_is_a_clear_error(tmp_path, report):
    bad = tmp_path / "trace.sqlite"
    bad.write_bytes(b"this is not a database" * 10)
    with pytest.raises(AnalysisInputError, match="trace.sqlite.*not an SQLite file"):
        nsys_stats.report(str(bad), report)


# (reports, what is done to a committed export, what the error must say after the file's name)
MISSING = {
    "no_nvtx_table": (["nvtx_sum", "nvtx_gpu_proj_sum"], ["DROP TABLE NVTX_EVENTS"],
                      "NVTX_EVENTS.*NVTX tracing was off"),
    "no_ranges": (["nvtx_sum", "nvtx_gpu_proj_sum"], ["DELETE FROM NVTX_EVENTS WHERE eventType != 75"], "NVTX range"),
    "no_memory_tables": (["cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"],
                         ["DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY", "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET"],
                         "no CUPTI_ACTIVITY_KIND_MEMCPY"),
    "no_kernels": (["cuda_gpu_kern_sum"], ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL"], "no CUDA kernels"),
    "damaged_value": (["cuda_api_sum"], ["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'soon' WHERE rowid = 1"],
                      "damaged export"),
}


@pytest.mark.parametrize("case, report", [(case, report) for case, (reports, _, _) in MISSING.items()
                                          for report in reports])
def test_an_export_without_what_a_report_needs_is_a_clear_error_not_an_empty_table(tmp_path, case, report):
    _, statements, message = MISSING[case]
    db = _plain_copy(tmp_path)
    with sqlite3.connect(db) as con:
        for sql in statements:
            con.execute(sql)
    with pytest.raises(AnalysisInputError, match=f"export.sqlite.*{message}"):
        nsys_stats.report(str(db), report)


@pytest.mark.parametrize("report", ["cuda_api_sum", "nvtx_sum"])
def test_export_with_an_empty_string_table_is_refused_not_skipped(tmp_path, capsys, report):
    """Without StringIds, cuda_api_sum found no calls (SKIPPED, exit 0) and nvtx_sum one unnamed range."""
    db = _plain_copy(tmp_path, "nonames.sqlite")
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM StringIds")
    with pytest.raises(DamagedExport, match="nonames.sqlite.*StringIds table is empty"):
        nsys_stats.report(str(db), report)
    assert main(["stats", "--report", report, str(db)]) == 2
    err = capsys.readouterr().err
    assert "nonames.sqlite" in err and "SKIPPED" not in err


@pytest.mark.parametrize("table", Trace.TIMED_TABLES)
def test_timed_rows_that_end_before_they_start_are_refused(tmp_path, table):
    db = _plain_copy(tmp_path)
    with sqlite3.connect(db) as con:
        assert con.execute(f"UPDATE {table} SET end = start - 1 WHERE rowid = (SELECT MAX(rowid) FROM {table})"
                           ).rowcount == 1
    with pytest.raises(DamagedExport, match=f"export.sqlite.*{table} row .* ends before it starts"):
        Trace(db)


def test_cli_error_exits_2_and_names_the_file(tmp_path, capsys):
    db = _plain_copy(tmp_path, "nonvtx.sqlite")
    with sqlite3.connect(db) as con:
        con.execute("DROP TABLE NVTX_EVENTS")
    assert main(["stats", "--report", "nvtx_sum", str(db)]) == 2
    err = capsys.readouterr().err
    assert "nonvtx.sqlite" in err and "NVTX tracing was off" in err


# --- the projection on ranges the reference captures do not have -------------------------------

def _insert_range(con, start, end, event_type=59, text="outer", domain=None):
    """A range on the thread (and, unless ``domain`` says otherwise, in the domain) of the first push/pop range."""
    tid, first_domain = con.execute("SELECT globalTid, domainId FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1"
                                    ).fetchone()
    domain = first_domain if domain is None else domain
    con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)",
                (start, end, event_type, text, tid, domain))


def test_projection_of_nested_ranges(tmp_path):
    """A range around all compute ranges: it projects onto all of their GPU work, the compute
    ranges become its children (level 1), and it has three children."""
    db = _plain_copy(tmp_path)
    with Trace(db) as ex:
        computes = [r for r in ex.nvtx_ranges() if r.name.endswith("/compute")]
        start, end = min(r.start_ns for r in computes) - 1, max(r.end_ns for r in computes) + 1
        [(_, outer)] = cols.launched_in(ex, [NvtxRange(start, end, "outer", "cookbook", computes[0].global_tid, None)])
    with sqlite3.connect(db) as con:
        _insert_range(con, start, end)

    header, rows = nsys_stats.report(str(db), "nvtx_gpu_proj_sum")
    got = {row[0]: dict(zip(header, row)) for row in rows}
    o = got["cookbook:outer"]
    assert o["Total Proj Time (ns)"] == max(x.end_ns for x in outer) - min(x.start_ns for x in outer)
    assert o["Total Range Time (ns)"] == end - start
    assert o["Total GPU Ops"] == len({x.correlation_id for x in outer})
    assert (o["Avg Range Lvl"], o["Avg Num Child"]) == (decimal.Decimal("0.0"), decimal.Decimal("3.0"))
    c = next(v for k, v in got.items() if k.endswith("/compute"))
    assert (c["Avg Range Lvl"], c["Avg Num Child"]) == (decimal.Decimal("1.0"), decimal.Decimal("0.0"))

    # nvtx_sum counts the new range too, with its own name and style
    header, rows = nsys_stats.report(str(db), "nvtx_sum")
    assert ["PushPop", "cookbook:outer"] in [row[-2:] for row in rows]


def test_default_domain_ranges_print_with_a_colon_once_named_domains_exist(tmp_path):
    """nsys prints ``:name`` for a default-domain range beside named domains (issue 21: a PyTorch
    program's torch.cuda.nvtx ranges), and plain ``name`` when the export has no named domain."""
    db = _plain_copy(tmp_path)
    with Trace(db) as ex:
        compute = next(r for r in ex.nvtx_ranges() if r.name.endswith("/compute"))
    with sqlite3.connect(db) as con:
        _insert_range(con, compute.start_ns, compute.end_ns, text="train_step_0", domain=0)
    _, rows = nsys_stats.report(str(db), "nvtx_sum")
    names = [row[-1] for row in rows]
    assert ":train_step_0" in names and any(n.startswith("cookbook:") for n in names)
    _, rows = nsys_stats.report(str(db), "nvtx_gpu_proj_sum")
    assert ":train_step_0" in [row[0] for row in rows]

    with sqlite3.connect(db) as con:  # the same ranges, all in the default domain
        con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 75")
        con.execute("UPDATE NVTX_EVENTS SET domainId = 0")
    _, rows = nsys_stats.report(str(db), "nvtx_sum")
    names = [row[-1] for row in rows]
    assert "train_step_0" in names and not any(":" in n for n in names if "/" in n)


def test_start_end_ranges_have_their_style(tmp_path):
    db = _plain_copy(tmp_path)
    with Trace(db) as ex:
        computes = [r for r in ex.nvtx_ranges() if r.name.endswith("/compute")]
    with sqlite3.connect(db) as con:
        _insert_range(con, computes[0].start_ns, computes[0].end_ns, event_type=60, text="marker")
    _, rows = nsys_stats.report(str(db), "nvtx_sum")
    marker = [row for row in rows if row[-1] == "cookbook:marker"]
    assert marker and marker[0][-2] == "StartEnd" and marker[0][2] == 1
    _, rows = nsys_stats.report(str(db), "nvtx_gpu_proj_sum")
    assert [row[1] for row in rows if row[0] == "cookbook:marker"] == ["StartEnd"]


def test_only_the_nsys_package_reads_the_export_tables():
    """Every read of an nsys export goes through analysis/readers/nsys/ (one Trace, one place for its quirks)."""
    names = re.compile(r"CUPTI_ACTIVITY|NVTX_EVENTS|StringIds")
    readers = {str(p.relative_to(REPO)) for top in ("analysis", "workloads") for p in (REPO / top).rglob("*.py")
               if names.search(p.read_text())}
    # but the JAX allocator experiment names the tables its nsys flags export, to retry a capture whose
    # fresh export lacks them (it asks SQLite's own sqlite_master, no table of the export)
    outside = {p for p in readers if not p.startswith("analysis/readers/nsys/")}
    assert readers and outside <= {"workloads/jax_matmul/exp_allocator.py"}
