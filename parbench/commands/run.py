"""`parbench run`: build the sweep from the arguments, measure it into a run folder (new, resumed,
or under torchrun), and print what a reader compares."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

import torch
from tqdm import tqdm

import strategies
from parbench import launch, runner
from parbench.checks import ConfigError, PlanRefused, check
from parbench.commands.arguments import (
    UsageError,
    at_least,
    choice_list,
    default_devices,
    device_set,
    int_list,
    new_run_folder,
    open_run_folder,
    positive,
    strategy_names,
    strategy_option_sweep,
)
from parbench.config import Config, expand_sweep, weakly_scaled
from parbench.data import DataError, open_image_folder
from parbench.devices import DeviceSet, cpu_cores
from parbench.environment import collect_environment
from parbench.record import Record
from parbench.report import results_table
from parbench.results import ResultsError, RunFolder, load_records
from parbench.workloads import MIN_IMAGE_SIZE, MODELS, PRECISIONS
from strategies.single import accumulating

__all__ = ["build_configs", "command_run"]


def build_configs(args: argparse.Namespace,
                   device_sets: list[DeviceSet] | None = None) -> list[Config]:
    requested = args.strategy is not None
    names = strategy_names(args.strategy) if requested else None
    device_sets = device_sets or [device_set(spec) for spec in (args.devices or
                                                                 default_devices())]
    if names is None:  # the quick comparison: whatever can run on the first device set
        reasons = strategies.available(device_sets[0].logical)
        names = ([name for name, reason in reasons.items() if reason is None]
                 or [strategies.BASELINE])
        if launch.torchrun_rank() is not None:
            names = [n for n in names if n == strategies.BASELINE
                     or strategies.lookup(n).cls.process_per_device]
    batches = int_list("--batch-size", args.batch_size, 1)
    if args.compile and args.warmup < 1:
        raise UsageError("--compile needs --warmup 1 or more: the first step compiles the "
                         "model, and that step must not be measured")
    configs = expand_sweep(
        strategy=names,
        model=choice_list("--model", args.model, MODELS),
        global_batch=batches,
        image_size=int_list("--image-size", args.image_size, MIN_IMAGE_SIZE),
        precision=choice_list("--precision", args.precision, PRECISIONS),
        devices=device_sets,
        options=strategy_option_sweep(args),
        num_classes=at_least("--num-classes", args.num_classes, 1),
        channels_last=args.channels_last,
        compile=args.compile,
        seed=args.seed,
        warmup=at_least("--warmup", args.warmup, 0),
        steps=at_least("--steps", args.steps, 1),
        threads_per_device=at_least("--threads-per-device", args.threads_per_device, 1),
        timeout_s=positive("--timeout", args.timeout),
        backend=args.backend,
        loader_workers=at_least("--loader-workers", args.loader_workers, 0),
        memory_cap_mib=(at_least("--memory-cap-mib", args.memory_cap_mib, 1)
                        if args.memory_cap_mib is not None else None),
    )
    if getattr(args, "scaling", "strong") == "weak":  # runs stored before --scaling: strong
        configs = [weakly_scaled(c) for c in configs]
    if args.data:
        configs = [replace(c, workload=replace(c.workload, data_dir=args.data)) for c in configs]
    checked_data = set()
    for config in configs:
        # The quick comparison records a strategy that cannot train the workload as skipped.
        try:
            check(config, check_workload=requested)
        except PlanRefused:
            pass  # Config.refusal says why; see _refuse_or_skip
        except ConfigError as error:
            raise UsageError(str(error)) from None
        if args.data and (config.workload, config.global_batch) not in checked_data:
            checked_data.add((config.workload, config.global_batch))
            try:
                open_image_folder(config.workload, config.global_batch)
            except DataError as error:
                raise UsageError(str(error)) from None
    _refuse_or_skip(configs)
    if args.accumulation_split is None:
        configs = _with_accumulation_baselines(configs)
    if requested:  # a strategy named for nothing it can run here is refused, not skipped
        for name in names:
            reasons = [c.refusal() or c.unavailable_reason() for c in configs
                       if c.strategy == name]
            if reasons and all(reasons):
                raise UsageError(f"{name} cannot run here: {reasons[0]}")
    return configs


def _refuse_or_skip(configs: list[Config]) -> None:
    """A strategy that refuses every combination of the sweep is a usage error; one that
    refuses only some (a schedule's micro-batch count, say) has those recorded as skipped,
    with its reason, and the sweep measures the rest."""
    for name in dict.fromkeys(c.strategy for c in configs if c.refusal()):
        reasons = [c.refusal() for c in configs if c.strategy == name]
        if all(reasons):
            raise UsageError(reasons[0])
        print(f"note: {name} refuses {sum(map(bool, reasons))} of its {len(reasons)} "
              f"configurations, recorded as skipped; the first: {next(filter(None, reasons))}",
              file=sys.stderr)


def _with_accumulation_baselines(configs: list[Config]) -> list[Config]:
    """Beside each measured baseline, the baseline accumulating gradients over the micro-batches
    of every configuration that cuts the same batch into them (once per micro-batch size): the
    middle baseline that splits a pipeline's speedup into micro-batching and parallelism."""
    result = []
    for config in configs:
        result.append(config)
        if config.strategy != strategies.BASELINE or config.options:
            continue
        splits = []
        for other in configs:
            if (other.strategy == strategies.BASELINE or other.workload != config.workload
                    or other.global_batch != config.global_batch
                    or other.devices != config.devices or other.refusal()
                    or other.unavailable_reason()):
                continue
            split = other.plan.options.micro_batch_size()
            if split and split < config.global_batch and split not in splits:
                splits.append(split)
        result += [replace(config, options=accumulating(split)) for split in sorted(splits)]
    return result


def _torchrun_devices(args: argparse.Namespace) -> list[DeviceSet]:
    """Under torchrun: every rank's device (each process drives one)."""
    specs = args.devices or []
    if len(specs) > 1 or any("," in spec for spec in specs):
        raise UsageError("under torchrun each process drives one device: give --devices cpu or "
                         "--devices cuda (rank r uses cuda:LOCAL_RANK), and the number of "
                         "processes with torchrun's --nnodes and --nproc-per-node")
    kind = (device_set(specs[0]).kind if specs else
            "cuda" if torch.cuda.is_available() else "cpu")
    if kind != "cuda" and args.backend == "nccl":
        raise UsageError("--backend nccl needs CUDA devices; use --backend gloo on CPU (or "
                         "leave it at auto)")
    try:
        return [launch.torchrun_devices(kind)]
    except launch.LaunchError as error:
        raise UsageError(str(error)) from None


# Arguments that say how to run, not what to measure: not stored for --resume.
_NOT_SWEEP = ("handler", "command", "resume", "progress", "results_dir", "tag",
              "sweep_defaults")


def _sweep_arguments(args: argparse.Namespace) -> dict:
    return {k: v for k, v in vars(args).items() if k not in _NOT_SWEEP}


def _resumed_arguments(args: argparse.Namespace, folder: RunFolder) -> argparse.Namespace:
    """The run's own sweep arguments; any given again must agree with them."""
    try:
        stored = folder.read_command()
    except ResultsError as error:
        raise UsageError(str(error)) from None
    defaults = _sweep_arguments(argparse.Namespace(**args.sweep_defaults))
    for key, given in _sweep_arguments(args).items():
        if given != defaults.get(key) and given != stored.get(key):
            flag = "--" + key.replace("_", "-")
            raise UsageError(f"{flag} {given} differs from the resumed run's {stored.get(key)}; "
                             f"resume with `parbench run --resume {folder.path}` alone, or "
                             "start a new run")
    return argparse.Namespace(**{**vars(args), **stored})


def command_run(args: argparse.Namespace) -> int:
    rank = launch.torchrun_rank()
    if rank is not None:
        return _run_under_torchrun(args, rank)
    if args.resume:
        folder = open_run_folder(args.resume)
        args = _resumed_arguments(args, folder)
        return _run_and_record(args, build_configs(args), rank, folder)
    return _run_and_record(args, build_configs(args), rank)


def _run_under_torchrun(args: argparse.Namespace, rank: int) -> int:
    """Every rank builds the same sweep and measures it together; rank 0 records it. A resumed
    run is read on rank 0 (other nodes may not see its folder), which hands every rank its
    arguments and the configurations it keeps."""
    launch.join_torchrun(positive("--timeout", args.timeout))
    given = args
    try:
        def resumed() -> tuple[argparse.Namespace, set[str]]:
            folder = open_run_folder(given.resume)
            return _resumed_arguments(given, folder), runner.kept_keys(folder.read_records())
        args, kept = (launch.from_rank_zero(resumed, (UsageError, ResultsError))
                      if args.resume else (args, set()))
        configs = build_configs(args, _torchrun_devices(args))
        launch.same_on_every_rank([(c.key(), runner.measured_in_sweep(c)) for c in configs],
                                  "the configurations they measure")
        if rank != 0:  # rank 0 writes the records
            runner.follow_sweep(configs, kept)
            return 0
        return _run_and_record(args, configs, rank,
                               open_run_folder(args.resume) if args.resume else None)
    except launch.LaunchError as error:  # said on every rank: no rank waits for the others
        raise UsageError(str(error)) from None
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
    folder = resumed or new_run_folder(args.results_dir, args.tag)
    try:
        folder.write_command(_sweep_arguments(args))
    except OSError as error:
        raise UsageError(f"cannot write to {folder.path} ({error.strerror or error})") from None
    kept = runner.kept_keys(previous)
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

    def on_done(index: int, record: Record) -> None:
        bar.update(1)
        if not record.ok:
            bar.write(f"  {record.strategy} {record.status}: {record.reason}",
                      file=sys.stderr)

    try:
        runner.run_sweep(configs, folder, collect_environment(), on_start=on_start,
                         on_done=on_done, previous=previous)
    except KeyboardInterrupt:
        bar.close()
        measured = len(folder.read_records()) if (folder.path / "records.json").is_file() else 0
        print(f"parbench: interrupted; {measured} configuration(s) are recorded in "
              f"{folder.path}; measure the rest with `parbench run --resume {folder.path}`",
              file=sys.stderr)
        return 130
    finally:
        bar.close()
    print(results_table(load_records(folder.path), folder.path))
    print(f"results: {folder.path}")
    return 0
