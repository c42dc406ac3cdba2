"""Configurations: one point of a sweep, and the cartesian product that makes a sweep."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from parbench import strategies
from parbench.families.workloads import Workload, compile_text
from parbench.machine.devices import DeviceSet
from parbench.plan.planning import RunPlan, plan_config

__all__ = ["SCALINGS", "Config", "compile_variants", "expand_sweep", "options_for",
           "weakly_scaled"]

# strong: the global batch is fixed whatever the devices; weak: the batch per device is.
SCALINGS = ("strong", "weak")


def options_for(name: str, options: dict) -> dict:
    """The options, out of `options`, that strategy `name` takes and that are set (not None)."""
    return strategies.lookup(name).Options.taken(options)


@dataclass(frozen=True)
class Config:
    """Everything needed to measure one strategy once."""

    strategy: str
    workload: Workload
    global_batch: int
    devices: DeviceSet
    warmup: int = 3
    steps: int = 10
    threads_per_device: int = 1
    options: dict = field(default_factory=dict)
    timeout_s: float = 1800.0
    # Process-group backend for process-per-device strategies: auto = NCCL when every rank has
    # a GPU of its own, else gloo.
    backend: str = "auto"
    loader_workers: int = 0  # DataLoader processes per rank, for image-folder data
    # Each process may allocate this much beyond what it holds when the configuration starts
    # (CPU: RLIMIT_DATA, a memory limit to run out of, as a GPU's is; CUDA: the caching
    # allocator's per-process fraction, see measure.memory_cap).
    memory_cap_mib: int | None = None
    # Each logical device may hold this many MiB of counted tensors (parameters, gradients,
    # optimiser state, saved activations, DDP's buckets: measure.tensors), as a device of
    # that size would; beyond it the configuration runs out (an emulated device's memory).
    device_memory_mib: int | None = None
    # How the global batch relates to the devices used (SCALINGS; see `weakly_scaled`).
    scaling: str = "strong"

    @property
    def warmup_steps(self) -> int:
        """The warm-up steps taken: `warmup`, or as many as the strategy's layout needs before
        its steps are steady (Layout.warmup_steps), if more."""
        layout = strategies.layout_of(self.strategy)
        return max(self.warmup, layout.warmup_steps if layout is not None else 0)

    @functools.cached_property
    def plan(self) -> RunPlan:
        """How this configuration runs here, or why it cannot: decided once, here
        (`parbench.plan.planning`)."""
        return plan_config(self)

    def refusal(self) -> str | None:
        """What the strategy refuses in this configuration (an error, or recorded as skipped
        in a sweep that gives the strategy other configurations), or None."""
        return self.plan.reason("devices", "options")

    def unavailable_reason(self) -> str | None:
        """Why this machine cannot run the configuration, or the strategy cannot lay out its
        model (recorded as skipped), or None."""
        return self.plan.reason("machine", "model")

    @property
    def process_per_device(self) -> bool:
        """Whether the strategy runs one process per device (else one process for all)."""
        return strategies.lookup(self.strategy).cls.process_per_device

    @property
    def used_devices(self) -> DeviceSet:
        """The devices the strategy takes out of those given (single takes the first)."""
        return self.plan.devices

    def key(self) -> str:
        """What identifies this configuration's measurement (to find it again on --resume)."""
        return json.dumps(dict(
            strategy=self.strategy, options={k: v for k, v in sorted(self.options.items())
                                             if v is not None},
            workload=self.workload.describe(), global_batch=self.global_batch,
            devices=self.devices.describe(), warmup=self.warmup, steps=self.steps,
            threads_per_device=self.threads_per_device, backend=self.backend,
            loader_workers=self.loader_workers,
            # Only where it is not the default, so earlier runs' keys stay valid for --resume.
            **({"scaling": self.scaling} if self.scaling != "strong" else {})), sort_keys=True)

    def label(self) -> str:
        w = self.workload
        options = "".join(f" {k}={v}" for k, v in self.options.items() if v is not None)
        return (f"{self.strategy}{options} {w.model} batch {self.global_batch} "
                f"{w.image_size}px {w.precision}"
                f"{' ' + compile_text(w.compile_scope, w.compile_mode) if w.compile else ''} on "
                f"{self.used_devices.describe()}")


def compile_variants(scopes: Iterable[str] = ("off",),
                     modes: Iterable[str] = ("default",)) -> list[dict]:
    """The workload's compile settings each value of --compile (off, block or model) and
    --compile-mode give, in the order given: eager once, each compiled scope in every mode."""
    variants: list[dict] = []
    for scope in scopes:
        for mode in (("default",) if scope == "off" else modes):
            variant = (dict(compile=False) if scope == "off" else
                       dict(compile=True, compile_scope=scope, compile_mode=mode))
            if variant not in variants:
                variants.append(variant)
    return variants


def expand_sweep(strategy: Iterable[str], model: Iterable[str], global_batch: Iterable[int],
                 image_size: Iterable[int], precision: Iterable[str],
                 devices: Iterable[DeviceSet], options: Iterable[dict] = ({},),
                 compiled: Iterable[str] = ("off",), compile_modes: Iterable[str] = ("default",),
                 **common) -> list[Config]:
    """The cartesian product of the swept values, strategies varying fastest.

    `options` lists the strategy-option combinations to sweep; each strategy receives only the
    options it takes (its `Options` fields), and a combination that differs only in options a
    strategy ignores is measured once for it. `compiled` sweeps eager ("off") and compiled
    per block or whole ("block", "model"), each compiled one in every mode of
    `compile_modes` (`compile_variants`), as `precision` sweeps precisions.
    """
    workload_fields = {k: common.pop(k) for k in ("num_classes", "channels_last",
                                                  "cudnn_benchmark", "seed") if k in common}
    variants = compile_variants(compiled, compile_modes)
    configs, seen = [], set()
    for dev, mdl, size, prec, variant, batch, opts, name in itertools.product(
            devices, model, image_size, precision, variants, global_batch, list(options),
            strategy):
        kept = options_for(name, opts)
        workload = Workload(model=mdl, image_size=size, precision=prec, **variant,
                            **workload_fields)
        key = (dev, workload, batch, name, tuple(sorted(kept.items())))
        if key in seen:
            continue
        seen.add(key)
        configs.append(Config(strategy=name, workload=workload, global_batch=batch,
                              devices=dev, options=kept, **common))
    return configs


def weakly_scaled(config: Config) -> Config:
    """`config` under weak scaling: its global batch, given per device, times the devices its
    strategy uses (a sweep's `ddp` on 1, 2, 4 ranks then trains 1, 2, 4 times the batch)."""
    return replace(config, global_batch=config.global_batch * len(config.used_devices),
                   scaling="weak")
