"""The sweep a spec asks for, built once: its configurations, every refusal, the accumulating
baselines, and the trial schedule (rounds, each with the baseline's A/A twin)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence, Set
from dataclasses import dataclass, field, replace

from parbench import strategies
from parbench.families.data import DataError, open_image_folder
from parbench.machine.devices import DeviceError, DeviceSet, parse_devices
from parbench.plan import experiments, held_out, trials
from parbench.plan.config import Config, expand_sweep, weakly_scaled
from parbench.plan.planning import ConfigError, PlanRefused
from parbench.plan.spec import SweepSpec
from parbench.strategies.single import accumulating

__all__ = ["Sweep"]


@dataclass(frozen=True)
class Sweep:
    """The configurations a spec sweeps, in order, and the trials that measure them."""

    configs: tuple[Config, ...]
    repeats: int = 1
    shuffle_seed: int = 0
    # Why the comparison of every strategy leaves out each one this machine cannot run.
    left_out: dict[str, str] = field(default_factory=dict)
    # A line for each strategy recorded as skipped in some of its configurations.
    skipped: tuple[str, ...] = ()
    spec: SweepSpec | None = None  # None: configurations put together by hand (tests)

    @property
    def notes(self) -> list[str]:
        """What to tell before measuring: what is left out, what is skipped and why."""
        return [*(f"note: {name} left out: {reason}" for name, reason in self.left_out.items()),
                *self.skipped]

    @classmethod
    def build(cls, spec: SweepSpec, device_sets: Sequence[DeviceSet] | None = None) -> Sweep:
        """The sweep `spec` asks for, on `device_sets` (default: the spec's own devices; a
        job's rank gives its own device). ConfigError, saying how to fix it, for a sweep
        that must not run. An experiment that draws its configurations (a held-out set)
        draws them with the spec's seed."""
        sets = list(device_sets or [_device_set(text) for text in spec.devices])
        space = experiments.drawn_space(spec.experiment)
        if space is None:
            configs, left_out, skipped = _swept(spec, sets)
        else:
            configs, left_out, skipped = _drawn(spec, space), {}, []
        return cls(tuple(configs), spec.repeats, spec.shuffle_seed, left_out, tuple(skipped),
                   spec)

    @functools.cached_property
    def slots(self) -> list[trials.Slot]:
        """Every trial the sweep measures, in order (rounds, each shuffled, with the baseline's
        A/A twin): worked out here, once."""
        return trials.schedule(list(self.configs), self.repeats, self.shuffle_seed)

    def schedule(self, done: Set[tuple[str, int, bool]] = frozenset()) -> list[trials.Slot]:
        """The trials still to measure, in order, less those `done` (a resumed run's)."""
        return [slot for slot in self.slots
                if (self.configs[slot.index].key(), slot.round, slot.twin) not in done]


def _device_set(text: str) -> DeviceSet:
    try:
        return parse_devices(text)
    except DeviceError as error:
        raise ConfigError(str(error)) from None


def _drawn(spec: SweepSpec, space: dict) -> list[Config]:
    """The configurations of each point held_out.draw picks from `space` with the spec's seed
    (a point whose strategy refuses it, or that cannot run here, is drawn again)."""
    built: dict[str, list[Config]] = {}  # each accepted point is planned once, not again

    def configs_of(point: dict) -> list[Config]:
        key = json.dumps(point, sort_keys=True)
        if key not in built:
            narrowed = spec.with_point(point)
            built[key] = _swept(narrowed, [_device_set(text) for text in narrowed.devices])[0]
        return built[key]

    def accept(point: dict) -> bool:
        try:
            configs = configs_of(point)
        except (ConfigError, strategies.StrategyError):
            return False
        return all(config.plan.runs and not config.refusal() for config in configs)

    try:
        points = held_out.draw(space, spec.seed, accept)
    except ValueError as error:
        raise ConfigError(f"--experiment {spec.experiment}: {error}") from None
    return [config for point in points for config in configs_of(point)]


def _swept(spec: SweepSpec,
           sets: list[DeviceSet]) -> tuple[list[Config], dict[str, str], list[str]]:
    """Every combination of the spec's axes, checked; the strategies left out, and a note for
    each recorded as skipped in part."""
    names = list(spec.strategies or strategies.names())
    configs = expand_sweep(
        strategy=names, model=spec.models, global_batch=spec.batch_sizes,
        image_size=spec.image_sizes, precision=spec.precisions, devices=sets,
        options=spec.options, num_classes=spec.num_classes, channels_last=spec.channels_last,
        compiled=spec.compiles, compile_modes=spec.compile_modes,
        cudnn_benchmark=spec.cudnn_benchmark, seed=spec.seed,
        warmup=spec.warmup, steps=spec.steps, threads_per_device=spec.threads_per_device,
        timeout_s=spec.timeout_s, backend=spec.backend, loader_workers=spec.loader_workers,
        memory_cap_mib=spec.memory_cap_mib, device_memory_mib=spec.device_memory_mib)
    left_out = {}
    if spec.compares_every_strategy:
        left_out = _left_out(configs)
        configs = _available_strategies(configs)
    if spec.scaling == "weak":
        configs = [weakly_scaled(c) for c in configs]
    if spec.data:
        configs = [replace(c, workload=replace(c.workload, data_dir=spec.data)) for c in configs]
    _check(configs, spec.data)
    skipped = _refused_or_skipped(configs, not spec.compares_every_strategy)
    if not spec.accumulates:
        configs = _with_accumulation_baselines(configs)
    if not spec.compares_every_strategy:  # a strategy named for nothing it can run: refused
        for name in names:
            plans = [c.plan for c in configs if c.strategy == name]
            if plans and not any(plan.runs for plan in plans):
                refusal = plans[0].refusal
                assert refusal is not None  # it does not run
                raise ConfigError(f"{name} cannot run here: {refusal.reason}")
    return configs, left_out, skipped


def _check(configs: list[Config], data: str | None) -> None:
    """Refuse what must not run (its plan says why) and an image folder that cannot feed it;
    a workload a strategy cannot train (fp16, --compile) and a refused combination of options
    are left to `_refused_or_skipped`, as --precision fp32,fp16 or --compile on,off may give
    it others it trains."""
    checked_data = set()
    for config in configs:
        try:
            config.plan.check(check_workload=False)
        except PlanRefused:
            pass
        if data and (config.workload, config.global_batch) not in checked_data:
            checked_data.add((config.workload, config.global_batch))
            try:
                open_image_folder(config.workload, config.global_batch)
            except DataError as error:
                raise ConfigError(str(error)) from None


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


def _left_out(configs: list[Config]) -> dict[str, str]:
    """Each strategy the comparison of every strategy leaves out because this machine or its
    devices cannot run it (data-parallel on CPU; the V schedules on more devices than the
    model has blocks for) or it cannot lay out the model (tensor parallelism, a ResNet), with
    the reason."""
    return {name: reason for name, config in _first_of_each(configs).items()
            if (reason := config.plan.reason("machine", "model"))}


def _refused_or_skipped(configs: list[Config], requested: bool) -> list[str]:
    """A strategy that refuses every combination of the sweep is a ConfigError; one that
    refuses only some (a schedule's micro-batch count, a batch too small, the compiled half
    of --compile on,off, say) has those recorded as skipped, with its reason (a note says
    so), and the sweep measures the rest. In the quick comparison (nothing `requested`) a
    batch too small or a workload it cannot train is only skipped."""
    def refusal(config: Config) -> str | None:
        return config.refusal() or (config.plan.reason("batch", "workload") if requested
                                     else None)

    notes = []
    for name in dict.fromkeys(c.strategy for c in configs if refusal(c)):
        reasons = [refusal(c) for c in configs if c.strategy == name]
        if all(reasons):
            raise ConfigError(str(reasons[0]))
        notes.append(f"note: {name} refuses {sum(map(bool, reasons))} of its {len(reasons)} "
                     f"configurations, recorded as skipped; the first: "
                     f"{next(filter(None, reasons))}")
    return notes


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
            split = other.plan.training_plan.options.micro_batch_size()
            if split and split < config.global_batch and split not in splits:
                splits.append(split)
        result += [replace(config, options=accumulating(split)) for split in sorted(splits)]
    return result
