"""Strategy options as typed dataclasses: each field says its type, default, help and allowed
values, so the command line, the checks, the records and the plots read them from one place."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import StrategyError

if TYPE_CHECKING:
    import torch

    from parbench.families.workloads import Workload

__all__ = ["SWITCH", "OptionSpec", "Options", "option"]

# A switch's values on the command line.
SWITCH = {"on": True, "off": False, "true": True, "false": False}


def option(default: Any = None, *, help: str, choices: tuple = (), minimum: float | None = None,
           above: float | None = None, sweep: bool = True, label: str | None = None,
           preset: bool = False):
    """A field of an Options dataclass. `minimum` (inclusive) and `above` (exclusive) bound a
    number; `sweep`: a comma list on the command line measures each value; `label`: how a
    figure names the option (default: its name); `preset`: set by the registered name (e.g. a
    pipeline's schedule), not a flag, and not shown beside the name."""
    return field(default=default, metadata=dict(help=help, choices=tuple(choices),
                                                minimum=minimum, above=above, sweep=sweep,
                                                label=label, preset=preset))


@dataclass(frozen=True)
class OptionSpec:
    """One option as the command line and the checks see it."""

    name: str
    type: type  # int, float, str or bool (a switch)
    default: Any
    help: str
    choices: tuple = ()
    minimum: float | None = None
    above: float | None = None
    sweep: bool = True
    label: str | None = None
    preset: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def problem(self, value: Any) -> str | None:
        """Why `value` is not allowed (one line naming the flag), or None."""
        if value is None or self.type is bool:
            return None
        if self.choices and value not in self.choices:
            return (f"unknown {self.name.replace('_', ' ')} {value!r} for {self.flag}; "
                    f"available: {', '.join(map(str, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            return f"{self.flag} must be at least {self.minimum:g}, got {value:g}"
        if self.above is not None and not value > self.above:
            return f"{self.flag} must be above {self.above:g}, got {value:g}"
        return None

    def parse(self, text: str) -> Any:
        """One value from command-line text (StrategyError saying what is wrong): a switch
        takes `on` or `off` (`true` and `false` too, as Python writes a bool)."""
        if self.type is bool:
            value = SWITCH.get(text.strip().lower())
            if value is None:
                raise StrategyError(f"{self.flag} {text!r} is not on or off (give {self.flag} "
                                    f"on, {self.flag} off, or {self.flag} on,off to measure "
                                    "both)")
            return value
        try:
            value = self.type(text)
        except ValueError:
            kind = "a whole number" if self.type is int else "a number"
            raise StrategyError(f"{self.flag} {text!r} is not {kind}") from None
        problem = self.problem(value)
        if problem:
            raise StrategyError(problem)
        return value

    def text(self, value: Any) -> str:
        """The option as a figure or table shows it: `split=8`, `N=2`, `static_graph`, and a
        switch turned off `no static_graph`."""
        name = self.label or self.name
        if self.type is bool and isinstance(value, bool):
            return name if value else f"no {name}"
        return f"{name}={value}"

    @property
    def default_text(self) -> str | None:
        """The default as the command line gives it (`on`, `off`, `25`), or None where it has
        none of its own (it then depends on the other options, as the help says)."""
        if self.default is None:
            return None
        if self.type is bool:
            return "on" if self.default else "off"
        return str(self.default)


def _value_type(hint: Any) -> type:
    """int from `int | None`, bool from `bool`, ..."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return hint


@dataclass(frozen=True)
class Options:
    """A strategy's options (this base has none). Subclasses add fields made with `option` and
    may refine `check` and `resolved`."""

    _SPECS: ClassVar[dict] = {}  # class -> its OptionSpecs, made once

    def __post_init__(self) -> None:
        for spec in self.specs():
            problem = spec.problem(getattr(self, spec.name))
            if problem:
                raise StrategyError(problem)

    @classmethod
    def specs(cls) -> tuple[OptionSpec, ...]:
        if cls not in Options._SPECS:
            hints = typing.get_type_hints(cls)
            Options._SPECS[cls] = tuple(
                OptionSpec(f.name, _value_type(hints[f.name]), f.default, **f.metadata)
                for f in dataclasses.fields(cls))
        return Options._SPECS[cls]

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(spec.name for spec in cls.specs())

    @classmethod
    def taken(cls, values: dict) -> dict:
        """The values, out of `values`, of options this class takes and that are set (not
        None: None means the default)."""
        return {k: v for k, v in values.items() if k in cls.names() and v is not None}

    @classmethod
    def from_values(cls, values: dict) -> Options:
        return cls(**cls.taken(values))

    def given(self) -> dict:
        """The options that differ from their defaults, or from the value another option
        implies for them (`implied`), by name: what a record and its label show."""
        implied, shown = self.implied(), {}
        for spec in self.specs():
            value = getattr(self, spec.name)
            if spec.preset:
                continue
            if spec.name in implied:  # a switch resolved to None is off, as implied False
                same = value == implied[spec.name] or (spec.type is bool and not value
                                                       and not implied[spec.name])
            else:
                same = value == spec.default
            if not same:
                shown[spec.name] = value
        return shown

    def implied(self) -> dict:
        """The values other options set (`--tuning torch` sets torch's own defaults), by
        name: a label names the option that set them, not each of them."""
        return {}

    def settings(self, devices: tuple[torch.device, ...]) -> dict:
        """Every option's value as the strategy runs it on `devices`, defaults included (a
        record's `strategy_settings`; `given` is what its label shows): None where the library
        decides, as the option's help says. Subclasses fill in the defaults they know."""
        return {spec.name: getattr(self, spec.name) for spec in self.specs()}

    def micro_batch_size(self) -> int | None:
        """The size of the micro-batches the global batch is cut into, where it is (pipelines,
        gradient accumulation); None: the whole batch (or a replica's share) at once."""
        return None

    def device_count(self) -> int | None:
        """How many of the given devices the options ask for (stages, ranks); None: all."""
        return None

    def parallel_dims(self, devices: tuple[torch.device, ...]) -> ParallelDims:
        """The degrees these options, resolved, lay the model out in on `devices` (the devices
        the strategy uses): one device, by default, its micro-batches accumulated."""
        return ParallelDims(micro_batch=self.micro_batch_size())

    def fewest_devices(self) -> int:
        """The fewest devices the layout these options ask for takes (HSDP's two replicas of
        two shards: 4), beyond the strategy's own `min_devices`."""
        return 1

    def device_count_text(self) -> str:
        """The start of the refusal when fewer devices are given: `3 stages need`."""
        return "needs"

    def check(self, workload: Workload, global_batch: int,
              devices: tuple[torch.device, ...]) -> None:
        """Refuse values that cannot work with this workload, batch and the devices the
        strategy uses (raise StrategyError saying how to fix it)."""

    def resolved(self, global_batch: int, devices: tuple[torch.device, ...]) -> Options:
        """The options with defaults that depend on the batch and devices filled in."""
        return self
