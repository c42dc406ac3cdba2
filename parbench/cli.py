"""The `parbench` command line: run and verify sweeps, find the largest batch, plot and report
results, show the environment, list strategies."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

import strategies
from parbench import launch, suite
from parbench.commands.arguments import UsageError, add_strategy_options
from parbench.commands.collectives import command_collectives
from parbench.commands.info import command_env, command_strategies
from parbench.commands.max_batch import command_max_batch
from parbench.commands.project import command_project
from parbench.commands.results import command_plot, command_report
from parbench.commands.run import command_run
from parbench.commands.verify import command_verify
from parbench.config import SCALINGS
from parbench.measure.collectives import COLLECTIVES
from parbench.projection import LINKS
from parbench.workloads import MODELS, PRECISIONS

__all__ = ["QUICK_RUN", "main", "parser"]

EXIT_USAGE = 2

# `parbench run` with no arguments measures the suite's configuration (resnet18, batch 32,
# 128 px, 2 + 5 steps), as asv and pytest-benchmark do: about 4 minutes on two CPU cores.
QUICK_RUN = dict(model=suite.MODELS[0], batch_size=str(suite.GLOBAL_BATCH),
                 image_size=str(suite.IMAGE_SIZE), steps=suite.STEPS, warmup=suite.WARMUP)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument as one line instead of usage plus error."""

    def error(self, message: str):
        raise UsageError(f"{message} (see {self.prog} --help)")


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="parbench", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser(
        "run", help="measure strategies (every option taking a comma list sweeps over it)",
        description="Train a ResNet with each strategy on synthetic data and record throughput, "
                    "step times and peak memory. Comma lists sweep: each point is one record.")
    run.add_argument("--strategy", help="strategies to compare (default: every one that can run "
                     f"here; available: {', '.join(strategies.names())})")
    run.add_argument("--model", default=QUICK_RUN["model"], help=f"{', '.join(MODELS)}")
    run.add_argument("--batch-size", default=QUICK_RUN["batch_size"],
                     help="global batch per optimiser step (comma list sweeps); under "
                          "--scaling weak, the batch per device")
    run.add_argument("--scaling", choices=SCALINGS, default="strong",
                     help="strong (default): --batch-size is the global batch, the same on "
                          "any number of devices; weak: it is the batch per device, so the "
                          "global batch grows with the devices a strategy uses, as in "
                          "published data-parallel figures")
    run.add_argument("--image-size", default=QUICK_RUN["image_size"],
                     help="square image side in pixels")
    run.add_argument("--num-classes", type=int, default=1000)
    run.add_argument("--precision", default="fp32", help=f"{', '.join(PRECISIONS)} (autocast; "
                     "fp16 adds gradient scaling)")
    run.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    run.add_argument("--compile", action="store_true",
                     help="torch.compile the model (each stage, each replica); the first "
                          "warm-up step compiles, its time is recorded apart "
                          "(compile_time_s), so --warmup must be at least 1")
    run.add_argument("--devices", action="append",
                     help="logical devices, e.g. cpu, cuda:0, cpu,cpu (emulated) or "
                          "cuda:0,cuda:1; repeat the flag to sweep device sets "
                          "(default: all GPUs, else two logical devices on one)")
    run.add_argument("--backend", default="auto", choices=launch.BACKENDS,
                     help="process group for one-process-per-device strategies (default auto: "
                          "NCCL when every rank has its own GPU, else gloo)")
    add_strategy_options(run)
    run.add_argument("--data", help="train on an image folder (one subfolder per class) "
                     "instead of synthetic data; each rank reads its part through "
                     "DistributedSampler")
    run.add_argument("--loader-workers", type=int, default=0,
                     help="DataLoader worker processes per rank for --data (default 0)")
    run.add_argument("--memory-cap-mib", type=int, help="each process may allocate this many "
                     "MiB beyond what it holds at the start (CPU: a memory limit to run out "
                     "of, as on a GPU; beyond it the configuration is recorded as oom)")
    run.add_argument("--timeout", type=float, default=1800.0,
                     help="seconds a configuration may take before its processes are stopped "
                          "and it is recorded as an error (default 1800)")
    run.add_argument("--steps", type=int, default=QUICK_RUN["steps"], help="measured steps")
    run.add_argument("--warmup", type=int, default=QUICK_RUN["warmup"],
                     help="steps run before measuring and discarded")
    run.add_argument("--threads-per-device", type=int, default=1,
                     help="CPU threads per logical CPU device (default 1: N devices = N cores)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                     help="a progress bar naming the configuration being measured, with an "
                          "ETA (default auto: on when stderr is a terminal; else a line per "
                          "configuration)")
    run.add_argument("--resume", metavar="RUN", help="measure only what the run folder RUN "
                     "lacks (its own arguments are used; failed configurations are measured "
                     "again)")
    run.add_argument("--results-dir", default="results", help="where run folders are written")
    run.add_argument("--tag", default="", help="suffix for the run folder's name")
    run.set_defaults(handler=command_run)
    # What each flag is when not given: a resumed run accepts only those, or the run's own.
    run.set_defaults(sweep_defaults=vars(run.parse_args([])))

    check = commands.add_parser(
        "verify", help="check every strategy's step equals the single-device step",
        description="From one seed, one optimiser step of each strategy against the "
                    "single-device baseline on the same global batch; prints the largest "
                    "parameter difference and exits 1 above the tolerance. Micro-batched "
                    "strategies cut the batch into 4 micro-batches unless --split-size says "
                    "otherwise.")
    check.add_argument("--strategy", help="strategies to check (default: every one that can "
                       "run here)")
    check.add_argument("--model", default="resnet18")
    check.add_argument("--batch-size", default="8")
    check.add_argument("--image-size", default="64")
    check.add_argument("--num-classes", type=int, default=10)
    check.add_argument("--precision", default="fp32", help=f"one of {', '.join(PRECISIONS)}, "
                       "for the baseline and every strategy (autocast; fp16 adds gradient "
                       "scaling, started for each strategy at the largest scale from 2^16 "
                       "down at which neither its step nor the baseline's overflows)")
    check.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    add_strategy_options(check, sweep=False)
    check.add_argument("--threads-per-device", type=int, default=1)
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--tolerance", type=float, default=1e-5,
                       help="largest accepted absolute parameter difference (default 1e-5)")
    check.set_defaults(handler=command_verify)

    largest = commands.add_parser(
        "max-batch", help="find the largest global batch each strategy trains in memory",
        description="Doubling, then bisection: each trial trains one warm-up and one measured "
                    "step; out of memory ends a trial. On CPU a per-process cap stands in for "
                    "device memory (--memory-cap-mib).")
    largest.add_argument("--strategy", required=True, help="strategies (comma list)")
    largest.add_argument("--model", default="resnet50")
    largest.add_argument("--image-size", default="128")
    largest.add_argument("--num-classes", type=int, default=1000)
    largest.add_argument("--precision", default="fp32", help=f"{', '.join(PRECISIONS)}")
    largest.add_argument("--channels-last", action="store_true", help="NHWC memory format")
    largest.add_argument("--devices", help="as for run (default: all GPUs, else cpu,cpu)")
    largest.add_argument("--memory-cap-mib", type=int, help="each process may allocate this "
                         "many MiB beyond what it holds at the start (needed on CPU)")
    largest.add_argument("--start", type=int, default=1, help="first batch tried (default 1)")
    largest.add_argument("--limit", type=int, default=4096, help="largest batch tried")
    largest.add_argument("--threads-per-device", type=int, default=1)
    add_strategy_options(largest, sweep=False)
    largest.add_argument("--timeout", type=float, default=1800.0)
    largest.add_argument("--results-dir", default="results")
    largest.set_defaults(handler=command_max_batch)

    collectives = commands.add_parser(
        "collectives", help="measure collective bandwidth (all-reduce, all-gather, "
        "reduce-scatter) over message sizes",
        description="One process per device, as ddp runs them (the same backend), times each "
                    "collective over message sizes and reports time, algorithm bandwidth "
                    "(size / time) and bus bandwidth with nccl-tests' definitions, as rows "
                    "and a figure (collectives.csv, collectives.png).")
    collectives.add_argument("--devices", help="as for run, at least 2 (default: all GPUs, "
                             "else cpu,cpu)")
    collectives.add_argument("--backend", default="auto", choices=launch.BACKENDS,
                             help="as for run (default auto: NCCL when every rank has its own "
                                  "GPU, else gloo)")
    collectives.add_argument("--collective", default=",".join(COLLECTIVES),
                             help=f"comma list of {', '.join(COLLECTIVES)} (default: all)")
    collectives.add_argument("--min-size", default="4KiB", help="smallest message (default "
                             "4KiB)")
    collectives.add_argument("--max-size", default="256MiB", help="largest message (default "
                             "256MiB)")
    collectives.add_argument("--factor", type=int, default=4,
                             help="each size is the last times this (default 4)")
    collectives.add_argument("--iterations", type=int, default=5,
                             help="timed calls per size, averaged (default 5)")
    collectives.add_argument("--warmup", type=int, default=1,
                             help="untimed calls per size first (default 1)")
    collectives.add_argument("--threads-per-device", type=int, default=1)
    collectives.add_argument("--timeout", type=float, default=1800.0)
    collectives.add_argument("--into", metavar="RUN", help="write into this run folder (its "
                             "communication figure then draws the ideal DDP step) instead "
                             "of a new one")
    collectives.add_argument("--results-dir", default="results")
    collectives.add_argument("--tag", default="", help="suffix for the new folder's name "
                             "(default: collectives)")
    collectives.set_defaults(handler=command_collectives)

    projection = commands.add_parser(
        "project", help="project a run's ddp step to more ranks and other links (labelled "
        "projected, kept apart from measurements)",
        description="From each ddp record's measured compute time and gradient bytes, the "
                    "step at N ranks on a link of a given bus bandwidth under the ring "
                    "all-reduce model, with no overlap and with full overlap; checked against "
                    "the measured step where `parbench collectives --into RUN` measured the "
                    "link. Writes projection.csv and projection.png into the run folder.")
    projection.add_argument("run", help="a run folder with ddp records")
    projection.add_argument("--ranks", default="2,4,8,16,32",
                            help="rank counts (default 2,4,8,16,32)")
    projection.add_argument("--link", default="measured," + ",".join(LINKS),
                            help="links: measured (parbench collectives in the run folder), "
                                 + ", ".join(f"{k} (~{v:g} GB/s)" for k, v in LINKS.items())
                                 + ", or a bus bandwidth in GB/s (default: all of them)")
    projection.set_defaults(handler=command_project)

    plot = commands.add_parser(
        "plot", help="draw figures from results",
        description="Strategy comparison, scaling curve, memory per device and split-size "
                    "trade-off, as PNG and SVG, from run folders, records files or "
                    "pytest-benchmark JSON.")
    plot.add_argument("results", nargs="+", help="run folders, records.json/.csv files, or "
                      "pytest --benchmark-json output")
    plot.add_argument("--out", help="where the figures go (default: the first run folder)")
    plot.set_defaults(handler=command_plot)

    report = commands.add_parser(
        "report", help="write a run's README.md with its figures and the results index",
        description="Write README.md into the run folder (environment, figures, every "
                    "record) and refresh the table of runs in the results folder's README.md.")
    report.add_argument("results", nargs="+", help="as for plot")
    report.add_argument("--out", help="the run folder to write into (default: the first one)")
    report.add_argument("--index", help="results folder whose README.md indexes every run "
                        "(default: the run folder's parent)")
    report.set_defaults(handler=command_report)

    env = commands.add_parser("env", help="print what results are stamped with")
    env.set_defaults(handler=command_env)

    listing = commands.add_parser("strategies", help="list strategies and whether they can run")
    listing.add_argument("--devices", help="device list to check against (default as for run)")
    listing.set_defaults(handler=command_strategies)
    return root


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    # SIGTERM (a scheduler, `kill`) stops a sweep as Ctrl-C does: workers are stopped and
    # every finished configuration is already on disk.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        args = parser().parse_args(argv)
        return args.handler(args)
    except UsageError as error:
        print(f"parbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("parbench: interrupted; records measured so far are in the run folder",
              file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`parbench strategies | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return 141


if __name__ == "__main__":
    sys.exit(main())
