"""Predictions of published multi-GPU tables, written before they are compared with them:

    python benchmarks/published/predict_tables.py [--out results/published-tables]

writes predictions.json and predictions.md there, and keeps the CPU profiles they came from in
profiles/ (measured once, about a minute on one thread; read back after). Each prediction
takes its shape from the profile and its level from the table's published single-GPU
throughput (parbench.advisor.tables.published_predictions); the published multi-GPU figures are not
read. benchmarks/published/compare_tables.py sets them side by side afterwards.
"""

from __future__ import annotations

import argparse
import json
import platform
from datetime import datetime, timezone
from pathlib import Path

import torch

from parbench.advisor.profiling.profile import Profile, load_or_profile
from parbench.advisor.tables.published_predictions import predict_data_parallel, predict_pipeline
from parbench.advisor.tables.published_tables import DLE_RESNET50, TORCHGPIPE_RESNET101
from parbench.advisor.version import FINGERPRINT, PREDICTOR_VERSION, fingerprint
from parbench.families.workloads import Workload

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "published-tables"
# The shape only: small micro-batches of the tables' 224 px images on this CPU, one thread.
PROFILE_MICRO_BATCH, PROFILE_THREADS, IMAGE_SIZE = 8, 1, 224


def profiles(folder: Path) -> dict[str, Profile]:
    """resnet50's and resnet101's profiles, kept in `folder` (measured where not there)."""
    return {model: load_or_profile(folder, Workload(model=model, image_size=IMAGE_SIZE),
                                   PROFILE_MICRO_BATCH, "cpu", PROFILE_THREADS)
            for model in ("resnet50", "resnet101")}


def predictions(shapes: dict[str, Profile]) -> dict:
    """Every table row predicted, with what it was predicted by."""
    rows = [predict_data_parallel(row, shapes[row.model]) for row in DLE_RESNET50]
    rows += [predict_pipeline(row, shapes[row.model]) for row in TORCHGPIPE_RESNET101]
    return dict(
        kind="predicted", created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        predictor_version=PREDICTOR_VERSION, fingerprint=fingerprint(),
        fingerprint_matches_version=fingerprint() == FINGERPRINT,
        profiles={model: dict(file=f"profiles/{profile.key()}.json",
                              micro_batch=profile.micro_batch, device=profile.device,
                              threads=profile.threads, image_size=profile.image_size,
                              precision=profile.precision)
                  for model, profile in shapes.items()},
        host=dict(python=platform.python_version(), torch=torch.__version__,
                  processor=platform.processor() or platform.machine()),
        rows=rows)


def page(predicted: dict) -> str:
    """predictions.md: the predicted figures only, every one labelled PREDICTED."""
    lines = ["# PREDICTED: published multi-GPU tables", "",
             f"Written {predicted['created']} by `benchmarks/published/predict_tables.py`, "
             f"models version {predicted['predictor_version']} (fingerprint "
             f"`{predicted['fingerprint'][:12]}`), from CPU profiles at micro-batch "
             f"{PROFILE_MICRO_BATCH} (`profiles/`) levelled at each table's published "
             "single-GPU throughput. No published multi-GPU figure was read.", "",
             "| row | GPUs | link | PREDICTED img/s | PREDICTED efficiency or speedup |",
             "|---|---|---|---|---|"]
    for row in predicted["rows"]:
        if row["kind"] == "data-parallel":
            figure = f"efficiency {row['predicted_efficiency']:.3f}"
        else:
            figure = (f"speedup {row['predicted_speedup']:.3f}x (torch's GPipe replayed: "
                      f"{row['replayed_gpipe_speedup']:.3f}x)")
        lines.append(f"| {row['name']} | {row['gpus']} | {row['link']} | "
                     f"{row['predicted_ips']:.1f} | {figure} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    out = parser.parse_args(argv).out
    (out / "profiles").mkdir(parents=True, exist_ok=True)
    predicted = predictions(profiles(out / "profiles"))
    (out / "predictions.json").write_text(json.dumps(predicted, indent=2) + "\n")
    (out / "predictions.md").write_text(page(predicted))
    print(page(predicted))


if __name__ == "__main__":
    main()
