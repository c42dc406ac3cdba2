"""What many test modules share (`from tests.support import ...`; pytest's pythonpath holds
the project's root): two emulated CPU devices, the tiny workload's command-line flags, an ok
record of it, and this process's children."""

from __future__ import annotations

import os
from pathlib import Path

from parbench.machine.devices import parse_devices
from parbench.results.record import Record

__all__ = ["CPU2", "TINY_FLAGS", "child_pids", "children", "ok_record", "plain_pytest_env"]

CPU2 = parse_devices("cpu,cpu")
# The tiny workload on the command line: a ResNet-18 at 32 px with 10 classes (conftest's
# tiny_workload); each test adds its strategy, devices, batch and steps.
TINY_FLAGS = ["--model", "resnet18", "--image-size", "32", "--num-classes", "10"]


def plain_pytest_env() -> dict[str, str]:
    """This environment without pytest-xdist's worker variables, for a pytest started by a
    test: pytest-benchmark reads them as xdist being on and refuses --benchmark-only."""
    return {key: value for key, value in os.environ.items()
            if not key.startswith("PYTEST_XDIST_")}


def ok_record(strategy: str = "single", **fields) -> Record:
    """An ok record of the tiny workload at batch 8 on CPU; `fields` set the rest (or
    override these)."""
    return Record(**{**dict(status="ok", strategy=strategy, strategy_options={},
                            model="resnet18", image_size=32, num_classes=10, precision="fp32",
                            channels_last=False, global_batch=8, device_kind="cpu"),
                     **fields})


def children(parent: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of each child of `parent`, read from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent:
            found.append((int(stat.parent.name), command))
    return found


def child_pids() -> list[int]:
    """The processes this one started, less multiprocessing's resource tracker and fork server
    (each started with the first worker, they live exactly as long as this process), but with
    the fork server's children: the workers it forked for this process."""
    pids = []
    for pid, command in children(os.getpid()):
        if b"forkserver" in command:
            pids += [child for child, _ in children(pid)]
        elif b"resource_tracker" not in command:
            pids.append(pid)
    return pids
