"""The published tables' comparison is what its script writes from the committed predictions;
the level and recomputation transforms and torchgpipe's cuts give their known answers."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from parbench.advisor import version
from parbench.advisor.models import models
from parbench.advisor.profiling.profile import BlockProfile, Profile, stored_profile
from parbench.advisor.tables.published_predictions import (
    at_published_level,
    predict_data_parallel,
    predict_pipeline,
    recomputed,
    torchgpipe_partition,
)
from parbench.advisor.tables.published_tables import DLE_RESNET50, TORCHGPIPE_RESNET101
from tests.support import script

ROOT = Path(__file__).resolve().parents[3]
TABLES = ROOT / "results" / "published-tables"
MIB = 2**20
# resnet101's blocks as parbench cuts them: the stem, 33 bottlenecks, the head.
NAMES = ("stem", *(f"block{i}" for i in range(33)), "head")
PROFILE = Profile("resnet101", 224, "fp32", 1000, False, "cpu", 1, 8, 3, tuple(
    BlockProfile(name, 1.0, 2.0, 1.0, output_bytes=MIB, parameter_sizes=(MIB,),
                 saved_bytes=4 * MIB) for name in NAMES), optimizer_s=5.0)


def _script(name: str):
    return script(f"benchmarks/published/{name}.py")


def _committed() -> dict:
    path = TABLES / "predictions.json"
    assert path.exists(), f"{path} is missing: run benchmarks/published/predict_tables.py"
    return json.loads(path.read_text())


def test_the_comparison_is_what_its_script_writes_from_the_committed_predictions():
    compare = _script("compare_tables")
    predictions = _committed()
    page = (TABLES / "comparison.md").read_text()
    assert page == compare.page(predictions)
    for row in compare.comparison_rows(predictions):
        assert f"| {row['name']} |" in page and f"{row['error_points']:+.2f}" in page


def test_the_committed_predictions_hold_no_published_multi_gpu_figure():
    predictions = _committed()
    assert predictions["kind"] == "predicted"
    assert predictions["predictor_version"] >= 1 and len(predictions["fingerprint"]) == 64
    text = json.dumps(predictions)
    for dle in DLE_RESNET50:
        assert f"{dle.multi_ips}" not in text
    for gpipe in TORCHGPIPE_RESNET101:
        assert f"{gpipe.pipeline_ips}" not in text


def _kept_profiles(predictions: dict) -> dict[str, Profile]:
    """The profiles the committed predictions were made from, read as they were kept whatever
    their version (stored_profile: read, never measured, so nothing under results/ is written
    again, as load_or_profile would where PROFILE_VERSION moved on)."""
    for model, kept in predictions["profiles"].items():
        assert (TABLES / kept["file"]).exists(), f"{kept['file']} of {model} is not kept"
    return {model: stored_profile(TABLES / kept["file"])
            for model, kept in predictions["profiles"].items()}


def test_the_current_models_make_the_committed_predictions_again_from_their_kept_profiles():
    """Today's models, not only the version that committed them: from the kept profiles they
    predict every published row, each from that table's single-GPU level, and predict it as
    committed. Where a change to the models moves a row, this fails: the comparison page
    would then judge models no longer in use (commit the new version's predictions beside
    the old, before comparing them)."""
    predictions = _committed()
    again = _script("predict_tables").predictions(_kept_profiles(predictions))
    assert again["predictor_version"] == version.PREDICTOR_VERSION
    assert [row["name"] for row in again["rows"]] == (
        [row.name for row in DLE_RESNET50] + [row.name for row in TORCHGPIPE_RESNET101])
    for row in again["rows"]:
        assert 0 < row["predicted_ips"] < float("inf"), row
        if row["kind"] == "data-parallel":  # from the published single GPU, never beyond N x it
            assert row["predicted_single_ips"] == pytest.approx(row["inputs"]["single_ips"])
            assert 0 < row["predicted_efficiency"] <= 1
        else:
            assert row["predicted_baseline_ips"] == pytest.approx(row["inputs"]["baseline_ips"])
            assert 0 <= row["predicted_bubble"] < 1
            assert row["predicted_speedup"] <= row["gpus"]
    text = json.dumps(again["rows"])  # predicted without the published multi-GPU figures
    for dle in DLE_RESNET50:
        assert f"{dle.multi_ips}" not in text
    for gpipe in TORCHGPIPE_RESNET101:
        assert f"{gpipe.pipeline_ips}" not in text
    assert again["rows"] == predictions["rows"], (
        f"the models (version {version.PREDICTOR_VERSION}) no longer predict the published "
        f"tables as the committed predictions (version {predictions['predictor_version']}) "
        "do: commit this version's predictions (benchmarks/published/predict_tables.py) "
        "beside them before comparing")


def test_the_level_reproduces_the_published_single_gpu_throughput():
    for images_per_s, batch in ((938.0, 256), (2470.0, 256), (95.862, 118)):
        leveled = at_published_level(PROFILE, batch, images_per_s)
        assert models.single(leveled, 1).throughput_ips == pytest.approx(images_per_s, rel=1e-12)
        assert leveled.optimizer_s == 0.0 and leveled.micro_batch == batch
        # The shape kept, the activations in proportion to the images.
        assert leveled.blocks[1].input_grad_s == pytest.approx(2 * leveled.blocks[1].forward_s)
        assert leveled.blocks[0].output_bytes == round(MIB * batch / 8)
        assert leveled.parameter_bytes == PROFILE.parameter_bytes


def test_recomputation_adds_the_share_of_the_forward_to_the_backward():
    again = recomputed(PROFILE, 0.5)
    for before, after in zip(PROFILE.blocks, again.blocks, strict=True):
        assert after.forward_s == before.forward_s
        assert after.input_grad_s + after.weight_grad_s == 3.5
    assert recomputed(PROFILE, 1.0).step_compute_s == 5.0 * len(NAMES)
    # One stage, two micro-batches, the first recomputed: 2 x (F + B) + F.
    one = models.tick_pipeline(recomputed(PROFILE, 0.5), torchgpipe_partition(NAMES, (370,)), 2)
    assert one.step_time_s == pytest.approx(2 * 4.0 * len(NAMES) + 1.0 * len(NAMES) + 5.0)


def test_torchgpipe_balances_become_cuts_between_blocks():
    eight = torchgpipe_partition(NAMES, (26, 22, 33, 44, 44, 66, 66, 69))
    # 4 stem layers then 11 a bottleneck: every cut of pipeline-8 falls between two of them.
    assert eight.bounds == (0, 3, 5, 8, 12, 16, 22, 28)
    assert torchgpipe_partition(NAMES, (135, 235)).bounds == (0, 13)  # 131 / 11 = 11.9 -> 12
    with pytest.raises(ValueError, match="370"):
        torchgpipe_partition(NAMES, (100, 100))


def test_a_prediction_reads_no_published_multi_gpu_figure():
    dle, gpipe = DLE_RESNET50[0], TORCHGPIPE_RESNET101[-1]
    assert predict_data_parallel(dle, PROFILE) == predict_data_parallel(
        replace(dle, multi_ips=1.0), PROFILE)
    assert predict_pipeline(gpipe, PROFILE) == predict_pipeline(
        replace(gpipe, pipeline_ips=1.0), PROFILE)
