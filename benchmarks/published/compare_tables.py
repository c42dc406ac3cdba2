"""The committed predictions of published multi-GPU tables beside the published figures:

    python benchmarks/published/compare_tables.py [--out results/published-tables]

reads predictions.json there (benchmarks/published/predict_tables.py) and writes comparison.md:
each row predicted against published, its error in points of scaling efficiency (throughput
on N GPUs over N times one GPU's; a pipeline's speedup over N), and whether within WITHIN.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from parbench.advisor.tables.published_tables import (
    DLE_RESNET50,
    TORCHGPIPE_RESNET101,
    PublishedDataParallel,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "results" / "published-tables"
WITHIN = 5.0  # points of efficiency: issue 46's target
PUBLISHED = {row.name: row for row in (*DLE_RESNET50, *TORCHGPIPE_RESNET101)}


def comparison_rows(predictions: dict) -> list[dict]:
    """Each predicted row beside its published figure: efficiencies and their difference in
    points (100 x predicted - published); for a pipeline its speedups too."""
    rows = []
    for predicted in predictions["rows"]:
        published = PUBLISHED[predicted["name"]]
        gpus = predicted["gpus"]
        if isinstance(published, PublishedDataParallel):
            mine, theirs = predicted["predicted_efficiency"], published.efficiency
            row: dict = dict(published_ips=published.multi_ips)
        else:
            mine, theirs = predicted["predicted_speedup"] / gpus, published.speedup / gpus
            row = dict(predicted_speedup=predicted["predicted_speedup"],
                       published_speedup=published.speedup,
                       published_ips=published.pipeline_ips)
        error = 100 * (mine - theirs)
        rows.append(dict(name=predicted["name"], kind=predicted["kind"], gpus=gpus,
                         predicted_ips=predicted["predicted_ips"], **row,
                         predicted_efficiency=mine, published_efficiency=theirs,
                         error_points=error, within=abs(error) <= WITHIN))
    return rows


def page(predictions: dict) -> str:
    """comparison.md, from predictions.json's contents and the published tables."""
    rows = comparison_rows(predictions)
    lines = ["# Published multi-GPU tables beside their committed predictions", "",
             f"Predictions: `predictions.json`, written {predictions['created']} by models "
             f"version {predictions['predictor_version']} (fingerprint "
             f"`{predictions['fingerprint'][:12]}`) before this page; "
             "`benchmarks/published/compare_tables.py` writes it from them and "
             "`parbench/advisor/tables/published_tables.py` (the published figures and sources). "
             f"Error: predicted minus published scaling efficiency, in points; within "
             f"{WITHIN:g} points or not.", "",
             "| row | GPUs | PREDICTED img/s | published img/s | PREDICTED speedup "
             "| published speedup | PREDICTED efficiency | published efficiency | error "
             f"(points) | within {WITHIN:g} |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        speedups = (f"{row['predicted_speedup']:.3f}x | {row['published_speedup']:.3f}x"
                    if row["kind"] == "pipeline" else "- | -")
        lines.append(f"| {row['name']} | {row['gpus']} | {row['predicted_ips']:.1f} | "
                     f"{row['published_ips']:.1f} | {speedups} | "
                     f"{row['predicted_efficiency']:.3f} | {row['published_efficiency']:.3f} | "
                     f"{row['error_points']:+.2f} | {'yes' if row['within'] else 'no'} |")
    eight = [row for row in rows if row["gpus"] == 8]
    missed = [row["name"] for row in eight if not row["within"]]
    lines += ["", f"8-GPU scaling efficiency within {WITHIN:g} points: "
              f"{len(eight) - len(missed)} of {len(eight)} rows"
              + (f"; not {', '.join(missed)}." if missed else ".")]
    sources = sorted({PUBLISHED[row["name"]].source for row in rows})
    lines += ["", "Sources:", "", *(f"- {source}" for source in sources)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    out = parser.parse_args(argv).out
    text = page(json.loads((out / "predictions.json").read_text()))
    (out / "comparison.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
