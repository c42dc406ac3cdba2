import pytest
import torch

from parbench.machine.devices import DeviceError, parse_devices


def test_one_cpu_is_real():
    devices = parse_devices("cpu")
    assert devices.logical == (torch.device("cpu"),)
    assert not devices.emulated
    assert devices.kind == "cpu"


def test_repeated_physical_device_is_emulated():
    devices = parse_devices("cpu, cpu")
    assert len(devices) == 2
    assert devices.physical == (torch.device("cpu"),)
    assert devices.emulated
    assert devices.describe() == "cpu,cpu"


@pytest.mark.skipif(torch.cuda.device_count() > 3, reason="this host has a cuda:3")
def test_missing_gpu_is_refused_with_what_exists():
    with pytest.raises(DeviceError, match=r"cuda:3 is not available"):
        parse_devices("cuda:3")


@pytest.mark.parametrize("spec, message", [
    ("", "no device given"),
    ("tpu", "unknown device 'tpu'"),
    ("meta", "not supported"),
])
def test_bad_device_lists_are_refused(spec, message):
    with pytest.raises(DeviceError, match=message):
        parse_devices(spec)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_mixing_cpu_and_cuda_is_refused():
    with pytest.raises(DeviceError, match="mix CPU and CUDA"):
        parse_devices("cpu,cuda:0")
