"""A per-operation profile, measured and stamped with where and how (device, versions,
threads, date, parbench's commit), and its file: one JSON per workload, micro-batch and
device, its steps' times and its rows as columns (gzipped where the JSON is over 200 KB)."""

from __future__ import annotations

import datetime
import gzip
import json
from dataclasses import asdict, astuple, dataclass, fields
from pathlib import Path

import torch

from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.labels import PHASES
from parbench.advisor.profiling.op_profile.measure import WARMUP_STEPS, OpMeasurement, measure_ops
from parbench.families.workloads import Workload
from parbench.machine.environment import cpu_model
from parbench.results.folder import atomic_write_bytes, atomic_write_text

__all__ = ["FORMAT_VERSION", "GZIP_OVER_BYTES", "OpProfile", "device_name", "file_name",
           "measure_op_profile", "read_op_profile", "rows_of", "write_op_profile"]

FORMAT = "parbench op profile"
FORMAT_VERSION = 1
GZIP_OVER_BYTES = 200_000
COLUMNS = tuple(field.name for field in fields(OpRow))
_PROVENANCE = ("git_commit", "torch_version", "cuda_version", "cudnn_version", "host",
               "python_version")


@dataclass(frozen=True)
class OpProfile:
    """A measured profile and where it was measured (`environment`: parbench's stamp)."""

    workload: Workload
    micro_batch: int
    device: str
    threads: int
    device_name: str
    measured: OpMeasurement
    environment: dict
    measured_utc: str

    @property
    def step_s(self) -> float:
        return self.measured.median_step_s

    @property
    def ops_device_s(self) -> float:
        return sum(row.device_s for row in self.measured.rows)

    @property
    def ops_host_s(self) -> float:
        return sum(row.host_s for row in self.measured.rows)

    @property
    def flops(self) -> int:
        return sum(row.flops for row in self.measured.rows)

    @property
    def bytes_moved(self) -> int:
        return sum(row.bytes_moved for row in self.measured.rows)


def measure_op_profile(workload: Workload, micro_batch: int, device: str, threads: int,
                       steps: int, environment: dict) -> OpProfile:
    """measure_ops' profile of `workload`, stamped with `environment` (parbench's stamp of
    this machine) and the time it finished."""
    measured = measure_ops(workload, micro_batch, device, threads, steps)
    return OpProfile(workload, micro_batch, device, threads, device_name(device), measured,
                     environment, datetime.datetime.now(datetime.timezone.utc)
                     .isoformat(timespec="seconds"))


def device_name(device: str) -> str:
    """The GPU's name (torch.cuda.get_device_name), or the CPU's model."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    return cpu_model()


def file_name(workload: Workload, micro_batch: int, device: str, threads: int) -> str:
    """The profile's file name (before .json or .json.gz): its settings."""
    layout = "-channels-last" if workload.channels_last else ""
    search = "-cudnn-benchmark" if workload.cudnn_benchmark else ""
    cores = f"-{threads}t" if device == "cpu" else ""
    return (f"{workload.model}-{workload.image_size}px-{workload.precision}{layout}{search}"
            f"-{device.replace(':', '')}{cores}-b{micro_batch}")


def _document(profile: OpProfile) -> dict:
    measured = profile.measured
    steps = measured.profiled_steps
    on_gpu = profile.device.startswith("cuda")
    return {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "workload": {key: value for key, value in asdict(profile.workload).items()
                     if key in ("model", "image_size", "num_classes", "precision",
                                "channels_last", "cudnn_benchmark")},
        "micro_batch": profile.micro_batch, "device": profile.device,
        "device_name": profile.device_name, "threads": profile.threads,
        "measured_utc": profile.measured_utc,
        "provenance": {key: profile.environment.get(key) for key in _PROVENANCE},
        "method": {
            "warmup_steps": WARMUP_STEPS, "counted_steps": 1, "timed_steps": len(measured.step_s),
            "profiled_steps": len(steps), "profiler_warmup_steps": 1,
            "device_time": "GPU time of the op's kernels (torch.profiler, CUDA activity)"
                           if on_gpu else "the op's own time on the CPU (torch.profiler)",
        },
        "blocks": list(measured.blocks), "phases": list(PHASES),
        "step": {
            "step_s": measured.median_step_s, "step_s_each": list(measured.step_s),
            "profiled_step_s_each": [step.wall_s for step in steps],
            "ops_device_s_each": [sum(op.device_s for op in step.ops) for step in steps],
            "ops_host_s_each": [sum(op.host_s for op in step.ops) for step in steps],
            "other_device_s_each": [step.other_device_s for step in steps],
        },
        "totals": {
            "ops_device_s": profile.ops_device_s, "ops_host_s": profile.ops_host_s,
            "ops_share_of_step": profile.ops_device_s / measured.median_step_s,
            "flops": profile.flops,
            "bytes_read": sum(row.bytes_read for row in measured.rows),
            "bytes_written": sum(row.bytes_written for row in measured.rows),
            "calls": sum(row.count for row in measured.rows),
            "uncounted_calls": sum(row.uncounted for row in measured.rows),
            "unseen_calls": measured.unseen_calls,
        },
        "columns": list(COLUMNS),
        "rows": [list(astuple(row)) for row in measured.rows],
    }


def write_op_profile(profile: OpProfile, folder: Path) -> Path:
    """The profile written into `folder` (atomically): .json, or .json.gz where the JSON is
    over GZIP_OVER_BYTES."""
    text = json.dumps(_document(profile), separators=(",", ":"))
    stem = folder / file_name(profile.workload, profile.micro_batch, profile.device,
                              profile.threads)
    if len(text) <= GZIP_OVER_BYTES:
        path = stem.with_name(stem.name + ".json")
        atomic_write_text(path, text)
        return path
    path = stem.with_name(stem.name + ".json.gz")
    atomic_write_bytes(path, gzip.compress(text.encode(), mtime=0))
    return path


def read_op_profile(path: Path) -> dict:
    """A profile's document, from .json or .json.gz."""
    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if path.name.endswith(".gz") else data)


def rows_of(document: dict) -> list[OpRow]:
    """The document's rows as OpRows."""
    columns = document["columns"]
    rows = []
    for values in document["rows"]:
        row = dict(zip(columns, values, strict=True))
        row["input_shapes"] = tuple(tuple(shape) for shape in row["input_shapes"])
        rows.append(OpRow(**row))
    return rows
