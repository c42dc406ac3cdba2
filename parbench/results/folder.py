"""Run folders of records written atomically as CSV and JSON, and loading them back."""

from __future__ import annotations

import datetime
import gzip
import json
import os
import tempfile
from pathlib import Path

import pandas as pd

from parbench.measure.timeline import chrome_trace
from parbench.results.record import FIELDS, LIST_FIELDS, Record

__all__ = ["ResultsError", "RunFolder", "atomic_write_bytes", "atomic_write_text", "load_records",
           "read_results", "records_json"]


def atomic_write_text(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename: readers never see half a file."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """As atomic_write_text, for bytes."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp_file:
            tmp_file.write(data)
            tmp_file.flush()
            os.fsync(tmp_file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class RunFolder:
    """One `parbench run`: results/<UTC time>[-tag]/ holding records.csv, records.json, env.json
    (`parbench run` names every run: its tag says what the run holds where --tag is not
    given, `SweepSpec.folder_tag`)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def run_id(self) -> str:
        return self.path.name

    @classmethod
    def create(cls, results_dir: str | Path, tag: str = "") -> RunFolder:
        """Make a new, uniquely named run folder (raises OSError if it cannot be written)."""
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        base = Path(results_dir)
        base.mkdir(parents=True, exist_ok=True)
        name = f"{stamp}-{tag}" if tag else stamp
        for suffix in ["", *(f".{i}" for i in range(1, 100))]:
            try:
                path = base / (name + suffix)
                path.mkdir()
                break
            except FileExistsError:
                continue
        else:
            raise OSError(f"too many run folders named {name} in {base}")
        folder = cls(path)
        atomic_write_text(path / ".write-check", "")  # fail now, not after the first measurement
        (path / ".write-check").unlink()
        return folder

    @classmethod
    def open(cls, path: str | Path) -> RunFolder:
        """An existing run folder (to resume it); ResultsError if it is not one."""
        folder = cls(Path(path))
        if not any((folder.path / name).is_file() for name in ("records.json", "command.json")):
            raise ResultsError(f"{folder.path} is not a run folder (no records.json or "
                               "command.json); give a folder written by `parbench run`")
        return folder

    def read_records(self) -> list[Record]:
        """The records written so far (plain JSON, never unpickled); none in a run stopped
        before its first was written."""
        path = self.path / "records.json"
        if not path.is_file():
            return []
        return [Record.from_dict(r) for r in _records_from_json(path)]

    def write_command(self, arguments: dict) -> None:
        """The sweep's arguments, so that `--resume` measures the same configurations."""
        atomic_write_text(self.path / "command.json", json.dumps(arguments, indent=2) + "\n")

    def read_command(self) -> dict:
        path = self.path / "command.json"
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise ResultsError(f"{path} cannot be read ({error}); a run can be resumed only "
                               "if it was started by this version of parbench") from None

    def write_environment(self, environment: dict) -> None:
        atomic_write_text(self.path / "env.json", json.dumps(environment, indent=2) + "\n")

    def read_environment(self) -> dict:
        """env.json's environment; empty where the run has none, or it cannot be read."""
        path = self.path / "env.json"
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except json.JSONDecodeError:
            return {}

    def write_timeline(self, record: Record) -> Path | None:
        """timelines/<config index>-<strategy>.json.gz: the record's measured step as a
        gzipped Chrome trace (Perfetto opens it as it is), if it has one. The record keeps the
        same spans; the trace, a tenth of its size gzipped, is for the viewer."""
        if not record.timeline:
            return None
        folder = self.path / "timelines"
        folder.mkdir(exist_ok=True)
        path = folder / f"{record.config_index:03d}-{record.strategy}.json.gz"
        options = ", ".join(f"{k}={v}" for k, v in (record.strategy_options or {}).items())
        trace = chrome_trace(record.timeline, f"{record.strategy} ({options}): one measured step")
        atomic_write_bytes(path, gzip.compress(trace.encode("utf-8"), mtime=0))
        return path

    def write_collectives(self, rows: list[dict]) -> None:
        """collectives.json and .csv: `parbench collectives`' measurements (one row per
        collective and message size), beside or instead of a run's records."""
        atomic_write_text(self.path / "collectives.json", json.dumps(rows, indent=2) + "\n")
        atomic_write_text(self.path / "collectives.csv", pd.DataFrame(rows).to_csv(index=False))

    def read_collectives(self) -> list[dict]:
        """The collectives measured into this folder ([] where none were)."""
        path = self.path / "collectives.json"
        return json.loads(path.read_text()) if path.is_file() else []

    def write_records(self, records: list[Record]) -> None:
        """Replace records.json and records.csv with `records` (each write is atomic)."""
        rows = [record.to_dict() for record in records]
        atomic_write_text(self.path / "records.json", records_json(rows))
        frame = pd.DataFrame(rows)
        for field in LIST_FIELDS:
            if field in frame:
                frame[field] = frame[field].map(lambda v: None if v is None else json.dumps(v))
        atomic_write_text(self.path / "records.csv", frame.to_csv(index=False))


def records_json(rows: list[dict]) -> str:
    """records.json's text: a JSON list with one record a line, its lists (step times, a
    timeline's spans) kept on that line; indented, they took half again the bytes."""
    return "[\n" + ",\n".join(json.dumps(row) for row in rows) + "\n]\n"


def load_records(path: str | Path) -> pd.DataFrame:
    """Records from a run folder, a records.json or a records.csv, as a DataFrame.

    List fields come back as Python lists whichever file they were read from.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "records.json"
    if path.suffix == ".json":
        with open(path) as file:
            return pd.DataFrame(json.load(file))
    frame = pd.read_csv(path)
    for field in LIST_FIELDS:
        if field in frame:
            frame[field] = frame[field].map(lambda v: json.loads(v) if isinstance(v, str) else None)
    return frame


class ResultsError(ValueError):
    """A file or folder that holds no parbench results."""


# What a figure or report needs from every record.
REQUIRED = ("strategy", "status", "model", "global_batch", "image_size", "devices",
            "throughput_ips")


def _records_from_json(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ResultsError(f"{path} is not valid JSON ({error}); give a run folder, its "
                           "records.json or records.csv, or pytest-benchmark JSON") from None
    if isinstance(data, dict) and isinstance(data.get("benchmarks"), list):
        # pytest --benchmark-json: each benchmark carries its parbench record in extra_info.
        records = [b.get("extra_info", {}).get("record") for b in data["benchmarks"]]
        if not records or any(not isinstance(r, dict) for r in records):
            raise ResultsError(f"{path} is pytest-benchmark output without parbench records; "
                               "make it with `pytest benchmarks --benchmark-only "
                               "--benchmark-json FILE`")
        return records
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return data
    raise ResultsError(f"{path} holds no parbench records; give a run folder, its records.json "
                       "or records.csv, or pytest-benchmark JSON")


def read_results(paths: list[str | Path]) -> tuple[pd.DataFrame, Path]:
    """All records in `paths` (run folders, records files, pytest-benchmark JSON), checked, and
    the folder they came from first (where figures and reports go)."""
    frames = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            if not (path / "records.json").is_file():
                raise ResultsError(f"{path} has no records.json; give a folder written by "
                                   "`parbench run`")
            path = path / "records.json"
        elif not path.is_file():
            raise ResultsError(f"{path}: no such file or folder")
        if path.suffix == ".csv":
            try:
                frame = load_records(path)
            except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError,
                    json.JSONDecodeError) as error:
                raise ResultsError(f"{path} is not a parbench records.csv ({error})") from None
        elif path.suffix == ".json":
            frame = pd.DataFrame(_records_from_json(path))
        else:
            raise ResultsError(f"{path}: expected a run folder, records.json, records.csv or "
                               "pytest-benchmark JSON")
        missing = [field for field in REQUIRED if field not in frame.columns]
        if frame.empty or missing:
            raise ResultsError(f"{path} holds no parbench records (missing "
                               f"{', '.join(missing) or 'rows'}); give a folder written by "
                               "`parbench run`")
        frames.append(frame)
    frame = pd.concat(frames, ignore_index=True)
    for field in FIELDS:  # records written by an older parbench lack newer fields
        if field not in frame.columns:
            frame[field] = None
    first = Path(paths[0])
    return frame, first if first.is_dir() else first.parent
