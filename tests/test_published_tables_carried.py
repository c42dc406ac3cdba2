"""The published tables' comparison is what its script writes from the predictions committed
before it, and its README's figures are the comparison's."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "results" / "20261128T210300Z-published-tables-carried"


def _compare():
    sys.path.insert(0, str(ROOT / "benchmarks" / "published"))
    try:
        import compare_carried
        return compare_carried
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "published"))


def test_the_comparison_is_what_its_script_writes_from_the_predictions():
    assert (RUN / "comparison.md").read_text() == _compare().page(RUN)


def test_the_readme_quotes_the_comparisons_figures():
    compare = _compare()
    rows = compare._rows(RUN)
    readme = " ".join((RUN / "README.md").read_text().split())  # lines joined
    scaling = compare.scaling_rows(rows)
    pipelines = ", ".join(f"{row['error']:+.2f}" for row in scaling if "torchgpipe" in row["name"])
    assert f"({pipelines} points of efficiency)" in readme
    for row in compare.level_rows(rows):
        assert f"{row['error']:+.1f}%" in readme, row["name"]
    dle = [row for row in scaling if "dle" in row["name"]]
    for row in dle:
        assert f"{row['error']:+.2f} against {row['perfect_error']:+.2f}" in readme
    assert re.search(r"all four within 5 points", readme)
    by_setup = {row["setup"]: row for row in rows}  # each setup's last row
    shares = [float(by_setup[name]["share_of_roofline"]) for name in (
        "dle-dgxa100-resnet50-tf32", "dle-dgxa100-resnet50-amp", "parbench-h200-resnet50-bf16")]
    assert "reach {:.1%} (H200, fp32), {:.1%} (H200, bf16) and {:.1%} (H100, bf16)".format(
        *shares) in readme
    amp = by_setup["dle-dgxa100-resnet50-amp"]
    assert f"feed {float(amp['loader_cap_ips']):,.0f} images/s" in readme
    baseline = float(by_setup["torchgpipe-p40-resnet101"]["predicted_single_ips"])
    assert f"predicted at {baseline:.1f} img/s against the published 95.9" in readme
    [one_amp] = [row for row in rows if row["setup"] == amp["setup"] and row["devices"] == "1"]
    reached = float(one_amp["share_of_roofline"]) * 2470 / float(one_amp["predicted_ips"])
    assert f"would be {reached:.1%} of its roofline" in readme
