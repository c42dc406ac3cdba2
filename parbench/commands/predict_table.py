"""`parbench predict --table FILE`: a published table's rows PREDICTED from its setup alone,
each beside the perfect-scaling guess and what it would be without each cost, as a CSV."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from parbench.advisor.tables.predict import predict_setup
from parbench.advisor.tables.setup import read_setup
from parbench.commands.arguments import UsageError

__all__ = ["add_table_arguments", "loader_rate", "predict_tables", "refuse_table_flags"]

# The columns printed, in order (the CSV has every one).
SHOWN = ("setup", "row", "predicted_ips", "perfect_scaling_ips", "predicted_efficiency",
         "predicted_speedup", "without_communication_ips", "loader_cap_ips",
         "without_recompute_ips", "dispatch_bound")


def add_table_arguments(predict: argparse.ArgumentParser) -> None:
    predict.add_argument("--table", nargs="+", type=Path, metavar="FILE",
                         help="published tables described in files (docs/prediction.md: the "
                              "GPU, the job, the link, what feeds the GPUs, each row's layout; "
                              "never the table's figures): each row PREDICTED from a step "
                              "parbench measured on another GPU, beside perfect scaling")
    predict.add_argument("--loader", type=Path, metavar="FILE",
                         help="with --table: the host's input-pipeline rate, a `parbench "
                              "loader --into FILE` file (a DataLoader worker's images a second), "
                              "which caps a table whose host decodes its images (none: the cap "
                              "is left out, and said)")
    predict.add_argument("--reference-gpu", metavar="NAME",
                         help="with --table: the GPU whose measured step is carried (its name "
                              "as torch reports it; default: the H200's, or the H100's for an "
                              "H200)")


def loader_rate(path: Path | None) -> float | None:
    """A loader worker's images a second, from a parbench loader file: its DataLoader run with
    the most workers, over them (what a training loader's worker delivers, collation and the
    copy between processes included); None without a file."""
    if path is None:
        return None
    try:
        runs = json.loads(path.read_text())["data_loader"]["runs"]
        most = max(runs, key=lambda run: run["workers"])
        if int(most["workers"]) < 1:
            raise ValueError("its DataLoader ran no worker process (--workers 0): give a "
                             "file measured with 1 or more")
        return float(most["images_per_s_median"]) / int(most["workers"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"--loader {path}: not a file parbench loader --into wrote "
                         f"({type(error).__name__}: {error}); measure one with parbench "
                         "loader --into FILE") from None


# predict's flags of a run or a sweep, which a table's setup says for itself.
NOT_WITH_TABLE = ("devices", "batch_size", "split_size", "model", "image_size", "precision",
                  "profile_device", "threads", "profile_cache", "figure")


def refuse_table_flags(args: argparse.Namespace) -> None:
    """--loader and --reference-gpu are --table's; what a setup says is not a flag beside it."""
    if not args.table:
        given = [f"--{name.replace('_', '-')}" for name in ("loader", "reference_gpu")
                 if getattr(args, name) is not None]
        if given:
            raise UsageError(f"{', '.join(given)}: for --table FILE; give a table's setup file")
        return
    given = [f"--{name.replace('_', '-')}" for name in NOT_WITH_TABLE
             if getattr(args, name, None) is not None]
    if args.run or given or args.link != "measured":
        what = ", ".join(([args.run] if args.run else []) + given
                         + (["--link"] if args.link != "measured" else []))
        raise UsageError(f"{what}: a table's setup file says its GPU, job, link and rows; give "
                         "--table FILE with --loader, --reference-gpu or --csv only")


def predict_tables(args: argparse.Namespace) -> int:
    rate = loader_rate(args.loader)
    rows = []
    for path in args.table:
        try:
            setup = read_setup(path)
            print(f"predicting {setup.name} ({len(setup.rows)} rows on {setup.gpu.label})",
                  file=sys.stderr, flush=True)
            rows += predict_setup(setup, rate, args.reference_gpu)
        except ValueError as error:
            raise UsageError(str(error)) from None
    table = pd.DataFrame(rows)
    print("PREDICTED (no published figure is an input; where each row's step was carried from: "
          "the CSV's carried_from)")
    shown = [column for column in SHOWN if column in table]
    print(table[shown].to_string(index=False, float_format=lambda v: f"{v:.4g}", na_rep="-"))
    if rate is None and (table["data"] == "jpeg-cpu").any():
        print("the input pipeline is not counted: a setup decodes JPEGs on its host; give "
              "--loader FILE (parbench loader --into FILE) to cap it at the host's rate")
    print(f"not modelled: {rows[0]['not_modelled']}")
    if args.csv:
        table.to_csv(args.csv, index=False)
        print(f"predictions: {args.csv}")
    return 0
