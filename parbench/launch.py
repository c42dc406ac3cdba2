"""Run a configuration's workers: in this process, one spawned process per device, or under
torchrun (one process per device across nodes, rank 0 merging the record)."""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import pickle
import re
import signal
import socket
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import strategies
from parbench.config import Config
from parbench.devices import DeviceSet
from parbench.measure import Pace
from parbench.worker import WorkerMeasurement, measure_worker, merge, trained_parameters

__all__ = [
    "BACKENDS", "OUT_OF_MEMORY", "LaunchError", "backend_for", "backend_problem",
    "join_torchrun", "leave_torchrun", "measure", "process_group_backend", "torchrun_rank",
    "verify_parameters", "world_size",
]

LOOPBACK = "127.0.0.1"
_LAUNCHER_PID = "PARBENCH_LAUNCHER_PID"
BACKENDS = ("auto", "gloo", "nccl")


class LaunchError(RuntimeError):
    """A worker process failed, hung past the timeout, or died."""


def process_group_backend(devices: DeviceSet, requested: str = "auto") -> str:
    """NCCL when every rank has a GPU of its own; gloo on CPU or where ranks share a GPU
    (NCCL refuses two ranks on one GPU); or what was asked for."""
    if requested != "auto":
        return requested
    return "nccl" if devices.kind == "cuda" and not devices.emulated else "gloo"


def backend_problem(devices: DeviceSet, requested: str) -> str | None:
    """Why `requested` cannot connect these devices' ranks, or None."""
    if requested not in BACKENDS:
        return f"unknown backend {requested!r}; choose from {', '.join(BACKENDS)}"
    if requested == "nccl" and devices.kind != "cuda":
        return (f"--backend nccl needs CUDA devices, got {devices.describe()}; use --backend "
                "gloo on CPU (or leave it at auto)")
    if requested == "nccl" and devices.emulated:
        return (f"--backend nccl refuses two ranks on one GPU ({devices.describe()}); use "
                "--backend gloo where ranks share a GPU (or leave it at auto)")
    return None


def _process_per_device(config: Config) -> bool:
    return strategies.lookup(config.strategy).cls.process_per_device


def backend_for(config: Config) -> str | None:
    """The process-group backend `config` runs on, or None for one-process strategies."""
    if not _process_per_device(config):
        return None
    return process_group_backend(config.used_devices, config.backend)


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


def measure(config: Config, pace: Pace | None = None) -> dict | None:
    """Measure `config` with the launcher its strategy needs; return the merged fields (under
    torchrun on rank 0; other ranks get None). With `pace`, an external timer drives every
    step of this process, which then plays rank 0 itself (see `parbench.paced`)."""
    if torchrun_rank() is not None:
        return _under_torchrun(config)
    if _process_per_device(config):
        return _spawn(config, "measure", pace=pace)
    if config.memory_cap_mib and pace is None:
        # Under a cap an allocation can fail where torch cannot recover (even crash):
        # never in the process that holds the sweep.
        return _spawn(config, "alone")
    return _measure_here(config, pace)


def _measure_here(config: Config, pace: Pace | None = None) -> dict:
    """A one-process strategy, measured in this process on its devices' share of cores."""
    with _in_process_threads(config):
        return merge([measure_worker(config, lambda s: DeviceSet(s.devices), pace=pace)])


def verify_parameters(config: Config, images: torch.Tensor,
                      labels: torch.Tensor) -> list[torch.Tensor]:
    """The parameters after one step of `config` on this batch, whatever its launcher."""
    if _process_per_device(config):
        return _spawn(config, "verify", (images, labels))
    with _in_process_threads(config):
        return trained_parameters(config, images, labels)


def _set_device(config: Config, device: torch.device) -> None:
    if device.type == "cpu":
        torch.set_num_threads(config.threads_per_device)
    else:
        torch.cuda.set_device(device)


def _run_rank(config: Config, task: str, device: torch.device, batch=None, pace=None):
    """This rank's part of `task`, in an initialised process group; rank 0 returns the result
    gathered from every rank (the merged measurement, or all the trained parameters)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    if task == "measure":
        mine = asdict(measure_worker(config, lambda s: DeviceSet((device,)), dist.barrier,
                                     pace))
    else:
        mine = trained_parameters(config, *batch)
    gathered = [None] * size if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    if rank != 0:
        return None
    if task == "measure":
        return merge([WorkerMeasurement(**m) for m in gathered])
    return [parameter for part in gathered for parameter in part]


# ---- one process per device on this node --------------------------------------------------------

def _loopback_environment() -> None:
    """Collectives' own sockets on loopback too (gloo and NCCL otherwise pick the interface
    the host name resolves to); a user's explicit choice is kept."""
    if "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def _die_with_parent() -> None:
    """Linux: this worker is killed if the launching process dies, even by SIGKILL, so no
    rank outlives an interrupted sweep."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the launcher's own clean-up still applies
    if os.getppid() != int(os.environ.get(_LAUNCHER_PID, os.getppid())):
        os._exit(1)  # the launcher died while this worker was starting


def _join_group(config: Config, port: int, rank: int, size: int) -> torch.device:
    """Take rank's device and join the process group through the launcher's loopback store."""
    device = config.used_devices.logical[rank]
    _set_device(config, device)
    timeout = datetime.timedelta(seconds=config.timeout_s)
    store = dist.TCPStore(LOOPBACK, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(process_group_backend(config.used_devices, config.backend),
                            store=store, rank=rank, world_size=size, timeout=timeout)
    return device


def _spawned_worker(rank: int, size: int, port: int, config: Config, task: str,
                    out_dir: str, batch) -> None:
    _die_with_parent()
    if task == "alone":  # a one-process strategy, isolated in this worker
        (Path(out_dir) / "result.json").write_text(json.dumps(_measure_here(config)))
        return
    _loopback_environment()
    device = _join_group(config, port, rank, size)
    try:
        result = _run_rank(config, task, device, batch)
        if rank == 0 and task == "measure":
            (Path(out_dir) / "result.json").write_text(json.dumps(result))
        elif rank == 0:  # plain arrays, read back without unpickling anything
            np.savez(Path(out_dir) / "parameters.npz", *[p.numpy() for p in result])
    finally:
        dist.destroy_process_group()
    # Done, and the result is on disk: leave without running C++ static destructors, which
    # now and then abort the process as a gloo thread is torn down (SIGABRT, "terminate called
    # without an active exception"), turning a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _spawned_follower(index: int, size: int, *args) -> None:
    """Ranks 1..N-1 where this process leads as rank 0."""
    _spawned_worker(index + 1, size, *args)


def _lead(config: Config, port: int, pace) -> dict:
    """Play rank 0 of a measurement in this process (its steps driven by `pace`)."""
    device = _join_group(config, port, 0, world_size(config))
    try:
        return _run_rank(config, "measure", device, pace=pace)
    finally:
        dist.destroy_process_group()


# How running out of memory reads in a worker's traceback: CUDA, Python, torch's CPU allocator.
OUT_OF_MEMORY = ("OutOfMemoryError", "MemoryError", "can't allocate memory")


def _root_failure(context, index: int, message: str) -> tuple[int, str]:
    """The failure to report: the first one seen is often a rank whose peer died ("connection
    closed by peer"), so wait briefly for the others and prefer one that ran out of memory."""
    deadline = time.monotonic() + 3
    while any(p.is_alive() for p in context.processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    failures = {index: message}
    for other, path in enumerate(context.error_files):
        if other != index and os.path.getsize(path) > 0:
            with open(path, "rb") as file:  # torch's own hand-over of a child's traceback
                failures[other] = pickle.load(file)
    for other, text in sorted(failures.items()):
        if any(marker in text for marker in OUT_OF_MEMORY):
            return other, text
    return index, message


def _last_line(message: str) -> str:
    """The line of a worker's traceback that says what went wrong: running out of memory
    wherever it appears (wrappers such as pipelining's re-raise it with context lines after
    it), else the last exception line, else the last line."""
    lines = [line.strip() for line in str(message).strip().splitlines() if line.strip()]
    for pick in (lambda line: any(m in line for m in OUT_OF_MEMORY),
                 lambda line: re.match(r"^[\w.]+(Error|Exception|Exit)\b", line)):
        chosen = [line for line in lines if pick(line)]
        if chosen:
            return chosen[-1]
    return lines[-1] if lines else "no message"


@contextlib.contextmanager
def _loopback_store(config: Config):
    """The rendezvous store, served by this process on a loopback socket (TCPStore's own
    server would listen on every interface); yields its port."""
    with socket.socket() as listener:
        listener.bind((LOOPBACK, 0))
        listener.listen()
        port = listener.getsockname()[1]
        store = dist.TCPStore(LOOPBACK, port, is_master=True,
                              timeout=datetime.timedelta(seconds=config.timeout_s),
                              wait_for_workers=False, master_listen_fd=listener.detach())
    try:
        yield port
    finally:
        del store  # closes the listening socket, which the store now owns


def _spawn(config: Config, task: str, batch=None, pace=None):
    processes = world_size(config)  # 1 for task "alone"
    lead = pace is not None  # this process is rank 0; spawn the others
    with tempfile.TemporaryDirectory(prefix="parbench-") as out_dir, \
            _loopback_store(config) as port:
        os.environ[_LAUNCHER_PID] = str(os.getpid())  # inherited: see _die_with_parent
        context = mp.start_processes(
            _spawned_follower if lead else _spawned_worker,
            args=(processes, port, config, task, out_dir, batch),
            nprocs=processes - lead, join=False, start_method="spawn")
        deadline = time.monotonic() + config.timeout_s
        try:
            result = _lead(config, port, pace) if lead else None
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    alive = [rank for rank, p in enumerate(context.processes) if p.is_alive()]
                    raise LaunchError(f"timed out after {config.timeout_s:.0f} s; ranks still "
                                      f"running: {alive}")
        except mp.ProcessRaisedException as error:
            index, message = _root_failure(context, error.error_index, error.msg)
            raise LaunchError(f"rank {index + lead} failed: {_last_line(message)}") from None
        except mp.ProcessExitedException as error:
            raise LaunchError(f"rank {error.error_index + lead} died: "
                              f"{_last_line(error.msg)}") from None
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join()
        if lead:
            return result
        if task in ("measure", "alone"):
            return json.loads((Path(out_dir) / "result.json").read_text())
        with np.load(Path(out_dir) / "parameters.npz", allow_pickle=False) as arrays:
            return [torch.from_numpy(arrays[f"arr_{i}"]) for i in range(len(arrays.files))]


# ---- under torchrun ---------------------------------------------------------------------------

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


def _under_torchrun(config: Config) -> dict | None:
    """Process-per-device strategies run on every rank; one-process strategies on rank 0 alone
    (on its own device) while the others wait."""
    rank = dist.get_rank()
    if _process_per_device(config):
        if world_size(config) != dist.get_world_size():
            raise LaunchError(f"{config.strategy} uses {world_size(config)} devices but torchrun "
                              f"started {dist.get_world_size()} processes")
        device = config.used_devices.logical[rank]
        _set_device(config, device)
        return _run_rank(config, "measure", device)
    merged = _measure_here(config) if rank == 0 else None
    dist.barrier()
    return merged
