"""``python -m snakemake ARGS`` for the tests, each run a fresh process forked from one that has
imported Snakemake already: a start of Snakemake imports some 1,300 modules (its plugins', pandas,
SQLAlchemy) before it reads the Snakefile, 0.6 s of CPU each time, and the tests start it about a
hundred times. Each run is still a process of its own, with its own folder, environment, exit
status, stdout and stderr (files, read back as ``subprocess.run(..., text=True)`` would decode
them). COOKBOOK_SNAKEMAKE_FORKS=0 starts each one as ``python -m snakemake`` instead."""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading

from analysis.common.forks import read_line
from workloads import settings

#: the server: imports Snakemake, then forks one child per request line (JSON) on the pipe its first
#: argument names and answers each on its second with the child's pid, then its exit status. The child leaves the loop and runs
#: Snakemake's __main__ as `python -m snakemake` would, in the request's folder and environment
#: (PYTHONPATH too: a process reads it at its start, so the child puts it on sys.path itself).
_SERVER = r"""
import json, os, runpy, sys, tempfile
import snakemake.cli  # noqa: F401 - what every start of Snakemake imports
import snakemake.workflow
from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry
from snakemake_interface_logger_plugins.registry import LoggerPluginRegistry
from snakemake_interface_report_plugins.registry import ReportPluginRegistry
from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry
from snakemake_interface_storage_plugins.registry import StoragePluginRegistry

# each registry is a singleton that imports its installed plugins when first made (the SLURM executor's
# imports pandas): made here, every fork has them
for registry in (ExecutorPluginRegistry, LoggerPluginRegistry, ReportPluginRegistry, SchedulerPluginRegistry,
                 StoragePluginRegistry):
    registry()
# what a run imports while it reads the Snakefile and its configuration: the file opener (which
# imports requests), the schema checker and the profile's template engine
import jsonschema, smart_open, yte  # noqa: E401,F401
import gc
gc.freeze()  # the objects made so far are never collected: a fork's collections leave their pages shared

_requests, _replies = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w")


def _serve():
    for line in _requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        _replies.write(f"{pid}\n")
        _replies.flush()
        _, status = os.waitpid(pid, 0)
        _replies.write(f"{os.waitstatus_to_exitcode(status)}\n")
        _replies.flush()
    os._exit(0)


request = _serve()
_requests.close()
_replies.close()
os.setsid()  # its own process group: a timeout ends it and the jobs it started
# as analysis.common.forks.redirect_standard_streams does; not imported here, where it would put this
# checkout's `analysis` package in every child, ahead of the copy of the checkout the child runs in
for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
    opened = os.open(path, flags, 0o600)
    os.dup2(opened, fd)
    os.close(opened)
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
tempfile.tempdir = None  # TMPDIR as the request's environment says
sys.path[0] = os.getcwd()  # as `python -m` puts it
sys.path[1:1] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
sys.argv = ["snakemake", *request["argv"]]
# the one value Snakemake keeps from where it was imported (the run directory it logs)
snakemake.workflow.Workflow._rundir = os.getcwd()
runpy.run_module("snakemake", run_name="__main__", alter_sys=True)
"""

_lock = threading.Lock()
_server: tuple | None = None


def _start():
    global _server
    if _server is not None and _server[0].poll() is None:
        return _server
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    # the server's own PYTHONPATH entries would sit on every child's sys.path; the child adds the request's
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(req_r), str(rep_w)], stdin=subprocess.DEVNULL,
                            env=env, pass_fds=(req_r, rep_w))
    os.close(req_r)
    os.close(rep_w)
    _server = (proc, os.fdopen(req_w, "w"), rep_r)
    atexit.register(_stop, _server)
    return _server


def _stop(server) -> None:
    """End the server (it leaves at the end of its requests) and wait for it, so that its CPU time and
    its children's count as this process' children's."""
    proc, requests, replies = server
    requests.close()
    os.close(replies)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _reply(replies: int, timeout: float | None) -> str:
    """The server's next line (TimeoutError after ``timeout`` s)."""
    try:
        return read_line(replies, timeout).decode()
    except EOFError:
        raise RuntimeError("the Snakemake fork server ended (tests/snakemake_forks.py)") from None


def run(args, cwd, env: dict | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
    text=True, timeout=timeout)``, from a fork of a process that imported Snakemake."""
    argv = [sys.executable, "-m", "snakemake", *map(str, args)]
    if not settings.flag("COOKBOOK_SNAKEMAKE_FORKS"):
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with _lock, tempfile.TemporaryDirectory(prefix="snakemake-run-") as folder:
        _, requests, replies = _start()
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        requests.write(json.dumps({"argv": argv[3:], "cwd": os.path.abspath(cwd), "stdout": out, "stderr": err,
                                   "env": dict(os.environ if env is None else env)}) + "\n")
        requests.flush()
        pid = int(_reply(replies, 60))
        try:
            rc = int(_reply(replies, timeout))
        except TimeoutError:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:  # not yet the leader of its own group
                os.kill(pid, signal.SIGKILL)
            _reply(replies, None)
            with open(out) as o, open(err) as e:
                raise subprocess.TimeoutExpired(argv, timeout, o.read(), e.read()) from None
        with open(out) as o, open(err) as e:
            return subprocess.CompletedProcess(argv, rc, o.read(), e.read())
