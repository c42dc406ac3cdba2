"""The torch/torchvision requirements are ranges that keep a GPU host's own PyTorch, and the
constraints file pins a pair inside them."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.support import pins as constraint_pins

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {r.name: r for r in map(Requirement, project["dependencies"])}


@pytest.mark.parametrize("package, host_version", [
    ("torch", "2.11.0+cu130"),  # the H100/H200 hosts' own builds
    ("torchvision", "0.26.0+cu130"),
    ("torch", "2.8.0"),  # the lowest supported pair (tox -e torch-min)
    ("torchvision", "0.23.0"),
])
def test_a_host_pytorch_in_range_is_kept(package, host_version):
    assert _requirements()[package].specifier.contains(host_version, prereleases=False)


def test_the_range_is_a_range_and_the_tested_pair_lies_in_it():
    requirements, pins = _requirements(), constraint_pins()
    for package in ("torch", "torchvision"):
        specifier = requirements[package].specifier
        assert not any(spec.operator == "==" for spec in specifier), "pinned, not a range"
        assert specifier.contains(pins[package]), (package, pins[package])


def test_the_wheel_holds_parbench_alone_with_the_strategies_inside(tmp_path):
    # The strategies are parbench.strategies: a user's own `strategies` cannot collide with
    # them, and a checkout without symlinks builds the same wheel (no link is tracked).
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True,
                             text=True, check=True, timeout=60).stdout.splitlines()
    assert not [line for line in tracked if line.startswith("120000")], "a symlink is tracked"
    built_before = (ROOT / "build").exists()
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", "-w", str(tmp_path), str(ROOT)], check=True,
                       timeout=240, capture_output=True)
    finally:  # setuptools builds in the tree: leave none of it behind
        if not built_before:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    [wheel] = tmp_path.glob("parbench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [top_level] = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode().split() == ["parbench"]
    assert {name.split("/")[0] for name in names if not name.endswith("/")} == {
        "parbench", wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info"}
    assert "parbench/strategies/ddp.py" in names and "parbench/strategies/__init__.py" in names


def test_parbench_imports_outside_the_repository_with_no_top_level_strategies(tmp_path):
    # No top-level `strategies` is installed or imported. -I: not this tree.
    done = subprocess.run([sys.executable, "-I", "-c",
                           "import sys, parbench.cli, parbench.plots, "
                           "parbench.advisor.runs.figures; print('strategies' in sys.modules)"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
