"""Where the suite may put its work folder: never below a file, the filesystem root, a system
folder, a folder right under the root, or the home folder itself (the work folder holds the cache folder that the
suite deletes from, and the GPU job records)."""
from __future__ import annotations

import os
from pathlib import Path

#: folders of the operating system: a work folder inside any of them is refused
SYSTEM_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run",
                "/sbin", "/sys", "/usr", "/var/lib", "/var/log", "/var/run", "/var/spool", "/var/cache")


def system_folder_problem(path: str | os.PathLike) -> str | None:
    """What is wrong with ``path`` as a work folder (resolved, symlinks included), or None."""
    resolved = Path(os.path.realpath(os.path.expanduser(os.fspath(path))))
    existing = resolved
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"cannot be a folder: {existing} is a file"
    if resolved == Path(resolved.anchor):
        return f"is the filesystem root ({resolved})"
    for tree in SYSTEM_TREES:
        if resolved == Path(tree) or Path(tree) in resolved.parents:
            return f"is inside the system folder {tree} ({resolved})"
    if resolved.parent == Path(resolved.anchor):
        # /home, /tmp, /opt, /srv, /mnt: shared by everything on the host, never one suite's own
        return f"is a folder right under the filesystem root ({resolved}): give a folder below it"
    home = os.path.expanduser("~")
    if home not in ("", "/") and resolved == Path(os.path.realpath(home)):
        return f"is the home folder itself ({resolved}): give a folder below it"
    return None
