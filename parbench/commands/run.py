"""`parbench run`: build the sweep from the arguments, measure it into a run folder (new, resumed,
or as one rank of a job torchrun or srun started), and print what a reader compares."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import torch

import strategies
from parbench import experiments, held_out, launch, runner, suite, trials
from parbench.answers import results_table
from parbench.commands.arguments import (
    UsageError,
    at_least,
    choice_list,
    default_devices,
    device_set,
    image_sizes,
    int_list,
    new_run_folder,
    open_run_folder,
    positive,
    strategy_names,
    strategy_option_sweep,
)
from parbench.commands.progress import progress_bar
from parbench.commands.run_arguments import add_run_arguments
from parbench.config import Config, expand_sweep, weakly_scaled
from parbench.data import DataError, open_image_folder
from parbench.devices import DeviceSet, cpu_cores
from parbench.environment import collect_environment
from parbench.planning import ConfigError, PlanRefused
from parbench.results import ResultsError, RunFolder, load_records
from parbench.workloads import MODELS, PRECISIONS
from strategies.single import accumulating

__all__ = ["add_parsers", "build_configs", "command_run"]


def build_configs(args: argparse.Namespace, device_sets: list[DeviceSet] | None = None,
                  left_out: list[str] | None = None) -> list[Config]:
    """The sweep's configurations, every refusal checked; `left_out` receives a note for each
    strategy the comparison of every strategy leaves out (this machine or its devices cannot
    run it), for the caller to print once the run starts. An experiment that draws its
    configurations (a held-out set) draws them with --seed instead."""
    space = experiments.drawn_space(getattr(args, "experiment", None))
    if space is not None:
        return _drawn_configs(args, space)
    return _swept_configs(args, device_sets, left_out)


def _drawn_configs(args: argparse.Namespace, space: dict) -> list[Config]:
    """The configurations of each point held_out.draw picks from `space` with --seed (a point
    whose strategy refuses it, or that cannot run here, is drawn again)."""
    def configs_of(point: dict) -> list[Config]:
        return _swept_configs(argparse.Namespace(**{**vars(args), **point}))

    def accept(point: dict) -> bool:
        try:
            configs = configs_of(point)
        except UsageError:
            return False
        return all(config.plan.runs and not config.refusal() for config in configs)

    try:
        points = held_out.draw(space, args.seed, accept)
    except ValueError as error:
        raise UsageError(f"--experiment {args.experiment}: {error}") from None
    return [config for point in points for config in configs_of(point)]


def _swept_configs(args: argparse.Namespace, device_sets: list[DeviceSet] | None = None,
                   left_out: list[str] | None = None) -> list[Config]:
    """Every combination of the flags' lists (see build_configs)."""
    requested = args.strategy is not None
    # Without --strategy, the quick comparison: every strategy its plans find available here.
    names = strategy_names(args.strategy) if requested else strategies.names()
    device_sets = device_sets or [device_set(spec) for spec in (args.devices or
                                                                 default_devices())]
    if getattr(args, "repeats", 1) is None:  # the quick comparison compares: in trials
        args.repeats = suite.REPEATS if not requested else 1
    at_least("--repeats", getattr(args, "repeats", 1), 1)
    batches = int_list("--batch-size", args.batch_size, 1)
    if args.compile and args.warmup < 1:
        raise UsageError("--compile needs --warmup 1 or more: the first step compiles the "
                         "model, and that step must not be measured")
    models = choice_list("--model", args.model, MODELS)
    configs = expand_sweep(
        strategy=names,
        model=models,
        global_batch=batches,
        image_size=image_sizes(args.image_size, models),
        precision=choice_list("--precision", args.precision, PRECISIONS),
        devices=device_sets,
        options=strategy_option_sweep(args),
        num_classes=at_least("--num-classes", args.num_classes, 1),
        channels_last=args.channels_last,
        compile=args.compile,
        cudnn_benchmark=args.cudnn_benchmark,
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
    if not requested:
        if left_out is not None:
            left_out += _left_out(configs)
        configs = _available_strategies(configs)
    if getattr(args, "scaling", "strong") == "weak":  # runs stored before --scaling: strong
        configs = [weakly_scaled(c) for c in configs]
    if args.data:
        configs = [replace(c, workload=replace(c.workload, data_dir=args.data)) for c in configs]
    _check(configs, args.data, requested)
    _refuse_or_skip(configs)
    if args.accumulation_split is None:
        configs = _with_accumulation_baselines(configs)
    if requested:  # a strategy named for nothing it can run here is refused, not skipped
        for name in names:
            plans = [c.plan for c in configs if c.strategy == name]
            if plans and not any(plan.runs for plan in plans):
                refusal = plans[0].refusal
                assert refusal is not None  # it does not run
                raise UsageError(f"{name} cannot run here: {refusal.reason}")
    return configs


def _check(configs: list[Config], data: str | None, requested: bool) -> None:
    """Refuse what must not run (its plan says why) and an image folder that cannot feed it;
    the quick comparison (nothing `requested`) records a strategy that cannot train the
    workload as skipped, and a refused combination of options is left to `_refuse_or_skip`."""
    checked_data = set()
    for config in configs:
        try:
            config.plan.check(check_workload=requested)
        except PlanRefused:
            pass
        except ConfigError as error:
            raise UsageError(str(error)) from None
        if data and (config.workload, config.global_batch) not in checked_data:
            checked_data.add((config.workload, config.global_batch))
            try:
                open_image_folder(config.workload, config.global_batch)
            except DataError as error:
                raise UsageError(str(error)) from None


def _first_of_each(configs: list[Config]) -> dict[str, Config]:
    """Each strategy's first configuration in the sweep: the one its availability is judged on."""
    first: dict[str, Config] = {}
    for config in configs:
        first.setdefault(config.strategy, config)
    return first


def _available_strategies(configs: list[Config]) -> list[Config]:
    """The configurations of the strategies whose plan on the sweep's first configuration
    finds the devices, the machine and the launcher they need."""
    names = {name for name, config in _first_of_each(configs).items() if config.plan.available}
    return [c for c in configs if c.strategy in names or c.strategy == strategies.BASELINE]


def _left_out(configs: list[Config]) -> list[str]:
    """A note for each strategy the comparison of every strategy leaves out because this
    machine or its devices cannot run it (data-parallel on CPU; the V schedules on more
    devices than the model has blocks for), with the reason."""
    return [f"note: {name} left out: {config.plan.reason('machine')}"
            for name, config in _first_of_each(configs).items()
            if config.plan.reason("machine")]


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
                    or other.devices != config.devices or not other.plan.runs):
                continue
            split = other.plan.strategy_plan.options.micro_batch_size()
            if split and split < config.global_batch and split not in splits:
                splits.append(split)
        result += [replace(config, options=accumulating(split)) for split in sorted(splits)]
    return result


def _job_devices(args: argparse.Namespace) -> list[DeviceSet]:
    """In a job torchrun or srun started: every rank's device (each process drives one)."""
    specs = args.devices or []
    if len(specs) > 1 or any("," in spec for spec in specs):
        raise UsageError("under torchrun or srun each process drives one device: give --devices "
                         "cpu or --devices cuda (a rank uses cuda:<its local rank>), and the "
                         "number of processes with torchrun's --nnodes and --nproc-per-node "
                         "(srun's --nodes and --ntasks-per-node)")
    kind = (device_set(specs[0]).kind if specs else
            "cuda" if torch.cuda.is_available() else "cpu")
    try:
        return [launch.job_devices(kind)]
    except launch.LaunchError as error:
        raise UsageError(str(error)) from None


# Arguments that say how to run, not what to measure: not stored for --resume.
_NOT_SWEEP = ("handler", "command", "resume", "progress", "results_dir", "tag",
              "sweep_defaults", "parse_run", "given_argv", "wide_table")


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
    if args.experiment and not args.resume:
        try:
            args = experiments.applied(args, args.parse_run)
        except ConfigError as error:
            raise UsageError(str(error)) from None
        _refuse_a_seed_drawn_before(args)
    rank = launch.job_rank()
    if rank is not None:
        return _run_in_job(args)
    if args.resume:
        folder = open_run_folder(args.resume)
        args = _resumed_arguments(args, folder)
        return _then(args, _run_and_record(args, build_configs(args), rank, folder))
    left_out: list[str] = []
    return _then(args, _run_and_record(args, build_configs(args, left_out=left_out), rank,
                                       notes=left_out))


def _refuse_a_seed_drawn_before(args: argparse.Namespace) -> None:
    """A held-out set is drawn once: a run folder of the results folder that drew this seed
    already makes a new draw necessary (a model changed since would be judged on the set it
    may have been tuned against)."""
    if experiments.drawn_space(args.experiment) is None:
        return
    for path in sorted(Path(args.results_dir).glob("*/command.json")):
        try:
            command = RunFolder(path.parent).read_command()
        except ResultsError:
            continue
        if command.get("experiment") == args.experiment and command.get("seed") == args.seed:
            raise UsageError(f"--seed {args.seed}: {path.parent} drew this set already; give "
                             "a seed no run has drawn (a held-out set judges a model once), or "
                             f"--resume {path.parent} to finish that run")


def _exit_status(measured: RunFolder | int) -> int:
    return 0 if isinstance(measured, RunFolder) else measured


def _then(args: argparse.Namespace, measured: RunFolder | int) -> int:
    """What the run's experiment does with the run once it is measured (`then`: parbench
    commands, `{run}` standing for its folder), each a step of its own: one that fails says
    so and leaves every record in place."""
    if isinstance(measured, int):
        return measured
    steps = experiments.load(args.experiment).then if getattr(args, "experiment", None) else []
    from parbench.cli import parser  # the commands' own parsers (cli imports this module)
    for step in steps:
        argv = [part.replace("{run}", str(measured.path)) for part in step]
        print(f"then: parbench {' '.join(argv)}", file=sys.stderr, flush=True)
        step_args = parser().parse_args(argv)
        status = step_args.handler(step_args)
        if status:
            return status
    return 0


def _run_in_job(args: argparse.Namespace) -> int:
    """Every rank builds the same sweep and measures it together; rank 0 records it. A resumed
    run is read on rank 0 (other nodes may not see its folder), which hands every rank its
    arguments and the trials it keeps."""
    given = args

    def resumed() -> tuple[dict, set]:  # plain data: it is pickled to the other ranks
        folder = open_run_folder(given.resume)
        stored = _sweep_arguments(_resumed_arguments(given, folder))
        return stored, runner.done_trials(folder.read_records())

    try:
        with launch.job_group(positive("--timeout", args.timeout)):
            stored, done = (launch.from_rank_zero(resumed, (UsageError, ResultsError))
                            if args.resume else ({}, set()))
            args = argparse.Namespace(**{**vars(given), **stored})
            configs = build_configs(args, _job_devices(args))
            order = [configs[slot.index] for slot in _schedule(args, configs, done)]
            return launch.measure_on_every_rank(configs, order, lambda: _exit_status(
                _run_and_record(args, configs, 0,
                                open_run_folder(args.resume) if args.resume else None)))
    except launch.LaunchError as error:  # said on every rank: no rank waits for the others
        raise UsageError(str(error)) from None


def _schedule(args: argparse.Namespace, configs: list[Config], done=frozenset()) -> list:
    """The trials the sweep measures, in order (runs stored before --repeats: one round)."""
    return trials.schedule(configs, getattr(args, "repeats", 1),
                           getattr(args, "shuffle_seed", 0), done)


def _run_and_record(args: argparse.Namespace, configs: list[Config], rank: int | None,
                    resumed: RunFolder | None = None, notes: list[str] | None = None
                    ) -> RunFolder | int:
    """Measure the sweep into a new run folder (or what a resumed one lacks) and print its
    table (rank 0 under torchrun), after `notes` on what it leaves out; the folder, or the
    exit status of a run interrupted."""
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
    for note in notes or []:  # once every check has passed: a refusal stays one line
        print(note, file=sys.stderr)
    repeats = getattr(args, "repeats", 1)
    total = len(_schedule(args, configs))
    already = total - len(_schedule(args, configs, runner.done_trials(previous)))
    unit = "configurations" if repeats == 1 else "trials"
    if resumed:
        print(f"resuming {folder.path}: {already} of {total} {unit} already measured",
              file=sys.stderr)
    bar, on_start, on_done = progress_bar(args.progress, total, already, repeats)
    try:
        runner.run_sweep(configs, folder, collect_environment(), on_start=on_start,
                         on_done=on_done, previous=previous, repeats=repeats,
                         seed=getattr(args, "shuffle_seed", 0))
    except KeyboardInterrupt:
        bar.close()
        measured = sum(r.status != "skipped" for r in folder.read_records())
        print(f"parbench: interrupted; {measured} configuration(s) are recorded in "
              f"{folder.path}; measure the rest with `parbench run --resume {folder.path}`",
              file=sys.stderr)
        return 130
    finally:
        bar.close()
    print(results_table(load_records(folder.path), folder.path, wide=args.wide_table))
    print(f"results: {folder.path}")
    return folder


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench run`: its parser and arguments."""
    run = commands.add_parser(
        "run", help="measure strategies (every option taking a comma list sweeps over it)",
        description="Train a ResNet with each strategy on synthetic data and record throughput, "
                    "step times and peak memory. Comma lists sweep: each point is one record.")
    add_run_arguments(run)
    run.set_defaults(handler=command_run)
    # What each flag is when not given: a resumed run accepts only those, or the run's own.
    run.set_defaults(sweep_defaults=vars(run.parse_args([])), parse_run=run.parse_args)
