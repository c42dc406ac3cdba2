"""Named experiments: the runs people know, kept as files (parbench/experiments/*.json) that
`parbench run --experiment NAME` reproduces."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
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


def applied(args: argparse.Namespace, parse: Callable[[Sequence[str]], argparse.Namespace],
            defaults: dict) -> argparse.Namespace:
    """The arguments of `args.experiment` (parsed by `parse`, as if given on the command
    line), with the flags given here that differ from their `defaults` on top: `parbench run
    --experiment tutorial --repeats 5` is the tutorial with 5 trials."""
    experiment = load(args.experiment)
    given = {key: value for key, value in vars(args).items() if value != defaults.get(key)}
    return argparse.Namespace(**{**vars(parse(experiment.arguments)), **given})
