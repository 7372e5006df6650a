"""``python -m MODULE ARGS`` and ``python -c CODE ARGS`` for the tests, each run a fresh process
forked from a server that has already imported what the run imports first and costs most: Snakemake
(some 1,300 modules with its plugins; the tests start it about a hundred times), JAX or Numba's CUDA
simulator, whose imports are most of a short run's time. Each run is still a process of its own,
with its own folder, environment, exit status, stdout and stderr (files, read back as
``subprocess.run(..., text=True)`` would decode them). COOKBOOK_TEST_FORKS=0 starts each one plainly
instead.

A :class:`Server` whose imports read the environment (JAX and Numba read their settings as they are
imported) is started in the environment of the first run it serves, and serves only runs whose
variables of the kinds it reads have the same values; Snakemake's serves any."""
from __future__ import annotations

import atexit
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import threading

from analysis.common import forks
from workloads import settings

#: the server: runs its preamble (the imports), then serves requests (forks.serve) on the pipes its
#: first two arguments name. The child runs the request as `python -m`/`python -c` would, in the
#: request's folder and environment (PYTHONPATH too: a process reads it at its start, so the child
#: puts it on sys.path itself). forks.py is loaded by its path, under a name of its own: importing
#: `analysis` here would put this checkout's package in every child, ahead of the copy of the
#: checkout the child may run in.
_SERVER = r"""
import gc, importlib.util, os, runpy, sys, tempfile, types
exec(sys.argv[3])
_spec = importlib.util.spec_from_file_location("_test_forks", sys.argv[4])
forks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(forks)
gc.freeze()  # the objects made so far are never collected: a fork's collections leave their pages shared

with os.fdopen(int(sys.argv[1]), "rb") as _requests, os.fdopen(int(sys.argv[2]), "wb") as _replies:
    request = forks.serve(_requests, _replies)
os.setsid()  # its own process group: a timeout ends it and the processes it started
forks.enter_request(request)
tempfile.tempdir = None  # TMPDIR as the request's environment says
option, target, *args = request["argv"]
sys.path[0] = os.getcwd() if option == "-m" else ""  # as `python -m` and `python -c` put it
sys.path[1:1] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
exec(request["child_setup"])
if option == "-m":
    sys.argv = [target, *args]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *args]
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    exec(compile(target, "<string>", "exec"), main.__dict__)
"""


@dataclasses.dataclass(frozen=True)
class Server:
    """What a server imports before it forks (Python code), what each child runs before the request."""

    preamble: str
    #: the beginnings of the names of the variables the preamble's imports read (a server per set of
    #: their values, started in the environment of its first run); empty: they read none
    reads: tuple[str, ...] = ()
    child_setup: str = ""

    def key(self, env: dict[str, str]) -> tuple:
        return tuple(sorted((k, v) for k, v in env.items() if k.startswith(self.reads))) if self.reads else ()


#: where a process finds modules and native libraries as it starts
_STARTUP = ("PYTHON", "LD_")
#: JAX reads JAX_PLATFORMS and its other settings as it is imported, XLA's flags as it starts a backend
JAX = Server("import jax, jax.numpy  # noqa: E401,F401", reads=("JAX_", "XLA_", "TF_", *_STARTUP))
#: Numba reads NUMBA_ENABLE_CUDASIM (the simulator) and its other settings as it is imported, and
#: locates the CUDA toolkit from CUDA_HOME/CUDA_PATH
NUMBA_CUDA = Server("import numba.cuda  # noqa: F401", reads=("NUMBA_", "CUDA_", *_STARTUP))

_lock = threading.Lock()
#: (server, its key of the environment) -> (process, request pipe, reply fd)
_running: dict[tuple, tuple] = {}


def _start(server: Server, env: dict[str, str]) -> tuple:
    key = (server, server.key(env))
    running = _running.get(key)
    if running is not None and running[0].poll() is None:
        return running
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    if server.reads:
        server_env = env
    else:
        # the server's own PYTHONPATH entries would sit on every child's sys.path; the child adds the request's
        server_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(req_r), str(rep_w), server.preamble, forks.__file__],
                            stdin=subprocess.DEVNULL, env=server_env, pass_fds=(req_r, rep_w))
    os.close(req_r)
    os.close(rep_w)
    running = _running[key] = (proc, os.fdopen(req_w, "wb"), rep_r)
    atexit.register(_stop, running)
    return running


def _stop(running) -> None:
    """End the server (it leaves at the end of its requests) and wait for it, so that its CPU time and
    its children's count as this process' children's."""
    proc, requests, replies = running
    requests.close()
    os.close(replies)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # not yet the leader of its own group
        os.kill(pid, signal.SIGKILL)


def run(server: Server, argv: list[str], cwd, env: dict | None = None,
        timeout: float | None = None) -> subprocess.CompletedProcess:
    """``subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`` for
    ``argv`` = ``[sys.executable, "-m" or "-c", ...]``, from a fork of ``server``."""
    argv = [str(a) for a in argv]
    if argv[0] != sys.executable or argv[1] not in ("-m", "-c"):
        raise ValueError(f"not a `python -m` or `python -c` command: {argv[:3]}")
    env = dict(os.environ if env is None else env)
    if not settings.flag("COOKBOOK_TEST_FORKS"):
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    with _lock, tempfile.TemporaryDirectory(prefix="forked-run-") as folder:
        _, requests, replies = _start(server, env)
        out, err = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        request = {"argv": argv[1:], "cwd": os.path.abspath(cwd), "stdout": out, "stderr": err, "env": env,
                   "child_setup": server.child_setup}
        try:
            rc = forks.ask(requests, replies, request, timeout, _kill_group)
        except EOFError:
            raise RuntimeError("a fork server of the tests ended (tests/python_forks.py)") from None
        except TimeoutError:
            with open(out) as o, open(err) as e:
                raise subprocess.TimeoutExpired(argv, timeout, o.read(), e.read()) from None
        with open(out) as o, open(err) as e:
            return subprocess.CompletedProcess(argv, rc, o.read(), e.read())
