"""`parbench project RUN`: each measured ddp step projected to more ranks and to links of a
given bus bandwidth (ring all-reduce), checked against what was measured; kept apart from the
records and labelled projected."""

from __future__ import annotations

import argparse

import pandas as pd

import strategies
from parbench.commands.arguments import UsageError, comma_list, int_list, open_run_folder
from parbench.plots import write_projection_figure
from parbench.projection import LINKS, measured_busbw_gbps, project
from parbench.results import atomic_write_text

__all__ = ["command_project"]


def _links(text: str) -> list[str | float]:
    """`measured`, a name in LINKS, or a bus bandwidth in GB/s."""
    links = []
    for item in comma_list(text):
        if item == "measured" or item in LINKS:
            links.append(item)
            continue
        try:
            value = float(item)
        except ValueError:
            value = 0.0
        if value <= 0:
            raise UsageError(f"--link {item!r}: give measured, {', '.join(LINKS)}, or a bus "
                             "bandwidth in GB/s above 0")
        links.append(value)
    return links


def command_project(args: argparse.Namespace) -> int:
    folder = open_run_folder(args.run)
    ranks = int_list("--ranks", args.ranks, 1)
    links = _links(args.link)
    measured = [r.to_dict() for r in folder.read_records()
                if r.ok and strategies.allreduces_gradients(r.strategy)
                and r.compute_time_s is not None and r.allreduce_bytes]
    ddp = pd.DataFrame(measured)
    if ddp.empty:
        raise UsageError(f"{folder.path} has no ddp record with compute_time_s and "
                         "allreduce_bytes; measure one first, e.g. parbench run --strategy ddp")
    collectives = folder.read_collectives()
    if "measured" in links and not collectives:
        raise UsageError(f"--link measured needs collectives in {folder.path}: run parbench "
                         f"collectives --into {folder.path} first, or name a link "
                         f"({', '.join(LINKS)}) or a bandwidth in GB/s")
    rows, checks = [], []
    for _, record in ddp.iterrows():
        measured_bw = measured_busbw_gbps(collectives, record)
        for link in links:
            if link == "measured":
                if measured_bw is None:
                    continue
                name, bandwidth = f"measured ({record['devices']}, {record['backend']})", \
                    measured_bw
            else:
                name, bandwidth = (link, LINKS[link]) if isinstance(link, str) \
                    else (f"{link:g} GB/s", link)
            rows += [project(record, n, name, bandwidth) for n in ranks]
        if measured_bw is not None:  # the projection at the measured size, against itself
            at_home = project(record, int(record["world_size"]), "measured", measured_bw)
            step = record["step_time_median_s"]
            checks.append(
                f"check: ddp on {record['devices']} ({record['global_batch']} images): "
                f"measured step {step:.3f} s; projected {at_home['step_no_overlap_s']:.3f} s "
                f"with no overlap ({at_home['step_no_overlap_s'] / step - 1:+.0%}), "
                f"{at_home['step_full_overlap_s']:.3f} s with full overlap "
                f"({at_home['step_full_overlap_s'] / step - 1:+.0%})")
    table = pd.DataFrame(rows)
    if table.empty:
        raise UsageError(f"the collectives in {folder.path} were measured on other devices, "
                         "ranks or backend than its ddp records; measure them on the same "
                         "(parbench collectives --devices ... --into RUN) or name a link")
    atomic_write_text(folder.path / "projection.csv", table.to_csv(index=False))
    figure = write_projection_figure(table, folder.path)
    print("PROJECTED (ring all-reduce model from measured compute and gradient bytes; batch "
          "per rank fixed; not measured):")
    shown = table[["strategy", "model", "batch_per_rank", "ranks", "link", "busbw_gbps",
                   "step_no_overlap_s", "step_full_overlap_s", "efficiency_no_overlap",
                   "efficiency_full_overlap"]]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    print(*checks, sep="\n")
    if not checks:
        print(f"no check against a measured step: run parbench collectives --into "
              f"{folder.path} to measure the link the ddp records ran on")
    print(f"projection: {folder.path / 'projection.csv'}; figure: {figure}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """`parbench project`: its parser and arguments."""
    projection = commands.add_parser(
        "project", help="project a run's ddp step to more ranks and other links (labelled "
        "projected, kept apart from measurements)",
        description="From each ddp record's measured compute time and gradient bytes, the "
                    "step at N ranks on a link of a given bus bandwidth under the ring "
                    "all-reduce model, with no overlap and with full overlap; checked against "
                    "the measured step where `parbench collectives --into RUN` measured the "
                    "link. Writes projection.csv and projection.png into the run folder.")
    projection.add_argument("run", help="a run folder with ddp records")
    projection.add_argument("--ranks", default="2,4,8,16,32",
                            help="rank counts (default 2,4,8,16,32)")
    projection.add_argument("--link", default="measured," + ",".join(LINKS),
                            help="links: measured (parbench collectives in the run folder), "
                                 + ", ".join(f"{k} (~{v:g} GB/s)" for k, v in LINKS.items())
                                 + ", or a bus bandwidth in GB/s (default: all of them)")
    projection.set_defaults(handler=command_project)
