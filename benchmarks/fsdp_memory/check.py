"""FSDP's predicted peak memory per rank beside what FSDP2 allocates, measured by torch's own
FSDPMemTracker on one rank of torch's fake process group: parbench's fsdp or hsdp strategy set
up on CPU as a run sets it up, two steps, then one step tracked. Over the fake group the
collectives move nothing and allocate only what FSDP2's code asks for (no backend's own
buffers), as its tensors sit in a GPU's caching allocator under NCCL; the prediction is the
timing models' (RankMemory.peak_mib, without a GPU profile's transients), from a CPU profile
at the rank's micro-batch. Each configuration runs in a fresh process (the fake group is set
up once a process).

    python benchmarks/fsdp_memory/check.py CONFIGS.json --into FOLDER

CONFIGS.json is a list of {"model", "image_size", "batch", "ranks", "strategy", "precision",
"options"}; FOLDER gets fsdp-memory.csv (a row a configuration) and its profiles.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

MIB = 2**20
COLUMNS = ("model", "image_size", "batch", "ranks", "strategy", "precision", "options",
           "measured_peak_mib", "predicted_peak_mib", "error", "counted_mib", "breakdown_mib")


def _workload(config: dict):
    from parbench.families.workloads import Workload
    return Workload(model=config["model"], image_size=config["image_size"], num_classes=1000,
                    precision=config.get("precision", "fp32"))


def measured(config: dict) -> dict[str, int]:
    """FSDP2's peak on rank 0 of `config["ranks"]`, by category (FSDPMemTracker's names, and
    "Total"), in bytes. Initialises the fake process group: once a process."""
    import torch
    import torch.distributed as dist
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from parbench import strategies
    from parbench.strategies.fsdp import FSDP
    ranks = config["ranks"]
    dist.init_process_group("fake", rank=0, world_size=ranks, store=FakeStore())
    try:
        plan = strategies.plan(config["strategy"], _workload(config), config["batch"],
                               (torch.device("cpu"),) * ranks, config.get("options") or {})
        strategy = strategies.create(plan)
        assert isinstance(strategy, FSDP), config["strategy"]
        strategy.setup()
        share = config["batch"] // ranks
        images = torch.randn(share, 3, config["image_size"], config["image_size"])
        labels = torch.randint(0, 1000, (share,))
        for _ in range(2):  # the optimiser's momentum made, the caches warm
            strategy.train_step(images, labels)
        tracker = FSDPMemTracker(strategy.placed_modules()[0], strategy.optimizer)
        tracker.track_inputs((images, labels))
        with tracker:
            strategy.train_step(images, labels)
        peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]
        return {str(getattr(kind, "value", kind)): size for kind, size in peak.items()}
    finally:
        dist.destroy_process_group()


def predicted(config: dict, profiles: Path):
    """The timing models' memory of one rank (RankMemory) for `config`."""
    from parbench.advisor.models import data_parallel
    from parbench.advisor.models.links import NO_LINK
    from parbench.advisor.profiling.profile import load_or_profile
    from parbench.advisor.runs.records import sharded_units
    from parbench.strategies import options_of
    from parbench.strategies.fsdp import FSDPOptions

    workload = _workload(config)
    ranks = config["ranks"]
    profile = load_or_profile(profiles, workload, config["batch"] // ranks)
    options = options_of(config["strategy"], config.get("options") or {})
    assert isinstance(options, FSDPOptions), config["strategy"]  # hsdp's derive from fsdp's
    settings = {**options.for_workload(workload).settings(["cpu"] * ranks)}
    units = sharded_units(settings, workload, profile)
    if config["strategy"] == "hsdp":
        return data_parallel.hsdp(profile, ranks, options.mesh_shape(ranks)[-1], NO_LINK,
                                  units=units).memory[0]
    return data_parallel.fsdp(profile, ranks, NO_LINK, units=units).memory[0]


def row(config: dict, profiles: Path) -> dict:
    """`config` measured (in a fresh process) and predicted: one CSV row."""
    done = subprocess.run([sys.executable, __file__, "--measure", json.dumps(config)],
                          capture_output=True, text=True, check=True, timeout=600)
    peak = json.loads(done.stdout.strip().splitlines()[-1])
    memory = predicted(config, profiles)
    measured_mib = peak["Total"] / MIB
    return {**{k: config.get(k, "fp32" if k == "precision" else None) for k in COLUMNS[:7]},
            "measured_peak_mib": measured_mib, "predicted_peak_mib": memory.peak_mib,
            "error": memory.peak_mib / measured_mib - 1, "counted_mib": memory.counted_mib,
            "breakdown_mib": {k: round(v / MIB, 2) for k, v in peak.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="?", type=Path)
    parser.add_argument("--into", type=Path)
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # one configuration, as JSON
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measured(json.loads(args.measure))))
        return
    if args.configs is None or args.into is None:
        parser.error("give CONFIGS.json and --into FOLDER")
    import pandas as pd
    args.into.mkdir(parents=True, exist_ok=True)
    rows = []
    for config in json.loads(args.configs.read_text()):
        rows.append(row(config, args.into / "profiles"))
        r = rows[-1]
        print(f"{r['model']} {r['image_size']} px, batch {r['batch']} on {r['ranks']}, "
              f"{r['strategy']} {r['precision']} {r['options']}: measured "
              f"{r['measured_peak_mib']:.1f} MiB, predicted {r['predicted_peak_mib']:.1f} "
              f"({100 * r['error']:+.1f}%)", flush=True)
        table = pd.DataFrame(rows, columns=list(COLUMNS))
        table.assign(options=table["options"].map(json.dumps),
                     breakdown_mib=table["breakdown_mib"].map(json.dumps)).to_csv(
            args.into / "fsdp-memory.csv", index=False)  # after each: nothing measured is lost
    errors = pd.Series([abs(r["error"]) for r in rows])
    print(f"{len(rows)} configurations: median |error| {100 * errors.median():.1f}%, worst "
          f"{100 * errors.max():.1f}%")


if __name__ == "__main__":
    main()
