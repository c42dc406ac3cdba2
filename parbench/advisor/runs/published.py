"""A run's predictions kept with it: predictions.csv, its figures and prediction.json (the link
and the predictor's version) written from the run's records and the profiles in its own
profiles/ folder, so `parbench report` writes them again exactly, and anyone can audit them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from parbench.advisor.models.links import LINKS, AnyLink, MeasuredLink, named_link
from parbench.advisor.models.naive import with_naive
from parbench.advisor.profiling.costs_at_hand import measured_costs
from parbench.advisor.profiling.record_profiles import profiles_for
from parbench.advisor.runs.figures import (
    write_predicted_timelines,
    write_prediction_figure,
    write_ranking_figure,
)
from parbench.advisor.runs.memory_calls import MEMORY_CALLS_FILE, memory_calls
from parbench.advisor.runs.records import (
    NOT_COVERED,
    left_out,
    predicted_beside_measured,
)
from parbench.advisor.runs.summary import PREDICTIONS_FILE, with_reader_columns
from parbench.advisor.version import PREDICTOR_VERSION, fingerprint
from parbench.results.folder import RunFolder, atomic_write_text

__all__ = ["NOT_COVERED", "PREDICTION_FILE", "PROFILES_FOLDER", "Published", "kept_files",
           "left_out", "predict_into", "run_link", "run_records", "stale_models",
           "stored_prediction"]

PREDICTION_FILE = "prediction.json"  # how the run's predictions were made: link, version
PROFILES_FOLDER = "profiles"  # the profiles and contention factors they were made from


def run_link(folder: RunFolder, name: str, backend: str | None = None) -> AnyLink:
    """`measured` (the collectives measured into the folder), a name in LINKS, or a bandwidth
    in GB/s; a ValueError that says what to do otherwise."""
    if name != "measured":
        return named_link(name)
    try:
        collectives = folder.read_collectives()
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{folder.path / 'collectives.json'} is not valid JSON ({error}); "
                         f"measure it again with parbench collectives --into {folder.path}, "
                         f"or name a link ({', '.join(LINKS)}) or a bandwidth in GB/s") from None
    if not collectives:
        raise ValueError(f"--link measured needs collectives measured in {folder.path}: run "
                         f"parbench collectives --into {folder.path}, or name a link "
                         f"({', '.join(LINKS)}) or a bandwidth in GB/s")
    # The folder's name, not its path: the same wherever the run is copied to.
    return MeasuredLink(f"measured in {folder.path.name}", tuple(collectives), backend)


def run_records(folder: RunFolder) -> pd.DataFrame:
    """The folder's records as predictions are made from them (a ResultsError where its
    records.json cannot be read)."""
    return pd.DataFrame([record.to_dict() for record in folder.read_records()])


def stored_prediction(folder: RunFolder) -> dict | None:
    """prediction.json's contents (None where the run has not been predicted)."""
    path = folder.path / PREDICTION_FILE
    try:
        return json.loads(path.read_text()) if path.is_file() else None
    except json.JSONDecodeError:
        return None


def stale_models(stored: dict) -> str | None:
    """Why this version of the models may not write the predictions prediction.json
    describes again (None: it may): they were made by another version, or by the same
    version number with other sources (the models changed without a new version)."""
    version = stored.get("predictor_version")
    if version != PREDICTOR_VERSION:
        return (f"they were made by version {version} of the models, which are now version "
                f"{PREDICTOR_VERSION}")
    if stored.get("fingerprint", fingerprint()) != fingerprint():
        return (f"the models' sources changed since they were made, still numbered version "
                f"{PREDICTOR_VERSION}: bump PREDICTOR_VERSION (parbench/advisor/version.py)")
    return None


def kept_files(folder: Path) -> list[Path]:
    """Every file of the folder's predictions (kept as they are where stale_models says so)."""
    names = ("predictions.*", "ranking.*", "predicted-timeline-*", PREDICTION_FILE,
             MEMORY_CALLS_FILE)
    return sorted(path for pattern in names for path in Path(folder).glob(pattern))


@dataclass(frozen=True)
class Published:
    """What predict_into wrote: the table, the figures' paths, and the memory calls (empty
    where the run had no memory limit)."""

    table: pd.DataFrame
    figures: list[Path]
    calls: pd.DataFrame = field(default_factory=pd.DataFrame)
    # every measured record not in `table`, with why (`not_predicted`)
    left: pd.DataFrame = field(default_factory=pd.DataFrame)


def predict_into(folder: RunFolder, records: pd.DataFrame, link_name: str,
                 profiler: Callable[[dict], Callable] | None = None,
                 left: pd.DataFrame | None = None) -> Published:
    """The run's records predicted by this version of the models, from the profiles in
    folder/profiles (measured there where missing), written into the folder. A ValueError
    where the link or a record lacks what a prediction needs; an empty table where no record
    is of a modelled strategy (nothing written then). `left`: records the caller kept out,
    with why (`not_predicted`), written and reported beside those the models leave out."""
    backends = list(records["backend"].dropna()) if "backend" in records else []
    link = run_link(folder, link_name, backends[0] if backends else None)
    cache = folder.path / PROFILES_FOLDER
    profiler = profiler or (lambda record: profiles_for(record, cache))
    table = predicted_beside_measured(
        records, profiler, link,
        lambda record: measured_costs(record, profiler(record), link, cache))
    frames = [frame for frame in (left, left_out(records, table, profiler, link))
              if frame is not None and not frame.empty]
    left = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    calls = memory_calls(records, profiler, link)
    if not calls.empty:
        atomic_write_text(folder.path / MEMORY_CALLS_FILE, calls.assign(
            predictor_version=PREDICTOR_VERSION).to_csv(index=False))
    if table.empty:
        return Published(table, [], calls, left)
    table = with_reader_columns(with_naive(table, profiler), link.name).assign(
        predictor_version=PREDICTOR_VERSION)
    # every measured record is a row: those left out name why, with no prediction
    written = pd.concat([table, left.assign(predictor_version=PREDICTOR_VERSION)],
                        ignore_index=True) if not left.empty else table
    atomic_write_text(folder.path / PREDICTIONS_FILE,
                      written.drop(columns=["timeline", "predicted_timeline"], errors="ignore")
                      .to_csv(index=False))
    atomic_write_text(folder.path / PREDICTION_FILE, json.dumps(
        {"link": link_name, "predictor_version": PREDICTOR_VERSION,
         "fingerprint": fingerprint()}, indent=2) + "\n")
    figures = [write_prediction_figure(table, folder.path, link.name)]
    ranked = write_ranking_figure(table, folder.path)
    figures += ([ranked] if ranked else []) + write_predicted_timelines(table, folder.path)
    return Published(table, figures, calls, left)
