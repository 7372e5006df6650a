"""Writing outputs: the one place the suite writes a result file (markdown, JSON, figures, traces,
job records).

- A reader never sees half a file: each output is written to a temporary name beside it and renamed
  over the target, so a failed rule leaves nothing valid-looking.
- The temporary name is unique per writer (process id and a random part): two writers of one
  figure never share one; it is removed on every error path, and starts with a dot so that globs
  such as ``*.json`` never list it.
- Only a regular file (or nothing) at the target is replaced: a symlink, directory or device there
  is refused with :class:`UnsafeOutputError` before anything is written (the rename would replace
  the link or the device node itself); so is an output below a file, and a figure whose name does
  not end in a format matplotlib writes (it takes the format from the suffix).
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
from typing import Any, Iterator

from analysis.common.errors import AnalysisInputError


class UnsafeOutputError(AnalysisInputError):
    """The output path holds something that is not a regular file."""


def check_target(path: str | os.PathLike) -> None:
    """Raise UnsafeOutputError unless ``path`` is absent or a regular file (a symlink is refused
    even when it points at a regular file: the rename would replace the link, not its target)."""
    _check_folder(path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISREG(mode):
        return
    kind = ("a symlink" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
    raise UnsafeOutputError(path, f"the output path is {kind}: refusing to replace it")


def _check_folder(path: str | os.PathLike) -> None:
    """Raise UnsafeOutputError when the folder ``path`` would be written in cannot be one: the
    nearest existing folder above it is a file (or not a folder at all)."""
    folder = os.path.dirname(os.path.abspath(path))
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise UnsafeOutputError(path, f"cannot be written: {folder} is a file, not a folder")


def check_figure_target(path: str | os.PathLike) -> None:
    """check_target for a figure, whose format matplotlib takes from the name's suffix: refused
    unless matplotlib writes that format."""
    from matplotlib.backend_bases import FigureCanvasBase  # noqa: PLC0415 - only the commands that draw

    formats = FigureCanvasBase.get_supported_filetypes()
    suffix = os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
    if suffix not in formats:
        raise UnsafeOutputError(path, f"a figure's name ends in its format, one of {', '.join(sorted(formats))} "
                                      f"(not {suffix or 'nothing'!r})")
    check_target(path)


def check_targets(*paths: str | os.PathLike) -> None:
    """check_target for every output a command is about to write: before any of them is written."""
    for path in paths:
        check_target(path)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, suffix: str = "") -> Iterator[str]:
    """Yield a temporary path beside ``path`` to write; on success it is renamed over ``path``,
    on any error (KeyboardInterrupt included) it is removed. ``suffix`` ends the temporary name
    (matplotlib picks the format from it)."""
    path = os.fspath(path)
    check_target(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}-{uuid.uuid4().hex[:12]}.tmp{suffix}")
    try:
        yield tmp
        check_target(path)  # something may have appeared there meanwhile
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def write_json_atomic(path: str | os.PathLike, record: Any, indent: int = 1) -> None:
    with atomic_output(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(record, f, indent=indent, sort_keys=True)
            f.write("\n")


def save_figure_atomic(fig, path: str | os.PathLike, **savefig_kwargs) -> None:
    """Save a matplotlib figure (format from ``path``'s extension) and close it, whatever happens."""
    try:
        check_figure_target(path)
        with atomic_output(path, suffix=os.path.splitext(os.fspath(path))[1]) as tmp:
            fig.savefig(tmp, **savefig_kwargs)
    finally:
        import matplotlib.pyplot as plt  # noqa: PLC0415 - only the commands that draw import matplotlib

        plt.close(fig)
