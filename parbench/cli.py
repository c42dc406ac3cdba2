"""The `parbench` command line: run and verify sweeps, find the largest batch, plot and report
results, show the environment, list strategies."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from tqdm import tqdm

import strategies
from parbench import launch, runner, suite
from parbench.checks import ConfigError, check
from parbench.config import Config, expand_sweep
from parbench.data import DataError, open_image_folder
from parbench.devices import DeviceError, DeviceSet, cpu_cores, parse_devices
from parbench.environment import collect_environment, format_environment
from parbench.max_batch import MaxBatchError, batch_unit, find_max_batch
from parbench.plots import write_figures
from parbench.report import results_table, write_index, write_run_report
from parbench.results import ResultsError, RunFolder, load_records, read_results
from parbench.verify import verify
from parbench.workloads import MIN_IMAGE_SIZE, MODELS, PRECISIONS, Workload
from strategies.partition import BALANCES

__all__ = ["QUICK_RUN", "main"]

EXIT_USAGE = 2

# `parbench run` with no arguments measures the suite's configuration (resnet18, batch 32,
# 128 px, 2 + 5 steps), as asv and pytest-benchmark do: about a minute on two CPU cores.
QUICK_RUN = dict(model=suite.MODELS[0], batch_size=str(suite.GLOBAL_BATCH),
                 image_size=str(suite.IMAGE_SIZE), steps=suite.STEPS, warmup=suite.WARMUP)


class UsageError(Exception):
    """Bad input: reported as one line and exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line instead of usage plus error."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


# ---- argument types: each turns one bad value into a UsageError naming the fix ----------------

def _comma_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"empty list {text!r}; give one or more comma-separated values")
    return items


def _int_list(flag: str, text: str, minimum: int) -> list[int]:
    values = []
    for item in _comma_list(text):
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{flag} {item!r} is not a whole number") from None
        if value < minimum:
            raise UsageError(f"{flag} must be at least {minimum}, got {value}")
        values.append(value)
    return values


def _choice_list(flag: str, text: str, choices: Sequence[str]) -> list[str]:
    values = _comma_list(text)
    for value in values:
        if value not in choices:
            raise UsageError(f"unknown {flag.lstrip('-').replace('-', ' ')} {value!r}; "
                             f"available: {', '.join(choices)}")
    return values


def _at_least(flag: str, value: int, minimum: int) -> int:
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")
    return value


def _device_set(spec: str) -> DeviceSet:
    try:
        return parse_devices(spec)
    except DeviceError as error:
        raise UsageError(str(error)) from None


def _default_devices() -> list[str]:
    """All GPUs when there are several; else two logical devices on the one physical device."""
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        return [",".join(f"cuda:{i}" for i in range(gpus))]
    return ["cuda:0,cuda:0" if gpus == 1 else "cpu,cpu"]


# ---- commands ----------------------------------------------------------------------------------

def _check_split(split: int, batch: int) -> None:
    if split > batch:
        raise UsageError(f"--split-size {split} is larger than --batch-size {batch}; "
                         "a micro-batch cannot exceed the global batch")


def _data_parallel_options(args: argparse.Namespace) -> dict:
    """DistributedDataParallel's settings (not swept: one value each)."""
    if args.bucket_cap_mb is not None and not args.bucket_cap_mb > 0:
        raise UsageError(f"--bucket-cap-mb must be above 0, got {args.bucket_cap_mb}")
    return dict(bucket_cap_mb=args.bucket_cap_mb,
                gradient_as_bucket_view=args.gradient_as_bucket_view or None,
                static_graph=args.static_graph or None,
                sync_batchnorm=args.sync_batchnorm or None)


def _strategy_options(args: argparse.Namespace, batches: list[int]) -> list[dict]:
    """Every combination of the swept strategy options (each strategy takes those it knows)."""
    splits = _int_list("--split-size", args.split_size, 1) if args.split_size else [None]
    stages = _int_list("--stages", args.stages, 2) if args.stages else [None]
    balances = _choice_list("--balance", args.balance, BALANCES) if args.balance else [None]
    ranks = _int_list("--world-size", args.world_size, 1) if args.world_size else [None]
    for split in splits:
        if split is not None:
            _check_split(split, min(batches))
    if "tutorial" in balances and any(k not in (None, 2) for k in stages):
        raise UsageError("--balance tutorial cuts into 2 stages only; use --balance time or "
                         "params with --stages above 2")
    fixed = _data_parallel_options(args)
    return [dict(split_size=split, stages=k, balance=balance, world_size=n, **fixed)
            for split in splits for k in stages for balance in balances for n in ranks]


def _build_configs(args: argparse.Namespace,
                   device_sets: list[DeviceSet] | None = None) -> list[Config]:
    requested = args.strategy is not None
    names = _choice_list("--strategy", args.strategy, strategies.names()) if requested else None
    device_sets = device_sets or [_device_set(spec) for spec in (args.devices or
                                                                 _default_devices())]
    if names is None:  # the quick comparison: whatever can run on the first device set
        reasons = strategies.available(device_sets[0].logical)
        names = [name for name, reason in reasons.items() if reason is None] or ["single"]
        if launch.torchrun_rank() is not None:
            names = [n for n in names if n == strategies.BASELINE
                     or strategies.lookup(n).cls.process_per_device]
    batches = _int_list("--batch-size", args.batch_size, 1)
    if args.compile and args.warmup < 1:
        raise UsageError("--compile needs --warmup 1 or more: the first step compiles the "
                         "model, and that step must not be measured")
    configs = expand_sweep(
        strategy=names,
        model=_choice_list("--model", args.model, MODELS),
        global_batch=batches,
        image_size=_int_list("--image-size", args.image_size, MIN_IMAGE_SIZE),
        precision=_choice_list("--precision", args.precision, PRECISIONS),
        devices=device_sets,
        options=_strategy_options(args, batches),
        num_classes=_at_least("--num-classes", args.num_classes, 1),
        channels_last=args.channels_last,
        compile=args.compile,
        seed=args.seed,
        warmup=_at_least("--warmup", args.warmup, 0),
        steps=_at_least("--steps", args.steps, 1),
        threads_per_device=_at_least("--threads-per-device", args.threads_per_device, 1),
        timeout_s=_positive("--timeout", args.timeout),
        backend=args.backend,
        loader_workers=_at_least("--loader-workers", args.loader_workers, 0),
        memory_cap_mib=(_at_least("--memory-cap-mib", args.memory_cap_mib, 1)
                        if args.memory_cap_mib is not None else None),
    )
    if args.data:
        configs = [replace(c, workload=replace(c.workload, data_dir=args.data)) for c in configs]
    checked_data = set()
    for config in configs:
        # The quick comparison records a strategy that cannot train the workload as skipped.
        _check(config, check_workload=requested)
        if args.data and (config.workload, config.global_batch) not in checked_data:
            checked_data.add((config.workload, config.global_batch))
            try:
                open_image_folder(config.workload, config.global_batch)
            except DataError as error:
                raise UsageError(str(error)) from None
    return configs


def _check(config: Config, check_workload: bool = True) -> None:
    try:
        check(config, check_workload)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _positive(flag: str, value: float) -> float:
    if not value > 0:
        raise UsageError(f"{flag} must be above 0, got {value}")
    return value


def _torchrun_devices(args: argparse.Namespace) -> list[DeviceSet]:
    """Under torchrun: every rank's device (each process drives one), after joining the job."""
    specs = args.devices or []
    if len(specs) > 1 or any("," in spec for spec in specs):
        raise UsageError("under torchrun each process drives one device: give --devices cpu or "
                         "--devices cuda (rank r uses cuda:LOCAL_RANK), and the number of "
                         "processes with torchrun's --nnodes and --nproc-per-node")
    kind = (_device_set(specs[0]).kind if specs else
            "cuda" if torch.cuda.is_available() else "cpu")
    if kind != "cuda" and args.backend == "nccl":
        raise UsageError("--backend nccl needs CUDA devices; use --backend gloo on CPU (or "
                         "leave it at auto)")
    try:
        return [launch.join_torchrun(kind, args.backend, _positive("--timeout", args.timeout))]
    except launch.LaunchError as error:
        raise UsageError(str(error)) from None


# Arguments that say how to run, not what to measure: not stored for --resume.
_NOT_SWEEP = ("handler", "command", "resume", "progress", "results_dir", "tag")


def _sweep_arguments(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in _NOT_SWEEP}


def _resumed_arguments(args: argparse.Namespace, folder: RunFolder) -> argparse.Namespace:
    """The run's own sweep arguments; any given again must agree with them."""
    try:
        stored = folder.read_command()
    except ResultsError as error:
        raise UsageError(str(error)) from None
    defaults = _sweep_arguments(_parser().parse_args(["run"]))
    for key, given in _sweep_arguments(args).items():
        if given != defaults.get(key) and given != stored.get(key):
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"{flag} {given} differs from the resumed run's {stored.get(key)}; "
                             f"resume with `parbench run --resume {folder.path}` alone, or "
                             "start a new run")
    return argparse.Namespace(**{**vars(args), **stored})


def _command_run(args: argparse.Namespace) -> int:
    rank = launch.torchrun_rank()
    if args.resume:
        if rank is not None:
            raise UsageError("--resume is not supported under torchrun; resume without it")
        try:
            folder = RunFolder.open(args.resume)
        except ResultsError as error:
            raise UsageError(str(error)) from None
        args = _resumed_arguments(args, folder)
        return _run_and_record(args, _build_configs(args), rank, folder)
    if rank is None:
        return _run_and_record(args, _build_configs(args), rank)
    try:
        configs = _build_configs(args, _torchrun_devices(args))
        if rank != 0:  # rank 0 writes the records
            runner.follow_sweep(configs)
            return 0
        return _run_and_record(args, configs, rank)
    finally:
        launch.leave_torchrun()


def _run_and_record(args: argparse.Namespace, configs: list[Config], rank: int | None,
                    resumed: RunFolder | None = None) -> int:
    """Measure the sweep into a new run folder (or what a resumed one lacks) and print its
    table (rank 0 under torchrun)."""
    cpu_threads = max((c.threads_per_device * len(c.used_devices) for c in configs
                       if c.used_devices.kind == "cpu"), default=0)
    if cpu_threads > cpu_cores() and rank is None:
        print(f"warning: up to {cpu_threads} threads on {cpu_cores()} cores: emulated devices "
              "will compete for cores; lower --threads-per-device", file=sys.stderr)
    previous = resumed.read_records() if resumed else []
    folder = resumed or _new_run_folder(args.results_dir, args.tag)
    try:
        folder.write_command(_sweep_arguments(args))
    except OSError as error:
        raise UsageError(f"cannot write to {folder.path} ({error.strerror or error})") from None
    kept = {r.get("config_key") for r in previous if r.get("status") in runner.FINAL_STATUSES}
    already = sum(c.key() in kept for c in configs)
    if resumed:
        print(f"resuming {folder.path}: {already} of {len(configs)} configurations already "
              "measured", file=sys.stderr)

    show_bar = args.progress == "on" or (args.progress == "auto" and sys.stderr.isatty())
    bar = tqdm(total=len(configs), initial=already, file=sys.stderr, unit="config",
               dynamic_ncols=True,
               bar_format="{n_fmt}/{total_fmt} [{elapsed}<{remaining}] {desc}",
               disable=not show_bar)

    def on_start(index: int, config: Config) -> None:
        if show_bar:
            bar.set_description_str(config.label())
        else:
            print(f"[{index + 1}/{len(configs)}] {config.label()}", file=sys.stderr, flush=True)

    def on_done(index: int, record: dict) -> None:
        bar.update(1)
        if record["status"] != "ok":
            bar.write(f"  {record['strategy']} {record['status']}: {record['reason']}",
                      file=sys.stderr)

    try:
        runner.run_sweep(configs, folder, collect_environment(), on_start=on_start,
                         on_done=on_done, stop_on_failure=rank is not None, previous=previous)
    except launch.LaunchError as error:
        print(f"parbench: stopped under torchrun ({error}); records so far: {folder.path}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        bar.close()
        measured = len(folder.read_records()) if (folder.path / "records.json").is_file() else 0
        print(f"parbench: interrupted; {measured} configuration(s) are recorded in "
              f"{folder.path}; measure the rest with `parbench run --resume {folder.path}`",
              file=sys.stderr)
        return 130
    finally:
        bar.close()
    print(results_table(load_records(folder.path)))
    print(f"results: {folder.path}")
    return 0


def _command_verify(args: argparse.Namespace) -> int:
    if launch.torchrun_rank() is not None:
        raise UsageError("run parbench verify without torchrun; it starts its own processes")
    devices = _device_set(args.devices or _default_devices()[0])
    batch = _int_list("--batch-size", args.batch_size, 1)[0]
    split = _int_list("--split-size", args.split_size, 1)[0] if args.split_size else max(
        1, batch // 4)
    _check_split(split, batch)
    options = dict(split_size=split,
                   stages=_int_list("--stages", args.stages, 2)[0] if args.stages else None,
                   balance=_choice_list("--balance", args.balance, BALANCES)[0]
                   if args.balance else None,
                   world_size=_int_list("--world-size", args.world_size, 1)[0]
                   if args.world_size else None)
    if args.strategy:
        names = _choice_list("--strategy", args.strategy, strategies.names())
    else:
        names = [name for name, reason in strategies.available(devices.logical).items()
                 if reason is None and name != strategies.BASELINE]
    workload = Workload(model=_choice_list("--model", args.model, MODELS)[0],
                        image_size=_int_list("--image-size", args.image_size, MIN_IMAGE_SIZE)[0],
                        num_classes=_at_least("--num-classes", args.num_classes, 1),
                        seed=args.seed)
    for name in names:
        _check(Config(name, workload, batch, devices,
                      options=strategies.options_for(name, options)))
    tolerance = args.tolerance
    if not tolerance > 0:
        raise UsageError(f"--tolerance must be above 0, got {tolerance}")
    print(f"one SGD step of {workload.model} on batch {batch} ({workload.image_size}px) from "
          f"seed {args.seed}, against {strategies.BASELINE} on {devices.logical[0]}; "
          "micro-batched strategies against the baseline accumulating gradients over the same "
          "micro-batches, data-parallel ones against it accumulating over the replicas' "
          "shards (so BatchNorm sees the same samples)", flush=True)
    verdicts = verify(workload, devices, names, batch, options, tolerance,
                      _at_least("--threads-per-device", args.threads_per_device, 1))
    print(f"{'strategy':<16} {'options':<34} {'max |param diff|':>16} {'baseline step':>14}"
          f"  {'tolerance':>9}  result")
    for v in verdicts:
        options_text = ",".join(f"{k}={val}" for k, val in v.options.items())
        print(f"{v.strategy:<16} {options_text:<34} {v.max_abs_difference:>16.3e} "
              f"{v.baseline_update:>14.3e}  {v.tolerance:>9.1e}  "
              f"{'ok' if v.ok else 'FAILED'}" + (f" ({v.error})" if v.error else ""))
    return 0 if all(v.ok for v in verdicts) else 1


def _results(args: argparse.Namespace):
    try:
        return read_results(args.results)
    except ResultsError as error:
        raise UsageError(str(error)) from None


def _output_folder(args: argparse.Namespace, default: Path) -> Path:
    out = Path(args.out) if args.out else default
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"cannot write to {str(out)!r} ({error.strerror or error}); choose a "
                         "writable folder with --out") from None
    return out


def _command_plot(args: argparse.Namespace) -> int:
    frame, folder = _results(args)
    out = _output_folder(args, folder)
    written = write_figures(frame, out)
    if not written:
        print(f"no figure: none of the {len(frame)} records has status ok")
        return 1
    for path in written:
        print(f"{path} (+ .svg)")
    return 0


def _command_report(args: argparse.Namespace) -> int:
    frame, folder = _results(args)
    out = _output_folder(args, folder)
    report = write_run_report(frame, out, write_figures(frame, out))
    print(report)
    index_dir = Path(args.index) if args.index else out.parent
    print(write_index(index_dir))
    return 0


def _new_run_folder(results_dir: str, tag: str) -> RunFolder:
    try:
        return RunFolder.create(results_dir, tag)
    except OSError as error:
        raise UsageError(f"cannot write results to {results_dir!r} "
                         f"({error.strerror or error}); choose a writable folder with "
                         "--results-dir") from None


def _command_max_batch(args: argparse.Namespace) -> int:
    names = _choice_list("--strategy", args.strategy, strategies.names())
    devices = _device_set(args.devices or _default_devices()[0])
    cap = _at_least("--memory-cap-mib", args.memory_cap_mib, 1) if args.memory_cap_mib else None
    if cap is None and devices.kind == "cpu":
        raise UsageError("on CPU give --memory-cap-mib: a CPU has no device memory to run out "
                         "of, only the machine's")
    start = _at_least("--start", args.start, 1)
    limit = _at_least("--limit", args.limit, start)
    workload = Workload(model=_choice_list("--model", args.model, MODELS)[0],
                        image_size=_int_list("--image-size", args.image_size,
                                             MIN_IMAGE_SIZE)[0],
                        num_classes=_at_least("--num-classes", args.num_classes, 1))
    configs = []
    for name in names:
        config = Config(name, workload, start, devices, warmup=1, steps=1,
                        threads_per_device=_at_least("--threads-per-device",
                                                     args.threads_per_device, 1),
                        memory_cap_mib=cap, timeout_s=_positive("--timeout", args.timeout))
        _check(replace(config, global_batch=batch_unit(config)))
        reason = strategies.skip_reason(name, workload, config.used_devices.logical)
        if reason:
            raise UsageError(f"{name} cannot run on {devices.describe()} here: {reason}")
        configs.append(config)
    folder = _new_run_folder(args.results_dir, "max-batch")
    folder.write_environment(collect_environment())
    records, found = [], []

    def on_trial(record: dict) -> None:
        records.append({**record, "config_index": len(records), "run_id": folder.run_id})
        folder.write_records(records)
        peak = record["peak_memory_max_mib"]
        print(f"  {record['strategy']} batch {record['global_batch']}: {record['status']}"
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
        print(f"  {name:<16} {batch if batch else 'none (not even the smallest)'}"
              + (f" (the --limit {limit} stopped the search)" if limited else ""))
    print(f"results: {folder.path}")
    return 0 if len(found) == len(configs) else 1


def _command_env(args: argparse.Namespace) -> int:
    print(format_environment(collect_environment()))
    return 0


def _command_strategies(args: argparse.Namespace) -> int:
    devices = _device_set(args.devices or _default_devices()[0])
    for name, reason in strategies.available(devices.logical).items():
        summary = strategies.lookup(name).cls.summary
        print(f"{name:<16} {summary}" + ("" if reason is None else f"  [unavailable: {reason}]"))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parbench", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run", help="measure strategies (every option taking a comma list sweeps over it)",
        description="Train a ResNet with each strategy on synthetic data and record throughput, "
                    "step times and peak memory. Comma lists sweep: each point is one record.")
    run.add_argument("--strategy", help="strategies to compare (default: every one that can run "
                     f"here; available: {', '.join(strategies.names())})")
    run.add_argument("--model", default=QUICK_RUN["model"], help=f"{', '.join(MODELS)}")
    run.add_argument("--batch-size", default=QUICK_RUN["batch_size"],
                     help="global batch per optimiser step (comma list sweeps)")
    run.add_argument("--image-size", default=QUICK_RUN["image_size"],
                     help="square image side in pixels")
    run.add_argument("--num-classes", type=int, default=1000)
    run.add_argument("--precision", default="fp32", help=f"{', '.join(PRECISIONS)} (autocast; "
                     "fp16 adds gradient scaling)")
    run.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    run.add_argument("--compile", action="store_true",
                     help="torch.compile the model (each stage, each replica); the first "
                          "warm-up step compiles, its time is recorded apart "
                          "(compile_time_s), so --warmup must be at least 1")
    run.add_argument("--devices", action="append",
                     help="logical devices, e.g. cpu, cuda:0, cpu,cpu (emulated) or "
                          "cuda:0,cuda:1; repeat the flag to sweep device sets "
                          "(default: all GPUs, else two logical devices on one)")
    run.add_argument("--split-size", help="micro-batch size for pipelines: the batch is cut "
                     "into ceil(batch/split) near-equal micro-batches (list sweeps; default: "
                     "4 micro-batches per stage)")
    run.add_argument("--stages", help="pipeline stages for model-parallel strategies, using "
                     "the first N devices (list sweeps; default: one per device)")
    run.add_argument("--balance", help="where to cut the ResNet: tutorial (conv1..layer2 | "
                     "layer3..fc, 2 stages), time (equal measured time), params (equal "
                     "parameter counts) (default: tutorial for 2 stages, else time)")
    run.add_argument("--world-size", help="data-parallel ranks (ddp, fsdp, data-parallel), "
                     "using the first N devices (list sweeps: scaling curve and efficiency "
                     "T(N)/(N*T(1)); default: one per device)")
    run.add_argument("--backend", default="auto", choices=launch.BACKENDS,
                     help="process group for one-process-per-device strategies (default auto: "
                          "NCCL when every rank has its own GPU, else gloo)")
    run.add_argument("--bucket-cap-mb", type=float, help="ddp: gradient bucket size in MB "
                     "(DDP's default 25)")
    run.add_argument("--gradient-as-bucket-view", action="store_true",
                     help="ddp: gradients are views into the all-reduce buckets (less memory)")
    run.add_argument("--static-graph", action="store_true",
                     help="ddp: declare the graph static (DDP may then skip per-step checks)")
    run.add_argument("--sync-batchnorm", action="store_true",
                     help="ddp: BatchNorm statistics over the global batch (CUDA only)")
    run.add_argument("--data", help="train on an image folder (one subfolder per class) "
                     "instead of synthetic data; each rank reads its part through "
                     "DistributedSampler")
    run.add_argument("--loader-workers", type=int, default=0,
                     help="DataLoader worker processes per rank for --data (default 0)")
    run.add_argument("--memory-cap-mib", type=int, help="each process may allocate this many "
                     "MiB beyond what it holds at the start (CPU: a memory limit to run out "
                     "of, as on a GPU; beyond it the configuration is recorded as oom)")
    run.add_argument("--timeout", type=float, default=1800.0,
                     help="seconds a configuration may take before its processes are stopped "
                          "and it is recorded as an error (default 1800)")
    run.add_argument("--steps", type=int, default=QUICK_RUN["steps"], help="measured steps")
    run.add_argument("--warmup", type=int, default=QUICK_RUN["warmup"],
                     help="steps run before measuring and discarded")
    run.add_argument("--threads-per-device", type=int, default=1,
                     help="CPU threads per logical CPU device (default 1: N devices = N cores)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                     help="a progress bar naming the configuration being measured, with an "
                          "ETA (default auto: on when stderr is a terminal; else a line per "
                          "configuration)")
    run.add_argument("--resume", metavar="RUN", help="measure only what the run folder RUN "
                     "lacks (its own arguments are used; failed configurations are measured "
                     "again)")
    run.add_argument("--results-dir", default="results", help="where run folders are written")
    run.add_argument("--tag", default="", help="suffix for the run folder's name")
    run.set_defaults(handler=_command_run)

    check = commands.add_parser(
        "verify", help="check every strategy's step equals the single-device step",
        description="From one seed, one optimiser step of each strategy against the "
                    "single-device baseline on the same global batch; prints the largest "
                    "parameter difference and exits 1 above the tolerance.")
    check.add_argument("--strategy", help="strategies to check (default: every one that can "
                       "run here)")
    check.add_argument("--model", default="resnet18")
    check.add_argument("--batch-size", default="8")
    check.add_argument("--image-size", default="64")
    check.add_argument("--num-classes", type=int, default=10)
    check.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    check.add_argument("--split-size", help="micro-batch size (default: batch / 4)")
    check.add_argument("--stages")
    check.add_argument("--balance")
    check.add_argument("--world-size", help="data-parallel ranks (default: one per device)")
    check.add_argument("--threads-per-device", type=int, default=1)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest accepted absolute parameter difference (default 1e-5)")
    check.set_defaults(handler=_command_verify)

    largest = commands.add_parser(
        "max-batch", help="find the largest global batch each strategy trains in memory",
        description="Doubling, then bisection: each trial trains one warm-up and one measured "
                    "step; out of memory ends a trial. On CPU a per-process cap stands in for "
                    "device memory (--memory-cap-mib).")
    largest.add_argument("--strategy", required=True, help="strategies (comma list)")
    largest.add_argument("--model", default="resnet50")
    largest.add_argument("--image-size", default="128")
    largest.add_argument("--num-classes", type=int, default=1000)
    largest.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    largest.add_argument("--memory-cap-mib", type=int, help="each process may allocate this "
                         "many MiB beyond what it holds at the start (needed on CPU)")
    largest.add_argument("--start", type=int, default=1, help="first batch tried (default 1)")
    largest.add_argument("--limit", type=int, default=4096, help="largest batch tried")
    largest.add_argument("--threads-per-device", type=int, default=1)
    largest.add_argument("--timeout", type=float, default=1800.0)
    largest.add_argument("--results-dir", default="results")
    largest.set_defaults(handler=_command_max_batch)

    plot = commands.add_parser(
        "plot", help="draw figures from results",
        description="Strategy comparison, scaling curve, memory per device and split-size "
                    "trade-off, as PNG and SVG, from run folders, records files or "
                    "pytest-benchmark JSON.")
    plot.add_argument("results", nargs="+", help="run folders, records.json/.csv files, or "
                      "pytest --benchmark-json output")
    plot.add_argument("--out", help="where the figures go (default: the first run folder)")
    plot.set_defaults(handler=_command_plot)

    report = commands.add_parser(
        "report", help="write a run's README.md with its figures and the results index",
        description="Write README.md into the run folder (environment, figures, every "
                    "record) and refresh the table of runs in the results folder's README.md.")
    report.add_argument("results", nargs="+", help="as for plot")
    report.add_argument("--out", help="the run folder to write into (default: the first one)")
    report.add_argument("--index", help="results folder whose README.md indexes every run "
                        "(default: the run folder's parent)")
    report.set_defaults(handler=_command_report)

    env = commands.add_parser("env", help="print what results are stamped with")
    env.set_defaults(handler=_command_env)

    listing = commands.add_parser("strategies", help="list strategies and whether they can run")
    listing.add_argument("--devices", help="device list to check against (default as for run)")
    listing.set_defaults(handler=_command_strategies)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM (a scheduler, `kill`) stops a sweep as Ctrl-C does: workers are stopped and
    # every finished configuration is already on disk.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        args = _parser().parse_args(argv)
        return args.handler(args)
    except UsageError as error:
        print(f"parbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parbench: interrupted; records measured so far are in the run folder",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`parbench strategies | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
