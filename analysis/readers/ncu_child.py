"""Reading an Nsight Compute report in a child process, so that no damage can kill the caller.

NVIDIA's ``ncu_report`` module is native code: a one-bit change in a report makes it abort
(``Check failed: count >= 0``, SIGABRT) and some installs' copies segfault on every report. Run in
the caller's process, either kills the pipeline step with an empty log. Here each report file is
read by one short-lived child (``python -c``, a fresh interpreter; not per metric): the child
loads the report, converts what the caller asked for into plain dataclasses and pickles them to a
file; a child killed by a signal becomes an :class:`AnalysisInputError` naming the report and the
signal.

Which ``ncu_report`` is used is decided once per process, also in a child: the ``ncu-report``
package from PyPI when importable, else the copy under an Nsight Compute install's
``extras/python`` (``NCU_HOME``, ``/opt/nvidia/nsight-compute/*``, ``/usr/local/cuda*/nsight-compute*``).
:func:`reader_module` says which.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import traceback
from typing import Any

from analysis.common.errors import AnalysisInputError
from analysis.common.gzfiles import plain_file

#: first bytes of every .ncu-rep file
NCU_REP_MAGIC = b"NVR\x00"


#: the directory holding the ``analysis`` package, put first on the child's sys.path so that it
#: imports this very package whatever its working directory holds
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: the child's extras/python directory (empty: the pip package)
_EXTRAS_ENV = "ANALYSIS_NCU_REPORT_EXTRAS"
#: seconds one report may take; a damaged report can make the native reader spin
READ_TIMEOUT_S = 300

#: task name -> "module:function" run in the child as function(path, plain, *args)
TASKS = {
    "launches": "analysis.readers.ncu:_read_plain",
    "kernel_profile": "analysis.readers.ncu_source:_read_kernel_profile",
    "kernel_names": "analysis.readers.ncu_source:_kernel_names",
}


#: tasks whose first step in the child is analysis.readers.ncu.load_actions' magic-bytes check
_READS_MAGIC_FIRST = ("launches", "kernel_names")


@dataclasses.dataclass(frozen=True)
class ReaderModule:
    """The ``ncu_report`` module the children import."""

    file: str
    version: str
    #: the Nsight Compute install's extras/python directory; None: the pip package
    extras: str | None

    def __str__(self) -> str:
        where = f"Nsight Compute install's copy in {self.extras}" if self.extras else "pip package ncu-report"
        return f"ncu_report {self.version} ({where})"


def _extras_candidates() -> list[str]:
    roots = [os.environ.get("NCU_HOME", "")] + sorted(glob.glob("/opt/nvidia/nsight-compute/*")) + \
        sorted(glob.glob("/usr/local/cuda*/nsight-compute*"))
    return [os.path.join(r, "extras", "python") for r in roots
            if r and os.path.isfile(os.path.join(r, "extras", "python", "ncu_report.py"))]


def import_ncu_report():
    """In the child: the module the parent chose (``_EXTRAS_ENV``), else the first importable one."""
    extras = os.environ.get(_EXTRAS_ENV)
    if extras:
        sys.path.insert(0, extras)
        return importlib.import_module("ncu_report")
    try:
        return importlib.import_module("ncu_report")
    except ImportError:
        pass
    for candidate in _extras_candidates():
        sys.path.insert(0, candidate)
        return importlib.import_module("ncu_report")
    raise ImportError("ncu_report not found: `pip install ncu-report`, or set NCU_HOME to an Nsight Compute install")


def _probe() -> ReaderModule:
    """In the child: import the module and say which it is."""
    module = import_ncu_report()
    extras = os.path.dirname(os.path.abspath(module.__file__))
    if os.path.basename(extras) == "ncu_report":  # the pip package is a directory named after it
        from importlib import metadata
        return ReaderModule(module.__file__, metadata.version("ncu-report"), None)
    return ReaderModule(module.__file__, os.path.basename(os.path.dirname(os.path.dirname(extras))) or "?", extras)


def _child_command(task: str, *args: str) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
            "from analysis.readers.ncu_child import child_main; sys.exit(child_main(sys.argv[1:]))")
    return [sys.executable, "-c", code, task, *args]


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _run_child(path: str, task: str, args: list[str], env: dict[str, str]) -> Any:
    """Run one child; its pickled ("ok", value) or ("error", AnalysisInputError) comes back in a file."""
    fd, result_file = tempfile.mkstemp(suffix=".pickle", prefix="ncu-read-")
    os.close(fd)
    try:
        try:
            proc = subprocess.run(_child_command(task, result_file, *args), env=env, capture_output=True,
                                  text=True, timeout=READ_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AnalysisInputError(path, f"reading it took over {READ_TIMEOUT_S} s (the child was stopped): "
                                           "the report is damaged") from None
        tail = proc.stderr.strip()[-600:]
        if proc.returncode < 0:
            raise AnalysisInputError(path, f"the ncu_report module crashed reading it ({_signal_name(proc.returncode)})"
                                           f": the report is damaged, or the module does not work here"
                                           + (f"; it said: {tail}" if tail else ""))
        with open(result_file, "rb") as f:
            payload = f.read()
        if proc.returncode != 0 or not payload:
            raise AnalysisInputError(path, f"the report reader exited with status {proc.returncode}"
                                           + (f"; it said: {tail}" if tail else ""))
        status, value = pickle.loads(payload)  # written by our own child just now
    finally:
        os.unlink(result_file)
    if status == "error":
        raise value
    return value


@functools.lru_cache(maxsize=None)
def reader_module() -> ReaderModule:
    """The ``ncu_report`` module the readers use, checked once (in a child: a module that crashes
    on import cannot take this process with it). Raises ImportError when there is none."""
    env = dict(os.environ)
    env.pop(_EXTRAS_ENV, None)
    proc = subprocess.run(_child_command("probe"), env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode < 0:
        raise ImportError(f"importing ncu_report crashed ({_signal_name(proc.returncode)}): "
                          "`pip install ncu-report` gives a working one")
    if proc.returncode != 0:
        raise ImportError(proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "ncu_report not found")
    return pickle.loads(bytes.fromhex(proc.stdout.strip()))


def read_isolated(task: str, path: str, plain: str, *args: str) -> Any:
    """``TASKS[task](path, plain, *args)`` run in a child process; a crash is an AnalysisInputError naming ``path``."""
    try:
        module = reader_module()
    except ImportError as e:
        raise AnalysisInputError(path, str(e)) from None
    if task in _READS_MAGIC_FIRST:
        with open(plain, "rb") as f:
            head = f.read(len(NCU_REP_MAGIC))
        if not head.startswith(NCU_REP_MAGIC):
            # the child's first check (analysis.readers.ncu.load_actions), without starting a child for it
            raise AnalysisInputError(path, "not an Nsight Compute report (.ncu-rep): wrong magic bytes")
    env = dict(os.environ)
    env[_EXTRAS_ENV] = module.extras or ""
    try:
        return _run_child(path, task, [path, plain, *args], env)
    except AnalysisInputError as e:
        if "crashed" in e.problem:
            raise AnalysisInputError(path, f"{e.problem} [reader: {module}]") from None
        raise


def read_report(task: str, path: str | os.PathLike, *args: str) -> Any:
    """:func:`read_isolated` on the report at ``path`` (``.ncu-rep`` or ``.ncu-rep.gz``), unpacked first."""
    path = str(path)
    if not os.path.isfile(path):
        raise AnalysisInputError(path, "no such file")
    with plain_file(path) as plain:
        return read_isolated(task, path, plain, *args)


def child_main(argv: list[str]) -> int:
    task = argv[0]
    if task == "probe":
        try:
            module = _probe()
        except ImportError as e:
            print(e, file=sys.stderr)
            return 1
        print(pickle.dumps(module).hex())
        return 0
    result_file, path, plain, *args = argv[1:]
    module_name, function_name = TASKS[task].split(":")
    try:
        value = getattr(importlib.import_module(module_name), function_name)(path, plain, *args)
        out: tuple[str, Any] = ("ok", value)
    except AnalysisInputError as e:
        out = ("error", e)
    except Exception as e:  # noqa: BLE001 - values the damaged report gave the conversion code
        frame = traceback.extract_tb(e.__traceback__)[-1]
        out = ("error", AnalysisInputError(path, f"damaged report: {type(e).__name__}: {e} "
                                                 f"(at {os.path.basename(frame.filename)}:{frame.lineno})"))
    with open(result_file, "wb") as f:
        pickle.dump(out, f)
    return 0
