"""`parbench run`: build the sweep from the arguments, measure it into a run folder (new, resumed,
or as one rank of a job torchrun or srun started), and print what a reader compares."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parbench import launch
from parbench.commands.arguments import UsageError, new_run_folder, open_run_folder, positive
from parbench.commands.environment import measuring_environment
from parbench.commands.progress import progress_bar
from parbench.commands.run_arguments import add_run_arguments
from parbench.commands.run_spec import (
    job_device_sets,
    read_spec,
    refuse_a_changed_sweep,
    spec_of,
)
from parbench.drive import runner
from parbench.machine.devices import DeviceSet, cpu_cores
from parbench.plan import Sweep, SweepSpec, experiments
from parbench.plan.planning import ConfigError
from parbench.reporting.answers import results_table
from parbench.results.folder import ResultsError, RunFolder, load_records

__all__ = ["add_parsers", "build_sweep", "command_run"]


def build_sweep(spec: SweepSpec, device_sets: list[DeviceSet] | None = None) -> Sweep:
    """The sweep `spec` asks for (see Sweep.build); a sweep that must not run is one line."""
    try:
        return Sweep.build(spec, device_sets)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def _resumed_spec(args: argparse.Namespace, folder: RunFolder, in_job: bool = False) -> SweepSpec:
    """The run's own sweep; any flag given again must agree with it."""
    stored = read_spec(folder, args.parse_run, in_job)
    defaults = argparse.Namespace(**args.sweep_defaults)
    refuse_a_changed_sweep(spec_of(args, in_job), spec_of(defaults, in_job), stored, folder)
    return stored


def command_run(args: argparse.Namespace) -> int:
    if args.experiment and not args.resume:
        try:
            args = experiments.applied(args, args.parse_run)
        except ConfigError as error:
            raise UsageError(str(error)) from None
        _refuse_a_seed_drawn_before(args)
    if launch.job_rank() is not None:
        return _run_in_job(args)
    if args.resume:
        folder = open_run_folder(args.resume)
        spec = _resumed_spec(args, folder)
        return _then(args, spec, _run_and_record(args, build_sweep(spec), folder))
    spec = spec_of(args)
    return _then(args, spec, _run_and_record(args, build_sweep(spec)))


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


def _then(args: argparse.Namespace, spec: SweepSpec, measured: RunFolder | int) -> int:
    """What the run's experiment does with the run once it is measured (`then`: parbench
    commands, `{run}` standing for its folder, parsed by the whole command line's parser,
    `args.parse_command`), each a step of its own: one that fails says so and leaves every
    record in place."""
    if isinstance(measured, int):
        return measured
    steps = experiments.load(spec.experiment).then if spec.experiment else []
    for step in steps:
        argv = [part.replace("{run}", str(measured.path)) for part in step]
        print(f"then: parbench {' '.join(argv)}", file=sys.stderr, flush=True)
        step_args = args.parse_command(argv)
        status = step_args.handler(step_args)
        if status:
            return status
    return 0


def _run_in_job(args: argparse.Namespace) -> int:
    """Every rank builds the same sweep and measures it together; rank 0 records it. A resumed
    run is read on rank 0 (other nodes may not see its folder), which hands every rank its
    spec and the trials it keeps."""
    def resumed() -> tuple[dict, set]:  # plain data: it is pickled to the other ranks
        folder = open_run_folder(args.resume)
        spec = _resumed_spec(args, folder, in_job=True)
        return spec.to_json(), runner.done_trials(folder.read_records())

    try:
        with launch.job_group(positive("--timeout", args.timeout)):
            if args.resume:
                stored, done = launch.from_rank_zero(resumed, (UsageError, ResultsError))
                spec = SweepSpec.from_json(stored)
            else:
                spec, done = spec_of(args, in_job=True), set()
            sweep = build_sweep(spec, job_device_sets(spec))
            order = [sweep.configs[slot.index] for slot in sweep.schedule(done)]
            return launch.measure_on_every_rank(list(sweep.configs), order, lambda: _exit_status(
                _run_and_record(args, sweep, open_run_folder(args.resume) if args.resume
                                else None, in_job=True)))
    except launch.LaunchError as error:  # said on every rank: no rank waits for the others
        raise UsageError(str(error)) from None


def _run_and_record(args: argparse.Namespace, sweep: Sweep, resumed: RunFolder | None = None,
                    in_job: bool = False) -> RunFolder | int:
    """Measure the sweep into a new run folder (or what a resumed one lacks) and print its
    table (rank 0 in a job), after its notes on what it leaves out; the folder, or the exit
    status of a run interrupted."""
    cpu_threads = max((c.threads_per_device * len(c.used_devices) for c in sweep.configs
                       if c.used_devices.kind == "cpu"), default=0)
    if cpu_threads > cpu_cores() and not in_job:
        print(f"warning: up to {cpu_threads} threads on {cpu_cores()} cores: emulated devices "
              "will compete for cores; lower --threads-per-device", file=sys.stderr)
    previous = resumed.read_records() if resumed else []
    assert sweep.spec is not None  # built from the command line's spec
    # Named after what it holds where --tag does not name it (the experiment, else the
    # models, sizes and devices swept).
    folder = resumed or new_run_folder(args.results_dir, args.tag or sweep.spec.folder_tag())
    try:
        folder.write_command(sweep.spec.to_json())
    except OSError as error:
        raise UsageError(f"cannot write to {folder.path} ({error.strerror or error})") from None
    for note in sweep.notes:  # once every check has passed: a refusal stays one line
        print(note, file=sys.stderr)
    total = len(sweep.schedule())
    already = total - len(sweep.schedule(runner.done_trials(previous)))
    unit = "configurations" if sweep.repeats == 1 else "trials"
    if resumed:
        print(f"resuming {folder.path}: {already} of {total} {unit} already measured",
              file=sys.stderr)
    bar, on_start, on_done = progress_bar(args.progress, total, already, sweep.repeats)
    try:
        runner.run_sweep(sweep, folder, measuring_environment(), on_start=on_start,
                         on_done=on_done, previous=previous)
    except KeyboardInterrupt as interrupt:
        bar.close()
        measured = sum(r.status in runner.FINAL_STATUSES and r.status != "skipped"
                       for r in folder.read_records())
        print(f"parbench: {launch.interruption_reason(interrupt)}; {measured} finished "
              f"configuration(s) are recorded in {folder.path} (the one stopped as an error); "
              f"measure the rest with `parbench run --resume {folder.path}`", file=sys.stderr)
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
        description="Train a model with each strategy on synthetic data and record throughput, "
                    "step times and peak memory. Comma lists sweep: each point is one record.")
    add_run_arguments(run)
    # experiments.applied keeps the flags typed beside --experiment here, for the run's README.
    run.set_defaults(handler=command_run, experiment_flags=None)
    # What each flag is when not given: a resumed run accepts only those, or the run's own.
    run.set_defaults(sweep_defaults=vars(run.parse_args([])), parse_run=run.parse_args)
