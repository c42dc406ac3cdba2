"""recommend for GPUs not at hand: each step carried from parbench's GPU reference steps, the
GPU's memory its data sheet's, nothing timed here; refusals in one line."""

import pytest

from parbench.cli import main

FLAGS = ["recommend", "--devices", "2", "--batch-size", "16", "--model", "resnet18",
         "--image-size", "32", "--precision", "bf16", "--link", "nvlink4"]


def test_a_gpu_named_is_recommended_for_from_the_reference_steps(capsys, tmp_path):
    assert main([*FLAGS, "--gpu", "H100 SXM5 80 GB", "--profile-cache", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "on 2 H100 SXM5 80 GB (carried from parbench's GPU reference steps" in out
    assert f"memory {80 * 1024:g} MiB a device" in out  # the data sheet's 80 GB, read as GiB
    assert "carried: micro-batch 16 on H100 SXM5 80 GB" in err
    assert "from NVIDIA H100 80GB HBM3's measured step" in err  # its own GPU's, where measured
    assert list(tmp_path.glob("resnet18-32px-*-cpu-1t-b*.json"))  # the memory's CPU profile


def test_without_a_gpu_a_gpu_link_recommends_for_the_reference_gpu(monkeypatch):
    """Without --gpu, on a machine with no GPU, a GPU link's devices are the reference GPU
    (what is said and used: checked where it is decided, before anything is profiled)."""
    import argparse

    import torch

    from parbench.commands.recommend import _gpu_not_here

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = argparse.Namespace(gpu=None, profile_device=None, link="nvlink4")
    assert _gpu_not_here(args, None).label == "H200 SXM 141 GB"
    for given in (dict(profile_device="cpu"), dict(link="ethernet100")):
        assert _gpu_not_here(argparse.Namespace(**{**vars(args), **given}), None) is None


@pytest.mark.parametrize(("extra", "message"), [
    (["--gpu", "H300"], "--gpu H300: no such GPU in the GPU table; give one of"),
    (["--gpu", "H200 SXM 141 GB", "--confirm", "1"], "which --confirm and --on cannot measure"),
])
def test_a_gpu_that_cannot_be_is_one_line_and_exit_2(capsys, extra, message):
    assert main([*FLAGS, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
