"""A model's per-block profile on the device at hand: forward, input-gradient and weight-
gradient time at one micro-batch size (timed inside whole training steps), the activation each
cut sends, parameter bytes and the activation memory each block holds per micro-batch, and on
a GPU what its allocator and runtime hold beyond those; cached, so a prediction costs
seconds."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from parbench.advisor.models.memory import NO_OVERHEADS, DeviceOverheads
from parbench.advisor.models.schedule_replay import StageTimes
from parbench.advisor.profiling.cache import cached, settings_key
from parbench.advisor.profiling.contention import Sharing
from parbench.families.workloads import Workload
from parbench.machine.allocator import pin_cpu_allocator
from parbench.strategies.device_timer import StepClock
from parbench.strategies.partition import Partition

__all__ = ["BlockProfile", "Profile", "block_times_in_step", "device_overheads",
           "load_or_profile", "profile_blocks", "profile_path", "stored_profile"]

PROFILE_VERSION = 6  # bump when what is measured changes: older caches are measured again
# A GPU's profile measures its DeviceOverheads too since version 7; a CPU's measures what it
# did at 6 (it has none), so CPU caches of 6 stay good.
CUDA_PROFILE_VERSION = 8  # 8: no longer counts the activations an earlier measurement leaked
# (_saved_bytes) as a step's transients
# Whole steps are timed as many times as take about this many seconds by the warm-up step's
# time (at least `repeats`, at most MAX_STEPS): this VM's speed moves by 10 to 30% for seconds
# at a time, so a median of 3 steps moved a profile by up to 20% between two takes minutes
# apart (resnet50, micro-batch 5: 0.56, 0.67 and 0.59 s a step).
STEP_TIMING_S = 10.0
MAX_STEPS = 15


@dataclass(frozen=True)
class BlockProfile:
    """One block (stem, a residual block, head) on one micro-batch. Its forward and backward
    are timed inside whole training steps, so the blocks sum to a step; the backward is split
    into I and W in the proportion the block shows when timed alone."""

    name: str
    forward_s: float
    input_grad_s: float  # the backward to the block's input alone (I)
    weight_grad_s: float  # the full backward less I (W): what a split backward defers
    output_bytes: int  # the activation a cut after this block sends on (and its gradient back)
    parameter_sizes: tuple[int, ...]  # bytes of each parameter (and its gradient), in order
    # What autograd holds for the backward beyond the parameters and the block's input (which
    # the block before holds): the activation memory of one micro-batch.
    saved_bytes: int

    @property
    def parameter_bytes(self) -> int:
        return sum(self.parameter_sizes)


@dataclass(frozen=True)
class Profile:
    """Every block of `model` at micro-batch `micro_batch`, timed on `device` with `threads`
    CPU threads (the median of `repeats` timings after one warm-up); `step_s` is the whole
    training step (forward, loss, backward) the blocks were timed in."""

    model: str
    image_size: int
    precision: str
    num_classes: int
    channels_last: bool
    device: str
    threads: int
    micro_batch: int
    repeats: int
    blocks: tuple[BlockProfile, ...]
    step_s: float = 0.0
    optimizer_s: float = 0.0  # the workload's optimiser stepping every parameter once
    # The timed steps' lower and upper quartiles over their median: the profile's own spread,
    # the band drawn around a prediction made from it.
    step_low_ratio: float = 1.0
    step_high_ratio: float = 1.0
    # On a GPU, what it holds beyond the counted tensors (memory.DeviceOverheads); none on a CPU.
    transient_bytes: int = 0
    reserved_extra_bytes: int = 0
    context_bytes: int = 0
    # Where emulated devices share this CPU: how (the times above are then those of all of them
    # computing at once). Never stored with the profile: it is the run's, not the workload's.
    sharing: Sharing | None = field(default=None, compare=False)

    @property
    def overheads(self) -> DeviceOverheads:
        return DeviceOverheads(self.transient_bytes, self.reserved_extra_bytes,
                               self.context_bytes)

    def stage_times(self, partition: Partition) -> list[StageTimes]:
        """Each stage of `partition`: the sum of its blocks."""
        return [StageTimes(sum(self.blocks[i].forward_s for i in stage),
                           sum(self.blocks[i].input_grad_s for i in stage),
                           sum(self.blocks[i].weight_grad_s for i in stage))
                for stage in partition.stage_ranges()]

    def cut_bytes(self, partition: Partition) -> list[int]:
        """The activation bytes sent across each cut of `partition`, per micro-batch."""
        return [self.blocks[stage[-1]].output_bytes for stage in partition.stage_ranges()[:-1]]

    @property
    def step_compute_s(self) -> float:
        """One micro-batch through the whole model, forward and backward."""
        return sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in self.blocks)

    @property
    def parameter_bytes(self) -> int:
        return sum(block.parameter_bytes for block in self.blocks)

    def optimizer_share_s(self, parameter_bytes: float) -> float:
        """The optimiser's step over `parameter_bytes` of the model's parameters (it reads and
        writes each parameter, gradient and momentum once: time in proportion)."""
        return self.optimizer_s * parameter_bytes / self.parameter_bytes

    def scaled_to(self, step_s: float) -> Profile:
        """This profile at another speed: every block's times (and the optimiser's) scaled
        alike so that one micro-batch's forward and backward take `step_s` (a measured step's
        level, this profile's shape)."""
        factor = step_s / self.step_compute_s
        blocks = tuple(replace(b, forward_s=b.forward_s * factor,
                               input_grad_s=b.input_grad_s * factor,
                               weight_grad_s=b.weight_grad_s * factor) for b in self.blocks)
        return replace(self, blocks=blocks, step_s=step_s,
                       optimizer_s=self.optimizer_s * factor)

    def key(self) -> str:
        return settings_key(self, self.device, self.threads, self.micro_batch)


def _median_time(run, device: torch.device, repeats: int, prepare=None) -> float:
    """The median time of `run()`, or of `run(prepare())` with `prepare` untimed."""
    times = []
    for _ in range(repeats + 1):  # the first is a warm-up (allocator, kernels chosen)
        arguments = (prepare(),) if prepare else ()
        clock = StepClock(device)
        clock.synchronize()
        clock.mark("start")
        run(*arguments)
        clock.mark("end")
        clock.synchronize()
        times.append(clock.seconds("start", "end"))
    return statistics.median(times[1:])


def _saved_bytes(block: torch.nn.Module, inputs: torch.Tensor, workload: Workload,
                 device: torch.device, skip_input: bool) -> int:
    """The bytes of the distinct tensors autograd saves for the block's backward, less its
    parameters (counted apart) and, where the block before holds it, its input."""
    skipped = {p.untyped_storage().data_ptr() for p in block.parameters()}
    if skip_input:
        skipped.add(inputs.untyped_storage().data_ptr())
    storages: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in skipped:
            storages[storage.data_ptr()] = storage.nbytes()
        # A detached alias, as measure.tensors returns: the graph holds it, so no saved storage
        # is freed (and its address reused) during this forward, and it has no grad_fn. The
        # tensor itself would make a saved output (a ReLU's) point back at its own node, a
        # cycle through C++ that Python's collector cannot break: the block leaked.
        return tensor.detach()

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), \
            workload.autocast(device):
        block(inputs)
    return sum(storages.values())


def _median_backward_time(forward, wanted, gradient, device, repeats: int) -> float:
    """The backward alone to `wanted`, after an untimed forward each time."""
    return _median_time(lambda output: torch.autograd.grad(output, wanted, gradient), device,
                        repeats, prepare=forward)


def _isolated_block(name, block, inputs, workload, device, repeats) -> BlockProfile:
    """`block` timed alone on `inputs`: its backward to the input only (I) and in full (I + W),
    its output and parameter sizes and what it saves for the backward."""
    parameters = [p for p in block.parameters() if p.requires_grad]

    def forward():
        with workload.autocast(device):
            return block(inputs)

    output = forward()
    gradient = torch.ones_like(output)
    forward_s = _median_time(forward, device, repeats)
    if inputs.requires_grad:
        input_only = _median_backward_time(forward, [inputs], gradient, device, repeats)
        full = _median_backward_time(forward, [inputs, *parameters], gradient, device, repeats)
    else:  # the stem: training needs no gradient for the images, only its weights'
        input_only = 0.0
        full = _median_backward_time(forward, parameters, gradient, device, repeats)
    return BlockProfile(name, forward_s, input_only, max(full - input_only, 0.0),
                        output.numel() * output.element_size(),
                        tuple(p.numel() * p.element_size() for p in parameters),
                        _saved_bytes(block, inputs, workload, device,
                                     skip_input=inputs.requires_grad))


def block_times_in_step(blocks: list[torch.nn.Module], images, labels, workload, device,
                        repeats: int) -> tuple[list[float], list[float], float, list[float]]:
    """Each block's forward and backward time inside whole training steps (the median of as
    many steps after one warm-up as take about STEP_TIMING_S by its time, at least `repeats`
    and at most MAX_STEPS, scaled to sum to the median step), the whole step's, and every
    timed step's. Timed
    alone, a block runs slower than within the model (a CPU's early, large-activation blocks
    by up to 40%), so the step's own boundaries give the times."""
    net, clock = torch.nn.Sequential(*blocks), StepClock(device)

    def mark(key):
        def hook(*_) -> None:
            clock.mark(key)
        return hook

    handles = [h for i, block in enumerate(blocks) for h in (
        block.register_forward_hook(mark(("forward", i))),
        block.register_full_backward_pre_hook(mark(("backward", i))))]
    try:
        warm_up = _timed_step(net, images, labels, workload, device, clock)[2]
        count = min(max(repeats, math.ceil(STEP_TIMING_S / max(warm_up, 1e-6))), MAX_STEPS)
        timed = [_timed_step(net, images, labels, workload, device, clock)
                 for _ in range(count)]
    finally:
        for handle in handles:
            handle.remove()
    forwards, backwards, steps = zip(*timed, strict=True)
    forward = [statistics.median(column) for column in zip(*forwards, strict=True)]
    backward = [statistics.median(column) for column in zip(*backwards, strict=True)]
    step_s = statistics.median(steps)
    to_step = step_s / (sum(forward) + sum(backward))  # the blocks' medians sum to the step's
    return ([t * to_step for t in forward], [t * to_step for t in backward], step_s,
            list(steps))


def _timed_step(net, images, labels, workload, device, clock: StepClock):
    """One forward, loss and backward of `net`, cut at its blocks' hook marks on `clock`: a
    block's forward ends at its forward hook (the loss is the last block's); its backward
    starts when its output gradient is ready and ends when the block before it starts (the
    stem's with the step). On CUDA the marks are events: one host sync, at the step's end."""
    clock.mark("start")
    with workload.autocast(device):
        loss = workload.loss_fn()(net(images), labels)
    clock.mark("loss")
    loss.backward()
    clock.mark("end")
    clock.synchronize()
    net.zero_grad(set_to_none=True)
    last = len(net) - 1
    forward_ends = [("forward", i) for i in range(last)] + ["loss"]
    forward_starts = ["start", *forward_ends[:-1]]
    backward_starts = [("backward", i) for i in range(last)] + ["loss"]
    backward_ends = ["end", *backward_starts[:-1]]
    forwards = [clock.seconds(begin, stop)
                for begin, stop in zip(forward_starts, forward_ends, strict=True)]
    backwards = [clock.seconds(begin, stop)
                 for begin, stop in zip(backward_starts, backward_ends, strict=True)]
    return forwards, backwards, clock.seconds("start", "end")


def profile_blocks(workload: Workload, micro_batch: int, device: torch.device | str = "cpu",
                   threads: int = 1, repeats: int = 3) -> Profile:
    """Time every block of `workload`'s model on a micro-batch of `micro_batch` images."""
    device = torch.device(device)
    pin_cpu_allocator()  # as the measured runs do
    threads_before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = workload.build_model_on(device)
        images, labels = workload.make_batch(micro_batch, device)
        named = workload.family.blocks(model)
        alone, x = [], images
        for index, (name, block) in enumerate(named):
            inputs = x.detach().requires_grad_(index > 0)
            alone.append(_isolated_block(name, block, inputs, workload, device, repeats))
            with torch.no_grad(), workload.autocast(device):
                x = block(x)
        forwards, backwards, step_s, steps = block_times_in_step(
            [block for _, block in named], images, labels, workload, device, repeats)
        on_device = device_overheads(torch.nn.Sequential(*[block for _, block in named]),
                                     images, labels, workload, device,
                                     sum(b.parameter_bytes for b in alone),
                                     sum(b.saved_bytes for b in alone))
        optimizer_s = _optimizer_time(model, images, labels, workload, device, repeats)
    finally:
        torch.set_num_threads(threads_before)
    blocks = []
    for isolated, forward_s, backward_s in zip(alone, forwards, backwards, strict=True):
        input_share = isolated.input_grad_s / max(
            isolated.input_grad_s + isolated.weight_grad_s, 1e-12)
        blocks.append(replace(isolated, forward_s=forward_s,
                              input_grad_s=backward_s * input_share,
                              weight_grad_s=backward_s * (1 - input_share)))
    low, _, high = statistics.quantiles(steps, n=4, method="inclusive")
    return Profile(workload.model, workload.image_size, workload.precision,
                   workload.num_classes, workload.channels_last, str(device), threads,
                   micro_batch, repeats, tuple(blocks), step_s, optimizer_s,
                   low / step_s, high / step_s, int(on_device.transient_bytes),
                   int(on_device.reserved_extra_bytes), int(on_device.context_bytes))


def device_overheads(net: torch.nn.Module, images, labels, workload: Workload,
                     device: torch.device, parameter_bytes: int,
                     saved_bytes: int) -> DeviceOverheads:
    """On a GPU, one training step of `net` read from its caching allocator and the driver
    (DeviceOverheads' fields): the allocated peak beyond the parameters, their gradients and
    the saved activations; the reserved peak beyond the allocated one, the cache emptied
    first (an upper bound: under a cap the allocator frees its cache before it fails); and
    what the device has in use beyond what the allocator reserves (the context, with the
    libraries' handles: a device this process has alone, as a profile's, and no NCCL
    communicator yet). Every gradient is held through the measured step (zeroed, not freed,
    after a step that made them), so the peak less them is exact wherever in the step it
    falls; a step that makes its gradients as it goes holds less. Nothing on a CPU."""
    if device.type != "cuda":
        return NO_OVERHEADS

    def step() -> None:
        with workload.autocast(device):
            loss = workload.loss_fn()(net(images), labels)
        loss.backward()

    step()  # makes every gradient, and the workspaces the kernels chosen keep
    net.zero_grad(set_to_none=False)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    step()
    torch.cuda.synchronize(device)
    allocated, reserved = (torch.cuda.max_memory_allocated(device),
                           torch.cuda.max_memory_reserved(device))
    net.zero_grad(set_to_none=True)
    free, total = torch.cuda.mem_get_info(device)
    return DeviceOverheads(max(0, allocated - 2 * parameter_bytes - saved_bytes),
                           max(0, reserved - allocated),
                           max(0, total - free - torch.cuda.memory_reserved(device)))


def _optimizer_time(model, images, labels, workload, device, repeats: int) -> float:
    """The median time of the workload's optimiser stepping the model, its gradients set."""
    with workload.autocast(device):
        loss = workload.loss_fn()(model(images), labels)
    loss.backward()
    optimizer = workload.make_optimizer(model.parameters())
    return _median_time(optimizer.step, device, repeats)


def load_or_profile(cache: Path, workload: Workload, micro_batch: int,
                    device: str = "cpu", threads: int = 1) -> Profile:
    """The cached profile for these settings, measured and cached if there is none."""
    if workload.compile:
        raise ValueError("a profile is of the model as written: predict without --compile "
                         "(torch.compile's fused kernels are not profiled)")
    def measure() -> dict:
        profile = profile_blocks(workload, micro_batch, device, threads)
        return {"profile": {k: v for k, v in asdict(profile).items()
                            if k not in ("blocks", "sharing")},
                "blocks": [asdict(b) for b in profile.blocks]}

    path = profile_path(cache, workload, micro_batch, device, threads)
    return _read(cached(path, CUDA_PROFILE_VERSION if device.startswith("cuda")
                        else PROFILE_VERSION, measure))


def profile_path(cache: Path, workload: Workload, micro_batch: int, device: str = "cpu",
                 threads: int = 1) -> Path:
    """Where the profile for these settings is cached."""
    return cache / f"{settings_key(workload, device, threads, micro_batch)}.json"


def stored_profile(path: Path) -> Profile:
    """A cached profile as it was measured, whatever its version (a published one, read
    again; what a version before the GPU's overheads did not measure reads as none)."""
    return _read(json.loads(path.read_text()))


def _read(stored: dict) -> Profile:
    blocks = tuple(BlockProfile(**{**block, "parameter_sizes": tuple(block["parameter_sizes"])})
                   for block in stored["blocks"])
    return Profile(**{**stored["profile"], "blocks": blocks})
