"""`parbench predict`: the timing models' predictions, labelled PREDICTED and kept apart from
measured records: beside a run's own records with their error (`predict RUN`), or for a
device count and link not at hand (`predict --devices 8 --link nvlink4`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from parbench.commands.arguments import UsageError, int_list, open_run_folder
from parbench.plots import write_predicted_timelines, write_prediction_figure, write_sweep_figure
from parbench.predict.links import LINKS, AnyLink, MeasuredLink, links_help, named_link
from parbench.predict.record_profiles import profiles_for
from parbench.predict.records import predicted_beside_measured
from parbench.predict.summary import (
    PREDICTIONS_FILE,
    error_summary,
    memory_summary,
    speedup_summary,
    trace_summary,
    with_reader_columns,
)
from parbench.predict.sweep import above_ideal_notes, predict_sweep
from parbench.results import atomic_write_text
from parbench.workloads import MODELS, PRECISIONS

__all__ = ["command_predict"]


def _link(name: str, collectives: list[dict], where: str, backend: str | None = None) -> AnyLink:
    """`measured` (the collectives measured `where`), a name in LINKS, or a bandwidth in GB/s."""
    if name == "measured":
        if not collectives:
            raise UsageError(f"--link measured needs collectives measured in {where}: run "
                             f"parbench collectives --into "
                             f"{where}, or name a link ({', '.join(LINKS)}) or a bandwidth in "
                             "GB/s")
        return MeasuredLink(f"measured in {where}", tuple(collectives), backend)
    try:
        return named_link(name)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _predict_run(args: argparse.Namespace) -> int:
    folder = open_run_folder(args.run)
    records = pd.DataFrame([r.to_dict() for r in folder.read_records()])
    if records.empty or not (records["status"] == "ok").any():
        raise UsageError(f"{folder.path} has no measured record to predict")
    backends = list(records["backend"].dropna()) if "backend" in records else []
    link = _link(args.link, folder.read_collectives(), str(folder.path),
                 backends[0] if backends else None)
    try:
        table = predicted_beside_measured(
            records, lambda record: profiles_for(record, args.profile_cache), link)
    except ValueError as error:  # a link or a record without what a prediction needs
        raise UsageError(str(error)) from None
    if table.empty:
        raise UsageError(f"{folder.path} has no record of a strategy the timing models cover "
                         "(single, model-parallel, the pipelines, ddp, fsdp)")
    table = with_reader_columns(table, link.name)
    atomic_write_text(folder.path / PREDICTIONS_FILE,
                      table.drop(columns=["timeline", "predicted_timeline"], errors="ignore")
                      .to_csv(index=False))
    figure = write_prediction_figure(table, folder.path, link.name)
    timelines = write_predicted_timelines(table, folder.path)
    print(f"PREDICTED beside measured (timing model from a profile of this device; link: "
          f"{link.describe()}):")
    shown = table.assign(options=table["split_size"].map(
        lambda split: "" if pd.isna(split) else f"split {split:g}"))
    print(shown[["strategy", "options", "world_size", "step_time_median_s",
                 "predicted_step_time_s", "prediction_error", "speedup_vs_baseline",
                 "predicted_speedup", "speedup_error", "measured_bubble_fraction",
                 "predicted_bubble_fraction"]].to_string(
        index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"prediction error (predicted / measured step - 1): {error_summary(table)}")
    speedups, traced, memory = (speedup_summary(table), trace_summary(table),
                                memory_summary(table))
    if speedups:
        print(f"speedup error (predicted / measured speedup over single on the whole batch - "
              f"1; a drift of the machine that slowed every profile alike cancels): {speedups}")
    if traced:
        print(f"told apart: {traced}")
    if memory:
        print(f"peak memory on the fullest device, predicted against measured: {memory}")
    print(f"predictions: {folder.path / PREDICTIONS_FILE}; figure: {figure}"
          + (f"; {len(timelines)} predicted timelines (predicted-timeline-*.png)"
             if timelines else "")
          + f"; parbench report {folder.path} adds them to the run's README")
    return 0


def _predict_sweep(args: argparse.Namespace) -> int:
    if args.devices is None or args.batch_size is None:
        raise UsageError("give a run folder to predict beside its records, or --devices N and "
                         "--batch-size B to predict a sweep (e.g. parbench predict --model "
                         "resnet50 --devices 8 --link nvlink4 --batch-size 1024)")
    if args.link == "measured":
        raise UsageError("--link measured reads a run folder's collectives: give the run "
                         f"folder, or name a link ({', '.join(LINKS)}) or a bandwidth in GB/s")
    device_counts = int_list("--devices", args.devices, 1)
    device = args.profile_device or ("cuda" if torch.cuda.is_available() else "cpu")
    record_like = dict(model=args.model, image_size=args.image_size, precision=args.precision,
                       device_kind=device, threads_per_device=args.threads)
    splits = int_list("--split-size", args.split_size, 1) if args.split_size else []
    try:
        link, profile_at = _link(args.link, [], ""), profiles_for(record_like,
                                                                  args.profile_cache)
        tables = [predict_sweep(count, args.batch_size, splits, profile_at, link)
                  for count in device_counts]
    except ValueError as error:
        raise UsageError(str(error)) from None
    setting = (f"{args.model} {args.image_size}px {args.precision}, global batch "
               f"{args.batch_size}, devices like this {device} (its profile), link "
               f"{link.describe()}")
    for count, table in zip(device_counts, tables, strict=True):
        # Several device counts: each strategy at its fastest setting (single also on the
        # whole batch, the baseline of every speedup), without its cut (in the CSV); one:
        # every setting.
        shown = table if len(device_counts) == 1 else table.assign(
            whole=table["split_size"].isna()).drop_duplicates(["strategy", "whole"]).drop(
            columns=["whole", "partition"])
        print(f"PREDICTED, not measured: {setting}, {count} devices; fastest first"
              + ("" if shown is table else ", each strategy at its fastest split") + ":")
        print(shown.drop(columns=["kind"]).to_string(  # the header says predicted
            index=False, float_format=lambda v: f"{v:.3g}"))
        for line in above_ideal_notes(table, count):
            print(line)
        for reason in table.attrs["refused"]:
            print(f"not predicted: {reason}")
    # single runs on one device whatever the count: once in the file.
    every = pd.concat(tables, ignore_index=True).drop_duplicates(
        ["strategy", "devices", "split_size"], ignore_index=True)
    if args.csv:
        atomic_write_text(Path(args.csv), every.to_csv(index=False))
        print(f"predictions: {args.csv}")
    if args.figure:
        print(f"figure: {write_sweep_figure(every, Path(args.figure), setting)}")
    return 0


def command_predict(args: argparse.Namespace) -> int:
    if args.run:
        sweep_only = [flag for flag, value in (("--devices", args.devices), ("--batch-size",
                      args.batch_size), ("--csv", args.csv), ("--figure", args.figure)) if value]
        if sweep_only:
            raise UsageError(f"{', '.join(sweep_only)} describe a sweep not run: give them "
                             f"without a run folder, or the run folder alone")
        return _predict_run(args)
    return _predict_sweep(args)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench predict`: its parser and arguments."""
    predict = commands.add_parser(
        "predict", help="predict every strategy's step from a profile of this device "
        "(labelled PREDICTED, kept apart from measurements)",
        description="Timing models of single, model-parallel, every pipeline schedule "
                    "(torch's own action list replayed), ddp (bucketed all-reduce overlapped "
                    "with backward) and fsdp (per-block gathers and reductions), from a "
                    "per-block profile of this device (cached). With a run folder: each "
                    "measured record beside its prediction and the error (predictions.csv, "
                    "predictions.png). Without: a sweep for --devices devices on --link, "
                    "fastest first.")
    predict.add_argument("run", nargs="?", help="a run folder: predict its records beside them")
    predict.add_argument("--link", default="measured",
                         help="measured (parbench collectives in the run folder), "
                              + links_help() + ", or a bus bandwidth in GB/s without latency "
                              "(default: measured)")
    predict.add_argument("--devices", help="device counts to predict for, comma-separated (no "
                         "run folder)")
    predict.add_argument("--batch-size", type=int, help="global batch (no run folder)")
    predict.add_argument("--split-size", help="micro-batch sizes for the pipelines and the "
                         "accumulating single, comma-separated (default: 4 per device)")
    predict.add_argument("--model", default="resnet50", choices=MODELS,
                         help="the model (no run folder)")
    predict.add_argument("--image-size", type=int, default=128,
                         help="image side in pixels (no run folder)")
    predict.add_argument("--precision", default="fp32", choices=PRECISIONS,
                         help="as for run (no run folder)")
    predict.add_argument("--profile-device", choices=("cpu", "cuda"),
                         help="the device profiled, which the predicted devices are like (no "
                              "run folder; default: cuda if there is one, else cpu)")
    predict.add_argument("--threads", type=int, default=1,
                         help="CPU threads per device when profiling the cpu (no run folder)")
    predict.add_argument("--profile-cache", type=Path,
                         help="where profiles are kept (default ~/.cache/parbench/profiles)")
    predict.add_argument("--csv", help="also write the sweep's predictions to this file")
    predict.add_argument("--figure", help="also draw the sweep (throughput against split size "
                         "per device count) to this PNG, an SVG beside it")
    predict.set_defaults(handler=command_predict)
