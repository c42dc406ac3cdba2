"""What is refused before anything runs: a configuration that its strategy, its devices, its
launcher or the memory at hand cannot take, each as one line that says how to fix it."""

from __future__ import annotations

import torch

import strategies
from parbench import launch
from parbench.config import Config
from parbench.devices import format_bytes, host_memory_bytes

__all__ = ["ConfigError", "PlanRefused", "check"]


class ConfigError(ValueError):
    """A configuration that cannot run; its message says how to fix it."""


class PlanRefused(ConfigError):
    """What the strategy itself refuses for this combination of options, batch and devices
    (in a sweep that gives it others, the combination is recorded as skipped)."""


def check(config: Config, check_workload: bool = True) -> None:
    """Raise ConfigError for what `config` cannot do here; `check_workload=False` leaves a
    workload the strategy refuses to be recorded as skipped instead (the quick comparison)."""
    _check_plan(config, check_workload)
    _check_launch(config)
    _check_batch_fits(config)


def _check_plan(config: Config, check_workload: bool) -> None:
    """What the strategy refuses (its plan): too few devices, bad option values, impossible
    cuts and a workload it cannot train. A machine that cannot run it is not refused: the
    configuration is recorded as skipped."""
    try:
        config.plan  # noqa: B018 (planning is the check)
    except strategies.WorkloadRefused as error:
        if check_workload:
            raise ConfigError(f"{config.strategy}: {error}") from None
    except strategies.Unavailable:
        pass
    except strategies.StrategyError as error:
        raise PlanRefused(f"{config.strategy}: {error}") from None


def _check_launch(config: Config) -> None:
    """A backend that cannot connect the ranks, and, under torchrun, strategies that do not
    run one process per rank."""
    used = config.used_devices
    if launch.backend_for(config) is not None:
        problem = launch.backend_problem(used, config.backend)
        if problem:
            raise ConfigError(problem)
    if launch.torchrun_rank() is None:
        return
    process_per_device = config.process_per_device
    if not process_per_device and len(used) > 1:
        raise ConfigError(f"{config.strategy} drives all its devices from one process; run it "
                          "without torchrun")
    if process_per_device and len(used) != len(config.devices):
        raise ConfigError(f"under torchrun, {config.strategy} runs on all "
                          f"{len(config.devices)} processes; set their number with torchrun's "
                          "--nnodes and --nproc-per-node, not --world-size or --stages")


def _check_batch_fits(config: Config) -> None:
    """A batch of input images that alone exceeds the memory it must be made in: the host's
    (the global batch is made there), or a GPU's (however a strategy spreads the batch over
    its distinct GPUs, one of them holds at least an equal share)."""
    workload = config.workload
    per_image = 3 * workload.image_size**2 * 4  # float32 pixels
    shares = [("this machine's memory", config.global_batch, host_memory_bytes())]
    if config.used_devices.kind == "cuda":
        gpus = config.used_devices.physical
        smallest = min(torch.cuda.get_device_properties(g).total_memory for g in gpus)
        shares.append((f"the memory of {'each of ' if len(gpus) > 1 else ''}"
                       f"{','.join(map(str, gpus))}", -(-config.global_batch // len(gpus)),
                       smallest))
    for where, images, available in shares:
        if available and images * per_image > available:
            raise ConfigError(
                f"--batch-size {config.global_batch} at --image-size {workload.image_size}: "
                f"{images} input images alone need {format_bytes(images * per_image)} "
                f"({images} x 3 x {workload.image_size}x{workload.image_size} float32), more "
                f"than {where} ({format_bytes(available)}); use a smaller --image-size or "
                "--batch-size")
