"""A configuration planned once: devices, backend, launcher, and the one reason it cannot run."""

from types import SimpleNamespace

import pytest
import torch

from parbench import launch
from parbench.machine.devices import DeviceSet
from parbench.plan import planning
from parbench.plan.config import Config
from parbench.plan.planning import ConfigError, PlanRefused
from tests.support import CPU2

CPU = torch.device("cpu")
GPU0, GPU1 = torch.device("cuda:0"), torch.device("cuda:1")


@pytest.fixture
def fake_gpus(monkeypatch):
    """Plans on GPU device sets without a GPU: only the batch check asks CUDA anything."""
    monkeypatch.setattr(planning.torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(total_memory=80 * 2**30))


def _plan(name, devices, tiny_workload, batch=8, **fields):
    return Config(name, tiny_workload, batch, devices, **fields).plan


def test_a_plan_says_devices_backend_launcher_and_micro_batches(tiny_workload):
    single = _plan("single", CPU2, tiny_workload)
    assert (single.runs, single.launcher, single.world_size, single.backend) == (
        True, "in-process", 1, None)
    assert single.devices == DeviceSet((CPU,))
    ddp = _plan("ddp", CPU2, tiny_workload)
    assert (ddp.launcher, ddp.world_size, ddp.backend) == ("spawn", 2, "gloo")
    assert ddp.training_plan.backend == "gloo"
    pipeline = _plan("pipeline-gpipe", CPU2, tiny_workload, options={"split_size": 2})
    assert pipeline.training_plan.options.micro_batch_size() == 2
    capped = _plan("single", CPU2, tiny_workload, memory_cap_mib=500)
    assert capped.launcher == "own-process"


def test_every_launcher_a_plan_names_is_one_the_launch_package_has():
    assert set(launch.LAUNCHERS) == set(planning.LauncherKind)
    assert all(isinstance(kind, planning.LauncherKind) for kind in launch.LAUNCHERS)


@pytest.mark.parametrize("environment", [
    {"TORCHELASTIC_RUN_ID": "test", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
     "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_STEP_ID": "0",
     "SLURM_JOB_NODELIST": "localhost"},
], ids=["torchrun", "srun"])
def test_in_a_job_every_configuration_is_launched_as_one_of_its_ranks(tiny_workload,
                                                                      monkeypatch, environment):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert _plan("ddp", CPU2, tiny_workload).launcher == "job"
    refused = _plan("model-parallel", CPU2, tiny_workload)
    assert refused.refusal.kind == "usage"
    assert "drives all its devices from one process" in refused.refusal.reason


def test_refusals_are_sorted_by_what_to_do_about_them(tiny_workload):
    too_few = _plan("pipeline-gpipe", DeviceSet((CPU,)), tiny_workload)
    assert too_few.refusal.kind == "devices" and not too_few.available
    options = _plan("ddp", CPU2, tiny_workload, batch=7)
    assert options.refusal.kind == "options" and options.available
    machine = _plan("data-parallel", CPU2, tiny_workload)
    assert machine.refusal.kind == "machine" and not machine.available
    machine.check()  # recorded as skipped, not an error
    with pytest.raises(PlanRefused, match="does not divide over 2 replicas"):
        options.check()
    with pytest.raises(ConfigError, match="does not divide"):
        options.training_plan  # noqa: B018 (a refused plan has no strategy plan)


def test_backend_is_honoured_and_checked_where_it_is_decided(tiny_workload, fake_gpus):
    nccl_on_cpu = _plan("ddp", CPU2, tiny_workload, backend="nccl")
    assert nccl_on_cpu.refusal.kind == "usage"
    with pytest.raises(ConfigError, match="--backend nccl needs CUDA devices"):
        nccl_on_cpu.check()
    gpus = DeviceSet((GPU0, GPU1))
    hook = {"comm_hook": "bf16"}
    assert _plan("ddp", gpus, tiny_workload, options=hook).backend == "nccl"
    # Asked for gloo, the bf16 hook is refused when planned, not when the ranks start.
    refused = _plan("ddp", gpus, tiny_workload, backend="gloo", options=hook)
    assert refused.refusal.kind == "options" and "bf16 hook needs NCCL" in refused.refusal.reason


def test_two_nodes_cuda0_each_are_two_gpus_with_nccl(tiny_workload, fake_gpus):
    nodes = DeviceSet((GPU0, GPU0), hosts=("node-a", "node-b"), nodes=2)
    plan = _plan("ddp", nodes, tiny_workload, options={"comm_hook": "bf16"})
    assert plan.runs, plan.refusal
    assert plan.backend == "nccl" and plan.training_plan.backend == "nccl"
    shared = _plan("ddp", DeviceSet((GPU0, GPU0)), tiny_workload, options={"comm_hook": "bf16"})
    assert shared.backend == "gloo" and "bf16 hook needs NCCL" in shared.refusal.reason


def test_a_batch_larger_than_memory_is_a_usage_error(tiny_workload, fake_gpus):
    huge = _plan("single", DeviceSet((GPU0,)), tiny_workload, batch=10**9)
    assert huge.refusal.kind == "usage" and "input images alone need" in huge.refusal.reason


def test_a_batch_too_small_is_refused_for_that_batch_alone(tiny_workload):
    """Refused as the sweep's other refusals of a combination are (PlanRefused: recorded as
    skipped where the strategy's other batches run), not as fp16 is for every batch."""
    config = Config("ddp", tiny_workload, 2, CPU2)
    assert config.plan.refusal.kind == "batch"
    with pytest.raises(PlanRefused, match=r"a forward pass on 1 image\(s\) at 32 px"):
        config.plan.check()
    config.plan.check(check_workload=False)  # the quick comparison: skipped, not refused
