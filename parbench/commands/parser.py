"""The `parbench` command line's parser: every command adds its own parsers and arguments."""

from __future__ import annotations

import argparse

from parbench.commands import (
    collectives,
    info,
    loader,
    max_batch,
    predict,
    profile,
    project,
    recommend,
    results,
    run,
    verify,
)
from parbench.commands.arguments import UsageError

__all__ = ["COMMANDS", "DESCRIPTION", "parser"]

DESCRIPTION = ("The `parbench` command line: run and verify sweeps, find the largest batch, "
               "measure the host's input pipeline, profile a training step's operations, plot "
               "and report results, show the environment, list strategies.")
# Each command module adds its own parsers and arguments, in this order in --help.
COMMANDS = (run, verify, max_batch, collectives, loader, profile, predict, recommend, project,
            results, info)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line instead of usage plus error."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="parbench", description=DESCRIPTION)
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for command in COMMANDS:
        command.add_parsers(commands)
    # `parbench run --experiment` runs its experiment's `then` steps, parbench commands: this
    # parser, handed to it here since this module imports commands/run.py.
    commands.choices["run"].set_defaults(parse_command=root.parse_args)
    return root
