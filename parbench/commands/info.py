"""`parbench env` and `parbench strategies`: what results are stamped with, and what can run."""

from __future__ import annotations

import argparse

from parbench import strategies
from parbench.commands.arguments import default_devices, device_set
from parbench.machine.environment import collect_environment, format_environment
from parbench.plan import suite

__all__ = ["command_env", "command_strategies"]


def command_env(args: argparse.Namespace) -> int:
    print(format_environment(collect_environment()))
    return 0


def command_strategies(args: argparse.Namespace) -> int:
    devices = device_set(args.devices or default_devices()[0])
    for name in strategies.names():
        summary = strategies.lookup(name).summary
        reason = suite.cannot_run(name, devices)
        print(f"{name:<26} {summary}" + ("" if reason is None else f"  [unavailable: {reason}]"))
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench env` and `parbench strategies`: its parser and arguments."""
    env = commands.add_parser("env", help="print what results are stamped with")
    env.set_defaults(handler=command_env)

    listing = commands.add_parser(
        "strategies", help="list strategies and whether they can run",
        description="Each strategy, and why it cannot run on --devices where it cannot: its "
                    f"plan at the suite's configuration ({suite.MODELS[0]}, batch "
                    f"{suite.GLOBAL_BATCH}, {suite.IMAGE_SIZE} px).")
    listing.add_argument("--devices", help="device list to check against (default as for run)")
    listing.set_defaults(handler=command_strategies)
