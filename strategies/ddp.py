"""DistributedDataParallel: a full replica per rank, gradients all-reduced in buckets."""

from __future__ import annotations

from torch import nn
from torch.nn.parallel import DistributedDataParallel

from strategies.base import StrategyError
from strategies.rank_parallel import RankDataParallel

__all__ = ["DDP"]


class DDP(RankDataParallel):
    """One process per device; NCCL where each rank has its own GPU, else gloo.

    Options are DistributedDataParallel's own: `bucket_cap_mb`, `gradient_as_bucket_view`,
    `static_graph`, and `sync_batchnorm` (BatchNorm statistics over the global batch, GPUs
    only, as torch's SyncBatchNorm is).
    """

    name = "ddp"
    summary = "one process per device, DistributedDataParallel (NCCL or gloo)"
    option_names = ("world_size", "bucket_cap_mb", "gradient_as_bucket_view", "static_graph",
                    "sync_batchnorm")

    def __init__(self, workload, devices, bucket_cap_mb: float | None = None,
                 gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 sync_batchnorm: bool = False, **options) -> None:
        self.check_options(devices, bucket_cap_mb=bucket_cap_mb, sync_batchnorm=sync_batchnorm)
        super().__init__(workload, devices, bucket_cap_mb=bucket_cap_mb,
                         gradient_as_bucket_view=gradient_as_bucket_view or None,
                         static_graph=static_graph or None,
                         sync_batchnorm=sync_batchnorm or None, **options)
        self.ddp_options = dict(gradient_as_bucket_view=gradient_as_bucket_view,
                                static_graph=static_graph)
        if bucket_cap_mb is not None:
            self.ddp_options["bucket_cap_mb"] = bucket_cap_mb
        self.sync_batchnorm = sync_batchnorm

    @staticmethod
    def check_options(devices, bucket_cap_mb=None, sync_batchnorm=False, **_) -> None:
        if bucket_cap_mb is not None and not bucket_cap_mb > 0:
            raise StrategyError(f"ddp: bucket size must be above 0 MB, got {bucket_cap_mb}")
        if sync_batchnorm and devices and devices[0].type != "cuda":
            raise StrategyError("ddp: SyncBatchNorm runs on CUDA devices only (torch's "
                                "SyncBatchNorm); drop --sync-batchnorm on CPU")

    @classmethod
    def check_config(cls, global_batch, devices, **options) -> None:
        cls.check_options(devices, **options)
        super().check_config(global_batch, devices, **options)

    @classmethod
    def equivalent_accumulation(cls, global_batch, devices, **options) -> int | None:
        if options.get("sync_batchnorm"):
            return None  # BatchNorm sees the global batch, as on one device
        return super().equivalent_accumulation(global_batch, devices, **options)

    def wrap(self, model: nn.Module) -> nn.Module:
        if self.sync_batchnorm:
            model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
            self._module = model
        device = self.input_device
        device_ids = [device] if device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=device_ids, **self.ddp_options)

    def trained_parameters(self):
        return list(self.model.parameters()) if self.rank == 0 else []
