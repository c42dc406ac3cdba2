"""A configuration planned once: its devices, process group, launcher and the strategy's own
plan, or the one reason it cannot run here. Commands, the suite and the harnesses read this;
nothing else decides it again."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from parbench import strategies
from parbench.machine.cluster import job
from parbench.machine.devices import DeviceSet, format_bytes, host_memory_bytes

if TYPE_CHECKING:  # for annotations only: config.py imports this module
    from parbench.plan.config import Config

__all__ = ["BACKENDS", "REFUSAL_KINDS", "ConfigError", "LauncherKind", "PlanRefused", "Refusal",
           "RunPlan", "plan_config", "process_group_backend", "job_rank"]

BACKENDS = ("auto", "gloo", "nccl")


class LauncherKind(str, enum.Enum):
    """Which processes run a configuration (parbench.launch has one launcher for each)."""

    IN_PROCESS = "in-process"  # this process
    # a one-process strategy in a worker of its own: under a memory cap an allocation can fail
    # where torch cannot recover
    OWN_PROCESS = "own-process"
    SPAWN = "spawn"  # a process per device on this host
    JOB = "job"  # this process is one rank of a job torchrun or srun started


# usage: a mistake in the arguments, always an error. devices: fewer devices than the strategy
# needs; options: the strategy refuses this combination of options, batch and devices (both an
# error, unless the sweep gives the strategy others: then recorded as skipped). batch: a forward
# pass on fewer images than the model family trains on, for this batch alone (as options where
# the strategy is named, skipped in the quick comparison). workload: the strategy cannot train
# this workload at any batch (fp16, compile; skipped in the quick comparison).
# machine: this machine lacks what it needs (skipped).
REFUSAL_KINDS = ("usage", "devices", "options", "batch", "workload", "model", "machine")


class ConfigError(ValueError):
    """A configuration that cannot run; its message says how to fix it."""


class PlanRefused(ConfigError):
    """What the strategy itself refuses for this combination of options, batch and devices."""


@dataclass(frozen=True)
class Refusal:
    kind: str  # REFUSAL_KINDS
    reason: str  # one line that says how to fix it


@dataclass(frozen=True)
class RunPlan:
    """How one configuration runs here, decided once (see `plan_config`)."""

    devices: DeviceSet  # those the strategy uses, out of those given (all, if it refuses them)
    launcher: LauncherKind
    world_size: int  # processes: one per device used, or 1
    backend: str | None  # process group (gloo or nccl); None for one-process strategies
    resolved: strategies.TrainingPlan | None  # the strategy's own plan; None when refused
    refusal: Refusal | None = None

    @property
    def training_plan(self) -> strategies.TrainingPlan:
        """The strategy's own plan: its options resolved for this batch and these devices,
        its micro-batches, its devices (raises ConfigError for a refused configuration)."""
        if self.resolved is None:
            assert self.refusal is not None  # resolved unless refused
            raise ConfigError(self.refusal.reason)
        return self.resolved

    @property
    def runs(self) -> bool:
        """Whether a sweep measures it (else it is refused, or recorded as skipped)."""
        return self.refusal is None

    @property
    def available(self) -> bool:
        """Whether the devices, the machine and the launcher can run the strategy (its options
        or the workload may still be refused): what a comparison that does not name its
        strategies includes."""
        return self.refusal is None or self.refusal.kind in ("options", "batch", "workload")

    def reason(self, *kinds: str) -> str | None:
        """The refusal's reason if it is of one of `kinds`, else None."""
        return self.refusal.reason if self.refusal and self.refusal.kind in kinds else None

    def check(self, check_workload: bool = True) -> None:
        """Raise ConfigError for a configuration that must not run (PlanRefused for what the
        strategy refuses); what the machine lacks, and with `check_workload=False` a workload
        the strategy refuses, are left to be recorded as skipped."""
        refusal = self.refusal
        if refusal is None or refusal.kind == "machine" or (
                refusal.kind in ("workload", "model", "batch") and not check_workload):
            return
        refused = refusal.kind in ("devices", "options", "batch")
        raise (PlanRefused if refused else ConfigError)(refusal.reason)


def job_rank() -> int | None:
    """This process's global rank in the job torchrun or srun started it in, else None."""
    started = job()
    return None if started is None else started.rank


def process_group_backend(devices: DeviceSet, requested: str = "auto") -> str:
    """NCCL when every rank has a GPU of its own (on any host); gloo on CPU or where ranks
    share a GPU (NCCL refuses two ranks on one GPU); or what was asked for."""
    if requested != "auto":
        return requested
    return strategies.default_backend(devices.logical, shared=devices.emulated)


def plan_config(config: Config) -> RunPlan:
    """Plan `config`: the first refusal found, in the order a user fixes them (the strategy's
    own, then the process group, the launcher and the memory at hand), or none."""
    cls = strategies.lookup(config.strategy).cls
    options = strategies.options_of(config.strategy, config.options)
    too_few = None
    try:  # the devices it uses, chosen here once
        used = config.devices.take(len(cls.select_devices(config.devices.logical, options)))
    except strategies.StrategyError as error:
        used, too_few = config.devices, Refusal("devices", f"{config.strategy}: {error}")
    in_job = job_rank() is not None
    per_device = cls.process_per_device
    backend = process_group_backend(used, config.backend) if per_device else None
    launcher = (LauncherKind.JOB if in_job else LauncherKind.SPAWN if per_device
                else LauncherKind.OWN_PROCESS if config.memory_cap_mib
                else LauncherKind.IN_PROCESS)
    training_plan, refusal = None, too_few
    try:
        if too_few is None:
            training_plan = strategies.plan_on(config.strategy, config.workload,
                                               config.global_batch, used.logical, options,
                                               backend)
    except strategies.BatchTooSmall as error:  # this batch alone: a sweep's others may run
        refusal = Refusal("batch", f"{config.strategy}: {error}")
    except strategies.ModelRefused as error:  # this model, whatever else: as the machine's
        refusal = Refusal("model", f"{config.strategy}: {error}")
    except strategies.WorkloadRefused as error:
        refusal = Refusal("workload", f"{config.strategy}: {error}")
    except strategies.Unavailable as error:
        refusal = Refusal("machine", str(error))
    except strategies.StrategyError as error:
        refusal = Refusal("options", f"{config.strategy}: {error}")
    problem = (_backend_problem(used, config.backend) if per_device else None) or (
        _job_problem(config, used, per_device) if in_job else None) or (
        _batch_problem(config, used)) or _memory_problem(config, used)
    if problem and (refusal is None or refusal.kind in ("machine", "model", "batch", "workload")):
        refusal = Refusal("usage", problem)
    return RunPlan(used, launcher, len(used) if per_device else 1, backend,
                   None if refusal else training_plan, refusal)


def _backend_problem(devices: DeviceSet, requested: str) -> str | None:
    """Why `requested` cannot connect these devices' ranks, or None."""
    if requested not in BACKENDS:
        return f"unknown backend {requested!r}; choose from {', '.join(BACKENDS)}"
    if requested == "nccl" and devices.kind != "cuda":
        return (f"--backend nccl needs CUDA devices, got {devices.describe()}; use --backend "
                "gloo on CPU (or leave it at auto)")
    if requested == "nccl" and devices.emulated:
        return (f"--backend nccl refuses two ranks on one GPU ({devices.describe()}); use "
                "--backend gloo where ranks share a GPU (or leave it at auto)")
    return None


def _job_problem(config: Config, used: DeviceSet, per_device: bool) -> str | None:
    """In a job (torchrun's or srun's) every process is one rank: a one-process strategy runs
    on one device, a process-per-device one on all of them."""
    if not per_device and len(used) > 1:
        return (f"{config.strategy} drives all its devices from one process; run it without "
                "torchrun or srun")
    if per_device and len(used) != len(config.devices):
        return (f"under torchrun or srun, {config.strategy} runs on all "
                f"{len(config.devices)} processes; set their number with torchrun's --nnodes "
                "and --nproc-per-node (srun's --nodes and --ntasks-per-node), not "
                "--world-size or --stages")
    return None


def _memory_problem(config: Config, used: DeviceSet) -> str | None:
    """--device-memory-mib counts tensors per logical device, which a GPU of its own does not
    need (its allocator's peak is the figure): there, --memory-cap-mib is the cap."""
    if config.device_memory_mib and used.kind == "cuda" and not used.emulated:
        return ("--device-memory-mib limits what each emulated device holds; on GPUs of their "
                f"own give --memory-cap-mib {config.device_memory_mib} instead (each GPU's "
                "caching allocator capped)")
    return None


def _batch_problem(config: Config, used: DeviceSet) -> str | None:
    """A batch of input images that alone exceeds the memory it must be made in: the host's
    (the global batch is made there), or a GPU's (however a strategy spreads the batch over
    its distinct GPUs, one of them holds at least an equal share)."""
    workload = config.workload
    shares = [("this machine's memory", config.global_batch, host_memory_bytes())]
    if used.kind == "cuda":
        gpus = used.physical
        smallest = min(torch.cuda.get_device_properties(g).total_memory for g in gpus)
        shares.append((f"the memory of {'each of ' if len(gpus) > 1 else ''}"
                       f"{','.join(map(str, gpus))}", -(-config.global_batch // len(gpus)),
                       smallest))
    for where, images, available in shares:
        need = workload.input_bytes(images)
        if available and need > available:
            return (f"--batch-size {config.global_batch} at --image-size {workload.image_size}: "
                    f"{images} input images alone need {format_bytes(need)} "
                    f"({images} x 3 x {workload.image_size}x{workload.image_size} float32), "
                    f"more than {where} ({format_bytes(available)}); use a smaller "
                    "--image-size or --batch-size")
    return None
