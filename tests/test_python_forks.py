"""The tests' fork servers (tests/python_forks.py): a forked run is what a fresh `python -m`/`python -c`
would be (exit status, output, folder, environment, argv, sys.path[0], __main__), a run past its
time is stopped, and a server whose imports read variables serves only runs with their values."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import python_forks
from workloads import settings

pytestmark = pytest.mark.skipif(not settings.flag("COOKBOOK_TEST_FORKS"), reason="COOKBOOK_TEST_FORKS=0: no fork servers")

#: a server whose preamble reads FORKS_PROBE_ at import, as Numba reads NUMBA_*
PROBE = python_forks.Server("import os\nSEEN = os.environ.get('FORKS_PROBE_VALUE')", reads=("FORKS_PROBE_",))

SHOW = ("import json, os, sys\n"
        "print(json.dumps({'argv': sys.argv, 'cwd': os.getcwd(), 'path0': sys.path[0], 'name': __name__,"
        " 'value': os.environ.get('FORKS_PROBE_VALUE'), 'other': os.environ.get('FORKS_OTHER'),"
        " 'server': os.getppid()}))\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(3)")


def _both(argv, cwd, env):
    forked = python_forks.run(PROBE, argv, cwd, env, timeout=60)
    fresh = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    return forked, fresh


def test_a_forked_c_run_is_what_a_fresh_one_is(tmp_path):
    env = dict(os.environ, FORKS_PROBE_VALUE="a", FORKS_OTHER="x")
    forked, fresh = _both([sys.executable, "-c", SHOW, "one", "two"], tmp_path, env)
    assert forked.returncode == fresh.returncode == 3
    assert forked.stderr == fresh.stderr == "to stderr\n"
    a, b = (json.loads(r.stdout) for r in (forked, fresh))
    assert a.pop("server") != b.pop("server")  # forked from the server, not from this process
    assert a == b == {"argv": ["-c", "one", "two"], "cwd": str(tmp_path), "path0": "", "name": "__main__",
                      "value": "a", "other": "x"}


def test_a_forked_m_run_is_what_a_fresh_one_is(tmp_path):
    (tmp_path / "probe_module.py").write_text(SHOW)
    env = dict(os.environ, FORKS_PROBE_VALUE="a")
    forked, fresh = _both([sys.executable, "-m", "probe_module", "--flag"], tmp_path, env)
    assert forked.returncode == fresh.returncode == 3
    a, b = (json.loads(r.stdout) for r in (forked, fresh))
    a.pop("server"), b.pop("server")
    assert a == b and a["argv"] == [str(tmp_path / "probe_module.py"), "--flag"] and a["path0"] == str(tmp_path)


def test_one_server_per_value_of_the_variables_its_imports_read(tmp_path):
    def server_of(**variables):
        r = python_forks.run(PROBE, [sys.executable, "-c", "import os; print(os.getppid())"], tmp_path,
                             dict(os.environ, **variables), timeout=60)
        return int(r.stdout)

    first = server_of(FORKS_PROBE_VALUE="a", FORKS_OTHER="x")
    assert server_of(FORKS_PROBE_VALUE="a", FORKS_OTHER="y") == first  # a variable its imports never read
    assert server_of(FORKS_PROBE_VALUE="b") != first


def test_a_run_past_its_time_is_stopped_and_the_server_serves_the_next(tmp_path):
    with pytest.raises(subprocess.TimeoutExpired):
        python_forks.run(PROBE, [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"],
                         tmp_path, dict(os.environ), timeout=0.5)
    r = python_forks.run(PROBE, [sys.executable, "-c", "print('next')"], tmp_path, dict(os.environ), timeout=60)
    assert r.returncode == 0 and r.stdout == "next\n"


def test_only_python_commands_are_served(tmp_path):
    with pytest.raises(ValueError, match="not a `python -m` or `python -c` command"):
        python_forks.run(PROBE, ["/bin/true"], tmp_path)
