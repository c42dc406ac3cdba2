"""Command-line values turned into what the commands need, each bad value into one UsageError
that names the fix; the strategies' option flags come from the registry."""

from __future__ import annotations

import argparse
import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from parbench import strategies
from parbench.families import family_of
from parbench.families.workloads import MIN_IMAGE_SIZE
from parbench.machine.devices import DeviceError, DeviceSet, parse_devices
from parbench.plan.config import Config
from parbench.plan.planning import ConfigError
from parbench.results.folder import ResultsError, RunFolder

__all__ = [
    "UsageError", "add_common_arguments", "add_strategy_options", "at_least", "checked",
    "choice_list", "comma_list",
    "default_devices", "device_set", "int_list", "new_run_folder", "open_run_folder",
    "output_folder", "positive", "strategy_names", "strategy_option_sweep",
]


class UsageError(Exception):
    """Bad input: reported as one line and exit status 2."""


def comma_list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise UsageError(f"empty list {text!r}; give one or more comma-separated values")
    return items


def int_list(flag: str, text: str, minimum: int) -> list[int]:
    values = []
    for item in comma_list(text):
        try:
            value = int(item)
        except ValueError:
            raise UsageError(f"{flag} {item!r} is not a whole number") from None
        values.append(at_least(flag, value, minimum))
    return values


def choice_list(flag: str, text: str, choices: Sequence[str]) -> list[str]:
    values = comma_list(text)
    for value in values:
        if value not in choices:
            raise UsageError(f"unknown {flag.lstrip('-').replace('-', ' ')} {value!r}; "
                             f"available: {', '.join(choices)}")
    return values


def image_sizes(text: str, models: Sequence[str]) -> list[int]:
    """The --image-size list, each size one every model in `models` trains on."""
    sizes = int_list("--image-size", text, MIN_IMAGE_SIZE)
    for model, size in itertools.product(models, sizes):
        problem = family_of(model).image_size_problem(size)
        if problem:
            raise UsageError(f"--image-size {size}: {model} cannot train on it; {problem}")
    return sizes


def at_least(flag: str, value: int, minimum: int) -> int:
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum}, got {value}")
    return value


def positive(flag: str, value: float) -> float:
    if not value > 0:
        raise UsageError(f"{flag} must be above 0, got {value}")
    return value


def device_set(spec: str) -> DeviceSet:
    try:
        return parse_devices(spec)
    except DeviceError as error:
        raise UsageError(str(error)) from None


def default_devices() -> list[str]:
    """All GPUs when there are several; else two logical devices on the one physical device."""
    gpus = torch.cuda.device_count()
    if gpus >= 2:
        return [",".join(f"cuda:{i}" for i in range(gpus))]
    return ["cuda:0,cuda:0" if gpus == 1 else "cpu,cpu"]


def strategy_names(text: str) -> list[str]:
    return choice_list("--strategy", text, strategies.names())


def add_common_arguments(parser: argparse.ArgumentParser, *flags: str) -> None:
    """The flags several commands share, each typed and explained once: --timeout,
    --threads-per-device, --results-dir."""
    common: dict[str, dict[str, Any]] = {
        "--timeout": dict(type=float, default=1800.0, help=(
            "seconds a configuration may take before its processes are stopped and it is "
            "recorded as an error (default 1800)")),
        "--threads-per-device": dict(type=int, default=1, help=(
            "CPU threads per logical CPU device (default 1: N devices = N cores)")),
        "--results-dir": dict(default="results", help="where run folders are written "
                              "(default results)"),
    }
    for flag in flags:
        parser.add_argument(flag, **common[flag])


def add_strategy_options(parser: argparse._ActionsContainer, sweep: bool = True) -> None:
    """A flag for every option a registered strategy takes, saying which strategies take it."""
    for spec in strategies.option_specs().values():
        text = f"{', '.join(strategies.takers(spec.name))}: {spec.help}"
        listed = sweep and spec.sweep
        value = "|".join(spec.choices) if spec.choices else spec.type.__name__.upper()
        switch: dict[str, Any] = {}
        if spec.type is bool:  # a switch: the flag alone turns it on, as it always did
            value, switch = "on|off", dict(nargs="?", const="on")
            default = spec.default_text
            text += f"; default {default}" if default else ""
        parser.add_argument(spec.flag, metavar=f"{value}[,...]" if listed else value,
                            help=text + (" (comma list sweeps)" if listed else ""), **switch)


def _values(spec: strategies.OptionSpec, raw, sweep: bool) -> list:
    """The values of one option flag: [None] where it is not set (or at its default)."""
    if isinstance(raw, bool):  # a switch as flags saved before it took on/off: given or not
        return [True] if raw else [None]
    if raw is None:
        return [None]
    texts = comma_list(raw) if sweep and spec.sweep else [raw]
    try:
        return [spec.parse(text) for text in texts]
    except strategies.StrategyError as error:
        raise UsageError(str(error)) from None


def strategy_option_sweep(args: argparse.Namespace, sweep: bool = True) -> list[dict]:
    """Every combination of the strategy options given (each strategy takes those it knows);
    without `sweep` (verify, max-batch), the one combination of the single values given."""
    specs = strategies.option_specs().values()
    axes = [_values(spec, getattr(args, spec.name), sweep) for spec in specs]
    return [dict(zip((spec.name for spec in specs), combination, strict=True))
            for combination in itertools.product(*axes)]


def checked(config: Config, check_workload: bool = True) -> Config:
    try:
        config.plan.check(check_workload)
    except ConfigError as error:
        raise UsageError(str(error)) from None
    return config


def new_run_folder(results_dir: str, tag: str) -> RunFolder:
    if tag and not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", tag):
        raise UsageError(f"--tag {tag!r} must be a plain name, the run folder's suffix "
                         "(letters, digits, '.', '_', '-'; no '/'), e.g. --tag tutorial-cpu")
    try:
        return RunFolder.create(results_dir, tag)
    except OSError as error:
        raise UsageError(f"cannot write results to {results_dir!r} "
                         f"({error.strerror or error}); choose a writable folder with "
                         "--results-dir") from None


def open_run_folder(path: str) -> RunFolder:
    try:
        return RunFolder.open(path)
    except ResultsError as error:
        raise UsageError(str(error)) from None


def output_folder(out: str | None, default: Path) -> Path:
    """`out` (or `default`), created and checked to be writable."""
    path = Path(out) if out else default
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise UsageError(f"cannot write to {str(path)!r} ({error.strerror or error}); choose a "
                         "writable folder with --out") from None
    return path
