"""How busy the CPU cores were while a run measured (workloads/harness/hostload.py), read from Linux's
/proc/stat, recorded by timed and nsys runs and shown in the step's "rests on" cell."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from workloads.harness import gpu_turn, hostload

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not os.path.exists(hostload.PROC_STAT), reason="needs Linux's /proc/stat")


def test_the_jiffies_of_every_cpu_this_process_may_use_are_read_and_only_grow():
    first = hostload.cpu_jiffies()
    assert set(os.sched_getaffinity(0)) <= set(first)
    assert all(0 <= busy <= total for busy, total in first.values())
    time.sleep(0.05)
    second = hostload.cpu_jiffies()
    assert all(second[c][1] >= first[c][1] and second[c][0] >= first[c][0] for c in first)


def test_a_window_in_which_this_process_computes_has_its_own_cores_busy():
    load = hostload.HostLoad()
    load.start()
    deadline = time.perf_counter() + 0.5
    x = 0
    while time.perf_counter() < deadline:
        x += 1
    out = load.stop()
    own = set(os.sched_getaffinity(0))
    assert out["available"] and out["own_cores"] == gpu_turn.core_text(own)
    assert out["window_s"] >= 0.5
    # one of the own cores spun the whole window
    assert out["own_busy"] >= 0.9 / len(own)
    others = set(hostload.cpu_jiffies()) - own
    assert out["other_cores"] == gpu_turn.core_text(others)
    assert (out["other_busy"] is None) == (not others)


def test_busy_share_is_busy_ticks_over_all_ticks_of_the_cores_asked():
    before = {0: (100, 1000), 1: (50, 1000), 2: (0, 10)}
    after = {0: (150, 1100), 1: (50, 1100), 2: (0, 10)}
    assert hostload.busy_share(before, after, [0, 1]) == pytest.approx(50 / 200)
    assert hostload.busy_share(before, after, [2]) is None  # no tick passed
    assert hostload.busy_share(before, after, [7]) is None  # not a CPU of the readings


def test_an_unreadable_proc_stat_is_said_not_guessed(tmp_path):
    load = hostload.HostLoad(str(tmp_path / "no-stat"))
    load.start()
    out = load.stop()
    assert set(out) == {"available", "reason"} and out["available"] is False
    assert out["reason"].startswith(f"{tmp_path / 'no-stat'}: ") and "No such file" in out["reason"]
    with pytest.raises(RuntimeError, match="before start"):
        hostload.HostLoad().stop()


@pytest.mark.parametrize("mode", ["timed", "run"])
def test_timed_and_profiled_runs_record_the_load_of_their_measured_window(tmp_path, mode):
    from test_jax_matmul import CPU_ENV

    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "workloads.jax_matmul", "--device", "cpu", "--variant", "jit", "--size", "64",
                        "--mode", mode, "--warmup", "1", "--repeats", "3", "--output", str(out)],
                       cwd=REPO, env=CPU_ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    load = json.loads(out.read_text())["host_load"]
    assert load["available"] and load["window_s"] > 0
    assert load["own_cores"] == gpu_turn.core_text(os.sched_getaffinity(0))


def test_the_rests_on_cell_ends_with_the_cpu_load_and_says_when_it_was_not_recorded():
    import dataclasses

    from analysis.report import markdown
    from test_report_model import _model

    step = _model("cupy_sqdiff").ladder[4096][0]
    plain = markdown.rests_on(dataclasses.replace(step, host_load=None))
    load = {"available": True, "window_s": 1.2, "own_cores": "8-15", "own_busy": 0.137,
            "other_cores": "0-7", "other_busy": 0.62}
    cell = markdown.rests_on(dataclasses.replace(step, host_load=load))
    assert cell == plain + "; CPU 14% (8-15) / 62% (0-7)"
    missing = markdown.rests_on(dataclasses.replace(step, host_load={"available": False, "reason": "x"}))
    assert missing == plain + "; CPU load not recorded"
    alone = dict(load, other_cores="", other_busy=None)
    assert markdown.rests_on(dataclasses.replace(step, host_load=alone)).endswith("; CPU 14% (8-15) / — (none)")


def test_a_cold_start_records_no_load_and_reads_nothing_before_its_first_call(tmp_path):
    """A cold/warm start holds the GPU from its launch; its first call is what it measures."""
    from test_jax_matmul import CPU_ENV

    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "workloads.jax_matmul", "--device", "cpu", "--variant", "jit", "--size", "64",
                        "--mode", "first", "--output", str(out)], cwd=REPO, env=CPU_ENV, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads(out.read_text())
    assert "host_load" not in record and record["first_result"]["first_result_unix_ns"] > 0
