"""Run a configuration's workers: in this process, or one spawned process per device."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import strategies
from parbench.config import Config
from parbench.devices import DeviceSet
from parbench.worker import WorkerMeasurement, measure_worker, merge, trained_parameters

__all__ = [
    "LaunchError", "measure", "process_group_backend", "verify_parameters", "world_size",
]

LOOPBACK = "127.0.0.1"


class LaunchError(RuntimeError):
    """A worker process failed, hung past the timeout, or died."""


def process_group_backend(devices: DeviceSet) -> str:
    """NCCL when every rank has a GPU of its own; gloo on CPU or where ranks share a GPU
    (NCCL refuses two ranks on one GPU)."""
    if devices.kind == "cuda" and not devices.emulated:
        return "nccl"
    return "gloo"


def _process_per_device(config: Config) -> bool:
    return strategies.lookup(config.strategy).cls.process_per_device


def world_size(config: Config) -> int:
    """How many processes run `config`: one per device used, or this one alone."""
    return len(config.used_devices) if _process_per_device(config) else 1


@contextlib.contextmanager
def _in_process_threads(config: Config):
    """Each op runs on its logical device's share of cores; strategies that drive several
    devices run one worker thread per device, so N logical devices = N cores of work."""
    threads_before = torch.get_num_threads()
    if config.used_devices.kind == "cpu":
        torch.set_num_threads(config.threads_per_device)
    try:
        yield
    finally:
        torch.set_num_threads(threads_before)


def measure(config: Config) -> dict:
    """Measure `config` with the launcher its strategy needs; return the merged fields."""
    if _process_per_device(config):
        return _spawn(config, "measure")
    with _in_process_threads(config):
        return merge([measure_worker(config, lambda s: DeviceSet(s.devices))])


def verify_parameters(config: Config, images: torch.Tensor,
                      labels: torch.Tensor) -> list[torch.Tensor]:
    """The parameters after one step of `config` on this batch, whatever its launcher."""
    if _process_per_device(config):
        return _spawn(config, "verify", (images, labels))
    with _in_process_threads(config):
        return trained_parameters(config, images, labels)


# ---- one process per device ---------------------------------------------------------------------

def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def _spawned_worker(rank: int, world_size: int, port: int, config: Config, task: str,
                    out_dir: str, batch) -> None:
    os.environ.update(MASTER_ADDR=LOOPBACK, MASTER_PORT=str(port), RANK=str(rank),
                      LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    devices = config.used_devices
    device = devices.logical[rank]
    if device.type == "cpu":
        torch.set_num_threads(config.threads_per_device)
    else:
        torch.cuda.set_device(device)
    dist.init_process_group(process_group_backend(devices), rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=config.timeout_s))
    try:
        if task == "measure":
            measurement = measure_worker(config, lambda s: DeviceSet((device,)), dist.barrier)
            gathered = [None] * world_size if rank == 0 else None
            dist.gather_object(asdict(measurement), gathered, dst=0)
            if rank == 0:
                merged = merge([WorkerMeasurement(**m) for m in gathered])
                (Path(out_dir) / "result.json").write_text(json.dumps(merged))
        else:
            parameters = trained_parameters(config, *batch)
            gathered = [None] * world_size if rank == 0 else None
            dist.gather_object(parameters, gathered, dst=0)
            if rank == 0:
                torch.save([p for part in gathered for p in part],
                           Path(out_dir) / "parameters.pt")
    finally:
        dist.destroy_process_group()


def _last_line(message: str) -> str:
    lines = [line for line in str(message).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no message"


def _spawn(config: Config, task: str, batch=None):
    processes = world_size(config)
    with tempfile.TemporaryDirectory(prefix="parbench-") as out_dir:
        context = mp.start_processes(
            _spawned_worker,
            args=(processes, _free_loopback_port(), config, task, out_dir, batch),
            nprocs=processes, join=False, start_method="spawn")
        deadline = time.monotonic() + config.timeout_s
        try:
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    alive = [rank for rank, p in enumerate(context.processes) if p.is_alive()]
                    raise LaunchError(f"timed out after {config.timeout_s:.0f} s; ranks still "
                                      f"running: {alive}")
        except mp.ProcessRaisedException as error:
            raise LaunchError(f"rank {error.error_index} failed: "
                              f"{_last_line(error.msg)}") from None
        except mp.ProcessExitedException as error:
            raise LaunchError(f"rank {error.error_index} died: {_last_line(error.msg)}") from None
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join()
        if task == "measure":
            return json.loads((Path(out_dir) / "result.json").read_text())
        return torch.load(Path(out_dir) / "parameters.pt", weights_only=True)
