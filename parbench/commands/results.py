"""`parbench plot` and `parbench report`: figures and reports from records already written."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from parbench.advisor.runs.published import (
    PROFILES_FOLDER,
    kept_files,
    predict_into,
    run_records,
    stale_models,
    stored_prediction,
)
from parbench.advisor.runs.summary import prediction_section
from parbench.commands.arguments import UsageError, output_folder
from parbench.plots import write_collectives_figure, write_figures
from parbench.reporting.report import write_index, write_run_report
from parbench.results.folder import ResultsError, RunFolder, read_results

__all__ = ["command_plot", "command_report"]


def _results(args: argparse.Namespace):
    try:
        return read_results(args.results)
    except ResultsError as error:
        raise UsageError(str(error)) from None


def command_plot(args: argparse.Namespace) -> int:
    frame, folder = _results(args)
    out = output_folder(args.out, folder)
    written = write_figures(frame, out, RunFolder(folder).read_collectives())
    if not written:
        print(f"no figure: none of the {len(frame)} records has status ok")
        return 1
    for path in written:
        print(f"{path} (+ .svg)")
    return 0


def command_report(args: argparse.Namespace) -> int:
    frame, folder = _results(args)
    out = output_folder(args.out, folder)
    collectives = RunFolder(folder).read_collectives()
    figures = write_figures(frame, out, collectives)
    bandwidth = write_collectives_figure(collectives, out)
    figures += [bandwidth] if bandwidth else []
    _predict_again(RunFolder(folder), out)
    report = write_run_report(frame, out, figures, prediction_section(out))
    print(report)
    index_dir = Path(args.index) if args.index else out.parent
    print(write_index(index_dir))
    return 0


def _predict_again(folder: RunFolder, out: Path) -> None:
    """The run's predictions written again from its records and its own profiles, as `parbench
    predict` made them (prediction.json); those another version of the models made are kept
    as they are (a held-out run keeps the version it was judged by)."""
    stored = stored_prediction(folder)
    if stored is None:
        return
    elsewhere = Path(out).resolve() != folder.path.resolve()
    stale = stale_models(stored)
    if stale:
        print(f"{folder.path}'s predictions kept as they are: {stale}", file=sys.stderr)
        for path in kept_files(folder.path) if elsewhere else []:
            shutil.copy(path, Path(out) / path.name)
        return
    for name in (PROFILES_FOLDER, "collectives.json") if elsewhere else ():
        source = folder.path / name
        if source.is_dir():
            shutil.copytree(source, Path(out) / name, dirs_exist_ok=True)
        elif source.is_file():
            shutil.copy(source, Path(out) / name)
    profiles = Path(out) / PROFILES_FOLDER
    before = set(profiles.iterdir()) if profiles.is_dir() else set()
    try:
        predict_into(RunFolder(out), run_records(folder), stored["link"])
    except ValueError as error:
        raise UsageError(f"{folder.path}'s predictions cannot be written again: {error}"
                         ) from None
    measured = sorted(path.name for path in set(profiles.iterdir()) - before)
    if measured:  # the run's profiles lacked them: predictions no longer its own
        print(f"warning: {', '.join(measured)} measured now, missing from "
              f"{folder.path / PROFILES_FOLDER}; these predictions are not the run's own",
              file=sys.stderr)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench plot` and `parbench report`: its parser and arguments."""
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
                    "record; its predictions again, from the profiles in the folder, where "
                    "`parbench predict` made them with this version of the models) and "
                    "refresh the table of runs in the results folder's README.md.")
    report.add_argument("results", nargs="+", help="as for plot")
    report.add_argument("--out", help="the run folder to write into (default: the first one)")
    report.add_argument("--index", help="results folder whose README.md indexes every run "
                        "(default: the run folder's parent)")
    report.set_defaults(handler=command_report)
