"""The strategies parbench compares, by name: a registry of classes and their preset options,
and the one place that answers "can this strategy run here, with these options, and how"."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from parbench.strategies.base import Strategy, TrainingPlan, default_backend
from parbench.strategies.ddp import DDP
from parbench.strategies.errors import (
    BatchTooSmall,
    ModelRefused,
    StrategyError,
    Unavailable,
    WorkloadRefused,
)
from parbench.strategies.fsdp import FSDP
from parbench.strategies.hsdp import HSDPOptions
from parbench.strategies.layout import Layout
from parbench.strategies.model_parallel import ModelParallel
from parbench.strategies.nn_data_parallel import DataParallel
from parbench.strategies.options import Options, OptionSpec
from parbench.strategies.pipeline import Pipeline
from parbench.strategies.pipeline_schedules import ScheduledPipeline
from parbench.strategies.rank_parallel import with_tuning
from parbench.strategies.schedules import InterleavedOptions, PipelineFSDPOptions
from parbench.strategies.single import SingleDevice
from parbench.strategies.tensor_parallel import TensorParallel

__all__ = [
    "BASELINE", "REGISTRY", "BatchTooSmall", "Layout", "ModelRefused", "OptionSpec", "Options",
    "Strategy", "StrategyError", "TrainingPlan", "Unavailable", "WorkloadRefused",
    "allreduces_gradients", "create", "default_backend", "layout_of", "lookup", "names",
    "option_specs", "options_of", "plan", "plan_on", "takers",
]


@dataclass(frozen=True)
class Entry:
    """A registered name: a preset of the class that implements it. The preset may give the
    options (fields made with `option(preset=True)`: a user cannot change them), another
    options class (the degrees the name lays the model out in: hsdp's two-dimensional mesh),
    and the layout and summary that follow; the class's own are the defaults. How figures draw
    it follows from its place here (parbench/plots/common.py's `strategy_style`)."""

    cls: type[Strategy]
    preset: dict = field(default_factory=dict)
    layout: Layout | None = None  # None: cls.layout
    options_class: type[Options] | None = None  # None: cls.Options
    summary: str = ""  # "": cls.summary

    def __post_init__(self) -> None:
        if self.options_class and not issubclass(self.options_class, self.cls.Options):
            raise TypeError(f"{self.options_class.__name__} must extend "
                            f"{self.cls.Options.__name__}, which {self.cls.__name__} reads")
        object.__setattr__(self, "layout", self.layout or self.cls.layout)
        object.__setattr__(self, "summary", self.summary or self.cls.summary)

    @property
    def Options(self) -> type[Options]:  # noqa: N802 (named as the classes' attribute)
        return self.options_class or self.cls.Options


_V_STAGES = "one process per rank holding V stages, torch.distributed.pipelining schedule"
REGISTRY: dict[str, Entry] = {
    "single": Entry(SingleDevice),
    "model-parallel": Entry(ModelParallel),
    "pipeline": Entry(Pipeline),
    "pipeline-gpipe": Entry(ScheduledPipeline, {"schedule": "gpipe"}),
    "pipeline-1f1b": Entry(ScheduledPipeline, {"schedule": "1f1b"}),
    **{f"pipeline-{schedule}": Entry(ScheduledPipeline, {"schedule": schedule},
                                     options_class=InterleavedOptions, summary=_V_STAGES)
       for schedule in ("interleaved-1f1b", "looped-bfs", "zero-bubble", "zbv", "dualpipev")},
    "pipeline-fsdp": Entry(
        ScheduledPipeline, {"schedule": "1f1b"}, layout=Layout.SHARDED_PIPELINES,
        options_class=PipelineFSDPOptions,
        summary="P pipelines side by side (pp x dp), each stage sharded over its copies with "
                "FSDP2; one process per device"),
    "data-parallel": Entry(DataParallel),
    "ddp": Entry(DDP),
    "fsdp": Entry(FSDP),
    "hsdp": Entry(
        FSDP, layout=Layout.HYBRID_SHARDED, options_class=HSDPOptions,
        summary="one process per device, fully_shard over a (replicate x shard) mesh: sharded "
                "within a group, replicated across groups (HSDP)"),
    "tp": Entry(TensorParallel, {"shard_with": "none"}),
    "fsdp-tp": Entry(TensorParallel, {"shard_with": "fsdp"},
                     layout=Layout.SHARDED_TENSOR_PARALLEL),
}
# What speedups and efficiencies are measured against.
BASELINE = "single"


def names() -> list[str]:
    return list(REGISTRY)


def lookup(name: str) -> Entry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise StrategyError(
            f"unknown strategy {name!r}; available: {', '.join(names())}"
        ) from None


def options_of(name: str, options: dict | Options | None = None) -> Options:
    """Strategy `name`'s Options from `options` (those it does not take are ignored), its
    registry preset, and what `--tuning torch` sets where it is given."""
    if isinstance(options, Options):
        return options
    entry = lookup(name)
    return entry.Options.from_values(with_tuning({**(options or {}), **entry.preset}))


def plan(name: str, workload, global_batch: int, devices: Sequence[torch.device],
         options: dict | Options | None = None, backend: str | None = None) -> TrainingPlan:
    """How strategy `name` trains `workload` at `global_batch` on the devices it uses out of
    `devices`, with `options`, its ranks on `backend` (None: see `default_backend`): raises
    StrategyError (a usage error), WorkloadRefused or Unavailable (this machine cannot), each
    with one line saying why."""
    options = options_of(name, options)
    used = lookup(name).cls.select_devices(devices, options)
    return plan_on(name, workload, global_batch, used, options, backend)


def plan_on(name: str, workload, global_batch: int, used: Sequence[torch.device],
            options: Options, backend: str | None = None) -> TrainingPlan:
    """`plan` on the devices the strategy uses, selected already (parbench's planning selects
    them once, and keeps them for a configuration it refuses)."""
    return lookup(name).cls.make_plan(name, workload, global_batch, tuple(used), options,
                                      backend)


def allreduces_gradients(name: str) -> bool:
    """Whether registered strategy `name` all-reduces its gradients (False for a name no
    longer registered, as in older records)."""
    entry = REGISTRY.get(name)
    return bool(entry and entry.cls.allreduces_gradients)


def layout_of(name: str) -> Layout | None:
    """How registered strategy `name` lays a step out over its devices (None for a name no
    longer registered, as in older records)."""
    entry = REGISTRY.get(name)
    return entry.layout if entry else None


def create(plan: TrainingPlan) -> Strategy:
    """The strategy a plan describes (not yet set up)."""
    return lookup(plan.strategy).cls(plan)


def option_specs() -> dict[str, OptionSpec]:
    """Every option any registered strategy takes, by name (the command line's flags)."""
    specs: dict[str, OptionSpec] = {}
    for name, entry in REGISTRY.items():
        for spec in entry.Options.specs():
            if spec.preset:
                continue
            if specs.setdefault(spec.name, spec) != spec:
                raise TypeError(f"{name} defines option {spec.name} differently from another "
                                "strategy; share one Options field")
    return specs


def takers(option: str) -> list[str]:
    """The registered strategies that take `option`."""
    return [name for name, entry in REGISTRY.items() if option in entry.Options.names()]
