"""A large synthetic export made from a real one, for the benchmark of summarizing a trace of a
million kernel launches (:mod:`analysis.cli.bench_summarize`).

It copies the export and appends compute calls made from the rows of the export's own last
``compute`` range (its kernel rows, the runtime rows that launched them, its synchronize call and
the NVTX range itself), shifted in time and given fresh correlation ids.
"""
from __future__ import annotations

import os
import sqlite3

from analysis.common.gzfiles import plain_file

#: host and GPU spacing of the synthetic launches (ns): a launch call's gap to the next, the
#: launch-to-start latency, and the gap between calls
HOST_GAP_NS = 1_000
LAUNCH_LATENCY_NS = 5_000
CALL_GAP_NS = 10_000


def _template(db: sqlite3.Connection) -> dict:
    """The last suite ``compute`` range and the rows of the calls made inside it."""
    rng = db.execute(
        "SELECT e.rowid, e.start, e.end, e.globalTid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE e.eventType = 59 AND COALESCE(e.text, s.value) LIKE '%/compute' ORDER BY e.start DESC LIMIT 1"
    ).fetchone()
    if rng is None:
        raise SystemExit("source export has no compute range to copy")
    rowid, start, end, tid = rng
    cols_k = [r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    cols_r = [r[1] for r in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
    cols_n = [r[1] for r in db.execute("PRAGMA table_info(NVTX_EVENTS)")]
    calls = db.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ? AND start >= ? AND end <= ? "
                       "ORDER BY start", (tid, start, end)).fetchall()
    ci = cols_r.index("correlationId")
    kernels = {r[cols_k.index("correlationId")]: r for r in db.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    launches = [(c, kernels[c[ci]]) for c in calls if c[ci] in kernels]
    sync_name_ids = {i for (i,) in db.execute("SELECT id FROM StringIds WHERE value LIKE '%Synchronize%'")}
    syncs = [c for c in calls if c[cols_r.index("nameId")] in sync_name_ids]
    if not launches:
        raise SystemExit("the source's last compute range launched no kernels")
    return {"range": db.execute("SELECT * FROM NVTX_EVENTS WHERE rowid = ?", (rowid,)).fetchone(),
            "launches": launches, "sync": syncs[-1] if syncs else None,
            "cols_k": cols_k, "cols_r": cols_r, "cols_n": cols_n}


def _copy(source: str, out: str) -> tuple[sqlite3.Connection, dict]:
    """``source`` (gzipped or not) copied to ``out``, opened for bulk writes, and its template."""
    with plain_file(source) as plain, open(plain, "rb") as f_in, open(out, "wb") as f_out:
        while chunk := f_in.read(1 << 20):
            f_out.write(chunk)
    db = sqlite3.connect(out)
    # a scratch file made in one go: no journal, no syncs
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    return db, _template(db)


def build(source: str, out: str, n_kernels: int, per_call: int) -> dict:
    """Copy ``source`` to ``out`` and append ``n_kernels`` kernel launches in compute calls."""
    db, t = _copy(source, out)
    ck, cr, cn = t["cols_k"], t["cols_r"], t["cols_n"]
    k_start, k_end, k_corr = ck.index("start"), ck.index("end"), ck.index("correlationId")
    r_start, r_end, r_corr = cr.index("start"), cr.index("end"), cr.index("correlationId")
    n_start, n_end, n_payload = cn.index("start"), cn.index("end"), cn.index("int64Value")
    corr = db.execute("SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    clock = max(db.execute(f"SELECT MAX(end) FROM {table}").fetchone()[0] or 0
                for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS")) + 1_000_000
    payload = db.execute("SELECT MAX(int64Value) FROM NVTX_EVENTS").fetchone()[0] + 1

    kernel_rows, runtime_rows, nvtx_rows = [], [], []
    made = 0
    while made < n_kernels:
        call_start = host = gpu = clock
        for i in range(min(per_call, n_kernels - made)):
            call, kernel = t["launches"][i % len(t["launches"])]
            c, k = list(call), list(kernel)
            host_dur = call[r_end] - call[r_start]
            c[r_start], c[r_end], c[r_corr] = host, host + host_dur, corr
            k_dur = kernel[k_end] - kernel[k_start]
            gpu = max(gpu, host + host_dur + LAUNCH_LATENCY_NS)
            k[k_start], k[k_end], k[k_corr] = gpu, gpu + k_dur, corr
            runtime_rows.append(tuple(c))
            kernel_rows.append(tuple(k))
            host += host_dur + HOST_GAP_NS
            gpu += k_dur + 1_000
            corr += 1
            made += 1
        end = max(host, gpu) + 2_000
        if t["sync"] is not None:
            s = list(t["sync"])
            s[r_start], s[r_end], s[r_corr] = host, end, corr
            corr += 1
            runtime_rows.append(tuple(s))
        r = list(t["range"])
        r[n_start], r[n_end], r[n_payload] = call_start, end + 1_000, payload
        payload += 1
        nvtx_rows.append(tuple(r))
        clock = end + 1_000 + CALL_GAP_NS
    marks = lambda cols: ", ".join("?" * len(cols))  # noqa: E731
    db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({marks(ck)})", kernel_rows)
    db.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({marks(cr)})", runtime_rows)
    db.executemany(f"INSERT INTO NVTX_EVENTS VALUES ({marks(cn)})", nvtx_rows)
    db.commit()
    counts = {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
              for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
    db.close()
    return {"inserted_kernels": made, "inserted_calls": len(nvtx_rows), "rows": counts,
            "bytes": os.path.getsize(out)}


#: time layout of :func:`build_scale` (ns): one launch call per ``SCALE_STEP_NS``, its kernel
#: ``SCALE_LAUNCH_LATENCY_NS`` after the call starts
SCALE_STEP_NS = 6_000
SCALE_CALL_NS = 1_000
SCALE_LAUNCH_LATENCY_NS = 3_000
SCALE_KERNEL_NS = 2_000


def _numbers(n: int) -> str:
    """A CTE ``c(i)`` of 0 .. n-1, made inside SQLite (no Python object per row)."""
    return f"WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < {int(n) - 1}) "


def build_scale(source: str, out: str, n_kernels: int = 10_000_000, flat_ranges: int = 80_000,
                nested_levels: int = 20_000, long_name_bytes: int = 20_000_000) -> dict:
    """Copy ``source`` to ``out`` and append a capture of ``n_kernels`` kernel launches, each by one
    runtime call, under ``flat_ranges + nested_levels`` NVTX ranges on the launching thread.

    The flat ranges are consecutive ``compute`` ranges, each enclosing an equal share of the
    launches; the last share sits inside a chain of ``nested_levels`` ranges, each enclosing the
    next; one flat range is named by a text of ``long_name_bytes`` characters. The kernels, calls
    and ranges copy the columns of the source's own last compute range and its launches (names,
    thread, process, stream, launch shape), with fresh times and correlation ids; rows are made
    by SQL inside SQLite, so building 20 million rows takes minutes, not hours."""
    db, t = _copy(source, out)
    ck, cr, cn = t["cols_k"], t["cols_r"], t["cols_n"]
    corr0 = db.execute("SELECT MAX(correlationId) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] + 1
    base = max(db.execute(f"SELECT MAX(end) FROM {table}").fetchone()[0] or 0
               for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS")) + 1_000_000
    n_templates = len(t["launches"])
    db.execute(f"CREATE TEMP TABLE tk (j INTEGER PRIMARY KEY, {', '.join(f'k_{c}' for c in ck)})")
    db.execute(f"CREATE TEMP TABLE tr (j INTEGER PRIMARY KEY, {', '.join(f'r_{c}' for c in cr)})")
    for j, (call, kernel) in enumerate(t["launches"]):
        db.execute(f"INSERT INTO tk VALUES (?, {', '.join('?' * len(ck))})", (j, *kernel))
        db.execute(f"INSERT INTO tr VALUES (?, {', '.join('?' * len(cr))})", (j, *call))

    call_start = f"({base} + c.i * {SCALE_STEP_NS})"
    k_start = f"({call_start} + {SCALE_LAUNCH_LATENCY_NS})"
    if nested_levels:  # the chain's calls start after room for the chain's own starts
        call_start = f"({call_start} + (c.i >= {flat_ranges * max(n_kernels // (flat_ranges + 1), 1)}) * " \
                     f"{nested_levels + 1_000})"
        k_start = f"({call_start} + {SCALE_LAUNCH_LATENCY_NS})"
    k_expr = {"start": k_start, "end": f"({k_start} + {SCALE_KERNEL_NS} + (c.i % 97) * 7)",
              "correlationId": f"({corr0} + c.i)"}
    r_expr = {"start": call_start, "end": f"({call_start} + {SCALE_CALL_NS} + (c.i % 13) * 11)",
              "correlationId": f"({corr0} + c.i)"}
    db.execute(_numbers(n_kernels) + f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(ck)}) SELECT "
               + ", ".join(k_expr.get(c, f"tk.k_{c}") for c in ck)
               + f" FROM c JOIN tk ON tk.j = c.i % {n_templates}")
    db.execute(_numbers(n_kernels) + f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME ({', '.join(cr)}) SELECT "
               + ", ".join(r_expr.get(c, f"tr.r_{c}") for c in cr)
               + f" FROM c JOIN tr ON tr.j = c.i % {n_templates}")

    # the ranges: flat range f encloses launches [f*share, (f+1)*share); the chain the rest
    share = max(n_kernels // (flat_ranges + 1), 1)
    rng = t["range"]
    db.execute(f"CREATE TEMP TABLE tn ({', '.join(f'n_{c}' for c in cn)})")
    db.execute(f"INSERT INTO tn VALUES ({', '.join('?' * len(cn))})", rng)
    payload = (db.execute("SELECT MAX(int64Value) FROM NVTX_EVENTS").fetchone()[0] or 0) + 1
    flat_start = f"({base} + c.i * {share * SCALE_STEP_NS} - 500)"
    n_expr = {"start": flat_start, "end": f"({base} + (c.i + 1) * {share * SCALE_STEP_NS} - 600)",
              "int64Value": f"({payload} + c.i)"}
    db.execute(_numbers(flat_ranges) + f"INSERT INTO NVTX_EVENTS ({', '.join(cn)}) SELECT "
               + ", ".join(n_expr.get(c, f"tn.n_{c}") for c in cn) + " FROM c, tn")
    chain_first = base + flat_ranges * share * SCALE_STEP_NS + nested_levels + 1_000  # after the last flat range
    chain_last_end = base + n_kernels * SCALE_STEP_NS + nested_levels + 1_000
    chain_name = db.execute("INSERT INTO StringIds (id, value) SELECT MAX(id) + 1, 'scale/nested' FROM StringIds "
                            "RETURNING id").fetchone()[0] if "textId" in cn else None
    n_expr = {"start": f"({chain_first} - 1000 - {nested_levels} + c.i)",
              "end": f"({chain_last_end} + {nested_levels} - c.i)", "int64Value": f"({payload + flat_ranges} + c.i)",
              "textId": str(chain_name) if chain_name is not None else "tn.n_textId", "text": "NULL"}
    if nested_levels:
        db.execute(_numbers(nested_levels) + f"INSERT INTO NVTX_EVENTS ({', '.join(cn)}) SELECT "
                   + ", ".join(n_expr.get(c, f"tn.n_{c}") for c in cn) + " FROM c, tn")
    if long_name_bytes and flat_ranges:
        # the first flat range gets a name too long to print whole
        long_id = db.execute("INSERT INTO StringIds (id, value) SELECT MAX(id) + 1, ? FROM StringIds RETURNING id",
                             ("scale/" + "x" * max(long_name_bytes - 6, 0),)).fetchone()[0]
        db.execute("UPDATE NVTX_EVENTS SET textId = ?, text = NULL WHERE start = ? AND eventType = ?",
                   (long_id, base - 500, rng[cn.index("eventType")]))
    db.commit()
    counts = {table: db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
              for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
    db.close()
    return {"inserted_kernels": n_kernels, "flat_ranges": flat_ranges, "nested_levels": nested_levels,
            "long_name_bytes": long_name_bytes, "rows": counts, "bytes": os.path.getsize(out)}
