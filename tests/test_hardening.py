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


# --- copy-captures: nothing deleted or replaced outside the reference --------------------------------

def _run_captures(tmp_path):
    """A run's capture folder with one workload, its ceilings, a cold-start record and a kernel page."""
    src = tmp_path / "captures"
    (src / "numba_ufunc" / "float32" / "n1").mkdir(parents=True)
    (src / "numba_ufunc" / "float32" / "n1" / "timing.json").write_text("{}")
    (src / "ceilings.json").write_text('{"run": "new"}')
    (src / "coldstart").mkdir()
    (src / "coldstart" / "numba_ufunc_float32.json").write_text("{}")
    (src / "kernels" / "numba_ufunc_float32_k").mkdir(parents=True)
    (src / "kernels" / "numba_ufunc_float32_k" / "kernel-run.json").write_text("{}")
    return src


def _reference(tmp_path):
    dst = tmp_path / "reports" / "reference" / "h200"
    (dst / "numba_ufunc" / "stale" / "n1").mkdir(parents=True)
    (dst / "numba_ufunc" / "stale" / "n1" / "timing.json").write_text("{}")
    (dst / "coldstart").mkdir()
    (dst / "coldstart" / "numba_ufunc_stale.json").write_text("{}")
    (dst / "kernels" / "numba_ufunc_float32_k").mkdir(parents=True)
    (dst / "kernels" / "numba_ufunc_float32_k" / "stale.json").write_text("{}")
    return dst


def _victim(tmp_path):
    """A folder outside the reference holding what the merge would delete if it followed a link there."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("numba_ufunc_float32.json", "numba_ufunc_stale.json", "stale.json", "keep.txt"):
        (victim / name).write_text("mine")
    (victim / "stale" / "n1").mkdir(parents=True)
    (victim / "stale" / "n1" / "timing.json").write_text("mine")
    return victim


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


#: each place in a reference that a merge deletes from or replaces, made a symlink to a folder outside
MERGE_LINKS = ["coldstart", "numba_ufunc", "numba_ufunc.new", "kernels", "kernels/numba_ufunc_float32_k"]


@pytest.mark.parametrize("linked", MERGE_LINKS)
def test_merge_refuses_a_symlinked_sub_folder_and_deletes_nothing_at_its_target(tmp_path, linked):
    """A symlinked `coldstart/` had its cupy_sqdiff_*.json deleted at the link's target, exit 0."""
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    before = _files(victim)
    link = dst / linked
    if link.exists():
        shutil.rmtree(link)
    link.symlink_to(victim, target_is_directory=True)
    r = _analysis("copy-captures", "--from", src, "--to", dst, "--merge", "numba_ufunc")
    _refused_in_one_line(r, "symlink", str(link))
    assert _files(victim) == before
    assert (dst / "numba_ufunc" / "stale").exists() or linked == "numba_ufunc"  # nothing of the merge done


def test_merge_refuses_a_symlinked_cold_start_record(tmp_path):
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    (dst / "coldstart" / "numba_ufunc_old.json").symlink_to(victim / "keep.txt")
    r = _analysis("copy-captures", "--from", src, "--to", dst, "--merge", "numba_ufunc")
    _refused_in_one_line(r, "symlink", "numba_ufunc_old.json")
    assert (victim / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("merge", [False, True])
def test_a_symlinked_reference_is_refused_before_anything_is_written(tmp_path, merge):
    """`--to` a symlinked reference said "Cannot call rmtree on a symbolic link" and left a `.old`."""
    src, victim = _run_captures(tmp_path), _victim(tmp_path)
    before = _files(victim)
    dst = tmp_path / "reports" / "reference" / "h200"
    dst.parent.mkdir(parents=True)
    dst.symlink_to(victim, target_is_directory=True)
    r = _analysis("copy-captures", "--from", src, "--to", dst, *(["--merge", "numba_ufunc"] if merge else []))
    _refused_in_one_line(r, "symlink", str(dst))
    assert _files(victim) == before
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]


def test_a_symlink_left_as_the_new_reference_is_refused(tmp_path):
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    before = _files(victim)
    (dst.parent / "h200.new").symlink_to(victim, target_is_directory=True)
    r = _analysis("copy-captures", "--from", src, "--to", dst)
    _refused_in_one_line(r, "symlink", "h200.new")
    assert _files(victim) == before


def test_a_reference_is_replaced_in_one_step_and_leaves_nothing_beside_it(tmp_path):
    src, dst = _run_captures(tmp_path), _reference(tmp_path)
    (dst.parent / "h200.old").mkdir()  # left by an interrupted copy of an older version
    r = _analysis("copy-captures", "--from", src, "--to", dst)
    assert r.returncode == 0, r.stderr
    assert "removing" in r.stderr and "h200.old" in r.stderr  # says what it cleaned up
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]
    assert not (dst / "numba_ufunc" / "stale").exists()
    assert (dst / "numba_ufunc" / "float32" / "n1" / "timing.json.gz").exists()


def test_a_failed_copy_keeps_the_old_reference_whole(tmp_path):
    dst = _reference(tmp_path)
    before = _files(dst)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _analysis("copy-captures", "--from", empty, "--to", dst)
    _refused_in_one_line(r, "holds no capture files")
    assert _files(dst) == before
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]


def test_the_swap_is_atomic_where_the_system_has_renameat2(tmp_path):
    from analysis.captures import _exchange

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "from_a").write_text("")
    assert _exchange(str(a), str(b))
    assert [p.name for p in b.iterdir()] == ["from_a"] and not any(a.iterdir())


# --- markdown: a name cannot break a table or start a heading ----------------------------------------

HOSTILE_NAME = "k|ernel\n# Injected heading\r\n| a | row |\x1b[31m\x00\u2028end\\"


def _renamed_export(tmp_path, name):
    """A real export whose most frequent kernel's name is replaced by ``name`` (as a damaged or hostile
    program could name it)."""
    import sqlite3

    path = _gunzip(EXPORT_A, tmp_path / "renamed.sqlite")
    db = sqlite3.connect(path)
    try:
        [ids] = db.execute("SELECT shortName, demangledName, mangledName FROM CUPTI_ACTIVITY_KIND_KERNEL "
                           "GROUP BY shortName ORDER BY count(*) DESC LIMIT 1").fetchall()
        for name_id in set(ids):
            db.execute("UPDATE StringIds SET value = ? WHERE id = ?", (name, name_id))
        db.commit()
    finally:
        db.close()
    return path


def _table_lines_intact(md: str, columns: int) -> None:
    lines = md.rstrip("\n").split("\n")
    for line in lines:
        assert line.startswith("|") and line.endswith("|"), repr(line)
        # cells: split on pipes that are not escaped
        import re

        assert len(re.split(r"(?<!\\)\|", line)) - 2 == columns, repr(line)
    assert not any(line.startswith("#") for line in lines)


def test_stats_md_keeps_a_hostile_kernel_name_in_its_cell(tmp_path):
    path = _renamed_export(tmp_path, HOSTILE_NAME)
    r = _analysis("stats", "--report", "cuda_gpu_kern_sum", "--format", "md", path)
    assert r.returncode == 0, r.stderr
    header = r.stdout.split("\n")[0]
    _table_lines_intact(r.stdout, header.count(" | ") + 1)
    row = next(line for line in r.stdout.split("\n") if "Injected" in line)
    # the break is a space, the escape character and NUL are visible, the pipes and backslash escaped
    assert "k\\|ernel # Injected heading  \\| a \\| row \\|␛[31m␀ end\\\\" in row


@pytest.mark.parametrize("backslash", [True, False])
def test_every_table_writer_cell_escapes_breaks_and_control_characters(backslash):
    from analysis import markdown, mdtext

    text = mdtext.cell(HOSTILE_NAME, backslash=backslash)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and "\x00" not in text
    assert "\u2028" not in text and text.count("\\|") == 4
    md = markdown.table(["name", "n"], [[HOSTILE_NAME, 1], ["`x`" + "y" * 300, 2]], max_cell=40)
    _table_lines_intact(md, 2)
    assert md.split("\n")[3].count("`") % 2 == 0  # a cut cell closes its code span
