"""`parbench max-batch`: the largest global batch each strategy trains in memory."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from parbench.commands.arguments import (
    UsageError,
    add_common_arguments,
    add_strategy_options,
    at_least,
    checked,
    choice_list,
    default_devices,
    device_set,
    image_sizes,
    new_run_folder,
    positive,
    strategy_names,
    strategy_option_sweep,
)
from parbench.commands.environment import measuring_environment
from parbench.drive.max_batch import MaxBatchError, find_max_batch, first_batch
from parbench.families.workloads import MODELS, PRECISIONS, Workload
from parbench.plan.config import Config, options_for
from parbench.results.record import Record

__all__ = ["command_max_batch"]


def command_max_batch(args: argparse.Namespace) -> int:
    names = strategy_names(args.strategy)
    devices = device_set(args.devices or default_devices()[0])
    cap = at_least("--memory-cap-mib", args.memory_cap_mib, 1) if args.memory_cap_mib else None
    if cap is None and devices.kind == "cpu":
        raise UsageError("on CPU give --memory-cap-mib: a CPU has no device memory to run out "
                         "of, only the machine's")
    start = at_least("--start", args.start, 1)
    limit = at_least("--limit", args.limit, start)
    model = choice_list("--model", args.model, MODELS)[0]
    workload = Workload(model=model, image_size=image_sizes(args.image_size, [model])[0],
                        num_classes=at_least("--num-classes", args.num_classes, 1),
                        precision=choice_list("--precision", args.precision, PRECISIONS)[0],
                        channels_last=args.channels_last)
    [options] = strategy_option_sweep(args, sweep=False)
    configs = []
    for name in names:
        config = Config(name, workload, start, devices, warmup=1, steps=1,
                        options=options_for(name, options),
                        threads_per_device=at_least("--threads-per-device",
                                                    args.threads_per_device, 1),
                        memory_cap_mib=cap, timeout_s=positive("--timeout", args.timeout))
        first = replace(config, global_batch=first_batch(config, limit))
        reason = checked(first).unavailable_reason()
        if reason:
            raise UsageError(f"{name} cannot run on {devices.describe()} here: {reason}")
        configs.append(config)
    folder = new_run_folder(args.results_dir, "max-batch")
    folder.write_environment(measuring_environment())
    records: list[Record] = []
    found = []

    def on_trial(record: Record) -> None:
        records.append(replace(record, config_index=len(records), run_id=folder.run_id))
        folder.write_records(records)
        peak = record.peak_memory_max_mib
        print(f"  {record.strategy} batch {record.global_batch}: {record.status}"
              + (f", peak {peak:.0f} MiB per device" if peak else ""), file=sys.stderr,
              flush=True)

    for config in configs:
        try:
            batch, limited, _ = find_max_batch(config, limit, on_trial)
        except MaxBatchError as error:
            print(f"{config.strategy}: no answer: {error}")
            continue
        found.append((config.strategy, batch, limited))
    cap_text = f", {cap} MiB per process" if cap else ""
    print(f"largest global batch that trains ({workload.model}, {workload.image_size}px, "
          f"{devices.describe()}{cap_text}):")
    for name, batch, limited in found:
        print(f"  {name:<26} {batch if batch else 'none (not even the smallest)'}"
              + (f" (the --limit {limit} stopped the search)" if limited else ""))
    print(f"results: {folder.path}")
    return 0 if len(found) == len(configs) else 1


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench max-batch`: its parser and arguments."""
    largest = commands.add_parser(
        "max-batch", help="find the largest global batch each strategy trains in memory",
        description="Doubling, then bisection: each trial trains its warm-up (one step; two for "
                    "a strategy of a process per rank) and one measured step; out of memory "
                    "ends a trial. On CPU a per-process cap stands in for device memory "
                    "(--memory-cap-mib).")
    largest.add_argument("--strategy", required=True, help="strategies (comma list)")
    largest.add_argument("--model", default="resnet50")
    largest.add_argument("--image-size", default="128")
    largest.add_argument("--num-classes", type=int, default=1000)
    largest.add_argument("--precision", default="fp32", help=f"{', '.join(PRECISIONS)}")
    largest.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    largest.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    largest.add_argument("--memory-cap-mib", type=int, help="each process may allocate this "
                         "many MiB beyond what it holds at the start (needed on CPU)")
    largest.add_argument("--start", type=int, default=1, help="first batch tried (default 1)")
    largest.add_argument("--limit", type=int, default=4096, help="largest batch tried")
    add_strategy_options(largest, sweep=False)
    add_common_arguments(largest, "--threads-per-device", "--timeout", "--results-dir")
    largest.set_defaults(handler=command_max_batch)
