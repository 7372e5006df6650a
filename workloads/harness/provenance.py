"""Where a number came from: GPU, driver, CUDA, packages, commit, date.

Every record the suite writes carries this, so that a report can say which
machine and which software produced it. Nothing here needs a GPU: fields that
cannot be read are recorded as None with no exception.
"""
from __future__ import annotations

import datetime as _dt
import importlib.metadata as _md
import os
import platform
import shutil
import subprocess
from typing import Iterable

from workloads import frameworks, settings

#: packages whose versions every record states, beyond the workload's own
BASE_PACKAGES = ("numpy", "nvtx")

def package_version(import_name: str) -> str | None:
    # the distribution names to try (first found wins), from the framework records: read at the first
    # call, as they import every recipe, which tools that only need git_commit or tool_output skip
    for dist in frameworks.distributions().get(import_name, (import_name,)):
        try:
            return _md.version(dist)
        except _md.PackageNotFoundError:
            continue
    return None


def tool_output(cmd: list[str]) -> str | None:
    """A tool's stdout, or None where the tool is missing or fails: provenance records absence."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return out.stdout.strip()


def gpu_info() -> dict:
    """GPU names and driver version from nvidia-smi (None when there is no GPU)."""
    # the UUID tells two machines of one model apart (their PCI bus ids are often equal in VMs)
    q = tool_output(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id,uuid",
              "--format=csv,noheader"])
    if not q:
        return {"gpus": [], "driver_version": None}
    gpus = []
    for line in q.splitlines():
        name, driver, mem, bus, uuid = (x.strip() for x in line.split(","))
        gpus.append({"name": name, "memory_total": mem, "pci_bus_id": bus, "uuid": uuid})
    return {"gpus": gpus, "driver_version": q.splitlines()[0].split(",")[1].strip()}


#: words of a GPU's marketing name that say nothing about the model
_VENDOR_WORDS = {"nvidia", "geforce", "tesla", "quadro"}


def gpu_slug(name: str) -> str:
    """A GPU model's short folder name, from the name nvidia-smi prints: "NVIDIA H100 80GB HBM3" ->
    ``h100``, "NVIDIA H200" -> ``h200``, "NVIDIA A100-SXM4-80GB" -> ``a100``, "NVIDIA GeForce RTX 4090"
    -> ``rtx4090``: the words up to and including the first with a digit, without vendor words."""
    words = [w for w in name.replace("-", " ").replace("_", " ").lower().split() if w not in _VENDOR_WORDS]
    kept = []
    for w in words:
        kept.append("".join(ch for ch in w if ch.isalnum()))
        if any(ch.isdigit() for ch in w):
            break
    slug = "".join(kept)
    if not slug:
        raise ValueError(f"gpu_slug: no model in the GPU name {name!r}")
    return slug


def git_commit() -> str | None:
    """The suite's commit. The GPU host gets a copy without .git, so the caller may pass it in."""
    env = settings.text("COOKBOOK_GIT_COMMIT")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    sha = tool_output(["git", "-C", here, "rev-parse", "HEAD"])
    if sha is None:
        return None
    dirty = tool_output(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"])
    return sha + ("-dirty" if dirty else "")


def cuda_versions() -> dict:
    """CUDA runtime and driver API versions as CuPy sees them (None without CuPy or GPU)."""
    try:
        import cupy

        rt = cupy.cuda.runtime.runtimeGetVersion()
        drv = cupy.cuda.runtime.driverGetVersion()
    except Exception:  # no CuPy, no driver: provenance records the absence
        return {"cuda_runtime": None, "cuda_driver_api": None}

    def fmt(v: int) -> str:
        return f"{v // 1000}.{(v % 1000) // 10}"

    return {"cuda_runtime": fmt(rt), "cuda_driver_api": fmt(drv)}


def cpu_info() -> dict:
    """The host's CPU model and logical core count: host-bound steps' times depend on them."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:  # not Linux: the model stays unknown
        pass
    return {"cpu_model": model or platform.processor() or None, "cpu_count": os.cpu_count()}


def collect(extra_packages: Iterable[str] = ()) -> dict:
    names = list(dict.fromkeys([*BASE_PACKAGES, *extra_packages]))
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "host": platform.node(),
        "python": platform.python_version(),
        "git_commit": git_commit(),
        "packages": {n: package_version(n) for n in names},
        # fresh caches (cold), or a recipe's shared compiled programs (workloads/harness/cold.py)
        "compile_cache": frameworks.compile_cache_settings(os.environ),
        **gpu_info(),
        **cuda_versions(),
        **cpu_info(),
    }
