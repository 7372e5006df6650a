"""A fork server: a process that has imported what its children need forks one child per request
(a JSON line) and answers over a pipe with the child's pid, then its exit status. Used by the ncu
reader's template (analysis/readers/ncu_child.py) and by the tests' fork servers
(tests/python_forks.py, which loads this file by its path: it imports nothing of the project)."""
from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Callable
from typing import BinaryIO


def serve(requests: BinaryIO, replies: BinaryIO) -> dict:
    """In the server: fork one child per request line read from ``requests``; answer each on
    ``replies`` with the child's pid, then its exit status (negative: the signal that ended it).
    Returns the request in the child; the server exits when ``requests`` ends."""
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        replies.write(b"%d\n" % pid)
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(b"%d\n" % os.waitstatus_to_exitcode(status))
        replies.flush()
    raise SystemExit(0)


def ask(requests: BinaryIO, replies: int, request: dict, timeout: float | None, kill: Callable[[int], None]) -> int:
    """In the caller: send ``request`` to a server (:func:`serve`) and wait for its child's exit status.
    Past ``timeout`` s the child is ended with ``kill(pid)`` and TimeoutError raised; EOFError where
    the server ended."""
    requests.write(json.dumps(request).encode() + b"\n")
    requests.flush()
    pid = int(read_line(replies, 60))
    try:
        return int(read_line(replies, timeout))
    except TimeoutError:
        kill(pid)
        read_line(replies, None)
        raise


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


def enter_request(request: dict) -> None:
    """In a forked child: become the request's process. Descriptors 0, 1 and 2 onto /dev/null, the
    request's ``stdout`` file (/dev/null where it names none) and its ``stderr`` file (both made or
    emptied); its folder (``cwd``) and its whole environment (``env``)."""
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request.get("stdout", os.devnull), os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
