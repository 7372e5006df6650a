"""Pieces of a fork server: a process that has imported what its children need forks one child per
request, and answers over a pipe. Used by the ncu reader's template (analysis/readers/ncu_child.py)
and by the tests' fork servers (tests/python_forks.py)."""
from __future__ import annotations

import os
import select
import time


def read_line(fd: int, timeout: float | None) -> bytes:
    """The next line from the pipe ``fd``, read a byte at a time from the descriptor: a buffered reader
    could take the next answer into its buffer, where select() no longer sees it. TimeoutError after
    ``timeout`` s (None: wait), EOFError where the writer ended."""
    deadline = None if timeout is None else time.monotonic() + timeout
    line = b""
    while not line.endswith(b"\n"):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([fd], [], [], left)[0]:
            raise TimeoutError
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError
        line += byte
    return line


def redirect_standard_streams(stdin: str, stdout: str, stderr: str) -> None:
    """In a forked child: descriptors 0, 1 and 2 onto these files (stdout and stderr made or emptied)."""
    for fd, path, flags in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
