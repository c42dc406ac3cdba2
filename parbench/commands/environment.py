"""The environment a command's records carry: the machine's (parbench.machine.environment) and
the timing models' version at measuring, by which a held-out run is judged; and whether a run
was measured on this machine."""

from __future__ import annotations

import sys

from parbench.advisor.version import PREDICTOR_VERSION
from parbench.machine.devices import cpu_cores
from parbench.machine.environment import collect_environment, cpu_model
from parbench.results.folder import RunFolder

__all__ = ["measuring_environment", "other_machine", "warn_if_measured_elsewhere"]


def measuring_environment() -> dict:
    """collect_environment() and the models' version (the core knows nothing of the models)."""
    return {**collect_environment(), "predictor_version": PREDICTOR_VERSION}


def other_machine(folder: RunFolder) -> str | None:
    """A warning where the run was measured on another CPU than this one (its env.json): what
    its profiles/ folder lacks, and every fixed-cost probe, is measured here (None: the same,
    or the run does not say)."""
    there = folder.read_environment()
    ran = (there.get("cpu_model"), there.get("cpu_cores_available"))
    here = (cpu_model(), cpu_cores())
    if None in ran or ran == here:
        return None
    return (f"warning: {folder.path.name} was measured on {ran[0]} with {ran[1]} cores, and "
            f"this machine is {here[0]} with {here[1]}: the profiles its profiles/ folder "
            "lacks, and the fixed-cost probes, are measured here, at this machine's speed")


def warn_if_measured_elsewhere(folder: RunFolder) -> None:
    """other_machine's warning, on standard error, where there is one."""
    warning = other_machine(folder)
    if warning:
        print(warning, file=sys.stderr)
