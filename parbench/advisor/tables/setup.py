"""A published training table described in a file, without its figures: the GPU, the job, the
link, what feeds the GPUs and each row's layout (parbench predict --table FILE reads it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from parbench.advisor.links import Link
from parbench.families import MODELS
from parbench.families.workloads import PRECISIONS
from parbench.machine.gpus import GPUS, GpuSpec

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


def _one_of(value: str, choices, what: str, where: str) -> str:
    if value not in choices:
        raise ValueError(f"{where}: unknown {what} {value!r}; choose from {', '.join(choices)}")
    return value


def _gpu(name: str, where: str) -> GpuSpec:
    for gpu in GPUS:
        if name == gpu.label or name in gpu.names:
            return gpu
    raise ValueError(f"{where}: no GPU {name!r} in the GPU table; give one of "
                     f"{', '.join(gpu.label for gpu in GPUS)}")


def _rows(values: dict, strategy: str, where: str) -> tuple[ReplicaRow | PipelineRow, ...]:
    rows: list[ReplicaRow | PipelineRow] = []
    for index, row in enumerate(_need(values, "rows", list, where)):
        at = f"{where}, row {index + 1}"
        if not isinstance(row, dict):
            raise ValueError(f"{at}: a row is an object of its layout's numbers")
        if strategy == "ddp":
            rows.append(ReplicaRow(_need(row, "devices", int, at),
                                   _need(row, "batch_per_device", int, at)))
        else:
            rows.append(PipelineRow(_need(row, "batch", int, at), _need(row, "chunks", int, at),
                                    tuple(_need(row, "balance", list, at)),
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
    if strategy == "torchgpipe" and not isinstance(setup.baseline_batch, int):
        raise ValueError(f"{where}: torchgpipe's rows are set beside its one-GPU baseline: give "
                         "its 'baseline_batch'")
    if setup.data == "jpeg-cpu" and not isinstance(setup.host_cores, int):
        raise ValueError(f"{where}: JPEGs decoded on the host: give the host's 'host_cores' in "
                         "'data'")
    return setup
