import types
import weakref
from dataclasses import replace

import pytest

from parbench import strategies
from parbench.drive.runner import add_comparisons, run_config, run_sweep
from parbench.machine.devices import parse_devices
from parbench.plan import Sweep
from parbench.plan.config import Config, expand_sweep
from parbench.results.folder import RunFolder, load_records
from tests.support import CPU2, ok_record


@pytest.fixture
def config(tiny_workload):
    return Config(strategy="single", workload=tiny_workload, global_batch=4,
                  devices=CPU2, warmup=1, steps=2)


def test_a_measured_record_is_complete_and_consistent(config):
    record = run_config(config, run_id="run", index=3, environment={"host": "here"})
    assert record.status == "ok", record.reason
    assert record.devices == "cpu" and record.emulated is False
    assert record.torch_threads == 1
    assert len(record.step_times_s) == 2
    assert record.step_time_min_s <= record.step_time_median_s <= record.step_time_max_s
    assert record.throughput_ips > 0
    assert record.peak_memory_mib[0] > 0 and record.memory_imbalance == 1.0
    assert record.flops_per_image > 0
    assert record.achieved_tflops == pytest.approx(
        record.flops_per_image * record.throughput_ips / 1e12)
    assert record.config_index == 3 and record.environment == {"host": "here"}


def test_a_failing_configuration_becomes_an_error_record(config, monkeypatch):
    from parbench import strategies

    def explode(self, images, labels):
        raise RuntimeError("stage exploded")

    monkeypatch.setattr(strategies.single.SingleDevice, "train_step", explode)
    record = run_config(config)
    assert record.status == "error"
    assert "RuntimeError: stage exploded" in record.reason
    assert record.throughput_ips is None


def test_out_of_memory_is_recorded_as_oom(config, monkeypatch):
    from parbench import strategies

    def out_of_memory(self):
        raise MemoryError("cannot allocate")

    monkeypatch.setattr(strategies.single.SingleDevice, "setup", out_of_memory)
    assert run_config(config).status == "oom"


def test_sweep_expands_every_combination(tiny_workload):
    configs = expand_sweep(strategy=["single"], model=["resnet18", "resnet34"],
                           global_batch=[2, 4], image_size=[32], precision=["fp32"],
                           devices=[parse_devices("cpu")], num_classes=10, warmup=0, steps=1)
    assert [(c.workload.model, c.global_batch) for c in configs] == [
        ("resnet18", 2), ("resnet18", 4), ("resnet34", 2), ("resnet34", 4)]
    assert all(c.workload.num_classes == 10 for c in configs)


def test_sweep_keeps_going_after_a_failure_and_writes_every_record(config, tmp_path,
                                                                   monkeypatch):
    from parbench import strategies

    original = strategies.single.SingleDevice.setup

    def fail_on_large_batches(self):
        if self.workload.image_size > 32:
            raise RuntimeError("too big")
        original(self)

    monkeypatch.setattr(strategies.single.SingleDevice, "setup", fail_on_large_batches)
    bigger = replace(config, workload=replace(config.workload, image_size=64))
    folder = RunFolder.create(tmp_path)
    run_sweep(Sweep((bigger, config)), folder, environment={"host": "here"})
    frame = load_records(folder.path)
    assert list(frame["status"]) == ["error", "ok"]
    assert list(frame["run_id"]) == [folder.run_id] * 2


def _ok(strategy, devices, throughput, **options):
    return ok_record(strategy, devices=devices, throughput_ips=throughput, strategy_options=options)


def test_scaling_efficiency_is_throughput_over_n_times_the_one_device_throughput():
    records = [_ok("single", "cpu", 10.0), _ok("ddp", "cpu", 9.0, world_size=1),
               _ok("ddp", "cpu,cpu", 16.2, world_size=2),
               _ok("ddp", "cpu,cpu", 15.0, world_size=2, static_graph=False),
               _ok("fsdp", "cpu,cpu", 12.0, world_size=2)]
    add_comparisons(records)
    single, ddp1, ddp2, ddp2_static, fsdp2 = records
    assert ddp2.scaling_efficiency == pytest.approx(16.2 / (2 * 9.0))
    assert ddp1.scaling_efficiency == pytest.approx(1.0)
    assert ddp2_static.scaling_efficiency is None  # no run without it on one device
    assert fsdp2.scaling_efficiency is None
    assert ddp2.speedup_vs_baseline == pytest.approx(1.62)
    assert ddp2.device_efficiency == pytest.approx(0.81)


def test_a_data_parallel_step_splits_into_compute_and_exposed_communication():
    from parbench.drive.runner import _communication_split

    measured = types.SimpleNamespace(compute_step_times_s=[0.3, 0.2, 0.4],
                                     rank_step_times_s=[[0.5] * 3, [0.5] * 3],
                                     communication={"allreduce_bytes": 8})
    split = _communication_split(measured, 0.5)
    assert split == dict(compute_step_times_s=[0.3, 0.2, 0.4], compute_time_s=0.3,
                         exposed_comm_time_s=pytest.approx(0.2),
                         exposed_comm_fraction=pytest.approx(0.4), allreduce_bytes=8)
    none = types.SimpleNamespace(compute_step_times_s=[], rank_step_times_s=None,
                                 communication={})
    assert _communication_split(none, 0.5) == {}


def test_one_ranks_extra_time_is_the_wrappers_overhead_not_communication():
    """One process (the merged measurement has no per-rank times): no byte crosses a link."""
    from parbench.drive.runner import _communication_split

    one_rank = types.SimpleNamespace(compute_step_times_s=[0.3, 0.2, 0.4],
                                     rank_step_times_s=None,
                                     communication={"allreduce_bytes": 8})
    assert _communication_split(one_rank, 0.5) == dict(
        compute_step_times_s=[0.3, 0.2, 0.4], compute_time_s=0.3,
        wrapper_overhead_time_s=pytest.approx(0.2),
        wrapper_overhead_fraction=pytest.approx(0.4), allreduce_bytes=8)


def test_a_record_keeps_every_setting_its_label_leaves_out(tiny_workload):
    from parbench.drive.runner import planned_fields

    ddp = planned_fields(Config("ddp", tiny_workload, 8, CPU2, options={"static_graph": False}))
    assert ddp["strategy_options"] == {"static_graph": False}
    assert ddp["strategy_settings"] == dict(
        world_size=2, tuning="tuned", bucket_cap_mb=None, gradient_as_bucket_view=True,
        static_graph=False, sync_batchnorm=False, comm_hook=None, powersgd_rank=None, zero=False)
    fsdp = planned_fields(Config("fsdp", replace(tiny_workload, precision="bf16"), 8, CPU2))
    assert fsdp["strategy_options"] == {"fsdp_units": "group", "mixed_precision": True}
    assert fsdp["strategy_settings"] == dict(world_size=2, tuning="tuned", fsdp_units="group",
                                             reshard_after_forward="except-last",
                                             mixed_precision=True)
    refused = planned_fields(Config("ddp", tiny_workload, 7, CPU2))  # 7 does not divide
    assert refused.get("strategy_settings") is None and refused["strategy_options"] == {}


def test_weak_scaling_compares_at_the_same_batch_per_device():
    def weak(strategy, devices, throughput, batch, **options):
        return replace(_ok(strategy, devices, throughput, **options), global_batch=batch,
                       scaling="weak")

    records = [weak("single", "cpu", 10.0, 8), weak("ddp", "cpu", 9.0, 8, world_size=1),
               weak("ddp", "cpu,cpu", 17.1, 16, world_size=2),
               _ok("single", "cpu", 12.0)]  # strong, global batch 8: not compared with weak
    add_comparisons(records)
    single, ddp1, ddp2, strong = records
    assert ddp2.scaling_efficiency == pytest.approx(17.1 / (2 * 9.0))  # t_step(1) / t_step(2)
    assert ddp2.speedup_vs_baseline == pytest.approx(1.71)  # over single at 8 per device
    assert strong.speedup_vs_baseline == pytest.approx(1.0)


def test_weak_scaling_multiplies_the_batch_by_the_devices_each_strategy_uses(capsys):
    from parbench import cli
    from parbench.commands.run import build_sweep, spec_of

    args = cli.parser().parse_args(
        ["run", "--strategy", "single,ddp", "--devices", "cpu,cpu", "--world-size", "1,2",
         "--batch-size", "8", "--scaling", "weak"])
    configs = build_sweep(spec_of(args)).configs
    assert [(c.strategy, c.global_batch, c.scaling) for c in configs] == [
        ("single", 8, "weak"), ("ddp", 8, "weak"), ("ddp", 16, "weak")]
    assert '"scaling": "weak"' in configs[0].key()
    assert "scaling" not in replace(configs[0], scaling="strong").key()
    # More ranks than devices: that combination is skipped, as under strong scaling.
    args.world_size = "1,4"
    configs = build_sweep(spec_of(args)).configs
    assert [c.options.get("world_size") for c in configs if c.strategy == "ddp"] == [1, 4]
    assert "world size 4 needs at least 4 devices" in configs[-1].refusal()


class _Held:
    """Stands for a strategy's tensors: alive while any frame that made one is."""


def test_a_failed_configuration_is_freed_before_the_gpu_cache_is_emptied(config, monkeypatch):
    """The failed strategy's frames live in the exception's traceback: emptying CUDA's cache
    inside the except block released none of its memory."""
    from parbench.drive import runner

    made, emptied = [], []

    def run_out_of_memory(config):
        held = _Held()  # noqa: F841 (kept alive by this frame, as a strategy's tensors are)
        made.append(weakref.ref(held))
        raise MemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(runner, "_holds_gpu_memory", lambda config: True)  # as on cuda:0
    monkeypatch.setattr(runner.torch.cuda, "empty_cache",
                        lambda: emptied.append(made[-1]() is None))
    assert run_config(config, measure=run_out_of_memory).status == "oom"
    assert emptied == [True]  # freed first, then the cache emptied


def test_every_configuration_on_a_gpu_in_this_process_empties_its_cache(config, monkeypatch):
    from parbench.drive import runner

    emptied = []
    monkeypatch.setattr(runner.torch.cuda, "empty_cache", lambda: emptied.append(True))
    assert run_config(config).status == "ok"
    assert emptied == []  # on the CPU: nothing to empty
    monkeypatch.setattr(runner, "_holds_gpu_memory", lambda config: True)
    assert run_config(config).status == "ok"
    assert emptied == [True]  # after a success too, not only a failure


def test_cudnn_benchmark_is_set_for_each_configuration_and_recorded(config, monkeypatch):
    """Set in the process that trains, for every configuration (this process may have run one
    with the other setting), and recorded; `--cudnn-benchmark` asks for it."""
    import torch

    from parbench import cli, strategies
    from parbench.commands.run import build_sweep, spec_of

    seen = []
    train_step = strategies.single.SingleDevice.train_step

    def spy(self, images, labels):
        seen.append(torch.backends.cudnn.benchmark)
        return train_step(self, images, labels)

    monkeypatch.setattr(strategies.single.SingleDevice, "train_step", spy)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    on = replace(config, workload=replace(config.workload, cudnn_benchmark=True))
    assert run_config(on).cudnn_benchmark is True
    assert set(seen) == {True}
    seen.clear()
    assert run_config(config).cudnn_benchmark is False
    assert set(seen) == {False}
    args = cli.parser().parse_args(["run", "--strategy", "single", "--devices", "cpu",
                                    "--cudnn-benchmark"])
    assert all(c.workload.cudnn_benchmark for c in build_sweep(spec_of(args)).configs)
    assert "cudnn_benchmark" not in config.workload.describe()  # older run folders resume


def test_compile_on_and_off_are_configurations_each_with_its_own_baselines(capsys):
    """`--compile on,off`: each strategy eager and compiled, in the same rounds, and the
    micro-batch effect of a compiled pipeline taken over single accumulating the same
    micro-batches compiled (of an eager one, eager)."""
    from parbench import cli
    from parbench.commands.run import build_sweep, spec_of

    args = cli.parser().parse_args(
        ["run", "--strategy", "single,pipeline", "--devices", "cpu,cpu", "--split-size", "2",
         "--batch-size", "8", "--compile", "on,off", "--repeats", "2"])
    sweep = build_sweep(spec_of(args))
    assert [(c.strategy, c.options.get("split_size") or c.options.get("accumulation_split"),
             c.workload.compile) for c in sweep.configs] == [
        ("single", None, True), ("single", 2, True), ("pipeline", 2, True),
        ("single", None, False), ("single", 2, False), ("pipeline", 2, False)]
    assert " compiled on " in sweep.configs[0].label()
    assert " compiled " not in sweep.configs[3].label()
    assert len({c.key() for c in sweep.configs}) == 6
    rounds = {slot.round for slot in sweep.slots}
    assert rounds == {0, 1}  # each round measures both, interleaved
    for r in rounds:
        assert {sweep.configs[s.index].workload.compile for s in sweep.slots
                if s.round == r} == {True, False}

    def record(strategy, compiled, throughput, **options):
        split = options.get("split_size") or options.get("accumulation_split")
        return replace(_ok(strategy, "cpu,cpu" if strategy == "pipeline" else "cpu",
                           throughput, **options), compile=compiled, split_size=split,
                       micro_batches=4 if split else 1, stages=2 if strategy == "pipeline"
                       else None)

    records = [record("single", True, 20.0), record("pipeline", True, 30.0, split_size=2),
               record("single", True, 18.0, accumulation_split=2),
               record("single", False, 10.0), record("pipeline", False, 12.0, split_size=2),
               record("single", False, 8.0, accumulation_split=2)]
    add_comparisons(records)
    compiled, eager = records[1], records[4]
    assert compiled.micro_batch_effect == pytest.approx(18 / 20)
    assert compiled.parallel_effect == pytest.approx(30 / 18)
    assert compiled.speedup_vs_baseline == pytest.approx(30 / 20)
    assert eager.micro_batch_effect == pytest.approx(8 / 10)
    assert eager.parallel_effect == pytest.approx(12 / 8)


def test_every_strategy_of_a_process_per_rank_warms_up_two_steps():
    """Declared by layout, held against each strategy's own processes: a new strategy that
    starts a process per rank cannot come in warming up less."""
    for name in strategies.names():
        expected = 2 if strategies.lookup(name).cls.process_per_device else 0
        layout = strategies.layout_of(name)
        assert layout is not None and layout.warmup_steps == expected, name


@pytest.mark.timeout(300)
def test_a_multi_process_layout_warms_up_until_its_steps_are_steady(tiny_workload):
    """torch's pipelining schedules across processes, ddp, fsdp and hsdp are slower on their
    second step too: they take two warm-up steps whatever --warmup asks below that; one
    process takes what it asks."""
    schedule = Config("pipeline-1f1b", tiny_workload, 8, CPU2, warmup=1, steps=2,
                      options={"split_size": 2})
    assert schedule.warmup_steps == 2
    assert replace(schedule, warmup=3).warmup_steps == 3
    assert replace(schedule, strategy="single", options={}).warmup_steps == 1
    assert replace(schedule, strategy="pipeline", options={}).warmup_steps == 1
    for data_parallel in ("ddp", "fsdp", "hsdp"):
        assert replace(schedule, strategy=data_parallel, options={}).warmup_steps == 2
    record = run_config(schedule)
    assert record.status == "ok", record.reason
    assert record.warmup_steps == 2 and len(record.step_times_s) == 2
