"""A published training table described in a file, without its figures: the GPU, the job, the
link, what feeds the GPUs and each row's layout (parbench predict --table FILE reads it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from parbench.advisor.models.links import Link
from parbench.families import MODELS
from parbench.families.workloads import PRECISIONS
from parbench.machine.gpus import GPUS, GpuSpec, gpu_called
from parbench.strategies import layout_of

__all__ = ["DATA_KINDS", "STRATEGIES", "PipelineRow", "ReplicaRow", "TableSetup", "read_setup"]

STRATEGIES = ("ddp", "torchgpipe")
# synthetic: images made on the GPU; jpeg-cpu: JPEGs decoded and augmented by the host's cores;
# gpu-decode: decoded on the GPU (DALI, nvJPEG), which no cost here counts.
DATA_KINDS = ("synthetic", "jpeg-cpu", "gpu-decode")


@dataclass(frozen=True)
class ReplicaRow:
    """Data parallel: `devices` replicas, each on `batch_per_device` images a step."""

    devices: int
    batch_per_device: int

    @property
    def label(self) -> str:
        return f"{self.devices} GPU{'s' * (self.devices > 1)}, {self.batch_per_device} each"


@dataclass(frozen=True)
class PipelineRow:
    """torchgpipe's GPipe: `batch` images in `chunks` micro-batches over len(balance) GPUs,
    stage k holding balance[k] of the model's layers, recomputing activations as
    `checkpoint` says (always, except_last, never)."""

    batch: int
    chunks: int
    balance: tuple[int, ...]
    checkpoint: str

    @property
    def devices(self) -> int:
        return len(self.balance)

    @property
    def label(self) -> str:
        return f"pipeline-{self.devices}, batch {self.batch} in {self.chunks}"


@dataclass(frozen=True)
class TableSetup:
    """Everything a published table's rows were measured with but its figures."""

    name: str
    source: str
    gpu: GpuSpec
    model: str
    image_size: int
    precision: str  # fp32 (convolutions on TF32 where the GPU has it), bf16 or fp16 (autocast)
    channels_last: bool
    strategy: str
    link: Link
    link_source: str
    data: str  # DATA_KINDS
    host_cores: int | None
    workers_per_device: int | None
    data_source: str
    rows: tuple[ReplicaRow | PipelineRow, ...]
    baseline_batch: int | None = None  # torchgpipe: the batch of its one-GPU baseline


def _need(values: dict, key: str, kind: type, where: str):
    if key not in values:
        raise ValueError(f"{where}: no {key!r}; every setup names it (docs/prediction.md)")
    value = values[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise ValueError(f"{where}: {key!r} is {value!r}, not a {kind.__name__}")
    return value


def _positive(values: dict, key: str, where: str) -> int:
    value = _need(values, key, int, where)
    if value < 1:
        raise ValueError(f"{where}: {key!r} is {value}; give 1 or more")
    return value


def _one_of(value: str, choices, what: str, where: str) -> str:
    if value not in choices:
        raise ValueError(f"{where}: unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


def _gpu(name: str, where: str) -> GpuSpec:
    gpu = gpu_called(name)
    if gpu is None:
        raise ValueError(f"{where}: no GPU {name!r} in the GPU table; give one of "
                         f"{', '.join(gpu.label for gpu in GPUS)}")
    return gpu


def _replicas(strategy: str) -> bool:
    """Whether a table of `strategy` measured replicas (ReplicaRow), as a registered
    data-parallel strategy does (ddp); torchgpipe, not registered, is GPipe (PipelineRow)."""
    layout = layout_of(strategy)
    return layout is not None and layout.data_parallel


def _rows(values: dict, strategy: str, where: str) -> tuple[ReplicaRow | PipelineRow, ...]:
    rows: list[ReplicaRow | PipelineRow] = []
    for index, row in enumerate(_need(values, "rows", list, where)):
        at = f"{where}, row {index + 1}"
        if not isinstance(row, dict):
            raise ValueError(f"{at}: a row is an object of its layout's numbers")
        if _replicas(strategy):
            rows.append(ReplicaRow(_positive(row, "devices", at),
                                   _positive(row, "batch_per_device", at)))
        else:
            balance = _need(row, "balance", list, at)
            if not balance or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                  for n in balance):
                raise ValueError(f"{at}: 'balance' is {balance!r}; give each stage's layers, "
                                 "whole numbers of 1 or more")
            rows.append(PipelineRow(_positive(row, "batch", at), _positive(row, "chunks", at),
                                    tuple(balance),
                                    _one_of(_need(row, "checkpoint", str, at),
                                            ("always", "except_last", "never"), "checkpoint",
                                            at)))
    if not rows:
        raise ValueError(f"{where}: no rows to predict")
    return tuple(rows)


def read_setup(path: Path) -> TableSetup:
    """The setup `path` describes; a ValueError in one line saying what is wrong."""
    where = str(path)
    try:
        values = json.loads(path.read_text())
    except OSError as error:
        raise ValueError(f"{where}: cannot read it ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{where}: not JSON ({error.msg}, line {error.lineno})") from None
    if not isinstance(values, dict):
        raise ValueError(f"{where}: a setup is one JSON object")
    strategy = _one_of(_need(values, "strategy", str, where), STRATEGIES, "strategy", where)
    link = _need(values, "link", dict, where)
    data = _need(values, "data", dict, where)
    setup = TableSetup(
        name=_need(values, "name", str, where), source=_need(values, "source", str, where),
        gpu=_gpu(_need(values, "gpu", str, where), where),
        model=_one_of(_need(values, "model", str, where), MODELS, "model", where),
        image_size=_need(values, "image_size", int, where),
        precision=_one_of(_need(values, "precision", str, where), PRECISIONS, "precision",
                          where),
        channels_last=_need(values, "channels_last", bool, where), strategy=strategy,
        link=Link(_need(link, "name", str, where + ", link"),
                  _need(link, "busbw_gbps", float, where + ", link"),
                  _need(link, "latency_us", float, where + ", link") * 1e-6),
        link_source=_need(link, "source", str, where + ", link"),
        data=_one_of(_need(data, "kind", str, where + ", data"), DATA_KINDS, "data kind",
                     where),
        host_cores=data.get("host_cores"), workers_per_device=data.get("workers_per_device"),
        data_source=_need(data, "source", str, where + ", data"),
        rows=_rows(values, strategy, where), baseline_batch=values.get("baseline_batch"))
    if setup.data == "jpeg-cpu":
        cores = _positive(data, "host_cores", where + ", data (JPEGs decoded on the host)")
        if "workers_per_device" in data:
            _positive(data, "workers_per_device", where + ", data")
        most = max(row.devices for row in setup.rows)
        if cores <= most:
            raise ValueError(f"{where}: 'host_cores' {cores} leaves no core for the loader "
                             f"beside {most} GPUs' processes; give the host's cores")
    if not _replicas(strategy):
        _positive(values, "baseline_batch", where)
    return setup
