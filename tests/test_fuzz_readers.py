"""Fuzzing the readers: whatever bytes a capture file holds, they return records or raise
AnalysisInputError (naming the file), and nothing else.

Two kinds of input: arbitrary bytes written as .sqlite / .sqlite.gz / .ncu-rep(.gz), and a real
reference capture with bytes flipped and/or cut off. How many examples, and whether they are the
same on every run, is the Hypothesis profile's (tests/conftest.py; HYPOTHESIS_PROFILE=deep for a
long hunt); the tests here ask for multiples of it.
"""
from __future__ import annotations

import functools
import gzip
import os
import sqlite3
import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.model import breakdown

from analysis.report import multiprocess, perfetto
from analysis.readers.nsys import stats as nsys_stats
from analysis.report import stats_text
from analysis.common.errors import AnalysisInputError
from analysis.readers.ncu import NCU_REP_MAGIC, read_launches
from analysis.readers.nsys.trace import SQLITE_MAGIC, Trace

from conftest import REFERENCE, REPO, reference_runs

FUZZ = settings()  # the loaded profile's
MANY = settings(FUZZ, max_examples=3 * FUZZ.max_examples)  # cheap examples where bugs hide: the damaged export
FEW = settings(FUZZ, max_examples=max(1, FUZZ.max_examples // 5))  # examples of ~50-100 ms each (ncu: ~0.5 s)

RECORD_METHODS = ("kernels", "memcpys", "memsets", "gpu_ops", "api_calls", "nvtx_ranges", "gpu_info")
GZIP_MAGIC = b"\x1f\x8b"


@pytest.fixture(scope="module")
def work_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@functools.lru_cache(maxsize=None)
def _reference_export() -> bytes:
    """The smallest reference export, decompressed."""
    smallest = min(REFERENCE.glob("*/*/n*/nsys.sqlite.gz"), key=lambda p: p.stat().st_size)
    return gzip.decompress(smallest.read_bytes())


@functools.lru_cache(maxsize=None)
def _reference_ncu() -> bytes:
    smallest = min(REFERENCE.glob("*/*/n*/ncu.ncu-rep.gz"), key=lambda p: p.stat().st_size)
    return gzip.decompress(smallest.read_bytes())


@functools.lru_cache(maxsize=None)
def _hot_ranges() -> tuple[tuple[int, int], ...]:
    """Byte ranges of the pages the readers read (schema, and every page of the tables they
    query), so that flips land where they matter and not only in pages nobody reads."""
    fd, path = tempfile.mkstemp(suffix=".sqlite")
    with os.fdopen(fd, "wb") as f:
        f.write(_reference_export())
    try:
        con = sqlite3.connect(path)
        page = con.execute("PRAGMA page_size").fetchone()[0]
        tables = ("StringIds", "NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
                  "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "ENUM_CUDA_MEMCPY_OPER",
                  "ENUM_CUDA_MEM_KIND", "TARGET_INFO_GPU")
        marks = ", ".join("?" * len(tables))
        try:  # dbstat lists every page of a table; not every SQLite build has it
            pages = {r[0] for r in con.execute(f"SELECT pageno FROM dbstat WHERE name IN ({marks})", tables)}
        except sqlite3.DatabaseError:
            pages = {r[0] for r in con.execute(f"SELECT rootpage FROM sqlite_master WHERE name IN ({marks})", tables)}
        con.close()
    finally:
        os.unlink(path)
    pages.add(1)  # the header and the schema
    return tuple(sorted(((p - 1) * page, p * page - 1) for p in pages))


def _cut_short(data: bytes, n: int) -> bytes:
    return data[:min(n, len(data) - 1)]


def _either(fn, *args):
    """fn(*args), or None when it raised AnalysisInputError; any other exception fails the test."""
    try:
        return fn(*args)
    except AnalysisInputError as e:
        assert e.path, "AnalysisInputError must name the file"
        return None


def _read_everything(path: str) -> None:
    """Open the export and run every reader and every report on it: each one either gives a
    result or raises AnalysisInputError."""
    ex = _either(Trace, path)
    if ex is None:
        return
    with ex:
        for method in RECORD_METHODS:
            _either(getattr(ex, method))
        for name, fn in nsys_stats.REPORTS.items():
            result = _either(fn, ex)
            if result is not None:
                header, rows = result
                for fmt in stats_text.FORMATS.values():
                    assert isinstance(fmt(header, rows), str)
        # the columnar readers under run summaries, and the Perfetto trace
        for fn in (breakdown.gpu_time, breakdown.range_gpu_time, breakdown.copy_throughput, breakdown.allocations,
                   breakdown.synchronization):
            _either(fn, ex)
        _either(lambda e: sum(1 for _ in perfetto.trace_events(e)), ex)
        _either(multiprocess.processes, ex)


def _all_fail(path: str) -> None:
    """Arbitrary bytes are never an export: opening it, and every report, raise AnalysisInputError."""
    assert _either(Trace, path) is None
    for name in nsys_stats.REPORTS:
        assert _either(nsys_stats.report, path, name) is None


# --- arbitrary bytes ---------------------------------------------------------------------------

_junk = st.binary(max_size=6000)


@FUZZ
@given(data=st.one_of(
    _junk,
    _junk.map(lambda b: SQLITE_MAGIC + b),  # the magic, then garbage
    _junk.map(lambda b: _reference_export()[:100] + b),  # a real SQLite header, then garbage
))
def test_arbitrary_bytes_as_sqlite(work_dir, data):
    path = work_dir / "junk.sqlite"
    path.write_bytes(data)
    _all_fail(str(path))


@FUZZ
@given(data=st.one_of(
    _junk.filter(lambda b: not b.startswith(GZIP_MAGIC)),  # not gzip at all
    _junk.map(gzip.compress),  # gzip of garbage
    _junk.map(lambda b: gzip.compress(SQLITE_MAGIC + b)),
    # gzip cut short (at least one byte short: the smallest export may gzip to under 100 kB)
    st.integers(0, 100_000).map(lambda n: _cut_short(gzip.compress(_reference_export()), n)),
))
def test_arbitrary_bytes_as_sqlite_gz(work_dir, data):
    path = work_dir / "junk.sqlite.gz"
    path.write_bytes(data)
    _all_fail(str(path))


@FUZZ
@given(data=st.one_of(_junk, _junk.map(lambda b: NCU_REP_MAGIC + b)), gz=st.booleans())
def test_arbitrary_bytes_as_ncu_rep(work_dir, data, gz):
    path = work_dir / ("junk.ncu-rep.gz" if gz else "junk.ncu-rep")
    path.write_bytes(gzip.compress(data) if gz else data)
    assert _either(read_launches, str(path)) is None


# --- a real capture, damaged -------------------------------------------------------------------

def _offsets(size: int):
    anywhere = st.integers(0, size - 1)
    hot = st.sampled_from(_hot_ranges()).flatmap(lambda r: st.integers(r[0], min(r[1], size - 1)))
    return st.one_of(hot, anywhere)


def _damage(data: bytes, flips, cut) -> bytes:
    b = bytearray(data)
    for offset, mask in flips:
        b[offset % len(b)] ^= mask
    return bytes(b[:cut] if cut is not None else b)


@MANY
@given(flips=st.lists(st.tuples(_offsets(len(_reference_export())), st.integers(1, 255)), max_size=8),
       cut=st.none() | st.integers(0, len(_reference_export())))
def test_damaged_export(work_dir, flips, cut):
    path = work_dir / "damaged.sqlite"
    path.write_bytes(_damage(_reference_export(), flips, cut))
    _read_everything(str(path))


@FEW
@given(flips=st.lists(st.tuples(st.integers(0, len(_reference_export()) - 1), st.integers(1, 255)), min_size=1,
                      max_size=4))
def test_damaged_export_gz(work_dir, flips):
    """The same through the .gz path (the reference captures are gzipped)."""
    path = work_dir / "damaged.sqlite.gz"
    path.write_bytes(gzip.compress(_damage(_reference_export(), flips, None), mtime=0))
    _read_everything(str(path))


@FEW
@given(flips=st.lists(st.tuples(st.integers(0, 1 << 24), st.integers(1, 255)), max_size=6),
       cut=st.none() | st.integers(0, 1 << 22))
def test_damaged_ncu_report(work_dir, flips, cut):
    path = work_dir / "damaged.ncu-rep"
    path.write_bytes(_damage(_reference_ncu(), flips, cut))
    _either(read_launches, str(path))


def test_undamaged_captures_read():
    """The fuzz inputs start from captures the readers do read."""
    run = reference_runs()[0]
    with Trace(run / "nsys.sqlite.gz") as ex:
        assert ex.kernels()
    assert _reference_export().startswith(SQLITE_MAGIC)
    assert _reference_ncu().startswith(NCU_REP_MAGIC)


# --- what the fuzzing found (fixed; kept as regression tests) ---------------------------------------------------

def test_schema_that_is_not_utf8_is_a_clear_error(work_dir):
    path = work_dir / "badschema.sqlite"
    path.write_bytes(_reference_export())
    con = sqlite3.connect(path)
    con.execute("PRAGMA writable_schema=ON")
    table = con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'ENUM_%' LIMIT 1").fetchone()[0]
    con.execute("UPDATE sqlite_master SET sql = CAST(? AS TEXT) WHERE name = ?",
                (f"CREATE TABLE {table} (id INTEGER NOT NULL ".encode() + b"\xddRIMARY KEY, name TEXT)", table))
    con.commit()
    con.close()
    with pytest.raises(AnalysisInputError, match="badschema.sqlite"):
        Trace(path)


@pytest.mark.parametrize("name", ["corrupt.sqlite.gz", "corrupt.ncu-rep.gz"])
def test_corrupt_gzip_is_a_clear_error(work_dir, name):
    path = work_dir / name
    path.write_bytes(GZIP_MAGIC + b"\x08\x00" + bytes(6) + bytes(range(64)))
    with pytest.raises(AnalysisInputError, match="corrupt"):
        if name.endswith(".sqlite.gz"):
            Trace(path)
        else:
            read_launches(path)


def test_truncated_ncu_report_is_an_error_or_complete(work_dir):
    path = work_dir / "truncated.ncu-rep"
    path.write_bytes(_reference_ncu()[:-10])
    try:
        launches = read_launches(path)
    except AnalysisInputError:
        return
    assert all(launch.kernel_name is not None for launch in launches), [launch.kernel_name for launch in launches]


def test_expanded_copy_of_a_gzipped_export_never_outlives_its_trace(tmp_path):
    """A gzipped export is read from an expanded temporary copy: it goes with close(), with the
    Trace when nothing holds it, and at interpreter exit for a Trace kept open (a test session's
    cached traces, an analysis that raised); a refused export leaves none either."""
    import subprocess
    import sys

    export = min(REFERENCE.glob("*/*/n*/nsys.sqlite.gz"), key=lambda p: p.stat().st_size)
    not_sqlite = tmp_path / "not_sqlite.sqlite.gz"
    with gzip.open(not_sqlite, "wb") as f:
        f.write(b"plain text, not a database")
    temp = tmp_path / "temp"
    temp.mkdir()
    program = (
        "import gc, os, sys\n"
        "from analysis.common.errors import AnalysisInputError\n"
        "from analysis.readers.nsys.trace import Trace\n"
        "closed = Trace(sys.argv[1]); closed.close()\n"
        "dropped = Trace(sys.argv[1]); del dropped; gc.collect()\n"
        "assert os.listdir(sys.argv[3]) == [], os.listdir(sys.argv[3])\n"
        "try:\n    Trace(sys.argv[2])\nexcept AnalysisInputError:\n    pass\n"
        "kept = Trace(sys.argv[1])\n"
        "assert len(os.listdir(sys.argv[3])) == 1, os.listdir(sys.argv[3])\n"  # open: its copy exists
    )
    env = {**os.environ, "TMPDIR": str(temp)}
    subprocess.run([sys.executable, "-c", program, str(export), str(not_sqlite), str(temp)],
                   env=env, check=True, cwd=REPO)
    assert list(temp.iterdir()) == []
