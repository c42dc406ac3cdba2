"""Every GPU figure README.md, docs/*.md and results/README.md quote comes from a committed
file of a GPU run: each entry of tests/published_gpu_figures.py is recomputed from its file
and found on its pages, and a number on a page's GPU passage (tests/gpu_passages.py) that no
entry covers, nor tests/published_figures.py's error figures, nor NOT_MEASURED, fails."""

from __future__ import annotations

import pytest

from tests import gpu_passages as scan
from tests.gpu_passages import ROOT, Passage, figures_in, gpu_passages, page_text
from tests.published_figures import FIGURES
from tests.published_gpu_figures import GPU_FIGURES, NOT_MEASURED, SCANNED, SECTIONS_LEFT_OUT


@pytest.mark.parametrize("figure", GPU_FIGURES, ids=lambda f: f"{f.pages[0]}: {f.text[:50]}")
def test_each_gpu_figure_is_quoted_and_recomputed_from_its_file(figure):
    for page in figure.pages:
        assert page in SCANNED, f"{page} is not a page the scan reads"
        assert figure.text in page_text(page), f"{page} no longer quotes {figure.text!r}"
    assert figure.recompute() == figure.text, f"recomputed from {figure.source}"


@pytest.mark.parametrize("entry", NOT_MEASURED, ids=lambda e: f"{e.pages[0]}: {e.text[:50]}")
def test_each_number_listed_as_not_measured_is_on_its_pages_and_says_why(entry):
    assert entry.why
    for page in entry.pages:
        assert entry.text in page_text(page), f"{page} no longer has {entry.text!r}"


def listed(page: str) -> list[str]:
    """The texts the registries list on `page`: figures and numbers not measured."""
    figures = [f.text for f in (*FIGURES, *GPU_FIGURES) if page in f.pages]
    return figures + [e.text for e in NOT_MEASURED if page in e.pages]


def _covered(quotes: list[str], text: str) -> list[tuple[int, int]]:
    spans = []
    for quote in quotes:
        at = text.find(quote)
        while at >= 0:
            spans.append((at, at + len(quote)))
            at = text.find(quote, at + 1)
    return spans


def unlisted(page: str, passages: list[Passage], text: str, quotes: list[str]) -> list[str]:
    """The figures of `passages` (positions in `text`) that none of `quotes` covers."""
    covered = _covered(quotes, text)
    found = []
    for passage in passages:
        for start, end in figures_in(passage.text):
            start, end = passage.start + start, passage.start + end
            if not any(low <= start and end <= high for low, high in covered):
                found.append(f"{page}: {text[start:end]!r} in {passage.text[:120]!r}")
    return found


@pytest.mark.parametrize("page", SCANNED)
def test_every_gpu_figure_on_the_page_is_registered(page: str):
    passages = gpu_passages(page, SECTIONS_LEFT_OUT.get(page, ()))
    missing = unlisted(page, passages, page_text(page), listed(page))
    assert not missing, ("GPU figures in no registry: add each to tests/published_gpu_figures.py "
                         "with the file it is recomputed from, or to NOT_MEASURED with why: "
                         f"{missing}")


def test_the_scan_finds_gpu_figures_and_passes_parameters(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\nOn one H200 resnet50 at 224 px, batch 256, trained at 6461 img/s, a step of "
        "39.6 ms, 0.72x single; 29 of 30 passed. On the CPU 4000 img/s.\n\n"
        "| what | measured on one GPU |\n|---|---|\n| step | 25.33 ms, timm 3873 |\n\n"
        "## On one GPU: a run\n\nsingle 21.7 ms (`--batch-size 120`, torch 2.11.0, "
        "[run](results/20261126T004029Z-x/README.md)).\n")
    monkeypatch.setattr(scan, "ROOT", tmp_path)
    found = [p.text[a:b] for p in scan.gpu_passages("page.md") for a, b in scan.figures_in(p.text)]
    assert found == ["6461 img/s", "39.6 ms", "0.72x", "29 of 30", "25.33 ms", "3873",
                     "21.7 ms"]
    left_out = scan.gpu_passages("page.md", ("## On one GPU: a run",))
    assert [p.text[a:b] for p in left_out for a, b in scan.figures_in(p.text)] == found[:-1]
    text = scan.page_text("page.md")
    assert [u.split(" in ")[0] for u in unlisted("page.md", left_out, text, [])] == [
        f"page.md: {figure!r}" for figure in found[:-1]]
    covering = ["6461 img/s, a step of 39.6 ms", "25.33 ms, timm 3873", "0.72x single"]
    assert [u.split(" in ")[0] for u in unlisted("page.md", left_out, text, covering)] == [
        "page.md: '29 of 30'"]


def test_a_section_left_out_is_a_heading_of_its_page():
    for page, headings in SECTIONS_LEFT_OUT.items():
        lines = (ROOT / page).read_text().splitlines()
        for heading in headings:
            assert heading in lines, f"{page} has no heading {heading!r}"
