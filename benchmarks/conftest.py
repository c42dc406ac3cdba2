"""The pytest-benchmark suite's hooks: benchmarks run only under --benchmark-only (plain
`pytest` stays quick), and machine info names torch, CUDA and the devices."""

import pytest

from parbench.machine.environment import collect_environment


def pytest_collection_modifyitems(config, items):
    if config.getoption("benchmark_only", default=False):
        return
    skip = pytest.mark.skip(reason="a benchmark: run it with pytest --benchmark-only")
    for item in items:
        if "benchmark" in getattr(item, "fixturenames", ()):
            item.add_marker(skip)


def pytest_benchmark_update_machine_info(config, machine_info):
    environment = collect_environment()
    machine_info["parbench"] = {
        key: environment.get(key)
        for key in ("torch_version", "torchvision_version", "cuda_version", "cudnn_version",
                    "nccl_version", "gpu_names", "gpu_driver", "gpu_count", "cpu_model",
                    "cpu_cores_available", "git_commit")
    }
