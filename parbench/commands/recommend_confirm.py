"""`parbench recommend --confirm K`: the top K and the control (ddp at the full batch) measured
on the devices at hand in interleaved rounds, under the memory a device has, and the pick
judged against the measured best (recommend.json)."""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd

from parbench.advisor.recommend import recommend
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.commands.arguments import checked, new_run_folder
from parbench.commands.environment import measuring_environment
from parbench.commands.progress import progress_bar
from parbench.drive import runner
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet
from parbench.plan import Sweep
from parbench.plan.config import Config, options_for
from parbench.results.comparisons import per_round
from parbench.results.folder import RunFolder, atomic_write_text

__all__ = ["RECOMMEND_FILE", "confirm", "run_settings", "text_table", "workload"]

RECOMMEND_FILE = "recommend.json"


def workload(args: argparse.Namespace) -> Workload:
    """The workload recommend predicts and --confirm trains."""
    return Workload(model=args.model, image_size=args.image_size, precision=args.precision,
                    num_classes=args.num_classes)


def run_settings(args: argparse.Namespace) -> dict:
    """How --confirm runs a configuration: its steps, threads, and the memory a device has
    (an emulated device's counted tensors; a GPU's allocator, capped)."""
    memory = math.floor(args.memory) if args.memory else None
    limit = ({"device_memory_mib": memory} if args.on.kind == "cpu" or args.on.emulated
             else {"memory_cap_mib": memory})
    return dict(warmup=args.warmup, steps=args.steps, threads_per_device=args.threads,
                timeout_s=args.timeout, **limit)


def text_table(headers: list[str], rows: list[list]) -> str:
    """Columns padded to their widest cell: numbers to the right, text to the left."""
    cells = [headers, *[[_cell(value) for value in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [all(isinstance(row[i], (int, float)) for row in rows) for i in range(len(headers))]
    return "\n".join("  ".join(text.rjust(width) if right else text.ljust(width)
                               for text, width, right in zip(row, widths, numeric, strict=True)
                               ).rstrip() for row in cells)


def _cell(value) -> str:
    if isinstance(value, float):
        return "-" if pd.isna(value) else f"{value:.3g}"
    return str(value)


def _config(args: argparse.Namespace, strategy: str, options: dict) -> Config:
    """`strategy` with `options` measured on --on as --confirm measures it (not yet planned)."""
    return Config(strategy=strategy, workload=workload(args), global_batch=args.batch_size,
                  devices=args.on, options=options_for(strategy, options),
                  **run_settings(args))


def _configs(args: argparse.Namespace, ranked: pd.DataFrame) -> dict[str, tuple[str, Config]]:
    """Configuration key -> (role, configuration) of the top K and the control, each once and
    each checked to run here."""
    roles: dict[str, tuple[str, Config]] = {}
    for row in ranked.head(args.confirm).to_dict("records"):
        made = _config(args, row["strategy"], row["options"])
        roles.setdefault(made.key(), ("pick" if row["rank"] == 1 else f"rank {row['rank']}",
                                      made))
    control = _config(args, *recommend.CONTROL)
    role, _ = roles.get(control.key(), ("", control))
    roles[control.key()] = (f"{role}, control" if role else "control", control)
    for _, config in roles.values():
        checked(config)
    return roles


def _measure(args: argparse.Namespace, configs: list[Config]) -> tuple[RunFolder, list]:
    """The configurations measured in interleaved rounds into a new run folder."""
    sweep = Sweep(configs=tuple(configs), repeats=args.repeats)
    folder = new_run_folder(args.out, "recommend")
    bar, on_start, on_done = progress_bar("auto", len(sweep.schedule()), 0, sweep.repeats)
    try:
        records = runner.run_sweep(sweep, folder, measuring_environment(), on_start=on_start,
                                   on_done=on_done)
    finally:
        bar.close()
    return folder, records


def confirm(args: argparse.Namespace, candidates: pd.DataFrame, ranked: pd.DataFrame) -> None:
    roles = _configs(args, ranked)
    folder, records = _measure(args, [config for _, config in roles.values()])
    by_key = {record.config_key: record for record in records}
    predicted = {_config(args, row["strategy"], row["options"]).key(): row["throughput_ips"]
                 for row in candidates.to_dict("records")}
    labels = {key: f"{config.strategy} {recommend.option_flags(config.options)}".strip()
              for key, (_, config) in roles.items()}
    rounds = {labels[key]: per_round(by_key[key]) for key in roles}
    judged = recommend.confirm_verdict(rounds, next(iter(labels.values())))
    rows = [dict(role=role, label=labels[key], config_key=key, status=by_key[key].status,
                 reason=by_key[key].reason, rounds=rounds[labels[key]],
                 predicted_throughput_ips=predicted.get(key), **judged["measured"][labels[key]])
            for key, (role, _) in roles.items()]
    _print_measured(args, folder, rows, judged)
    document = dict(kind="recommendation", predictor_version=PREDICTOR_VERSION,
                    predicted=_predicted_rows(ranked), measured=rows,
                    verdict={key: judged.get(key) for key in ("verdict", "best", "regret",
                                                              "regret_interval")})
    path = folder.path / RECOMMEND_FILE
    atomic_write_text(path, json.dumps(document, indent=2, allow_nan=False,
                                       default=_plain) + "\n")
    print(f"recommendation and measurements: {path}; parbench report {folder.path} adds the "
          "run's README and figures")


def _predicted_rows(ranked: pd.DataFrame) -> list[dict]:
    columns = ["rank", "strategy", "options", "step_time_s", "throughput_ips",
               "peak_memory_max_mib", "bubble_or_exposed_comm", "micro_batch_effect", "reason"]
    return [{**{name: None if _missing(row[name]) else row[name] for name in columns},
             "kind": "predicted"} for row in ranked.to_dict("records")]


def _plain(value):
    """A numpy number (an option read from the table) as JSON writes a Python one."""
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _missing(value) -> bool:
    """A figure the prediction does not give (NaN in the table, null in the JSON)."""
    return isinstance(value, float) and math.isnan(value)


def _with_interval(value: float | None, bounds: list[float] | None, form: str = ".3g") -> str:
    if value is None:
        return "-"
    return f"{value:{form}}" + (f" [{bounds[0]:{form}}, {bounds[1]:{form}}]" if bounds else "")


def _print_measured(args: argparse.Namespace, folder: RunFolder, rows: list[dict],
                    judged: dict) -> None:
    on: DeviceSet = args.on
    shared = (f" (emulated: {len(on)} logical devices share {on.describe_physical()}, as "
              "predicted)" if on.emulated else "")
    print(f"MEASURED on {on.describe()}{shared}: {args.repeats} interleaved rounds of "
          f"{args.warmup} warm-up + {args.steps} measured steps; run folder {folder.path}:")
    print(text_table(
        ["role", "configuration", "predicted img/s", "measured img/s [95%]",
         "/ measured best, paired by round [95%]"],
        [[row["role"], row["label"], row["predicted_throughput_ips"] or float("nan"),
          _with_interval(row["throughput_ips"], row["throughput_interval"])
          if row["status"] == "ok" else f"{row['status']}: {row['reason']}",
          "1 (the best)" if row["label"] == judged["best"] else
          _with_interval(row.get("ratio_to_best"), row.get("ratio_interval"))]
         for row in rows]))
    regret = judged.get("regret")
    said = (f"; regret (1 - pick / best, paired by round) "
            f"{_with_interval(regret, judged.get('regret_interval'), '.0%')}" if regret else "")
    print(f"verdict, MEASURED: {judged['verdict']}{said}")
