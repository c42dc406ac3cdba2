"""Named experiments: the runs people know, kept as files (parbench/experiments/*.json) that
`parbench run --experiment NAME` reproduces."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parbench.planning import ConfigError

__all__ = ["FOLDER", "Experiment", "applied", "load", "names"]

FOLDER = Path(__file__).parent / "experiments"


@dataclass(frozen=True)
class Experiment:
    """One experiment file: what it is, where it comes from, and its `parbench run` flags."""

    name: str
    description: str
    source: str
    arguments: list[str]

    @property
    def path(self) -> Path:
        return FOLDER / f"{self.name}.json"


def names() -> list[str]:
    return sorted(path.stem for path in FOLDER.glob("*.json"))


def load(name: str) -> Experiment:
    path = FOLDER / f"{name}.json"
    if not path.is_file():
        raise ConfigError(f"unknown experiment {name!r}; available: {', '.join(names())}")
    values = json.loads(path.read_text())
    return Experiment(name, values["description"], values["source"], list(values["arguments"]))


def applied(args: argparse.Namespace,
            parse: Callable[..., argparse.Namespace]) -> argparse.Namespace:
    """`args.experiment`'s flags with the flags typed (`args.given_argv`) over them, parsed by
    `parse` (the run parser's parse_args) as one command line: `parbench run --experiment
    tutorial --repeats 5` is the tutorial with 5 trials. A list flag (`--devices`) the
    experiment sets is extended, not replaced. The typed flags are kept as
    `experiment_flags`, for the run's README to say."""
    experiment = load(args.experiment)
    merged = parse(args.given_argv, namespace=parse(experiment.arguments))
    merged.experiment_flags = _without_experiment(args.given_argv)
    return merged


def _without_experiment(argv: list[str]) -> list[str]:
    kept, name_follows = [], False
    for flag in argv:
        if not name_follows and flag != "--experiment" and not flag.startswith("--experiment="):
            kept.append(flag)
        name_follows = flag == "--experiment"
    return kept
