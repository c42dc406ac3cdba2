"""The cluster environment: where this process sits in a job, alone or started by torchrun
(torchelastic's variables) or Slurm's srun (SLURM_*): its rank, the world size, its node and
local rank, and the master every rank meets at; and, when Slurm stops the job, why (its time
limit, scancel). Read here only; the launchers and planning ask `job()`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["Job", "first_host", "job", "slurm_stop_reason"]


@dataclass(frozen=True)
class Job:
    """One process of a job a cluster launcher started, one process per device."""

    started_by: str  # "torchrun" or "slurm" (not a parbench launcher: LauncherKind)
    rank: int
    world_size: int
    local_rank: int  # its device on its node
    node_rank: int
    master_addr: str
    master_port: int
    restart: int = 0  # torchrun restarts a failed job: each attempt keys its store apart
    job_id: str = ""  # Slurm's job and step (12.0), or torchrun's run id

    def describe(self) -> str:
        """What a record's environment says of the job: `slurm job 12.0, 2 ranks`."""
        named = f" {self.job_id}" if self.job_id not in ("", "none") else ""
        return f"{self.started_by} job{named}, {self.world_size} ranks"

    def export(self) -> None:
        """The variables torch.distributed's env:// rendezvous reads, set from this job (srun
        sets none of them)."""
        os.environ.update(MASTER_ADDR=self.master_addr, MASTER_PORT=str(self.master_port),
                          RANK=str(self.rank), WORLD_SIZE=str(self.world_size),
                          LOCAL_RANK=str(self.local_rank))


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: `node[07-09,12],gpu1` -> `node07`."""
    match = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist.strip())
    if not match:
        raise ValueError(f"SLURM_JOB_NODELIST {nodelist!r} names no host")
    return match.group(1) + (match.group(2) or "")


def _torchrun(environ: Mapping[str, str]) -> Job | None:
    if "TORCHELASTIC_RUN_ID" not in environ:
        return None
    return Job("torchrun", int(environ["RANK"]), int(environ["WORLD_SIZE"]),
               int(environ["LOCAL_RANK"]), int(environ.get("GROUP_RANK", "0")),
               environ["MASTER_ADDR"], int(environ["MASTER_PORT"]),
               int(environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
               environ["TORCHELASTIC_RUN_ID"])


def _slurm(environ: Mapping[str, str]) -> Job | None:
    """One of several tasks of a step srun started (SLURM_STEP_ID set). Not one: an
    allocation's shell (salloc's), or a batch script's own step, which has SLURM_PROCID=0 and
    the job's SLURM_NTASKS but no step (parbench there is a process on its own, as is a single
    task, which starts its devices' processes itself). The master is MASTER_ADDR where the job
    script sets it, else the node list's first host; its port MASTER_PORT, else one derived
    from the job id, the same in every task, below Linux's ephemeral ports (32768 on)."""
    step = environ.get("SLURM_STEP_ID", environ.get("SLURM_STEPID"))
    if step is None or "SLURM_PROCID" not in environ or int(environ.get("SLURM_NTASKS", "1")) < 2:
        return None
    master = environ.get("MASTER_ADDR") or first_host(
        environ.get("SLURM_JOB_NODELIST") or environ.get("SLURM_NODELIST") or "localhost")
    port = int(environ.get("MASTER_PORT")
               or 15000 + int(environ.get("SLURM_JOB_ID", "0")) % 17000)
    return Job("slurm", int(environ["SLURM_PROCID"]), int(environ["SLURM_NTASKS"]),
               int(environ.get("SLURM_LOCALID", "0")), int(environ.get("SLURM_NODEID", "0")),
               master, port, job_id=f"{environ.get('SLURM_JOB_ID', '?')}.{step}")


def job(environ: Mapping[str, str] | None = None) -> Job | None:
    """This process's job (torchrun's variables first: torchrun inside an srun allocation
    is torchrun's job), or None for a process on its own."""
    environ = os.environ if environ is None else environ
    return _torchrun(environ) or _slurm(environ)


def _scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol show job -o ID` as a dict (JobState, Reason, TimeLimit...); empty where
    scontrol is missing or does not answer in 2 s (Slurm kills at KillWait, 30 s by default)."""
    if shutil.which("scontrol") is None:
        return {}
    try:
        done = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True,
                              text=True, timeout=2)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field)


def slurm_stop_reason(environ: Mapping[str, str] | None = None,
                      show_job: Callable[[str], dict[str, str]] = _scontrol_job) -> str | None:
    """Why Slurm sent this process SIGTERM (what follows "interrupted by"), asked of
    slurmctld as the signal arrives: the job's time limit (Reason=TimeLimit), scancel
    (JobState CANCELLED; COMPLETING with no reason as the signal arrives, as a batch script
    ending first shows too), or another end Slurm names. None outside a Slurm job, and where
    the job runs on (a SIGTERM Slurm did not send, or `scancel --signal TERM`, which ends
    nothing)."""
    environ = os.environ if environ is None else environ
    job_id = environ.get("SLURM_JOB_ID")
    if not job_id:
        return None
    fields = show_job(job_id)
    state, reason = fields.get("JobState", ""), fields.get("Reason", "None")
    if reason == "TimeLimit":
        return f"Slurm at job {job_id}'s time limit ({fields.get('TimeLimit')})"
    if state == "CANCELLED" and reason == "None":
        return f"Slurm: job {job_id} cancelled (scancel)"
    if state == "COMPLETING" and reason == "None":  # as slurmctld shows scancel's at once
        return f"Slurm: job {job_id} ending (scancel, or its batch script exited first)"
    if state in ("", "PENDING", "RUNNING", "SUSPENDED"):
        return None
    return f"Slurm: job {job_id} {state.lower()} (reason {reason})"
