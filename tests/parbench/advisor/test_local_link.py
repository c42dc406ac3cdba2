"""`measured_link` for real: the collectives of two emulated CPU devices (gloo), measured in
worker processes at two small sizes, kept in the cache, and read as a link the way
`recommend_layouts` reads it (transfer, all-reduce, any collective by world size)."""

import json

import pytest

from parbench import launch
from parbench.advisor.profiling.local_link import measured_link
from parbench.measure.collectives import COLLECTIVES
from tests.support import CPU2, child_pids

SIZES = (4096, 16384)  # 1 Ki and 4 Ki float32 elements: two points to interpolate between


@pytest.mark.timeout(120)
def test_the_link_between_two_cpu_devices_is_measured_once_and_kept(tmp_path, monkeypatch):
    link = measured_link(CPU2, tmp_path, threads=1, sizes=SIZES)
    assert child_pids() == []  # the workers that measured it are gone

    # One row per collective and size on the only world size two devices form, on gloo.
    assert sorted((r["collective"], r["size_bytes"]) for r in link.rows) == sorted(
        (name, size) for name in COLLECTIVES for size in SIZES)
    assert {(r["world_size"], r["backend"]) for r in link.rows} == {(2, "gloo")}
    for row in link.rows:
        assert row["time_s"] > 0, row
        assert row["size_bytes"] / row["time_s"] > 0  # a bandwidth, finite and positive
    assert "cpu" in link.describe()

    # What the models read: a transfer of n bytes, an all-reduce on 2 ranks, none on 1.
    for size in (1024, 4096, 10_000, 16384, 1 << 20):
        assert 0 < link.transfer_s(size) < float("inf")
        assert 0 < link.allreduce_s(size, 2) < float("inf")
        assert link.collective_s("reduce_scatter", size, 2) > 0
    assert link.allreduce_s(4096, 1) == 0.0
    # Kept: read again without measuring anything.
    [kept] = list(tmp_path.glob("collectives-*.json"))
    assert json.loads(kept.read_text())["sizes"] == list(SIZES)
    monkeypatch.setattr(launch, "measure_collectives",
                        lambda *args, **kwargs: pytest.fail("measured again"))
    assert measured_link(CPU2, tmp_path, threads=1, sizes=SIZES).rows == link.rows
