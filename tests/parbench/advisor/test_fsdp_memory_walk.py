"""FSDP's predicted peak memory (data_parallel's walk of FSDP2's allocations) against what FSDP2
allocates, measured by torch's FSDPMemTracker over its fake process group
(benchmarks/fsdp_memory/check.py), on resnet18 at 32 px: blocks in fp32, layer groups under the
bf16 mixed-precision policy."""

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch.testing._internal.distributed.fake_pg",
                    reason="torch's fake process group, which the check measures over")
ROOT = Path(__file__).resolve().parents[3]
SPEC = importlib.util.spec_from_file_location("fsdp_memory_check",
                                              ROOT / "benchmarks/fsdp_memory/check.py")
check = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(check)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("precision, units", [("fp32", "block"), ("bf16", "group")])
def test_the_walk_holds_what_fsdp2_allocates(tmp_path, precision, units):
    config = dict(model="resnet18", image_size=32, batch=8, ranks=2, strategy="fsdp",
                  precision=precision, options={"fsdp_units": units})
    row = check.row(config, tmp_path)
    # Allocations do not depend on the machine: the walk is within 0.1% and 0.5% on these
    # (results/20261129T130000Z-fsdp-memory-dev; BatchNorm's fp32 units under the policy are
    # walked as 16-bit with their unit).
    assert abs(row["error"]) < 0.04, row
    # What FSDP holds beyond the counted tensors is over a third of the peak on these
    # (version 19 walked the units gathered at once, no gradient in full: 6.5% and 15.4% low).
    assert row["predicted_peak_mib"] - row["counted_mib"] > 0.2 * row["measured_peak_mib"]
