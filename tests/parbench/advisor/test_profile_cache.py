"""The profile cache across versions: a profile kept by an older version of the profiler (or
by none, or by the CUDA profiler's version on a CPU) is measured again and overwritten, and
one kept by the current version is read back as it stands, even where a fresh measurement
would differ."""

import json

import pytest

from parbench.advisor.profiling import profile as profiling
from parbench.advisor.profiling.profile import (
    CUDA_PROFILE_VERSION,
    PROFILE_VERSION,
    load_or_profile,
    profile_path,
)
from parbench.families.workloads import Workload

WORKLOAD = Workload(model="resnet18", image_size=32, num_classes=10)
MARK_S = 123.0  # a step time no measurement of this tiny model gives: what the cache held


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One real profile of the tiny workload at micro-batch 2, as the cache keeps it."""
    cache = tmp_path_factory.mktemp("profiles")
    load_or_profile(cache, WORKLOAD, micro_batch=2)
    return json.loads(profile_path(cache, WORKLOAD, 2).read_text())


def _kept(cache, stored: dict, version) -> None:
    """`stored` as a profile cache of `version` would hold it (None: without a version), its
    step time set to MARK_S."""
    kept = {**stored, "profile": {**stored["profile"], "step_s": MARK_S}}
    kept.pop("version")
    if version is not None:
        kept["version"] = version
    profile_path(cache, WORKLOAD, 2).write_text(json.dumps(kept))


@pytest.fixture
def profiling_counted(monkeypatch):
    calls = []
    real = profiling.profile_blocks

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(profiling, "profile_blocks", counted)
    return calls


@pytest.mark.timeout(120)
@pytest.mark.parametrize("version", [PROFILE_VERSION - 1, 1, None, CUDA_PROFILE_VERSION],
                         ids=["previous", "first", "unversioned", "cuda-version-on-cpu"])
def test_a_profile_kept_by_another_version_is_measured_again(tmp_path, measured, version,
                                                            profiling_counted):
    assert CUDA_PROFILE_VERSION != PROFILE_VERSION  # else the last case tests nothing
    _kept(tmp_path, measured, version)
    profile = load_or_profile(tmp_path, WORKLOAD, micro_batch=2)
    assert len(profiling_counted) == 1
    assert profile.step_s != MARK_S and 0 < profile.step_s < 10
    rewritten = json.loads(profile_path(tmp_path, WORKLOAD, 2).read_text())
    assert rewritten["version"] == PROFILE_VERSION
    assert rewritten["profile"]["step_s"] == profile.step_s


def test_a_profile_kept_by_the_current_version_is_read_back_as_it_stands(
        tmp_path, measured, profiling_counted):
    _kept(tmp_path, measured, PROFILE_VERSION)
    before = profile_path(tmp_path, WORKLOAD, 2).read_text()
    profile = load_or_profile(tmp_path, WORKLOAD, micro_batch=2)
    assert profiling_counted == []
    assert profile.step_s == MARK_S
    assert [b.name for b in profile.blocks] == [b["name"] for b in measured["blocks"]]
    assert profile_path(tmp_path, WORKLOAD, 2).read_text() == before  # not written again
