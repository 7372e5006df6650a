"""One measurement on a GPU at a time, per physical GPU, per host (issue 48, item 5).

Each test simulates one of the campaign's gaps with the suite's own wrapper
(``workloads.harness.cold``) around small Python commands: a GPU named by hand, two work folders, a
SIGKILLed wrapper with a program under a launcher (as under nsys or ncu), a child forked before the
turn is given back, and a device check before the turn. There is no GPU here: nvidia-smi is a fake
that lists two GPUs, as the real one does (``--query-gpu=index,uuid,pci.bus_id,name,driver_version``).
The tests wait on files, pipes and locks, never on a sleep's length.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from workloads.harness import gpu_turn
from workloads.tools import gpu_jobs

from conftest import REPO

UUIDS = ("GPU-aaaaaaaa-1111-2222-3333-444444444444", "GPU-bbbbbbbb-5555-6666-7777-888888888888")
GPU_LIST = (f"0, {UUIDS[0]}, 00000000:18:00.0, NVIDIA H200, 570.124.06\n"
            f"1, {UUIDS[1]}, 00000000:2A:00.0, NVIDIA H200, 570.124.06\n")
FAKE_NVIDIA_SMI = f"""#!/bin/sh
case "$*" in
  *--query-gpu=index,uuid,pci.bus_id,name,driver_version*) printf '{GPU_LIST}' ;;
  *) exit 9 ;;
esac
"""

# a command that says it started (its pid in a file) and then holds on until the test opens its FIFO
HOLD = ("import os, sys\n"
        "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
        "open(sys.argv[2]).read()\n")
# a launcher (as nsys or ncu is) whose program says its pid and then runs until it is killed;
# argv[2] == 'session': the program leaves the launcher's process group, as a daemon would
LAUNCHER = textwrap.dedent("""\
    import subprocess, sys
    program = ("import os, sys, time\\n"
               "if sys.argv[3] == 'turn':\\n"
               "    from workloads.harness import gpu_turn; gpu_turn.take_turn('probe')\\n"
               "open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid()))\\n"
               "os.rename(sys.argv[1] + '.tmp', sys.argv[1])\\n"
               "while True: time.sleep(3600)\\n")
    p = subprocess.Popen([sys.executable, "-c", program, sys.argv[1], "x", sys.argv[3]],
                         start_new_session=sys.argv[2] == "session")
    sys.exit(p.wait())
""")


@pytest.fixture
def fake_gpus(tmp_path):
    """The environment of a job on a host whose nvidia-smi lists two GPUs (UUIDS), with this
    test's own lock folder (conftest.py)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items()
           if k != "CUDA_VISIBLE_DEVICES" and not k.startswith("SLURM_")
           and k not in (gpu_turn.LOCK_VARIABLE, gpu_turn.RECORD_VARIABLE, gpu_turn.HANDED_VARIABLE)}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _cold(work_dir: Path, env: dict, code: str, *args: str, extra: tuple[str, ...] = (), tag: str = "run",
          **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(work_dir), "--tag", tag,
                             *extra, "--", sys.executable, "-c", code, *args],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, **popen)


def _wait_for_file(path: Path, proc: subprocess.Popen | None = None, timeout_s: float = 60.0) -> None:
    """Until ``path`` exists (the command wrote it); fails early if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the job exited ({proc.returncode}) before writing {path}: {proc.stderr.read()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _read_until(proc: subprocess.Popen, needle: str) -> str:
    """The job's stderr up to the first line holding ``needle`` (the line blocks until written)."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if needle in line:
            return "".join(seen)
    pytest.fail(f"the job's stderr ended without {needle!r}: {''.join(seen)}")


def _release(fifo: Path) -> None:
    with open(fifo, "w"):
        pass


def _held(lock: Path) -> bool:
    with open(lock) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _take_lock(lock: Path, timeout_s: float = 60.0) -> None:
    """Wait for the lock as the next job would (a blocking flock), within ``timeout_s``."""
    took = threading.Event()
    f = open(lock)

    def take() -> None:
        fcntl.flock(f, fcntl.LOCK_EX)
        took.set()

    threading.Thread(target=take, daemon=True).start()
    assert took.wait(timeout_s), f"{lock} was never let go"
    f.close()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _records(work_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((work_dir / "gpu-jobs").glob("*.json"))]


def _one_after_the_other(first: subprocess.Popen, second: subprocess.Popen, fifo: Path, lock: Path) -> str:
    """``first`` holds its GPU (its command waits on ``fifo``): ``second`` waits for ``lock`` and
    its command does not start until ``first`` is over. Returns the second job's stderr."""
    err = _read_until(second, "waiting for GPU")
    assert _held(lock)
    _release(fifo)
    out = [p.communicate(timeout=120) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], out
    return err + out[1][1]


# --- gap 1: a CUDA_VISIBLE_DEVICES set by hand counted as a scheduler's choice, and nothing was locked


@pytest.mark.parametrize("scheduler", [False, True], ids=["by-hand", "slurm"])
def test_a_gpu_named_in_cuda_visible_devices_is_locked_by_its_uuid_whatever_names_it(tmp_path, fake_gpus, scheduler):
    """GPU 1 named by its index in one job and by a prefix of its UUID in another: one lock (its
    UUID's), so the second job waits. A user's setting and SLURM's allocation are told apart."""
    slurm = {"SLURM_JOB_ID": "42", "SLURM_STEP_GPUS": "1"} if scheduler else {}
    started, fifo, second_ran = tmp_path / "started", tmp_path / "fifo", tmp_path / "second"
    os.mkfifo(fifo)
    first = _cold(tmp_path / "w", dict(fake_gpus, CUDA_VISIBLE_DEVICES="1", **slurm), HOLD, str(started), str(fifo))
    _wait_for_file(started, first)
    lock = gpu_jobs.lock_path(UUIDS[1])
    assert _held(lock) and not gpu_jobs.lock_path(UUIDS[0]).exists()
    second = _cold(tmp_path / "w", dict(fake_gpus, CUDA_VISIBLE_DEVICES="GPU-bbbbbbbb", **slurm),
                   f"open({str(second_ran)!r}, 'w')")
    err = _one_after_the_other(first, second, fifo, lock)
    assert f"waiting for GPU {UUIDS[1]}: another job holds it" in err
    a, b = sorted(_records(tmp_path / "w"), key=lambda r: r["started_unix_ns"])
    assert {a["assigned_by"], b["assigned_by"]} == {"scheduler" if scheduler else "user"}
    assert a["gpu"]["uuid"] == b["gpu"]["uuid"] == UUIDS[1]
    assert a["ended_unix_ns"] <= b["started_unix_ns"] and second_ran.exists()


def test_several_jobs_given_the_same_gpu_by_hand_take_turns_on_it(tmp_path, fake_gpus):
    """The default profile lets gpu=4 jobs through at once: with CUDA_VISIBLE_DEVICES=0 set by hand,
    a step's measurement runs (--turns) take turns on GPU 0's lock, never overlapping."""
    env = dict(fake_gpus, CUDA_VISIBLE_DEVICES="0")
    code = ("import sys\nfrom workloads.harness import gpu_turn\nt = gpu_turn.take_turn('probe')\n"
            "print(t.record['started_unix_ns'])\n")
    procs = [_cold(tmp_path / "w", env, code, extra=("--turns",), stdout=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    records = _records(tmp_path / "w")
    assert {r["assigned_by"] for r in records} == {"user"}
    turns = sorted((t for r in records for t in r["gpu_turns"]), key=lambda t: t["started_unix_ns"])
    assert len(turns) == 3
    for a, b in zip(turns, turns[1:]):
        assert a["ended_unix_ns"] <= b["started_unix_ns"]


def test_only_a_schedulers_own_variables_make_an_allocation():
    assert not gpu_jobs.scheduler_allocated({"CUDA_VISIBLE_DEVICES": "0"})
    assert not gpu_jobs.scheduler_allocated({"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_ID": "7"})  # no GPUs asked
    assert gpu_jobs.scheduler_allocated({"CUDA_VISIBLE_DEVICES": "0", "SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "3"})
    assert gpu_jobs.scheduler_allocated({"SLURM_JOB_ID": "7", "SLURM_STEP_GPUS": "0,1"})


def test_every_gpu_cuda_visible_devices_names_is_locked_by_uuid_where_nvidia_smi_lists_it():
    gpus = gpu_jobs.parse_gpu_list(GPU_LIST)
    assert gpu_jobs.named_gpus("1,GPU-aaaa", gpus) == [UUIDS[1], UUIDS[0]]
    assert gpu_jobs.named_gpus("", gpus) == []  # no GPU visible: nothing to lock
    assert gpu_jobs.named_gpus("0,-1,1", gpus) == [UUIDS[0]]  # CUDA stops at an invalid index
    # without nvidia-smi: the index in PCI bus order, or the UUID as given
    assert gpu_jobs.named_gpus("3,GPU-cccc", []) == ["index-3", "GPU-cccc"]
    with pytest.raises(gpu_jobs.LockFolderError, match="not a GPU index or UUID"):
        gpu_jobs.named_gpus("../x", [])


# --- gap 2: the lock lived under each work folder, so two clones on one host measured at once


def test_two_work_folders_on_one_host_take_turns_on_its_gpu(tmp_path, fake_gpus):
    started, fifo = tmp_path / "started", tmp_path / "fifo"
    os.mkfifo(fifo)
    first = _cold(tmp_path / "clone-a", fake_gpus, HOLD, str(started), str(fifo))
    _wait_for_file(started, first)
    second = _cold(tmp_path / "clone-b", fake_gpus, "pass")
    # one GPU configured: nvidia-smi's GPU 0, by its UUID, in the host's folder
    err = _one_after_the_other(first, second, fifo, gpu_jobs.lock_path(UUIDS[0]))
    assert f"waiting for GPU {UUIDS[0]}" in err
    [a], [b] = _records(tmp_path / "clone-a"), _records(tmp_path / "clone-b")
    assert a["ended_unix_ns"] <= b["started_unix_ns"]
    assert not (tmp_path / "clone-a" / "gpu-locks").exists()


def test_the_host_lock_folder_is_created_sticky_and_world_writable(tmp_path):
    folder = tmp_path / "locks"
    assert gpu_jobs.lock_folder({gpu_jobs.LOCK_DIR_VARIABLE: str(folder)}) == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o1777


@pytest.mark.parametrize("damage, what", [
    ("symlink", "is a symlink"), ("file", "is not a folder"), ("open", "without the sticky bit"),
    ("relative", "must be an absolute path")])
def test_a_lock_folder_that_cannot_be_trusted_is_refused(tmp_path, damage, what):
    folder = tmp_path / "locks"
    if damage == "symlink":
        (tmp_path / "elsewhere").mkdir()
        folder.symlink_to(tmp_path / "elsewhere")
    elif damage == "file":
        folder.write_text("")
    elif damage == "open":
        folder.mkdir()
        folder.chmod(0o777)
    else:
        folder = Path("locks")
    with pytest.raises(gpu_jobs.LockFolderError, match=what):
        gpu_jobs.lock_folder({gpu_jobs.LOCK_DIR_VARIABLE: str(folder)})


def test_a_lock_file_that_is_a_symlink_is_refused_and_the_cli_says_so_in_one_line(tmp_path):
    folder = tmp_path / "locks"
    folder.mkdir(mode=0o700)
    (folder / "index-0.lock").symlink_to(tmp_path / "victim")
    with pytest.raises(gpu_turn.LockFileError, match="a symlink, refused"):
        gpu_turn.open_lock_file(folder / "index-0.lock")
    assert not (tmp_path / "victim").exists()
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(PATH=os.defpath, **{gpu_jobs.LOCK_DIR_VARIABLE: str(folder)})  # no nvidia-smi: GPU index 0
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path / "w"), "--",
                        sys.executable, "-c", "pass"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "a symlink, refused" in r.stderr and "Traceback" not in r.stderr


# --- gap 3: PR_SET_PDEATHSIG covered only the direct child: a SIGKILLed wrapper left the program
# under nsys/ncu running unlocked beside the next job, and wrote no job record


@pytest.mark.parametrize("leaves_group", [False, True], ids=["in-group", "own-session"])
def test_a_sigkilled_wrapper_leaves_the_gpu_locked_until_the_program_under_the_launcher_is_gone(
        tmp_path, fake_gpus, leaves_group):
    program_pid = tmp_path / "program.pid"
    work = tmp_path / "w"
    wrapper = _cold(work, fake_gpus, LAUNCHER, str(program_pid), "session" if leaves_group else "group", "whole",
                    tag="nsys")
    _wait_for_file(program_pid, wrapper)
    program = int(program_pid.read_text())
    lock = gpu_jobs.lock_path(UUIDS[0])
    wrapper.kill()
    wrapper.communicate(timeout=60)
    # the next job's view: the lock goes only once the program is gone and the record is written
    _take_lock(lock)
    assert not _alive(program), "the program under the launcher outlived its SIGKILLed wrapper's lock"
    [record] = _records(work)
    assert record["wrapper_killed"] is True and record["killed_by"] == "SIGKILL"
    assert record["tag"] == "nsys" and record["returncode"] is not None and record["gpu"]["uuid"] == UUIDS[0]
    assert list((work / "cache").iterdir()) == []  # its caches removed too


def test_a_sigkilled_wrapper_of_turn_takers_ends_the_program_holding_the_turn_and_records_it(tmp_path, fake_gpus):
    program_pid = tmp_path / "program.pid"
    work = tmp_path / "w"
    wrapper = _cold(work, fake_gpus, LAUNCHER, str(program_pid), "group", "turn", extra=("--turns",), tag="nsys")
    _wait_for_file(program_pid, wrapper)  # written once the program holds its turn
    program = int(program_pid.read_text())
    lock = gpu_jobs.lock_path(UUIDS[0])
    assert _held(lock)
    wrapper.kill()
    wrapper.communicate(timeout=60)
    _take_lock(lock)
    assert not _alive(program)
    _wait_for_file(work / "gpu-jobs", timeout_s=60)
    deadline = time.monotonic() + 60
    while not _records(work):  # the keeper writes it right after the program's end
        assert time.monotonic() < deadline, "no job record after the wrapper was killed"
        time.sleep(0.02)
    [record] = _records(work)
    assert record["wrapper_killed"] is True and record["assigned_by"] == "turns"
    [turn] = record["gpu_turns"]
    assert turn["end_unknown"] is True and turn["ended_unix_ns"] <= record["ended_unix_ns"]
    assert not list((work / "gpu-turns").glob("turn-*"))


def test_the_wrapper_kills_and_waits_for_what_its_command_left_running(tmp_path, fake_gpus):
    """A command that exits leaving a process behind (a launcher's child): the job ends, and the
    GPU is let go, only once that process is gone too."""
    program_pid = tmp_path / "program.pid"
    leave = ("import subprocess, sys\n"
             "p = subprocess.Popen([sys.executable, '-c', 'import os, sys, time; print(os.getpid(), flush=True); "
             "time.sleep(3600)'], stdout=subprocess.PIPE, text=True)\n"
             "open(sys.argv[1], 'w').write(p.stdout.readline())\n")
    r = _cold(tmp_path / "w", fake_gpus, leave, str(program_pid))
    _, err = r.communicate(timeout=120)
    assert r.returncode == 0, err
    assert not _alive(int(program_pid.read_text()))
    assert not _held(gpu_jobs.lock_path(UUIDS[0]))


def test_a_command_that_cannot_start_is_one_line_and_exit_2_before_any_lock(tmp_path, fake_gpus):
    """A program that does not exist is refused before the GPU is locked or a job recorded."""
    r = subprocess.run([sys.executable, "-m", "workloads.harness.cold", "--work-dir", str(tmp_path / "w"), "--",
                        str(tmp_path / "nonexistent")], cwd=REPO, env=fake_gpus, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no such program" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not _records(tmp_path / "w")


# --- gap 4: a child forked before GpuTurn.release ran on unlocked

_FORKED = textwrap.dedent("""\
    import os, sys
    from workloads.harness import gpu_turn
    if sys.argv[3] == "no-check":
        gpu_turn.live_children = lambda pid: []  # the other guard alone: the lock is closed, not unlocked
    turn = gpu_turn.take_turn("probe")
    if os.fork() == 0:  # a worker forked inside the turn, waiting for the test's word
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 1)
        os.dup2(null, 2)  # the test reads the run's output to its end: not the worker's
        open(sys.argv[2]).read()
        os._exit(0)
    decision = turn.release(1, 100)
    print(decision["released"], decision.get("reason", ""), flush=True)
""")


@pytest.mark.parametrize("guard", ["check", "no-check"])
def test_a_child_forked_before_the_turn_is_given_back_keeps_the_gpu_locked_until_it_exits(tmp_path, guard):
    lock, fifo = tmp_path / "gpu.lock", tmp_path / "fifo"
    os.mkfifo(fifo)
    env = dict(os.environ, **{gpu_turn.LOCK_VARIABLE: str(lock)})
    r = subprocess.run([sys.executable, "-c", _FORKED, str(lock), str(fifo), guard], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    released, _, reason = r.stdout.strip().partition(" ")
    if guard == "check":
        assert released == "False" and "child process(es)" in reason
    else:
        assert released == "True"
    # the run has exited; its forked child still runs, and the GPU stays locked
    assert _held(lock)
    _release(fifo)
    _take_lock(lock)


# --- gap 5: device_problem() created a JAX CUDA context before the turn was taken


def test_the_device_check_before_the_turn_neither_imports_jax_nor_asks_its_backend():
    code = textwrap.dedent("""\
        import sys
        from workloads import frameworks
        from workloads.harness import runner
        from workloads.registry import RECIPES
        asked = []
        frameworks.driver_problem = lambda: None  # a host whose driver lists a GPU
        fw = frameworks.framework("jax")
        object.__setattr__(fw, "cuda_problem", lambda: asked.append("backend") or "JAX finds no CUDA device")
        [jax] = [r for r in RECIPES if r.framework == "jax"]
        before = runner.device_problem(jax, "cuda")
        print(before, "jax" in sys.modules, asked)
        after = runner.framework_device_problem(jax, "cuda")
        print(after.split(";")[0], asked)
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    before, after = r.stdout.strip().splitlines()
    assert before == "None False []"  # nothing of JAX loaded, its backend not asked
    assert after == "no CUDA GPU: JAX finds no CUDA device ['backend']"


def test_a_sigterm_for_the_keeper_ends_the_command_before_the_keeper_lets_go(tmp_path, fake_gpus):
    """The keeper (the command's parent) passes a SIGTERM on to the command's group and still waits
    for it: the lock is not let go with a live command under it."""
    parent = tmp_path / "keeper.pid"
    code = ("import os, sys, time\n"
            "open(sys.argv[1] + '.tmp', 'w').write(str(os.getppid())); os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n"
            "while True: time.sleep(3600)\n")
    wrapper = _cold(tmp_path / "w", fake_gpus, code, str(parent))
    _wait_for_file(parent, wrapper)
    keeper = int(parent.read_text())
    assert keeper != wrapper.pid
    os.kill(keeper, signal.SIGTERM)
    _, err = wrapper.communicate(timeout=60)
    assert wrapper.returncode == 128 + signal.SIGTERM, err
    assert "was killed by SIGTERM" in err
    [record] = _records(tmp_path / "w")
    assert record["returncode"] == -signal.SIGTERM and "wrapper_killed" not in record


def test_the_preflights_counter_probe_holds_the_gpus_lock_around_its_kernel(tmp_path, fake_gpus, monkeypatch):
    """The preflight's one kernel under ncu is a GPU job too: it runs only while it holds the lock of
    the GPU it runs on (CUDA's device 0 in PCI bus order: nvidia-smi's GPU 0)."""
    from workloads.harness import preflight

    monkeypatch.setenv("PATH", fake_gpus["PATH"])
    lock = gpu_jobs.lock_path(UUIDS[0])
    ncu = tmp_path / "ncu"
    ncu.write_text(f"""#!/bin/sh
{sys.executable} -c "
import fcntl, os, sys
f = open('{lock}')
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    sys.exit('==ERROR== the GPU is not locked')
except BlockingIOError:
    print('==PROF== Profiling \\"cookbook_counter_probe\\" - 0: 100% - 1 pass', os.environ['CUDA_DEVICE_ORDER'])
"
""")
    ncu.chmod(0o755)
    assert preflight.counter_access(str(ncu)) == {"readable": True}
    assert not _held(lock)  # and let go after it
