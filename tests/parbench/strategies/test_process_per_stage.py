"""Process-per-stage pipelines through the spawn launcher (gloo on loopback, 2 ranks)."""

import math
from dataclasses import replace

import pytest

from parbench.drive.runner import run_config
from parbench.drive.verify import verify
from parbench.plan.config import Config
from tests.support import CPU2

# One step of each equals the single-device step: tests/parbench/strategies/test_conformance.py.


@pytest.mark.timeout(180)
def test_channels_last_stages_send_contiguous_activations_and_gradients(tiny_workload):
    # gloo sends contiguous tensors only; a channels_last stage's output and input gradient
    # are not, unless the stage makes them so.
    workload = replace(tiny_workload, image_size=64, channels_last=True)
    [verdict] = verify(workload, CPU2, ["pipeline-gpipe"], 8, {"split_size": 2},
                       tolerance=1e-5)
    assert verdict.error is None, verdict.error
    assert verdict.max_abs_difference <= 1e-5, verdict


@pytest.mark.timeout(180)
def test_a_measured_run_has_one_memory_figure_per_rank(tiny_workload):
    config = Config("pipeline-gpipe", tiny_workload, 8, CPU2, warmup=1, steps=2,
                    options={"split_size": 2})
    record = run_config(config)
    assert record.status == "ok", record.reason
    assert record.world_size == 2 and record.stages == 2
    assert record.micro_batches == 4
    assert record.bubble_fraction == pytest.approx(1 / 5)
    assert len(record.peak_memory_mib) == 2
    assert "one process per device" in record.memory_source
    assert isinstance(record.loss_last, float) and math.isfinite(record.loss_last)
    assert record.partition == "stem..layer2.1 | layer3.0..head"


@pytest.mark.timeout(180)
def test_a_failing_rank_is_named_and_leaves_no_process(tiny_workload, child_pids):
    broken = replace(tiny_workload)
    object.__setattr__(broken, "image_size", 0)  # past the plan's checks: stage 0's forward fails
    config = Config("pipeline-1f1b", broken, 8, CPU2, warmup=0, steps=1,
                    options={"split_size": 4}, timeout_s=120)
    record = run_config(config)
    assert record.status == "error"
    assert record.reason.startswith("LaunchError: rank ")
    assert child_pids() == []


@pytest.mark.timeout(180)
def test_1f1b_holds_fewer_activations_on_the_first_stage_than_gpipe(tiny_workload):
    """GPipe keeps all 8 micro-batches' activations until backward; 1F1B at most 2 (K)."""
    first_stage = {}
    for name in ("pipeline-gpipe", "pipeline-1f1b"):
        config = Config(name, replace(tiny_workload, image_size=64), 16, CPU2, warmup=1,
                        steps=1, options={"split_size": 2})
        record = run_config(config)
        assert record.status == "ok", record.reason
        first_stage[name] = record.peak_memory_mib[0]
    assert first_stage["pipeline-1f1b"] < 0.6 * first_stage["pipeline-gpipe"]
