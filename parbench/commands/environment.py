"""The environment a command's records carry: the machine's (parbench.machine.environment) and
the timing models' version at measuring, by which a held-out run is judged."""

from __future__ import annotations

from parbench.advisor.version import PREDICTOR_VERSION
from parbench.machine.environment import collect_environment

__all__ = ["measuring_environment"]


def measuring_environment() -> dict:
    """collect_environment() and the models' version (the core knows nothing of the models)."""
    return {**collect_environment(), "predictor_version": PREDICTOR_VERSION}
