"""The `parbench` command line: run and verify sweeps, find the largest batch, plot and report
results, show the environment, list strategies."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence

from parbench.commands.arguments import UsageError
from parbench.commands.parser import COMMANDS, parser
from parbench.launch import Interrupted, interruption_reason
from parbench.machine.cluster import job, slurm_stop_reason

__all__ = ["COMMANDS", "main", "parser"]

EXIT_USAGE = 2


def _interrupt(signum, frame):
    # Once: under Slurm a task may get a second SIGTERM (srun passes its own on), which must
    # not cut short the record of the first. Only the rank that records asks slurmctld why.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    started = job()
    raise Interrupted((slurm_stop_reason() if started is None or started.rank == 0 else None)
                      or "SIGTERM")


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM (a scheduler, `kill`) stops a sweep as Ctrl-C does: workers are stopped,
    # every finished configuration is already on disk, and the one it stopped in is recorded
    # as stopped, with why (Slurm's time limit, scancel).
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        argv = list(sys.argv[1:] if argv is None else argv)
        args = parser().parse_args(argv)
        args.given_argv = argv[1:]  # the command's own flags, as typed (run --experiment)
        return args.handler(args)
    except UsageError as error:
        print(f"parbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as interrupt:
        print(f"parbench: {interruption_reason(interrupt)}; records measured so far are in the "
              "run folder", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`parbench strategies | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
