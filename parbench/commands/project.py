"""`parbench project RUN`: predict's ddp case from a run's own ddp records: each measured step
predicted at more ranks and on links of a given bus bandwidth, checked against what was
measured; kept apart from the records and labelled predicted."""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
import torch

from parbench import strategies
from parbench.advisor.models.links import LINKS, Link, links_help, named_link
from parbench.advisor.models.projection import project
from parbench.advisor.profiling.record_profiles import profiles_for
from parbench.advisor.runs.figures import write_projection_figure
from parbench.commands.arguments import UsageError, comma_list, int_list, open_run_folder
from parbench.commands.caches import profile_cache
from parbench.results.collectives import measured_busbw_gbps
from parbench.results.folder import atomic_write_text

__all__ = ["command_project"]


def _links(text: str) -> list[str | Link]:
    """`measured`, or a link named_link reads (a name in LINKS, a bus bandwidth in GB/s)."""
    links = []
    for item in comma_list(text):
        try:
            links.append(item if item == "measured" else named_link(item))
        except ValueError as error:
            raise UsageError(str(error)) from None
    return links


def _record_links(links: list[str | Link], record: pd.Series,
                  measured_bw: float | None) -> list[Link]:
    """The links to predict a record on: `measured` where the run measured the record's own."""
    chosen = []
    for link in links:
        if isinstance(link, Link):  # else "measured"
            chosen.append(link)
        elif measured_bw is not None:
            chosen.append(Link(f"measured ({record['devices']}, {record['backend']})",
                               measured_bw))
    return chosen


def _shape_profile(record: pd.Series, cache):
    """The profile of the record's model at its batch per rank, for its shape only (when in
    backward each bucket is ready): on the record's device, or this CPU's if that is not here."""
    kind = record["device_kind"] if record["device_kind"] != "cuda" \
        or torch.cuda.is_available() else "cpu"
    per_rank = int(record["global_batch"]) // int(record["world_size"])
    # Only the shape is used: the level is the record's measured compute, contention and all.
    return profiles_for({**record.to_dict(), "emulated": False}, cache, kind)(per_rank)


def command_project(args: argparse.Namespace) -> int:
    folder = open_run_folder(args.run)
    ranks = int_list("--ranks", args.ranks, 1)
    links = _links(args.link)
    measured = [r.to_dict() for r in folder.read_records()
                if r.ok and r.strategy and strategies.allreduces_gradients(r.strategy)
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
    bandwidths = [(record, measured_busbw_gbps(collectives, record))
                  for _, record in ddp.iterrows()]
    chosen = [(record, bandwidth, _record_links(links, record, bandwidth))
              for record, bandwidth in bandwidths]
    if not any(record_links for _, _, record_links in chosen):
        raise UsageError(f"the collectives in {folder.path} were measured on other devices, "
                         "ranks or backend than its ddp records; measure them on the same "
                         "(parbench collectives --devices ... --into RUN) or name a link")
    rows, checks = [], []
    for record, measured_bw, record_links in chosen:
        profile = _shape_profile(record, profile_cache(args.profile_cache))
        rows += [project(record, n, link, profile) for link in record_links for n in ranks]
        if measured_bw is not None:  # the prediction at the measured size, against itself
            home = project(record, int(record["world_size"]), Link("measured", measured_bw),
                           profile)
            step = record["step_time_median_s"]
            checks.append(
                f"check: ddp on {record['devices']} ({record['global_batch']} images): "
                f"measured step {step:.3f} s; predicted {home['predicted_step_time_s']:.3f} s "
                f"({home['predicted_step_time_s'] / step - 1:+.0%}), between "
                f"{home['step_full_overlap_s']:.3f} s (full overlap) and "
                f"{home['step_no_overlap_s']:.3f} s (none)")
    table = pd.DataFrame(rows)
    atomic_write_text(folder.path / "projection.csv", table.to_csv(index=False))
    figure = write_projection_figure(table, folder.path)
    print("PREDICTED, not measured (predict's ddp model on each record's measured compute and "
          "gradient bytes: buckets all-reduced as backward fills them, ring all-reduce on the "
          "link; batch per rank fixed):")
    shown = table[["strategy", "model", "batch_per_rank", "ranks", "link", "busbw_gbps",
                   "predicted_step_time_s", "efficiency", "efficiency_full_overlap",
                   "efficiency_no_overlap"]]
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
        "project", help="predict a run's ddp step at more ranks and on other links (labelled "
        "predicted, kept apart from measurements)",
        description="predict's ddp case: from each ddp record's measured compute time and "
                    "gradient bytes, the step at N ranks on a link of a given bus bandwidth "
                    "(DDP's buckets all-reduced in a ring as backward fills them, overlapped; "
                    "a profile of the model gives when each is ready), between its bounds of "
                    "no overlap and full overlap; checked against the measured step where "
                    "`parbench collectives --into RUN` measured the link. Writes "
                    "projection.csv and projection.png into the run folder.")
    projection.add_argument("run", help="a run folder with ddp records")
    projection.add_argument("--ranks", default="2,4,8,16,32",
                            help="rank counts (default 2,4,8,16,32)")
    projection.add_argument("--link", default="measured," + ",".join(LINKS),
                            help="links: measured (parbench collectives in the run folder), "
                                 + links_help() + ", or a bus bandwidth in GB/s without "
                                 "latency (default: all of them)")
    projection.add_argument("--profile-cache", type=Path,
                            help="where profiles are kept (default "
                                 "~/.cache/parbench/profiles/<host>)")
    projection.set_defaults(handler=command_project)
