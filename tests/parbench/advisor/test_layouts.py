"""Every layout parbench runs on the devices at hand, each once, predicted as a run's record of
it would be."""

from parbench.advisor.models.links import Link
from parbench.advisor.profiling.profile import BlockProfile, Profile
from parbench.advisor.recommend.layouts import candidate_configs, option_grid, predicted_layouts
from parbench.families.workloads import Workload
from parbench.machine.devices import parse_devices

FREE = Link("free", float("inf"))
CPU4 = parse_devices("cpu,cpu,cpu,cpu")
WORKLOAD = Workload(model="resnet18", image_size=32, num_classes=10)


def _profiles(record: dict):
    def at(micro_batch: int) -> Profile:
        blocks = tuple(BlockProfile(name, 0.01 * micro_batch, 0.01 * micro_batch,
                                    0.01 * micro_batch, 2**20, (2**20,), 2**20 * micro_batch)
                       for name in ("stem", "layer1.0", "layer3.0", "fc"))
        return Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, micro_batch, 1, blocks)
    return at


def test_the_grid_takes_every_group_a_layout_forms_and_the_whole_batch():
    grid = option_grid(4, [2])
    assert {(o["split_size"], o["shard_size"], o["zero"]) for o in grid} == {
        (None, 2, False), (None, 2, True), (2, 2, False), (2, 2, True)}
    assert {o["reshard_after_forward"] for o in grid} == {"yes", "no", "except-last"}
    # every other setting left to parbench's defaults, as `parbench run` runs them
    assert not {"gradient_as_bucket_view", "static_graph", "fsdp_units",
                "mixed_precision"} & {name for o in grid for name in o}


def test_each_layout_that_runs_here_is_a_configuration_once_with_only_the_options_it_sets():
    configs = candidate_configs(WORKLOAD, 16, CPU4, [2], ["single", "ddp", "hsdp",
                                                          "pipeline-fsdp", "pipeline-1f1b"])
    labels = sorted((c.strategy, tuple(sorted(c.options.items()))) for c in configs)
    assert labels == sorted([
        ("single", ()), ("single", (("accumulation_split", 2),)),
        ("ddp", ()), ("ddp", (("zero", True),)),
        *(("hsdp", (("reshard_after_forward", reshard), ("shard_size", 2)))
          for reshard in ("yes", "no", "except-last")),
        ("pipeline-fsdp", (("pipelines", 2), ("split_size", 2))),
        ("pipeline-1f1b", (("split_size", 2),))])
    assert len({c.key() for c in configs}) == len(configs)


def test_each_is_predicted_fastest_first_with_its_own_options_and_memory():
    configs = candidate_configs(WORKLOAD, 16, CPU4, [2], ["single", "ddp", "hsdp",
                                                          "pipeline-fsdp"])
    table = predicted_layouts(configs, _profiles, FREE)
    assert list(table["throughput_ips"]) == sorted(table["throughput_ips"], reverse=True)
    assert set(table["config_key"]) == {c.key() for c in configs}
    resharded = table["options"].map(lambda o: o.get("reshard_after_forward") == "yes")
    hsdp = table[(table["strategy"] == "hsdp") & resharded].iloc[0]
    # 4 MiB of parameters sharded 2 ways, 4 images' activations (4 blocks of 4 MiB)
    assert hsdp["counted_memory_max_mib"] == 3 * 4 / 2 + 16
    single = table[(table["strategy"] == "single") & (table["options"] == {})].iloc[0]
    assert single["devices"] == 1 and single["speedup_vs_single"] == 1
