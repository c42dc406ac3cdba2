"""DistributedDataParallel: a full replica per rank, gradients all-reduced in buckets."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from strategies.errors import StrategyError
from strategies.options import option
from strategies.rank_parallel import RankDataParallel, ReplicaOptions

__all__ = ["DDP", "DDPOptions"]


@dataclass(frozen=True)
class DDPOptions(ReplicaOptions):
    """DistributedDataParallel's own settings (one value each, not swept)."""

    bucket_cap_mb: float | None = option(above=0, sweep=False, help="gradient bucket size in "
                                         "MB (DDP's default 25)")
    gradient_as_bucket_view: bool = option(False, help="gradients are views into the "
                                           "all-reduce buckets (less memory)")
    static_graph: bool = option(False, help="declare the graph static (DDP may then skip "
                                "per-step checks)")
    sync_batchnorm: bool = option(False, help="BatchNorm statistics over the global batch "
                                  "(CUDA only)")

    def check(self, workload, global_batch, devices) -> None:
        if self.sync_batchnorm and devices[0].type != "cuda":
            raise StrategyError("SyncBatchNorm runs on CUDA devices only (torch's "
                                "SyncBatchNorm); drop --sync-batchnorm on CPU")


class DDP(RankDataParallel):
    """One process per device; NCCL where each rank has its own GPU, else gloo.

    Options are DistributedDataParallel's own: `bucket_cap_mb`, `gradient_as_bucket_view`,
    `static_graph`, and `sync_batchnorm` (BatchNorm statistics over the global batch, GPUs
    only, as torch's SyncBatchNorm is).
    """

    summary = "one process per device, DistributedDataParallel (NCCL or gloo)"
    Options = DDPOptions

    @classmethod
    def reference_split(cls, plan) -> int | None:
        if plan.options.sync_batchnorm:
            return None  # BatchNorm sees the global batch, as on one device
        return super().reference_split(plan)

    def wrap(self, model: nn.Module) -> nn.Module:
        options = self.options
        if options.sync_batchnorm:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            self._module = model
        device = self.input_device
        device_ids = [device] if device.type == "cuda" else None
        bucket = {} if options.bucket_cap_mb is None else {"bucket_cap_mb": options.bucket_cap_mb}
        return DistributedDataParallel(model, device_ids=device_ids,
                                       gradient_as_bucket_view=options.gradient_as_bucket_view,
                                       static_graph=options.static_graph, **bucket)

    def without_communication(self):
        return self._wrapped.no_sync()

    def communication(self) -> dict[str, float | int | None]:
        """Bytes all-reduced per step (the gradient of every parameter that receives one), and
        DDP's own averages over the iterations it sampled (the first 10, then every 100):
        forward, backward compute, backward communication and their overlap, in seconds."""
        data = self._wrapped._get_ddp_logging_data()

        def seconds(key: str) -> float | None:
            value = data.get(key)
            return value / 1e9 if value else None

        return dict(
            allreduce_bytes=(data["total_parameter_size_bytes"]
                             - data.get("unused_parameter_size", 0)),
            ddp_forward_time_s=seconds("avg_forward_compute_time"),
            ddp_backward_compute_time_s=seconds("avg_backward_compute_time"),
            ddp_backward_comm_time_s=seconds("avg_backward_comm_time"),
            ddp_overlap_time_s=seconds("avg_backward_compute_comm_overlap_time"),
        )

    def trained_parameters(self):
        return list(self.model.parameters()) if self.rank == 0 else []
