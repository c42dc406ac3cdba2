"""FSDP's predicted peak memory per rank beside what FSDP2 allocates, measured by torch's own
FSDPMemTracker on one rank of torch's fake process group: parbench's fsdp or hsdp strategy set
up on CPU as a run sets it up, two steps, then one step tracked. Over the fake group the
collectives move nothing and allocate only the buffers FSDP2's own code asks for, none of a
backend's (NCCL keeps its buffers outside PyTorch's allocator on a GPU). The prediction is the
timing models' (RankMemory.peak_mib, without a GPU profile's transients), from a profile at
the rank's micro-batch on the configuration's device ("device": cpu unless given). On a GPU
the allocator's own peak (torch.cuda.max_memory_allocated: the tensors with the kernels'
workspaces) is read beside the tracker's, against the prediction with the GPU profile's
transients. Each configuration runs in a fresh process (the fake group is set up once a
process).

    python benchmarks/fsdp_memory/check.py --draw 20 --count 12 > CONFIGS.json
    python benchmarks/fsdp_memory/check.py CONFIGS.json --into FOLDER
    python benchmarks/fsdp_memory/check.py --repredict FOLDER/fsdp-memory.csv --into FOLDER

CONFIGS.json is a list of {"model", "image_size", "batch", "ranks", "strategy", "precision",
"options"} (--draw: a held-out set, drawn as `draw` says); FOLDER gets fsdp-memory.csv (a row
a configuration) and its profiles. With
--repredict, the measured peaks of an earlier check predicted again by the parbench this
Python imports (another version's, from a checkout on PYTHONPATH), into
fsdp-memory-v<VERSION>.csv.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

MIB = 2**20
COLUMNS = ("model", "image_size", "batch", "ranks", "strategy", "precision", "options",
           "measured_peak_mib", "predicted_peak_mib", "error", "counted_mib", "grouped_units",
           "predictor_version", "device", "allocator_peak_mib", "predicted_allocator_mib",
           "allocator_error", "breakdown_mib")
# FSDPMemTracker swaps FSDP2's hooks for a unit of several modules (fully_shard([a, b, c]), a
# ViT's layer groups) for per-module ones (torch's fsdp2_mem_tracker.py,
# _instrument_fsdp_module): under it such a unit is gathered and reduce-scattered module by
# module, which FSDP2 does not do, so a configuration with one is measured, not judged.
GROUPED = ("its units of several modules run module by module under FSDPMemTracker, "
           "not as FSDP2 runs them")


def draw(seed: int, count: int) -> list[dict]:
    """`count` distinct configurations drawn at random from resnet34, resnet50 and vit_b_16
    (resnet18 is the walk's development family) at 32 or 64 px, 1, 2 or 4 images a rank;
    fsdp on 2 to 4 ranks or hsdp on 4 (2 a shard); a unit per block or layer groups, every
    resharding choice, fp32 or bf16. A configuration parbench's plan refuses is drawn again,
    as the held-out timing draws' are (parbench/plan/held_out.py)."""
    import random

    import torch

    from parbench import strategies
    chosen: list[dict] = []
    rng = random.Random(seed)
    while len(chosen) < count:
        model = rng.choice(["resnet34", "resnet50", "vit_b_16"])
        strategy = rng.choice(["fsdp", "fsdp", "hsdp"])
        ranks = 4 if strategy == "hsdp" else rng.choice([2, 3, 4])
        share, image = rng.choice([1, 2, 4]), rng.choice([32, 64])
        options: dict = {"fsdp_units": rng.choice(["block", "group"]),
                         "reshard_after_forward": rng.choice(["yes", "no", "except-last"]),
                         **({"shard_size": 2} if strategy == "hsdp" else {})}
        batch = share * ranks
        config = dict(model=model, image_size=image, batch=batch, ranks=ranks,
                      strategy=strategy, precision=rng.choice(["fp32", "bf16"]),
                      options=options)
        try:
            strategies.plan(strategy, _workload(config), batch, (torch.device("cpu"),) * ranks,
                            options)
        except strategies.StrategyError:  # WorkloadRefused among them
            continue
        if config not in chosen:
            chosen.append(config)
    return chosen


def _workload(config: dict):
    from parbench.families.workloads import Workload
    return Workload(model=config["model"], image_size=config["image_size"], num_classes=1000,
                    precision=config.get("precision", "fp32"))


def measured(config: dict) -> tuple[dict[str, int], int, int | None]:
    """FSDP2's peak on rank 0 of `config["ranks"]`, by category (FSDPMemTracker's names, and
    "Total"), in bytes; how many of its units are several modules (GROUPED); and on a GPU the
    allocator's peak in the same step (None on a CPU). Initialises the fake process group:
    once a process."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from parbench import strategies
    from parbench.strategies.fsdp import FSDP
    ranks, device = config["ranks"], torch.device(config.get("device", "cpu"))
    dist.init_process_group("fake", rank=0, world_size=ranks, store=FakeStore())
    try:
        # The ranks share one device: planned as gloo (NCCL refuses that), run over the fake group.
        plan = strategies.plan(config["strategy"], _workload(config), config["batch"],
                               (device,) * ranks, config.get("options") or {}, backend="gloo")
        strategy = strategies.create(plan)
        assert isinstance(strategy, FSDP), config["strategy"]
        strategy.setup()
        share = config["batch"] // ranks
        images = torch.randn(share, 3, config["image_size"], config["image_size"], device=device)
        labels = torch.randint(0, 1000, (share,), device=device)
        for _ in range(2):  # the optimiser's momentum made, the caches warm
            strategy.train_step(images, labels)
        tracker = FSDPMemTracker(strategy.placed_modules()[0], strategy.optimizer)
        tracker.track_inputs((images, labels))
        on_gpu = device.type == "cuda"
        if on_gpu:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        with tracker:
            strategy.train_step(images, labels)
        allocator = torch.cuda.max_memory_allocated(device) if on_gpu else None
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
        # BatchNorm's fp32 units under the mixed-precision policy are several modules too,
        # 0.2% of a ResNet's parameters: not counted here.
        grouped = sum(len(group) > 1 for group in strategy.unit_groups(strategy.model))
        return ({str(getattr(kind, "value", kind)): size for kind, size in peak.items()}, grouped,
                allocator)
    finally:
        dist.destroy_process_group()


def predicted(config: dict, profiles: Path):
    """The timing models' prediction (a Prediction; its memory[0] is one rank's) for `config`,
    from a profile on its device."""
    from parbench.advisor.models import data_parallel
    from parbench.advisor.models.links import NO_LINK
    from parbench.advisor.profiling.profile import load_or_profile
    from parbench.advisor.runs.records import sharded_units
    from parbench.strategies import options_of
    from parbench.strategies.fsdp import FSDPOptions

    workload = _workload(config)
    ranks = config["ranks"]
    profile = load_or_profile(profiles, workload, config["batch"] // ranks,
                              config.get("device", "cpu"))
    options = options_of(config["strategy"], config.get("options") or {})
    assert isinstance(options, FSDPOptions), config["strategy"]  # hsdp's derive from fsdp's
    settings = options.for_workload(workload).settings(["cpu"] * ranks)
    units = sharded_units(settings, workload, profile)
    if config["strategy"] == "hsdp":  # as records._layout_model reads a record's settings
        return data_parallel.hsdp(profile, ranks, int(settings["shard_size"]), NO_LINK,
                                  units=units)
    return data_parallel.fsdp(profile, ranks, NO_LINK, units=units)


def _compared(config: dict, peak: dict, grouped: int, allocator: float | None,
              profiles: Path) -> dict:
    """One CSV row: `config` measured (`peak` by category, in bytes; `allocator`, the GPU
    allocator's peak in MiB, or None) beside this parbench's prediction of it."""
    from parbench.advisor.version import PREDICTOR_VERSION
    prediction = predicted(config, profiles)
    memory = prediction.memory[0]
    measured_mib = peak["Total"] / MIB
    with_transients = prediction.peak_memory_mib[0]
    return {**{k: config.get(k, "fp32" if k == "precision" else None) for k in COLUMNS[:7]},
            "measured_peak_mib": measured_mib, "predicted_peak_mib": memory.peak_mib,
            "error": memory.peak_mib / measured_mib - 1, "counted_mib": memory.counted_mib,
            "grouped_units": grouped, "predictor_version": PREDICTOR_VERSION,
            "device": config.get("device", "cpu"), "allocator_peak_mib": allocator,
            "predicted_allocator_mib": with_transients if allocator else None,
            "allocator_error": with_transients / allocator - 1 if allocator else None,
            "breakdown_mib": {k: round(v / MIB, 2) for k, v in peak.items()}}


def row(config: dict, profiles: Path) -> dict:
    """`config` measured (in a fresh process) and predicted: one CSV row."""
    done = subprocess.run([sys.executable, __file__, "--measure", json.dumps(config)],
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise SystemExit(f"measuring {json.dumps(config)} failed:\n{done.stderr[-3000:]}")
    peak, grouped, allocator = json.loads(done.stdout.strip().splitlines()[-1])
    return _compared(config, peak, grouped, allocator and allocator / MIB, profiles)


def _write(rows: list[dict], path: Path) -> None:
    import pandas as pd
    table = pd.DataFrame(rows, columns=list(COLUMNS))
    table.assign(options=table["options"].map(json.dumps),
                 breakdown_mib=table["breakdown_mib"].map(json.dumps)).to_csv(path, index=False)


def _summary(rows: list[dict]) -> str:
    """The median and worst |error| over the rows the tracker measures as FSDP2 runs."""
    judged = [r for r in rows if not r["grouped_units"]]
    if not judged:
        return f"{len(rows)} configurations, none judged ({GROUPED})"
    errors = [abs(r["error"]) for r in judged]
    left = len(rows) - len(judged)
    return (f"{len(judged)} configurations: median |error| "
            f"{100 * statistics.median(errors):.1f}%, worst {100 * max(errors):.1f}%"
            + (f"; {left} left out: {GROUPED}" if left else ""))


def repredict(measured_csv: Path, into: Path) -> Path:
    """`measured_csv`'s measured peaks beside this parbench's predictions of them."""
    import pandas as pd

    from parbench.advisor.version import PREDICTOR_VERSION
    rows = []
    for config in pd.read_csv(measured_csv).to_dict("records"):
        config["options"] = json.loads(config["options"])
        peak = {**json.loads(config["breakdown_mib"]), "Total": config["measured_peak_mib"]}
        allocator = config["allocator_peak_mib"]
        rows.append(_compared(config, {k: v * MIB for k, v in peak.items()},
                              int(config["grouped_units"]),
                              None if pd.isna(allocator) else allocator, into / "profiles"))
    path = into / f"fsdp-memory-v{PREDICTOR_VERSION}.csv"
    _write(rows, path)
    print(f"version {PREDICTOR_VERSION}: {_summary(rows)}")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="?", type=Path,
                        help="a JSON list of configurations to measure and predict")
    parser.add_argument("--into", type=Path, metavar="FOLDER",
                        help="where fsdp-memory.csv and the profiles go")
    parser.add_argument("--repredict", type=Path, metavar="CSV",
                        help="predict an earlier check's measured peaks again (no measuring)")
    parser.add_argument("--draw", type=int, metavar="SEED",
                        help="print a held-out set of configurations drawn with SEED")
    parser.add_argument("--count", type=int, default=12, help="how many --draw draws")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one configuration, as JSON
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measured(json.loads(args.measure))))
        return
    if args.draw is not None:
        print(json.dumps(draw(args.draw, args.count), indent=1))
        return
    if args.into is None or (args.configs is None) == (args.repredict is None):
        parser.error("give CONFIGS.json or --repredict CSV, and --into FOLDER")
    args.into.mkdir(parents=True, exist_ok=True)
    if args.repredict:
        repredict(args.repredict, args.into)
        return
    rows = []
    for config in json.loads(args.configs.read_text()):
        rows.append(row(config, args.into / "profiles"))
        r = rows[-1]
        print(f"{r['model']} {r['image_size']} px, batch {r['batch']} on {r['ranks']}, "
              f"{r['strategy']} {r['precision']} {r['options']}: measured "
              f"{r['measured_peak_mib']:.1f} MiB, predicted {r['predicted_peak_mib']:.1f} "
              f"({100 * r['error']:+.1f}%)" + (" (not judged)" if r["grouped_units"] else ""),
              flush=True)
        _write(rows, args.into / "fsdp-memory.csv")  # after each: nothing measured is lost
    print(_summary(rows))


if __name__ == "__main__":
    main()
