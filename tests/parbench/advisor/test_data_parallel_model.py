"""The data-parallel timing models (ddp, fsdp, hsdp) against steps, bubbles and memory worked out
by hand on made-up profiles, and the collectives each issues, in order."""

from dataclasses import replace

import pytest

from parbench.advisor.models import data_parallel
from parbench.advisor.models.links import Link
from parbench.advisor.models.memory import DeviceOverheads, RankMemory
from parbench.advisor.profiling.profile import BlockProfile, Profile

MIB = 2**20
NAMES = ("stem", "a", "b", "head")
# Four blocks of 1 s forward, 1 s input gradient, 1 s weight gradient, 1 MiB of parameters and
# 2 MiB saved, on micro-batches of 4.
BLOCKS = tuple(BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=MIB, parameter_sizes=(MIB,),
                            saved_bytes=2 * MIB) for name in NAMES)
PROFILE = Profile("resnet18", 32, "fp32", 10, False, "cpu", 1, 4, 3, BLOCKS)
ON_GPU = replace(PROFILE, device="cuda:0")
FREE = Link("free", float("inf"))
SLOW = Link("slow", bandwidth_gbps=MIB / 1e9)  # 1 s a MiB: a 2-rank all-reduce of 1 MiB 1 s,
# a 2-rank all-gather or reduce-scatter of 1 MiB 0.5 s


def _scaled(profile: Profile, factor: float) -> Profile:
    return replace(profile, blocks=tuple(
        replace(b, forward_s=b.forward_s * factor, input_grad_s=b.input_grad_s * factor,
                weight_grad_s=b.weight_grad_s * factor) for b in profile.blocks))


class Recording:
    """A link whose collectives take `seconds_per_mib[name]` a MiB on any number of ranks,
    noting each (name, bytes, ranks) asked for."""

    def __init__(self, **seconds_per_mib):
        self.rates, self.calls = seconds_per_mib, []

    def transfer_s(self, size_bytes):
        return self.collective_s("transfer", size_bytes, 2)

    def allreduce_s(self, size_bytes, ranks):
        return self.collective_s("all_reduce", size_bytes, ranks)

    def collective_s(self, name, size_bytes, ranks):
        self.calls.append((name, size_bytes, ranks))
        return self.rates[name] * size_bytes / MIB


def test_ddp_on_one_rank_sends_nothing_even_on_a_slow_link():
    predicted = data_parallel.ddp(PROFILE, 1, SLOW)
    assert predicted.step_time_s == pytest.approx(12.0) and predicted.bubble == 0
    assert predicted.strategy == "ddp" and predicted.global_batch == 4
    assert len(predicted.memory) == 1


def test_ddp_in_milliseconds_waits_for_nothing_that_is_not_there():
    # A real profile's blocks take milliseconds: 12 ms of compute and a free link, 12 ms.
    fast = _scaled(PROFILE, 1e-3)
    assert data_parallel.ddp(fast, 2, FREE).step_time_s == pytest.approx(12e-3)
    assert data_parallel.fsdp(fast, 2, FREE).step_time_s == pytest.approx(12e-3)
    assert data_parallel.fsdp(replace(fast, device="cuda:0"), 2, FREE).step_time_s == \
        pytest.approx(12e-3)


def test_a_bucket_that_outlasts_the_backward_delays_the_next():
    # Backward 0.5 s a block; the head holds 2 MiB: its bucket is ready at 0.5 s and its
    # all-reduce (2 s on 2 ranks) ends at 2.5 s, after backward (2 s); the other 3 MiB,
    # ready at 2 s, start then: 3 s more. Forward 4 s + 5.5 s.
    blocks = tuple(replace(b, input_grad_s=0.25, weight_grad_s=0.25) for b in BLOCKS)
    blocks = (*blocks[:-1], replace(blocks[-1], parameter_sizes=(2 * MIB,)))
    profile = replace(PROFILE, blocks=blocks)
    assert data_parallel.bucket_ready_times(profile) == [(0.5, 2 * MIB), (2.0, 3 * MIB)]
    assert data_parallel.ddp(profile, 2, SLOW).step_time_s == pytest.approx(4.0 + 5.5)
    # Sharing the cores: the 5 s of all-reduces after the 2 s of backward.
    assert data_parallel.ddp(profile, 2, SLOW, shared_cores=True).step_time_s == \
        pytest.approx(4.0 + 2.0 + 5.0)


def test_buckets_close_at_the_caps_given():
    assert data_parallel.bucket_ready_times(PROFILE, first_bytes=2 * MIB, bytes_per_bucket=MIB) \
        == [(4.0, 2 * MIB), (6.0, MIB), (8.0, MIB)]


def test_ddp_holds_three_copies_of_the_parameters_and_a_flat_copy_of_the_gradients():
    # 4 MiB of parameters, 8 MiB saved.
    predicted = data_parallel.ddp(PROFILE, 4, FREE)
    assert predicted.memory == (RankMemory(12 * MIB, 8 * MIB, bucket_bytes=4 * MIB),) * 4
    assert predicted.counted_memory_mib == (24.0,) * 4
    assert predicted.global_batch == 16
    views = data_parallel.ddp(PROFILE, 4, FREE, bucket_view=True)
    assert views.memory == (RankMemory(12 * MIB, 8 * MIB, bucket_bytes=0),) * 4
    # ZeroRedundancyOptimizer: momentum only for its quarter.
    zero = data_parallel.ddp(PROFILE, 4, FREE, zero=True)
    assert zero.memory == (RankMemory(9 * MIB, 8 * MIB, bucket_bytes=4 * MIB),) * 4


def test_ddp_with_zero_steps_its_share_of_the_optimiser_then_gathers_the_parameters():
    stepping = replace(PROFILE, optimizer_s=2.0)
    # All-reduces of 1 MiB at 2 s and 3 MiB at 8 s: communication ends at 11 s. ZeRO on 2 ranks:
    # the optimiser 1 s, then an all-gather of the 4 MiB of parameters, 2 s.
    plain = data_parallel.ddp(stepping, 2, SLOW)
    assert plain.step_time_s == pytest.approx(4.0 + 11.0 + 2.0)
    assert plain.bubble == pytest.approx(1 - 14.0 / 17.0)
    zero = data_parallel.ddp(stepping, 2, SLOW, zero=True)
    assert zero.step_time_s == pytest.approx(4.0 + 11.0 + 1.0 + 2.0)
    assert zero.bubble == pytest.approx(1 - 13.0 / 18.0)
    assert data_parallel.ddp(stepping, 2, FREE, zero=True).step_time_s == pytest.approx(13.0)
    link = Recording(all_reduce=1.0, all_gather=0.5)
    data_parallel.ddp(stepping, 2, link, zero=True)
    assert link.calls == [("all_reduce", MIB, 2), ("all_reduce", 3 * MIB, 2),
                          ("all_gather", 4 * MIB, 2)]


def test_a_gpus_overheads_are_carried_into_every_prediction():
    overheads = replace(PROFILE, transient_bytes=MIB, reserved_extra_bytes=2 * MIB,
                        context_bytes=3 * MIB)
    for predicted in (data_parallel.ddp(overheads, 2, FREE),
                      data_parallel.fsdp(overheads, 2, FREE),
                      data_parallel.hsdp(overheads, 4, 2, FREE)):
        assert predicted.overheads == DeviceOverheads(MIB, 2 * MIB, 3 * MIB)
        # The transients on top of the tensors' peak, then what is reserved, then the context.
        assert predicted.peak_memory_mib[0] == pytest.approx(predicted.memory[0].peak_mib + 1)
        assert predicted.device_memory_mib[0] == pytest.approx(predicted.memory[0].peak_mib + 6)


def test_fsdp_issues_its_gathers_and_reductions_in_order():
    link = Recording(all_gather=0.5, reduce_scatter=0.5)
    predicted = data_parallel.fsdp(ON_GPU, 2, link)
    # The root (stem and head) gathered first; each unit before its forward, again before its
    # backward (last first) and reduce-scattered after it; the root reduce-scattered last.
    assert link.calls == [("all_gather", 2 * MIB, 2), ("all_gather", MIB, 2),
                          ("all_gather", MIB, 2), ("all_gather", MIB, 2),
                          ("reduce_scatter", MIB, 2), ("all_gather", MIB, 2),
                          ("reduce_scatter", MIB, 2), ("reduce_scatter", 2 * MIB, 2)]
    assert predicted.strategy == "fsdp" and predicted.global_batch == 8
    kept = Recording(all_gather=0.5, reduce_scatter=0.5)
    data_parallel.fsdp(ON_GPU, 2, kept, reshard=False)
    assert [call for call in kept.calls if call[0] == "all_gather"] == [
        ("all_gather", 2 * MIB, 2), ("all_gather", MIB, 2), ("all_gather", MIB, 2)]


def test_the_root_is_the_stem_and_the_head():
    # Stem 1 MiB, units 2 and 3 MiB, head 4 MiB: the root is 5 MiB.
    sizes = (1, 2, 3, 4)
    uneven = replace(ON_GPU, blocks=tuple(replace(b, parameter_sizes=(s * MIB,))
                                          for b, s in zip(BLOCKS, sizes, strict=True)))
    link = Recording(all_gather=0.5, reduce_scatter=0.5)
    predicted = data_parallel.fsdp(uneven, 2, link)
    assert link.calls[0] == ("all_gather", 5 * MIB, 2)
    assert link.calls[-1] == ("reduce_scatter", 5 * MIB, 2)
    # Sharded state 3 x 10 MiB / 2, saved 8 MiB (23 counted). The fullest moment is b's
    # backward: parameters and momentum 10, saved 6, the root gathered and its gradients 10,
    # b gathered and its gradients 6, a's gather prefetched (or kept) 2: 34 MiB, 11 beyond.
    assert predicted.memory[0] == RankMemory(15 * MIB, 8 * MIB, unsharded_bytes=11 * MIB)
    kept = data_parallel.fsdp(uneven, 2, FREE, reshard=False)
    assert kept.memory[0] == RankMemory(15 * MIB, 8 * MIB, unsharded_bytes=11 * MIB)


# Stem and head 1 MiB each, four middle blocks of 1, 1, 4 and 4 MiB.
FOUR = replace(ON_GPU, blocks=tuple(
    BlockProfile(name, 1.0, 1.0, 1.0, output_bytes=MIB, parameter_sizes=(size * MIB,),
                 saved_bytes=2 * MIB)
    for name, size in zip(("stem", "a", "b", "c", "d", "head"), (1, 1, 1, 4, 4, 1),
                          strict=True)))


@pytest.mark.parametrize("units, unsharded_mib", [
    (data_parallel.Units.per_block(FOUR), 9),
    (data_parallel.Units.per_block(FOUR, reshard=False), 10),
    (data_parallel.Units(((1,), (2,), (3,), (4,)), (True, True, True, False)), 9),
    (data_parallel.Units(((1,), (2,), (3,), (4,)), (False, False, True, True)), 10),
    # Two layer groups (2 and 8 MiB), 30 MiB counted. The fullest moment is the second's
    # backward: parameters and momentum 12, saved 10, the root and its gradients 4, the
    # group and its gradients 16, the first's gather prefetched 2: 44 MiB, 14 beyond.
    (data_parallel.Units(((1, 2), (3, 4)), (True, True)), 14),
    # The same in bf16 (saved 6 MiB: c and d saved only their weights), 24 counted: the
    # first's backward, with the second's fp32 reduce-scatter input (8) still held: 12 + 4
    # (its sharded gradients) + 1 (the root's gradients) + 8 + 4.5 saved + 3 (the group and
    # its gradients, and the root, in bf16) = 32.5 MiB, 8.5 beyond.
    (data_parallel.Units(((1, 2), (3, 4)), (True, True), 0.5), 8.5),
])
def test_fsdp_holds_in_full_what_its_fullest_moment_holds(units, unsharded_mib):
    predicted = data_parallel.fsdp(FOUR, 2, FREE, units=units)
    assert predicted.memory[0].unsharded_bytes == unsharded_mib * MIB
    assert predicted.memory[0].state_bytes == 3 * 12 * MIB / 2  # sharded whatever is gathered
    # 12 MiB saved by the profile's autocast, a 16-bit copy of every weight (6 MiB) among them
    # where the policy's gathered 16-bit parameters are saved instead
    copies = 6 * MIB if units.gathered_per_byte < 1 else 0
    assert predicted.memory[0].activation_bytes == 12 * MIB - copies


def test_layer_group_units_gather_and_reduce_their_blocks_at_once():
    # One unit of a and b (2 MiB): forward, the root 0-1 s, the stem 1-2 s, the unit gathered
    # 1-2 s (issued ahead on a GPU), a and b 2-4 s, head 4-5 s. Backward: head 5-7 s, the unit
    # gathered again 5-6 s, b 7-9 s, a 9-11 s, reduced 11-12 s; stem 11-13 s, the root reduced
    # 13-14 s.
    link = Recording(all_gather=0.5, reduce_scatter=0.5)
    group = data_parallel.Units(((1, 2),), (True,))
    assert data_parallel.fsdp(ON_GPU, 2, link, units=group).step_time_s == pytest.approx(14.0)
    assert link.calls == [("all_gather", 2 * MIB, 2), ("all_gather", 2 * MIB, 2),
                          ("all_gather", 2 * MIB, 2), ("reduce_scatter", 2 * MIB, 2),
                          ("reduce_scatter", 2 * MIB, 2)]


def test_except_last_gathers_the_last_unit_once_and_mixed_precision_halves_the_gathers():
    link = Recording(all_gather=0.5, reduce_scatter=0.5)
    except_last = data_parallel.Units(((1,), (2,)), (True, False), gathered_per_byte=0.5)
    data_parallel.fsdp(ON_GPU, 2, link, units=except_last)
    # b (the last unit) is not gathered again for backward; a is. Gathers carry 16-bit
    # parameters, reductions fp32 gradients.
    assert link.calls == [("all_gather", MIB, 2), ("all_gather", MIB / 2, 2),
                          ("all_gather", MIB / 2, 2), ("reduce_scatter", MIB, 2),
                          ("all_gather", MIB / 2, 2), ("reduce_scatter", MIB, 2),
                          ("reduce_scatter", 2 * MIB, 2)]


def test_hsdp_all_reduces_each_shard_across_the_groups_behind_the_reduce_scatter():
    # 4 ranks in 2 groups of 2: gathers and reduce-scatters over 2 ranks (1 MiB: 0.5 s), and
    # each reduce-scattered shard (half) all-reduced over the 2 groups (0.5 MiB: 0.5 s).
    # Forward: the root 1 s, the units' gathers hidden, compute ends at 5 s. Backward: the
    # head 5-7 s, unit b 7-9 s then its reduction 9-10 s, unit a 9-11 s, then 11-12 s, the
    # stem 11-13 s, the root's reduction (1 s + 1 s) 13-15 s.
    link = Recording(all_gather=0.5, reduce_scatter=0.5, all_reduce=1.0)
    predicted = data_parallel.hsdp(ON_GPU, 4, 2, link)
    assert predicted.step_time_s == pytest.approx(15.0)
    assert predicted.bubble == pytest.approx(1 - 12.0 / 15.0)
    assert predicted.strategy == "hsdp" and predicted.global_batch == 16
    assert len(predicted.memory) == 4
    assert ("all_reduce", MIB / 2, 2) in link.calls and link.calls[-1] == ("all_reduce", MIB, 2)
    assert [call[0] for call in link.calls].count("all_reduce") == 3  # after each reduce-scatter
    assert data_parallel.hsdp(ON_GPU, 4, 2, SLOW).step_time_s == pytest.approx(15.0)
    # The same on a CPU, where gloo's collectives block: every one after the compute, the
    # gathers 1 + 4 x 0.5, the reductions 2 x (0.5 + 0.5) + (1 + 1).
    assert data_parallel.hsdp(PROFILE, 4, 2, SLOW).step_time_s == \
        pytest.approx(12.0 + 3.0 + 4.0)
    # With its optimiser (2 s, half of it on each shard): 1 s more, busy 13 s of 16.
    stepping = data_parallel.hsdp(replace(ON_GPU, optimizer_s=2.0), 4, 2, SLOW)
    assert stepping.step_time_s == pytest.approx(16.0)
    assert stepping.bubble == pytest.approx(3.0 / 16.0)
    # hsdp with one group is fsdp.
    assert data_parallel.hsdp(ON_GPU, 2, 2, SLOW).step_time_s == \
        pytest.approx(data_parallel.fsdp(ON_GPU, 2, SLOW).step_time_s)


def test_fsdp_on_a_free_link_is_busy_throughout():
    stepping = replace(PROFILE, optimizer_s=2.0)
    predicted = data_parallel.fsdp(stepping, 2, FREE)
    assert predicted.step_time_s == pytest.approx(13.0) and predicted.bubble == 0.0
    # A slow link on a GPU: the root's gather and reduction show, 2 s of 15.
    slow = data_parallel.fsdp(replace(ON_GPU, optimizer_s=2.0), 2, SLOW)
    assert slow.step_time_s == pytest.approx(15.0)
    assert slow.bubble == pytest.approx(2.0 / 15.0)


def test_units_whose_gathers_outlast_their_compute_show_them_in_both_directions():
    # Units of 8 MiB between a stem and head of 1 MiB, on a GPU: each unit's gather and
    # reduction (4 s) outlasts its 3 s of compute. Forward: the root 0-1 s, stem 1-2 s, unit a
    # gathered 1-5 s and run 5-6 s, b gathered 5-9 s and run 9-10 s, head 10-11 s. Backward:
    # head 11-13 s, b gathered 11-15 s and run 15-17 s, reduced 17-21 s; a gathered 15-19 s and
    # run 19-21 s, reduced 21-25 s; stem 21-23 s; the root reduced 25-26 s.
    sizes = (1, 8, 8, 1)
    big = replace(ON_GPU, blocks=tuple(replace(b, parameter_sizes=(s * MIB,))
                                       for b, s in zip(BLOCKS, sizes, strict=True)))
    predicted = data_parallel.fsdp(big, 2, SLOW)
    assert predicted.step_time_s == pytest.approx(26.0)
    assert predicted.bubble == pytest.approx(1 - 12.0 / 26.0)


def test_a_records_settings_name_its_units():
    """fsdp's settings as a record keeps them, read into the units the model gathers."""
    from parbench.advisor.runs.records import settings_of, sharded_units
    from parbench.families.workloads import Workload

    names = ("stem", *(f"layer{i}.{j}" for i in range(1, 5) for j in range(2)), "head")
    resnet18 = replace(PROFILE, blocks=tuple(replace(BLOCKS[0], name=name) for name in names))
    bf16, fp32 = Workload("resnet18", 32, precision="bf16"), Workload("resnet18", 32)
    parbench_defaults = dict(fsdp_units="group", reshard_after_forward="except-last",
                             mixed_precision=True)
    assert sharded_units(parbench_defaults, bf16, resnet18) == data_parallel.Units(
        ((1, 2), (3, 4), (5, 6), (7, 8)), (True, True, True, False), gathered_per_byte=0.5)
    torch_defaults = dict(fsdp_units="block", reshard_after_forward="yes", mixed_precision=False)
    per_block = data_parallel.Units.per_block(resnet18)
    assert sharded_units(torch_defaults, bf16, resnet18) == per_block
    assert sharded_units({**torch_defaults, "reshard_after_forward": "no"}, fp32, resnet18) == \
        data_parallel.Units.per_block(resnet18, reshard=False)
    # A record from before settings were recorded: its options, at torch's defaults.
    old = dict(strategy="fsdp", strategy_options={"reshard_after_forward": "yes"})
    assert sharded_units(settings_of(old), fp32, resnet18) == per_block
    assert settings_of({**old, "strategy_settings": parbench_defaults}) == parbench_defaults


# Stem, head, c and d 1 MiB each; a and b 4 MiB each: units (a, b) of 8 MiB, (c, d) of 2.
GROUPS = replace(ON_GPU, blocks=tuple(replace(FOUR.blocks[i], parameter_sizes=(size * MIB,))
                                      for i, size in enumerate((1, 4, 4, 1, 1, 1))))


def test_a_layer_groups_gather_is_issued_as_the_unit_before_starts():
    # Gathers 0.5 s a MiB, reductions free. Forward: the root 0-1 s, the stem 1-2 s, (a, b)
    # gathered 1-5 s and run 5-7 s, (c, d) gathered 5-6 s and run 7-9 s, the head 9-10 s.
    # Backward, every unit gathered again: the head 10-12 s; (c, d) 10-11 s, run 12-16 s;
    # (a, b) prefetched as (c, d) starts, 12-16 s (not as c starts, 14 s), run 16-20 s; the
    # stem 20-22 s.
    link = Recording(all_gather=0.5, reduce_scatter=0.0)
    groups = data_parallel.Units(((1, 2), (3, 4)), (True, True))
    assert data_parallel.fsdp(GROUPS, 2, link, units=groups).step_time_s == pytest.approx(22.0)


def test_a_cpu_ranks_gathers_and_reductions_block_its_compute():
    # gloo's collectives wait in the rank that issued them, cores shared or not: 18 s of
    # compute, then the root's gather (1 s), the units' four (4 + 1 + 1 + 4 s), their
    # reductions (1 + 4 s) and the root's (1 s), none hidden.
    link = Recording(all_gather=0.5, reduce_scatter=0.5)
    groups = data_parallel.Units(((1, 2), (3, 4)), (True, True))
    on_cpu = replace(GROUPS, device="cpu")
    assert data_parallel.fsdp(on_cpu, 2, link, units=groups).step_time_s == \
        pytest.approx(18.0 + 1 + 10 + 5 + 1)
    assert data_parallel.fsdp(on_cpu, 2, FREE, units=groups).step_time_s == pytest.approx(18.0)
