"""One rank of a job torchrun or srun started (parbench.machine.cluster says which): join the job,
learn every rank's device, and measure each configuration on every rank in a process of its
own, the ranks agreeing on its outcome so that a failed one is recorded and the sweep goes on
(one-process strategies run on rank 0 alone)."""

from __future__ import annotations

import contextlib
import datetime
import functools
import itertools
import socket
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from parbench.launch.failures import LaunchError, failure_reason, root_cause
from parbench.launch.ranks import Task
from parbench.launch.spawn import Rendezvous, spawn, spawn_rank
from parbench.machine.cluster import Job, job
from parbench.machine.devices import DeviceSet
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config

__all__ = ["from_rank_zero", "join_job", "leave_job", "measure_on_every_rank",
           "measure_in_job", "same_on_every_rank", "job_devices", "job_group"]

T = TypeVar("T")
_DAY_S = 24 * 3600


def _job() -> Job:
    started = job()
    if started is None:
        raise LaunchError("this process was not started by torchrun or srun")
    return started


def join_job(timeout_s: float) -> None:
    """Join the job's process group (once per process): torchrun's rendezvous, or srun's
    tasks meeting at the master its environment names. It carries only the ranks'
    agreement, on gloo: the measuring happens in each configuration's own group."""
    if not dist.is_initialized():
        _job().export()  # torch's env:// rendezvous reads them; srun sets none
        # Ranks wait in it for the slowest one's configuration, which its own launcher stops
        # at --timeout (a resumed run's may be longer than this command's); a rank that dies
        # ends the job through torchrun (or srun). So its own timeout is only a backstop.
        dist.init_process_group("gloo", timeout=datetime.timedelta(
            seconds=max(2 * timeout_s + 60, _DAY_S)))


def job_devices(kind: str) -> DeviceSet:
    """Every rank's device, in rank order: cuda:<local rank> on GPU nodes, else the CPU."""
    local_rank = _job().local_rank
    problem = None
    if kind == "cuda" and local_rank >= torch.cuda.device_count():
        problem = (f"local rank {local_rank} has no GPU of its own (this node has "
                   f"{torch.cuda.device_count()}); lower torchrun's --nproc-per-node (srun's "
                   "--ntasks-per-node)")
    device = torch.device("cuda", local_rank) if kind == "cuda" and not problem else "cpu"
    places: list = [None] * dist.get_world_size()
    dist.all_gather_object(places, (socket.gethostname(), str(device), _job().node_rank,
                                    problem))
    problems = [p for *_, p in places if p]
    if problems:  # on every rank, so that none waits for the others
        raise LaunchError(problems[0])
    return DeviceSet(tuple(torch.device(d) for _, d, _, _ in places),
                     tuple(h for h, *_ in places), nodes=len({n for _, _, n, _ in places}))


def from_rank_zero(compute: Callable[[], T], expected: tuple[type[Exception], ...]) -> T:
    """`compute()` on rank 0 (a run folder only its node may see), its value on every rank;
    an `expected` error it raises is raised on every rank, any other as LaunchError."""
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            box = [(True, compute())]
        except expected as error:
            box = [(False, error)]
        except Exception as error:  # noqa: BLE001 (the other ranks must not wait for it)
            box = [(False, LaunchError(f"rank 0: {failure_reason(error)}"))]
    dist.broadcast_object_list(box, src=0)
    succeeded, value = box[0]
    if not succeeded:
        raise value
    return value


def leave_job() -> None:
    """Leave the job's process group (after the last configuration, on every rank)."""
    if dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def job_group(timeout_s: float):
    """The job's process group, joined for a sweep and left after it, on every rank."""
    join_job(timeout_s)
    try:
        yield
    finally:
        leave_job()


def measure_on_every_rank(configs: list[Config], order: list[Config],
                          record: Callable[[], int]) -> int:
    """A sweep in a job: every rank checks that it builds the same one, then rank 0
    measures and records it (`record()`, its exit status) while every other rank plays its
    part in the same configurations in the same `order` (its trials, less those a resumed run
    keeps), failures included, as the ranks agreed on each."""
    same_on_every_rank([(c.key(), c.plan.runs) for c in configs] + [c.key() for c in order],
                       "the configurations they measure")
    if dist.get_rank() == 0:
        return record()
    for config in order:
        try:
            measure_in_job(config)
        except Exception:  # noqa: BLE001 (every rank agreed on it; rank 0 records it)
            pass
    return 0


@functools.cache
def _job_store() -> dist.Store:
    """The job's store, where its rendezvous left it (torchrun's agent, or rank 0 under
    srun): each configuration's ranks meet under a prefix of their own, and a failed rank
    says so there."""
    return dist.TCPStore(_job().master_addr, _job().master_port, is_master=False)


# Each configuration measured in this job gets the next number, the same on every rank since
# every rank measures the same configurations in the same order.
_configurations = itertools.count()


def measure_in_job(config: Config) -> Measurement | None:
    """Measure `config` in a worker process on every rank (process-per-device strategies) or
    on rank 0 alone, then agree: every rank returns (rank 0 the measurement, others None) or
    every rank raises the one failure that caused the others (its own exception on the rank
    where it happened, LaunchError elsewhere)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    prefix = f"parbench/{_job().restart}/{next(_configurations)}/"
    failed_key = prefix + "failed"

    def peer_failure() -> str | None:
        store = _job_store()
        return store.get(failed_key).decode() if store.check([failed_key]) else None

    failure = reason = result = None
    try:
        if not config.process_per_device:  # its own process: a deadline, and memory apart
            result = spawn(config, Task.ALONE) if rank == 0 else None
        elif config.plan.world_size != size:
            raise LaunchError(f"{config.strategy} uses {config.plan.world_size} devices but "
                              f"the job has {size} processes")
        else:
            rendezvous = Rendezvous(_job().master_addr, _job().master_port, prefix, rank,
                                    size)
            result = spawn_rank(config, Task.MEASURE, rendezvous, peer_failure)
    except Exception as error:
        failure = error
        reason = str(error) if isinstance(error, LaunchError) else failure_reason(error)
        try:  # the other ranks' workers stop waiting for this one's
            _job_store().compare_set(failed_key, "", reason)
        except Exception:  # noqa: BLE001 (they are stopped at their deadline instead)
            pass
    reasons: list = [None] * size
    dist.all_gather_object(reasons, reason)
    failures = {r: text for r, text in enumerate(reasons) if text}
    if not failures:
        return result
    cause = root_cause(failures)
    if cause == rank:
        assert failure is not None  # this rank's reason is among the failures
        raise failure  # with its own type, which tells out-of-memory apart
    raise LaunchError(failures[cause])


def same_on_every_rank(value, what: str) -> None:
    """Raise LaunchError on every rank unless `value` (what this rank will do) is the same on
    all: ranks that disagree would meet in the wrong configuration's collectives."""
    values: list = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    differing = [rank for rank, other in enumerate(values) if other != values[0]]
    if differing:
        raise LaunchError(f"ranks {differing} differ from rank 0 in {what}; give every node "
                          "the same arguments, data and software")
