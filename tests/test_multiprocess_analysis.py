"""analysis.report.multiprocess on real captures: every committed single-process capture against nsys'
own summaries, then a two-process export built from one of them (same correlation ids and NVTX
domain ids in both processes, as real multi-process captures have), and the CLI."""
from __future__ import annotations

import gzip
import tempfile
import os
import contextlib
import shutil
import sqlite3

import pytest

from analysis.report import multiprocess as mp
from analysis.cli.main import main

from conftest import REFERENCE, nsys_stats_rows, reference_runs

RUNS = reference_runs(with_nsys_stats=True)
FUSED = REFERENCE / "cupy_sqdiff" / "fused" / "n4096"


def test_global_ids_split_into_pid_and_tid():
    g = 281488817914681  # a thread of the fused n4096 capture
    assert mp.pid_of(g) == 825 and mp.tid_of(g) == 825
    assert mp.pid_of(281488817913856) == 825  # its globalPid
    assert mp.tid_of(281488817914699) == 843


# Captures of the suite's own code: one process, the suite's ranges only, every launch from the main
# thread. Warp's graph replays, JAX's and cuDF's own ranges and threads make the others differ by design.
SUITE_ONLY = [r for r in RUNS if r.parts[-3] in ("cupy_sqdiff", "numba_ufunc", "pycuda_kernel")]


@pytest.mark.parametrize("run", SUITE_ONLY, ids=lambda p: "/".join(p.parts[-3:]))
def test_one_process_per_reference_capture_agrees_with_nsysnsys_stats_rows(run):
    procs = mp.read_processes(str(run / "nsys.sqlite.gz"))
    with_suite = [p for p in procs if p.suite_ranges]
    assert len(with_suite) == 1 and len(procs) == 1
    p = procs[0]
    # named threads come from ThreadNames: the main thread (tid == pid) and CUDA's own threads
    assert p.main_thread is not None and p.main_thread.tid == p.pid and p.main_thread.name == "python3"
    assert p.label == f"pid {p.pid} python3"
    assert any(t.name == "CUPTI worker thread" for t in p.threads)
    # every GPU operation is launched by a runtime call of this process, from its main thread
    assert p.unattributed_gpu_ops == ()
    assert {o.launch_tid for o in p.gpu_ops} == {p.pid}
    kernels: dict[str, int] = {}
    for o in p.ops_of_kind("kernel"):
        kernels[o.name] = kernels.get(o.name, 0) + 1
    assert kernels == {r["Name"]: int(r["Instances"]) for r in nsys_stats_rows(run, "cuda_gpu_kern_sum")}
    copies: dict[str, int] = {}
    for o in p.gpu_ops:
        if o.kind != "kernel":
            copies[o.name] = copies.get(o.name, 0) + 1
    assert copies == {r["Operation"]: int(r["Count"]) for r in nsys_stats_rows(run, "cuda_gpu_mem_time_sum")}
    # the suite's ranges: nsys' NVTX summary, and its GPU projection's count of launched operations
    s = mp.summary(procs)["processes"][0]
    mine = {f"cookbook:{r['name']}": r for r in s["suite_ranges"]}
    theirs = {r["Range"]: r for r in nsys_stats_rows(run, "nvtx_sum")}
    assert set(mine) == set(theirs)
    for name, r in theirs.items():
        assert mine[name]["calls"] == int(r["Instances"])
        assert round(mine[name]["total_ms"] * 1e6) == int(r["Total Time (ns)"])
    projected = {r["Range"]: int(r["Total GPU Ops"]) for r in nsys_stats_rows(run, "nvtx_gpu_proj_sum")}
    assert {n: r["gpu_ops_launched"] for n, r in mine.items() if r["gpu_ops_launched"]} == projected
    assert p.thirdparty_ranges == () and p.marks == ()


# --- two processes ------------------------------------------------------------------------------

def _capture_pid() -> int:
    """The pid of the process that made the fused n4096 capture (its NVTX ranges' thread)."""
    with gzip.open(FUSED / "nsys.sqlite.gz", "rb") as f:
        data = f.read()
    fd, path = tempfile.mkstemp(suffix=".sqlite")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        with contextlib.closing(sqlite3.connect(path)) as db:
            return db.execute("SELECT (globalTid >> 24) & 16777215 FROM NVTX_EVENTS WHERE eventType = 59 "
                              "LIMIT 1").fetchone()[0]
    finally:
        os.unlink(path)


P1 = _capture_pid()
P2 = 4321 if P1 != 4321 else 4322  # a pid no thread of the capture has
SHIFT_NS = 100_000_000


def _move(g: int | None, pid: int) -> int | None:
    """The same global id in process ``pid``: main thread -> its main thread, others shifted."""
    if g is None:
        return None
    tid = mp.tid_of(g)
    new_tid = pid if tid == mp.pid_of(g) else (tid + 5000 if tid else 0)
    return (g & ~((1 << 48) - 1)) | (pid << 24) | new_tid


def _two_process_export(tmp_path) -> str:
    """The fused n4096 capture plus a copy of its process as pid 4321, 100 ms later, whose main
    thread was renamed 'matrix-1024' and which created the third-party domain with id 2, while the
    first process created a different domain with that same id 2."""
    db_path = tmp_path / "two.sqlite"
    with gzip.open(FUSED / "nsys.sqlite.gz", "rb") as src, open(db_path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    db = sqlite3.connect(db_path)
    db.create_function("move", 2, _move)
    main_gtid = db.execute("SELECT globalTid FROM ThreadNames WHERE (globalTid >> 24) & 16777215 = ? "
                           "AND globalTid & 16777215 = ?", (P1, P1)).fetchone()[0]
    for table, col in (("NVTX_EVENTS", "globalTid"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid"),
                       ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "globalPid"),
                       ("CUPTI_ACTIVITY_KIND_MEMSET", "globalPid")):
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        sel = ", ".join(f"move({c}, {P2})" if c in (col, "endGlobalTid") else
                        f"{c} + {SHIFT_NS}" if c in ("start", "end") else c for c in cols)
        db.execute(f"INSERT INTO {table} ({', '.join(cols)}) SELECT {sel} FROM {table} "
                   f"WHERE ({col} >> 24) & 16777215 = {P1}")
    db.execute(f"INSERT INTO ThreadNames (nameId, priority, globalTid) SELECT nameId, priority, move(globalTid, {P2}) "
               f"FROM ThreadNames WHERE (globalTid >> 24) & 16777215 = {P1}")
    new_id = db.execute("SELECT MAX(id) + 1 FROM StringIds").fetchone()[0]
    db.execute("INSERT INTO StringIds (id, value) VALUES (?, 'matrix-1024')", (new_id,))
    db.execute("INSERT INTO ThreadNames (nameId, priority, globalTid) VALUES (?, 20, ?)", (new_id, _move(main_gtid, P2)))
    db.execute("INSERT INTO PROCESSES (globalPid, pid, name) VALUES (?, ?, 'python3')",
               (_move(main_gtid, P2) - P2, P2))
    # domain id 2: "other.lib" in the first process, the third-party domain in the second
    compute = db.execute("SELECT start, end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
                         "WHERE s.value LIKE '%/compute' AND (globalTid >> 24) & 16777215 = ? ORDER BY start",
                         (P2,)).fetchone()
    nvtx_insert = "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?)"
    db.execute(nvtx_insert, (compute[0] - 1000, None, 75, "other.lib", main_gtid, 2))
    db.execute(nvtx_insert, (compute[0] + 10, compute[0] + 20, 59, "other_lib_call", main_gtid, 2))
    db.execute(nvtx_insert, (compute[0] - 1000, None, 75, "cookbook.thirdparty", _move(main_gtid, P2), 2))
    db.execute(nvtx_insert, (compute[0] + 10, compute[1] - 10, 59, "cupy.mean", _move(main_gtid, P2), 2))
    db.execute(nvtx_insert, (compute[1] + 5, None, 34, "nvtx_multiprocess/n1024/checked", _move(main_gtid, P2), 1))
    db.commit()
    db.close()
    return str(db_path)


def test_two_processes_keep_their_own_threads_ranges_domains_and_gpu_work(tmp_path):
    procs = mp.read_processes(_two_process_export(tmp_path))
    assert [p.pid for p in procs] == [P1, P2]  # ordered by first activity
    one, two = procs
    assert one.label == f"pid {P1} python3" and two.label == f"pid {P2} matrix-1024"
    assert two.main_thread.names == ("python3", "matrix-1024")  # renamed: both names, newest last
    # every thread of the copied process, moved: the main thread to the new pid, the others by 5000
    assert {t.tid for t in two.threads} == {P2 if t.tid == P1 else t.tid + 5000 for t in one.threads}
    # the same suite ranges in both, each in its own process, the second 100 ms later
    assert [r.name for r in one.suite_ranges] == [r.name for r in two.suite_ranges]
    assert [r.start_ns + SHIFT_NS for r in one.suite_ranges] == [r.start_ns for r in two.suite_ranges]
    # domain id 2 means a different domain in each process
    assert [r.name for r in one.other_ranges] == ["other_lib_call"] and one.other_ranges[0].domain == "other.lib"
    assert [r.name for r in two.thirdparty_ranges] == ["cupy.mean"] and one.thirdparty_ranges == ()
    assert [m.name for m in two.marks] == ["nvtx_multiprocess/n1024/checked"]
    # correlation ids repeat across processes: each op goes to its own process and thread, the capture's
    # kernels and copies (nsys' own summaries of it) in each
    kernels = sum(int(r["Instances"]) for r in nsys_stats_rows(FUSED, "cuda_gpu_kern_sum"))
    ops = kernels + sum(int(r["Count"]) for r in nsys_stats_rows(FUSED, "cuda_gpu_mem_time_sum"))
    for p in procs:
        assert len(p.ops_of_kind("kernel")) == kernels and len(p.gpu_ops) == ops
        assert {o.launch_tid for o in p.gpu_ops} == {p.pid}
        assert p.unattributed_gpu_ops == ()
    assert [o.start_ns + SHIFT_NS for o in one.gpu_ops] == [o.start_ns for o in two.gpu_ops]
    # the GPU work launched inside each compute range is that process's own
    s = mp.summary(procs)["processes"]
    compute = [next(r for r in p["suite_ranges"] if r["name"].endswith("/compute")) for p in s]
    launched = {r["Range"]: int(r["Total GPU Ops"]) for r in nsys_stats_rows(FUSED, "nvtx_gpu_proj_sum")}
    assert [c["gpu_ops_launched"] for c in compute] == [launched["cookbook:cupy_sqdiff/fused/compute"]] * 2
    assert s[1]["first_ms"] == pytest.approx(s[0]["first_ms"] + SHIFT_NS / 1e6)


def test_report_page_and_timeline_for_two_processes(tmp_path):
    export = _two_process_export(tmp_path)
    md, png, js = tmp_path / "reports" / "mp.md", tmp_path / "reports" / "figures" / "mp.png", tmp_path / "mp.json"
    argv = ["multiprocess-report", export, "--output", str(md), "--figure", str(png), "--json", str(js)]
    assert main(argv) == 0
    text = md.read_text()
    assert "![NVTX ranges and GPU work of each process on one time axis](figures/mp.png)" in text
    assert f"## pid {P1} python3" in text and f"## pid {P2} matrix-1024" in text
    assert f"| {P2} | python3 → matrix-1024 |" in text
    assert "| cupy.mean | 1 |" in text and "| nvtx_multiprocess/n1024/checked |" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first_png, first_md = png.read_bytes(), text
    assert main(argv) == 0  # deterministic: the same export gives the same bytes
    assert png.read_bytes() == first_png and md.read_text() == first_md
    import json

    record = json.loads(js.read_text())
    assert [p["pid"] for p in record["processes"]] == [P1, P2]


def test_single_process_report_from_a_gzipped_reference_capture(tmp_path):
    md, png = tmp_path / "one.md", tmp_path / "one.png"
    assert main(["multiprocess-report", str(FUSED / "nsys.sqlite.gz"), "--output", str(md),
                 "--figure", str(png)]) == 0
    text = md.read_text()
    assert "1 process with CUDA calls" in text and "](one.png)" in text
    assert "| cupy_sqdiff/fused/compute | 3 |" in text
    assert "Third-party functions: none" in text


def test_an_export_without_activity_is_refused_with_a_reason(tmp_path, capsys):
    db_path = tmp_path / "quiet.sqlite"
    with gzip.open(FUSED / "nsys.sqlite.gz", "rb") as src, open(db_path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    db = sqlite3.connect(db_path)
    for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL",
              "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        db.execute(f"DELETE FROM {t}")
    db.commit()
    db.close()
    rc = main(["multiprocess-report", str(db_path), "--output", str(tmp_path / "x.md"),
               "--figure", str(tmp_path / "x.png")])
    assert rc == 2
    assert "quiet.sqlite: no process made CUDA calls or NVTX annotations" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


@pytest.mark.parametrize("damage", ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL",
                                    "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid = 1",
                                    "UPDATE ThreadNames SET globalTid = 'main'"])
def test_multiprocess_report_on_a_damaged_export_is_a_typed_error(tmp_path, capsys, damage):
    """A NULL or text where nsys writes a global id is the export's error, named, not a TypeError."""
    db = tmp_path / "damaged.sqlite"
    with gzip.open(FUSED / "nsys.sqlite.gz", "rb") as src, open(db, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with sqlite3.connect(db) as con:
        con.execute(damage)
    out = tmp_path / "page.md"
    assert main(["multiprocess-report", str(db), "--output", str(out), "--figure", str(tmp_path / "t.png")]) == 2
    err = capsys.readouterr().err
    assert "damaged.sqlite" in err and "damaged export" in err
    assert not out.exists()
