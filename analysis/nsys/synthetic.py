"""A large synthetic export made from a real one, for the benchmark of summarizing a trace of a
million kernel launches (:mod:`analysis.bench_summarize`).

It copies the export and appends compute calls made from the rows of the export's own last
``compute`` range (its kernel rows, the runtime rows that launched them, its synchronize call and
the NVTX range itself), shifted in time and given fresh correlation ids.
"""
from __future__ import annotations

import os
import sqlite3

from analysis.gzfiles import plain_file

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


def build(source: str, out: str, n_kernels: int, per_call: int) -> dict:
    """Copy ``source`` to ``out`` and append ``n_kernels`` kernel launches in compute calls."""
    with plain_file(source) as plain, open(plain, "rb") as f_in, open(out, "wb") as f_out:
        while chunk := f_in.read(1 << 20):
            f_out.write(chunk)
    db = sqlite3.connect(out)
    db.execute("PRAGMA journal_mode=OFF")
    db.execute("PRAGMA synchronous=OFF")
    t = _template(db)
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
