"""NVIDIA GPUs by their data sheets: dense peak FLOP/s per dtype, memory bandwidth and size, SMs,
and the names torch.cuda.get_device_name reports, each entry with the documents it was read in."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GPUS", "GpuSpec", "Source", "gpu_called", "gpu_named"]


@dataclass(frozen=True)
class Source:
    """A document a figure was read in: its title and where it is published."""

    title: str
    url: str


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's data-sheet figures, every peak dense (without 2:4 sparsity) at boost clock.

    The tensor-core peaks are NVIDIA's "with FP32 accumulate" figures, as PyTorch accumulates
    matmuls and convolutions in fp32; None where the GPU has no tensor cores for the dtype."""

    label: str
    # What torch.cuda.get_device_name reports for it, matched exactly.
    names: tuple[str, ...]
    fp32_tflops: float  # CUDA cores (no tensor cores)
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    memory_bandwidth_gbs: float  # GB/s, 10^9 bytes a second
    memory_gb: float  # as the data sheet prints it (a device reports a little less in GiB)
    sm_count: int
    sources: tuple[Source, ...]
    # Where each figure was read, which the sources print sparse (halved here), and any
    # figure that could not be confirmed in them.
    note: str

    @property
    def memory_bandwidth_bytes_s(self) -> float:
        return self.memory_bandwidth_gbs * 1e9

    def training_peak_tflops(self, precision: str) -> float:
        """The peak a training step at `precision` (fp32, bf16, fp16) is held to: fp32 at TF32's,
        since PyTorch runs fp32 convolutions on TF32 tensor cores by default
        (torch.backends.cudnn.allow_tf32); a dtype the GPU has no tensor cores for (TF32 and
        bf16 on a V100) at its CUDA cores' fp32 peak."""
        if precision == "fp32":
            return self.tf32_tflops or self.fp32_tflops
        peak = {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops}[precision]
        return peak if peak is not None else self.fp32_tflops


def gpu_called(name: str) -> GpuSpec | None:
    """The entry a user names: by its label ('H100 SXM5 80 GB') or as torch names it."""
    return gpu_named(name) or next((gpu for gpu in GPUS if gpu.label == name), None)


def gpu_named(device_name: str | None) -> GpuSpec | None:
    """The entry whose names include `device_name` (torch.cuda.get_device_name's), or None."""
    for gpu in GPUS:
        if device_name in gpu.names:
            return gpu
    return None


_AMPERE_BLOG = Source("NVIDIA Ampere Architecture In-Depth (NVIDIA Technical Blog), Table 3: "
                      "Comparison of NVIDIA data center GPUs",
                      "https://developer.nvidia.com/blog/nvidia-ampere-architecture-in-depth/")
_A100_40GB_SHEET = Source("NVIDIA A100 Tensor Core GPU data sheet (40GB)",
                          "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
                          "pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_A100_80GB_SHEET = Source("NVIDIA A100 Tensor Core GPU data sheet (80GB)",
                          "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/"
                          "pdf/nvidia-a100-datasheet-nvidia-us-2188504-web.pdf")
_HOPPER_WHITEPAPER = Source("NVIDIA H100 Tensor Core GPU Architecture whitepaper (V1.04), "
                            "Table 1 and Table 3",
                            "https://nvdam.widen.net/s/95bdhpsgrs/"
                            "nvidia_h100_tensor_core_gpu_architecture_whitepaper_v1.03")
_H100_SHEET = Source("NVIDIA H100 Tensor Core GPU data sheet and product page",
                     "https://www.nvidia.com/en-us/data-center/h100/")
_H200_SHEET = Source("NVIDIA H200 Tensor Core GPU data sheet and product page",
                     "https://www.nvidia.com/en-us/data-center/h200/")
_L4_SHEET = Source("NVIDIA L4 Tensor Core GPU data sheet",
                   "https://www.nvidia.com/en-us/data-center/l4/")
_A10_SHEET = Source("NVIDIA A10 Tensor Core GPU: Technical Specifications",
                    "https://www.nvidia.com/en-us/data-center/products/a10-gpu/")
_ADA_WHITEPAPER = Source("NVIDIA Ada GPU Architecture whitepaper, Appendix A: GeForce RTX 4090 "
                         "full specifications",
                         "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/"
                         "nvidia-ada-gpu-architecture.pdf")

_P40_SHEET = Source("NVIDIA Tesla P40 data sheet (Inferencing accelerator)",
                    "https://images.nvidia.com/content/pdf/tesla/184427-Tesla-P40-Datasheet-"
                    "NV-Final-Letter-Web.pdf")
_V100_NOTE = ("Volta has no TF32 or bf16 tensor cores and no sparsity: the Ampere blog's V100 "
              "(SXM2) column, 125 TFLOP/s fp16 tensor with fp32 accumulate, 15.7 fp32, 900 GB/s, "
              "80 SMs, '32 GB / 16 GB'.")
_A100_NOTE = ("Dense figures as the Ampere blog prints them ('312/624': dense/sparse); 108 SMs "
              "from its A100 column. ")
_GH100_SXM_NOTE = ("Dense figures from the Hopper whitepaper's H100 SXM5 column (494.7/989.4 TF32, "
                   "989.4/1978.9 bf16 and fp16 with fp32 accumulate; fp32 66.9; 132 SMs). ")
_NVL_NOTE = ("The data sheet prints sparse figures only (835 TF32, 1,671 bf16 and fp16): halved "
             "here. Its 60 TFLOP/s fp32 and the SM count (132, as the H100 SXM5's GH100) were "
             "not confirmed in an NVIDIA document.")

GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("Tesla P40 24 GB", ("Tesla P40",), 11.76, None, None, None, 346.0, 24, 30,
            (_P40_SHEET,),
            "Pascal (GP102) has no tensor cores: fp32 on its 3,840 CUDA cores at the 1,531 MHz "
            "boost clock, 11.76 TFLOP/s (the data sheet rounds it to 12 'with GPU Boost'); its "
            "fp16 runs at 1/64 of that, so none is listed; 24 GB GDDR5 at 346 GB/s from the "
            "data sheet. The data sheet itself was not read here: the figures were confirmed "
            "in copies of its table (and 30 SMs, GP102's full count, in GPU databases)."),
    GpuSpec("V100 SXM2 16 GB", ("Tesla V100-SXM2-16GB",), 15.7, None, None, 125.0, 900.0, 16,
            80, (_AMPERE_BLOG,), _V100_NOTE),
    GpuSpec("V100 SXM2 32 GB", ("Tesla V100-SXM2-32GB",), 15.7, None, None, 125.0, 900.0, 32,
            80, (_AMPERE_BLOG,), _V100_NOTE),
    GpuSpec("A100 SXM4 40 GB", ("NVIDIA A100-SXM4-40GB",), 19.5, 156.0, 312.0, 312.0, 1555.0,
            40, 108, (_AMPERE_BLOG, _A100_40GB_SHEET),
            _A100_NOTE + "1,555 GB/s and 40 GB from the blog's A100 (SXM4) column."),
    GpuSpec("A100 SXM4 80 GB", ("NVIDIA A100-SXM4-80GB",), 19.5, 156.0, 312.0, 312.0, 2039.0,
            80, 108, (_AMPERE_BLOG, _A100_80GB_SHEET),
            _A100_NOTE + "2,039 GB/s from the 80GB data sheet's SXM column (read in a copy of "
            "its table), which prints '156 | 312*' and '312 | 624*' (dense | sparse)."),
    GpuSpec("A100 PCIe 40 GB", ("NVIDIA A100-PCIE-40GB",), 19.5, 156.0, 312.0, 312.0, 1555.0,
            40, 108, (_AMPERE_BLOG, _A100_40GB_SHEET),
            _A100_NOTE + "1,555 GB/s read in a copy of the 40GB data sheet's table, not in the "
            "data sheet itself: unconfirmed."),
    GpuSpec("A100 PCIe 80 GB", ("NVIDIA A100 80GB PCIe",), 19.5, 156.0, 312.0, 312.0, 1935.0,
            80, 108, (_AMPERE_BLOG, _A100_80GB_SHEET),
            _A100_NOTE + "1,935 GB/s from the 80GB data sheet's PCIe column (read in a copy "
            "of its table)."),
    GpuSpec("H100 SXM5 80 GB", ("NVIDIA H100 80GB HBM3",), 66.9, 494.7, 989.4, 989.4, 3352.0,
            80, 132, (_HOPPER_WHITEPAPER, _H100_SHEET),
            _GH100_SXM_NOTE + "3,352 GB/s from the whitepaper's Table 3; the data sheet prints "
            "3.35 TB/s and sparse figures only (989 TF32, 1,979 bf16)."),
    GpuSpec("H100 PCIe 80 GB", ("NVIDIA H100 PCIe",), 51.2, 378.0, 756.0, 756.0, 2039.0, 80,
            114, (_HOPPER_WHITEPAPER, _H100_SHEET),
            "Dense figures from the Hopper whitepaper's H100 PCIe column (378/756 TF32, "
            "756/1513 bf16 and fp16), HBM2e at 2,039 GB/s, 114 SMs; the data sheet prints 2 "
            "TB/s and 51 TFLOP/s fp32; the whitepaper's 51.2 was read in copies of its table."),
    GpuSpec("H100 NVL 94 GB", ("NVIDIA H100 NVL",), 60.0, 417.5, 835.5, 835.5, 3900.0, 94,
            132, (_H100_SHEET,), "94 GB HBM3 at 3.9 TB/s. " + _NVL_NOTE),
    GpuSpec("H200 SXM 141 GB", ("NVIDIA H200",), 66.9, 494.7, 989.4, 989.4, 4800.0, 141, 132,
            (_H200_SHEET, _HOPPER_WHITEPAPER),
            "141 GB HBM3e at 4.8 TB/s from the H200 data sheet, which prints sparse figures "
            "only (989 TF32, 1,979 bf16 and fp16, 67 fp32): the same GH100 at the same clocks "
            "as the H100 SXM5, whose whitepaper figures are kept here. " + _GH100_SXM_NOTE
            + "The H200's SM count is not on its data sheet: unconfirmed."),
    GpuSpec("H200 NVL 141 GB", ("NVIDIA H200 NVL",), 60.0, 417.5, 835.5, 835.5, 4800.0, 141,
            132, (_H200_SHEET,), "141 GB HBM3e at 4.8 TB/s. " + _NVL_NOTE),
    GpuSpec("L4 24 GB", ("NVIDIA L4",), 30.3, 60.0, 121.0, 121.0, 300.0, 24, 58, (_L4_SHEET,),
            "The data sheet prints sparse tensor figures (120 TF32, 242 bf16 and fp16): halved "
            "here; 30.3 fp32, 24 GB GDDR6 at 300 GB/s (read in copies of the data sheet). It "
            "gives no SM count: 58 is 7,424 CUDA cores at 128 per Ada SM, unconfirmed."),
    GpuSpec("A10 24 GB", ("NVIDIA A10",), 31.2, 62.5, 125.0, 125.0, 600.0, 24, 72, (_A10_SHEET,),
            "Dense figures from the specification table (62.5 TF32, 125 bf16 and fp16; "
            "sparse twice that), 31.2 fp32, 24 GB GDDR6 at 600 GB/s, read in a copy of it. No "
            "SM count there: 72 is its 72 RT cores at one per GA102 SM, unconfirmed."),
    GpuSpec("GeForce RTX 4090 24 GB", ("NVIDIA GeForce RTX 4090",), 82.6, 82.6, 165.2, 165.2,
            1008.0, 24, 128, (_ADA_WHITEPAPER,),
            "Dense figures from the whitepaper's Appendix A (read in copies of its table): fp16 "
            "and bf16 tensor with fp32 accumulate 165.2/330.4 (dense/sparse); fp16 with fp16 "
            "accumulate is 330.3 dense, which PyTorch does not use; TF32 82.6; fp32 82.6; "
            "128 SMs; 1,008 GB/s GDDR6X."),
)
