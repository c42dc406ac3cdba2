"""nn.DataParallel: one process, replicas on every GPU, scattered and gathered by device 0."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from parbench.strategies.base import Layout, Strategy
from parbench.strategies.rank_parallel import ReplicaOptions

if TYPE_CHECKING:
    from parbench.families.workloads import Workload

__all__ = ["AutocastForward", "DataParallel"]


class AutocastForward(nn.Module):
    """`model` with the workload's autocast entered inside its forward, in the thread that runs
    it: DataParallel runs each replica's forward in a thread of its own, where torch's
    parallel_apply enters autocast again without a dtype (autocast's dtype is per thread), so
    on CUDA a bf16 run would compute in fp16, CUDA's default, while its record said bf16."""

    def __init__(self, model: nn.Module, workload: Workload) -> None:
        super().__init__()
        self.model = model
        self.workload = workload  # copied into each replica with the module's attributes

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        with self.workload.autocast(images.device):
            return self.model(images)


class DataParallel(Strategy):
    """Each step device 0 replicates the model to every GPU, scatters the batch, gathers the
    outputs and computes the loss, so device 0 holds more memory than the others."""

    summary = "one process, nn.DataParallel over the GPUs (device 0 scatters and gathers)"
    layout = Layout.REPLICAS_IN_ONE_PROCESS
    Options = ReplicaOptions
    splits_batch = True
    # replicate() copies each module's attributes into its replicas every step, the compiled
    # call of a block compiled in place (and the model's blockwise forward) included, and those
    # stay bound to the original on the first GPU, where the replicas' inputs are not.
    compile_refusal = ("nn.DataParallel copies each compiled block into its replicas still "
                       "bound to the original on the first GPU; drop --compile, or use ddp, "
                       "which compiles each block of its replica")

    @classmethod
    def unavailable_reason(cls, devices) -> str | None:
        if devices[0].type != "cuda":
            return ("nn.DataParallel replicates onto CUDA devices only; on CPU, ddp shows data "
                    "parallelism with one process per logical device")
        if len(set(devices)) < len(devices):
            return ("nn.DataParallel needs distinct GPUs (its replicas on one GPU would run "
                    "one after another on the same streams); use ddp to emulate replicas on "
                    "one GPU")
        return None

    def setup(self) -> None:
        device = self.devices[0]
        self._model = self.workload.build_model_on(device)
        self._parallel = nn.DataParallel(AutocastForward(self._model, self.workload),
                                         device_ids=list(self.devices), output_device=device)
        self.prepare_training(self._model.parameters(), device)

    @property
    def model(self) -> nn.Module:
        return self._model

    def train_step(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=True)
        # The replicas' forward enters autocast itself (AutocastForward); this one is the loss's.
        with self.workload.autocast(self.devices[0]):
            loss = self.loss_fn(self._parallel(images), labels)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()
