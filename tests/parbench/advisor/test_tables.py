"""Published tables described in files: each row predicted from the setup alone, carried from
a GPU reference step, beside perfect scaling; a bad setup is one line."""

import json

import pytest

from parbench.advisor.carried.gpu_references import REFERENCES, choose_reference
from parbench.advisor.tables.predict import predict_setup
from parbench.advisor.tables.setup import read_setup
from parbench.machine.gpus import gpu_named

H200 = REFERENCES[1]  # bf16, channels_last, batch 256, without cuDNN's search


def _setup(tmp_path, **changes):
    values = {"name": "test", "source": "made up", "gpu": "H200 SXM 141 GB",
              "model": H200.model, "image_size": H200.image_size, "precision": "bf16",
              "channels_last": True, "strategy": "ddp",
              "link": {"name": "nvlink", "busbw_gbps": 100, "latency_us": 3, "source": "made up"},
              "data": {"kind": "synthetic", "source": "made up"},
              "rows": [{"devices": 1, "batch_per_device": H200.batch},
                       {"devices": 4, "batch_per_device": H200.batch}]}
    values.update(changes)
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(values))
    return read_setup(path)


def test_a_row_on_the_reference_gpu_gives_back_its_measured_step(tmp_path):
    [one, four] = predict_setup(_setup(tmp_path), reference_gpu=H200.gpu)
    assert one["predicted_single_ips"] == pytest.approx(H200.throughput_ips, rel=1e-9)
    assert one["kind"] == "PREDICTED" and H200.run in one["carried_from"]
    assert four["perfect_scaling_ips"] == pytest.approx(4 * one["predicted_single_ips"])
    assert four["predicted_ips"] < four["perfect_scaling_ips"]  # the all-reduce shows
    assert four["without_communication_ips"] == pytest.approx(four["perfect_scaling_ips"])


def test_a_host_decoding_the_images_caps_the_rows_at_its_cores_rate(tmp_path):
    data = {"kind": "jpeg-cpu", "host_cores": 10, "workers_per_device": 2, "source": "made up"}
    [one, four] = predict_setup(_setup(tmp_path, data=data), loader_rate=100.0,
                                reference_gpu=H200.gpu)
    assert one["loader_cap_ips"] == 2 * 100.0  # one GPU's two workers
    assert four["loader_cap_ips"] == 6 * 100.0  # eight workers, six cores left by four GPUs
    assert four["predicted_ips"] == 600.0 < four["without_loader_cap_ips"]
    [uncapped, _] = predict_setup(_setup(tmp_path, data=data), reference_gpu=H200.gpu)
    assert uncapped["loader_cap_ips"] is None  # no rate measured: said, not guessed


def test_the_reference_is_another_gpus_of_the_same_job_where_one_was_measured():
    h100, h200 = gpu_named("NVIDIA H100 80GB HBM3"), gpu_named("NVIDIA H200")
    assert choose_reference("resnet50", 224, "bf16", True, h100).gpu == "NVIDIA H200"
    assert choose_reference("resnet50", 224, "bf16", True, h200).gpu == "NVIDIA H100 80GB HBM3"
    fp32 = choose_reference("resnet101", 224, "fp32", False, gpu_named("Tesla P40"))
    assert (fp32.model, fp32.precision, fp32.gpu) == ("resnet50", "fp32", "NVIDIA H200")
    assert choose_reference("resnet50", 224, "fp16", True, h100).precision == "bf16"


@pytest.mark.parametrize(("change", "message"), [
    ({"gpu": "H300"}, "no GPU 'H300' in the GPU table; give one of"),
    ({"strategy": "fsdp"}, "unknown strategy 'fsdp'; choose from ddp, torchgpipe"),
    ({"rows": []}, "no rows to predict"),
    ({"rows": [{"devices": 2}]}, "row 1: no 'batch_per_device'"),
    ({"data": {"kind": "jpeg-cpu", "source": "x"}}, "no 'host_cores'"),
    ({"data": {"kind": "jpeg-cpu", "host_cores": 4, "source": "x"}},
     "'host_cores' 4 leaves no core for the loader beside 4 GPUs' processes"),
    ({"data": {"kind": "jpeg-cpu", "host_cores": 64, "workers_per_device": "16",
               "source": "x"}}, "'workers_per_device' is '16', not a int"),
    ({"rows": [{"devices": 0, "batch_per_device": 8}]}, "'devices' is 0; give 1 or more"),
    ({"strategy": "torchgpipe", "rows": [{"batch": 8, "chunks": 2, "balance": [370],
                                         "checkpoint": "except_last"}]}, "'baseline_batch'"),
    ({"strategy": "torchgpipe", "baseline_batch": 8,
      "rows": [{"batch": 8, "chunks": 0, "balance": [370], "checkpoint": "never"}]},
     "'chunks' is 0; give 1 or more"),
    ({"strategy": "torchgpipe", "baseline_batch": 8,
      "rows": [{"batch": 8, "chunks": 2, "balance": ["370"], "checkpoint": "never"}]},
     "'balance' is ['370']; give each stage's layers"),
])
def test_a_bad_setup_is_one_line_saying_what_to_give(tmp_path, change, message):
    with pytest.raises(ValueError, match="^.*$") as raised:
        _setup(tmp_path, **change)
    assert message in str(raised.value) and "\n" not in str(raised.value)
