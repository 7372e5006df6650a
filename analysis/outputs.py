"""Writing outputs so that a reader never sees half a file (a failed rule leaves nothing valid-looking)."""
from __future__ import annotations

import os


def write_text_atomic(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
