"""`parbench profile`: its refusals (one line, exit 2, nothing measured), a profile per
micro-batch written as it finishes, one that runs out of memory said in a line while the
next is still measured, and the summary table."""

import pytest
import torch

from parbench.advisor.profiling.op_profile import read_op_profile
from parbench.cli import main
from parbench.commands import profile as profile_command

TINY = ["profile", "--model", "resnet18", "--image-size", "32", "--device", "cpu",
        "--steps", "1"]


def _run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize(("flags", "says"), [
    (["--model", "resnet7"], "unknown model 'resnet7'"),
    (["--image-size", "16"], "resnet18 cannot train on it"),
    (["--micro-batch", "1"], "resnet18 at 32 px trains on at least 2 images"),
    (["--precision", "fp8"], "unknown precision 'fp8'"),
    (["--cudnn-benchmark"], "--cudnn-benchmark applies to CUDA only"),
    (["--device", "gpu"], "give cpu, cuda or cuda:N"),
    (["--steps", "0"], "--steps must be at least 1"),
])
def test_a_bad_flag_is_one_line_and_exit_2(capsys, tmp_path, flags, says):
    status, out, err = _run(capsys, *TINY, "--micro-batch", "2", "--into", str(tmp_path / "p"),
                            *flags)
    assert status == 2
    assert err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "p").exists()  # refused before anything is measured


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here")
def test_cuda_without_a_gpu_is_refused(capsys, tmp_path):
    status, _, err = _run(capsys, *TINY[:-4], "--device", "cuda", "--into", str(tmp_path))
    assert status == 2 and "no CUDA GPU here" in err and err.count("\n") == 1


def test_bf16_on_a_gpu_that_cannot_is_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *_, **__: False)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "Tesla V100")
    status, _, err = _run(capsys, "profile", "--model", "resnet18", "--image-size", "32",
                          "--precision", "fp32,bf16", "--device", "cuda:0",
                          "--into", str(tmp_path))
    assert status == 2 and err.count("\n") == 1
    assert "Tesla V100 cannot compute in bfloat16" in err


def test_a_profile_out_of_memory_is_one_line_and_the_next_is_still_written(
        capsys, tmp_path, monkeypatch):
    measure = profile_command.measure_op_profile

    def first_runs_out(workload, micro_batch, *args):
        if micro_batch == 4:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return measure(workload, micro_batch, *args)

    monkeypatch.setattr(profile_command, "measure_op_profile", first_runs_out)
    status, out, _ = _run(capsys, *TINY, "--micro-batch", "4,2", "--into", str(tmp_path))
    assert status == 1
    lines = out.splitlines()
    assert lines[0] == ("[1/2] resnet18 32px fp32 b4 on cpu: out of memory; the next "
                        "profile goes on")
    assert lines[1].startswith("[2/2] resnet18 32px fp32 b2 on cpu: step ")
    assert [path.name for path in tmp_path.iterdir()] == ["resnet18-32px-fp32-cpu-1t-b2.json"]
    stored = read_op_profile(tmp_path / "resnet18-32px-fp32-cpu-1t-b2.json")
    assert stored["micro_batch"] == 2 and stored["rows"]
    header, row = lines[2:4]
    assert header.split() == ["profile", "step", "ms", "ops", "ms", "share", "host", "ms",
                              "GFLOP", "GB", "TFLOP/s"]
    assert row.startswith("resnet18 32px fp32 b2 on cpu")
    assert float(row.split()[-3]) == pytest.approx(stored["totals"]["flops"] / 1e9, abs=1e-3)
    assert lines[4] == f"profiles: {tmp_path} (1 written, 1 failed)"
