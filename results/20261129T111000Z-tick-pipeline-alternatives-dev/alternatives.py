"""The one-process pipeline's records of run folders, each predicted two ways from the profiles
kept in its folder: the timing models' clock ticks (each tick as long as its slowest stage,
every stage of it slowed alike) and processor sharing inside a tick (a stage done early leaves
the CPU to the rest, as the schedules' replay shares it). Measures nothing; writes a CSV.

    python alternatives.py RUN [RUN ...] --csv tick-alternatives.csv
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from parbench.advisor.models.links import NO_LINK
from parbench.advisor.models.models import tick_pipeline
from parbench.advisor.profiling.contention import Sharing
from parbench.advisor.profiling.profile import Profile
from parbench.advisor.profiling.record_profiles import profiles_for
from parbench.advisor.runs.records import partition_of, predict_record, profiled_size


def shared_tick_s(works: list[float], slowdown: Callable[[int], float]) -> float:
    """A tick's length under processor sharing: with k stages computing, each advances at
    1/slowdown(k) of its own pace, until the longest is done."""
    clock = done = 0.0
    for position, work in enumerate(sorted(works)):
        clock += (work - done) * slowdown(len(works) - position)
        done = work
    return clock


def processor_sharing_step_s(profile: Profile, record: dict) -> float:
    """The step with processor sharing inside each tick: forwards, then backwards from the
    last stage, then the optimiser (the clock-tick model's order)."""
    times = profile.stage_times(partition_of(record, tuple(b.name for b in profile.blocks)))
    sharing: Sharing | None = profile.sharing
    slowdown = (lambda k: 1.0) if sharing is None else \
        (lambda k: sharing.of(k) / sharing.slowdown)
    stages, micro_batches = len(times), int(record["micro_batches"])
    ticks = [[k for k in range(stages) if 0 <= t - k < micro_batches]
             for t in range(micro_batches + stages - 1)]
    forward = sum(shared_tick_s([times[k].forward_s for k in ks], slowdown) for ks in ticks)
    backward = sum(shared_tick_s([times[stages - 1 - k].input_grad_s
                                  + times[stages - 1 - k].weight_grad_s for k in ks], slowdown)
                   for ks in ticks)
    return forward + backward + profile.optimizer_s


def rows(run: Path) -> list[dict]:
    """Each measured one-process pipeline record of `run`, both ways."""
    found = []
    for record in json.loads((run / "records.json").read_text()):
        if record.get("strategy") != "pipeline" or record.get("status") != "ok":
            continue
        profile_at = profiles_for(record, run / "profiles")
        profile = profile_at(profiled_size(record))
        clock_ticks = predict_record(record, profile_at, NO_LINK)
        assert clock_ticks is not None
        assert clock_ticks.step_time_s == tick_pipeline(
            profile, partition_of(record, tuple(b.name for b in profile.blocks)),
            int(record["micro_batches"])).step_time_s
        measured = float(record["step_time_median_s"])
        shared = processor_sharing_step_s(profile, record)
        found.append({"run": run.name, "model": record["model"],
                      "image_size": record["image_size"],
                      "devices": len(str(record["devices"]).split(",")),
                      "split_size": record["split_size"],
                      "micro_batches": record["micro_batches"], "measured_s": measured,
                      "clock_ticks_error": clock_ticks.step_time_s / measured - 1,
                      "processor_sharing_error": shared / measured - 1})
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--csv", type=Path, required=True)
    args = parser.parse_args()
    table = pd.DataFrame([row for run in args.runs for row in rows(run)])
    table.to_csv(args.csv, index=False)
    for column in ("clock_ticks_error", "processor_sharing_error"):
        errors = table[column]
        print(f"{column}: median |error| {errors.abs().median():.1%}, worst "
              f"{errors.abs().max():.1%}, too fast {(errors < 0).sum()} of {len(errors)}")


if __name__ == "__main__":
    main()
