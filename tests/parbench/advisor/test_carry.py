"""Carrying a step from one GPU to another, on made-up profiles: compute-bound operations by the
peaks of the math they run on, memory-bound ones by the bandwidths, none below the launch floor
the profile measured; a step anchored at its measured time carried by its rooflines."""

import pytest

from parbench.advisor.carried.carry import (
    PREDICTED,
    Math,
    carry_document,
    carry_profile,
    launch_floor_s,
    math_peak_tflops,
)
from parbench.advisor.carried.carry_anchored import carry_step, roofline_s
from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.store import COLUMNS
from parbench.machine.gpus import GpuSpec, gpu_named


def _gpu(name: str) -> GpuSpec:
    gpu = gpu_named(name)
    assert gpu is not None, name
    return gpu


A100 = _gpu("NVIDIA A100-SXM4-80GB")
H100 = _gpu("NVIDIA H100 80GB HBM3")
V100 = _gpu("Tesla V100-SXM2-32GB")


def _row(op: str, dtype: str, flops: int, moved: int, device_s: float, count: int = 1,
         host_s: float = 1e-5) -> OpRow:
    return OpRow("layer1.0", "forward", op, ((),), dtype, count, flops, moved // 2, moved // 2,
                 device_s, host_s)


MATMUL = _row("aten::addmm", "bfloat16", 10**12, 10**8, 5e-3)  # 10^4 FLOPs a byte
ELEMENTWISE = _row("aten::relu_", "bfloat16", 0, 2 * 10**9, 1.5e-3)
TINY = _row("aten::add_", "float32", 0, 10**4, 40e-6, count=10)  # 4 us a call: the floor
VIEW = _row("aten::view", "float32", 0, 0, 0.0, count=3)
PROFILE = [MATMUL, ELEMENTWISE, TINY, VIEW]


def test_compute_bound_by_the_peaks_memory_bound_by_the_bandwidths():
    carried = carry_profile(PROFILE, A100, H100, source_run="runs/a100")
    matmul, elementwise, tiny, view = carried.ops
    assert matmul.bound == "compute" and matmul.intensity > (matmul.ridge or float("inf"))
    assert matmul.device_s == pytest.approx(5e-3 * 312.0 / 989.4)
    assert elementwise.bound == "memory" and elementwise.ridge is None
    assert elementwise.device_s == pytest.approx(1.5e-3 * 2039.0 / 3352.0)
    assert view.device_s == 0.0  # ran no kernel: none on the other GPU either
    assert not matmul.floored and not elementwise.floored


def test_no_call_is_faster_than_the_launch_floor_the_profile_measured():
    assert launch_floor_s(PROFILE) == pytest.approx(4e-6)
    tiny = carry_profile(PROFILE, A100, H100, source_run="runs/a100").ops[2]
    assert tiny.floored and tiny.device_s == pytest.approx(10 * 4e-6)
    # Faster by bandwidth alone (2039/3352 of 40 us), held at the floor.
    assert 40e-6 * tiny.scale < tiny.device_s
    with pytest.raises(ValueError, match="no launch floor"):
        launch_floor_s([VIEW])


def test_an_fp32_convolution_runs_at_tf32s_peak_an_fp32_matmul_at_fp32s():
    assert math_peak_tflops(A100, "convolution", "float32") == 156.0
    assert math_peak_tflops(A100, "matmul", "float32") == 19.5
    assert math_peak_tflops(A100, "matmul", "float32", Math(tf32_matmuls=True)) == 156.0
    assert math_peak_tflops(V100, "convolution", "float32") == 15.7  # no TF32 on a V100
    with pytest.raises(ValueError, match="V100 SXM2 32 GB has no bf16 tensor cores"):
        math_peak_tflops(V100, "matmul", "bfloat16")  # nor bf16 tensor cores: not predicted
    conv = _row("aten::convolution", "float32", 10**12, 10**8, 8e-3)
    mm = _row("aten::mm", "float32", 10**12, 10**7, 60e-3)
    carried = carry_profile([conv, mm, TINY], A100, H100, source_run="runs/a100").ops
    assert carried[0].device_s == pytest.approx(8e-3 * 156.0 / 494.7)
    assert carried[1].device_s == pytest.approx(60e-3 * 19.5 / 66.9)


def test_a_step_whose_host_is_slower_than_its_carried_device_is_the_hosts():
    busy_host = [_row("aten::relu_", "bfloat16", 0, 10**8, 100e-6, host_s=500e-6)]
    carried = carry_profile(busy_host, A100, H100, source_run="runs/a100")
    assert carried.dispatch_bound and carried.step_s == carried.host_s == 500e-6
    assert carried.label == PREDICTED
    assert carried.headline.startswith("PREDICTED: H100 SXM5 80 GB from A100 SXM4 80 GB "
                                       "(runs/a100)")


def test_a_profile_file_is_carried_from_the_gpu_it_names():
    document = {"device": "cuda:0", "device_name": "NVIDIA A100-SXM4-80GB",
                "columns": list(COLUMNS),
                "rows": [[getattr(row, column) for column in COLUMNS] for row in PROFILE]}
    carried = carry_document(document, H100, source_run="runs/a100/profile.json")
    assert carried.source is A100 and len(carried.ops) == len(PROFILE)
    assert carried.device_s == pytest.approx(
        carry_profile(PROFILE, A100, H100, source_run="x").device_s)
    with pytest.raises(ValueError, match="cannot be carried"):
        carry_document({**document, "device": "cpu", "device_name": "Intel Xeon"}, H100,
                       source_run="runs/cpu")


def test_an_anchored_step_onto_its_own_gpu_is_the_step_and_scales_by_its_rooflines():
    same = carry_step(0.25, PROFILE, A100, A100, launch_floor_s=4e-6, source_run="runs/a100")
    assert same.step_s == pytest.approx(0.25) and same.label == PREDICTED
    assert "same share of its roofline" in same.assumption
    assert roofline_s(VIEW, A100, 4e-6) == 0.0
    assert roofline_s(TINY, A100, 4e-6) == pytest.approx(10 * 4e-6)  # the floor
    assert roofline_s(MATMUL, A100, 4e-6) == pytest.approx(10**12 / 312e12)
    memory_only = carry_step(0.25, [ELEMENTWISE], A100, H100, launch_floor_s=4e-6,
                             source_run="runs/a100")
    assert memory_only.step_s == pytest.approx(0.25 * 2039.0 / 3352.0)
