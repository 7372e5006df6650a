"""Before `pip install ".[pycuda]"`: is the CUDA toolkit that a PyCUDA build needs here?

    python -m workloads.tools.check_cuda_toolkit

Where PyCUDA has no wheel for this Python, pip builds it from source; the build needs `nvcc` and
the toolkit's headers (`cuda.h`) and stops deep in its compiler output without them. This prints
one line: the toolkit it found (exit 0), or what is missing and where it looked (exit 2).
PyCUDA's build finds the toolkit as this does: `CUDA_ROOT` if set, else the folder above the
`nvcc` on PATH.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence


def cuda_root(environ: dict[str, str]) -> tuple[Path | None, str]:
    """The toolkit folder a PyCUDA build would use, and how it was found."""
    if environ.get("CUDA_ROOT"):
        return Path(environ["CUDA_ROOT"]), "CUDA_ROOT"
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc:
        return Path(nvcc).resolve().parent.parent, f"nvcc on PATH ({nvcc})"
    return None, "no CUDA_ROOT and no nvcc on PATH"


def nvcc_release(nvcc: Path) -> str | None:
    """'13.0' from `nvcc --version`, or None when it does not run."""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"release (\d+\.\d+)", out)
    return m.group(1) if m else None


def check(environ: dict[str, str]) -> tuple[bool, str]:
    """(ready, the one line to print)."""
    root, found_by = cuda_root(environ)
    if root is None:
        return False, (
            "PyCUDA cannot be built here: missing nvcc and cuda.h (no CUDA_ROOT, no nvcc on PATH). Install the "
            "CUDA toolkit (or `module load cuda`) and put its bin/ on PATH or set CUDA_ROOT, or leave PyCUDA out: "
            "`pip install .[cuda13,test]` alone installs everything else and pycuda_kernel is skipped."
        )
    missing = []
    nvcc = root / "bin" / "nvcc"
    release = nvcc_release(nvcc) if nvcc.is_file() else None
    if release is None:
        missing.append(f"nvcc ({nvcc} {'does not run' if nvcc.is_file() else 'not found'})")
    header = root / "include" / "cuda.h"
    if not header.is_file():
        missing.append(f"cuda.h ({header} not found)")
    if missing:
        return False, (
            f"PyCUDA cannot be built here: missing {', '.join(missing)}; toolkit folder from {found_by}. "
            "Set CUDA_ROOT to a full CUDA toolkit (with bin/nvcc and include/cuda.h), or leave PyCUDA out."
        )
    return True, f"CUDA toolkit for a PyCUDA build: nvcc {release} and cuda.h in {root} (from {found_by})"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m workloads.tools.check_cuda_toolkit",
                                description=__doc__.split("\n")[0])
    p.parse_args(argv)
    ready, line = check(dict(os.environ))
    print(line, file=sys.stdout if ready else sys.stderr)
    return 0 if ready else 2


if __name__ == "__main__":
    sys.exit(main())
