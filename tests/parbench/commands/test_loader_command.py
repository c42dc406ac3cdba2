"""`parbench loader`: its lines, summary and JSON on a tiny folder, and its refusals."""

import json

import pytest

from parbench.cli import main

TINY = ["--jpeg-size", "64x48", "--crop-size", "16", "--repeats", "1", "--seconds", "0.01",
        "--warmup", "1", "--workers", "1", "--batch-size", "2"]


def test_loader_prints_each_measurement_and_writes_every_figure_with_provenance(
        capsys, tmp_path):
    status = main(["loader", "--images", "4", *TINY, "--folder", str(tmp_path / "images"),
                   "--into", str(tmp_path)])
    out = capsys.readouterr().out
    assert status == 0
    assert "round 1/1, per core:" in out and "round 1/1, DataLoader 1 worker: 4 images" in out
    assert "cores at this rate feed about" in out
    figures = json.loads((tmp_path / "loader.json").read_text())
    assert set(figures) == {"pipeline", "images", "imagenet_mean_file_bytes", "rounds", "per_core",
                            "data_loader", "implied", "decoder", "host", "environment"}
    assert figures["pipeline"]["transforms"][0].startswith("RandomResizedCrop(size=(16, 16)")
    assert figures["pipeline"]["api"] == "torchvision.transforms"
    images = figures["images"]
    assert (images["images"], images["synthetic"], images["jpeg_quality"]) == (4, True, 90)
    assert images["mean_file_bytes"] > 0 and images["formats"] == {"JPEG": 4}
    core = figures["per_core"]
    assert core["threads"] == 1 and len(core["repeats"]) == 1
    assert core["images_per_s_median"] == core["repeats"][0]["images_per_s"]
    run, = figures["data_loader"]["runs"]
    assert (run["workers"], run["scaling"], run["every_image_once"]) == (1, 1.0, True)
    assert figures["rounds"] == 1
    assert run["repeats"][0]["images"] == 4
    assert figures["implied"]["images_per_s"] == pytest.approx(
        core["images_per_s_median"] * figures["implied"]["cores"])
    for key in ("pil_version", "pil_simd", "libjpeg_turbo", "torchvision_version"):
        assert key in figures["decoder"]
    assert figures["host"]["cpu_model"] and figures["host"]["cpu_cores_available"] >= 1
    assert len(list((tmp_path / "images").rglob("*.jpg"))) == 4  # --folder keeps them

    assert main(["loader", "--data", str(tmp_path / "images"), *TINY]) == 0
    assert "4 images in 4 classes" in capsys.readouterr().out


@pytest.mark.parametrize("flags, says", [
    (["--data", "{empty}"], "Couldn't find any class folder"),
    (["--data", "{empty}/nowhere"], "no such folder"),
    (["--crop-size", "0"], "--crop-size must be at least 1"),
    (["--jpeg-size", "500"], "--jpeg-size '500' is not a picture size"),
    (["--jpeg-quality", "100"], "--jpeg-quality must be 1 to 95"),
    (["--folder", "{full}"], "is not an empty folder"),
    (["--data", "{full}", "--images", "8"], "drop --images and --folder"),
    (["--images", "2", "--batch-size", "2", "--workers", "2"], "fewer than 2 workers"),
    (["--workers", "1,x"], "--workers 'x' is not a whole number"),
])
def test_refusals_are_one_line_and_exit_2(capsys, tmp_path, flags, says):
    (tmp_path / "empty").mkdir()
    (tmp_path / "full" / "cats").mkdir(parents=True)
    (tmp_path / "full" / "cats" / "a.txt").write_text("")
    flags = [flag.format(empty=tmp_path / "empty", full=tmp_path / "full") for flag in flags]
    status = main(["loader", "--jpeg-size", "64x48", *flags])
    err = capsys.readouterr().err
    assert status == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_scaling_pairs_each_round_with_the_fewest_workers_same_round():
    from parbench.commands.loader import _scaling
    from parbench.measure.loader import Rates, Repeat

    mine = Rates([Repeat(10, 1.0), Repeat(30, 1.0), Repeat(20, 1.0)])
    fewest = Rates([Repeat(10, 1.0), Repeat(10, 1.0), Repeat(40, 1.0)])
    assert _scaling(mine, fewest) == {"scaling": 1.0, "scaling_min": 0.5, "scaling_max": 3.0}
    assert mine.median / fewest.median == 2.0  # what comparing the medians would have said
