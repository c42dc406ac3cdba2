"""Measurement, installed around a strategy by the worker: synchronised step timing, memory
per device, GPU sampling (utilisation, memory, energy) and FLOPs. Strategies never measure."""

from parbench.measure.flops import peak_tflops, training_flops_per_image
from parbench.measure.memory import (
    MIB,
    PeakMemory,
    allocated_mib,
    imbalance,
    memory_cap,
    memory_growth,
)
from parbench.measure.timing import Pace, StepTiming, host_bound, time_steps

__all__ = [
    "MIB", "Pace", "PeakMemory", "StepTiming", "allocated_mib", "host_bound", "imbalance",
    "memory_cap", "memory_growth", "peak_tflops", "time_steps", "training_flops_per_image",
]
