"""SQLite files opened read-only, and which tables one holds: what the nsys readers
(analysis.readers.nsys) and a GPU-side tool checking the export it just wrote
(workloads.jax_matmul.exp_allocator) both need. Nothing here reads a table of an export: that is
analysis.readers.nsys' alone."""
from __future__ import annotations

import os
import pathlib
import sqlite3
from typing import Sequence


def read_only_uri(path: str | os.PathLike) -> str:
    """SQLite's read-only URI of ``path``, percent-encoded: a ``#``, ``?`` or ``%`` in a file name
    is part of the name, not the URI's fragment, query or an escape."""
    return pathlib.Path(path).resolve().as_uri() + "?mode=ro"


def open_read_only(path: str | os.PathLike) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at ``path``; the path percent-encoded into the URI,
    so that a ``#``, ``?`` or ``%`` in it names the file rather than ending the path."""
    return sqlite3.connect(read_only_uri(path), uri=True, check_same_thread=False)


def missing_tables(path: str, required: Sequence[str]) -> list[str]:
    """The tables of ``required`` that the SQLite file at ``path`` lacks (all of them when it is
    not a readable database): a quick check of a fresh export, before it is read."""
    try:
        db = open_read_only(path)
    except sqlite3.Error:
        return list(required)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error:
        tables = set()
    finally:
        db.close()
    return [t for t in required if t not in tables]
