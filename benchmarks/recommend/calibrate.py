"""Fit parbench/advisor/calibration.json: each strategy's measured over predicted throughput on
the recommend experiment's tuning workloads (a measured experiment folder), by device count and
over all, as the geometric mean over its layouts; the models predict without it here.

    python benchmarks/recommend/calibrate.py results/<time>-recommend-experiment
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import experiment

from parbench.advisor.calibration import CALIBRATION_FILE
from parbench.advisor.layouts import MODELLED_SETTINGS
from parbench.advisor.version import PREDICTOR_VERSION
from parbench.plan.config import Config
from parbench.results.comparisons import per_round
from parbench.results.folder import RunFolder, atomic_write_text


def _keys(key: str, configs: list[Config]) -> set[str]:
    """A candidate's key, and the key it had before candidates were pinned to the settings
    the models model (MODELLED_SETTINGS and resharding after forward: then the strategies'
    defaults, left out), which the published tuning records carry."""
    config = next(c for c in configs if c.key() == key)
    unpinned = {k: v for k, v in config.options.items() if k not in MODELLED_SETTINGS
                and (k, v) != ("reshard_after_forward", "yes")}
    return {key, replace(config, options=unpinned).key()}


def ratios(folder: Path) -> tuple[dict[tuple[int, str], list[float]], set[tuple[int, int]]]:
    """Per (device count, strategy): each measured layout's throughput (geometric mean over
    its rounds) over its prediction without calibration; and the (cores, threads per device)
    its records were measured with."""
    measured = json.loads((folder / "measured.json").read_text())
    found: dict[tuple[int, str], list[float]] = defaultdict(list)
    machines: set[tuple[int, int]] = set()
    for spec in experiment.TUNING:
        configs = experiment._configs(spec)
        table, _ = experiment._predicted(spec, configs, folder)
        predicted = {key: row["throughput_ips"] / row["calibration"]
                     for row in table.to_dict("records")
                     for key in _keys(row["config_key"], configs)}
        run = folder / measured[spec.name]["run"]
        cores = json.loads((run / "env.json").read_text())["cpu_cores_available"]
        for record in RunFolder(run).read_records():
            if record.ok and record.config_key in predicted:
                ips = statistics.geometric_mean(per_round(record).values())
                devices = len(str(record.devices).split(","))
                machines.add((cores, record.threads_per_device or 1))
                found[(devices, str(record.strategy))].append(ips / predicted[record.config_key])
    return found, machines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="the tuning workloads' measured experiment folder")
    parser.add_argument("--into", default=str(CALIBRATION_FILE),
                        help="the file to write (default: the one the models read)")
    args = parser.parse_args(argv)
    found, machines = ratios(Path(args.folder))
    if len(machines) != 1:
        raise SystemExit(f"the records were measured on several machines {sorted(machines)}: "
                         "fit on one")
    (cores, threads), = machines
    factors: dict[str, dict[str, float]] = defaultdict(dict)
    pooled: dict[str, list[float]] = defaultdict(list)
    for (devices, strategy), values in sorted(found.items()):
        factors[str(devices)][strategy] = round(statistics.geometric_mean(values), 3)
        pooled[strategy] += values
    factors["any"] = {strategy: round(statistics.geometric_mean(values), 3)
                      for strategy, values in sorted(pooled.items())}
    atomic_write_text(Path(args.into), json.dumps(dict(
        predictor_version=PREDICTOR_VERSION, fitted_on=Path(args.folder).name,
        workloads=[case.name for case in experiment.TUNING], cpu_cores=int(cores),
        threads_per_device=int(threads),
        layouts={f"{d} {s}": len(v) for (d, s), v in sorted(found.items())},
        factors=factors), indent=1) + "\n")
    print(f"calibration: {args.into}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
