"""The Strategy interface: how one global batch becomes one optimiser update on some devices."""

from __future__ import annotations

import contextlib
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from parbench.strategies.dims import ParallelDims
from parbench.strategies.errors import BatchTooSmall, StrategyError, Unavailable, WorkloadRefused
from parbench.strategies.layout import Layout
from parbench.strategies.options import Options as OptionsBase
from parbench.strategies.stages import bubble_fraction, micro_batch_sizes

if TYPE_CHECKING:
    from parbench.families.workloads import Workload
    from parbench.measure.timeline import Timeline

__all__ = ["ACCUMULATED_GRADIENTS_OVERWRITTEN", "STAGES_ACCUMULATE", "WITHOUT_CUDA_GRAPHS",
           "Layout", "Strategy", "StrategyError", "TrainingPlan", "Unavailable",
           "WorkloadRefused", "default_backend"]

# Why gradients accumulated over micro-batches and CUDA graphs do not mix, and what every
# refusal of a CUDA-graph mode offers instead (a strategy's `cuda_graphs_refusal`).
ACCUMULATED_GRADIENTS_OVERWRITTEN = (
    "torch's CUDA graph trees leave a backward's gradients in the graph's own memory, which "
    "the next micro-batch's replay overwrites (pytorch#169545)")
WITHOUT_CUDA_GRAPHS = "give --compile-mode default or max-autotune-no-cudagraphs"
# The refusal of the pipelines whose stages accumulate gradients over micro-batches.
STAGES_ACCUMULATE = ("each stage accumulates its gradients over the micro-batches: "
                     f"{ACCUMULATED_GRADIENTS_OVERWRITTEN}; {WITHOUT_CUDA_GRAPHS}")


@dataclass(frozen=True)
class TrainingPlan:
    """How a registered strategy will train a workload at a global batch on some devices:
    checked and resolved before anything runs (see `Strategy.plan`)."""

    strategy: str  # the registered name
    workload: Workload
    global_batch: int
    devices: tuple[torch.device, ...]  # the devices the strategy uses out of those given
    options: OptionsBase  # with the defaults that depend on the batch and devices resolved
    # The process group connecting the ranks (gloo or nccl); None for one-process strategies.
    backend: str | None = None
    # The micro-batch size over which `single`, accumulating gradients, makes exactly this
    # plan's update (BatchNorm normalises per micro-batch or per replica); None: the plain
    # single-device step is the reference, as for every plan of a family whose normalisation
    # sees one sample at a time (LayerNorm). Decided by the strategy when it plans
    # (`Strategy.reference_micro_batch`).
    reference_micro_batch: int | None = None
    # Its parallel degrees (replicas, shards, tensor-parallel ranks, stages, micro-batch),
    # from its resolved options, checked against the devices it uses.
    dims: ParallelDims = ParallelDims()


class Strategy(ABC):
    """One way to train a workload on a list of logical devices.

    A strategy describes itself (its `Options` dataclass, its device needs, its refusals) and
    `make_plan` answers, before anything runs, whether and how it can train a configuration. Built
    from that plan, it makes its model and optimiser in `setup` and performs exactly one
    optimiser update of the whole global batch per `train_step`. It never times, samples or
    writes anything: the harness does that around it.

    Every strategy class derives from this one alone. Its `Options`, `layout` and `summary`
    are defaults: a registered name may preset another options class (one that extends it)
    with the layout and summary that go with it (parbench.strategies' `Entry`).
    """

    summary: ClassVar[str]
    # The options class is imported as OptionsBase: this attribute shadows its name here.
    Options: ClassVar[type[OptionsBase]] = OptionsBase
    min_devices: ClassVar[int] = 1
    # How many of the given devices the strategy uses; None = all of them.
    max_devices: ClassVar[int | None] = None
    # True: the launcher starts one process per device, each building the strategy with the
    # process group already initialised (rank k drives devices[k]).
    process_per_device: ClassVar[bool] = False
    # True: replicas each train on an equal 1/N of the global batch, N = the devices used
    # (`check_plan`, `smallest_slice`, `reference_micro_batch` and `data_shard` follow from it).
    splits_batch: ClassVar[bool] = False
    # Why the strategy cannot train in fp16, under --compile (torch.compile), or under a
    # --compile-mode that captures CUDA graphs (reduce-overhead, max-autotune), or None.
    fp16_refusal: ClassVar[str | None] = None
    compile_refusal: ClassVar[str | None] = None
    cuda_graphs_refusal: ClassVar[str | None] = None
    # What the strategy does, for callers that pick records by it, never by name: it
    # all-reduces its gradients every step (`allreduce_bytes` of them), as `parbench project`
    # and the communication figure's ideal step model.
    allreduces_gradients: ClassVar[bool] = False
    # How a step is laid out over the devices (the timing model parbench.advisor gives it).
    layout: ClassVar[Layout]

    # Set by the harness for a step it times action by action (parbench.measure.timeline).
    timeline: Timeline | None = None

    def __init__(self, plan: TrainingPlan) -> None:
        self.plan = plan
        self.workload = plan.workload
        self.devices = plan.devices
        self.options = plan.options

    @classmethod
    def make_plan(cls, name: str, workload: Workload, global_batch: int,
                  used: tuple[torch.device, ...], options: OptionsBase,
                  backend: str | None = None) -> TrainingPlan:
        """Whether this strategy can train `workload` at `global_batch` on `used` (the devices
        `select_devices` chose) with `options`, and how: raises StrategyError (a usage error),
        WorkloadRefused or Unavailable (this machine cannot) with one line saying why.
        `backend` is the process group its ranks will use, as the caller decided it (None:
        `default_backend`)."""
        backend = (backend or default_backend(used)) if cls.process_per_device else None
        options.check(workload, global_batch, used)
        cls.check_plan(workload, global_batch, used, options)
        if backend:
            cls.check_backend(backend, used, options)
        cls.check_workload(workload, options)
        reason = cls.unavailable_reason(used)
        if reason:
            raise Unavailable(reason)
        resolved = options.resolved(global_batch, used)
        cls.check_slice(workload, cls.smallest_slice(global_batch, used, resolved))
        plan = TrainingPlan(name, workload, global_batch, used, resolved, backend,
                            dims=resolved.parallel_dims(used).checked(len(used)))
        if workload.family.batch_statistics:
            plan = dataclasses.replace(plan, reference_micro_batch=cls.reference_micro_batch(plan))
        return plan

    @classmethod
    def smallest_slice(cls, global_batch: int, devices: tuple[torch.device, ...],
                       options: OptionsBase) -> int:
        """The fewest images one forward pass computes on: the smallest micro-batch, else the
        whole batch (a replica's share of it, where the batch is split)."""
        split = options.micro_batch_size()
        fewest = min(micro_batch_sizes(global_batch, split)) if split else global_batch
        return fewest // len(devices) if cls.splits_batch else fewest

    @staticmethod
    def check_slice(workload: Workload, images: int) -> None:
        """Refuse a forward pass on fewer images than the model family can train on (its
        `smallest_batch`: BatchNorm cannot normalise one value per channel, which a
        convolutional family computes from one small image): refused here in one line, not an
        error inside every process."""
        fewest = workload.family.smallest_batch(workload.image_size)
        if images < fewest:
            raise BatchTooSmall(
                f"a forward pass on {images} image(s) at {workload.image_size} px: "
                f"{workload.model} trains on at least {fewest} there; give a larger batch (or "
                "micro-batch, where the strategy cuts one), or a larger --image-size")

    @classmethod
    def select_devices(cls, devices: Sequence[torch.device],
                       options: OptionsBase) -> tuple[torch.device, ...]:
        """The devices this strategy uses out of those given (refused if too few): the first
        `options.device_count()` of them where the options ask for a number (stages, ranks);
        at least the class's `min_devices` and the options' `fewest_devices()`."""
        count = options.device_count()
        needed = max(cls.min_devices, options.fewest_devices(), count or 0)
        if len(devices) < needed:
            what = options.device_count_text() if count else "needs"
            example = ",".join([devices[0].type if devices else "cpu"] * needed)
            raise StrategyError(
                f"{what} at least {needed} devices, got {len(devices)} "
                f"({','.join(map(str, devices))}); list more with --devices, e.g. "
                f"--devices {example}"
            )
        count = count or cls.max_devices
        return tuple(devices[:count] if count else devices)

    @classmethod
    def check_workload(cls, workload: Workload, options: OptionsBase | None = None) -> None:
        """Refuse a workload this strategy cannot train with these options (raise
        WorkloadRefused saying why)."""
        if workload.precision == "fp16" and cls.fp16_refusal:
            raise WorkloadRefused(cls.fp16_refusal)
        if workload.compile and cls.compile_refusal:
            raise WorkloadRefused(cls.compile_refusal)
        graphs_refusal = cls.cuda_graphs_refusal_for(options)
        if workload.captures_cuda_graphs and graphs_refusal:
            raise WorkloadRefused(graphs_refusal)

    @classmethod
    def cuda_graphs_refusal_for(cls, options: OptionsBase | None) -> str | None:
        """Why these options cannot run under CUDA graphs: `cuda_graphs_refusal`, unless the
        layout they ask for adds to it."""
        return cls.cuda_graphs_refusal

    @classmethod
    def check_plan(cls, workload: Workload, global_batch: int,
                   devices: tuple[torch.device, ...], options: OptionsBase) -> None:
        """Refuse what this strategy itself cannot do with this batch on the devices it uses
        (raise StrategyError saying how to fix it); the options check their own values. By
        default, a batch that does not split into equal shares where it is split: equal work
        per replica, and the average of the replicas' gradients is the global batch's."""
        replicas = len(devices)
        if cls.splits_batch and global_batch % replicas:
            lower = global_batch - global_batch % replicas
            raise StrategyError(
                f"batch {global_batch} does not divide over {replicas} replicas; "
                f"use a multiple of {replicas}, e.g. --batch-size {lower or replicas} or "
                f"{lower + replicas}")

    @classmethod
    def check_backend(cls, backend: str, devices: tuple[torch.device, ...],
                      options: OptionsBase) -> None:
        """Refuse what these options cannot do over `backend` (process-per-device strategies;
        raise StrategyError, or Unavailable where the machine is what lacks it)."""

    @classmethod
    def reference_micro_batch(cls, plan: TrainingPlan) -> int | None:
        """See `TrainingPlan.reference_micro_batch`: by default, the micro-batches it trains on; a
        replica's share where the batch is split (each replica's BatchNorm normalises over
        its own share: single accumulating over the same shares makes the same update)."""
        if cls.splits_batch:
            return plan.global_batch // len(plan.devices)
        return plan.options.micro_batch_size()

    @classmethod
    def verify_relative_tolerance(cls, plan: TrainingPlan) -> float | None:
        """For a plan that compresses what it communicates (lossy by design), the largest
        parameter difference `parbench verify` accepts after one step, relative to the
        baseline's largest update; None: the plan is exact (within verify's tolerance)."""
        return None

    @classmethod
    def verify_rounds_elsewhere(cls, plan: TrainingPlan) -> bool:
        """True for a plan that, in the workload's lower precision, rounds elsewhere than the
        baseline does (it then differs from it by rounding): `parbench verify` accepts a
        difference up to twice the one that precision makes to the baseline's own step,
        measured against the baseline in fp32."""
        return False

    @classmethod
    def unavailable_reason(cls, devices: Sequence[torch.device]) -> str | None:
        """Why this machine cannot run the strategy on these devices (it is then recorded as
        skipped), or None if it can. Too few devices is a usage error, see `select_devices`."""
        return None

    def action(self, stage: int, micro_batch: int, phase: str, model_stage: int | None = None):
        """Wraps one micro-batch's forward ("F") or backward ("B"; "I" and "W" where it is split
        into input- and weight-gradient halves) on a stage (a rank that holds several model
        stages gives the one it runs as `model_stage`), for the harness to time on the stage's
        device, `devices[stage]` (stage k's, or rank k's); a no-op unless it set `timeline`."""
        if self.timeline is None:
            return contextlib.nullcontext()
        return self.timeline.span(stage, micro_batch, phase, model_stage, self.devices[stage])

    def bubble_fraction(self) -> float | None:
        """The theoretical idle share of a step: GPipe's (K-1)/(M+K-1) for K stages and M
        micro-batches (0 for one stage); None where no closed form applies."""
        return bubble_fraction(self.pipeline_stages, self.micro_batches)

    @property
    def partition(self) -> str | None:
        """Where the model was cut (`conv1..layer2 | layer3..fc`), for strategies that cut it,
        once `setup` has run."""
        return None

    @property
    def rank(self) -> int:
        """This process's rank (0 where the strategy runs in one process)."""
        return dist.get_rank() if self.process_per_device else 0

    def check_processes(self, what: str) -> None:
        """Refuse a process group that is not one process per device (`what`: `replicas`,
        `ranks`, as the devices are called in the message)."""
        if dist.get_world_size() != len(self.devices):
            raise StrategyError(f"{len(self.devices)} {what} need {len(self.devices)} "
                                f"processes, got {dist.get_world_size()}")

    @property
    def input_device(self) -> torch.device:
        """Where the harness creates each global batch: this rank's device."""
        return self.devices[self.rank]

    @property
    def data_shard(self) -> tuple[int, int]:
        """(index, count): this process trains on part `index` of the global batch cut into
        `count` near-equal parts (data-parallel ranks); (0, 1) is the whole batch."""
        if self.splits_batch and self.process_per_device:
            return self.rank, len(self.devices)
        return 0, 1

    def trained_parameters(self) -> list[torch.Tensor]:
        """The parameters this process contributes to the model's parameter list, in order
        (a replica's rank 0 gives them all; a pipeline stage gives its own)."""
        return list(self.model.parameters())

    @property
    def micro_batches(self) -> int:
        """How many micro-batches each global batch is split into (its options'
        `micro_batch_size`; 1: the whole batch, or a replica's share, at once)."""
        split = self.options.micro_batch_size()
        return len(micro_batch_sizes(self.plan.global_batch, split)) if split else 1

    @property
    def pipeline_stages(self) -> int:
        """How many sequential stages the model is cut into (1 = not cut)."""
        return 1

    def placed_modules(self) -> Sequence[nn.Module | Sequence[nn.Module]] | None:
        """The module this process runs on each logical device it drives (or the modules, where
        a rank holds several stages), in device order, as the strategy calls them (the harness
        counts the tensors each device holds, see parbench.measure.tensors); None where the
        devices' shares cannot be told apart.
        """
        return None

    def buffer_bytes(self) -> list[int] | None:
        """Per logical device this process drives: bytes the strategy's library holds besides
        parameters, gradients and optimiser state for the whole step (DDP's gradient
        buckets), as the library reports them; None where it holds none."""
        return None

    def without_communication(self) -> contextlib.AbstractContextManager | None:
        """A context in which `train_step` does the same computation with no communication
        between ranks (the harness times it to split a step into compute and exposed
        communication); None where the strategy has no such mode. The model may then diverge
        across ranks: the harness runs these steps last."""
        return None

    def after_step(self, measured: bool) -> None:
        """Called by the harness after each warm-up (`measured` False) and measured step, once
        the step is synchronised and its clock stopped: where a strategy reads its library's
        statistics of that step (never inside a timed step). Not called after the harness's
        own extra steps (the traced step, the tensor count, the compute-only steps)."""

    def communication(self) -> dict[str, float | int | None]:
        """Record fields about this rank's communication per step, once steps have run:
        `allreduce_bytes` (and `allgather_bytes` where parameters are gathered), and the
        library's own timings where it keeps them; empty where the strategy has none."""
        return {}

    def prepare_training(self, parameters, loss_device: torch.device) -> None:
        """The workload's loss, its optimiser over `parameters`, and its gradient scaler for
        the device the loss is computed on: the same training for every strategy."""
        self.loss_fn = self.workload.loss_fn()
        self.optimizer = self.workload.make_optimizer(parameters)
        self.scaler = self.workload.make_grad_scaler(loss_device)

    def close(self) -> None:
        """Release what `setup` started (threads, process groups)."""

    @abstractmethod
    def setup(self) -> None:
        """Build the model, place it on the devices and create the optimiser."""

    @abstractmethod
    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """One optimiser update over the global batch; returns the detached loss."""

    @property
    @abstractmethod
    def model(self) -> nn.Module:
        """The trained model (its parameters are what `parbench verify` compares)."""


def default_backend(devices: Sequence[torch.device], shared: bool | None = None) -> str:
    """NCCL when every rank has a GPU of its own, else gloo (NCCL refuses two ranks on one GPU).
    `shared`: whether ranks share a GPU, from a caller that knows the hosts (two nodes'
    cuda:0 are two GPUs); None: judged from the logical devices alone."""
    if shared is None:
        shared = len(set(devices)) != len(devices)
    return "nccl" if devices[0].type == "cuda" and not shared else "gloo"
