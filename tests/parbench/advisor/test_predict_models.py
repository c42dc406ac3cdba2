"""The timing models give the known answers on a made-up profile, and a real profile of a small
ResNet holds what a prediction needs."""

import ast
import gc
import itertools
import re
import weakref
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from parbench.advisor import version
from parbench.advisor.models import data_parallel, models
from parbench.advisor.models.links import Link
from parbench.advisor.models.memory import DeviceOverheads, RankMemory
from parbench.advisor.models.schedule_replay import StageTimes
from parbench.advisor.profiling.contention import Sharing
from parbench.advisor.profiling.profile import (
    BlockProfile,
    Profile,
    _median_time,
    block_times_in_step,
    load_or_profile,
    profile_blocks,
)
from parbench.advisor.runs.records import partition_of, predicted_beside_measured
from parbench.families.workloads import Workload
from parbench.strategies.partition import Partition
from parbench.strategies.stages import bubble_fraction

ROOT = Path(__file__).resolve().parents[3]
MIB = 2**20
NAMES = ("stem", "a", "b", "head")
# Four blocks of 1 s forward, 1 s input gradient, 1 s weight gradient on a micro-batch.
BLOCKS = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=MIB, parameter_sizes=(MIB,),
                            saved_bytes=2 * MIB) for name in NAMES)
PROFILE = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 4, 3, BLOCKS)
HALVES = Partition(NAMES, (0, 2), "tutorial")
QUARTERS = Partition(NAMES, (0, 1, 2, 3), "time")
FREE = Link("free", float("inf"))


def test_single_accumulating_is_its_micro_batches_one_after_the_other():
    predicted = models.single(PROFILE, micro_batches=5)
    assert predicted.step_time_s == 5 * 12.0 and predicted.global_batch == 20
    assert predicted.kind == "predicted"
    assert predicted.peak_memory_mib == (4 * 3 + 4 * 2,)  # parameters x 3, saved activations


def test_model_parallel_adds_both_directions_of_every_cut_to_the_compute():
    link = Link("slow", bandwidth_gbps=MIB / 1e9 / 0.5)  # 0.5 s per MiB
    predicted = models.model_parallel(PROFILE, HALVES, link)
    assert predicted.step_time_s == pytest.approx(12.0 + 2 * 0.5)
    assert predicted.peak_memory_mib == (2 * 3 + 2 * 2, 2 * 3 + 2 * 2)


@pytest.mark.parametrize("micro_batches", [1, 4, 10])
def test_both_gpipes_on_equal_stages_idle_the_closed_form_share(micro_batches):
    expected = bubble_fraction(2, micro_batches)
    tick = models.tick_pipeline(PROFILE, HALVES, micro_batches)
    replayed = models.pipeline("gpipe", PROFILE, HALVES, 2, micro_batches, FREE)
    for predicted in (tick, replayed):
        assert predicted.bubble == pytest.approx(expected)
        assert predicted.step_time_s == pytest.approx((micro_batches + 1) * 6.0)


def test_stages_sharing_one_core_are_slowed_only_while_both_compute():
    """Two stages on one core, measured 2x slower both computing (the profile's times): one
    micro-batch leaves one stage computing at a time, at twice the profile's speed, and the
    bubble is still half of the step in the tick pipeline and GPipe alike."""
    shared = replace(PROFILE, sharing=Sharing(ranks=2, cores=1, threads=1, slowdown=2.0))
    tick = models.tick_pipeline(shared, HALVES, 1)
    replayed = models.pipeline("gpipe", shared, HALVES, 2, 1, FREE)
    for predicted in (tick, replayed):
        assert predicted.step_time_s == pytest.approx(12.0 / 2)
        assert predicted.bubble == pytest.approx(0.5)


def test_pipelines_side_by_side_share_the_cpu_with_each_other():
    """pipeline-fsdp's two 2-stage pipelines on 4 devices sharing 2 cores (2x slower all four
    computing, the profile's times): one pipeline alone never has more computing than cores,
    so it runs at twice the profile's speed throughout; beside its twin, while both its stages
    compute, four devices do, at the profile's speed."""
    shared = replace(PROFILE, sharing=Sharing(ranks=4, cores=2, threads=1, slowdown=2.0))
    unshared = models.pipeline("1f1b", PROFILE, HALVES, 2, 4, FREE).step_time_s
    alone = models.pipeline("1f1b", shared, HALVES, 2, 4, FREE).step_time_s
    beside = models.pipeline("1f1b", shared, HALVES, 2, 4, FREE, side_by_side=2).step_time_s
    assert alone == pytest.approx(unshared / 2)
    assert alone < beside < unshared


def test_1f1b_holds_fewer_micro_batches_than_gpipe_on_the_first_device():
    gpipe = models.pipeline("gpipe", PROFILE, HALVES, 2, 8, FREE)
    one_f_one_b = models.pipeline("1f1b", PROFILE, HALVES, 2, 8, FREE)
    # Device 0: parameters of 2 blocks x 3, saved activations of 2 blocks per micro-batch held.
    assert gpipe.peak_memory_mib[0] == 2 * 3 + 8 * 4
    assert one_f_one_b.peak_memory_mib[0] == 2 * 3 + 2 * 4


def test_interleaving_four_stages_on_two_devices_shrinks_the_bubble():
    interleaved = models.pipeline("interleaved-1f1b", PROFILE, QUARTERS, 2, 4, FREE)
    assert interleaved.bubble == pytest.approx(bubble_fraction(2, 4, 2))


def test_a_record_is_predicted_from_its_own_cut_and_its_error_is_signed():
    assert partition_of({"partition": "stem..a | b..head"}, NAMES).bounds == (0, 2)
    records = pd.DataFrame([
        dict(strategy="pipeline-gpipe", status="ok", split_size=4, micro_batches=4,
             global_batch=16, world_size=2, partition="stem..a | b..head",
             step_time_median_s=40.0),
        dict(strategy="data-parallel", status="ok", global_batch=16, world_size=1,
             partition=None, step_time_median_s=1.0),
    ])
    table = predicted_beside_measured(records, lambda record: lambda micro_batch: PROFILE, FREE)
    assert list(table["strategy"]) == ["pipeline-gpipe"]  # nn.DataParallel: not modelled
    assert table.iloc[0]["predicted_step_time_s"] == pytest.approx(30.0)
    assert table.iloc[0]["prediction_error"] == pytest.approx(30.0 / 40.0 - 1)


def test_a_predicted_speedup_is_against_the_predicted_baseline_of_the_same_workload():
    # The machine ran the run twice as fast as the profile: every step is predicted 2x too
    # slow, but the speedup over the baseline, both sides from one source, is right.
    common = dict(status="ok", model="resnet18", image_size=32, num_classes=10,
                  precision="fp32", scaling="strong", device_kind="cpu", global_batch=16)
    records = pd.DataFrame([
        dict(strategy="single", strategy_options={}, step_time_median_s=6.0,
             speedup_vs_baseline=1.0, devices="cpu", world_size=1, **common),
        dict(strategy="single", strategy_options={"accumulation_split": 4}, split_size=4,
             micro_batches=4, step_time_median_s=24.0, speedup_vs_baseline=0.25,
             devices="cpu", world_size=1, **common),
        dict(strategy="pipeline-gpipe", strategy_options={}, split_size=4, micro_batches=4,
             world_size=2,
             partition="stem..a | b..head", step_time_median_s=15.0, devices="cpu,cpu",
             speedup_vs_baseline=0.4, **common),
    ])
    # Another workload's baseline, twice as slow, in the same run: not resnet18's.
    records = pd.concat([pd.DataFrame([{**records.iloc[0].to_dict(), "model": "resnet34",
                                        "step_time_median_s": 12.0}]), records],
                        ignore_index=True)
    slower = replace(PROFILE, blocks=tuple(replace(b, forward_s=2.0, input_grad_s=2.0,
                                                   weight_grad_s=2.0) for b in BLOCKS))
    # PROFILE at every size: the whole batch 12 s, 4 micro-batches one after the other 48 s,
    # GPipe on two devices 30 s.
    table = predicted_beside_measured(
        records, lambda record: lambda micro_batch: slower if record["model"] == "resnet34"
        else PROFILE, FREE)
    assert table["prediction_error"].tolist() == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert table["predicted_speedup"].isna().tolist() == [True, True, False, False]
    assert table["predicted_speedup"].iloc[2:].tolist() == pytest.approx([12 / 48, 12 / 30])
    assert table["speedup_error"].iloc[2:].tolist() == pytest.approx([0.0, 0.0])


def test_a_link_pays_its_latency_once_a_message():
    link = Link("slow", bandwidth_gbps=MIB / 1e9, latency_s=0.25)  # 1 s per MiB
    assert link.transfer_s(MIB) == pytest.approx(1.25)
    # A ring all-reduce on 4 ranks: 6 messages in a row, 2 x 3/4 of the bytes on each link.
    assert link.allreduce_s(MIB, 4) == pytest.approx(6 * 0.25 + 1.5)
    assert link.collective_s("all_gather", MIB, 4) == pytest.approx(3 * 0.25 + 0.75)
    assert link.allreduce_s(MIB, 1) == 0.0


def test_a_profile_of_a_real_resnet_is_measured_once_then_read_from_the_cache(tmp_path):
    workload = Workload(model="resnet18", image_size=32, num_classes=10)
    profile = load_or_profile(tmp_path, workload, micro_batch=2)
    names = [block.name for block in profile.blocks]
    assert names[0] == "stem" and names[-1] == "head" and len(names) == 10
    assert all(block.forward_s > 0 and block.saved_bytes > 0 for block in profile.blocks)
    assert profile.blocks[0].input_grad_s == 0  # no gradient for the images
    assert profile.step_compute_s == pytest.approx(profile.step_s)  # the blocks sum to a step
    assert profile.blocks[0].output_bytes == 2 * 64 * 8 * 8 * 4  # stem: 64 channels, 32 px / 4
    parameters = list(workload.build_model().parameters())
    assert [size for b in profile.blocks for size in b.parameter_sizes] == [
        4 * p.numel() for p in parameters]
    # The head (pool, flatten, fc) saves the pooled features, not fc's weight: 2 x 512 fp32.
    assert profile.blocks[-1].saved_bytes < 4 * 512 * 10
    assert load_or_profile(tmp_path, workload, micro_batch=2) == profile  # from the cache
    assert len(list(tmp_path.iterdir())) == 1


_NOW = [0.0]  # the fake clock of the test below: it moves only where a block spends time


class _SlowForward(torch.nn.Module):
    def forward(self, x):
        _NOW[0] += 0.02
        return x * 1.0


class _SlowGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 1.0

    @staticmethod
    def backward(ctx, gradient):
        _NOW[0] += 0.03
        return gradient


class _SlowBackward(torch.nn.Linear):
    def forward(self, x):
        return _SlowGradient.apply(super().forward(x))


def test_blocks_are_timed_at_their_own_place_inside_a_whole_step(monkeypatch):
    """On a clock that moves only inside the middle block's forward (20 ms) and the last
    block's backward (30 ms): each lands at its own block, nothing elsewhere."""
    from parbench.strategies import device_timer

    monkeypatch.setattr(device_timer.time, "perf_counter", lambda: _NOW[0])
    blocks = [torch.nn.Linear(4, 4), _SlowForward(), _SlowBackward(4, 3)]
    workload = Workload(model="resnet18", image_size=32, num_classes=3)
    forwards, backwards, step_s, steps = block_times_in_step(
        blocks, torch.randn(2, 4), torch.tensor([0, 2]), workload, torch.device("cpu"), 2)
    assert forwards == pytest.approx([0.0, 0.02, 0.0], abs=1e-9)
    assert backwards == pytest.approx([0.0, 0.0, 0.03], abs=1e-9)
    assert step_s == pytest.approx(0.05) and steps == pytest.approx([0.05] * len(steps))


def test_a_profile_in_bf16_runs_under_autocast():
    profile = profile_blocks(Workload(model="resnet18", image_size=32, num_classes=10,
                                      precision="bf16"), micro_batch=2, repeats=1)
    assert profile.blocks[1].output_bytes == 2 * 64 * 8 * 8 * 2  # bf16 activations


def test_a_profile_leaves_none_of_its_model_alive(monkeypatch):
    """Counting what a block saves for backward once kept every block's activations and
    parameters (a saved-tensor hook returned the tensor itself, a cycle the collector cannot
    see); on a GPU the profile's next measurement counted them as a step's transients."""
    built = []
    build = Workload.build_model_on

    def build_and_watch(self, device):
        model = build(self, device)
        built.extend(weakref.ref(p) for p in model.parameters())
        return model

    monkeypatch.setattr(Workload, "build_model_on", build_and_watch)
    profile = profile_blocks(Workload(model="resnet18", image_size=32, num_classes=10),
                             micro_batch=2, repeats=1)
    assert profile.blocks[1].saved_bytes > 0 and built
    gc.collect()
    assert [ref() for ref in built if ref() is not None] == []


def test_on_a_cpu_the_step_is_cut_at_the_host_clocks_readings(monkeypatch):
    # One tick a reading: start, 3 forward hooks, loss, 3 backward hooks (last block first),
    # end. The last block's forward ends with the loss, its backward starts there.
    ticks = itertools.count()
    monkeypatch.setattr("time.perf_counter", lambda: float(next(ticks)))
    blocks = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 3)]
    workload = Workload(model="resnet18", image_size=32, num_classes=3)
    forwards, backwards, step_s, _ = block_times_in_step(
        blocks, torch.randn(2, 4), torch.tensor([0, 2]), workload, torch.device("cpu"), 2)
    assert (forwards, backwards, step_s) == ([1.0, 1.0, 2.0], [1.0, 1.0, 2.0], 8.0)
    assert _median_time(lambda: None, torch.device("cpu"), repeats=3) == 1.0


def test_a_channels_last_profile_feeds_its_blocks_channels_last():
    seen = []

    def record(module, inputs, output):
        if isinstance(module, torch.nn.Conv2d):
            seen.append((inputs[0].is_contiguous(memory_format=torch.channels_last),
                         module.weight.is_contiguous(memory_format=torch.channels_last),
                         output.dtype))

    handle = torch.nn.modules.module.register_module_forward_hook(record)
    try:
        profile_blocks(Workload(model="resnet18", image_size=64, num_classes=10,
                                precision="bf16", channels_last=True), micro_batch=2, repeats=1)
    finally:
        handle.remove()
    assert seen and set(seen) == {(True, True, torch.bfloat16)}


def test_fsdp_peaks_in_its_last_units_backward_resharded_or_not():
    resharded = data_parallel.fsdp(PROFILE, ranks=2, link=FREE)
    kept = data_parallel.fsdp(PROFILE, ranks=2, link=FREE, reshard=False)
    # Sharded parameters and momentum 2 x 4 MiB / 2, saved 6 MiB by b's backward; the root
    # and its gradients 2 + 2, b and its gradients 1 + 1, and a 1 (prefetched, or kept).
    assert resharded.peak_memory_mib[0] == kept.peak_memory_mib[0] == 4 + 6 + 4 + 2 + 1
    assert resharded.counted_memory_mib[0] == 6 + 8  # the sharded state, every saved byte


def test_ddp_with_communication_free_is_its_compute_and_a_slow_link_shows_only_its_tail():
    free = data_parallel.ddp(PROFILE, ranks=4, link=FREE)
    assert free.step_time_s == pytest.approx(12.0) and free.bubble == pytest.approx(0)
    buckets = data_parallel.bucket_ready_times(PROFILE)
    # The first bucket of 1 MiB once the head's backward ends; the rest (under 25 MiB) at the end.
    assert buckets == [(2.0, MIB), (8.0, 3 * MIB)]
    # DDP never splits a tensor: a bucket closes once it holds its cap, here the head's weight.
    head = replace(BLOCKS[-1], parameter_sizes=(8 * MIB, 4096))  # weight, bias (last)
    uneven = replace(PROFILE, blocks=(*BLOCKS[:-1], head))
    assert data_parallel.bucket_ready_times(uneven)[0] == (2.0, 8 * MIB + 4096)
    slow = Link("slow", bandwidth_gbps=MIB / 1e9)  # a ring all-reduce of 1 MiB on 2: 1 s
    predicted = data_parallel.ddp(PROFILE, ranks=2, link=slow)
    # The first bucket hides behind backward; the last starts as backward ends, and shows.
    assert predicted.step_time_s == pytest.approx(4.0 + 8.0 + 3.0)
    assert predicted.bubble == pytest.approx(3 / 15)


def test_fsdp_hides_the_blocks_gathers_and_reductions_but_not_the_roots():
    assert data_parallel.fsdp(PROFILE, ranks=1, link=FREE).step_time_s == pytest.approx(12.0)
    assert data_parallel.fsdp(PROFILE, ranks=4, link=FREE).step_time_s == pytest.approx(12.0)
    slow = Link("slow", bandwidth_gbps=MIB / 1e9)  # a 2-rank gather of 1 MiB: 0.5 s
    on_gpu = data_parallel.fsdp(replace(PROFILE, device="cuda:0"), ranks=2, link=slow)
    # The root (stem and head, 2 MiB) is gathered before anything and reduce-scattered after
    # everything: 1 s each; every block's own gathers and reductions hide behind compute.
    assert on_gpu.step_time_s == pytest.approx(12.0 + 1.0 + 1.0)
    # On a CPU gloo's collectives block the rank that issued them: each unit's two gathers
    # and its reduction (0.5 s each) show as well.
    predicted = data_parallel.fsdp(PROFILE, ranks=2, link=slow)
    assert predicted.step_time_s == pytest.approx(12.0 + 1.0 + 1.0 + 2 * 3 * 0.5)
    assert predicted.kind == "predicted" and predicted.global_batch == 8


def test_ranks_sharing_a_cpus_cores_hide_none_of_their_communication():
    slow = Link("slow", bandwidth_gbps=MIB / 1e9)  # a 2-rank all-reduce of 1 MiB: 1 s
    # DDP's buckets of 1 and 3 MiB: 4 s of all-reduce after 12 s of compute, none hidden.
    assert data_parallel.ddp(PROFILE, 2, slow, shared_cores=True).step_time_s == \
        pytest.approx(12.0 + 4.0)
    # FSDP: each unit gathered twice (forward, backward) and reduce-scattered, 0.5 s each for
    # its 1 MiB; the root's 2 MiB gathered and reduce-scattered, 1 s each.
    assert data_parallel.fsdp(PROFILE, 2, slow).step_time_s == \
        pytest.approx(12.0 + 2 * 3 * 0.5 + 2 * 1.0)


def test_each_device_steps_the_optimiser_over_the_parameters_it_holds():
    stepping = replace(PROFILE, optimizer_s=2.0)  # all 4 MiB of parameters
    # Stages of 2 and 6 MiB: GPipe's first rank ends last by its 4 s backward, but the second
    # steps three quarters of the optimiser (6 s against 2 s): both end 2 s after the schedule.
    uneven = replace(PROFILE, optimizer_s=8.0, blocks=tuple(
        replace(block, parameter_sizes=(size * MIB,))
        for block, size in zip(BLOCKS, (1, 1, 3, 3), strict=True)))
    assert models.pipeline("gpipe", uneven, HALVES, 2, 4, FREE).step_time_s == \
        pytest.approx(models.pipeline("gpipe", PROFILE, HALVES, 2, 4, FREE).step_time_s + 2.0)
    assert models.single(stepping, 5).step_time_s == pytest.approx(5 * 12.0 + 2.0)
    # Two stages of 2 MiB: the rank that ends last steps its half, 1 s.
    assert models.pipeline("gpipe", stepping, HALVES, 2, 4, FREE).step_time_s == \
        pytest.approx(models.pipeline("gpipe", PROFILE, HALVES, 2, 4, FREE).step_time_s + 1.0)
    assert data_parallel.ddp(stepping, 2, FREE).step_time_s == pytest.approx(12.0 + 2.0)
    assert data_parallel.fsdp(stepping, 2, FREE).step_time_s == pytest.approx(12.0 + 1.0)


def test_the_models_files_are_those_of_their_version():
    # A change to the models without a new PREDICTOR_VERSION would let a held-out run
    # measured under the old models be predicted by models tuned since: bump the version
    # and record the new fingerprint (parbench/advisor/version.py).
    assert version.fingerprint() == version.FINGERPRINT, (
        f"the models changed: bump PREDICTOR_VERSION and set FINGERPRINT = "
        f"{version.fingerprint()!r}")


def test_where_a_models_import_comes_from_is_not_the_model_but_what_it_imports_is():
    source = version.model_source
    moved = source(b"from parbench.advisor.models.links import Link\n"
                   b"from strategies.partition import cut\n"
                   b"def f():\n    from parbench.advisor import models\n    return models\n")
    assert moved == source(b"from parbench.strategies.partition import cut  # moved\n"
                           b"from parbench.advisor.models.links import Link\n"
                           b"def f():\n    from parbench.advisor import models\n"
                           b"    return models\n")
    assert moved != source(b"from parbench.advisor.models.links import Links\n"
                           b"from strategies.partition import cut\n"
                           b"def f():\n    from parbench.advisor import models\n"
                           b"    return models\n")
    assert source(b"x = 1\n") != source(b"x = 2\n")
    assert source(b"import math\n") != source(b"import cmath\n")  # only the project's own
    assert source(b"x = 1  # one\n# alone\n") == source(b"x = 1  # the first\n")
    assert source(b"s = '# not a comment'\n") != source(b"s = ''\n")


def _imported_files(path: str) -> set[str]:
    """The project's files a model file imports from (a module, else its package)."""
    found = set()
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and \
                (node.module or "").split(".")[0] == "parbench":
            for alias in node.names:
                for module in (f"{node.module}.{alias.name}", node.module):
                    base = module.replace(".", "/")
                    hits = [p for p in (f"{base}.py", f"{base}/__init__.py")
                            if (ROOT / p).is_file()]
                    if hits:
                        found.add(hits[0])
                        break
    return found


def test_what_the_models_import_is_in_them_or_named_outside_with_why():
    # A name imported from a module outside MODEL_FILES is not in the fingerprint: each such
    # module is named, so a model that starts leaning on another one is seen in review.
    imported = set().union(*(_imported_files(p) for p in version.MODEL_FILES
                             if p.endswith(".py")))
    assert imported - set(version.MODEL_FILES) == set(version.OUTSIDE_THE_MODEL)


STEPPING = replace(PROFILE, optimizer_s=2.0, transient_bytes=MIB, reserved_extra_bytes=2 * MIB,
                   context_bytes=3 * MIB)  # with an optimiser's step and a GPU's overheads


def test_the_one_process_models_are_labelled_and_step_their_optimiser_after_the_compute():
    single = models.single(STEPPING, micro_batches=1)
    split = models.model_parallel(STEPPING, HALVES, FREE)
    tick = models.tick_pipeline(STEPPING, HALVES, 1)
    assert [p.strategy for p in (single, split, tick)] == ["single", "model-parallel",
                                                           "pipeline"]
    assert [p.global_batch for p in (single, split, tick)] == [4, 4, 4]
    assert models.tick_pipeline(STEPPING, HALVES, 3).global_batch == 12
    # One micro-batch of 12 s through either, then the optimiser over every parameter, 2 s.
    assert [p.step_time_s for p in (single, split, tick)] == pytest.approx([14.0] * 3)
    for predicted in (single, split, tick):
        assert predicted.overheads == DeviceOverheads(MIB, 2 * MIB, 3 * MIB)
        assert predicted.kind == "predicted"


def test_the_tick_pipeline_holds_every_micro_batchs_activations_on_each_stage():
    predicted = models.tick_pipeline(PROFILE, HALVES, 3)
    # Each stage: 2 MiB of parameters (x 3), and 3 micro-batches x 2 blocks x 2 MiB saved.
    assert predicted.memory == (RankMemory.of(2 * MIB, 3 * 4 * MIB),) * 2
    assert predicted.counted_memory_mib == (6 + 12, 6 + 12)


def test_a_tick_lasts_as_long_as_its_slowest_stage_backward_from_the_last():
    # Three stages, backward 2, 4 and 6 s; 2 micro-batches: four ticks a direction, forwards
    # 1 s each; backward ticks run the last stage first: 6, max(6, 4), max(4, 2), 2.
    times = [StageTimes(1.0, 1.0, 1.0), StageTimes(1.0, 2.0, 2.0), StageTimes(1.0, 3.0, 3.0)]
    assert models.tick_step_s(times, 2) == pytest.approx(4.0 + 6 + 6 + 4 + 2)


@pytest.mark.parametrize("schedule, partition, ranks, wants", [
    ("gpipe", QUARTERS, 2, "one stage"), ("1f1b", QUARTERS, 3, "one stage"),
    ("interleaved-1f1b", HALVES, 2, "several stages"),
    ("interleaved-1f1b", QUARTERS, 3, "several stages")])
def test_a_schedule_refuses_stages_it_cannot_place(schedule, partition, ranks, wants):
    message = (f"pipeline-{schedule} runs {wants} per rank; {partition.stages} stages on "
               f"{ranks} ranks do not fit it")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        models.pipeline(schedule, PROFILE, partition, ranks, 4, FREE)


def test_a_replayed_pipeline_is_labelled_and_its_timeline_rows_are_its_stages():
    gpipe = models.pipeline("gpipe", STEPPING, HALVES, 2, 1, FREE)
    assert gpipe.strategy == "pipeline-gpipe" and gpipe.global_batch == 4
    assert gpipe.overheads == DeviceOverheads(MIB, 2 * MIB, 3 * MIB)
    # One stage per rank: (stage, micro-batch, phase, start, end), one after the other.
    assert gpipe.spans == ((0, 0, "F", 0.0, 2.0), (1, 0, "F", 2.0, 4.0),
                           (1, 0, "B", 4.0, 8.0), (0, 0, "B", 8.0, 12.0))
    assert models.pipeline("1f1b", PROFILE, HALVES, 2, 3, FREE).global_batch == 12
    # Several stages per rank: rows are ranks, the model stage a sixth item.
    interleaved = models.pipeline("interleaved-1f1b", PROFILE, QUARTERS, 2, 4, FREE)
    assert {len(span) for span in interleaved.spans} == {6}
    assert {(span[0], span[5]) for span in interleaved.spans} == {(0, 0), (1, 1), (0, 2),
                                                                  (1, 3)}


def test_a_runtimes_fixed_cost_is_paid_by_every_action():
    # GPipe, one micro-batch: four actions one after the other, 0.5 s more each.
    assert models.pipeline("gpipe", PROFILE, HALVES, 2, 1, FREE, action_s=0.5).step_time_s \
        == pytest.approx(12.0 + 4 * 0.5)


def test_a_split_backward_gives_the_first_stage_no_input_gradient():
    # Zero bubble: the first stage's input gradient (1 s) has nothing to go to, so its weight
    # gradient takes the whole backward (1 + 2 s); the other stages keep their halves.
    stem = replace(BLOCKS[0], input_grad_s=1.0, weight_grad_s=2.0)
    profile = replace(PROFILE, blocks=(stem, *BLOCKS[1:]))
    predicted = models.pipeline("zero-bubble", profile, QUARTERS, 2, 4, FREE)
    durations = {}
    for span in predicted.spans:
        durations.setdefault((span[5], span[2]), set()).add(round(span[4] - span[3], 9))
    assert durations == {(0, "F"): {1.0}, (0, "I"): {0.0}, (0, "W"): {3.0},
                         **{(stage, phase): {1.0} for stage in (1, 2, 3)
                            for phase in "FIW"}}


def test_three_stages_a_rank_are_placed_as_three():
    six = tuple(BlockProfile(f"b{i}", 1.0, 1.0, 1.0, output_bytes=MIB, parameter_sizes=(MIB,),
                             saved_bytes=2 * MIB) for i in range(6))
    profile = replace(PROFILE, blocks=six)
    sixths = Partition(tuple(b.name for b in six), tuple(range(6)), "time")
    predicted = models.pipeline("interleaved-1f1b", profile, sixths, 2, 4, FREE)
    assert {(span[0], span[5]) for span in predicted.spans} == {
        (stage % 2, stage) for stage in range(6)}
    # Each rank holds three stages of 1 MiB of parameters.
    assert [m.state_bytes for m in predicted.memory] == [3 * 3 * MIB] * 2
