"""glibc malloc's thresholds are fixed in the process and handed on to the processes it
starts, keeping a user's own, and every record says which were used."""

import os

import pytest

from parbench.machine.allocator import SETTINGS, allocator_description, pin_cpu_allocator
from parbench.machine.environment import collect_environment

pytestmark = pytest.mark.skipif(not allocator_description().startswith("glibc"),
                                reason="glibc's malloc only")


def test_pinning_hands_the_thresholds_on_and_keeps_the_users_own(monkeypatch):
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MALLOC_TOP_PAD_", str(2**20))
    pin_cpu_allocator()
    assert os.environ["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == str(2**31 - 1)
    assert os.environ["MALLOC_TOP_PAD_"] == str(2**20)  # the user's
    described = collect_environment()["cpu_allocator"]
    assert "MALLOC_TOP_PAD_=1048576" in described
    assert described.endswith("; under a memory cap MALLOC_TOP_PAD_=131072")  # unpad_heap's
