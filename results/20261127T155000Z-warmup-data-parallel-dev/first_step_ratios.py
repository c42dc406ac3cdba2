"""Each held-out draw's records: a trial's first measured step over its second (after the
record's warm-up), the median over its trials, by strategy; and a folder's steps by position.

python first_step_ratios.py                 # the held-out draws of seeds 0 to 5 in results/
python first_step_ratios.py steps           # this folder's 6-step trials, step by step
"""

import json
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent


def records(folder: Path) -> list[dict]:
    data = json.loads((folder / "records.json").read_text())
    return data["records"] if isinstance(data, dict) else data


def ratios(folder: Path) -> dict[str, list[float]]:
    by_strategy: dict[str, list[float]] = {}
    for record in records(folder):
        steps, per_trial = record.get("step_times_s") or [], record.get("measured_steps") or 0
        if record.get("status") != "ok" or per_trial < 2:
            continue
        trials = [steps[i:i + per_trial] for i in range(0, len(steps), per_trial)]
        by_strategy.setdefault(record["strategy"], []).append(
            statistics.median(trial[0] / trial[1] for trial in trials))
    return by_strategy


if __name__ == "__main__":
    if sys.argv[1:]:
        for record in records(Path(__file__).resolve().parent / sys.argv[1]):
            print(record["strategy"], record["warmup_steps"], "warm-up;",
                  " ".join(f"{s:.3f}" for s in record["step_times_s"]))
    else:
        for seed in range(6):  # data parallel warmed up one step in 0 to 4, two in 5
            folder, = RESULTS.glob(f"*-prediction-holdout-devices-seed{seed}-*")
            warmups = {r["strategy"]: r["warmup_steps"] for r in records(folder)
                       if r.get("status") == "ok"}
            print(folder.name, "(warm-up steps, median first / second measured step)")
            for strategy, values in sorted(ratios(folder).items()):
                print(f"  {strategy:28s} {warmups[strategy]}",
                      " ".join(f"{v:.2f}" for v in values))
