"""One current figure everywhere: every error figure README.md, docs/*.md and results/README.md
quote is listed in tests/published_figures.py and recomputed there from a published file;
an error figure in those pages that is not listed fails; and each page that states the timing
models' error leads with the current version's figure in the one metric (the newest headline
listed, which must be the models' PREDICTOR_VERSION), earlier versions' marked as history."""

from __future__ import annotations

import re

import pytest

from parbench.advisor.version import PREDICTOR_VERSION
from tests.published_figures import FIGURES, PAGES, ROOT, Figure

SCANNED = sorted({"README.md", "results/README.md",
                  *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))})

_PCT = r"[+-]?\d+(?:\.\d+)?%"
# What an error figure looks like (on a page as `page_text` gives it): a median or worst
# |error| (or abs. error, or signed error) and the first percentage after it; a count within
# 10%; a step predicted "to a median" of a percentage.
ERROR_FIGURE = re.compile("|".join((
    r"median (?:\|error\||abs\.? error|signed)[^%]{0,80}?" + _PCT,
    r"worst (?:\|error\||abs\.? error)[^%]{0,80}?" + _PCT,
    r"\d+ of \d+ within 10%",
    r"\bto a median (?:of )?" + _PCT,
)))
_GOAL = re.compile(r"<= \d+%")  # a goal in a table ("<= 5%") is not the figure


def page_text(page: str) -> str:
    """A page as figures are quoted from it: markdown's escaped pipes as pipes, every run of
    whitespace one space."""
    return re.sub(r"\s+", " ", (ROOT / page).read_text().replace("\\|", "|"))


def _id(figure: Figure) -> str:
    return f"{figure.pages[0]}: {figure.text[:50]}"


@pytest.mark.parametrize("figure", FIGURES, ids=_id)
def test_each_figure_is_quoted_and_recomputed_from_its_file(figure: Figure):
    for page in figure.pages:
        assert page in SCANNED, f"{page} is not a page the scan reads"
        assert figure.text in page_text(page), f"{page} no longer quotes {figure.text!r}"
    if figure.recompute is None:
        assert figure.history, "a figure not recomputed says why (history)"
        return
    assert figure.recompute() == figure.text, f"recomputed from {figure.source}"


def _unlisted(page: str, text: str, quotes: list[str]) -> list[str]:
    masked = _GOAL.sub(lambda m: "<=" + "G" * (len(m.group()) - 2), text)
    covered = [(m.start(), m.start() + len(q)) for q in quotes
               for m in re.finditer(re.escape(q), text)]
    return [f"{page}: {text[m.start():m.end()]!r}" for m in ERROR_FIGURE.finditer(masked)
            if not any(start <= m.start() and m.end() <= end for start, end in covered)]


@pytest.mark.parametrize("page", SCANNED)
def test_every_error_figure_on_the_page_is_listed(page: str):
    quotes = [f.text for f in FIGURES if page in f.pages]
    unlisted = _unlisted(page, page_text(page), quotes)
    assert not unlisted, ("error figures not in tests/published_figures.py (add each, with "
                          f"the file it is recomputed from): {unlisted}")


def test_the_scan_finds_figures_and_passes_other_percentages():
    text = ("median |error| 3.5% of the step | <= 5% | **4.0%** | worst |error| 9% and "
            "3 of 4 within 10%; a step to a median 2.0%. Within 5% of the best in 4 of 5; "
            "a speedup of 1.5 (50%); memory 12% lower")
    found = _unlisted("page", text, [])
    assert found == ["page: 'median |error| 3.5%'", "page: 'worst |error| 9%'",
                     "page: '3 of 4 within 10%'", "page: 'to a median 2.0%'"]
    assert _unlisted("page", text, ["median |error| 3.5% of the step | <= 5% | **4.0%** | "
                                    "worst |error| 9% and 3 of 4 within 10%",
                                    "to a median 2.0%"]) == []
    goal_only = _unlisted("page", "median |error| of the step | <= 5% | **6.2%**", [])
    assert goal_only == ["page: 'median |error| of the step | <= 5% | **6.2%'"]


HEADLINES = [f.version for f in FIGURES if f.kind == "headline"]
CURRENT = max(HEADLINES)


def test_each_version_has_one_headline():
    assert len(HEADLINES) == len(set(HEADLINES))


def test_the_current_models_have_a_headline():
    assert CURRENT == PREDICTOR_VERSION, (
        f"the models are version {PREDICTOR_VERSION}, the newest headline figure in "
        f"tests/published_figures.py version {CURRENT}: add version {PREDICTOR_VERSION}'s, "
        "from its held-out draw in the one metric, to every page in PAGES")


@pytest.mark.parametrize("page", PAGES)
def test_the_page_leads_with_the_current_version(page: str):
    text = page_text(page)
    [current] = [f for f in FIGURES if f.kind == "headline" and f.version == CURRENT]
    assert page in current.pages and current.text in text
    first = text.index(current.text)
    for figure in FIGURES:
        if figure.version is not None and figure.version < CURRENT \
                and page in figure.pages:
            at = text.index(figure.text)
            assert at > first, (f"{page} quotes version {figure.version}'s {figure.text!r} "
                                f"before the current version's headline")
            assert "History" in text[first:at], (
                f"{page}: version {figure.version}'s {figure.text!r} is not under a heading "
                "or sentence marking it as history")
