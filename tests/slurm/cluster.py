"""A one-node Slurm cluster on this machine, for the Slurm tests (tests/slurm) and for trying
parbench under Slurm by hand: `start` installs munge, slurmctld and slurmd when missing
(Debian's packages; root), writes a minimal slurm.conf naming this host as its one node with
its real cores and memory, starts the three daemons and waits until the node is idle; `stop`
stops them, whatever ran in between; `status` says whether one is up. Everything it writes is
under one folder (PARBENCH_SLURM_DIR, /tmp/parbench-slurm by default); clients find the
cluster through SLURM_CONF=<that folder>/slurm.conf. Standard library only: CI runs it before
any virtual environment exists.

    python3 tests/slurm/cluster.py start   # then: export SLURM_CONF=/tmp/parbench-slurm/slurm.conf
    python3 tests/slurm/cluster.py stop
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["CANNOT_START", "Cluster", "main"]

CANNOT_START = 3  # the exit status of `start` where a cluster cannot run here (not a failure)
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order
KILL_WAIT_S = 5  # SIGTERM, then SIGKILL this long after, on a time limit or scancel
_WAIT_IDLE_S = 60
_FOLDER = "PARBENCH_SLURM_DIR"  # where it keeps everything, if not /tmp/parbench-slurm


class CannotStart(Exception):
    """This machine cannot run the cluster (not root, no packages): a reason, not a failure."""


class Cluster:
    """The one-node cluster whose files are all under `folder`."""

    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder or os.environ.get(_FOLDER, "/tmp/parbench-slurm"))
        self.conf = self.folder / "slurm.conf"
        self.munge_socket = self.folder / "munge" / "munge.socket"
        self.not_started = self.folder / "not-started"  # why `start` could not, for the tests

    def environment(self) -> dict[str, str]:
        """The variables a client (srun, sbatch, sinfo) needs to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _pid_file(self, daemon: str) -> Path:
        return self.folder / f"{daemon}.pid"

    def node_state(self) -> str | None:
        """The node's state as sinfo reports it (idle, mixed, allocated, down...), or None
        where no cluster of this folder answers."""
        if not self.conf.exists() or shutil.which("sinfo") is None:
            return None
        if not self._pids("slurmctld"):  # sinfo would retry a stopped controller for 9 s
            return None
        try:
            done = subprocess.run(["sinfo", "--noheader", "--format", "%T"], text=True,
                                  capture_output=True, timeout=30,
                                  env={**os.environ, **self.environment()})
        except subprocess.TimeoutExpired:
            return None
        if done.returncode != 0 or not done.stdout.strip():
            return None
        return done.stdout.split()[0].rstrip("*")

    def start(self) -> None:
        """Install what is missing, write the configuration, start the daemons, and wait
        until the node is idle (a cluster already up is left as it is; one that fails to come
        up is stopped again)."""
        if self.node_state() in ("idle", "mixed", "allocated"):
            return
        self.stop()
        if os.geteuid() != 0:
            raise CannotStart("the daemons need root")
        _install()
        try:
            self._start_daemons()
        except BaseException:
            self.stop()
            raise

    def _start_daemons(self) -> None:
        for sub in ("state", "spool", "log", "munge"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.not_started.unlink(missing_ok=True)
        (self.folder / "munge").chmod(0o755)  # clients must reach the socket
        self.conf.write_text(self.configuration())
        log = self.folder / "log"
        key = self.folder / "munge" / "munge.key"  # the cluster's own: one node shares it
        if not key.exists():
            key.touch(mode=0o600)
            key.write_bytes(os.urandom(1024))
        _run(["munged", "--force", f"--socket={self.munge_socket}", f"--key-file={key}",
              f"--pid-file={self._pid_file('munged')}", f"--log-file={log / 'munged.log'}",
              f"--seed-file={self.folder / 'munge' / 'seed'}"])
        _run(["slurmctld", "-f", str(self.conf), "-c", "-i"])
        _run(["slurmd", "-f", str(self.conf)])
        deadline = time.monotonic() + _WAIT_IDLE_S
        while (state := self.node_state()) != "idle":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the node is {state or 'not answering'} after "
                                   f"{_WAIT_IDLE_S} s: see {log}")
            time.sleep(0.5)

    def configuration(self) -> str:
        """slurm.conf: this host as the one node (its cores and memory as slurmd counts them),
        one partition, no accounting, the daemons as root, everything under the folder."""
        node = _node_line()
        host = node.split()[0].split("=", 1)[1]
        folder = self.folder
        return "\n".join([
            "ClusterName=parbench",
            f"SlurmctldHost={host}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={self._pid_file('slurmctld')}",
            f"SlurmdPidFile={self._pid_file('slurmd')}",
            f"SlurmctldLogFile={folder / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'log' / 'slurmd.log'}",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SchedulerType=sched/backfill", "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            f"KillWait={KILL_WAIT_S}", "ReturnToService=2", "MinJobAge=600",
            f"{node} NodeAddr=127.0.0.1 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            ""])

    def stop(self) -> None:
        """Cancel every job and wait for it to end (Slurm kills its processes), then stop
        this folder's daemons and any job step's slurmstepd left (SIGTERM, then SIGKILL after
        10 s): nothing of the cluster is left running, whatever ran before."""
        if self.node_state() is not None:
            self.cancel_jobs()
        for daemon in (*DAEMONS, "slurmstepd"):
            for pid in self._pids(daemon):
                _stop(pid)

    def cancel_jobs(self) -> None:
        """Cancel every queued or running job, and wait (bounded) until the queue is empty:
        Slurm has then ended their processes."""
        env = {**os.environ, **self.environment()}

        def queued() -> list[str]:
            return subprocess.run(["squeue", "--noheader", "--format", "%i"], env=env,
                                  capture_output=True, text=True, timeout=30).stdout.split()

        if jobs := queued():
            subprocess.run(["scancel", *jobs], env=env, timeout=30)
            deadline = time.monotonic() + KILL_WAIT_S + 30
            while queued() and time.monotonic() < deadline:
                time.sleep(0.5)

    def running(self) -> list[str]:
        """This cluster's daemons and job steps still running (none after `stop`)."""
        return [daemon for daemon in (*DAEMONS, "slurmstepd") if self._pids(daemon)]

    def _pids(self, daemon: str) -> list[int]:
        """The processes named `daemon` whose command line (the daemons) or working folder
        (a job step's slurmstepd works in the log folder) names this folder."""
        pids = []
        for process in Path("/proc").glob("[0-9]*"):
            try:
                if (process / "comm").read_text().strip() != daemon:
                    continue
                named = (process / "cmdline").read_bytes().decode(errors="replace") + \
                    os.readlink(process / "cwd")
            except OSError:  # it exited meanwhile
                continue
            if str(self.folder) in named:
                pids.append(int(process.name))
        return pids


def _stop(pid: int) -> None:
    """SIGTERM `pid`, then SIGKILL after 10 s."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


def _installed() -> bool:
    return all(shutil.which(tool) for tool in ("munged", "slurmctld", "slurmd", "srun"))


def _install() -> None:
    """Debian's packages where a daemon or the client is missing (the package lists
    refreshed only where installing from them failed)."""
    if _installed():
        return
    if shutil.which("apt-get") is None:
        raise CannotStart("slurm is not installed and there is no apt-get to install it")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *PACKAGES]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=600)
        done = subprocess.run(install, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0 or not _installed():
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise CannotStart(f"could not install {' '.join(PACKAGES)} with apt-get: {last}")


def _node_line() -> str:
    """This host as slurmd counts it (NodeName=... CPUs=... RealMemory=...), less its uptime."""
    done = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, check=True)
    line = done.stdout.splitlines()[0]
    return line if line.startswith("NodeName=") else f"NodeName={socket.gethostname()}"


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} did not start: {done.stderr.strip() or done.stdout}")


def main(argv: list[str]) -> int:
    cluster = Cluster()
    command = argv[0] if argv else "status"
    if command == "start":
        try:
            cluster.start()
        except CannotStart as reason:
            print(f"slurm cluster: not started: {reason}", file=sys.stderr)
            try:  # for the tests' skip message
                cluster.folder.mkdir(parents=True, exist_ok=True)
                cluster.not_started.write_text(f"{reason}\n")
            except OSError:
                pass
            return CANNOT_START
        print(f"slurm cluster: up (export SLURM_CONF={cluster.conf})")
    elif command == "stop":
        cluster.stop()
        left = cluster.running()
        print(f"slurm cluster: {'still running: ' + ', '.join(left) if left else 'stopped'}")
        return 1 if left else 0
    elif command == "status":
        state = cluster.node_state()
        print(f"slurm cluster: {state or 'not running'}")
        return 0 if state else 1
    else:
        print("usage: cluster.py start|stop|status", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
