"""`parbench env` and `parbench strategies`: what results are stamped with, and what can run."""

from __future__ import annotations

import argparse

import strategies
from parbench.commands.arguments import default_devices, device_set
from parbench.environment import collect_environment, format_environment

__all__ = ["command_env", "command_strategies"]


def command_env(args: argparse.Namespace) -> int:
    print(format_environment(collect_environment()))
    return 0


def command_strategies(args: argparse.Namespace) -> int:
    devices = device_set(args.devices or default_devices()[0])
    for name, reason in strategies.available(devices.logical).items():
        summary = strategies.lookup(name).cls.summary
        print(f"{name:<26} {summary}" + ("" if reason is None else f"  [unavailable: {reason}]"))
    return 0
