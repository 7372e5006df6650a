"""Reading an Nsight Compute report in a child process, so that no damage can kill the caller.

NVIDIA's ``ncu_report`` module is native code: a one-bit change in a report makes it abort
(``Check failed: count >= 0``, SIGABRT) and some installs' copies segfault on every report. Run in
the caller's process, either kills the pipeline step with an empty log. Here each report file is
read by one short-lived child (not per metric): the child loads the report, converts what the
caller asked for into plain dataclasses and pickles them to a file; a child killed by a signal
becomes an :class:`AnalysisInputError` naming the report and the signal. The children are forks of
a template process (``python -c``, started at the first read, one per calling process) that has
imported the readers but never loads a report: a child starts in milliseconds, not as a fresh
interpreter, and still shares nothing with the caller.

Which ``ncu_report`` is used is decided once per process, also in a child: the ``ncu-report``
package from PyPI when importable, else the copy under an Nsight Compute install's
``extras/python`` (``NCU_HOME``, ``/opt/nvidia/nsight-compute/*``, ``/usr/local/cuda*/nsight-compute*``).
:func:`reader_module` says which.
"""
from __future__ import annotations

import atexit
import ctypes
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
import threading
import traceback
from typing import Any

from analysis.common.errors import AnalysisInputError
from analysis.common.forks import ask, enter_request, serve
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


def _nvperf_host_libraries(module) -> list[str]:
    """NVIDIA's NVPerf host library that ``module`` (ncu_report) loads as it reads a report: beside
    the module in the pip package, under ``host/<platform>/`` in an Nsight Compute install. None
    where that is not one file: the children then load it themselves, as the module decides."""
    here = os.path.dirname(os.path.abspath(module.__file__))
    install = os.path.dirname(os.path.dirname(here))
    found = (glob.glob(os.path.join(here, "libnvperf_host.so"))
             or glob.glob(os.path.join(install, "host", "*", "libnvperf_host.so")))
    return found if len(found) == 1 else []


def _child_command(task: str, *args: str) -> list[str]:
    code = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
            "from analysis.readers.ncu_child import child_main; sys.exit(child_main(sys.argv[1:]))")
    return [sys.executable, "-c", code, task, *args]


#: the template process: imports the readers, then serves requests (JSON lines on stdin) until stdin closes
_TEMPLATE_CODE = (f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
                  "from analysis.readers.ncu_child import serve_forks; serve_forks()")


def serve_forks() -> None:
    """In the template process: fork one child per request, which runs :func:`child_main` on the
    request's arguments in the request's folder and environment, its stderr to the request's file;
    answer each request on stdout with the child's pid, then its exit status (negative: the signal
    that ended it)."""
    for module in TASKS.values():
        importlib.import_module(module.split(":")[0])
    # NVIDIA's module too, after reader_module's child has imported it without harm; no report is
    # ever loaded here
    module = import_ncu_report()
    # and the host library it loads at a report's first action: loading it (its relocations) was
    # most of each child's time; a child now finds it loaded
    for library in _nvperf_host_libraries(module):
        ctypes.CDLL(library)
    request = serve(sys.stdin.buffer, sys.stdout.buffer)
    # in the child
    status = 1
    try:
        enter_request(request)
        status = child_main(request["argv"])
    except BaseException:  # noqa: BLE001 - told through the exit status and stderr, as a fresh interpreter would
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(status)


#: the variables a process reads as it starts (where Python and the loader look for modules and
#: libraries) and the ncu_report the template imports: a template started with other values is
#: started again; the children get the rest of the caller's environment with each request
_STARTUP_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", _EXTRAS_ENV)


def _startup_values(env: dict[str, str]) -> tuple:
    return tuple(env.get(name) for name in _STARTUP_VARIABLES)


class _Template:
    """This process's template process (:func:`serve_forks`)."""

    def __init__(self, env: dict[str, str]):
        self.startup, self.owner = _startup_values(env), os.getpid()
        self.proc = subprocess.Popen([sys.executable, "-c", _TEMPLATE_CODE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)
        atexit.register(self.close)

    def usable_for(self, env: dict[str, str]) -> bool:
        # a forked caller starts its own: the pipes are its parent's
        return self.owner == os.getpid() and self.startup == _startup_values(env) and self.proc.poll() is None

    def close(self) -> None:
        if self.owner != os.getpid() or self.proc.poll() is not None:
            return
        self.proc.stdin.close()  # the template leaves its loop
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def run(self, argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
        """:func:`child_main` on ``argv`` in a fork with environment ``env``: its exit status (negative:
        killed by that signal) and its stderr. subprocess.TimeoutExpired after ``timeout`` s, the child killed."""
        fd, stderr_file = tempfile.mkstemp(suffix=".stderr", prefix="ncu-read-")
        os.close(fd)
        try:
            request = {"argv": argv, "cwd": os.getcwd(), "env": env, "stderr": stderr_file}
            try:
                status = ask(self.proc.stdin, self.proc.stdout.fileno(), request, timeout,
                             lambda pid: os.kill(pid, signal.SIGKILL))
            except TimeoutError:
                raise subprocess.TimeoutExpired(argv, timeout) from None
            except EOFError:
                raise RuntimeError("the ncu report reader's template process ended") from None
            with open(stderr_file, errors="replace") as f:
                return status, f.read()
        finally:
            os.unlink(stderr_file)


_template: _Template | None = None
#: one request at a time on the template's pipes, whichever thread reads
_template_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # a fork while another thread held the lock would leave it held for good in the child
    global _template_lock
    _template_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _forked_child(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """:meth:`_Template.run` in this process's template for ``env``, started (again) where needed."""
    global _template
    with _template_lock:
        if _template is None or not _template.usable_for(env):
            if _template is not None:
                _template.close()
            _template = _Template(env)
        return _template.run(argv, env, timeout)


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
            returncode, stderr = _forked_child([task, result_file, *args], env, READ_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AnalysisInputError(path, f"reading it took over {READ_TIMEOUT_S} s (the child was stopped): "
                                           "the report is damaged") from None
        except RuntimeError as e:
            raise AnalysisInputError(path, str(e)) from None
        tail = stderr.strip()[-600:]
        if returncode < 0:
            raise AnalysisInputError(path, f"the ncu_report module crashed reading it ({_signal_name(returncode)})"
                                           f": the report is damaged, or the module does not work here"
                                           + (f"; it said: {tail}" if tail else ""))
        with open(result_file, "rb") as f:
            payload = f.read()
        if returncode != 0 or not payload:
            raise AnalysisInputError(path, f"the report reader exited with status {returncode}"
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
