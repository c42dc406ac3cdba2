"""Ranks in processes of their own: one per device on this machine (the rendezvous served by
the launcher on a loopback socket), or, under torchrun, this rank's part of one configuration
(the rendezvous in the job's store); failures named by rank, every process reaped."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime
import json
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from parbench.launch.failures import LaunchError, last_line, root_cause
from parbench.launch.ranks import Task, measure_here, run_rank, set_device
from parbench.launch.worker import Trained
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config

__all__ = ["Rendezvous", "group_device", "spawn", "spawn_rank"]

LOOPBACK = "127.0.0.1"
# Workers are forked from a server process that imported torch, torchvision and parbench once,
# before any thread or CUDA context existed: a spawned interpreter imports them again, about 5 s
# of CPU per process on a 2-core machine, paid by every rank of every configuration.
START_METHOD = ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                else "spawn")
multiprocessing.set_forkserver_preload([__name__])


def _loopback_environment() -> None:
    """Collectives' own sockets on loopback too (gloo and NCCL otherwise pick the interface
    the host name resolves to); a user's explicit choice is kept."""
    if "lo" in {name for _, name in socket.if_nameindex()}:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")


def _die_with_parent(launcher: int) -> None:
    """Linux: this worker is killed if its parent dies, even by SIGKILL, so no rank outlives
    an interrupted sweep (the fork server, its parent, exits when the launcher does)."""
    _release_the_fork_server()
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return  # not Linux: the launcher's own clean-up still applies
    try:
        os.kill(launcher, 0)
    except ProcessLookupError:
        os._exit(1)  # the launcher died while this worker was starting


def _release_the_fork_server() -> None:
    """The fork server exits when every copy of the write end of its launcher's pipe is
    closed, and each worker is handed a copy (multiprocessing.forkserver._serve_one, so that it
    can use the server too): while a worker held it, a SIGKILLed launcher's server stayed up,
    its workers' PR_SET_PDEATHSIG never fired, and the ranks trained on to the end of their
    configuration (42 s in one probe). Closed here; a process this worker starts through a fork
    server then starts a server of its own."""
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """Where one configuration's ranks meet: a store's address, the prefix of this
    configuration's keys in it, the first rank this launcher starts, and how many ranks the
    configuration has in all."""

    host: str
    port: int
    prefix: str
    first_rank: int
    size: int


def group_device(backend: str | None, device: torch.device) -> torch.device | None:
    """The device a rank's process group is bound to (init_process_group's `device_id`): its
    own GPU where the ranks run NCCL, each on a GPU of its own (NCCL refuses ranks sharing
    one, which run gloo), as torchtitan binds it: NCCL then starts its communicator at once,
    on that GPU, rather than at the first collective on a device it guesses. None for gloo."""
    if backend != "nccl" or device.type != "cuda" or device.index is None:
        return None
    return torch.device("cuda", device.index)


def _join_group(config: Config, rendezvous: Rendezvous, rank: int) -> torch.device:
    """Take rank's device and join the configuration's process group through the store."""
    device = config.used_devices.logical[rank]
    set_device(config, device)
    timeout = datetime.timedelta(seconds=config.timeout_s)
    store: dist.Store = dist.TCPStore(rendezvous.host, rendezvous.port, rendezvous.size,
                                      is_master=False, timeout=timeout)
    if rendezvous.prefix:
        store = dist.PrefixStore(rendezvous.prefix, store)
    dist.init_process_group(config.plan.backend,
                            store=store, rank=rank, world_size=rendezvous.size,
                            timeout=timeout,
                            device_id=group_device(config.plan.backend, device))
    return device


def _spawned_worker(index: int, rendezvous: Rendezvous, config: Config, task: Task,
                    out_dir: str, batch, launcher: int) -> None:
    _die_with_parent(launcher)
    if task is Task.ALONE:  # a one-process strategy, isolated in this worker
        (Path(out_dir) / "result.json").write_text(json.dumps(measure_here(config).to_json()))
        return
    if rendezvous.host == LOOPBACK:
        _loopback_environment()
    rank = rendezvous.first_rank + index
    device = _join_group(config, rendezvous, rank)
    try:
        result = run_rank(config, task, device, batch)
        if rank == 0 and task in (Task.MEASURE, Task.COLLECTIVES):
            (Path(out_dir) / "result.json").write_text(json.dumps(
                result.to_json() if task is Task.MEASURE else result))
        elif rank == 0:  # plain arrays, read back without unpickling anything
            np.savez(Path(out_dir) / "trained.npz", np.asarray(result.losses),
                     *[p.numpy() for p in result.parameters])
    finally:
        dist.destroy_process_group()
    # Done, and the result is on disk: leave without running C++ static destructors, which
    # now and then abort the process as a gloo thread is torn down (SIGABRT, "terminate called
    # without an active exception"), turning a finished rank into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _lead(config: Config, rendezvous: Rendezvous, pace) -> Measurement:
    """Play rank 0 of a measurement in this process (its steps driven by `pace`)."""
    device = _join_group(config, rendezvous, 0)
    try:
        return run_rank(config, Task.MEASURE, device, pace=pace)
    finally:
        dist.destroy_process_group()


def _root_failure(context, index: int, message: str) -> tuple[int, str]:
    """The failure to report: the first one seen is often a rank whose peer died ("connection
    closed by peer"), so wait briefly for the others and report the root cause."""
    deadline = time.monotonic() + 3
    while any(p.is_alive() for p in context.processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    failures = {index: message}
    for other, path in enumerate(context.error_files):
        if other == index:
            continue
        try:
            if os.path.getsize(path) > 0:
                with open(path, "rb") as file:  # torch's own hand-over of a child's traceback
                    failures[other] = pickle.load(file)
        except FileNotFoundError:  # torch read and removed it already, or the rank left none
            continue
    cause = root_cause(failures)
    return cause, failures[cause]


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
    """Run `task` on one process per device of `config` on this machine (with `pace`, this
    process plays rank 0); rank 0's result."""
    processes = config.plan.world_size  # 1 for Task.ALONE
    lead = pace is not None  # this process is rank 0; spawn the others
    with _loopback_store(config) as port:
        rendezvous = Rendezvous(LOOPBACK, port, "", int(lead), processes)
        return _start(config, task, rendezvous, processes - lead, batch,
                      lead=(lambda: _lead(config, rendezvous, pace)) if lead else None)


def spawn_rank(config: Config, task: Task, rendezvous: Rendezvous,
               peer_failure: Callable[[], str | None]):
    """Under torchrun: this rank's part of `task` in a process of its own, which meets the
    other ranks' at `rendezvous`; rank 0's result (None on other ranks). `peer_failure` is
    asked while it runs: a reason (another rank failed) stops it, since with NCCL it could
    wait in a collective until the timeout."""
    return _start(config, task, rendezvous, 1, peer_failure=peer_failure)


def _start(config: Config, task: Task, rendezvous: Rendezvous, processes: int, batch=None,
           lead: Callable[[], Measurement] | None = None,
           peer_failure: Callable[[], str | None] = lambda: None):
    """Start `processes` ranks from `rendezvous.first_rank` on, wait for them (playing rank 0
    here with `lead`), kill them all on the first failure, at the deadline or when
    `peer_failure` gives a reason, and read back rank 0's result."""
    with tempfile.TemporaryDirectory(prefix="parbench-") as out_dir:
        context = mp.start_processes(
            _spawned_worker, args=(rendezvous, config, task, out_dir, batch, os.getpid()),
            nprocs=processes, join=False, start_method=START_METHOD)
        deadline = time.monotonic() + config.timeout_s
        first = rendezvous.first_rank
        try:
            result = lead() if lead else None
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    alive = [first + i for i, p in enumerate(context.processes) if p.is_alive()]
                    raise LaunchError(f"timed out after {config.timeout_s:.0f} s; ranks still "
                                      f"running: {alive}")
                reason = peer_failure()
                if reason:
                    raise LaunchError(f"rank {first} stopped: {reason}")
        except mp.ProcessRaisedException as error:
            index, message = _root_failure(context, error.error_index, error.msg)
            raise LaunchError(f"rank {index + first} failed: {last_line(message)}") from None
        except mp.ProcessExitedException as error:
            raise LaunchError(f"rank {error.error_index + first} died: "
                              f"{last_line(error.msg)}") from None
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                process.join()
        if lead:
            return result
        result = _read_result(Path(out_dir))
        if result is not None and task in (Task.MEASURE, Task.ALONE):
            result = Measurement.from_json(result)
        if result is None and first == 0:
            raise LaunchError("rank 0 finished without leaving its result")
        return result


def _read_result(out_dir: Path):
    """Rank 0's result as its worker left it: measurements as JSON, verify's losses and
    parameters as plain arrays (read back without unpickling anything); None where this
    launcher had no rank 0."""
    if (out_dir / "result.json").is_file():
        return json.loads((out_dir / "result.json").read_text())
    if not (out_dir / "trained.npz").is_file():
        return None
    with np.load(out_dir / "trained.npz", allow_pickle=False) as arrays:
        losses, *parameters = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
        return Trained(losses.tolist(), [torch.from_numpy(p) for p in parameters])
