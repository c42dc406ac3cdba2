"""`parbench plot` and `parbench report`: figures and reports from records already written."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from parbench.commands.arguments import UsageError, output_folder
from parbench.plots import write_collectives_figure, write_figures
from parbench.predict.published import (
    PREDICTION_FILE,
    PROFILES_FOLDER,
    predict_into,
    run_records,
    stored_prediction,
)
from parbench.predict.version import PREDICTOR_VERSION
from parbench.report import write_index, write_run_report
from parbench.results import ResultsError, RunFolder, read_results

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
    report = write_run_report(frame, out, figures)
    print(report)
    index_dir = Path(args.index) if args.index else out.parent
    print(write_index(index_dir))
    return 0


def _predict_again(folder: RunFolder, out: Path) -> None:
    """The run's predictions written again from its records and its own profiles, as `parbench
    predict` made them (prediction.json), where this version of the models made them; those of
    another version are left as they are (a held-out run keeps the version it was judged by)."""
    stored = stored_prediction(folder)
    if stored is None or stored.get("predictor_version") != PREDICTOR_VERSION:
        if stored is not None:
            print(f"predictions of models version {stored.get('predictor_version')} kept as "
                  f"they are (these are version {PREDICTOR_VERSION})", file=sys.stderr)
        return
    if Path(out).resolve() != folder.path.resolve():
        for name in (PROFILES_FOLDER, "collectives.json", PREDICTION_FILE):
            source = folder.path / name
            if source.is_dir():
                shutil.copytree(source, Path(out) / name, dirs_exist_ok=True)
            elif source.is_file():
                shutil.copy(source, Path(out) / name)
    try:
        predict_into(RunFolder(out), run_records(folder), stored["link"])
    except ValueError as error:
        raise UsageError(f"{folder.path}'s predictions cannot be written again: {error}"
                         ) from None


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
