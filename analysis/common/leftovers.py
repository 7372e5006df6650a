"""What an interrupted run leaves behind, and removing it.

A command that is stopped (SIGTERM, SIGHUP, Ctrl-C) removes its temporary files itself: the
analysis' command line turns those signals into an exit that runs every ``finally`` and exit hook
(:func:`exit_cleanly_on_signals`). A command that is killed (SIGKILL, a lost node) cannot; its
files carry its process id in their names, so that the next run finds them and removes those of
processes that no longer exist (:func:`clean_up`), and says what it removed:

- expanded captures in the temporary folder: ``cookbook-<pid>-*`` (:func:`temp_prefix`);
- half-written outputs beside their targets: ``.<name>.<pid>-<12 hex>.tmp*`` (analysis/common/outputs.py).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import signal
import sys
import tempfile

#: the start of every temporary file name the analysis makes in the temporary folder
TEMP_PREFIX = "cookbook-"
_TEMP = re.compile(rf"^{TEMP_PREFIX}(\d+)-")
_PARTIAL_OUTPUT = re.compile(r"^\..+\.(\d+)-[0-9a-f]{12}\.tmp")


def temp_prefix() -> str:
    """The prefix of this process' temporary files: names the process, so that another run can tell
    a dead process' files from a running one's."""
    return f"{TEMP_PREFIX}{os.getpid()}-"


_REMOVE_AT_EXIT: set[str] = set()


def _remove_registered() -> None:
    for path in _REMOVE_AT_EXIT:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def remove_at_exit(path: str) -> None:
    """Remove ``path`` when the process exits, if its user has not (an exit by a signal turned into
    SystemExit, or an error before the user took charge of the file)."""
    if not _REMOVE_AT_EXIT:
        atexit.register(_remove_registered)
    _REMOVE_AT_EXIT.add(path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: not ours to judge
    return True


def _dead_owner(pattern: re.Pattern, name: str) -> bool:
    match = pattern.match(name)
    return bool(match) and int(match.group(1)) != os.getpid() and not _alive(int(match.group(1)))


def stale_temp_files(folder: str | None = None) -> list[str]:
    """The analysis' temporary files in ``folder`` (the temporary folder) whose process is gone."""
    folder = folder or tempfile.gettempdir()
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(os.path.join(folder, n) for n in names
                  if _dead_owner(_TEMP, n) and os.path.isfile(os.path.join(folder, n)))


def stale_partial_outputs(*folders: str) -> list[str]:
    """Half-written outputs under ``folders`` whose writer is gone (links are not followed)."""
    found = []
    for folder in folders:
        for root, _dirs, files in os.walk(folder):
            found += [os.path.join(root, n) for n in files if n.startswith(".") and _dead_owner(_PARTIAL_OUTPUT, n)]
    return sorted(found)


def clean_up(*output_folders: str, temp_folder: str | None = None) -> list[str]:
    """Remove what killed runs left (see the module's text) and return it; says so on stderr."""
    removed = []
    for path in stale_temp_files(temp_folder) + stale_partial_outputs(*(f for f in output_folders if os.path.isdir(f))):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue  # another run cleaned it meanwhile
        removed.append(path)
    if removed:
        print(f"cleaned up after an interrupted run: {len(removed)} file(s) of processes that no longer run: "
              + ", ".join(removed[:5]) + (f" and {len(removed) - 5} more" if len(removed) > 5 else ""),
              file=sys.stderr)
    return removed


def exit_cleanly_on_signals() -> None:
    """SIGTERM and SIGHUP end the process as an exception would (SystemExit with 128 + the signal),
    so that ``finally`` blocks and exit hooks remove its temporary and half-written files."""
    def leave(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, leave)
