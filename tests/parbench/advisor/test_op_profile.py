"""Per-operation profiles on CPU: every block and phase, FLOPs exactly FlopCounterMode's,
bytes of a known operation, times inside their steps, and the file read back."""

import gzip
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from parbench.advisor.profiling.op_profile import (
    OpProfile,
    measure_op_profile,
    read_op_profile,
    rows_of,
    write_op_profile,
)
from parbench.advisor.profiling.op_profile import store as op_store
from parbench.families.workloads import Workload

RESNET = Workload(model="resnet18", image_size=32)
VIT = Workload(model="vit_b_16", image_size=16)  # its smallest: one patch
STAMP = {"git_commit": "abc123", "torch_version": torch.__version__, "host": "here"}


def _profile(workload: Workload, steps: int) -> OpProfile:
    return measure_op_profile(workload, 2, "cpu", threads=1, steps=steps, environment=STAMP)


@pytest.fixture(scope="module")
def resnet() -> OpProfile:
    return _profile(RESNET, steps=2)


@pytest.fixture(scope="module")
def stored(resnet, tmp_path_factory) -> dict:
    return read_op_profile(write_op_profile(resnet, tmp_path_factory.mktemp("profiles")))


def _flop_counter_step(workload: Workload) -> dict[str, int]:
    """FlopCounterMode's FLOPs per operator over one training step of `workload` at 2 images,
    the optimiser's too, counted on the meta device: the formulas read shapes only, and on
    a CPU FlopCounterMode runs every operator it has no formula for as its decomposition
    (seconds for a ResNet-18)."""
    with torch.device("meta"):
        model = workload.family.build(workload.model, workload.image_size,
                                      workload.num_classes).train()
        images = torch.empty(2, 3, workload.image_size, workload.image_size)
        labels = torch.zeros(2, dtype=torch.long)
    optimizer = workload.make_optimizer(model.parameters())
    with FlopCounterMode(display=False) as counter:
        workload.loss_fn()(model(images), labels).backward()
        optimizer.step()
    return {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}


def _flops_per_operator(rows) -> dict[str, int]:
    flops: dict[str, int] = {}
    for row in rows:
        if row.flops:
            name = row.op.removeprefix("aten::")
            flops[f"aten.{name}"] = flops.get(f"aten.{name}", 0) + row.flops
    return flops


def _blocks_and_phases(workload: Workload) -> set[tuple[str, str]]:
    """Every block's forward and backward, the loss's, and the optimiser's step."""
    blocks = [name for name, _ in workload.family.blocks(workload.build_model())]
    return {(block, phase) for block in [*blocks, "loss"] for phase in ("forward", "backward")
            } | {("optimizer", "optimizer")}


def test_every_block_has_a_forward_and_a_backward_and_the_loss_and_optimiser_theirs(stored):
    assert stored["blocks"] == [name for name, _ in RESNET.family.blocks(RESNET.build_model())]
    assert {(row.block, row.phase) for row in rows_of(stored)} == _blocks_and_phases(RESNET)


def test_convolution_and_matmul_flops_are_flop_counter_modes_exactly(resnet):
    counted = _flop_counter_step(RESNET)
    assert {"aten.convolution", "aten.convolution_backward", "aten.addmm", "aten.mm"} \
        <= set(counted)
    assert _flops_per_operator(resnet.measured.rows) == counted
    assert resnet.flops == sum(counted.values())


def test_a_vision_transformers_matmul_flops_too():
    profile = _profile(VIT, steps=1)
    counted = _flop_counter_step(VIT)
    measured = _flops_per_operator(profile.measured.rows)
    # On the meta device attention runs as matrix products (bmm); on a CPU as one kernel that
    # flop_counter has no formula for: its FLOPs are neither's here.
    for op in ("aten.convolution", "aten.convolution_backward", "aten.addmm", "aten.mm"):
        assert measured[op] == counted[op], op
    assert {(row.block, row.phase) for row in profile.measured.rows} == _blocks_and_phases(VIT)
    assert ("embed", "backward", "aten::convolution_backward") in {
        (row.block, row.phase, row.op) for row in profile.measured.rows}


def test_the_first_convolution_reads_its_input_and_weight_and_writes_its_output(resnet):
    model = RESNET.build_model()
    images, _ = RESNET.make_batch(2, "cpu")
    output = model.conv1(images)
    [row] = [row for row in resnet.measured.rows
             if (row.block, row.phase, row.op) == ("stem", "forward", "aten::convolution")]
    size = torch.Tensor.nbytes.__get__
    assert row.bytes_read == size(images) + size(model.conv1.weight)
    assert row.bytes_written == size(output)
    assert row.input_shapes[:2] == ((2, 3, 32, 32), (64, 3, 7, 7))
    assert (row.count, row.dtype, row.flops) == (1, "float32", 2 * output.numel() * 3 * 7 * 7)


def test_times_are_positive_and_the_operations_fit_in_their_steps(stored):
    rows = rows_of(stored)
    assert all(row.device_s >= 0 and row.host_s >= 0 for row in rows)
    assert all(row.device_s > 0 for row in rows if row.op == "aten::convolution")
    for block in stored["blocks"]:
        assert sum(row.device_s for row in rows if row.block == block) > 0, block
    step = stored["step"]
    assert step["step_s"] > 0 and len(step["step_s_each"]) == 2
    # Each step's operations run one after another inside it, on a CPU in its own time.
    for wall, device, host in zip(step["profiled_step_s_each"], step["ops_device_s_each"],
                                  step["ops_host_s_each"], strict=True):
        assert 0 < device == host <= wall
    totals = stored["totals"]
    assert totals["ops_device_s"] == pytest.approx(sum(row.device_s for row in rows))
    assert totals["ops_share_of_step"] == pytest.approx(totals["ops_device_s"] / step["step_s"])


def test_the_file_names_its_settings_and_where_it_was_measured(stored, resnet):
    assert stored["format_version"] == op_store.FORMAT_VERSION
    assert stored["workload"]["model"] == "resnet18" and stored["micro_batch"] == 2
    assert stored["device"] == "cpu" and stored["threads"] == 1
    assert stored["device_name"] and stored["measured_utc"].endswith("+00:00")
    assert stored["provenance"]["git_commit"] == "abc123"
    assert rows_of(stored) == list(resnet.measured.rows)


def test_a_large_profile_is_gzipped(resnet, tmp_path, monkeypatch):
    monkeypatch.setattr(op_store, "GZIP_OVER_BYTES", 1000)
    path = write_op_profile(resnet, tmp_path)
    assert path.name == "resnet18-32px-fp32-cpu-1t-b2.json.gz"
    assert json.loads(gzip.decompress(path.read_bytes()))["rows"]
    assert rows_of(read_op_profile(path)) == list(resnet.measured.rows)
