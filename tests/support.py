"""What many test modules share (`from tests.support import ...`; pytest's pythonpath holds
the project's root): two emulated CPU devices, the tiny workload's command-line flags, an ok
record of it, this process's children (and whether one holds a TCP socket), a one-rank
process group, the GPU reference script's modules, any script of the repository loaded by its
path, and how a written figure is compared with the published one."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path

from parbench.machine.devices import parse_devices
from parbench.results.record import Record

__all__ = ["CPU2", "GPU_REFERENCE", "ROOT", "TINY_FLAGS", "child_pids", "children",
           "gpu_reference_modules", "holds_tcp_socket", "ok_record", "one_rank",
           "pins", "plain_pytest_env", "same_figure", "script", "source_files"]

ROOT = Path(__file__).resolve().parents[1]

CPU2 = parse_devices("cpu,cpu")
# The tiny workload on the command line: a ResNet-18 at 32 px with 10 classes (conftest's
# tiny_workload); each test adds its strategy, devices, batch and steps.
TINY_FLAGS = ["--model", "resnet18", "--image-size", "32", "--num-classes", "10"]
# The GPU reference run's script, and its modules by the short names tests give them.
GPU_REFERENCE = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu" / "reference.py"
_GPU_REFERENCE_MODULES = {"reference": "reference", "plan": "reference_plan",
                          "steps": "reference_steps", "summaries": "reference_summaries",
                          "host": "reference_host", "commit": "reference_commit",
                          "estimates": "reference_estimates"}


def source_files(*tops: str) -> list[Path]:
    """The project's own Python files under each of `tops` (folders from the root), sorted:
    none in a dot-folder (benchmarks/gpu/.carried holds timm's code, carried to a GPU host)."""
    return [path for top in tops for path in sorted((ROOT / top).rglob("*.py"))
            if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)]


def script(path: str) -> types.ModuleType:
    """A script of the repository by its path from the root (benchmarks/ is not an installed
    package), loaded as a module of its file's name."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def holds_tcp_socket(pid: int) -> bool:
    """Whether process `pid` holds a TCP socket (connected or listening), read from /proc: a
    rank that does has set itself up and reached its rendezvous store (parbench.launch.spawn:
    _die_with_parent runs first), so freezing it from then on is freezing a running rank."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").glob("*"):
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            if any(row.split()[9] in inodes
                   for row in Path(table).read_text().splitlines()[1:]):
                return True
    return False


@contextlib.contextmanager
def one_rank():
    """A process group of this process alone (gloo), for a strategy built in this process."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def gpu_reference_modules():
    """The GPU reference script's modules, imported from its folder as they import each other
    when it runs: .reference (the runner), .plan (its parts), .steps (what they are made of),
    .summaries, .host (wheels, install, checks), .commit, .estimates; forgotten again
    afterwards."""
    sys.path.insert(0, str(GPU_REFERENCE.parent))
    try:
        yield types.SimpleNamespace(**{short: importlib.import_module(name)
                                       for short, name in _GPU_REFERENCE_MODULES.items()})
    finally:
        sys.path.remove(str(GPU_REFERENCE.parent))
        for name in _GPU_REFERENCE_MODULES.values():
            sys.modules.pop(name, None)


def pins() -> dict[str, str]:
    """constraints.txt's pinned versions, by package name."""
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def same_figure(written: bytes, published: bytes) -> bool:
    """Whether a figure written again is the published one: byte for byte under the
    matplotlib constraints.txt pins (the published figures' own); under another release
    (tox's lowest supported pair installs without the constraints), which draws the same data
    with other pixels, a PNG of the same size in pixels."""
    import matplotlib

    if matplotlib.__version__ == pins().get("matplotlib"):
        return written == published
    png = b"\x89PNG\r\n\x1a\n"
    # A PNG's width and height: the first chunk (IHDR) at bytes 16 to 24.
    return written[:8] == published[:8] == png and written[16:24] == published[16:24]
