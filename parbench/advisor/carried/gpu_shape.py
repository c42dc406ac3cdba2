"""A training step on a GPU that is not here, shaped from a whole step a GPU measured (its
GpuReference): the reference's operations' rooflines on its own GPU over its measured step are
the share of its roofline the software reaches; each block's forward and backward on the target
are their operations' rooflines there at that share, no shorter than the host's dispatch of
their calls where the reference measured it. PREDICTED, as a Profile the timing models read."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from parbench.advisor.carried.carry_anchored import ASSUMPTION, roofline_s
from parbench.advisor.carried.gpu_references import REFERENCES, GpuReference, choose_reference
from parbench.advisor.profiling.op_profile.groups import OpRow
from parbench.advisor.profiling.op_profile.labels import LOSS, OPTIMIZER
from parbench.advisor.profiling.op_profile.without_compute import count_step, counted_rows
from parbench.advisor.profiling.profile import BlockProfile, Profile, load_or_profile
from parbench.families.workloads import Workload
from parbench.machine.gpus import GpuSpec, gpu_named

__all__ = ["Shaped", "carried_profiles", "counted", "reference_for_target", "reference_workload",
           "shaped_profile"]


@dataclass(frozen=True)
class Shaped:
    """A profile shaped on `target` from `reference`, and what it rests on."""

    profile: Profile
    reference: GpuReference
    target: GpuSpec
    share: float  # the reference's rooflines over its measured step: its share of the roofline
    host_floor_s: float | None  # the host's dispatch of the step's calls, where measured
    dispatch_bound: bool  # the step is the host's dispatch, not the device's rooflines

    @property
    def step_s(self) -> float:
        """One micro-batch's forward and backward and the optimiser's step."""
        return self.profile.step_compute_s + self.profile.optimizer_s

    def describe(self) -> str:
        bound = "dispatch-bound (the host's)" if self.dispatch_bound else "device-bound"
        return (f"PREDICTED for {self.target.label}: carried from {self.reference.gpu}'s measured "
                f"step ({self.reference.model} {self.reference.image_size}px "
                f"{self.reference.precision}, batch {self.reference.batch}: "
                f"{self.reference.step_s * 1e3:.1f} ms, results/{self.reference.run}), which "
                f"reaches {self.share:.1%} of its operations' rooflines; {bound}; assumes "
                f"{ASSUMPTION}")


def reference_workload(reference: GpuReference) -> Workload:
    return Workload(model=reference.model, image_size=reference.image_size,
                    precision=reference.precision, channels_last=reference.channels_last)


@functools.cache
def counted(workload: Workload, micro_batch: int) -> tuple[OpRow, ...]:
    """The operations of one step of `workload` at `micro_batch`, counted without computing."""
    return tuple(counted_rows(count_step(workload, micro_batch)))


def _calls(rows: tuple[OpRow, ...]) -> int:
    return sum(row.count for row in rows if row.flops or row.bytes_moved)


def shaped_profile(workload: Workload, micro_batch: int, target: GpuSpec,
                   reference: GpuReference, memory: Profile | None = None) -> Shaped:
    """`workload` at `micro_batch` on `target`, each block's forward and backward its operations'
    rooflines on `target` (no launch floor: none is measured) divided by the share of its
    rooflines `reference` reaches on its own GPU; the loss in the last block, the optimiser's
    step apart. A block's backward is split evenly into input and weight gradients (the first
    block's is all weight gradients), which only the zero-bubble schedules tell apart. Where
    the reference measured its host's enqueue time, the step is no shorter than that host's
    time per call times this step's calls (then dispatch-bound, every time scaled alike).
    Activation and output bytes come from `memory` (a CPU profile of the same workload at any
    micro-batch), in proportion to the images; none without it."""
    source = gpu_named(reference.gpu)
    if source is None:
        raise ValueError(f"{reference.gpu} is in no entry of the GPU table (parbench.machine.gpus)")
    reference_rows = counted(reference_workload(reference), reference.batch)
    share = sum(roofline_s(row, source, 0.0) for row in reference_rows) / reference.step_s
    rows = counted(workload, micro_batch)
    named = workload.family.blocks(workload.build_model())
    names = [name for name, _ in named]
    sizes = [tuple(p.numel() * p.element_size() for p in block.parameters())
             for _, block in named]
    times: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        block = names[-1] if row.block == LOSS else row.block
        times[(block, row.phase)] += roofline_s(row, target, 0.0) / share
    total = sum(times.values())
    floor = None
    if reference.host_s is not None:
        floor = reference.host_s / _calls(reference_rows) * _calls(rows)
    scale = floor / total if floor is not None and floor > total else 1.0
    blocks = []
    for index, name in enumerate(names):
        backward = times[(name, "backward")] * scale
        input_grad = 0.0 if index == 0 else backward / 2
        blocks.append(_block(name, times[(name, "forward")] * scale, input_grad,
                             backward - input_grad, sizes[index], memory, micro_batch, index))
    profile = Profile(workload.model, workload.image_size, workload.precision,
                      workload.num_classes, workload.channels_last, "cuda", 1, micro_batch, 1,
                      tuple(blocks), optimizer_s=times[(OPTIMIZER, OPTIMIZER)] * scale)
    profile = replace(profile, step_s=profile.step_compute_s)
    return Shaped(profile, reference, target, share, floor, scale > 1.0)


def _block(name: str, forward: float, input_grad: float, weight_grad: float,
           parameter_sizes: tuple[int, ...], memory: Profile | None, micro_batch: int,
           index: int) -> BlockProfile:
    if memory is None:
        return BlockProfile(name, forward, input_grad, weight_grad, 0, parameter_sizes, 0)
    measured = memory.blocks[index]
    ratio = micro_batch / memory.micro_batch
    return BlockProfile(name, forward, input_grad, weight_grad,
                        round(measured.output_bytes * ratio), parameter_sizes,
                        round(measured.saved_bytes * ratio))


def reference_for_target(model: str, image_size: int, precision: str, channels_last: bool,
                         target: GpuSpec) -> GpuReference:
    """The reference to shape `target`'s profiles from: a step measured on `target` itself where
    there is one in the job's precision (bf16 for fp16), else one on another GPU; the same
    model, image size and memory format preferred, as the tables choose it."""
    on = next((name for name in target.names if any(r.gpu == name for r in REFERENCES)), None)
    try:
        return choose_reference(model, image_size, precision, channels_last, target, on)
    except ValueError:
        return choose_reference(model, image_size, precision, channels_last, target)


def carried_profiles(workload: Workload, target: GpuSpec, cache: Path,
                     say: Callable[[str], None] = print) -> Callable[[int], Profile]:
    """The profile of `workload` on `target` at each micro-batch asked for, shaped from the
    GPU reference steps (no GPU here: nothing is timed), with the activation memory of a CPU
    profile at the smallest micro-batch the family trains (measured once, cached in `cache`)
    in proportion to the images; `say` is told of each as it is made."""
    reference = reference_for_target(workload.model, workload.image_size, workload.precision,
                                     workload.channels_last, target)
    memory: list[Profile] = []

    @functools.cache
    def profile_at(micro_batch: int) -> Profile:
        if not memory:
            smallest = workload.family.smallest_batch(workload.image_size)
            say(f"memory: a CPU profile of {workload.model} {workload.image_size}px at "
                f"micro-batch {smallest} for its activations (cached in {cache})")
            memory.append(load_or_profile(cache, workload, smallest, "cpu", 1))
        shaped = shaped_profile(workload, micro_batch, target, reference, memory[0])
        say(f"carried: micro-batch {micro_batch} on {target.label}, step "
            f"{shaped.step_s * 1e3:.3g} ms ({'dispatch' if shaped.dispatch_bound else 'device'}"
            f"-bound), from {reference.gpu}'s measured step")
        return shaped.profile

    return profile_at
