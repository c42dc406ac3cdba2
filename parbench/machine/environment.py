"""What every result is stamped with: software versions, devices, host and source commit."""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
from pathlib import Path

import torch
import torchvision

from parbench.machine.allocator import allocator_description
from parbench.machine.cluster import job
from parbench.machine.devices import cpu_cores

__all__ = ["collect_environment", "cpu_model", "format_environment"]

_SOURCE_DIR = Path(__file__).resolve().parent.parent


def _run(command: list[str], cwd: Path | None = None) -> str | None:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_commit() -> str:
    """The source's commit: $PARBENCH_COMMIT where whoever copied the source says which it is
    (a copy without .git, which git would answer for with a repository above it), else git's,
    else "unknown"."""
    if os.environ.get("PARBENCH_COMMIT"):
        return os.environ["PARBENCH_COMMIT"]
    commit = _run(["git", "rev-parse", "HEAD"], cwd=_SOURCE_DIR)
    if commit is None:
        return "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=_SOURCE_DIR)
    return commit + ("-dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what platform knows of it."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nccl_version() -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a CPU-only build has no NCCL
        return None
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def _gpu_driver() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    output = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return output.splitlines()[0] if output else None


def _cuda_devices() -> list[dict]:
    devices = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        devices.append({"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1)})
    return devices


def collect_environment() -> dict:
    """A flat dict describing this machine and software; the same keys on every host."""
    cuda_devices = _cuda_devices()
    return {
        "host": platform.node(),
        "timestamp_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "python_version": platform.python_version(),
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
        "nccl_version": _nccl_version(),
        "gpu_driver": _gpu_driver(),
        "gpu_count": len(cuda_devices),
        "gpu_names": ";".join(d["name"] for d in cuda_devices),
        "gpu_memory_gib": ";".join(str(d["memory_gib"]) for d in cuda_devices),
        "cpu_model": cpu_model(),
        "cpu_cores_available": cpu_cores(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "cpu_allocator": allocator_description(),
        "launched_by": started.describe() if (started := job()) else None,  # torchrun, srun
    }


def format_environment(environment: dict) -> str:
    width = max(map(len, environment))
    return "\n".join(f"{key:<{width}}  {'-' if value in (None, '') else value}"
                     for key, value in environment.items())
