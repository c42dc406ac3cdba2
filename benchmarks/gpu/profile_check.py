"""The H200 run's own profile (chunk 10) against its own measurements (chunk 6): single on the
whole batch and accumulating each split, predicted by the timing model from the profile alone
(no calibration), beside the step and memory measured, one trial each. Writes the page
profile-check.md of that run (RUN below):

    python benchmarks/gpu/profile_check.py > $RUN/profile-check.md
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from parbench.advisor.models import models
from parbench.advisor.profiling.profile import profile_path, stored_profile
from parbench.families.workloads import Workload

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "20261126T004029Z-gpu-reference-h200"
PROFILES = RUN / "10-predicted" / "profiles"
TUTORIAL = Workload(model="resnet50", image_size=128, precision="fp32", num_classes=1000)


def rows() -> list[dict]:
    """Each single record of chunk 6, with its prediction from chunk 10's profile (read from
    the published files only: every profile it needs is there)."""
    [path] = (RUN / "6-tutorial").glob("*/records.json")
    out = []
    for record in json.loads(path.read_text()):
        if record["status"] != "ok" or record["strategy"] != "single":
            continue
        micro_batches = int(record.get("micro_batches") or 1)
        size = record["global_batch"] // micro_batches
        profile = stored_profile(profile_path(PROFILES, TUTORIAL, size, "cuda"))
        predicted = models.single(profile, micro_batches)
        out.append(dict(micro_batches=micro_batches, size=size,
                        measured_ms=record["step_time_median_s"] * 1e3,
                        predicted_ms=predicted.step_time_s * 1e3,
                        measured_mib=record["peak_memory_max_mib"],
                        predicted_mib=max(predicted.peak_memory_mib)))
    return out


def page() -> str:
    found = rows()
    errors = [r["predicted_ms"] / r["measured_ms"] - 1 for r in found]
    memory = [r["predicted_mib"] - r["measured_mib"] for r in found]
    lines = ["# The H200's profile against its own measurements", "",
             "`python benchmarks/gpu/profile_check.py` writes this page from the published "
             "files: chunk 10's per-block profiles of resnet50 at 128 px (fp32, the tutorial's "
             "job) and chunk 6's measured `single` steps, whole and accumulating, **one trial "
             "each** (no interval). The step is the timing model's (`models.single`) from the "
             "profile alone, with no calibration; memory, the model's peak against the "
             "allocator's.", "",
             "| micro-batches x images | measured step (ms) | PREDICTED (ms) | error "
             "| measured peak (MiB) | PREDICTED (MiB) | difference (MiB) |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['micro_batches']} x {r['size']} | {r['measured_ms']:.1f} | "
              f"{r['predicted_ms']:.1f} | {error:+.1%} | {r['measured_mib']:.0f} | "
              f"{r['predicted_mib']:.0f} | {difference:+.0f} |"
              for r, error, difference in zip(found, errors, memory, strict=True)]
    whole = next(r for r in found if r["micro_batches"] == 1)
    split = [abs(e) for r, e in zip(found, errors, strict=True) if r["micro_batches"] > 1]
    slower = sum(error > 0 for error in errors)
    lines += ["", f"- The whole batch: {whole['predicted_ms']:.1f} ms predicted against "
              f"{whole['measured_ms']:.1f} ms measured ({errors[found.index(whole)]:+.1%}).",
              f"- Accumulating ({len(split)} splits): median |error| "
              f"{statistics.median(split):.1%}; over all {len(found)}, from {min(errors):+.1%} "
              f"to {max(errors):+.1%}, the prediction slower in {slower}. One trial each, "
              "and the profile taken in another process than the steps: no cause is told "
              "apart here.",
              f"- Memory: the prediction is {-max(memory):.0f} to {-min(memory):.0f} MiB below "
              "the allocator's peak (`max_memory_allocated`, which also holds what the model "
              "does not count, such as library workspaces and the allocator's rounding: not "
              "told apart here): the dangerous side for a call that something fits.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(page(), end="")
