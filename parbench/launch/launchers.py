"""The launchers behind one interface: each measures a configuration, and steps it once for
`verify`, in the processes its plan names (`RunPlan.launcher`)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from parbench.launch.failures import LaunchError
from parbench.launch.job import measure_in_job
from parbench.launch.ranks import Task, in_process_threads, measure_here
from parbench.launch.spawn import spawn
from parbench.launch.worker import Trained, combine_trained, train_steps
from parbench.measure import Pace
from parbench.measure.measurement import Measurement
from parbench.plan.config import Config
from parbench.plan.planning import LauncherKind

__all__ = ["LAUNCHERS", "Launcher", "launcher_for"]


class Launcher(ABC):
    """Runs a configuration's workers and hands back rank 0's result."""

    @abstractmethod
    def measure(self, config: Config, pace: Pace | None = None) -> Measurement | None:
        """The configuration's measurement (None on a job's rank other than 0). With
        `pace`, an external timer drives every step of this process, which then plays rank 0
        itself (see `parbench.launch.paced`)."""

    def verify_training(self, config: Config, batches: list[tuple[torch.Tensor, torch.Tensor]],
                        nudge_seed: int | None = None) -> Trained:
        """The loss of a step of `config` on each batch, and the parameters after the last
        (`nudge_seed`: see `worker.train_steps`)."""
        with in_process_threads(config):
            return combine_trained([train_steps(config, batches, nudge_seed)])


class InProcess(Launcher):
    """A one-process strategy, in this process on its devices' share of cores."""

    def measure(self, config, pace=None):
        return measure_here(config, pace)


class OwnProcess(Launcher):
    """A one-process strategy under a memory cap, in a worker of its own: there an allocation
    can fail where torch cannot recover (even crash), never in the process that holds the
    sweep. A paced run stays here, where its timer is."""

    def measure(self, config, pace=None):
        return measure_here(config, pace) if pace else spawn(config, Task.ALONE)


class Spawn(Launcher):
    """A process per device on this host, rank 0's result gathered back."""

    def measure(self, config, pace=None):
        return spawn(config, Task.MEASURE, pace=pace)

    def verify_training(self, config, batches, nudge_seed=None):
        if nudge_seed is not None:
            raise LaunchError("only a one-process strategy is nudged (verify's rounding twin)")
        return spawn(config, Task.VERIFY, batches)


class JobRank(Launcher):
    """This process is one rank of a job torchrun or srun started: every rank measures the
    configuration in a worker of its own and the ranks agree on its outcome (see
    `launch.job`)."""

    def measure(self, config, pace=None):
        return measure_in_job(config)

    def verify_training(self, config, batches, nudge_seed=None):
        raise LaunchError("verify starts its own processes; run it without torchrun or srun")


LAUNCHERS: dict[LauncherKind, Launcher] = {
    LauncherKind.IN_PROCESS: InProcess(), LauncherKind.OWN_PROCESS: OwnProcess(),
    LauncherKind.SPAWN: Spawn(), LauncherKind.JOB: JobRank(),
}


def launcher_for(config: Config) -> Launcher:
    return LAUNCHERS[config.plan.launcher]
