"""`parbench collectives`: all-reduce, all-gather and reduce-scatter bandwidth over message
sizes on the given devices and backend, written as rows and a figure."""

from __future__ import annotations

import argparse
import re

from parbench import launch
from parbench.commands.arguments import (
    UsageError,
    add_common_arguments,
    at_least,
    checked,
    choice_list,
    default_devices,
    device_set,
    new_run_folder,
    open_run_folder,
    positive,
)
from parbench.commands.environment import measuring_environment
from parbench.families.workloads import Workload
from parbench.machine.devices import format_bytes
from parbench.measure.collectives import COLLECTIVES, bus_bandwidth
from parbench.plan.config import Config
from parbench.plan.planning import BACKENDS
from parbench.plots import write_collectives_figure
from parbench.results.folder import ResultsError, RunFolder

__all__ = ["command_collectives", "message_sizes", "parse_size"]

_UNITS = {"": 1, "B": 1, "K": 2**10, "KIB": 2**10, "M": 2**20, "MIB": 2**20, "G": 2**30,
          "GIB": 2**30}


def parse_size(flag: str, text: str) -> int:
    """Bytes from `4096`, `4K`, `4KiB`, `256M`, `1GiB`."""
    match = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = _UNITS.get(match.group(2).upper()) if match else None
    if match is None or not unit:
        raise UsageError(f"{flag} {text!r} is not a size; give bytes or a size such as 4KiB, "
                         "256MiB")
    value = int(match.group(1)) * unit
    if value < 4:
        raise UsageError(f"{flag} must be at least 4 bytes (one float32), got {text}")
    return value


def message_sizes(smallest: int, largest: int, factor: int) -> list[int]:
    """smallest, smallest x factor, ... up to largest (nccl-tests' -b, -e and -f)."""
    if largest < smallest:
        raise UsageError(f"--max-size ({largest} bytes) is below --min-size ({smallest} "
                         "bytes)")
    sizes = [smallest]
    while sizes[-1] * factor <= largest:
        sizes.append(sizes[-1] * factor)
    return sizes


def command_collectives(args: argparse.Namespace) -> int:
    if launch.job_rank() is not None:
        raise UsageError("run parbench collectives without torchrun or srun; it starts its own "
                         "processes")
    into = open_run_folder(args.into) if args.into else None
    widest = _widest_devices(into) if into and not args.devices else None
    devices = device_set(args.devices or widest or default_devices()[0])
    if len(devices) < 2:
        used = f" (the most devices {args.into}'s records used)" if widest else ""
        raise UsageError(f"collectives need at least 2 devices, got {devices.describe()}{used}; "
                         "e.g. --devices cpu,cpu")
    names = choice_list("--collective", args.collective, list(COLLECTIVES))
    sizes = message_sizes(parse_size("--min-size", args.min_size),
                          parse_size("--max-size", args.max_size),
                          at_least("--factor", args.factor, 2))
    iterations = at_least("--iterations", args.iterations, 1)
    warmup = at_least("--warmup", args.warmup, 0)
    threads = at_least("--threads-per-device", args.threads_per_device, 1)
    timeout_s = positive("--timeout", args.timeout)
    # Into a run: every group size its strategies may need on these devices (a pipeline's
    # 2-rank sends beside ddp's N ranks), each on the first devices, as those strategies use
    # them; the rows of the groups measured replace theirs, the others are kept.
    groups = range(2 if args.into else len(devices), len(devices) + 1)
    measured = [row for size in groups for row in _measured(
        args, devices.take(size), names, sizes, iterations, warmup, threads, timeout_s)]
    folder = into or new_run_folder(args.results_dir, args.tag or "collectives")
    rows = measured
    if into:
        groups_measured = {(r["world_size"], r["backend"], r["devices"]) for r in measured}
        rows = [r for r in into.read_collectives()
                if (r["world_size"], r["backend"], r["devices"]) not in groups_measured] + measured
    else:
        folder.write_environment(measuring_environment())
    folder.write_collectives(rows)
    figure = write_collectives_figure(rows, folder.path)
    print(f"{'group':<7} {'collective':<15} {'size':>10} {'time us':>12} {'algbw GB/s':>11} "
          f"{'busbw GB/s':>11}")
    for row in rows:
        print(f"{row['world_size']:>2}-rank {row['collective']:<15} "
              f"{format_bytes(row['size_bytes']):>10} "
              f"{row['time_s'] * 1e6:>12.1f} {row['algbw_gbps']:>11.3f} "
              f"{row['busbw_gbps']:>11.3f}")
    emulated = " (EMULATED: ranks share a device)" if devices.emulated else ""
    print(f"\n{', '.join(str(size) for size in groups)} ranks on {devices.describe()}, "
          f"{measured[0]['backend']}{emulated}; busbw = algbw x 2(n-1)/n for all-reduce, "
          "x (n-1)/n for all-gather and reduce-scatter (nccl-tests)")
    print(f"results: {folder.path / 'collectives.csv'}; figure: {figure}")
    return 0


def _widest_devices(run: RunFolder) -> str | None:
    """The most devices any of a run's records used on one host (its command's where it has
    no records): every group size its strategies may need lies within them. None where
    neither says, and for devices on several hosts, whose ranks this command cannot start."""
    try:
        listed = [r.devices for r in run.read_records() if r.devices] or [
            str(devices) for devices in run.read_command().get("devices") or []]
    except ResultsError:  # no records, and no readable command.json
        return None
    local = [devices for devices in listed if "/" not in devices]  # host/device: another host
    return max(local, key=lambda devices: len(devices.split(",")), default=None)


def _measured(args: argparse.Namespace, devices, names: list[str], sizes: list[int],
              iterations: int, warmup: int, threads: int, timeout_s: float) -> list[dict]:
    """Each collective's rows on `devices`, in the processes and process group a ddp
    configuration on them would start."""
    config = checked(Config("ddp", Workload(), len(devices), devices, backend=args.backend,
                            threads_per_device=threads, timeout_s=timeout_s))
    backend, world = config.plan.backend, len(devices)
    try:
        measured = launch.measure_collectives(config, names, sizes, iterations, warmup)
    except launch.LaunchError as error:
        raise UsageError(f"collectives on {devices.describe()} ({backend}) failed: "
                         f"{error}") from None
    rows = []
    for row in measured:
        algbw, busbw = bus_bandwidth(row["collective"], row["size_bytes"], row["time_s"], world)
        rows.append(dict(row, algbw_gbps=algbw, busbw_gbps=busbw, backend=backend,
                         world_size=world, devices=devices.describe(),
                         device_kind=devices.kind, emulated=devices.emulated,
                         iterations=iterations, warmup=warmup))
    return rows


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench collectives`: its parser and arguments."""
    collectives = commands.add_parser(
        "collectives", help="measure collective bandwidth (all-reduce, all-gather, "
        "reduce-scatter) over message sizes",
        description="One process per device, as ddp runs them (the same backend), times each "
                    "collective over message sizes and reports time, algorithm bandwidth "
                    "(size / time) and bus bandwidth with nccl-tests' definitions, as rows "
                    "and a figure (collectives.csv, collective-bandwidth-by-size.png).")
    collectives.add_argument("--devices", help="as for run, at least 2 (default: with "
                             "--into, the most devices the run's records used, or its "
                             "command's; else all GPUs, else cpu,cpu)")
    collectives.add_argument("--backend", default="auto", choices=BACKENDS,
                             help="as for run (default auto: NCCL when every rank has its own "
                                  "GPU, else gloo)")
    collectives.add_argument("--collective", default=",".join(COLLECTIVES),
                             help=f"comma list of {', '.join(COLLECTIVES)} (default: all)")
    collectives.add_argument("--min-size", default="4KiB", help="smallest message (default "
                             "4KiB)")
    collectives.add_argument("--max-size", default="256MiB", help="largest message (default "
                             "256MiB)")
    collectives.add_argument("--factor", type=int, default=4,
                             help="each size is the last times this (default 4)")
    collectives.add_argument("--iterations", type=int, default=5,
                             help="timed calls per size, averaged (default 5)")
    collectives.add_argument("--warmup", type=int, default=1,
                             help="untimed calls per size first (default 1)")
    collectives.add_argument("--into", metavar="RUN", help="write into this run folder (its "
                             "communication figure then draws the ideal DDP step, and "
                             "`predict RUN --link measured` reads it) instead of a new one: "
                             "every group size from 2 ranks to the devices given is measured, "
                             "and the folder's rows of other groups are kept")
    collectives.add_argument("--tag", default="", help="suffix for the new folder's name "
                             "(default: collectives)")
    add_common_arguments(collectives, "--threads-per-device", "--timeout", "--results-dir")
    collectives.set_defaults(handler=command_collectives)
