"""The sweep: its typed specification (saved as a run's command.json) and the sweep built from
it once (configurations, refusals, baselines, trial schedule) that every driver measures."""

from parbench.plan.build import Sweep
from parbench.plan.spec import SPEC_VERSION, SpecError, SweepSpec

__all__ = ["SPEC_VERSION", "SpecError", "Sweep", "SweepSpec"]
