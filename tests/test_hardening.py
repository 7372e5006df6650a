"""Hardening (issue 48): inputs a CLI cannot trust end in one line naming the file and exit 2, never a
traceback; exports are opened read-only whatever their names hold; markdown names cannot break a
table; copy-captures deletes nothing outside its target."""
from __future__ import annotations

import gzip
import shutil
import subprocess
import sys

import pytest

from conftest import REPO

H200 = REPO / "reports" / "reference" / "h200"
#: two real exports of different runs (their kernels differ)
EXPORT_A = H200 / "numba_ufunc" / "float32" / "n268435456" / "nsys.sqlite.gz"
EXPORT_B = H200 / "numba_ufunc" / "fastmath" / "n268435456" / "nsys.sqlite.gz"


def _analysis(*args, cwd=REPO, timeout=120):
    return subprocess.run([sys.executable, "-m", "analysis", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _gunzip(src, dst):
    with gzip.open(src, "rb") as f, open(dst, "wb") as out:
        shutil.copyfileobj(f, out)
    return dst


def _refused_in_one_line(r, *says):
    """Exit 2, one line on stderr that says each of ``says``, and no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for text in says:
        assert text in lines[0], lines[0]
    return lines[0]


# --- SQLite: read-only, by a percent-encoded URI ----------------------------------------------------

@pytest.mark.parametrize("name", ["run#2.sqlite", "run?mode=rw.sqlite", "100%.sqlite", "run%232.sqlite",
                                  "with space.sqlite", "a #?% b.sqlite"])
def test_an_export_whose_name_holds_uri_characters_is_read_as_itself(tmp_path, name):
    """`run#2.sqlite` was opened as `run` (read-write: created empty, or another export's kernels
    printed with exit 0); now the name is the file's, whatever it holds."""
    plain = _gunzip(EXPORT_A, tmp_path / "plain.sqlite")
    expected = _analysis("stats", "--report", "cuda_gpu_kern_sum", plain)
    assert expected.returncode == 0 and expected.stdout.count("\n") > 1, expected.stderr
    odd = _gunzip(EXPORT_A, tmp_path / name)
    # what the unencoded URI would have opened instead: another run's export, with other kernels
    decoy = tmp_path / name.split("#")[0].split("?")[0]
    if decoy != odd:
        _gunzip(EXPORT_B, decoy)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = _analysis("stats", "--report", "cuda_gpu_kern_sum", odd)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside it


def test_an_export_is_opened_read_only(tmp_path):
    from analysis.nsys.trace import read_only_uri

    path = _gunzip(EXPORT_A, tmp_path / "x #1?.sqlite")
    import sqlite3

    db = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.execute("CREATE TABLE t (x)")
    finally:
        db.close()
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(read_only_uri(tmp_path / "absent#.sqlite"), uri=True).execute("SELECT 1")
    assert not (tmp_path / "absent#.sqlite").exists() and not (tmp_path / "absent").exists()
