"""`parbench predict`: the timing models' predictions, labelled PREDICTED and kept apart from
measured records: beside a run's own records with their error (`predict RUN`), or for a
device count and link not at hand (`predict --devices 8 --link nvlink4`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path

import pandas as pd
import torch

from parbench.advisor.models.links import LINKS, AnyLink, links_help, named_link
from parbench.advisor.profiling.record_profiles import profiles_for, workload_of
from parbench.advisor.recommend.predicted_sweep import above_ideal_notes, predict_sweep
from parbench.advisor.runs.figures import write_sweep_figure
from parbench.advisor.runs.memory_calls import MEMORY_CALLS_FILE, calls_summary
from parbench.advisor.runs.published import (
    PROFILES_FOLDER,
    predict_into,
    run_link,
    run_records,
    stale_models,
    stored_prediction,
)
from parbench.advisor.runs.summary import (
    PREDICTIONS_FILE,
    error_summary,
    fixed_costs_summary,
    left_out_summary,
    memory_summary,
    naive_summary,
    ranking_summary,
    speedup_summary,
    trace_summary,
)
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.commands.arguments import UsageError, at_least, image_sizes, open_run_folder
from parbench.commands.caches import profile_cache
from parbench.commands.environment import warn_if_measured_elsewhere
from parbench.commands.left_out import modelled_only
from parbench.commands.predict_table import (
    add_table_arguments,
    predict_tables,
    refuse_table_flags,
)
from parbench.families.workloads import MODELS, PRECISIONS, Workload
from parbench.machine.devices import format_bytes, host_memory_bytes
from parbench.plan.experiments import held_out_version
from parbench.results.folder import ResultsError, RunFolder, atomic_write_text
from parbench.strategies.stages import resolve_split

__all__ = ["command_predict"]

# What a sweep takes where a flag is not given; None as the flag's own default tells a flag
# given beside a run folder (whose records say all of it) from one left out.
SWEEP_DEFAULTS = dict(model="resnet50", image_size=128, precision="fp32", threads=1)
SWEEP_FLAGS = ("devices", "batch_size", "split_size", "model", "image_size", "precision",
               "profile_device", "threads", "csv", "figure")
# What an ok record needs for its prediction.
NEEDED = ("strategy", "model", "image_size", "precision", "device_kind", "global_batch",
          "step_time_median_s")


def link_flag(name: str) -> AnyLink:
    """A name in LINKS, or a bandwidth in GB/s (a sweep's link; a run's may be `measured`)."""
    if name == "measured":
        raise UsageError("--link measured reads a run folder's collectives: give the run "
                         f"folder, or name a link ({', '.join(LINKS)}) or a bandwidth in GB/s")
    try:
        return named_link(name)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def whole_numbers(flag: str, text: str, what: str, example: str) -> list[int]:
    """Comma-separated whole numbers of at least 1 (an empty item is refused, not dropped)."""
    try:
        values = [int(item) for item in text.split(",")]
    except ValueError:
        raise UsageError(f"{flag} {text!r}: give {what}, whole numbers separated by commas, "
                         f"e.g. {flag} {example}") from None
    return [at_least(flag, value, 1) for value in values]


def _output_file(flag: str, value: str | None, example: str) -> Path | None:
    """A file the sweep writes once it is predicted: its folder checked now."""
    if value is None:
        return None
    path = Path(value)
    if path.is_dir():
        raise UsageError(f"{flag} {value} is a folder; give a file in it, e.g. "
                         f"{flag} {path / example}")
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise UsageError(f"{flag} {value}: cannot write into {path.parent} (no such folder, or "
                         "not writable); give a file in a writable folder")
    return path


def _checked_run_arguments(args: argparse.Namespace) -> tuple[RunFolder, pd.DataFrame]:
    """The run folder and its records, each checked (with the link) before anything is
    profiled."""
    given = [_flag(name) for name in SWEEP_FLAGS if getattr(args, name) is not None]
    if given:
        raise UsageError(f"{', '.join(given)}: for a sweep not run, while a run folder's "
                         "records say what to predict; give them without the run folder, or "
                         "the run folder alone")
    folder = open_run_folder(args.run)
    if args.profile_cache is not None:
        raise UsageError(f"--profile-cache: a run's profiles are kept in the run folder "
                         f"({folder.path / PROFILES_FOLDER}), to be published with it; give "
                         "--profile-cache only for a sweep not run")
    try:
        records = run_records(folder)
    except ResultsError as error:
        raise UsageError(str(error)) from None
    if records.empty:
        raise UsageError(f"{folder.path} holds no record yet (its run stopped before the first "
                         f"configuration was written): finish it with parbench run --resume "
                         f"{folder.path}, then predict it")
    ok = records[records["status"] == "ok"]
    if ok.empty:
        raise UsageError(f"{folder.path} has no measured record to predict (every configuration "
                         "failed or was skipped; its records.csv says why): predict a run with "
                         "an ok record, or a sweep with --devices N --batch-size B")
    lacking = [name for name in NEEDED if name not in ok or ok[name].isna().any()]
    if lacking:
        raise UsageError(f"{folder.path}: a measured record lacks {', '.join(lacking)}, which "
                         "its prediction needs; predict a run folder written by parbench run")
    if (ok["device_kind"] == "cuda").any() and not torch.cuda.is_available():
        raise UsageError(f"{folder.path} was measured on cuda and this machine has no GPU: "
                         "predict it on a machine with one (the profile is taken on the device)")
    frozen = held_out_version(folder, records)
    if frozen is not None and frozen != PREDICTOR_VERSION:
        raise UsageError(f"{folder.path} is a held-out run measured when the models were "
                         f"version {frozen}; they are now version {PREDICTOR_VERSION}, which "
                         "may have been tuned since: a held-out set is predicted only by the "
                         "version frozen before it was measured. Draw a new one: parbench run "
                         "--experiment prediction-holdout --seed <a seed not used before>")
    stored = stored_prediction(folder)
    stale = stale_models(stored) if frozen is not None and stored else None
    if stale:
        raise UsageError(f"{folder.path} is a held-out run whose predictions cannot be made "
                         f"again: {stale}")
    try:
        run_link(folder, args.link)
    except ValueError as error:
        raise UsageError(str(error)) from None
    return folder, records


def _predict_run(args: argparse.Namespace) -> int:
    folder, records = _checked_run_arguments(args)
    warn_if_measured_elsewhere(folder)
    records, unmodelled = modelled_only(records)
    try:
        published = predict_into(folder, records, args.link, left=unmodelled)
    except ValueError as error:  # a record without what a prediction needs
        raise UsageError(str(error)) from None
    table = published.table
    if table.empty:  # found without a profile: predict_record refuses these before profiling
        raise UsageError(f"{folder.path} has no record of a strategy the timing models cover "
                         "(single, model-parallel, the pipelines, pipeline-fsdp, ddp without "
                         "hooks, fsdp, hsdp, none compiled, none from an image folder, and "
                         "collectives measured for each group size): predict a run that measured "
                         "one, or a sweep with --devices N --batch-size B")
    print(f"PREDICTED beside measured (timing model version {PREDICTOR_VERSION}, from a profile "
          f"of this device kept in {folder.path / PROFILES_FOLDER}; link: "
          f"{table['link'].iloc[0]}):")
    shown = table.assign(options=table["split_size"].map(
        lambda split: "" if pd.isna(split) else f"split {split:g}"))
    print(shown[["strategy", "options", "world_size", "step_time_median_s",
                 "predicted_step_time_s", "prediction_error", "naive_error",
                 "speedup_vs_baseline", "predicted_speedup", "speedup_error",
                 "measured_bubble_fraction", "predicted_bubble_fraction"]].to_string(
        index=False, float_format=lambda v: f"{v:.3g}"))
    print(f"prediction error (predicted / measured step - 1): {error_summary(table)}")
    for line in (left_out_summary(published.left), naive_summary(table), ranking_summary(table),
                 fixed_costs_summary(table)):
        if line:
            print(line)
    speedups, traced, memory = (speedup_summary(table), trace_summary(table),
                                memory_summary(table))
    if speedups:
        print(f"speedup error (predicted / measured speedup over single on the whole batch - "
              f"1; a drift of the machine that slowed every profile alike cancels): {speedups}")
    if traced:
        print(f"told apart: {traced}")
    if memory:
        print(f"peak memory on the fullest device, predicted against measured: {memory}")
    calls = calls_summary(published.calls)
    if calls:
        print(f"memory calls under the run's limit: {calls} ({folder.path / MEMORY_CALLS_FILE})")
    print(f"predictions: {folder.path / PREDICTIONS_FILE}; figures: "
          + ", ".join(path.name for path in published.figures)
          + f"; parbench report {folder.path} adds them to the run's README")
    return 0


def _profiled_sizes(batch: int, counts: list[int], splits: list[int]) -> list[tuple[int, str]]:
    """Each micro-batch size the sweep profiles, with what asks for it."""
    sizes = [(batch, f"--batch-size {batch}")]
    for count in counts:
        sizes += [(split, f"--split-size {split}" if splits else
                   f"the default split on {count} devices")
                  for split in splits or [resolve_split(batch, None, count)[0]]
                  if batch % split == 0]
        if batch % count == 0:
            sizes.append((batch // count, f"--batch-size {batch} over {count} devices"))
    return sizes


def check_batches(model: str, image_size: int, device: str, batch: int, counts: list[int],
                   splits: list[int]) -> None:
    """Refuse a sweep whose shapes torch would refuse only once profiling them."""
    if batch < max(counts):
        raise UsageError(f"--batch-size {batch} is fewer images than --devices {max(counts)}: "
                         f"give each device at least one, --batch-size {max(counts)} or more")
    larger = [split for split in splits if split > batch]
    if larger:
        raise UsageError(f"--split-size {larger[0]} is larger than --batch-size {batch}; a "
                         "micro-batch cannot exceed the global batch")
    workload = Workload(model=model, image_size=image_size)
    with torch.device("meta"):
        blocks = len(workload.family.blocks(workload.build_model()))
    if max(counts) > blocks:
        raise UsageError(f"--devices {max(counts)}: {model} has {blocks} blocks to cut, so "
                         f"its stages fill at most {blocks} devices; give --devices {blocks} or "
                         "fewer")
    smallest = workload.family.smallest_batch(image_size)
    fewer = [(size, why) for size, why in _profiled_sizes(batch, counts, splits)
             if size < smallest]
    if fewer:  # a ResNet's BatchNorm on one pixel per channel at 32 px
        size, why = fewer[0]
        raise UsageError(f"{model} cannot train fewer than {smallest} images at --image-size "
                         f"{image_size} ({why} gives micro-batches of {size}): give {smallest} "
                         "images or more per micro-batch and per device, or a larger "
                         "--image-size")
    need = workload.input_bytes(batch)  # the whole batch is profiled
    available = (torch.cuda.get_device_properties(0).total_memory if device == "cuda"
                 else host_memory_bytes())
    if available and need > available:
        raise UsageError(f"--batch-size {batch} at --image-size {image_size}: the whole batch "
                         f"is profiled, and its input images alone need {format_bytes(need)}, "
                         f"more than this {device}'s memory ({format_bytes(available)}); use a "
                         "smaller --image-size or --batch-size")


def _checked_sweep_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """The sweep's arguments, defaults filled in, each checked before anything is profiled."""
    if args.devices is None or args.batch_size is None:
        raise UsageError("give a run folder to predict beside its records, or --devices N and "
                         "--batch-size B to predict a sweep (e.g. parbench predict --model "
                         "resnet50 --devices 8 --link nvlink4 --batch-size 1024)")
    given = {name: value for name, value in vars(args).items() if value is not None}
    sweep = argparse.Namespace(**{**SWEEP_DEFAULTS, **given})
    sweep.device_counts = whole_numbers("--devices", args.devices, "device counts", "2,4,8")
    sweep.splits = (whole_numbers("--split-size", args.split_size, "micro-batch sizes", "2,4")
                    if args.split_size is not None else [])
    at_least("--batch-size", sweep.batch_size, 1)
    image_sizes(str(sweep.image_size), [sweep.model])
    at_least("--threads", sweep.threads, 1)
    sweep.device = args.profile_device or ("cuda" if torch.cuda.is_available() else "cpu")
    if sweep.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--profile-device cuda: this machine has no GPU; profile on a machine "
                         "with one, or give --profile-device cpu")
    check_batches(sweep.model, sweep.image_size, sweep.device, sweep.batch_size,
                   sweep.device_counts, sweep.splits)
    sweep.link = link_flag(args.link)
    sweep.profile_cache = profile_cache(args.profile_cache)
    sweep.csv = _output_file("--csv", args.csv, "sweep.csv")
    sweep.figure = _output_file("--figure", args.figure, "sweep.png")
    return sweep


@contextlib.contextmanager
def prediction_refusals():
    """What a prediction of a sweep refuses (a ValueError), or its profile running out of
    memory, as one line."""
    try:
        yield
    except ValueError as error:
        raise UsageError(str(error)) from None
    except RuntimeError as error:  # torch's allocator: the profiled batch did not fit
        if "memory" not in str(error):
            raise
        raise UsageError(f"profiling ran out of memory ({str(error).splitlines()[0]}); use a "
                         "smaller --batch-size or --image-size") from None


def _predict_sweep(args: argparse.Namespace) -> int:
    sweep = _checked_sweep_arguments(args)
    record_like = dict(model=sweep.model, image_size=sweep.image_size,
                       precision=sweep.precision, device_kind=sweep.device,
                       threads_per_device=sweep.threads)
    with prediction_refusals():
        profile_at = profiles_for(record_like, sweep.profile_cache)
        tables = [predict_sweep(count, sweep.batch_size, sweep.splits, profile_at, sweep.link,
                                workload_of(record_like))
                  for count in sweep.device_counts]
    setting = (f"{sweep.model} {sweep.image_size}px {sweep.precision}, global batch "
               f"{sweep.batch_size}, devices like this {sweep.device} (its profile), link "
               f"{sweep.link.describe()}")
    for count, table in zip(sweep.device_counts, tables, strict=True):
        # Several device counts: each strategy at its fastest setting (single also on the
        # whole batch, the baseline of every speedup), without its cut (in the CSV); one:
        # every setting.
        shown = table if len(sweep.device_counts) == 1 else table.assign(
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
    if sweep.csv:
        atomic_write_text(sweep.csv, every.to_csv(index=False))
        print(f"predictions: {sweep.csv}")
    if sweep.figure:
        print(f"figure: {write_sweep_figure(every, sweep.figure, setting)}")
    return 0


def command_predict(args: argparse.Namespace) -> int:
    refuse_table_flags(args)
    if args.table:
        return predict_tables(args)
    return _predict_run(args) if args.run else _predict_sweep(args)


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench predict`: its parser and arguments."""
    predict = commands.add_parser(
        "predict", help="predict every strategy's step from a profile of this device "
        "(labelled PREDICTED, kept apart from measurements)",
        description="Timing models of single, model-parallel, every pipeline schedule "
                    "(torch's own action list replayed), ddp (bucketed all-reduce overlapped "
                    "with backward) and fsdp (each unit's gathers and reductions), from a "
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
    predict.add_argument("--model", choices=MODELS, help="the model (no run folder; default "
                         f"{SWEEP_DEFAULTS['model']})")
    predict.add_argument("--image-size", type=int, help="image side in pixels (no run folder; "
                         f"default {SWEEP_DEFAULTS['image_size']})")
    predict.add_argument("--precision", choices=PRECISIONS, help="as for run (no run folder; "
                         f"default {SWEEP_DEFAULTS['precision']})")
    predict.add_argument("--profile-device", choices=("cpu", "cuda"),
                         help="the device profiled, which the predicted devices are like (no "
                              "run folder; default: cuda if there is one, else cpu)")
    predict.add_argument("--threads", type=int, help="CPU threads per device when profiling "
                         f"the cpu (no run folder; default {SWEEP_DEFAULTS['threads']})")
    predict.add_argument("--profile-cache", type=Path,
                         help="where a sweep's profiles are kept (default "
                              "~/.cache/parbench/profiles/<host>; a run's are kept in its folder)")
    predict.add_argument("--csv", help="also write the sweep's predictions to this file")
    predict.add_argument("--figure", help="also draw the sweep (throughput against split size "
                         "per device count) to this PNG, an SVG beside it")
    add_table_arguments(predict)
    predict.set_defaults(handler=command_predict)
