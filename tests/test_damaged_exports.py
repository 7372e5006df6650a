"""Readers validate what they read (issue 48, item 6): damaged copies of committed captures are
refused with a typed error that says "damaged" and names the file, never summarized into a
negative duration, an empty table or a misleading diagnosis."""
from __future__ import annotations

import gzip
import shutil
import sqlite3

import pytest

from analysis.cli.main import main
from analysis.common.errors import AnalysisInputError, DamagedExport
from analysis.readers.ncu import read_launches
from analysis.readers.ncu_source import read_kernel_profile
from analysis.readers.nsys import stats as nsys_stats
from analysis.report import stats_text
from analysis.readers.nsys.trace import Trace

from conftest import REPO

EXPORT = REPO / "reports" / "reference" / "h200" / "cupy_sqdiff" / "fused" / "n4096" / "nsys.sqlite.gz"
NCU_REPORT = REPO / "reports" / "reference" / "h200" / "cupy_sqdiff" / "fused" / "n16384" / "ncu.ncu-rep.gz"
LINEINFO_REPORT = REPO / "tests" / "data" / "ncu_lineinfo_pycuda_h200" / "baseline.ncu-rep.gz"
INT64_MAX = (1 << 63) - 1


def _copy(tmp_path, name="damaged.sqlite"):
    db = tmp_path / name
    with gzip.open(EXPORT) as f_in, open(db, "wb") as f_out:
        shutil.copyfileobj(f_in, f_out)
    return db


def _last_row(con, table: str, where: str = "1") -> int:
    return con.execute(f"SELECT MAX(rowid) FROM {table} WHERE {where}").fetchone()[0]


def _cli(capsys, *argv) -> tuple[int, str]:
    rc = main(list(argv))
    return rc, capsys.readouterr().err


def test_an_api_call_that_ends_before_it_starts_is_refused(tmp_path, capsys):
    db = _copy(tmp_path)
    with sqlite3.connect(db) as con:
        row = _last_row(con, "CUPTI_ACTIVITY_KIND_RUNTIME")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 1000 WHERE rowid = ?", (row,))
    with pytest.raises(DamagedExport, match=f"damaged.sqlite: damaged export: CUPTI_ACTIVITY_KIND_RUNTIME row {row} "
                                            "ends before it starts"):
        Trace(db)
    rc, err = _cli(capsys, "stats", "--report", "cuda_api_sum", str(db))
    assert rc == 2 and "damaged.sqlite" in err and "ends before it starts" in err


def test_an_nvtx_range_that_ends_before_it_starts_is_refused(tmp_path, capsys):
    db = _copy(tmp_path)
    with sqlite3.connect(db) as con:
        row = _last_row(con, "NVTX_EVENTS", "eventType = 59 AND end IS NOT NULL")
        con.execute("UPDATE NVTX_EVENTS SET end = start - 1 WHERE rowid = ?", (row,))
    with pytest.raises(DamagedExport, match=f"NVTX_EVENTS row {row} ends before it starts"):
        Trace(db)
    for report in ("nvtx_sum", "nvtx_gpu_proj_sum"):
        rc, err = _cli(capsys, "stats", "--report", report, str(db))
        assert rc == 2 and "NVTX_EVENTS" in err and "damaged" in err


def test_an_open_nvtx_range_is_not_damage(tmp_path):
    """A range never closed (end NULL) is what nsys writes when the capture stops inside it."""
    db = _copy(tmp_path)
    with sqlite3.connect(db) as con:
        con.execute("UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = ?",
                    (_last_row(con, "NVTX_EVENTS", "eventType = 59"),))
    with Trace(db) as ex:
        assert any(e.end is None for e in ex.nvtx_events())


@pytest.mark.parametrize("table, report", [("CUPTI_ACTIVITY_KIND_KERNEL", "cuda_gpu_kern_sum"),
                                           ("CUPTI_ACTIVITY_KIND_RUNTIME", "cuda_api_sum")])
def test_a_duration_beyond_int64_is_damage_not_minus_two_ns(tmp_path, capsys, table, report):
    """end - start = 2^64 - 2 wraps to -2 in int64: the row is refused, not summed as a -2 ns kernel."""
    db = _copy(tmp_path)
    with sqlite3.connect(db) as con:
        row = _last_row(con, table)
        con.execute(f"UPDATE {table} SET start = ?, end = ? WHERE rowid = ?", (-INT64_MAX, INT64_MAX, row))
    with pytest.raises(DamagedExport, match=f"{table} row {row} has a duration beyond int64"):
        Trace(db)
    rc, err = _cli(capsys, "stats", "--report", report, str(db))
    assert rc == 2 and f"damaged export: {table} row {row} has a duration beyond int64" in err


def test_the_column_reader_refuses_a_wrapped_duration_itself(tmp_path):
    """The reports' own check, for a Trace whose open-time validation was passed (the same rule twice:
    the columns are what the numbers are made of)."""
    db = _copy(tmp_path)
    with Trace(db) as ex, sqlite3.connect(db) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = ?, end = ? WHERE rowid = 1",
                    (-INT64_MAX, INT64_MAX))
        con.commit()
        with pytest.raises(DamagedExport, match="beyond int64"):
            nsys_stats.cuda_gpu_kern_sum(ex)


def test_an_unknown_copy_kind_is_named_not_reported_as_no_copies(tmp_path, capsys):
    db = _copy(tmp_path)
    with sqlite3.connect(db) as con:
        row = _last_row(con, "CUPTI_ACTIVITY_KIND_MEMCPY")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET copyKind = 99")
    with pytest.raises(DamagedExport, match="CUPTI_ACTIVITY_KIND_MEMCPY row \\d+ has copyKind 99, which "
                                            "ENUM_CUDA_MEMCPY_OPER does not name"):
        Trace(db)
    for report in ("cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"):
        rc, err = _cli(capsys, "stats", "--report", report, str(db))
        assert rc == 2 and "copyKind 99" in err and "SKIPPED" not in err
    rc, err = _cli(capsys, "multiprocess-report", str(db), "--output", str(tmp_path / "mp.md"),
                   "--figure", str(tmp_path / "mp.png"))
    assert rc == 2 and "copyKind 99" in err and not (tmp_path / "mp.md").exists()
    assert row is not None


def test_markdown_cells_escape_line_breaks_and_cap_long_names():
    header = ["Time (%)", "Name"]
    rows = [[None, "kernel\n# injected heading\r|x"], [None, "k" * 10_000_000]]
    text = stats_text.format_md(header, rows)
    lines = text.splitlines()
    assert len(lines) == 4 and not any(line.startswith("#") for line in lines)
    assert "kernel # injected heading \\|x" in lines[2]  # breaks made spaces (analysis.report.mdtext)
    assert len(lines[3]) < stats_text.MAX_MD_CELL_CHARS + 20 and lines[3].endswith("… |")


# --- Nsight Compute reports -------------------------------------------------------------------

def _plain_report(src, tmp_path, name: str, keep_fraction: float = 1.0) -> str:
    data = gzip.decompress(src.read_bytes())
    path = tmp_path / name
    path.write_bytes(data[:int(len(data) * keep_fraction)])
    return str(path)


def test_a_truncated_ncu_report_says_damaged_not_check_your_filters(tmp_path):
    """Cut to a tenth, the report still loads, with no launch in it; ncu writes no report when its
    filters match no kernel, so that is damage."""
    cut = _plain_report(NCU_REPORT, tmp_path, "cut.ncu-rep", 0.1)
    for read in (read_launches, read_kernel_profile):
        with pytest.raises(AnalysisInputError, match="cut.ncu-rep: damaged report") as e:
            read(cut)
        assert "-k/-c filters match no kernel" in e.value.problem and "check" not in e.value.problem


#: one bit of the committed line-info report whose flip blanks its line table (found by flipping bits
#: near the source file's name; the campaign of issue 48 met the same outcome at another bit)
LINE_TABLE_BIT = (12203, 3)


def test_blanked_line_information_says_damaged_not_compiled_without_it(tmp_path):
    whole = _plain_report(LINEINFO_REPORT, tmp_path, "whole.ncu-rep")
    assert read_kernel_profile(whole).source.has_line_info
    data = bytearray(gzip.decompress(LINEINFO_REPORT.read_bytes()))
    offset, bit = LINE_TABLE_BIT
    data[offset] ^= 1 << bit
    flipped = tmp_path / "flipped.ncu-rep"
    flipped.write_bytes(bytes(data))
    with pytest.raises(AnalysisInputError, match="flipped.ncu-rep: damaged report: .*line information is damaged") as e:
        read_kernel_profile(str(flipped))
    assert "compiled without line information" not in e.value.problem
