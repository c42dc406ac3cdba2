"""Every CUDA path on one GPU, with the host's PyTorch: `pytest -m gpu` (skipped without CUDA).

One GPU stands in for two with `cuda:0,cuda:0` (emulated); strategies that cannot share a GPU
must say why in their record. Sized to finish in a few minutes on one H100.
"""

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch.nn.parallel import parallel_apply

from parbench import cli
from parbench.advisor.models import models
from parbench.advisor.profiling.profile import profile_blocks
from parbench.drive.runner import run_config
from parbench.families.workloads import Workload
from parbench.machine.devices import DeviceSet, parse_devices, synchronize
from parbench.measure import peak_tflops, probes, time_steps
from parbench.measure.sampling import GpuSampler
from parbench.plan.config import Config
from parbench.results.record import Record
from parbench.strategies.nn_data_parallel import AutocastForward
from parbench.strategies.partition import plan_cut

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
GPU, SHARED = "cuda:0", "cuda:0,cuda:0"
WORKLOAD = Workload(model="resnet50", image_size=128)
# Parameters, gradients and SGD momentum of resnet50 (25.6 M float32 parameters each).
RESNET50_STATE_MIB = 3 * 25.557e6 * 4 / 2**20


def _run(strategy: str, devices: str = GPU, batch: int = 32, steps: int = 5, warmup: int = 2,
         workload: Workload = WORKLOAD, **fields) -> Record:
    config = Config(strategy, workload, batch, parse_devices(devices), warmup=warmup,
                    steps=steps, timeout_s=300, **fields)
    return run_config(config)


def _ok(record: Record) -> Record:
    assert record.status == "ok", record.reason
    assert record.throughput_ips is not None and record.throughput_ips > 0
    assert record.loss_last is not None and math.isfinite(record.loss_last)
    return record


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_single_trains_at_every_precision(precision, channels_last):
    record = _ok(_run("single", workload=replace(WORKLOAD, precision=precision,
                                                  channels_last=channels_last)))
    assert record.device_kind == "cuda" and record.emulated is False
    assert record.memory_source.startswith("cuda max_memory_allocated")
    # The allocator's peak holds at least the parameters, gradients and momentum.
    assert record.peak_memory_max_mib > RESNET50_STATE_MIB
    if peak_tflops(torch.cuda.get_device_name(0), precision):  # an H100, H200, A100
        assert record.mfu == pytest.approx(record.achieved_tflops / record.peak_tflops)
        assert 0 < record.mfu < 1


def test_step_timing_waits_for_the_gpu():
    device = torch.device(GPU)
    cycles = 50_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # warm the kernel up
    torch.cuda.synchronize()
    queued_at = time.perf_counter()
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    host_s = time.perf_counter() - queued_at  # what a host timer sees without waiting
    torch.cuda.synchronize()
    gpu_s = start.elapsed_time(end) / 1000
    assert host_s < gpu_s / 5, "the sleep kernel should be queued, not waited for"
    timing = time_steps(lambda i: torch.cuda._sleep(cycles),
                        lambda: synchronize(DeviceSet((device,))), warmup=1, steps=3)
    assert min(timing.step_times_s) >= 0.9 * gpu_s
    # The host queued each sleep at once and waited for it: the GPU bounds these steps.
    assert max(timing.host_times_s) < gpu_s / 5


def test_peak_memory_per_logical_device_comes_from_each_process_allocator():
    # ddp on one GPU: two processes, each with its own CUDA allocator, so each rank's peak is
    # the allocator's, per logical device.
    record = _ok(_run("ddp", SHARED))
    assert record.memory_source.startswith("cuda max_memory_allocated")
    assert len(record.peak_memory_mib) == 2
    assert all(peak > RESNET50_STATE_MIB for peak in record.peak_memory_mib)
    assert record.memory_imbalance == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("strategy", ["model-parallel", "pipeline", "ddp", "fsdp"])
def test_emulated_strategies_run_on_one_gpu(strategy):
    record = _ok(_run(strategy, SHARED))
    assert record.emulated is True
    assert record.devices == SHARED
    assert len(record.peak_memory_mib) == 2 and min(record.peak_memory_mib) > 0
    if strategy in ("ddp", "fsdp"):
        assert record.backend == "gloo"  # NCCL refuses two ranks on one GPU
        assert record.world_size == 2
    else:  # one process: the stages' own tensors, told apart per logical device
        assert record.memory_source.startswith("tensors per logical device")


@pytest.mark.parametrize("precision, options", [
    ("fp16", {"mixed_precision": False}), ("bf16", {}), ("fp16", {})])
def test_fsdp_trains_in_half_precision_on_one_gpu(precision, options):
    """fp16 through the sharded gradient scaler; FSDP2's mixed-precision policy (the default
    in bf16 and fp16)."""
    record = _ok(_run("fsdp", SHARED, workload=replace(WORKLOAD, precision=precision),
                      options=options))
    # layer1..layer3 gathered twice a step, layer4 and the root once: in fp32, more bytes than
    # the gradient; in 2 bytes, fewer.
    gathered_in_half = record.allgather_bytes < record.allreduce_bytes
    assert gathered_in_half == options.get("mixed_precision", True)


@pytest.mark.timeout(300)
def test_torchrun_measures_each_configuration_in_a_worker_on_the_gpu(tmp_path):
    """One rank under torchrun on cuda:0: each configuration in a worker of its own."""
    job = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1",
         "-m", "parbench", "run", "--strategy", "single,ddp", "--devices", "cuda", "--model",
         "resnet18", "--batch-size", "16", "--steps", "2", "--warmup", "1",
         "--results-dir", str(tmp_path), "--progress", "off"],
        cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=280)
    assert job.returncode == 0, job.stdout + job.stderr
    [folder] = list(tmp_path.iterdir())
    records = json.loads((folder / "records.json").read_text())
    assert [(r["strategy"], r["status"], r["devices"]) for r in records] == [
        ("single", "ok", "cuda:0"), ("ddp", "ok", "cuda:0")]


@pytest.mark.parametrize("strategy, because", [
    ("pipeline-gpipe", "NCCL refuses two ranks on one GPU"),
    ("pipeline-1f1b", "NCCL refuses two ranks on one GPU"),
    ("data-parallel", "needs distinct GPUs"),
])
def test_strategies_that_cannot_share_a_gpu_record_why(strategy, because):
    record = _run(strategy, SHARED)
    assert record.status == "skipped"
    assert because in record.reason


def test_verify_on_one_gpu_emulating_two(capsys):
    assert cli.main(["verify", "--devices", SHARED]) == 0
    table = capsys.readouterr().out
    for strategy in ("model-parallel", "pipeline", "ddp", "fsdp"):
        assert re.search(rf"^{strategy} .* ok$", table, re.MULTILINE), table


FOUR_SHARED = ",".join(["cuda:0"] * 4)


def test_the_two_dimensional_layouts_on_one_gpu_emulating_four(capsys):
    """hsdp's ranks share the GPU over gloo (its CPU gather takes one sharding group);
    pipeline-fsdp's stages cannot send CUDA tensors over gloo, and its record says so."""
    assert cli.main(["verify", "--strategy", "hsdp", "--devices", FOUR_SHARED]) == 0
    assert re.search(r"^hsdp .* ok$", capsys.readouterr().out, re.MULTILINE)
    record = _run("pipeline-fsdp", FOUR_SHARED, batch=16, steps=1, warmup=1)
    assert record.status == "skipped" and "point to point" in record.reason


@pytest.mark.skipif(torch.cuda.device_count() < 4, reason="needs 4 GPUs (NCCL, one rank each)")
def test_the_two_dimensional_layouts_on_four_gpus_over_nccl(capsys):
    gpus = ",".join(f"cuda:{i}" for i in range(4))
    assert cli.main(["verify", "--strategy", "hsdp,pipeline-fsdp", "--devices", gpus]) == 0
    table = capsys.readouterr().out
    for strategy in ("hsdp", "pipeline-fsdp"):
        assert re.search(rf"^{strategy} .* ok$", table, re.MULTILINE), table
    for strategy in ("hsdp", "pipeline-fsdp"):
        record = _ok(_run(strategy, gpus, batch=32, steps=3, warmup=1))
        assert record.backend == "nccl" and record.exposed_comm_time_s is not None


def test_out_of_memory_is_recorded_on_the_gpu_and_the_next_configuration_runs():
    big = _run("single", batch=512, steps=1, warmup=1, memory_cap_mib=1024,
               workload=replace(WORKLOAD, image_size=224))
    assert big.status == "oom", big.reason
    assert "out of memory" in big.reason.lower()
    _ok(_run("single", batch=8, steps=1, warmup=1))


def test_out_of_memory_in_this_process_leaves_no_memory_reserved():
    """Uncapped, single runs in this process: once the out-of-memory record is made, what the
    failed step held is freed and CUDA's cache emptied, so later ranks on this GPU have it."""
    big = _run("single", batch=4096, steps=1, warmup=1, workload=replace(WORKLOAD,
                                                                         image_size=224))
    assert big.status == "oom", big.reason
    assert torch.cuda.memory_reserved(0) < 512 * 2**20
    _ok(_run("single", batch=8, steps=1, warmup=1))


def test_data_parallel_replicas_compute_in_the_precision_asked():
    """torch's own parallel_apply, as nn.DataParallel calls it (two replicas on one GPU):
    each replica thread re-enters autocast without a dtype; AutocastForward keeps bf16."""
    workload = replace(WORKLOAD, model="resnet18", precision="bf16")
    model = workload.build_model_on(GPU)
    images, _ = workload.make_batch(4, GPU)
    with workload.autocast(GPU):  # as DataParallel.train_step enters it
        kept = parallel_apply([AutocastForward(model, workload)] * 2, [(images,), (images,)],
                              devices=[0, 0])
    assert {out.dtype for out in kept} == {torch.bfloat16}  # the bare model's: fp16 in 2.14


def test_the_time_balance_and_the_profile_time_blocks_with_cuda_events():
    """Both mark block boundaries with CUDA events and sync once a pass
    (strategies.device_timer)."""
    workload = replace(WORKLOAD, model="resnet18", precision="bf16", channels_last=True)
    sample, _ = workload.make_batch(16, GPU)
    partition = plan_cut(workload, workload.build_model_on(GPU), 3, "time", sample)
    assert len(partition.stage_ranges()) == 3
    profile = profile_blocks(workload, 16, GPU)
    assert all(b.forward_s > 0 and b.input_grad_s + b.weight_grad_s > 0 for b in profile.blocks)
    assert sum(b.forward_s + b.input_grad_s + b.weight_grad_s for b in profile.blocks) == \
        pytest.approx(profile.step_s, rel=1e-6)


def test_the_profile_counts_what_the_gpu_holds_beyond_the_tensors():
    """A GPU's profile measures the transients of a step, what the allocator reserves beyond
    its peak and the context (memory.DeviceOverheads), so a step's predicted peak is not
    below the allocator's (the H200's chunk 10 profile, without them, was 49 to 130 MiB
    below it: the dangerous side for a call that something fits)."""
    profile = profile_blocks(WORKLOAD, 16, GPU)
    assert profile.transient_bytes > 0 and profile.context_bytes > 0
    predicted = models.single(profile, 1)
    model = WORKLOAD.build_model_on(GPU)
    images, labels = WORKLOAD.make_batch(16, GPU)
    optimizer = WORKLOAD.make_optimizer(model.parameters())
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):  # the second step holds the momentum the first made
        WORKLOAD.loss_fn()(model(images), labels).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    peak, reserved = (torch.cuda.max_memory_allocated() / 2**20,
                      torch.cuda.max_memory_reserved() / 2**20)
    assert peak <= predicted.peak_memory_mib[0] <= 1.1 * peak + 64
    assert reserved <= 1.05 * predicted.reserved_memory_mib[0]
    free, total = torch.cuda.mem_get_info()
    in_use = (total - free) / 2**20  # this process alone on the GPU: its context and reserve
    assert in_use <= 1.05 * predicted.device_memory_mib[0]


def test_a_pipeline_timeline_on_the_gpu_lies_inside_its_step():
    record = _ok(_run("pipeline", SHARED, options={"split_size": 8}))
    step = record.traced_step_time_s  # a step of its own, after the measured ones
    assert record.timeline and all(0 <= span[3] < span[4] <= step * 1.01
                                   for span in record.timeline)
    assert {span[0] for span in record.timeline} == {0, 1}
    assert 0 <= record.measured_bubble_fraction < 1


def test_max_batch_finds_the_limit_under_a_cap(tmp_path, capsys):
    assert cli.main(["max-batch", "--strategy", "single", "--devices", GPU, "--model",
                     "resnet18", "--image-size", "128", "--memory-cap-mib", "2048",
                     "--limit", "4096", "--results-dir", str(tmp_path)]) == 0
    found = re.search(r"^\s+single\s+(\d+)$", capsys.readouterr().out, re.MULTILINE)
    assert found, "no batch found"
    assert 8 <= int(found.group(1)) < 4096  # a limit, found below the search's own
    trials = json.loads(next(tmp_path.glob("*/records.json")).read_text())
    assert {t["status"] for t in trials} == {"ok", "oom"}


def test_gpu_utilisation_memory_and_energy_are_sampled():
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")
    # Utilisation needs 4 samples (0.2 s apart) inside the measured steps, the first left out:
    # 30 of these steps took 0.3 s on an H200, 120 about 1.4 s.
    record = _ok(_run("single", batch=64, steps=120))
    assert record.gpu_sampling == "nvml"
    assert record.gpu_utilisation_pct[0] > 10  # busy, as NVML saw it
    assert record.gpu_memory_used_mib[0] >= record.peak_memory_max_mib
    if record.gpu_energy_j is not None:  # NVML reports energy from Volta on
        assert record.gpu_energy_j > 0
        assert record.images_per_joule == pytest.approx(
            64 * 120 / record.gpu_energy_j)


class _NoSampler(GpuSampler):
    """The sampler with its reader closed before it starts: it samples nothing, and answers
    every call the worker makes as a sampler that found no GPU (it is one, so it cannot drift
    from the interface)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self._reader is not None:
            self._reader.close()
        self._reader = None
        self.source = "not sampled (cost check)"


def test_sampling_costs_less_than_one_percent(monkeypatch):
    sampled, unsampled = [], []
    for _ in range(3):  # alternate, so drift hits both alike
        sampled.append(_ok(_run("single", batch=64, steps=30)).step_time_median_s)
        with monkeypatch.context() as patch:
            # What Probes.open builds, named through the module so that mypy checks the name.
            patch.setattr(probes, probes.GpuSampler.__name__, _NoSampler)
            unsampled.append(_ok(_run("single", batch=64, steps=30)).step_time_median_s)
    cost = min(sampled) / min(unsampled) - 1
    assert cost < 0.01, f"sampling slowed the step by {cost:.1%}"


def test_compile_is_kept_out_of_the_measured_steps():
    """Inductor's seconds fall in the first warm-up step, none in a measured one. How fast the
    compiled step is, is torch's: compiled per block without CUDA graphs, this step (batch 32)
    ran at about half the eager throughput on an H200
    (results/20261127T111514Z-gpu-reference-h200/README.md)."""
    workload = replace(WORKLOAD, precision="bf16", channels_last=True, compile=True)
    compiled = _ok(_run("single", workload=workload, steps=10))
    assert compiled.compile is True
    assert compiled.compile_time_s > 1  # inductor took seconds on the first warm-up step
    assert compiled.step_time_max_s < compiled.first_step_time_s / 5
    assert compiled.step_time_max_s < 3 * compiled.step_time_median_s  # no step recompiled


def test_a_batch_larger_than_the_gpu_is_refused_before_anything_runs(tmp_path, capsys):
    total = torch.cuda.get_device_properties(0).total_memory
    side = int((total / 12) ** 0.5) + 64  # one float32 image of this side exceeds the GPU
    assert cli.main(["run", "--strategy", "single", "--devices", GPU, "--batch-size", "1",
                     "--image-size", str(side), "--results-dir", str(tmp_path)]) == 2
    message = capsys.readouterr().err
    assert "input images alone need" in message and len(message.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def _environment(**extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), **extra}


def test_pytest_benchmark_measures_the_gpu(tmp_path):
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "benchmarks/test_strategies.py", "--benchmark-only",
         "-k", "single or ddp", f"--benchmark-json={out}", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT, env=_environment(PARBENCH_BENCH_DEVICES=SHARED), capture_output=True,
        text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    benchmarks = json.loads(out.read_text())["benchmarks"]
    records = {b["extra_info"]["record"]["strategy"]: b["extra_info"]["record"]
               for b in benchmarks}
    assert set(records) == {"single", "ddp"}
    assert all(r["device_kind"] == "cuda" and r["status"] == "ok" for r in records.values())


def test_asv_runs_on_the_gpu_in_the_existing_environment(tmp_path):
    pytest.importorskip("asv", reason="asv is not installed (pip install its wheel)")
    work = tmp_path / "repo"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(".asv", "results", ".venv",
                                                              ".tox", "__pycache__"))
    env = _environment(PARBENCH_ASV_DEVICES=GPU, PYTHONPATH=str(work))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()

    def asv(*args, timeout=500):
        return subprocess.run([sys.executable, "-m", "asv", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=timeout)

    assert asv("machine", "--yes").returncode == 0
    done = asv("run", "--python=same", "--quick", "--set-commit-hash", commit,
               "--bench", "Throughput")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = [p for p in (work / ".asv" / "results").rglob("*.json")
               if p.name != "machine.json"]
    assert results, done.stdout
    stored = json.loads(results[0].read_text())
    throughput = next(v for k, v in stored["results"].items() if "track_throughput" in k)
    values = [v for v in throughput[0] if v is not None and v == v]  # skipped: None or nan
    assert values and all(v > 0 for v in values), throughput
