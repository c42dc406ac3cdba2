"""`parbench run`'s flags as the typed sweep specification, and a run folder's command file
(a spec, or the flags runs stored before specs) read back for --resume."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import fields

import torch

from parbench import launch
from parbench.commands.arguments import (
    UsageError,
    at_least,
    choice_list,
    default_devices,
    device_set,
    image_sizes,
    int_list,
    positive,
    strategy_names,
    strategy_option_sweep,
)
from parbench.families.workloads import COMPILE_MODES, COMPILE_SCOPES, MODELS, PRECISIONS
from parbench.machine.devices import DeviceSet
from parbench.plan import SpecError, SweepSpec, suite
from parbench.results.folder import ResultsError, RunFolder
from parbench.strategies.options import SWITCH

__all__ = ["compile_values", "job_device_sets", "read_spec", "refuse_a_changed_sweep",
           "spec_of"]


def spec_of(args: argparse.Namespace, in_job: bool = False) -> SweepSpec:
    """The sweep the flags ask for, each value checked (a bad one is one line). In a job
    torchrun or srun started, each process drives one device: the job's own."""
    requested = args.strategy is not None
    repeats = args.repeats if args.repeats is not None else (1 if requested else suite.REPEATS)
    compiles = compile_values(args.compile)
    modes = tuple(dict.fromkeys(choice_list("--compile-mode", args.compile_mode or "default",
                                            COMPILE_MODES)))
    if args.compile_mode and compiles == ("off",):  # a mode asks for compiling: per block
        compiles = ("block",)
    if compiles != ("off",) and args.warmup < 1:
        raise UsageError("--compile needs --warmup 1 or more: the first step compiles the "
                         "model, and that step must not be measured")
    models = choice_list("--model", args.model, MODELS)
    devices = _job_device(args) if in_job else _device_lists(args.devices or default_devices())
    return SweepSpec(
        strategies=tuple(strategy_names(args.strategy)) if requested else None,
        models=tuple(models),
        batch_sizes=tuple(int_list("--batch-size", args.batch_size, 1)),
        image_sizes=tuple(image_sizes(args.image_size, models)),
        precisions=tuple(choice_list("--precision", args.precision, PRECISIONS)),
        devices=devices,
        options=tuple(strategy_option_sweep(args)),
        scaling=args.scaling,
        num_classes=at_least("--num-classes", args.num_classes, 1),
        channels_last=args.channels_last, compiles=compiles, compile_modes=modes,
        cudnn_benchmark=args.cudnn_benchmark, seed=args.seed, data=args.data,
        loader_workers=at_least("--loader-workers", args.loader_workers, 0),
        warmup=at_least("--warmup", args.warmup, 0), steps=at_least("--steps", args.steps, 1),
        repeats=at_least("--repeats", repeats, 1), shuffle_seed=args.shuffle_seed,
        threads_per_device=at_least("--threads-per-device", args.threads_per_device, 1),
        timeout_s=positive("--timeout", args.timeout), backend=args.backend,
        memory_cap_mib=(at_least("--memory-cap-mib", args.memory_cap_mib, 1)
                        if args.memory_cap_mib is not None else None),
        device_memory_mib=(at_least("--device-memory-mib", args.device_memory_mib, 1)
                           if args.device_memory_mib is not None else None),
        experiment=args.experiment,
        experiment_flags=tuple(args.experiment_flags or ()))


def compile_values(given: str | bool) -> tuple[str, ...]:
    """--compile's values: off, block or model (on is block), or a list of them (a run
    folder's flags from before the list kept a bool)."""
    if isinstance(given, bool):
        return ("block",) if given else ("off",)
    values = []
    for text in given.split(","):
        value = _COMPILE_VALUES.get(text.strip().lower())
        if value is None:
            raise UsageError(f"--compile {given!r}: give off, on (each block), block or model, "
                             "or a comma list of them to measure each (e.g. off,block,model)")
        if value not in values:
            values.append(value)
    return tuple(values)


# --compile's words: a switch (on compiles each block) or a scope.
_COMPILE_VALUES = {**{word: "block" if on else "off" for word, on in SWITCH.items()},
                   **{scope: scope for scope in COMPILE_SCOPES}}


def _device_lists(specs: list[str]) -> tuple[str, ...]:
    """The device lists as given, each checked to exist here."""
    for spec in specs:
        device_set(spec)
    return tuple(specs)


def _job_device(args: argparse.Namespace) -> tuple[str, ...]:
    """In a job torchrun or srun started: the device kind each rank drives one of."""
    specs = args.devices or []
    if len(specs) > 1 or any("," in spec for spec in specs):
        raise UsageError("under torchrun or srun each process drives one device: give --devices "
                         "cpu or --devices cuda (a rank uses cuda:<its local rank>), and the "
                         "number of processes with torchrun's --nnodes and --nproc-per-node "
                         "(srun's --nodes and --ntasks-per-node)")
    kind = (device_set(specs[0]).kind if specs else
            "cuda" if torch.cuda.is_available() else "cpu")
    return (kind,)


def job_device_sets(spec: SweepSpec) -> list[DeviceSet]:
    """Every rank's device in the job (each process drives one), of the spec's kind."""
    try:
        return [launch.job_devices(spec.devices[0])]
    except launch.LaunchError as error:
        raise UsageError(str(error)) from None


def read_spec(folder: RunFolder, parse_run: Callable[[list[str]], argparse.Namespace],
              in_job: bool = False) -> SweepSpec:
    """The sweep a run folder's command.json holds: a spec, or a run's flags from before specs
    (read as `parbench run` would have read them then)."""
    try:
        stored = folder.read_command()
        if "spec_version" in stored:
            return SweepSpec.from_json(stored)
    except (ResultsError, SpecError) as error:
        raise UsageError(f"--resume {folder.path}: {error}") from None
    flags = {**vars(parse_run([])), "repeats": 1, **stored}  # runs before --repeats: 1 round
    return spec_of(argparse.Namespace(**flags), in_job)


# The flag that sets each field, where it is not the field's name.
_FLAGS = dict(strategies="--strategy", models="--model", batch_sizes="--batch-size",
              image_sizes="--image-size", precisions="--precision", options="a strategy option",
              timeout_s="--timeout", compiles="--compile", compile_modes="--compile-mode")


def _text(value) -> str:
    if isinstance(value, tuple) and all(not isinstance(v, dict) for v in value):
        return ",".join(("on" if v else "off") if isinstance(v, bool) else str(v)
                        for v in value)
    return str(value)


def refuse_a_changed_sweep(given: SweepSpec, defaults: SweepSpec, stored: SweepSpec,
                           folder: RunFolder) -> None:
    """A flag typed beside --resume must agree with the run's own sweep."""
    for name in (f.name for f in fields(SweepSpec)):
        value = getattr(given, name)
        if value != getattr(defaults, name) and value != getattr(stored, name):
            flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
            raise UsageError(f"{flag} {_text(value)} differs from the resumed run's "
                             f"{_text(getattr(stored, name))}; resume with `parbench run "
                             f"--resume {folder.path}` alone, or start a new run")
