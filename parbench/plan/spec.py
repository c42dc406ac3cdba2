"""What a run measures, typed: the sweep specification saved as the run's command.json."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field, fields
from typing import Any

from parbench import strategies

__all__ = ["SPEC_VERSION", "SpecError", "SweepSpec"]

# Bumped when a field changes meaning; a command.json without `spec_version` holds the command
# line's flags (runs from before the spec) and is read by `parbench.commands.run_spec`.
SPEC_VERSION = 1
# A held-out point's flags (parbench.plan.held_out) and the spec's axis each sets.
# A compile axis stored as booleans (before scopes): what each value compiled.
_SCOPE_OF = {True: "block", False: "off"}
_POINT_AXES = {"strategy": "strategies", "model": "models", "batch_size": "batch_sizes",
               "image_size": "image_sizes", "devices": "devices"}


class SpecError(ValueError):
    """A command file that holds no sweep this version can read."""


@dataclass(frozen=True)
class SweepSpec:
    """Every axis a tuple of the values swept (their cartesian product is the sweep), and the
    settings every configuration shares. The command line, the suite (asv, pytest-benchmark),
    a job's ranks and --resume all build their `Sweep` from one."""

    strategies: tuple[str, ...] | None  # None: every strategy that can run here
    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]  # global batches (under weak scaling: per device)
    image_sizes: tuple[int, ...]
    devices: tuple[str, ...]  # logical device lists, e.g. ("cpu", "cpu,cpu")
    precisions: tuple[str, ...] = ("fp32",)
    # Strategy-option combinations (each strategy takes the options it knows).
    options: tuple[dict, ...] = ({},)
    scaling: str = "strong"
    num_classes: int = 1000
    channels_last: bool = False
    # Eager ("off") and under torch.compile per block ("block") or whole ("model"), and the
    # compiled ones in each of torch.compile's modes: each a configuration of its own.
    compiles: tuple[str, ...] = ("off",)
    compile_modes: tuple[str, ...] = ("default",)
    cudnn_benchmark: bool = False
    seed: int = 0
    data: str | None = None  # an image folder instead of synthetic data
    loader_workers: int = 0
    warmup: int = 1
    steps: int = 3
    repeats: int = 1  # trials of each configuration, in interleaved rounds
    shuffle_seed: int = 0  # round r shuffles its order with shuffle_seed + r
    threads_per_device: int = 1
    timeout_s: float = 1800.0
    backend: str = "auto"
    memory_cap_mib: int | None = None
    device_memory_mib: int | None = None  # counted tensors per logical device (Config's)
    # The named experiment the run reproduces, and the flags typed beside it (for its README).
    experiment: str | None = None
    experiment_flags: tuple[str, ...] = field(default=())

    @property
    def compares_every_strategy(self) -> bool:
        """The quick comparison: no strategy named, so every one that can run here."""
        return self.strategies is None

    @property
    def accumulates(self) -> bool:
        """Whether an option combination sets `single`'s accumulation itself (then the sweep
        adds no accumulating baselines beside it)."""
        return any(combination.get("accumulation_split") for combination in self.options)

    def with_point(self, point: dict) -> SweepSpec:
        """This spec narrowed to one drawn point: flags by name (parbench.plan.held_out's form,
        e.g. {"strategy": "ddp", "devices": ["cpu,cpu"], "split_size": "4"})."""
        axes: dict = {}
        drawn = {}
        specs = strategies.option_specs()
        for name, value in point.items():
            if name in _POINT_AXES:
                values = value if isinstance(value, list) else [value]
                kind = str if name in ("strategy", "model", "devices") else int
                axes[_POINT_AXES[name]] = tuple(kind(v) for v in values)
            else:
                drawn[name] = specs[name].parse(str(value))
        options = tuple({**combination, **drawn} for combination in self.options)
        return dataclasses.replace(self, **axes, options=options)

    def folder_tag(self) -> str:
        """What a run folder is named after when no --tag is given (after its UTC time): the
        experiment's name, else the models, image sizes and devices swept, e.g.
        `resnet18-128px-2cpu` (`cpu,cpu`), `vit_b_16-64px-1-2cpu` (`cpu` and `cpu,cpu`);
        a count where more than two values are swept (`3models`); filesystem-safe."""
        if self.experiment:
            return _safe(self.experiment)
        counts = sorted({d.count(",") + 1 for d in self.devices})
        kinds = sorted({part.split(":")[0] for d in self.devices for part in d.split(",")})
        parts = [_listed(self.models, "models"),
                 _listed([f"{size}px" for size in self.image_sizes], "sizes"),
                 "-".join(map(str, counts)) + "+".join(kinds)]
        return _safe("-".join(part for part in parts if part))

    def to_json(self) -> dict:
        """The spec as command.json holds it, stamped with SPEC_VERSION."""
        return {"spec_version": SPEC_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, values: dict) -> SweepSpec:
        """A spec `to_json` wrote; SpecError for another version."""
        version = values.get("spec_version")
        if version != SPEC_VERSION:
            raise SpecError(f"its sweep is spec version {version}; this parbench reads "
                            f"version {SPEC_VERSION}")
        known = {f.name for f in fields(cls)}
        kept: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                for k, v in values.items() if k in known}
        if "compile" in values and "compiles" not in values:  # before --compile on,off
            kept["compiles"] = (bool(values["compile"]),)
        # Before --compile block,model: on and off as True and False.
        kept["compiles"] = tuple(_SCOPE_OF.get(v, v) if isinstance(v, bool) else v
                                 for v in kept.get("compiles", cls.compiles))
        return cls(**kept)


def _listed(values, plural: str) -> str:
    """Up to two values, joined; more as their count (`3models`)."""
    values = list(dict.fromkeys(str(v) for v in values))
    return "-".join(values) if len(values) <= 2 else f"{len(values)}{plural}"


def _safe(text: str, limit: int = 60) -> str:
    """`text` as a run folder's name may hold it: letters, digits, '.', '_' and '-' (anything
    else a '-'), at most `limit` characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:limit] or "run"
