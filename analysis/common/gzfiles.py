"""Committed reference captures are gzipped (SQLite exports and ncu reports shrink 5-10x);
the readers need plain files, so a ``.gz`` is expanded into a temporary file first."""
from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import tempfile
import zlib
from typing import Iterator

from analysis.common.errors import AnalysisInputError
from analysis.common.leftovers import remove_at_exit, temp_prefix

#: capture files the reference keeps gzipped: the binary captures, and the text records that grow
#: with the samples (a timed record with NVML telemetry per sample is 0.1-0.4 MB; ncu's raw page
#: ~0.2 MB per report); both shrink ~10x
GZIPPED_KINDS = (".sqlite", ".ncu-rep")
GZIPPED_TEXT_NAMES = ("ncu-raw.csv",)


def kept_gzipped(name: str) -> bool:
    """Whether a reference keeps capture file ``name`` gzipped (``.gz`` added)."""
    return (name.endswith(GZIPPED_KINDS) or name in GZIPPED_TEXT_NAMES
            or (name.startswith("timing") and name.endswith(".json")))


def open_capture_text(path: str, newline: str | None = None):
    """Open a text capture for reading: ``path`` itself, or its gzipped reference copy
    (``path + ".gz"``) when only that exists; a path ending in ``.gz`` is read through gzip."""
    if not path.endswith(".gz"):
        path = existing_capture(os.path.dirname(path), os.path.basename(path)) or path
    if path.endswith(".gz"):
        return gzip.open(path, "rt", newline=newline)
    return open(path, newline=newline)


def text_capture_exists(path: str) -> bool:
    return os.path.isfile(path) or (not path.endswith(".gz")
                                    and existing_capture(os.path.dirname(path), os.path.basename(path)) is not None)


def gunzip_to_temp(path: str, suffix: str) -> str:
    """Expand ``path`` into a new temporary file and return its name; the caller deletes it."""

    # the name carries the process id: the next run removes it if this process is killed
    fd, tmp = tempfile.mkstemp(suffix=suffix, prefix=temp_prefix())
    remove_at_exit(tmp)
    try:
        with gzip.open(path, "rb") as src, os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)
    except (OSError, EOFError, zlib.error) as e:
        os.unlink(tmp)
        raise AnalysisInputError(path, f"not a readable gzip file ({e})") from None
    except BaseException:
        os.unlink(tmp)  # stopped while expanding (SystemExit from a signal, KeyboardInterrupt)
        raise
    return tmp


@contextlib.contextmanager
def plain_file(path: str) -> Iterator[str]:
    """Yield a plain-file path for ``path``, expanding it first if it ends in ``.gz``."""
    if not path.endswith(".gz"):
        yield path
        return
    tmp = gunzip_to_temp(path, os.path.splitext(path[:-3])[1])
    try:
        yield tmp
    finally:
        os.unlink(tmp)


def gzip_copy(src: str, dst_gz: str) -> None:
    """Gzip ``src`` to ``dst_gz`` with mtime 0, so the same capture always gives the same bytes."""
    with open(src, "rb") as f_in, gzip.GzipFile(dst_gz, "wb", mtime=0) as f_out:
        shutil.copyfileobj(f_in, f_out)


def existing_capture(run_dir: str, name: str) -> str | None:
    """``run_dir/name`` as a live run writes it, else its gzipped reference copy, else None."""
    plain = os.path.join(run_dir, name)
    if os.path.exists(plain):
        return plain
    if os.path.exists(plain + ".gz"):
        return plain + ".gz"
    return None
