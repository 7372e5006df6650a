"""A real single-node SLURM on this machine, for the tests of profiles/slurm.

Debian's `munged`, `slurmctld` and `slurmd` (packages munge and slurm-wlm), on localhost: one node
(this host, declared with 8 CPUs and 32 GB whatever it has: nothing enforces them), one partition,
no accounting. Every file the daemons use (munge key and socket, slurm.conf, state, spool, logs,
pid files) lives in one new temporary folder, on ports of its own, so nothing of a SLURM or munge
already on the machine is read or changed. Only processes started here are stopped: the daemons
by the pid files they wrote, leftover job-step daemons by this cluster's slurm.conf in their
environment.

The node also advertises two GPUs (`gres/gpu`) backed by links to /dev/null: no GPU work can run
on them, but SLURM hands them out like real ones (CUDA_VISIBLE_DEVICES per job step), which is
what the GPU-assignment test checks. On a GPU machine the node can instead be given the real
device files (gpu_files, e.g. /dev/nvidia0 and /dev/nvidia1), CPUs and memory.

Needs root (the daemons run as root and munged as the `munge` user, as a distribution's services
do).

As a command, a cluster that outlives it (the daemons run in the background), for work by hand
on a GPU machine; the folder of the one started last is kept in STATE_FILE:

    python tests/slurm_cluster.py up --gpu-file /dev/nvidia0 --gpu-file /dev/nvidia1 --cpus 32 --memory-mb 200000
    python tests/slurm_cluster.py status
    python tests/slurm_cluster.py down
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "srun")
#: daemon -> the executable name /proc/<pid>/comm shows, to check a pid file before signalling it
COMM = {"munged": "munged", "slurmctld": "slurmctld", "slurmd": "slurmd"}
PARTITION = "debug"
N_FAKE_GPUS = 2
#: the node as configured: enough for a few small jobs at once, on any machine
CPUS = 8
MEMORY_MB = 32000
#: the folder of the cluster `up` started, for `status` and `down`
STATE_FILE = Path("/tmp/cookbook-cluster.current")


class ClusterError(RuntimeError):
    """The daemons were there but the cluster did not come up; the message has their log tails."""


def why_unavailable() -> str | None:
    """None when a test cluster can be started here, else the precise reason it cannot."""
    missing = [d for d in TOOLS if shutil.which(d) is None and not Path("/usr/sbin", d).exists()]
    if missing:
        return (f"SLURM/munge not installed: {', '.join(missing)} not found "
                "(Debian: apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        return "the test SLURM must be started as root (slurmctld/slurmd as root, munged as munge)"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no `munge` user (the munge package creates it)"
    return None


def _exe(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """The process runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _tail(path: Path, n_chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n_chars:]
    except OSError as e:
        return f"({path}: {e.strerror})"


@dataclass
class SlurmCluster:
    root: Path
    node: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    started: list[str] = field(default_factory=list)
    #: the node's GPUs: None for N_FAKE_GPUS links to /dev/null, else these device files
    gpu_files: list[str] | None = None
    cpus: int = CPUS
    memory_mb: int = MEMORY_MB

    # --- paths --------------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    def pid_file(self, daemon: str) -> Path:
        return (self.munge_dir if daemon == "munged" else self.root / "run") / f"{daemon}.pid"

    def log_file(self, daemon: str) -> Path:
        return (self.munge_dir if daemon == "munged" else self.root / "log") / f"{daemon}.log"

    @property
    def env(self) -> dict[str, str]:
        """The environment for SLURM's commands (and Snakemake): this cluster's slurm.conf."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        env["SLURM_CONF"] = str(self.conf)
        return env

    # --- set-up ------------------------------------------------------------------------------
    def _write_munge_files(self) -> None:
        munge = pwd.getpwnam("munge")
        # munged wants its socket's folder searchable by all (clients connect) and writable by
        # itself only; its key readable by itself only
        self.munge_dir.mkdir()
        self.munge_dir.chmod(0o711)
        key_dir = self.munge_dir / "key"
        key_dir.mkdir(mode=0o700)
        key = key_dir / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        for p in (self.munge_dir, key_dir, key):
            os.chown(p, munge.pw_uid, munge.pw_gid)

    def _node_line(self, n_gpus: int) -> str:
        """One node, this host, with `cpus` cores and `memory_mb` of memory whatever the machine
        has (SlurmdParameters=config_overrides): by default CPUS and MEMORY_MB, as the test's jobs
        are small, and a CI machine with two cores would otherwise run them one after the other."""
        gres = f"Gres=gpu:{n_gpus} " if n_gpus else ""
        return (f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={self.memory_mb} "
                f"{gres}State=UNKNOWN")

    def _write_slurm_conf(self) -> None:
        for sub in ("etc", "state", "spool", "log", "run", "dev"):
            (self.root / sub).mkdir()
        files = self.gpu_files
        if files is None:
            files = []
            for i in range(N_FAKE_GPUS):
                dev = self.root / "dev" / f"nvidia{i}"
                dev.symlink_to("/dev/null")
                files.append(str(dev))
        # one line per device: SLURM numbers them in this order (CUDA_VISIBLE_DEVICES=0, 1, ...)
        devices = [f"NodeName={self.node} Name=gpu File={f}" for f in files]
        (self.root / "etc" / "gres.conf").write_text("".join(d + "\n" for d in devices))
        # SLURM 22.05's slurmd always starts a cgroup plugin. Left to choose, it takes cgroup/v2
        # on a host with the unified hierarchy, which wants systemd's delegation (over D-Bus) and
        # a writable /sys/fs/cgroup, and slurmd exits without them (containers). cgroup/v1 only
        # loads; and nothing here uses cgroups (proctrack/linuxproc, task/none)
        (self.root / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        r = self.root
        self.conf.write_text(f"""\
ClusterName=cookbooktest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
CredType=cred/munge
# this cluster's own munged, not the system's
AuthInfo=socket={self.munge_socket}
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={self.pid_file("slurmctld")}
SlurmdPidFile={self.pid_file("slurmd")}
SlurmctldLogFile={self.log_file("slurmctld")}
SlurmdLogFile={self.log_file("slurmd")}
# no cgroups: works inside containers and CI machines
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=512
# the node is what this file says, not what slurmd finds (no drain for "low CPUs/memory"); no
# cgroups enforce it either
SlurmdParameters=config_overrides
# no slurmdbd: `sacct` cannot see jobs, so the executor plugin must ask `squeue`, which shows
# finished jobs for MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
# start batch jobs as soon as they are submitted (the default waits up to 3 s to batch them)
SchedulerParameters=batch_sched_delay=0
KillWait=5
GresTypes=gpu
{self._node_line(len(files))}
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
""")

    def _start(self, daemon: str, cmd: list[str]) -> None:
        r = subprocess.run(cmd, capture_output=True, text=True, env=self.env, timeout=30)
        if r.returncode != 0:
            raise ClusterError(f"{' '.join(cmd)} exited with {r.returncode}: {r.stderr.strip()}\n"
                               f"{daemon} log:\n{_tail(self.log_file(daemon))}")
        self.started.append(daemon)
        self._wait(lambda: self._pid(daemon) is not None, f"{daemon} to write its pid file", daemon)

    def _wait(self, ready, what: str, daemon: str, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.1)
        raise ClusterError(f"timed out after {timeout_s:.0f} s waiting for {what}\n"
                           f"{daemon} log:\n{_tail(self.log_file(daemon))}")

    def node_state(self) -> str:
        r = subprocess.run([_exe("sinfo"), "-h", "-N", "-n", self.node, "-o", "%T"],
                           capture_output=True, text=True, env=self.env, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    def start(self) -> "SlurmCluster":
        self._write_munge_files()
        self._write_slurm_conf()
        m = self.munge_dir
        self._start("munged", ["runuser", "-u", "munge", "--", _exe("munged"),
                               f"--socket={self.munge_socket}", f"--key-file={m}/key/munge.key",
                               f"--pid-file={self.pid_file('munged')}", f"--log-file={self.log_file('munged')}",
                               f"--seed-file={m}/munged.seed"])
        self._wait(self.munge_socket.exists, "munged's socket", "munged")
        # -c: a clean start, no saved state
        self._start("slurmctld", [_exe("slurmctld"), "-c", "-f", str(self.conf)])
        self._start("slurmd", [_exe("slurmd"), "-f", str(self.conf)])
        self._wait(lambda: self.node_state() == "idle", f"node {self.node} to be idle (sinfo)", "slurmd")
        return self

    # --- tear-down ---------------------------------------------------------------------------
    def _pid(self, daemon: str) -> int | None:
        try:
            pid = int(self.pid_file(daemon).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        # a pid file could outlive its process and the number be reused: signal only our daemon
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return None
        return pid if comm == COMM[daemon] else None

    def _active_jobs(self) -> bool:
        r = subprocess.run([_exe("squeue"), "-h", "-t", "PENDING,RUNNING,COMPLETING", "-o", "%i"],
                           capture_output=True, text=True, env=self.env, timeout=30)
        return r.returncode == 0 and bool(r.stdout.strip())

    def _step_daemons(self) -> list[int]:
        """This cluster's slurmstepd processes (one per running job step), known by the slurm.conf
        in their environment, which they inherit from our slurmd."""
        mine = f"SLURM_CONF={self.conf}".encode()
        pids = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                if ((d / "comm").read_text().strip() == "slurmstepd"
                        and mine in (d / "environ").read_bytes().split(b"\0")):
                    pids.append(int(d.name))
            except OSError:
                continue
        return [p for p in pids if _alive(p)]

    def _terminate(self, daemons: list[str], problems: list[str]) -> None:
        """SIGTERM to each daemon, by its pid file; SIGKILL to any still there 15 s later."""
        pids = {}
        for daemon in daemons:
            pid = self._pid(daemon)
            if pid is None:
                problems.append(f"{daemon}: no live process for {self.pid_file(daemon)}")
                continue
            os.kill(pid, signal.SIGTERM)
            pids[daemon] = pid
        deadline = time.monotonic() + 15
        while any(map(_alive, pids.values())) and time.monotonic() < deadline:
            time.sleep(0.1)
        for daemon, pid in pids.items():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
                problems.append(f"{daemon} (pid {pid}) ignored SIGTERM for 15 s; killed")

    def stop(self) -> list[str]:
        """Cancel this cluster's jobs and wait for them to end, then stop the daemons started
        here, each by its pid file: slurmd first (it reports its jobs' ends to slurmctld, and waits
        for it), then slurmctld and munged. Returns what went wrong, if anything."""
        problems: list[str] = []
        if "slurmctld" in self.started:
            subprocess.run([_exe("scancel"), "--partition", PARTITION], capture_output=True,
                           env=self.env, timeout=30)
            # a job's slurmstepd outlives the job until slurmd and slurmctld have its end; stopped
            # before that, they would wait for them forever
            deadline = time.monotonic() + 20
            while (self._active_jobs() or self._step_daemons()) and time.monotonic() < deadline:
                time.sleep(0.2)
        for group in (["slurmd"], ["slurmctld", "munged"]):
            self._terminate([d for d in group if d in self.started], problems)
        for pid in self._step_daemons():  # they block SIGTERM
            os.kill(pid, signal.SIGKILL)
            problems.append(f"slurmstepd (pid {pid}) still there after its job ended; killed")
        self.started.clear()
        return problems

    def logs(self) -> str:
        return "\n".join(f"--- {d} log:\n{_tail(self.log_file(d))}" for d in ("munged", "slurmctld", "slurmd"))


def start_cluster(root_dir: str | Path | None = None, **kwargs) -> SlurmCluster:
    """Start a cluster in a new folder under root_dir (default: the system's temporary folder);
    kwargs go to SlurmCluster (gpu_files, cpus, memory_mb). The folder is readable by all (0755)
    because munged, running as `munge`, must reach its own sub-folder; for the same reason every
    folder above it must be searchable by all. pytest's tmp_path is private to root, hence not
    used here."""
    root = Path(tempfile.mkdtemp(prefix="cookbook-cluster-", dir=root_dir))
    root.chmod(0o755)
    closed = [p for p in root.parents if not os.stat(p).st_mode & 0o001]
    if closed:
        shutil.rmtree(root)
        raise ClusterError(f"munged (user munge) cannot reach {root}: {closed[0]} is not searchable "
                           "by others (chmod o+x, or choose another root_dir)")
    cluster = SlurmCluster(root, **kwargs)
    try:
        return cluster.start()
    except BaseException:
        # the error carries the logs' tails; nothing is left running or on disk
        cluster.stop()
        remove(cluster)
        raise


def remove(cluster: SlurmCluster) -> None:
    """Delete the cluster's folder (after stop()): only the folder start_cluster() created."""
    if cluster.root.name.startswith("cookbook-cluster-") and cluster.root.parent == Path(tempfile.gettempdir()):
        shutil.rmtree(cluster.root)


# --- by hand: python tests/slurm_cluster.py up|status|down ---------------------------------------
def _saved() -> SlurmCluster:
    """The cluster `up` started, rebuilt from its folder (STATE_FILE). It counts as started with
    the daemons that wrote a pid file there: stop() signals each by that file, and reports one
    whose process is gone."""
    try:
        root = Path(STATE_FILE.read_text().strip())
    except FileNotFoundError:
        sys.exit(f"no cluster: {STATE_FILE} is missing (start one with `up`)")
    cluster = SlurmCluster(root)
    cluster.started = [d for d in COMM if cluster.pid_file(d).exists()]
    return cluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="A single-node SLURM that outlives this command.")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster; print the SLURM_CONF line to export")
    up.add_argument("--gpu-file", action="append", dest="gpu_files", metavar="DEVICE",
                    help=f"a GPU's device file, once per GPU (default: {N_FAKE_GPUS} links to /dev/null)")
    up.add_argument("--cpus", type=int, default=CPUS)
    up.add_argument("--memory-mb", type=int, default=MEMORY_MB)
    up.add_argument("--root-dir", help="where the cluster's folder goes (default: the temporary folder)")
    sub.add_parser("status", help="the daemons and sinfo")
    sub.add_parser("down", help="cancel the jobs, stop the daemons, delete the folder")
    args = parser.parse_args(argv)

    if args.command == "up":
        # one at a time: STATE_FILE names a single cluster, and `down` must find the one running
        if STATE_FILE.exists() and _saved()._pid("slurmctld") is not None:
            sys.exit(f"a cluster is up already ({STATE_FILE.read_text().strip()}): run `down` first")
        reason = why_unavailable()
        if reason is not None:
            sys.exit(reason)
        try:
            cluster = start_cluster(args.root_dir, gpu_files=args.gpu_files, cpus=args.cpus,
                                    memory_mb=args.memory_mb)
        except ClusterError as e:
            sys.exit(f"the cluster did not start: {e}")
        STATE_FILE.write_text(f"{cluster.root}\n")
        print(f"export SLURM_CONF={cluster.conf}")
        print(f"# cluster folder: {cluster.root} (logs: log/, munge/); stop it with `{sys.argv[0]} down`")
        return 0

    cluster = _saved()
    if args.command == "status":
        print(f"# {cluster.root}: " + ", ".join(
            f"{d} {'running' if cluster._pid(d) is not None else 'NOT running'}" for d in COMM))
        r = subprocess.run([_exe("sinfo")], env=cluster.env, capture_output=True, text=True, timeout=30)
        print(r.stdout + r.stderr, end="")
        return r.returncode

    problems = cluster.stop()
    STATE_FILE.unlink()
    if problems:
        print("\n".join(f"problem: {p}" for p in problems), file=sys.stderr)
        print(f"stopped; folder kept for its logs: {cluster.root}")
        return 1
    remove(cluster)  # only a folder under the temporary folder; one in a chosen --root-dir stays
    print(f"stopped; {'folder kept' if cluster.root.exists() else 'removed'}: {cluster.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
