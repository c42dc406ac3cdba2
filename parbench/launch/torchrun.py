"""Under torchrun: join the job, learn every rank's device, and measure each configuration on
every rank in a process of its own, the ranks agreeing on its outcome so that a failed one is
recorded and the sweep goes on (one-process strategies run on rank 0 alone)."""

from __future__ import annotations

import datetime
import functools
import itertools
import os
import socket
from collections.abc import Callable
from typing import TypeVar

import torch
import torch.distributed as dist

from parbench.config import Config
from parbench.devices import DeviceSet
from parbench.launch.backends import world_size
from parbench.launch.failures import LaunchError, failure_reason, root_cause
from parbench.launch.ranks import Task
from parbench.launch.spawn import Rendezvous, measure_alone, spawn_rank

__all__ = ["from_rank_zero", "join_torchrun", "leave_torchrun", "measure_under_torchrun",
           "torchrun_devices", "torchrun_rank"]

T = TypeVar("T")


def torchrun_rank() -> int | None:
    """This process's global rank when torchrun started it, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    return int(os.environ["RANK"])


def join_torchrun(timeout_s: float) -> None:
    """Join the process group torchrun rendezvoused (once per process). It carries only the
    ranks' agreement, on gloo: the measuring happens in each configuration's own group."""
    if not dist.is_initialized():
        # Ranks wait here for the slowest one's configuration, which its own launcher stops
        # at the timeout; the margin is for starting and reaping its processes.
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=2 * timeout_s + 60))


def torchrun_devices(kind: str) -> DeviceSet:
    """Every rank's device, in rank order: cuda:LOCAL_RANK on GPU nodes, else the CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])
    problem = None
    if kind == "cuda" and local_rank >= torch.cuda.device_count():
        problem = (f"local rank {local_rank} has no GPU of its own (this node has "
                   f"{torch.cuda.device_count()}); lower --nproc-per-node")
    device = torch.device("cuda", local_rank) if kind == "cuda" and not problem else "cpu"
    places = [None] * dist.get_world_size()
    dist.all_gather_object(places, (socket.gethostname(), str(device),
                                    os.environ.get("GROUP_RANK", "0"), problem))
    problems = [p for *_, p in places if p]
    if problems:  # on every rank, so that none waits for the others
        raise LaunchError(problems[0])
    return DeviceSet(tuple(torch.device(d) for _, d, _, _ in places),
                     tuple(h for h, *_ in places), nodes=len({n for _, _, n, _ in places}))


def from_rank_zero(compute: Callable[[], T], expected: tuple[type[Exception], ...]) -> T:
    """`compute()` on rank 0 (a run folder only its node may see), its value on every rank;
    an `expected` error it raises is raised on every rank."""
    box: list = [None]
    if dist.get_rank() == 0:
        try:
            box = [(True, compute())]
        except expected as error:
            box = [(False, error)]
    dist.broadcast_object_list(box, src=0)
    succeeded, value = box[0]
    if not succeeded:
        raise value
    return value


def leave_torchrun() -> None:
    """Leave the job's process group (after the last configuration, on every rank)."""
    if dist.is_initialized():
        dist.destroy_process_group()


@functools.cache
def _job_store() -> dist.Store:
    """The job's store, where torchrun's rendezvous left it: each configuration's ranks meet
    under a prefix of their own, and a failed rank says so there."""
    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         is_master=False)


# Each configuration measured in this job gets the next number, the same on every rank since
# every rank measures the same configurations in the same order.
_configurations = itertools.count()


def measure_under_torchrun(config: Config) -> dict | None:
    """Measure `config` on every rank (process-per-device strategies) or on rank 0 alone, then
    agree: every rank returns (rank 0 the merged fields, others None) or every rank raises
    LaunchError with the one failure that caused the others."""
    rank, size = dist.get_rank(), dist.get_world_size()
    prefix = (f"parbench/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
              f"{next(_configurations)}/")
    failed_key = prefix + "failed"
    if not config.process_per_device:
        def measure() -> dict | None:
            return measure_alone(config) if rank == 0 else None
    else:
        if world_size(config) != size:
            raise LaunchError(f"{config.strategy} uses {world_size(config)} devices but torchrun "
                              f"started {size} processes")
        rendezvous = Rendezvous(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                prefix, rank, size)

        def abandon() -> str | None:
            store = _job_store()
            return store.get(failed_key).decode() if store.check([failed_key]) else None

        def measure() -> dict | None:
            return spawn_rank(config, Task.MEASURE, rendezvous, abandon)
    try:
        result, failure = measure(), None
    except Exception as error:
        result, failure = None, error
    reason = (None if failure is None else str(failure) if isinstance(failure, LaunchError)
              else failure_reason(failure))
    if reason and config.process_per_device:  # the other ranks' workers stop waiting for this one
        _job_store().compare_set(failed_key, "", reason)
    reasons: list = [None] * size
    dist.all_gather_object(reasons, reason)
    failures = {r: reason for r, reason in enumerate(reasons) if reason}
    if not failures:
        return result
    cause = root_cause(failures)
    if cause == rank:
        raise failure  # with its own type, which tells out-of-memory apart
    raise LaunchError(failures[cause])
