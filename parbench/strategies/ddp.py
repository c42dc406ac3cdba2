"""DistributedDataParallel: a full replica per rank, gradients all-reduced in buckets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from parbench.strategies.base import WITHOUT_CUDA_GRAPHS, Layout, Strategy
from parbench.strategies.errors import StrategyError
from parbench.strategies.options import option
from parbench.strategies.rank_parallel import (
    TORCH_SETTINGS,
    ReplicaOptions,
    replica_rounds_elsewhere,
    replica_setup,
    replica_step,
    tuning_option,
)

__all__ = ["DDP", "DDPOptions"]


# --comm-hook -> the relative error its compression allows on one step's update (verify's
# tolerance; None: exact on the steps verify takes, PowerSGD compressing from the third).
HOOKS = {"fp16": 2**-10, "bf16": 2**-7, "powersgd": None}
# DDP's logging data (`_get_ddp_logging_data`): the times of the one iteration it sampled last,
# in nanoseconds -> the record's fields, in seconds.
SAMPLED_TIMES = {"forward_compute_time": "ddp_forward_time_s",
                 "backward_compute_time": "ddp_backward_compute_time_s",
                 "backward_comm_time": "ddp_backward_comm_time_s",
                 "backward_compute_comm_overlap_time": "ddp_overlap_time_s"}


@dataclass(frozen=True)
class DDPOptions(ReplicaOptions):
    """DistributedDataParallel's own settings, and a communication hook."""

    tuning: str = tuning_option()

    bucket_cap_mb: float | None = option(above=0, sweep=False, help="gradient bucket size in "
                                         "MB (DDP's default 25)")
    gradient_as_bucket_view: bool = option(True, help=(
        "gradients are views into the all-reduce buckets: no copy of each gradient into its "
        "bucket and back, and no second copy of the gradients in memory (torch's default is "
        "off)"))
    static_graph: bool = option(True, help=(
        "declare the graph static, as it is for every model here (the same parameters get a "
        "gradient every step): torch's DDP docs advise it for such a graph; DDP then never "
        "looks for unused parameters. It works with the other ddp options (the hooks, "
        "--zero, --sync-batchnorm) and --compile, and needs its first step synchronised, "
        "which every run's is (torch's default is off)"))
    sync_batchnorm: bool = option(False, help="BatchNorm statistics over the global batch "
                                  "(CUDA only)")
    comm_hook: str | None = option(choices=tuple(HOOKS), sweep=True, label="hook", help=(
        "compress each gradient bucket before its all-reduce (torch's ddp_comm_hooks): fp16 or "
        "bf16 (half the bytes), or powersgd (low rank, from the third step; see "
        "--powersgd-rank); default none"))
    powersgd_rank: int | None = option(minimum=1, label="rank", help=(
        "PowerSGD's matrix approximation rank, with --comm-hook powersgd (default 1)"))
    zero: bool = option(False, help="shard the optimiser state over the ranks "
                        "(ZeroRedundancyOptimizer, ZeRO stage 1): each rank updates its share "
                        "of the parameters, then broadcasts them")

    def implied(self) -> dict:
        return ({name: TORCH_SETTINGS[name] for name in ("gradient_as_bucket_view",
                                                         "static_graph")}
                if self.tuning == "torch" else {})

    def check(self, workload, global_batch, devices) -> None:
        if self.sync_batchnorm and devices[0].type != "cuda":
            raise StrategyError("SyncBatchNorm runs on CUDA devices only (torch's "
                                "SyncBatchNorm); drop --sync-batchnorm on CPU")
        if self.powersgd_rank is not None and self.comm_hook != "powersgd":
            raise StrategyError("--powersgd-rank is PowerSGD's; add --comm-hook powersgd")

    def settings(self, devices) -> dict:
        # bucket_cap_mb None: DDP's own buckets (25 MiB, the first 1 MiB), not 25 given.
        return {**super().settings(devices), "world_size": self.world_size or len(devices),
                "powersgd_rank": (self.powersgd_rank or 1) if self.comm_hook == "powersgd"
                else None}


class DDP(Strategy):
    """One process per device; NCCL where each rank has its own GPU, else gloo.

    Options are DistributedDataParallel's own: `bucket_cap_mb`, `gradient_as_bucket_view`,
    `static_graph` (both on by default, as torch's DDP docs advise for a graph that does not
    change from step to step, against torch's own defaults), `sync_batchnorm` (BatchNorm
    statistics over the global batch, GPUs only, as torch's SyncBatchNorm is) and a
    communication hook (`comm_hook`).

    static_graph needs DDP's first iteration to synchronise gradients (a first step under
    no_sync trips the reducer's `expect_autograd_hooks_` assert): the harness times its
    compute-only steps, under `without_communication`, after the measured ones.
    """

    summary = "one process per device, DistributedDataParallel (NCCL or gloo)"
    Options = DDPOptions
    options: DDPOptions
    _wrapped: DistributedDataParallel
    allreduces_gradients = True
    layout = Layout.REPLICAS
    process_per_device = True
    splits_batch = True
    cuda_graphs_refusal = ("DDP hands each backward's gradients to its reducer from autograd's "
                           "thread (_DDPSink) while torch's CUDA graph trees run, which torch "
                           f"reports failing (pytorch#113809); {WITHOUT_CUDA_GRAPHS}")

    @classmethod
    def check_backend(cls, backend, devices, options) -> None:
        if options.comm_hook == "bf16" and backend == "gloo":
            raise StrategyError("the bf16 hook needs NCCL, and these ranks use gloo, which has "
                                "no bf16 all-reduce (gloo#454); use --comm-hook fp16, or a GPU "
                                "per rank with --backend auto or nccl")
        if options.comm_hook == "powersgd" and backend == "gloo":
            raise StrategyError("the powersgd hook needs NCCL: on gloo a collective mismatch "
                                "in its chained all-reduces aborted the ranks (torch 2.14; "
                                "torch tests PowerSGD on NCCL only); use --comm-hook "
                                "fp16, or a GPU per rank with --backend auto or nccl")

    @classmethod
    def reference_micro_batch(cls, plan) -> int | None:
        if plan.options.sync_batchnorm:
            return None  # BatchNorm sees the global batch, as on one device
        return super().reference_micro_batch(plan)

    @classmethod
    def verify_rounds_elsewhere(cls, plan) -> bool:
        return replica_rounds_elsewhere(plan)

    @property
    def model(self) -> nn.Module:
        return self._module

    def placed_modules(self) -> list[nn.Module]:
        return [self._wrapped]

    def prepare_model(self, model: nn.Module) -> nn.Module:
        """The model with SyncBatchNorm where asked. Before the blocks are compiled: a block
        compiled in place keeps the layers it was compiled with, so a BatchNorm swapped
        afterwards would never run."""
        if self.options.sync_batchnorm:
            return nn.SyncBatchNorm.convert_sync_batchnorm(model)
        return model

    def wrap(self, model: nn.Module) -> DistributedDataParallel:
        options = self.options
        device = self.input_device
        device_ids = [device] if device.type == "cuda" else None
        bucket: dict[str, Any] = ({} if options.bucket_cap_mb is None
                                  else {"bucket_cap_mb": options.bucket_cap_mb})
        wrapped = DistributedDataParallel(model, device_ids=device_ids,
                                          gradient_as_bucket_view=options.gradient_as_bucket_view,
                                          static_graph=options.static_graph, **bucket)
        self._powersgd = None
        if options.comm_hook == "fp16":
            wrapped.register_comm_hook(None, default_hooks.fp16_compress_hook)
        elif options.comm_hook == "bf16":
            wrapped.register_comm_hook(None, default_hooks.bf16_compress_hook)
        elif options.comm_hook == "powersgd":
            # torch requires a few plain all-reduce steps first (start_powerSGD_iter > 1).
            self._powersgd = powerSGD_hook.PowerSGDState(
                process_group=None, matrix_approximation_rank=options.powersgd_rank or 1,
                start_powerSGD_iter=2)
            wrapped.register_comm_hook(self._powersgd, powerSGD_hook.powerSGD_hook)
        return wrapped

    def setup(self) -> None:
        # DDP's iterations (its reducer's count: forwards that will synchronise gradients),
        # whether the harness measured each, and the times DDP sampled of measured ones.
        self._iterations = 0
        self._measured: dict[int, bool] = {}
        self._sampled_iteration: int | None = None
        self._samples: list[dict[str, float]] = []
        self._module, wrapped = replica_setup(self, self.wrap, self.prepare_model)
        self._wrapped = cast(DistributedDataParallel, wrapped)

    def train_step(self, images, labels):
        if torch.is_grad_enabled() and self._wrapped.require_backward_grad_sync:
            self._iterations += 1  # DDP counts this forward (not one under no_sync)
        return replica_step(self, self._wrapped, images, labels)

    def after_step(self, measured: bool) -> None:
        """Keep DDP's own times of a measured iteration, where it sampled one. DDP logs an
        iteration's times at the start of the next forward (`set_runtime_stats_and_log`,
        labelled `iteration` n: the times of iteration n-1, counted from 0), and only the
        first 10 and then every 100th: so these are the measured steps', less the last one
        (logged by a later step) and those it did not sample. Its sample rate is left as it
        is, so that no timed step carries more of DDP's instrumentation than usual."""
        self._measured[self._iterations - 1] = measured
        data = self._wrapped._get_ddp_logging_data()
        label = data.get("iteration")
        if not isinstance(label, int) or label == self._sampled_iteration:
            return
        self._sampled_iteration = label
        if self._measured.get(label - 1) and all(key in data for key in SAMPLED_TIMES):
            self._samples.append({field: data[key] / 1e9 for key, field in SAMPLED_TIMES.items()})

    def prepare_training(self, parameters, loss_device) -> None:
        parameters = list(parameters)
        super().prepare_training(parameters, loss_device)
        if self.options.zero:  # the workload's optimiser, its state sharded over the ranks
            self.optimizer = ZeroRedundancyOptimizer(
                parameters, optimizer_class=type(self.optimizer), **self.optimizer.defaults)

    @classmethod
    def verify_relative_tolerance(cls, plan) -> float | None:
        return HOOKS.get(plan.options.comm_hook)

    def without_communication(self):
        return self._wrapped.no_sync()

    def buffer_bytes(self) -> list[int] | None:
        """The buckets' flat copy of the gradients, as DDP's reducer sized them (rebuilt after
        the first step in the order gradients arrived); none where the gradients are views
        into the buckets (counted once, as gradients)."""
        if self.options.gradient_as_bucket_view:
            return None
        data = self._wrapped._get_ddp_logging_data()
        sizes = str(data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or "")
        return [sum(int(size) for size in sizes.split(",") if size.strip())]

    def communication(self) -> dict[str, float | int | None]:
        """Bytes all-reduced per step (the gradient of every parameter that receives one), and
        DDP's own times (forward, backward compute, backward communication and their
        overlap, in seconds) as means over the measured steps it sampled (see `after_step`;
        None where it sampled none: never its running averages, which take in the warm-up)."""
        data = self._wrapped._get_ddp_logging_data()
        samples = self._samples

        def mean(field: str) -> float | None:
            return sum(s[field] for s in samples) / len(samples) if samples else None

        gradient = data["total_parameter_size_bytes"] - data.get("unused_parameter_size", 0)
        if self.options.comm_hook in ("fp16", "bf16"):
            gradient //= 2  # each float32 bucket is all-reduced as 16-bit
        elif self._powersgd is not None:  # its own compression rate (its counts add up steps)
            rate = self._powersgd.compression_stats()[0]
            gradient = round(gradient / rate) if rate else gradient
        return dict(allreduce_bytes=gradient,
                    **{field: mean(field) for field in SAMPLED_TIMES.values()})

    def trained_parameters(self):
        return list(self.model.parameters()) if self.rank == 0 else []
