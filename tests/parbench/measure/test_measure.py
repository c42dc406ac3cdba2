import math
import os
import subprocess
import sys

import pytest

from parbench.families.workloads import Workload
from parbench.measure import (
    StepTiming,
    imbalance,
    peak_tflops,
    time_steps,
    training_flops_per_image,
)
from parbench.measure import timing as timing_module


def test_percentiles_and_throughput_arithmetic():
    timing = StepTiming(step_times_s=(1.0, 2.0, 3.0, 4.0, 5.0), total_s=16.0)
    assert timing.median_s == 3.0
    assert timing.p90_s == pytest.approx(4.6)
    # 5 steps of 32 samples over 16 s of wall time, not 32 / median.
    assert timing.throughput(32) == pytest.approx(10.0)


def test_imbalance_is_max_over_mean():
    assert imbalance([100.0, 100.0]) == 1.0
    assert imbalance([300.0, 100.0]) == pytest.approx(1.5)
    assert math.isnan(imbalance([]))


def test_warmup_steps_are_run_but_not_timed(monkeypatch):
    calls = []
    now = [0.0]  # a clock that moves only inside a step: warm-up steps 0.5 s, measured 0.01 s
    monkeypatch.setattr(timing_module.time, "perf_counter", lambda: now[0])

    def step(i):
        calls.append(i)
        now[0] += 0.5 if i < 2 else 0.01

    timing = time_steps(step, lambda: None, warmup=2, steps=3)
    assert calls == [0, 1, 2, 3, 4]
    # Each a measured step's time, none a warm-up's; the total theirs alone.
    assert timing.step_times_s == pytest.approx((0.01, 0.01, 0.01))
    assert timing.warmup_step_times_s == pytest.approx((0.5, 0.5))
    assert timing.total_s == pytest.approx(0.03)


def test_cpu_peak_memory_sees_an_allocation_made_after_reset():
    # In a fresh interpreter: here, freed but still resident heap pages could be reused without
    # the resident set growing.
    script = """
import torch
from parbench.machine.devices import parse_devices
from parbench.measure import PeakMemory
memory = PeakMemory(parse_devices("cpu"))
big = torch.ones(256 * 2**20 // 4); del big  # a high-water mark before the window
memory.reset()
baseline = memory.read_mib()[0]
block = torch.ones(64 * 2**20 // 4)
print(baseline, memory.read_mib()[0], memory.source)
"""
    # glibc's default thresholds: a process that pinned them (as a measurement here does) keeps
    # the freed 256 MiB resident and serves the next block from it, without growing.
    default_malloc = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True, env=default_malloc)
    baseline, grown, source = done.stdout.split(maxsplit=2)
    # The window forgot the earlier 256 MiB peak and saw the new 64 MiB block.
    assert 60 <= float(grown) - float(baseline) < 200
    assert "RSS" in source


def test_flops_match_the_known_resnet50_count():
    # torchvision documents 4.09 GMACs forward at 224 px; training ~ 3x forward, 2 FLOPs per MAC.
    flops = training_flops_per_image(Workload(model="resnet50").build_model, 224)
    assert flops / 1e9 == pytest.approx(3 * 2 * 4.09, rel=0.02)


def test_peak_tflops_by_device_name_and_precision():
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") == 989.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp16") == 989.0
    assert peak_tflops("NVIDIA H100 80GB HBM3", "fp32") == 495.0  # TF32, cuDNN's default
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0  # not the SXM part's figure
    assert peak_tflops("NVIDIA H200", "bf16") == 989.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp32") == 156.0
    assert peak_tflops("NVIDIA GeForce RTX 4090", "bf16") == 165.0  # fp32 accumulate
    assert peak_tflops("Tesla V100-SXM2-32GB", "fp32") == 15.7  # no TF32: its CUDA cores
    assert peak_tflops("Tesla T4", "bf16") is None  # not in the table: empty
    assert peak_tflops(None, "fp32") is None
