"""A GPU host without network made ready for the reference run: the wheels it lacks (fetched
where there is network and built there, GPUtil's included), parbench made importable from its
source tree beside the host's torch (nothing built on the host), and a check, before any step,
that what the chosen steps need starts."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

from reference_steps import ROOT, Part

HOST_PYTHON = "3.12"
# Fetched with every runtime dependency for the host (asv's: asv_runner, build,
# importlib_metadata, json5, packaging, pympler, pyyaml, tabulate, virtualenv and theirs), about
# 9 MB; setuptools for GPUtil's distutils. numpy, scipy (with which the H200's pytest-benchmark
# step computed its intervals) and tqdm (timm's huggingface_hub needs it) are on the hosts: 50 MB
# of wheels more would not fit the 64 MiB that travel with the working tree.
FETCHED = ("asv", "setuptools")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64")
GPUTIL = "GPUtil==1.4.0"  # on PyPI only as a source archive: built into a wheel by --fetch-wheels
SOURCE_PATH_FILE = "parbench-source.pth"  # site-packages' path file naming the source tree


def _torch_version() -> str:
    done = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                          capture_output=True, text=True, check=False)
    return done.stdout.strip() or "none"


def _distribution(name: str) -> str:
    """A distribution's name as pip compares them: lower case, runs of -_. as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def split_wheels(folder: Path) -> tuple[list[Path], list[str]]:
    """The wheels in `folder` to install, and what the host already has ("name version") of the
    others, which are left alone: a wheel never replaces the host's numpy, packaging, ..."""
    install, kept = [], []
    for wheel in sorted(folder.glob("*.whl"), key=lambda path: path.name.lower()):
        version = _installed_version(_distribution(wheel.name.split("-")[0]))
        if version is None:
            install.append(wheel)
        else:
            kept.append(f"{wheel.name.split('-')[0]} {version}")
    return install, kept


def _download_args(folder: str) -> list[str]:
    """pip's arguments that download FETCHED, with every dependency, as the host's wheels."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["download", *FETCHED, "--only-binary=:all:", "--python-version", HOST_PYTHON,
            "--implementation", "cp", "--abi", "cp" + HOST_PYTHON.replace(".", ""), *platforms,
            "-d", folder]


def _gputil_args(folder: str) -> list[str]:
    """pip's arguments that build GPUtil's sdist into a pure-Python wheel in `folder`."""
    return ["wheel", GPUTIL, "--no-deps", "-w", folder]


FETCH_HINT = ("bring the wheels with `python benchmarks/gpu/reference.py --fetch-wheels DIR` on "
              f"a machine with network (it runs `pip {shlex.join(_download_args('DIR'))}` and "
              f"`pip {shlex.join(_gputil_args('DIR'))}`), then pass --wheels DIR")
CHECK_HINTS = {
    "asv": "its wheel installs without its dependencies, so each needs a wheel of its own: "
           + FETCH_HINT,
    "GPUtil": "GPUtil 1.4.0 imports distutils, which Python 3.12 has only from setuptools: "
              + FETCH_HINT,
    "pytest_benchmark": "bring pytest-benchmark and its dependencies as wheels in --wheels DIR",
    "timm": "timm's benchmark.py needs timm itself: bring its wheel in --wheels DIR",
}


def fetch_wheels(folder: Path) -> None:
    """Every wheel the host needs, for Python HOST_PYTHON, into `folder`; needs network."""
    folder.mkdir(parents=True, exist_ok=True)
    if folder.parent.name == ".carried":  # git ignores the folder, its .gitignore included
        (folder.parent / ".gitignore").write_text("*\n")
    for args in (_download_args(str(folder)), _gputil_args(str(folder))):
        if subprocess.run([sys.executable, "-m", "pip", *args]).returncode:
            raise SystemExit(f"pip {shlex.join(args)} failed (above): --fetch-wheels needs PyPI")
    wheels = sorted(folder.glob("*.whl"))
    size = sum(path.stat().st_size for path in wheels) / 2**20
    print(f"{len(wheels)} wheels, {size:.1f} MiB, in {folder}: "
          f"{', '.join(path.name for path in wheels)}\ncarry the folder to the GPU host and run: "
          "python benchmarks/gpu/reference.py --wheels DIR")


def install_source(root: Path | None = None) -> Path:
    """parbench importable from its source tree in every later process of this Python (the
    steps, their spawned ranks, asv's benchmarks), through a path file in its site-packages
    naming a folder that holds nothing but a link to parbench (the repository's root would make
    its tests/ and benchmarks/ top-level modules too): nothing is built or copied
    on the host. Returns the path file."""
    root = root or ROOT
    site = root / "benchmarks" / "gpu" / ".carried" / "site"  # git ignores .carried/
    site.mkdir(parents=True, exist_ok=True)
    link = site / "parbench"
    if not link.is_symlink():
        link.symlink_to(root / "parbench", target_is_directory=True)
    path = Path(sysconfig.get_paths()["purelib"]) / SOURCE_PATH_FILE
    path.write_text(f"{site}\n")
    return path


def install(wheels: Path | None) -> set[str]:
    """parbench (after the wheels in `wheels` of what the host lacks) into this Python, never
    replacing its torch; returns the distributions the wheels folder holds. Only a changed
    torch stops the run: a wheel or an import that fails is a note, and the steps that need
    it are skipped by `check` (parbench itself also runs from the source tree)."""
    before = _torch_version()
    brought: set[str] = set()
    if wheels:
        if not wheels.is_dir():
            raise SystemExit(f"--wheels {wheels}: no such folder")
        new, kept = split_wheels(wheels)
        brought = {_distribution(path.name.split("-")[0]) for path in wheels.glob("*.whl")}
        if kept:
            print(f"kept the host's {', '.join(kept)} (their wheels left alone)", flush=True)
        if new and subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                                   "--no-index", *map(str, new)]).returncode:
            print(f"note: pip install of {len(new)} wheels failed (above); the steps that "
                  "need them are skipped", flush=True)
    try:
        where = install_source()
    except OSError as error:
        print(f"note: parbench's path file could not be written ({error}); the steps run it "
              "from the source tree they start in", flush=True)
    else:
        print(f"parbench from its source tree: {where} names {where.read_text().strip()}, "
              "which links to parbench's folder", flush=True)
    after = _torch_version()
    if after != before:
        raise SystemExit(f"installing parbench changed torch from {before} to {after}")
    missing = subprocess.run([sys.executable, "-c", "import scipy, pandas, matplotlib, tqdm"],
                             capture_output=True, text=True)
    if missing.returncode:
        print(f"note: parbench needs {_last_line(missing)}: {FETCH_HINT}", flush=True)
    print(f"parbench installed beside torch {after}", flush=True)
    return brought


def _last_line(done: subprocess.CompletedProcess) -> str:
    lines = (done.stderr or done.stdout or "").strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def _not_installed(distributions: set[str]) -> list[str]:
    """What `pip check` says the given distributions require but is not installed."""
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    found = (re.match(r"(\S+) \S+ requires (\S+), which is not installed", line)
             for line in done.stdout.splitlines())
    return sorted({m.group(2) for m in found if m and _distribution(m.group(1)) in distributions})


def cannot_start(module: str, brought: set[str]) -> str | None:
    """Why `module` cannot start in this Python (None if it can): a dependency of it, or of a
    wheel brought with it, that is not installed; its import; asv's command line."""
    missing = _not_installed({_distribution(module)} | brought)
    if missing:
        return f"{', '.join(missing)} not installed (pip check)"
    probes = [["-c", f"import {module}"]] + ([["-m", "asv", "--version"]] if module == "asv"
                                             else [])
    for probe in probes:
        done = subprocess.run([sys.executable, *probe], capture_output=True, text=True)
        if done.returncode:
            return f"`python {shlex.join(probe)}` failed: {_last_line(done)}"
    return None


def checked_modules(selected: list[Part], brought: set[str]) -> dict[str, list[str]]:
    """Each module to check, with the selected steps that need it."""
    needed: dict[str, list[str]] = {}
    for step in (step for part in selected for step in part.steps if not step.needs):
        for module in step.requires:
            needed.setdefault(module, []).append(step.name)
    if "gputil" in brought:  # parbench's fallback sampler; brought, it must work
        needed.setdefault("GPUtil", [])
    return needed


def check(selected: list[Part], brought: set[str]) -> dict[str, str]:
    """Why each selected step that needs a module which cannot start here cannot run, by
    step name; a line for each such module says so. Those steps are skipped and the others
    run: a GPU's time is not spent on nothing for want of asv."""
    skipped: dict[str, str] = {}
    for module, names in checked_modules(selected, brought).items():
        problem = cannot_start(module, brought)
        if problem is None:
            continue
        reason = f"{module} cannot start here: {problem}; {CHECK_HINTS[module]}"
        which = (f"{', '.join(names)} skipped" if names
                 else "parbench samples the GPUs through NVML, or not at all")
        print(f"note: {which}: {reason}", flush=True)
        for name in names:
            skipped.setdefault(name, reason)
    return skipped


def wheels_plan(wheels: Path | None) -> list[str]:
    """What --wheels brings in, as the dry run prints it."""
    if wheels is None:
        return ["wheels: none given (--wheels DIR installs the ones of what the host lacks)"]
    if not wheels.is_dir():
        return [f"wheels: {wheels} is not a folder: the run stops there"]
    new, kept = split_wheels(wheels)
    have = {_distribution(path.name.split("-")[0]) for path in wheels.glob("*.whl")}
    lacks = [name for name in (*FETCHED, "GPUtil") if _distribution(name) not in have]
    return [f"wheels from {wheels}: installs {', '.join(p.name for p in new) or 'none'}",
            f"  keeps the host's {', '.join(kept) or 'nothing'}",
            f"  lacks {', '.join(lacks) or 'none of ' + ', '.join((*FETCHED, 'GPUtil'))}"]


def install_plan(selected: list[Part], wheels: Path | None) -> None:
    """The install and its checks, as the dry run prints them."""
    print("install (left out with --no-install): the carried wheels with pip install -q "
          f"--no-deps --no-index, then parbench from {ROOT} through a path file in "
          f"site-packages ({SOURCE_PATH_FILE}: nothing built); stops if torch changes")
    for line in wheels_plan(wheels):
        print(f"  {line}")
    print(f"  a wheels folder for the host (Python {HOST_PYTHON}) holds asv with its runtime "
          "dependencies (asv_runner, build, importlib_metadata, json5, packaging, pympler, "
          "pyyaml, tabulate, virtualenv and theirs), setuptools and GPUtil 1.4.0 (a wheel "
          "built from its source archive), about 9 MB: on a machine with network, "
          "python benchmarks/gpu/reference.py --fetch-wheels [DIR]")
    checks = ["import scipy, pandas, matplotlib, tqdm (after installing)"]
    for module, names in checked_modules(selected, {"gputil"}).items():
        probes = "pip check, import" + (", python -m asv --version" if module == "asv" else "")
        where = ", ".join(names) if names else "if its wheel is given"
        checks.append(f"{module} ({where}): {probes}")
    print(f"  checks before any step (a step that needs what cannot start is skipped, with "
          f"the reason; the others run): {'; '.join(checks)}")


