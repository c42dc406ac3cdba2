"""Named experiments: the runs people know, kept as files (parbench/experiments/*.json) that
`parbench run --experiment NAME` reproduces."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from parbench.plan.planning import ConfigError

__all__ = ["FOLDER", "Experiment", "applied", "drawn_space", "held_out_version", "load", "names"]

FOLDER = Path(__file__).parents[1] / "experiments"  # parbench/experiments/


@dataclass(frozen=True)
class Experiment:
    """One experiment file: what it is, where it comes from, and its `parbench run` flags."""

    name: str
    description: str
    source: str
    arguments: list[str]
    # A space to draw the configurations from at random (parbench.plan.held_out), with the run's
    # --seed, instead of sweeping the flags' combinations: a held-out set for the predictor.
    draw: dict | None = None
    # parbench commands run on the run once it is measured, "{run}" standing for its folder.
    then: tuple[tuple[str, ...], ...] = ()

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
    return Experiment(name, values["description"], values["source"], list(values["arguments"]),
                      values.get("draw"),
                      tuple(tuple(step) for step in values.get("then", ())))


def drawn_space(name: str | None) -> dict | None:
    """The space experiment `name` draws its configurations from (None: it sweeps, or there
    is no experiment, or it is no longer in parbench/experiments)."""
    if not name or name not in names():
        return None
    return load(name).draw


def held_out_version(folder, records) -> int | None:
    """The predictor version a held-out run (one an experiment drew) was measured under, as
    its records say; None for any other run. A held-out run whose records do not say is
    version 0: measured before the models were versioned."""
    try:
        experiment = folder.read_command().get("experiment")
    except ValueError:  # ResultsError: no command.json
        return None
    if drawn_space(experiment) is None:
        return None
    if "predictor_version" not in records or records["predictor_version"].isna().all():
        return 0
    return int(records["predictor_version"].dropna().iloc[0])


def applied(args: argparse.Namespace,
            parse: Callable[..., argparse.Namespace]) -> argparse.Namespace:
    """`args.experiment`'s flags with the flags typed (`args.given_argv`) over them, parsed by
    `parse` (the run parser's parse_args) as one command line: `parbench run --experiment
    tutorial --repeats 5` is the tutorial with 5 trials. A list flag (`--devices`) the
    experiment sets is extended, not replaced. The typed flags are kept as
    `experiment_flags`, for the run's README to say."""
    experiment = load(args.experiment)
    if experiment.draw is not None:
        _refuse_drawn_flags(experiment, parse(args.given_argv), parse([]))
    merged = parse(args.given_argv, namespace=parse(experiment.arguments))
    merged.experiment_flags = _without_experiment(args.given_argv)
    return merged


def _refuse_drawn_flags(experiment: Experiment, typed: argparse.Namespace,
                        defaults: argparse.Namespace) -> None:
    """A flag typed beside an experiment that draws what it sets would be overridden by the
    draw without a word: refused instead."""
    assert experiment.draw is not None
    drawn = {"strategy", "model", "batch_size", "image_size", "devices",
             *(option for options in experiment.draw["strategies"].values()
               for option in options)}
    given = sorted(name for name in drawn if getattr(typed, name) != getattr(defaults, name))
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ConfigError(f"{flags}: the {experiment.name} experiment draws these from its "
                          f"space ({experiment.path.relative_to(FOLDER.parent.parent)}); give "
                          "--seed S for another draw, or run without --experiment")


def _without_experiment(argv: list[str]) -> list[str]:
    kept, name_follows = [], False
    for flag in argv:
        if not name_follows and flag != "--experiment" and not flag.startswith("--experiment="):
            kept.append(flag)
        name_follows = flag == "--experiment"
    return kept
