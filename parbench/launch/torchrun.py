"""Under torchrun: join the job's process group, every rank's device, and each configuration
measured on every rank (one-process strategies on rank 0 alone)."""

from __future__ import annotations

import datetime
import os
import socket

import torch
import torch.distributed as dist

from parbench.config import Config
from parbench.devices import DeviceSet
from parbench.launch.backends import world_size
from parbench.launch.failures import LaunchError
from parbench.launch.ranks import Task, measure_here, run_rank, set_device

__all__ = ["join_torchrun", "leave_torchrun", "measure_under_torchrun", "torchrun_rank"]


def torchrun_rank() -> int | None:
    """This process's global rank when torchrun started it, else None."""
    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return None
    return int(os.environ["RANK"])


def join_torchrun(kind: str, requested_backend: str, timeout_s: float) -> DeviceSet:
    """Join the process group torchrun rendezvoused (once per process) and return every rank's
    device, in rank order: cuda:LOCAL_RANK on GPU nodes, else the CPU."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if kind == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise LaunchError(f"local rank {local_rank} has no GPU of its own (this node has "
                              f"{torch.cuda.device_count()}); lower --nproc-per-node")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        # Objects are gathered through gloo; CUDA tensors go through NCCL unless gloo is asked.
        backend = ("cpu:gloo,cuda:nccl" if kind == "cuda" and requested_backend != "gloo"
                   else "gloo")
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s))
    places = [None] * dist.get_world_size()
    dist.all_gather_object(places, (socket.gethostname(), str(device),
                                    os.environ.get("GROUP_RANK", "0")))
    return DeviceSet(tuple(torch.device(d) for _, d, _ in places),
                     tuple(h for h, _, _ in places), nodes=len({n for _, _, n in places}))


def leave_torchrun() -> None:
    """Leave the job's process group (after the last configuration, on every rank)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def measure_under_torchrun(config: Config) -> dict | None:
    """Process-per-device strategies run on every rank; one-process strategies on rank 0 alone
    (on its own device) while the others wait."""
    rank = dist.get_rank()
    if config.process_per_device:
        if world_size(config) != dist.get_world_size():
            raise LaunchError(f"{config.strategy} uses {world_size(config)} devices but torchrun "
                              f"started {dist.get_world_size()} processes")
        device = config.used_devices.logical[rank]
        set_device(config, device)
        return run_rank(config, Task.MEASURE, device)
    merged = measure_here(config) if rank == 0 else None
    dist.barrier()
    return merged
