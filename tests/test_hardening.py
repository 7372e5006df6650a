"""Hardening (issue 48): inputs a CLI cannot trust end in one line naming the file and exit 2, never a
traceback; exports are opened read-only whatever their names hold; markdown names cannot break a
table; copy-captures deletes nothing outside its target."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from conftest import REPO, write_tree
import snakemake_forks

H200 = REPO / "reports" / "reference" / "h200"
#: two real exports of different runs (their kernels differ)
EXPORT_A = H200 / "numba_ufunc" / "float32" / "n268435456" / "nsys.sqlite.gz"
EXPORT_B = H200 / "numba_ufunc" / "fastmath" / "n268435456" / "nsys.sqlite.gz"


def _analysis(*args, cwd=REPO, timeout=120):
    return subprocess.run([sys.executable, "-m", "analysis", *map(str, args)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def _analysis_here(capsys, *args):
    """``python -m analysis ARGS``'s entry point called in this process: its exit status and what it
    printed, as the process would have them. Each command has one case below that starts it as a
    process (`_analysis`), for what only a process shows (its exit status, a traceback on stderr)."""
    from analysis.cli.main import main

    capsys.readouterr()
    rc = main([str(a) for a in args])
    said = capsys.readouterr()
    return subprocess.CompletedProcess(["analysis", *map(str, args)], rc, said.out, said.err)


def _analysis_as(process: bool, capsys, *args, timeout=120):
    """``python -m analysis ARGS`` as a process, or its entry point in this process."""
    return _analysis(*args, timeout=timeout) if process else _analysis_here(capsys, *args)


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

@pytest.fixture(scope="module")
def kernels_of_export_a(tmp_path_factory):
    """`stats --report cuda_gpu_kern_sum` of EXPORT_A under a plain name, as a process prints it."""
    plain = _gunzip(EXPORT_A, tmp_path_factory.mktemp("plain") / "plain.sqlite")
    expected = _analysis("stats", "--report", "cuda_gpu_kern_sum", plain)
    assert expected.returncode == 0 and expected.stdout.count("\n") > 1, expected.stderr
    return expected


@pytest.mark.parametrize("name", ["run#2.sqlite", "run?mode=rw.sqlite", "100%.sqlite", "run%232.sqlite",
                                  "with space.sqlite", "a #?% b.sqlite"])
def test_an_export_whose_name_holds_uri_characters_is_read_as_itself(tmp_path, name, kernels_of_export_a, capsys):
    """`run#2.sqlite` was opened as `run` (read-write: created empty, or another export's kernels
    printed with exit 0); now the name is the file's, whatever it holds."""
    expected = kernels_of_export_a
    odd = _gunzip(EXPORT_A, tmp_path / name)
    # what the unencoded URI would have opened instead: another run's export, with other kernels
    decoy = tmp_path / name.split("#")[0].split("?")[0]
    if decoy != odd:
        _gunzip(EXPORT_B, decoy)
    before = sorted(p.name for p in tmp_path.iterdir())
    r = _analysis_as(name == "run#2.sqlite", capsys, "stats", "--report", "cuda_gpu_kern_sum", odd)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created beside it


def test_an_export_is_opened_read_only(tmp_path):
    from analysis.common.sqlite_files import read_only_uri

    path = _gunzip(EXPORT_A, tmp_path / "x #1?.sqlite")
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
    return write_tree(tmp_path / "captures", {
        "numba_ufunc/float32/n1/timing.json": "{}", "ceilings.json": '{"run": "new"}',
        "coldstart/numba_ufunc_float32.json": "{}", "kernels/numba_ufunc_float32_k/kernel-run.json": "{}"})


def _reference(tmp_path):
    return write_tree(tmp_path / "reports" / "reference" / "h200", {
        "numba_ufunc/stale/n1/timing.json": "{}", "coldstart/numba_ufunc_stale.json": "{}",
        "kernels/numba_ufunc_float32_k/stale.json": "{}"})


def _victim(tmp_path):
    """A folder outside the reference holding what the merge would delete if it followed a link there."""
    return write_tree(tmp_path / "victim", {
        **{name: "mine" for name in ("numba_ufunc_float32.json", "numba_ufunc_stale.json", "stale.json", "keep.txt")},
        "stale/n1/timing.json": "mine"})


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


#: each place in a reference that a merge deletes from or replaces, made a symlink to a folder outside
MERGE_LINKS = ["coldstart", "numba_ufunc", "numba_ufunc.new", "kernels", "kernels/numba_ufunc_float32_k"]


@pytest.mark.parametrize("linked", MERGE_LINKS)
def test_merge_refuses_a_symlinked_sub_folder_and_deletes_nothing_at_its_target(tmp_path, linked, capsys):
    """A symlinked `coldstart/` had its cupy_sqdiff_*.json deleted at the link's target, exit 0."""
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    before = _files(victim)
    link = dst / linked
    if link.exists():
        shutil.rmtree(link)
    link.symlink_to(victim, target_is_directory=True)
    r = _analysis_as(linked == MERGE_LINKS[0], capsys, "copy-captures", "--from", src, "--to", dst, "--merge",
                     "numba_ufunc")
    _refused_in_one_line(r, "symlink", str(link))
    assert _files(victim) == before
    assert (dst / "numba_ufunc" / "stale").exists() or linked == "numba_ufunc"  # nothing of the merge done


def test_merge_refuses_a_symlinked_cold_start_record(tmp_path, capsys):
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    (dst / "coldstart" / "numba_ufunc_old.json").symlink_to(victim / "keep.txt")
    r = _analysis_here(capsys, "copy-captures", "--from", src, "--to", dst, "--merge", "numba_ufunc")
    _refused_in_one_line(r, "symlink", "numba_ufunc_old.json")
    assert (victim / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("merge", [False, True])
def test_a_symlinked_reference_is_refused_before_anything_is_written(tmp_path, merge, capsys):
    """`--to` a symlinked reference said "Cannot call rmtree on a symbolic link" and left a `.old`."""
    src, victim = _run_captures(tmp_path), _victim(tmp_path)
    before = _files(victim)
    dst = tmp_path / "reports" / "reference" / "h200"
    dst.parent.mkdir(parents=True)
    dst.symlink_to(victim, target_is_directory=True)
    r = _analysis_here(capsys, "copy-captures", "--from", src, "--to", dst, *(["--merge", "numba_ufunc"] if merge else []))
    _refused_in_one_line(r, "symlink", str(dst))
    assert _files(victim) == before
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]


def test_a_symlink_left_as_the_new_reference_is_refused(tmp_path, capsys):
    src, dst, victim = _run_captures(tmp_path), _reference(tmp_path), _victim(tmp_path)
    before = _files(victim)
    (dst.parent / "h200.new").symlink_to(victim, target_is_directory=True)
    r = _analysis_here(capsys, "copy-captures", "--from", src, "--to", dst)
    _refused_in_one_line(r, "symlink", "h200.new")
    assert _files(victim) == before


def test_a_reference_is_replaced_in_one_step_and_leaves_nothing_beside_it(tmp_path, capsys):
    src, dst = _run_captures(tmp_path), _reference(tmp_path)
    (dst.parent / "h200.old").mkdir()  # left by an interrupted copy of an older version
    r = _analysis_here(capsys, "copy-captures", "--from", src, "--to", dst)
    assert r.returncode == 0, r.stderr
    assert "removing" in r.stderr and "h200.old" in r.stderr  # says what it cleaned up
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]
    assert not (dst / "numba_ufunc" / "stale").exists()
    assert (dst / "numba_ufunc" / "float32" / "n1" / "timing.json.gz").exists()


def test_a_failed_copy_keeps_the_old_reference_whole(tmp_path, capsys):
    dst = _reference(tmp_path)
    before = _files(dst)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = _analysis_here(capsys, "copy-captures", "--from", empty, "--to", dst)
    _refused_in_one_line(r, "holds no capture files")
    assert _files(dst) == before
    assert sorted(p.name for p in dst.parent.iterdir()) == ["h200"]


def test_the_swap_is_atomic_where_the_system_has_renameat2(tmp_path):
    from analysis.readers.captures import _exchange

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
        assert len(re.split(r"(?<!\\)\|", line)) - 2 == columns, repr(line)
    assert not any(line.startswith("#") for line in lines)


def test_stats_md_keeps_a_hostile_kernel_name_in_its_cell(tmp_path, capsys):
    path = _renamed_export(tmp_path, HOSTILE_NAME)
    r = _analysis_here(capsys, "stats", "--report", "cuda_gpu_kern_sum", "--format", "md", path)
    assert r.returncode == 0, r.stderr
    header = r.stdout.split("\n")[0]
    _table_lines_intact(r.stdout, header.count(" | ") + 1)
    row = next(line for line in r.stdout.split("\n") if "Injected" in line)
    # the break is a space, the escape character and NUL are visible, the pipes and backslash escaped
    assert "k\\|ernel # Injected heading  \\| a \\| row \\|␛[31m␀ end\\\\" in row


@pytest.mark.parametrize("backslash", [True, False])
def test_every_table_writer_cell_escapes_breaks_and_control_characters(backslash):
    from analysis.report import markdown, mdtext

    text = mdtext.cell(HOSTILE_NAME, backslash=backslash)
    assert "\n" not in text and "\r" not in text and "\x1b" not in text and "\x00" not in text
    assert "\u2028" not in text and text.count("\\|") == 4
    md = markdown.table(["name", "n"], [[HOSTILE_NAME, 1], ["`x`" + "y" * 300, 2]], max_cell=40)
    _table_lines_intact(md, 2)
    assert md.split("\n")[3].count("`") % 2 == 0  # a cut cell closes its code span


# --- every CLI: a record it cannot trust ends in one line naming the file and the field, exit 2 --------


KERNEL_DIR = REPO / "reports" / "reference" / "h100" / "kernels" / "warp_sph_graph_get_acceleration"
MULTI = H200 / "nvtx_multiprocess"
RUN_DIR = H200 / "numba_ufunc" / "float32" / "n268435456"


def _damaged(tmp_path, original, field, value, name=None):
    """A copy of a real record with ``field`` (a/b for nesting; "" the whole record) set to ``value``."""
    text = gzip.open(original).read() if str(original).endswith(".gz") else original.read_bytes()
    record = json.loads(text)
    if field:
        *parents, last = field.split("/")
        node = record
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value
    else:
        record = value
    path = tmp_path / (name or original.name.removesuffix(".gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def _linked_run_dir(tmp_path, replaced: dict):
    """The reference run folder of numba_ufunc float32 with the files in ``replaced`` (name -> path) swapped in."""
    run = tmp_path / "run"
    run.mkdir()
    for f in RUN_DIR.iterdir():
        base = f.name.removesuffix(".gz")
        if base in replaced or f.name in replaced:
            continue
        (run / f.name).symlink_to(f)
    for name, path in replaced.items():
        shutil.copy(path, run / name)
    return run


#: the campaign's crashing cases: (command, which record, field, the value it got) -> the field named
TYPE_DAMAGE = [
    ("kernel-page", "", 1, "(top level)"),
    ("kernel-page", "command/0", 1, "command/0"),
    ("kernel-page", "command/0", None, "command/0"),
    ("kernel-page", "environment", [], "environment"),
    ("kernel-page", "environment", "x", "environment"),
    ("kernel-page", "environment/COOKBOOK_LINEINFO", 1, "environment/COOKBOOK_LINEINFO"),
    ("kernel-page", "size", "big", "size"),
    ("kernel-page", "provenance/gpus", "x", "provenance/gpus"),
    ("kernel-page", "provenance/packages", "x", "provenance/packages"),
    ("multiprocess-report", "", "x", "(top level)"),
    ("multiprocess-report", "", 1, "(top level)"),
    ("multiprocess-report", "provenance", "x", "provenance"),
    ("multiprocess-report", "provenance/git_commit", 1, "provenance/git_commit"),
    ("multiprocess-report", "provenance/gpus", "x", "provenance/gpus"),
    ("multiprocess-report", "provenance/packages", "x", "provenance/packages"),
    ("coldstart", "", 1, "(top level)"),
    ("coldstart", "runs", [], "runs"),
    ("coldstart", "runs/cold", "x", "runs/cold"),
    ("coldstart", "runs/warm", [], "runs/warm"),
    ("coldstart", "variant", 1, "variant"),
    ("coldstart", "workload", None, "workload"),
    ("summarize-run", "", 1, "(top level)"),
    ("summarize-run", "timing", [], "timing"),
    ("summarize-run", "timing/median_ms", None, "timing/median_ms"),
    ("summarize-run", "work/bytes_read", "x", "work/bytes_read"),
    ("summarize-run", "times_ms", "x", "times_ms"),
    ("summarize-run", "host_call_ms/0", None, "host_call_ms/0"),
    ("summarize-run", "telemetry", "x", "telemetry"),
    ("index-ceilings", "ceilings", [], "ceilings"),
    ("index-ceilings", "ceilings/h2d_pinned/gb_per_s", "fast", "ceilings/h2d_pinned"),
    ("index-preflight", "tools/nsys", "x", "tools/nsys"),
    ("index-preflight", "recipes_skipped", [], "recipes_skipped"),
]


def _damaged_command(tmp_path, command, field, value):
    out = tmp_path / "out"
    if command == "kernel-page":
        run = _damaged(tmp_path, KERNEL_DIR / "kernel-run.json", field, value)
        return run, ["kernel-page", "--report", KERNEL_DIR / "kernel.ncu-rep.gz", "--run", run,
                     "--output", out / "k.md"]
    if command == "multiprocess-report":
        run = _damaged(tmp_path, MULTI / "run.json", field, value)
        return run, ["multiprocess-report", MULTI / "nsys.sqlite.gz", "--run", run, "--output", out / "m.md",
                     "--figure", out / "m.png"]
    if command == "coldstart":
        rec = _damaged(tmp_path, H200 / "coldstart" / "numba_ufunc_baseline.json", field, value, "c/numba_ufunc_baseline.json")
        return rec, ["coldstart", "--captures", H200, "--output", out / "c.json", rec]
    if command == "summarize-run":
        timing = _damaged(tmp_path, RUN_DIR / "timing.json.gz", field, value, "t/timing.json")
        run = _linked_run_dir(tmp_path, {"timing.json": timing})
        return run / "timing.json", ["summarize-run", "--run-dir", run, "--output", out / "s.json"]
    which = command.removeprefix("index-")
    damaged = _damaged(tmp_path, H200 / f"{which}.json", field, value)
    others = {"ceilings": H200 / "ceilings.json", "preflight": H200 / "preflight.json", which: damaged}
    return damaged, ["index", "--ceilings", others["ceilings"], "--preflight", others["preflight"],
                     "--output", out / "i.md", H200 / "missing-summaries-are-not-reached.json"]


@pytest.mark.parametrize("command,field,value,named", TYPE_DAMAGE,
                         ids=[f"{c}:{f or 'record'}={v!r}" for c, f, v, _ in TYPE_DAMAGE])
def test_a_type_damaged_record_ends_in_one_line_naming_the_file_and_field(tmp_path, command, field, value, named,
                                                                         capsys):
    damaged, argv = _damaged_command(tmp_path, command, field, value)
    # each command's first case as a process
    first = next(case for case in TYPE_DAMAGE if case[0] == command)
    r = _analysis_as(first == (command, field, value, named), capsys, *argv)
    _refused_in_one_line(r, str(damaged), f"field {named}")
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_a_damaged_gpu_count_in_an_export_is_refused_in_one_line(tmp_path, capsys):
    """TARGET_INFO_GPU.smCount = 'x' made summarize-run raise TypeError."""
    export = _gunzip(RUN_DIR / "nsys.sqlite.gz", tmp_path / "nsys.sqlite")
    db = sqlite3.connect(export)
    db.execute("UPDATE TARGET_INFO_GPU SET smCount = 'x'")
    db.commit()
    db.close()
    run = _linked_run_dir(tmp_path, {"nsys.sqlite": export})
    r = _analysis_here(capsys, "summarize-run", "--run-dir", run, "--output", tmp_path / "s.json")
    _refused_in_one_line(r, "nsys.sqlite", "TARGET_INFO_GPU", "'x'")


@pytest.mark.parametrize("command", ["gpu-jobs", "multiprocess-report"])
@pytest.mark.parametrize("figure", ["timeline", "timeline.md", "timeline.png.txt"])
def test_a_figure_without_an_image_suffix_is_refused_before_anything_is_written(tmp_path, command, figure, capsys):
    out = tmp_path / "out"
    if command == "gpu-jobs":
        argv = ["gpu-jobs", "--records", H200 / "gpu-jobs", "--output", out / "g.md", "--figure", out / figure]
    else:
        argv = ["multiprocess-report", MULTI / "nsys.sqlite.gz", "--run", MULTI / "run.json", "--output",
                out / "m.md", "--figure", out / figure]
    _refused_in_one_line(_analysis_as(figure == "timeline", capsys, *argv), str(out / figure), "figure")
    assert not out.exists()


def _commands_writing_under(folder):
    """Every command that writes files (compare and cross-gpu aside: their own branch), its outputs under ``folder``."""
    kernel = KERNEL_DIR
    return {
        "summarize-run": ["summarize-run", "--run-dir", RUN_DIR, "--output", folder / "s.json"],
        "report": ["report", "--workload", "numba_ufunc", "--ceilings", H200 / "ceilings.json", "--out-dir", folder,
                   "SUMMARY"],
        "index": ["index", "--ceilings", H200 / "ceilings.json", "--preflight", H200 / "preflight.json",
                  "--output", folder / "i.md", "SUMMARY"],
        "gpu-jobs": ["gpu-jobs", "--records", H200 / "gpu-jobs", "--output", folder / "g.md", "--figure",
                     folder / "g.png"],
        "coldstart": ["coldstart", "--captures", H200, "--output", folder / "c.json",
                      H200 / "coldstart" / "numba_ufunc_baseline.json"],
        "kernel-page": ["kernel-page", "--report", kernel / "kernel.ncu-rep.gz", "--run", kernel / "kernel-run.json",
                        "--output", folder / "k.md"],
        "multiprocess-report": ["multiprocess-report", MULTI / "nsys.sqlite.gz", "--output", folder / "m.md",
                                "--figure", folder / "m.png"],
        "perfetto": ["perfetto", RUN_DIR / "nsys.sqlite.gz", "-o", folder / "t.json"],
        "copy-captures": ["copy-captures", "--from", RUN_DIR.parent.parent, "--to", folder / "reference" / "x"],
    }


@pytest.fixture(scope="module")
def one_summary(tmp_path_factory):
    out = tmp_path_factory.mktemp("summary") / "n268435456.json"
    r = _analysis("summarize-run", "--run-dir", RUN_DIR, "--output", out)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("command", list(_commands_writing_under(REPO)))
def test_an_output_whose_folder_is_a_file_is_refused_in_one_line(tmp_path, command, one_summary, capsys):
    """NotADirectoryError in 11 of 12 commands: now one line naming the output, exit 2."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    argv = [one_summary if a == "SUMMARY" else a for a in _commands_writing_under(blocker / "sub")[command]]
    # as a process: the commands no other test of this file starts as one
    r = _analysis_as(command in ("report", "perfetto"), capsys, *argv, timeout=300)
    _refused_in_one_line(r, str(blocker))
    assert blocker.read_text() == "not a folder"


# --- interrupted runs: temporary files removed on every exit path, and after a kill by the next run ----


#: the largest committed export: its expansion and reading take long enough to be interrupted
BIG_EXPORT = max(H200.rglob("nsys.sqlite.gz"), key=lambda p: p.stat().st_size)


#: the child's sitecustomize: an audit hook that says "paused" on the inherited pipe at the first
#: event named PAUSE_AT_EVENT whose first argument holds PAUSE_AT_MATCH, then waits for a signal there;
#: SIGINT reaches the command as it would in a terminal, whatever the test's own start ignored
_PAUSE_HOOK = """
import os, signal, sys

_event, _match, _fd = os.environ["PAUSE_AT_EVENT"], os.environ["PAUSE_AT_MATCH"], int(os.environ["PAUSE_FD"])
_paused = []
# Ctrl-C as at a terminal: tests started from a background job inherit SIGINT ignored, and Python
# then installs no KeyboardInterrupt for it (the command would pause for ever)
signal.signal(signal.SIGINT, signal.default_int_handler)


def _pause(event, args):
    if event == _event and not _paused and args and _match in str(args[0]):
        _paused.append(True)
        os.write(_fd, b"paused\\n")
        while True:
            signal.pause()


sys.addaudithook(_pause)
"""

#: where the command is stopped: while it expands the export into its temporary copy (gzip opening
#: the export), or once the copy is whole and SQLite opens it
PAUSE_AT = {"expanding": ("open", BIG_EXPORT.name), "reading": ("sqlite3.connect", "cookbook-")}


def _start_reading(tmp_path, phase="expanding"):
    """`stats` on a gzipped export with TMPDIR in tmp_path, held at ``phase`` (PAUSE_AT) until a signal
    comes: the test acts on the command's own event, whatever the machine's load."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(_PAUSE_HOOK)
    event, match = PAUSE_AT[phase]
    read_fd, write_fd = os.pipe()
    env = {**os.environ, "TMPDIR": str(tmp), "PAUSE_AT_EVENT": event, "PAUSE_AT_MATCH": match,
           "PAUSE_FD": str(write_fd),
           "PYTHONPATH": os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, "-m", "analysis", "stats", "--report", "cuda_api_sum", str(BIG_EXPORT)],
                            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            pass_fds=(write_fd,))
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as said:
        paused = said.readline()  # b"" once the command ended without pausing
    assert paused == b"paused\n", f"the command ended before it reached {phase}: {proc.communicate(timeout=60)}"
    return proc, tmp


@pytest.mark.parametrize("phase", sorted(PAUSE_AT))
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_stopped_command_removes_its_expanded_capture(tmp_path, sig, phase):
    proc, tmp = _start_reading(tmp_path, phase)
    [expanded] = [p for p in tmp.iterdir() if p.name.startswith("cookbook-")]
    assert expanded.name.startswith(f"cookbook-{proc.pid}-")
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 128 + sig, err
    assert not any(tmp.iterdir()), list(tmp.iterdir())


def test_what_a_killed_command_left_is_removed_by_the_next_run_and_said(tmp_path):
    from analysis.common.leftovers import clean_up

    proc, tmp = _start_reading(tmp_path)
    proc.kill()
    proc.wait(timeout=60)
    [left] = [p for p in tmp.iterdir() if p.name.startswith("cookbook-")]
    # and a half-written output of the same dead process beside its target
    work = tmp_path / "work"
    work.mkdir()
    partial = work / f".page.md.{proc.pid}-0123456789ab.tmp"
    partial.write_text("half")
    mine = work / f".other.md.{os.getpid()}-0123456789ab.tmp"  # a running writer's: kept
    mine.write_text("being written")
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        removed = clean_up(str(work), temp_folder=str(tmp))
    assert sorted(removed) == sorted([str(left), str(partial)])
    assert not left.exists() and not partial.exists() and mine.exists()
    assert "cleaned up after an interrupted run: 2 file(s)" in said.getvalue() and str(left) in said.getvalue()


def _wrong_types(value):
    if isinstance(value, bool):
        return ["x"]
    if isinstance(value, (int, float)):
        return ["x", None]
    if isinstance(value, str):
        return [1, None]
    return [[], "x"] if isinstance(value, dict) else ["x", {}]


def _fields(record, depth=2, path=()):
    """(path, value) of every field of ``record`` to ``depth`` levels (a list: its first item)."""
    items = record.items() if isinstance(record, dict) else list(enumerate(record))[:1]
    for key, value in items:
        yield (*path, str(key)), value
        if depth > 1 and isinstance(value, (dict, list)):
            yield from _fields(value, depth - 1, (*path, str(key)))


def test_every_field_of_a_cold_start_record_given_a_wrong_type_ends_in_one_line_or_a_page(tmp_path, capsys):
    """The campaign's sweep on one command, in this process: no traceback for any field, and every
    refusal names the file and a field."""
    from analysis.cli.main import main

    original = H200 / "coldstart" / "numba_ufunc_baseline.json"
    cases = [(path, wrong) for path, value in _fields(json.loads(original.read_text())) for wrong in _wrong_types(value)]
    assert len(cases) > 30
    outcomes = {0: 0, 2: 0}
    for i, (path, wrong) in enumerate(cases):
        damaged = _damaged(tmp_path, original, "/".join(path), wrong, f"{i}/numba_ufunc_baseline.json")
        rc = main(["coldstart", "--captures", str(H200), "--output", str(tmp_path / f"{i}.json"), str(damaged)])
        err = capsys.readouterr().err.strip()
        outcomes[rc] += 1
        if rc == 2:
            assert len(err.splitlines()) == 1 and str(damaged) in err and "field " in err, (path, wrong, err)
    assert outcomes[2] >= 30, outcomes


def test_a_reader_error_no_schema_caught_is_one_line_with_the_inputs(tmp_path, capsys, monkeypatch):
    from analysis.model import coldstart
    from analysis.cli.main import main

    def broken(records, captures):
        return {}["phases"]

    monkeypatch.setattr(coldstart, "summarize", broken)
    record = H200 / "coldstart" / "numba_ufunc_baseline.json"
    argv = ["coldstart", "--captures", str(H200), "--output", str(tmp_path / "c.json"), str(record)]
    assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("analysis coldstart: cannot use its inputs (") and str(record) in line and "KeyError" in line
    monkeypatch.setenv("ANALYSIS_TRACEBACK", "1")
    with pytest.raises(KeyError):
        main(argv)


#: each record kind's committed copies: every one the references and tests/data hold must pass its schema
RECORD_GLOBS = {
    "kernel-run.json": ["reports/reference/*/kernels/*/kernel-run.json*", "tests/data/**/kernel-run.json*"],
    "a multi-process run record": ["reports/reference/*/nvtx_multiprocess/run.json*"],
    "a cold-start record": ["reports/reference/*/coldstart/*.json*", "tests/data/**/coldstart/*.json*"],
    "a ceilings record": ["reports/reference/*/ceilings.json*", "reports/reference/*/*/ceilings.json*",
                          "tests/data/**/ceilings.json*"],
    "a preflight record": ["reports/reference/*/preflight.json*", "tests/data/**/preflight.json*"],
    "a profiled run's record": ["reports/reference/*/*/*/*/nsys-run.json*", "reports/reference/*/*/*/*/ncu-run.json*",
                                "tests/data/**/n*/nsys-run.json*", "tests/data/**/n*/ncu-run.json*"],
    "a timed run's record": ["reports/reference/*/*/*/*/timing.json*", "reports/reference/*/*/l2/*/*/timing-*.json*",
                             "tests/data/**/timing.json*"],
}


@pytest.mark.parametrize("kind", sorted(RECORD_GLOBS))
def test_every_committed_record_passes_its_schema(kind):
    from analysis.model.records import load_record

    paths = sorted({p for pattern in RECORD_GLOBS[kind] for p in REPO.glob(pattern)})
    assert paths, kind
    for path in paths:
        load_record(str(path), kind)


def test_the_cold_start_summary_passes_the_schema_the_index_reads_it_with(tmp_path, capsys):
    from analysis.model.records import load_record

    out = tmp_path / "coldstart.json"
    records = sorted((H200 / "coldstart").glob("*.json"))
    r = _analysis_here(capsys, "coldstart", "--captures", H200, "--output", out, *records)
    assert r.returncode == 0, r.stderr
    assert len(load_record(str(out), "a cold-start summary")) == len(records)


def test_the_next_pipeline_run_says_what_it_cleaned_up(tmp_path):
    """Snakemake's onstart removes what a killed run left (a dead process' expanded capture in TMPDIR,
    a half-written output in the work folder) and names it; a running process' files stay."""
    work, tmpdir = tmp_path / "work", tmp_path / "tmp"
    (work / "analysis").mkdir(parents=True)
    tmpdir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [tmpdir / f"cookbook-{dead.pid}-x1.sqlite", work / "analysis" / f".s.json.{dead.pid}-0123456789ab.tmp"]
    live = tmpdir / f"cookbook-{os.getpid()}-x2.sqlite"
    for path in [*stale, live]:
        path.write_text("left")
    target = f"{work}/analysis/reference/numba_ufunc/baseline/n268435456.json"
    r = snakemake_forks.run(["--cores", "1", "--config", f"work_dir={work}", "--", target], REPO, timeout=600,
                            env={**os.environ, "TMPDIR": str(tmpdir)})
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    said = [line for line in r.stderr.splitlines() if line.startswith("cleaned up after an interrupted run")]
    assert len(said) == 1 and "2 file(s)" in said[0] and all(str(p) in said[0] for p in stale), r.stderr[-2000:]
    assert not any(p.exists() for p in stale) and live.exists()
