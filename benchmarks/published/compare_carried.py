"""Published tables, and parbench's own GPU steps, beside the predictions committed before them
(parbench predict --table, from the setups alone):

    python benchmarks/published/compare_carried.py RUN

reads RUN/predictions.csv and writes RUN/comparison.md: each 8-GPU efficiency and pipeline
speedup against the published one, in points (within WITHIN_POINTS or not) and beside the
perfect-scaling guess's error; each one-GPU level against the published or measured one, in
percent (within WITHIN_PERCENT or not).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

from parbench.advisor.carried.gpu_references import REFERENCES
from parbench.advisor.tables.published_tables import DLE_RESNET50, TORCHGPIPE_RESNET101

WITHIN_POINTS = 5.0  # of scaling efficiency (a pipeline's speedup over its GPUs)
WITHIN_PERCENT = 15.0  # of a one-GPU throughput
_DLE = {"dle-dgxa100-resnet50-tf32": DLE_RESNET50[0], "dle-dgxa100-resnet50-amp": DLE_RESNET50[1]}
_OWN = {"parbench-h100-resnet50-bf16": REFERENCES[3], "parbench-h200-resnet50-bf16": REFERENCES[1]}


def _rows(run: Path) -> list[dict]:
    with open(run / "predictions.csv", newline="") as file:
        return list(csv.DictReader(file))


def scaling_rows(rows: list[dict]) -> list[dict]:
    """Each multi-GPU row: its PREDICTED efficiency and the published one, and the error of
    each and of the perfect-scaling guess (efficiency 1), in points."""
    found = []
    for row in rows:
        devices = int(row["devices"])
        if row["setup"] in _DLE and devices > 1:
            replicas = _DLE[row["setup"]]
            mine, theirs = float(row["predicted_efficiency"]), replicas.efficiency
            source = replicas.source
        elif row["setup"] == "torchgpipe-p40-resnet101":
            [pipeline] = [p for p in TORCHGPIPE_RESNET101 if len(p.balance) == devices]
            mine = float(row["predicted_speedup"]) / devices
            theirs, source = pipeline.speedup / devices, pipeline.source
        else:
            continue
        found.append(dict(name=f"{row['setup']}, {row['row']}", devices=devices,
                          predicted=mine, published=theirs, error=100 * (mine - theirs),
                          perfect_error=100 * (1 - theirs), source=source))
    return found


def level_rows(rows: list[dict]) -> list[dict]:
    """Each one-GPU throughput PREDICTED against the published (DLE) or measured (parbench's
    GPU runs) one, in percent."""
    found = []
    for row in rows:
        if int(row["devices"]) != 1 or row["setup"] not in (*_DLE, *_OWN):
            continue
        if row["setup"] in _DLE:
            theirs, source = _DLE[row["setup"]].single_ips, _DLE[row["setup"]].source
        else:
            theirs = _OWN[row["setup"]].measured_ips
            source = f"parbench, measured: results/{_OWN[row['setup']].run}"
        mine = float(row["predicted_ips"])
        found.append(dict(name=f"{row['setup']} ({row['gpu']})", predicted=mine,
                          published=theirs, error=100 * (mine / theirs - 1), source=source))
    return found


def page(run: Path) -> str:
    """comparison.md, from RUN/predictions.csv and the published and measured figures."""
    rows = _rows(run)
    scaling, levels = scaling_rows(rows), level_rows(rows)
    lines = ["# Published tables beside predictions committed before them", "",
             "PREDICTED: `predictions.csv` (`parbench predict --table`, its command in "
             "`command.sh`), committed before this page; `benchmarks/published/"
             "compare_carried.py` writes the page from it and the published figures "
             "(`parbench/advisor/tables/published_tables.py`) and parbench's measured GPU steps "
             "(`parbench/advisor/carried/gpu_references.py`). No published figure is an input of a "
             "prediction.", "",
             f"## Scaling: efficiency in points (within {WITHIN_POINTS:g})", "",
             "Efficiency: throughput on N GPUs over N times one GPU's (a pipeline's speedup over "
             "its one-GPU baseline, over N). The perfect-scaling guess is efficiency 1.", "",
             "| row | GPUs | PREDICTED | published | error (points) | within | perfect "
             "scaling's error |", "|---|---|---|---|---|---|---|"]
    for row in scaling:
        within = abs(row["error"]) <= WITHIN_POINTS
        lines.append(f"| {row['name']} | {row['devices']} | {row['predicted']:.3f} | "
                     f"{row['published']:.3f} | {row['error']:+.2f} | "
                     f"{'yes' if within else 'no'} | {row['perfect_error']:+.2f} |")
    met = sum(abs(row["error"]) <= WITHIN_POINTS for row in scaling)
    beats = sum(abs(row["error"]) < abs(row["perfect_error"]) for row in scaling)
    lines += ["", f"Within {WITHIN_POINTS:g} points: {met} of {len(scaling)} rows; closer than "
              f"perfect scaling's guess: {beats} of {len(scaling)}.", "",
              f"## One GPU: throughput in percent (within {WITHIN_PERCENT:g})", "",
              "| row | PREDICTED img/s | published or measured img/s | error | within |",
              "|---|---|---|---|---|"]
    for row in levels:
        within = abs(row["error"]) <= WITHIN_PERCENT
        lines.append(f"| {row['name']} | {row['predicted']:.0f} | {row['published']:.0f} | "
                     f"{row['error']:+.1f}% | {'yes' if within else 'no'} |")
    met = sum(abs(row["error"]) <= WITHIN_PERCENT for row in levels)
    sources = sorted({row["source"] for row in (*scaling, *levels)})
    lines += ["", f"Within {WITHIN_PERCENT:g}%: {met} of {len(levels)} rows.", "", "Sources:",
              "", *(f"- {source}" for source in sources)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the folder predict --table wrote into")
    args = parser.parse_args(argv)
    (args.run / "comparison.md").write_text(page(args.run))
    print(page(args.run), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
