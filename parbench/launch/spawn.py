"""One process per device on this machine, started with spawn; the rendezvous served by the
launcher on a loopback socket; failures named by rank, every process reaped."""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import json
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from parbench.config import Config
from parbench.launch.backends import process_group_backend, world_size
from parbench.launch.failures import OUT_OF_MEMORY, LaunchError, last_line
from parbench.launch.ranks import Task, measure_here, run_rank, set_device

__all__ = ["spawn"]

LOOPBACK = "127.0.0.1"
_LAUNCHER_PID = "PARBENCH_LAUNCHER_PID"


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
    set_device(config, device)
    timeout = datetime.timedelta(seconds=config.timeout_s)
    store = dist.TCPStore(LOOPBACK, port, size, is_master=False, timeout=timeout)
    dist.init_process_group(process_group_backend(config.used_devices, config.backend),
                            store=store, rank=rank, world_size=size, timeout=timeout)
    return device


def _spawned_worker(rank: int, size: int, port: int, config: Config, task: Task,
                    out_dir: str, batch) -> None:
    _die_with_parent()
    if task is Task.ALONE:  # a one-process strategy, isolated in this worker
        (Path(out_dir) / "result.json").write_text(json.dumps(measure_here(config)))
        return
    _loopback_environment()
    device = _join_group(config, port, rank, size)
    try:
        result = run_rank(config, task, device, batch)
        if rank == 0 and task in (Task.MEASURE, Task.COLLECTIVES):
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
        return run_rank(config, Task.MEASURE, device, pace=pace)
    finally:
        dist.destroy_process_group()


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


def spawn(config: Config, task: Task, batch=None, pace=None):
    processes = world_size(config)  # 1 for Task.ALONE
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
            raise LaunchError(f"rank {index + lead} failed: {last_line(message)}") from None
        except mp.ProcessExitedException as error:
            raise LaunchError(f"rank {error.error_index + lead} died: "
                              f"{last_line(error.msg)}") from None
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join()
        if lead:
            return result
        if task in (Task.MEASURE, Task.ALONE, Task.COLLECTIVES):
            return json.loads((Path(out_dir) / "result.json").read_text())
        with np.load(Path(out_dir) / "parameters.npz", allow_pickle=False) as arrays:
            return [torch.from_numpy(arrays[f"arr_{i}"]) for i in range(len(arrays.files))]
