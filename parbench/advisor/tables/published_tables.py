"""Published multi-GPU training tables the suite predicts, as data, each with its source."""

from __future__ import annotations

from dataclasses import dataclass

from parbench.advisor.models.links import Link

__all__ = ["DGX_A100_NVLINK", "DLE_RESNET50", "P40_PCIE3", "PublishedDataParallel",
           "PublishedPipeline", "TORCHGPIPE_RESNET101"]

# 8 A100-SXM4-80GB on NVLink 3 through NVSwitch (a DGX A100): nccl-tests' all-reduce busbw
# about 200 GB/s on 8 of them (NVIDIA/nccl-tests#149, an HGX A100 80GB; 208 GB/s in
# NVIDIA/nccl-tests#178). The latency is assumed as NVLink 4's in links.py (about 3 us a
# message, NVIDIA/nccl#1487): none was found for A100s.
DGX_A100_NVLINK = Link("dgx-a100-nvlink3", 200.0, 3e-6)
# Tesla P40s have no NVLink: PCIe 3.0 x16, 15.75 GB/s a direction (PCI-SIG), taken at about
# 80% as links.py takes PCIe 4; its 10 us latency is links.py's assumed PCIe one.
P40_PCIE3 = Link("p40-pcie3", 12.6, 10e-6)


@dataclass(frozen=True)
class PublishedDataParallel:
    """Data parallel at a fixed batch per GPU: the throughput on 1 GPU and on `gpus`."""

    name: str
    source: str
    model: str
    image_size: int
    precision: str
    batch_per_gpu: int
    gpus: int
    single_ips: float
    multi_ips: float
    link: Link

    @property
    def efficiency(self) -> float:
        """The published scaling efficiency: throughput on `gpus` over `gpus` times one's."""
        return self.multi_ips / (self.gpus * self.single_ips)


@dataclass(frozen=True)
class PublishedPipeline:
    """A GPipe run: `batch` images in `chunks` micro-batches over len(balance) GPUs, stage k
    holding balance[k] of the model's sequential layers, at `pipeline_ips`; one GPU's
    `baseline_ips` (at `baseline_batch`) beside it."""

    name: str
    source: str
    model: str
    image_size: int
    batch: int
    chunks: int
    balance: tuple[int, ...]
    pipeline_ips: float
    baseline_ips: float
    baseline_batch: int
    checkpoint: str
    link: Link

    @property
    def speedup(self) -> float:
        """The published speedup over the baseline on one GPU (the README's, unrounded)."""
        return self.pipeline_ips / self.baseline_ips


_DLE = ("NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "
        "Training performance: NVIDIA DGX A100 (8x A100 80GB), pytorch-21.03 container; "
        "batch 256 a GPU for TF32 and AMP (PyTorch/Classification/ConvNets/configs.yml, "
        "resnet50 DGXA100)")
# torchvision's resnet50 is v1.5 (the stride in the 3x3 convolution), as DLE's.
DLE_RESNET50 = (
    PublishedDataParallel("dle-resnet50-tf32-8gpu", _DLE, "resnet50", 224, "tf32", 256, 8,
                          938.0, 7248.0, DGX_A100_NVLINK),
    PublishedDataParallel("dle-resnet50-amp-8gpu", _DLE, "resnet50", 224, "amp", 256, 8,
                          2470.0, 16621.0, DGX_A100_NVLINK),
)

_GPIPE = ("kakaobrain/torchgpipe benchmarks/resnet101-speed/README.md (results, 8 Tesla P40, "
          "PyTorch 1.3) and main.py (batch, chunks, balance; torchgpipe's default checkpoint "
          "'except_last'); 370 layers: its resnet101 flattened (benchmarks/models/resnet)")
# The README's throughputs in samples/s: the baseline's at batch 118 (main.py), each pipeline's.
_BASELINE_IPS, _BASELINE_BATCH = 95.862, 118
TORCHGPIPE_RESNET101 = (
    PublishedPipeline("torchgpipe-resnet101-pipeline-1", _GPIPE, "resnet101", 224, 220, 2,
                      (370,), 81.796, _BASELINE_IPS, _BASELINE_BATCH, "except_last", P40_PCIE3),
    PublishedPipeline("torchgpipe-resnet101-pipeline-2", _GPIPE, "resnet101", 224, 25000, 1667,
                      (135, 235), 135.539, _BASELINE_IPS, _BASELINE_BATCH, "except_last",
                      P40_PCIE3),
    PublishedPipeline("torchgpipe-resnet101-pipeline-4", _GPIPE, "resnet101", 224, 5632, 256,
                      (44, 92, 124, 110), 265.958, _BASELINE_IPS, _BASELINE_BATCH, "except_last",
                      P40_PCIE3),
    PublishedPipeline("torchgpipe-resnet101-pipeline-8", _GPIPE, "resnet101", 224, 5400, 150,
                      (26, 22, 33, 44, 44, 66, 66, 69), 411.662, _BASELINE_IPS, _BASELINE_BATCH,
                      "except_last", P40_PCIE3),
)
