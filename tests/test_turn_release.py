"""A measurement run gives its GPU turn back once its result is on the host and its device memory
is free (workloads.harness.gpu_turn.GpuTurn.release, workloads.harness.runner._check): the float64 check then runs
beside the next run's turn. A run that still holds much of the GPU keeps the turn to its exit."""
from __future__ import annotations

import contextlib
import fcntl
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workloads.harness import gpu_turn, runner, telemetry
from workloads.cudf_backend import HostEventPair
from workloads.contract import Recipe, ResultMismatch, Variant, Work

REPO = Path(__file__).resolve().parents[1]


def _lock_is_free(path: Path) -> bool:
    """Whether another process could take the GPU's lock now (also run inside child processes below)."""
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


# a child that takes its turn, then asks to give it back with the figures it is given, and reports
# whether another process could take the lock while it still runs
_CHILD = """
import json, sys
from workloads.harness import gpu_turn
turn = gpu_turn.take_turn('probe')
held, total = json.loads(sys.argv[1])
decision = turn.release(held, total)
import fcntl
f = open(sys.argv[2], 'a')
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    free = True
except BlockingIOError:
    free = False
print(json.dumps({"decision": decision, "free_while_running": free}))
"""


@pytest.mark.parametrize("held, total, released", [(2 * 2**30, 80 * 2**30, True), (9 * 2**30, 80 * 2**30, False),
                                                   (None, 80 * 2**30, False), (2**30, None, False)])
def test_a_run_gives_its_turn_back_only_when_it_holds_a_tenth_of_the_gpu_or_less(tmp_path, held, total, released):
    lock, record = tmp_path / "gpu0.lock", tmp_path / "turn"
    env = dict(os.environ, COOKBOOK_GPU_TURN_LOCK=str(lock), COOKBOOK_GPU_TURN_RECORD=str(record))
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([held, total]), str(lock)], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["decision"]["released"] is released and out["free_while_running"] is released
    assert out["decision"]["held_bytes"] == held
    assert ("reason" in out["decision"]) is not released
    [written] = list(tmp_path.glob("turn-*.json"))
    turn = json.loads(written.read_text())
    assert turn["started_unix_ns"] < turn["ended_unix_ns"]
    assert turn.get("released_before_exit", False) is released
    assert _lock_is_free(lock)  # and the exit lets go in any case


def test_the_job_record_says_which_turns_ended_before_their_process(tmp_path):
    """workloads.tools.gpu_jobs copies the run's word that it gave the GPU back early into the job's
    record, which the record schema accepts."""
    from analysis.model.gpu_jobs import RECORD_SCHEMA
    from workloads.tools.gpu_jobs import _read_turns

    prefix = tmp_path / "turns"
    (tmp_path / "turns-1.json").write_text(json.dumps({"started_unix_ns": 1, "waited_s": 0.0, "ended_unix_ns": 5,
                                                       "released_before_exit": True, "cpu_cores": "8-15",
                                                       "setup_cpu_cores": "0-15"}))
    (tmp_path / "turns-2.json").write_text(json.dumps({"started_unix_ns": 6, "waited_s": 0.1, "ended_unix_ns": 9}))
    early, late = _read_turns(prefix)
    assert early["released_before_exit"] is True and "released_before_exit" not in late
    # the cores the run held with the GPU (a pipeline that split them: gpu_turn.split_cores)
    assert early["cpu_cores"] == "8-15" and "cpu_cores" not in late and "end_unknown" not in late
    # and those its setup ran on (a step's run: gpu_turn.take_turn's setup_on_every_core)
    assert early["setup_cpu_cores"] == "0-15" and "setup_cpu_cores" not in late
    item = RECORD_SCHEMA["properties"]["gpu_turns"]["items"]
    assert item["properties"]["released_before_exit"] == {"type": "boolean"}
    assert item["properties"]["setup_cpu_cores"] == {"type": "string"}


class _Probe(Variant):
    """A host-only variant that logs the order of the runner's calls."""

    name = "probe"
    summary = "probe"
    log: list[str] = []

    def setup(self) -> None:
        self.x = np.arange(self.size, dtype=np.float64)

    def step(self) -> None:
        pass

    def result(self) -> np.ndarray:
        self.log.append("result")
        return self.x * 2.0

    def reference(self) -> np.ndarray:
        self.log.append("reference")
        return np.arange(self.size, dtype=np.float64) * 2.0

    def reference_at(self, flat_indices: np.ndarray) -> np.ndarray:
        self.log.append("reference_at")
        return flat_indices.astype(np.float64) * 2.0

    def work(self) -> Work:
        return Work(bytes_read=8 * self.size, bytes_written=8 * self.size, flops=self.size)

    def synchronize(self) -> None:
        pass

    def event_pair(self):
        # host-only work: host timestamps, as the pandas path of the cuDF recipe times
        return HostEventPair()

    def keep_reference_inputs(self, flat_indices) -> None:
        self.log.append("keep whole" if flat_indices is None else f"keep {flat_indices.size}")

    def teardown(self) -> None:
        self.log.append("teardown")

    def free_cached_device_memory(self) -> None:
        self.log.append("free")


class _DeviceReference(_Probe):
    reference_uses_device = True


class _GatheredSample(_Probe):
    """Gathers the sampled elements itself (CuPy gathers on the device), as a framework may."""

    check_sample_elements = 100

    def sampled_result(self):
        self.log.append("sampled_result")
        idx = self.sample_indices(self.size)
        return self.x[idx] * 2.0, idx, self.size


_RECIPE = Recipe(name="probe", title="probe", seed_document="000", framework="cupy", requires=(),
                 variants=("probe",), default_size=8, size_meaning="elements")


def _no_phase(*_args, **_kwargs):
    return contextlib.nullcontext()


class _LoggedTurn:
    """A held GPU turn that logs where the runner gives it back (a real one would free the lock)."""

    waited_s, cpu_cores, held = 0.0, None, True

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def measure_on_holder_cores(self) -> None:
        self.log.append("holder cores")

    def release(self, held_bytes, total_bytes) -> dict:
        self.log.append("release")
        self.held = False
        return {"released": True, "held_bytes": held_bytes}


@pytest.mark.parametrize("cls, how, order", [
    (_Probe, "full", ["result", "keep whole", "teardown", "free", "release", "reference"]),
    (_Probe, "sample", ["result", "keep 65536", "teardown", "free", "release", "reference_at"]),
    (_DeviceReference, "full", ["result", "keep whole", "reference", "teardown", "free", "release"]),
    (_DeviceReference, "sample", ["result", "keep 65536", "reference_at", "teardown", "free", "release"]),
    # the sample is gathered by the variant (no whole result copied); its inputs are kept for it
    (_GatheredSample, "sample", ["sampled_result", "keep 100", "teardown", "free", "release", "reference_at"]),
])
def test_the_reference_is_computed_after_the_gpu_is_given_back_unless_it_uses_the_device(monkeypatch, cls, how,
                                                                                          order):
    log: list[str] = []
    monkeypatch.setattr(_Probe, "log", log)
    monkeypatch.setattr(telemetry, "process_gpu_memory", lambda: (1, 100))
    v = cls(size=1 << 18)
    v.setup()
    err, check, turn_end = runner._check(v, _RECIPE, _no_phase, how, _LoggedTurn(log))
    assert log == order and err == 0.0 and turn_end == {"released": True, "held_bytes": 1}
    assert check["method"] == how and check["of"] == 1 << 18
    assert check["elements"] == (1 << 18 if how == "full" else v.check_sample_elements)


def test_without_a_turn_the_run_checks_as_before_and_records_no_turn_end(monkeypatch):
    log: list[str] = []
    monkeypatch.setattr(_Probe, "log", log)
    v = _Probe(size=64)
    v.setup()
    err, check, turn_end = runner._check(v, _RECIPE, _no_phase, "full")
    assert turn_end is None and log == ["result", "keep whole", "teardown", "free", "reference"]


def test_a_wrong_result_still_fails_after_the_turn_is_given_back(monkeypatch):
    monkeypatch.setattr(_Probe, "log", [])

    class Wrong(_Probe):
        def result(self) -> np.ndarray:
            return self.x * 3.0

    v = Wrong(size=64)
    v.setup()
    with pytest.raises(ResultMismatch):
        runner._check(v, _RECIPE, _no_phase, "full")


def test_nvml_memory_of_this_process_is_read_from_the_running_processes():
    """telemetry.process_gpu_memory: this process's entry of NVML's running processes and the total;
    None where NVML does not list the process."""

    class Proc:
        def __init__(self, pid, used):
            self.pid, self.usedGpuMemory = pid, used

    class Nvml:
        class NVMLError(Exception):
            pass

        @staticmethod
        def nvmlDeviceGetComputeRunningProcesses(_h):
            return [Proc(1, 5), Proc(os.getpid(), 512 * 2**20)]

        @staticmethod
        def nvmlDeviceGetMemoryInfo(_h):
            class Info:
                total = 80 * 2**30
            return Info()

    gpu = telemetry.Telemetry(Nvml, handle=object())
    assert telemetry.process_gpu_memory(gpu=gpu) == (512 * 2**20, 80 * 2**30)
    assert telemetry.process_gpu_memory(pid=2, gpu=gpu) == (None, 80 * 2**30)
    assert telemetry.process_gpu_memory(gpu=telemetry.Telemetry(reason="none")) == (None, None)


# --- the run holding the GPU has CPU cores of its own (workloads.harness.gpu_turn.split_cores) ---------

def test_cpu_lists_read_and_write_linux_syntax():
    assert gpu_turn.core_list("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert gpu_turn.core_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert gpu_turn.core_text(gpu_turn.core_list("5")) == "5"


def _fake_affinity(monkeypatch, cores):
    moves: list[tuple[int, set]] = []
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(cores))
    monkeypatch.setattr(os, "sched_setaffinity", lambda tid, c: moves.append((tid, set(c))))
    return moves


def test_the_split_gives_the_upper_half_to_the_gpu_holder_and_moves_everything_else_to_the_lower(monkeypatch):
    moves = _fake_affinity(monkeypatch, range(16))
    # one hardware thread per core here (siblings: test_hardware_thread_siblings_stay_on_one_side_of_the_split)
    monkeypatch.setattr(gpu_turn, "sibling_groups", lambda cores: [{c} for c in sorted(cores)])
    environ: dict[str, str] = {}
    holder, others = gpu_turn.split_cores(environ)
    assert holder == set(range(8, 16)) and others == set(range(8))
    assert environ == {gpu_turn.HOLDER_CORES_VARIABLE: "8-15", gpu_turn.OTHER_CORES_VARIABLE: "0-7"}
    # every thread of this process (Snakemake's, whose jobs inherit it) moved to the others' half
    assert moves and all(c == others for _, c in moves)
    assert {tid for tid, _ in moves} == {int(t) for t in os.listdir("/proc/self/task")}
    # a nested Snakemake (rebuild_reports) keeps the split it inherited and moves nothing
    moves.clear()
    assert gpu_turn.split_cores(environ) == (holder, others) and moves == []


def test_too_few_cores_are_not_split(monkeypatch):
    moves = _fake_affinity(monkeypatch, range(3))
    environ: dict[str, str] = {}
    assert gpu_turn.split_cores(environ) is None and environ == {} and moves == []


def _child_on_split_cores(tmp_path, code: str) -> tuple[dict, int, int]:
    """Run ``code`` in a process of a pipeline that split the cores (the last one the holder's, the
    first the others'), started on the others' core as every job of a split pipeline is; (its JSON
    output, holder's core, others' core)."""
    cores = sorted(os.sched_getaffinity(0))
    holder, other = cores[-1], cores[0]
    env = dict(os.environ, PYTHONPATH=str(REPO), **{
        gpu_turn.LOCK_VARIABLE: str(tmp_path / "gpu0.lock"), gpu_turn.RECORD_VARIABLE: str(tmp_path / "turn"),
        gpu_turn.HOLDER_CORES_VARIABLE: str(holder), gpu_turn.OTHER_CORES_VARIABLE: str(other)})
    r = subprocess.run(["taskset", "-c", str(other), sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, cwd=tmp_path, check=True)
    return json.loads(r.stdout), holder, other


_CORES_CHILD = """
import json, os, sys
from workloads.harness import gpu_turn
before = sorted(os.sched_getaffinity(0))
turn = gpu_turn.take_turn('probe')
during = sorted(os.sched_getaffinity(0))
turn.release(1, 100)
print(json.dumps({"before": before, "during": during, "after": sorted(os.sched_getaffinity(0)),
                  "turn_cores": turn.cpu_cores}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_run_holds_the_holders_cores_from_its_turn_to_its_release(tmp_path):
    """A real process: on the others' core until its turn, on the holder's core in it, back after."""
    seen, holder, other = _child_on_split_cores(tmp_path, _CORES_CHILD)
    assert seen == {"before": [other], "during": [holder], "after": [other], "turn_cores": str(holder)}
    (record,) = tmp_path.glob("turn-*.json")
    assert json.loads(record.read_text())["cpu_cores"] == str(holder)


_SETUP_CORES_CHILD = """
import json, os
from workloads.harness import gpu_turn
turn = gpu_turn.take_turn('probe', setup_on_every_core=True)
setup = sorted(os.sched_getaffinity(0))
turn.measure_on_holder_cores()
measuring = sorted(os.sched_getaffinity(0))
turn.release(1, 100)
print(json.dumps({"setup": setup, "measuring": measuring, "after": sorted(os.sched_getaffinity(0)),
                  "turn": [turn.record.get("setup_cpu_cores"), turn.cpu_cores]}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_step_run_sets_up_on_every_core_and_measures_on_the_holders(tmp_path):
    """The runner's turn: setup on both halves (nothing is measured, no one else holds the GPU), the
    measurement on the holder's core alone, the check on the others'; the record names both."""
    seen, holder, other = _child_on_split_cores(tmp_path, _SETUP_CORES_CHILD)
    both = gpu_turn.core_text({holder, other})
    assert seen == {"setup": sorted({holder, other}), "measuring": [holder], "after": [other],
                    "turn": [both, str(holder)]}
    (record,) = tmp_path.glob("turn-*.json")
    assert json.loads(record.read_text())["setup_cpu_cores"] == both


def test_without_a_split_a_turn_leaves_the_cores_alone(monkeypatch, tmp_path):
    moves = _fake_affinity(monkeypatch, range(16))
    monkeypatch.setattr(gpu_turn, "_held", None)
    environ = {gpu_turn.LOCK_VARIABLE: str(tmp_path / "gpu0.lock")}
    turn = gpu_turn.take_turn("probe", environ)
    try:
        assert turn.cpu_cores is None and "cpu_cores" not in turn.record and moves == []
    finally:
        turn.release(1, 100)
    assert moves == []


def test_a_job_that_holds_the_gpu_throughout_runs_on_the_holders_cores(monkeypatch, tmp_path):
    """A job without turns (the ceilings, most experiments) holds the GPU for the whole job: the
    wrapper moves itself, so its processes inherit the holder's cores; the record says which."""
    from workloads.tools.gpu_jobs import gpu_job

    moves = _fake_affinity(monkeypatch, range(16))
    env = {gpu_turn.HOLDER_CORES_VARIABLE: "8-15", gpu_turn.OTHER_CORES_VARIABLE: "0-7"}
    with gpu_job(tmp_path, 1, env, "coldwarm", ["probe"]) as record:
        assert moves and all(c == set(range(8, 16)) for _, c in moves)
        record["returncode"] = 0
    assert record["assigned_by"] == "default" and record["cpu_cores"] == "8-15"
    moves.clear()
    with gpu_job(tmp_path, 1, dict(env), "timed", ["probe"], turns=True) as record:
        # with turns, the run inside moves itself for its turn alone
        assert moves == []
        record["returncode"] = 0
    assert "cpu_cores" not in record


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two cores")
def test_a_timed_record_names_the_cores_its_run_held_with_the_gpu(tmp_path):
    """A whole run through the runner (JAX's CPU path): its record says which cores it had to itself."""
    from test_jax_matmul import CPU_ENV

    cores = sorted(os.sched_getaffinity(0))
    env = dict(CPU_ENV, **{gpu_turn.LOCK_VARIABLE: str(tmp_path / "gpu0.lock"),
                           gpu_turn.HOLDER_CORES_VARIABLE: str(cores[-1]), gpu_turn.OTHER_CORES_VARIABLE: str(cores[0])})
    out = tmp_path / "t.json"
    r = subprocess.run([sys.executable, "-m", "workloads.jax_matmul", "--device", "cpu", "--variant", "jit", "--size", "64",
                        "--mode", "timed", "--warmup", "1", "--repeats", "3", "--output", str(out)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["gpu_turn_cpu_cores"] == str(cores[-1]) and record["gpu_turn_waited_s"] >= 0


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
def test_cores_this_process_may_not_use_are_one_clear_error(tmp_path):
    """A split inherited from elsewhere (a core the machine lacks): the run and the wrapper say which
    variable, in one line, instead of a traceback."""
    with pytest.raises(gpu_turn.CoreSplitError, match=f"{gpu_turn.HOLDER_CORES_VARIABLE}=4096: not cores"):
        gpu_turn.use_holder_cores({gpu_turn.HOLDER_CORES_VARIABLE: "4096"})
    env = dict(os.environ, **{gpu_turn.HOLDER_CORES_VARIABLE: "4096", gpu_turn.OTHER_CORES_VARIABLE: "0"})
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path), "--gpus", "1", "--",
                        sys.executable, "-c", "pass"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{gpu_turn.HOLDER_CORES_VARIABLE}=4096: not cores this process may run on" in r.stderr


def test_hardware_thread_siblings_stay_on_one_side_of_the_split():
    """16 logical CPUs on 8 cores, Linux numbering siblings n and n+8: the holder gets whole cores
    (4-7 and 12-15), not the other halves of the others' cores."""
    topology = {f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list": f"{c % 8},{c % 8 + 8}"
                for c in range(16)}
    groups = gpu_turn.sibling_groups(range(16), read=topology.__getitem__)
    assert groups == [{c, c + 8} for c in range(8)]
    others, holder = gpu_turn.halves(range(16), groups)
    assert others == {0, 1, 2, 3, 8, 9, 10, 11} and holder == {4, 5, 6, 7, 12, 13, 14, 15}
    # no topology to read: one group per CPU, the plain halves
    def unreadable(path):
        raise OSError(path)

    assert gpu_turn.halves(range(16), gpu_turn.sibling_groups(range(16), read=unreadable)) == (set(range(8)),
                                                                                              set(range(8, 16)))


def test_inputs_kept_before_the_teardown_serve_the_reference_once():
    """Variant.keep_reference_inputs: what host_reference_inputs copies while the device is held is
    what the reference reads after the teardown, taken once (the reference may change it in place);
    read again without a keep, it comes from the device."""

    class DeviceInputs(_Probe):
        reads: list = []
        keep_reference_inputs = Variant.keep_reference_inputs  # the contract's, not the probe's log

        def host_reference_inputs(self, flat_indices):
            self.reads.append(flat_indices)
            return self.x.copy() if self.x is not None else None

        def teardown(self) -> None:
            self.x = None

        def reference(self) -> np.ndarray:
            return self.reference_inputs(None) * 2.0

    v = DeviceInputs(size=64)
    v.setup()
    v.keep_reference_inputs(None)
    v.teardown()
    assert np.array_equal(v.reference(), np.arange(64) * 2.0) and v.reads == [None]
    # the kept copy was taken: a second reference reads the (now freed) device again
    with pytest.raises(TypeError):
        v.reference()
    assert v.reads == [None, None]


@pytest.mark.parametrize("mode, check", [("run", "full"), ("run", "sample"), ("timed", "full")])
def test_host_work_the_variant_names_is_done_before_the_run_waits_for_its_turn(monkeypatch, mode, check):
    """``Variant.prepare_host`` (CuPy pre-faults the host arrays a full check copies into) runs
    before the GPU turn is taken, told how much of the result the run will check; its time is
    its own phase of the record, not the setup's."""
    log: list[str] = []

    class Prepared(_Probe):
        def prepare_host(self, check: str) -> None:
            log.append(f"prepare {check}")

        def setup(self) -> None:
            log.append("setup")
            super().setup()

    monkeypatch.setattr(_Probe, "log", [])
    monkeypatch.setattr(Recipe, "variant_class", lambda self, name: Prepared)
    monkeypatch.setattr(gpu_turn, "take_turn",
                        lambda what, environ=os.environ, **kw: log.append(f"turn {sorted(kw.items())}")
                        or _LoggedTurn(log))
    monkeypatch.setattr(telemetry, "process_gpu_memory", lambda: (1, 100))
    monkeypatch.setattr(runner.provenance, "collect", lambda requires: {})
    # the framework's own device check creates a CUDA context: it waits for the turn too
    monkeypatch.setattr(runner, "framework_device_problem", lambda recipe, device: log.append(f"check {device}"))
    args = runner._parser(_RECIPE).parse_args(["--variant", "probe", "--size", "64", "--mode", mode,
                                               "--check", check, "--warmup", "1", "--repeats", "10",
                                               "--budget-s", "0.01", "--energy-burst-s", "0"])
    record = runner.run(_RECIPE, args)
    assert log[:5] == [f"prepare {check}", "turn [('setup_on_every_core', True)]", "check cuda", "setup",
                       "holder cores"]
    assert record["host_wall_s"]["prepare_host"] >= 0 and record["check"]["method"] == check
    # the runner passed its turn on: given back after the calls, and the record says so
    assert "release" in log and record["gpu_turn_end"] == {"released": True, "held_bytes": 1}


# a child launched with a handed turn: whether the GPU's lock is held before it adopts the turn,
# while it holds it and after it gives it back, the turn it adopted and whether the variable is gone
_HANDED_CHILD = "import fcntl\nfrom pathlib import Path\n" + inspect.getsource(_lock_is_free) + """
import json, os, sys
from workloads.harness import gpu_turn

before = not _lock_is_free(sys.argv[1])
turn = gpu_turn.take_turn('probe', setup_on_every_core=True)
during = not _lock_is_free(sys.argv[1])
decision = turn.release(1, 100) if sys.argv[3] == 'release' else None
after = not _lock_is_free(sys.argv[1])
json.dump({"before": before, "during": during, "after": after, "turn": turn.record, "decision": decision,
           "variable_left": gpu_turn.HANDED_VARIABLE in os.environ}, open(sys.argv[2], 'w'))
"""


def _run_handed_child(tmp_path, how: str) -> tuple[dict, dict, Path]:
    from workloads.harness.cold import run_command

    lock, out = tmp_path / "gpu0.lock", tmp_path / "child.json"
    environ = {gpu_turn.LOCK_VARIABLE: str(lock), gpu_turn.RECORD_VARIABLE: str(tmp_path / "turn")}
    env = dict(os.environ, PYTHONPATH=str(REPO), **environ)
    with gpu_turn.turn_for_child("probe", environ) as handed:
        # taken here, before the child exists
        assert not _lock_is_free(lock)
        started = int(handed.env[gpu_turn.HANDED_VARIABLE].split()[2])
        job: dict = {}
        rc = run_command([sys.executable, "-c", _HANDED_CHILD, str(lock), str(out), how], env, job, "probe", handed)
    assert rc == 0
    [record_path] = tmp_path.glob("turn-*.json")
    return json.loads(out.read_text()), {"started": started, **json.loads(record_path.read_text())}, lock


def test_a_turn_taken_for_a_child_is_its_own_from_before_its_launch_until_it_gives_it_back(tmp_path):
    """A cold/warm start is timed from its launch: its parent takes the GPU's turn first and hands it
    over (gpu_turn.turn_for_child); the child holds it from its first instruction (the parent's copy
    is closed at the launch), and once it gives it back nobody holds the GPU."""
    child, record, lock = _run_handed_child(tmp_path, "release")
    assert child["before"] and child["during"] and not child["after"]
    assert child["decision"]["released"] is True and child["variable_left"] is False
    turn = child["turn"]
    assert turn["handed_by_parent"] is True and turn["started_unix_ns"] == record["started"]
    # the whole start-up is measured: no spreading of its setup over every core
    assert "setup_cpu_cores" not in turn
    assert record["started_unix_ns"] == record["started"] and record["released_before_exit"] is True
    assert record["ended_unix_ns"] > record["started_unix_ns"]
    assert _lock_is_free(lock)


def test_a_child_that_keeps_its_handed_turn_holds_it_to_its_exit_and_no_longer(tmp_path):
    child, record, lock = _run_handed_child(tmp_path, "keep")
    assert child["before"] and child["during"] and child["after"]
    assert "released_before_exit" not in record and record["ended_unix_ns"] > record["started"]
    assert _lock_is_free(lock)


def test_a_handed_turn_the_process_did_not_get_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_turn, "_held", None)
    with pytest.raises(gpu_turn.WorkloadError, match=f"{gpu_turn.HANDED_VARIABLE}='x': not a GPU turn handed"):
        gpu_turn.adopt_handed_turn({gpu_turn.HANDED_VARIABLE: "x"})
    # an open file that is not the GPU's lock (an environment copied into another process)
    lock, other = tmp_path / "gpu0.lock", tmp_path / "other"
    lock.touch()
    with open(other, "a") as f:
        with pytest.raises(gpu_turn.WorkloadError, match=f"file descriptor {f.fileno()} is not {lock}"):
            gpu_turn.adopt_handed_turn({gpu_turn.HANDED_VARIABLE: f"{f.fileno()} 1 2",
                                        gpu_turn.LOCK_VARIABLE: str(lock)})
    assert gpu_turn._held is None
    r = subprocess.run([sys.executable, "-m", "workloads.cupy_sqdiff", "--device", "cpu", "--size", "8"], cwd=REPO,
                       env=dict(os.environ, **{gpu_turn.HANDED_VARIABLE: "999 1 2"}), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "not a GPU turn handed to this process" in r.stderr and "Traceback" not in r.stderr


def test_without_a_lock_a_child_gets_no_turn():
    with gpu_turn.turn_for_child("probe", {}) as handed:
        assert handed.env == {} and handed.fds == ()
        handed.let_go()
