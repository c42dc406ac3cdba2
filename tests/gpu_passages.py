"""Where a page speaks of a GPU, and which numbers there read as measured figures: the scan
tests/test_published_gpu_figures.py holds every page's GPU figures to.

A passage is about a GPU when it names one (H100, H200, GPU or GPUs) or lies in a section
whose heading does: a whole section under such a heading; elsewhere each sentence of a
paragraph or list item, and each table cell (the whole cell where its column's header or its
row's first cell names a GPU, else each of its clauses). Positions are in the page's text as
`page_text` gives it (escaped pipes as pipes, every run of whitespace one space), so the
registry's quoted texts can be found in it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPU_NAMED = re.compile(r"\b(?:H100|H200|GPUs?)\b")
# A heading that puts its whole section on a GPU: it names one by its model, or "one GPU".
GPU_SECTION = re.compile(r"\b(?:H100|H200)\b|\bone GPU\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\[*`])")
_CLAUSE_END = re.compile(r";\s+|(?<=[.!?])\s+(?=[A-Z(\[*`])")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")

_NUMBER = r"[+-]?\d+(?:,\d{3})*(?:\.\d+)?(?:e-?\d+)?"
_UNIT = (r"img/s|img/J|ms|us|s|%|x|MiB|GiB|MB|GB/s|GB|TFLOP/s|GFLOP|points?|times|"
         r"passed|failed|skipped")
# A measured figure: a number (or a range of two) with a unit of measure, or a count "N of M"
# (`measured`); else a bare decimal (a ratio, an MFU) or a bare number of 3 digits or more (an
# img/s quoted bare), unless it reads as a parameter. Not one: a number written into a word
# (resnet50, H100, 8-GPU), a small bare integer (a count of ranks, rounds, parts).
FIGURE = re.compile(
    rf"(?P<measured>(?<![\w.+-]){_NUMBER}(?:\s?(?:to|-|and)\s?{_NUMBER})?\s?(?:{_UNIT})"
    rf"(?![\w/])|(?<![\w.+-])\d+ of (?:the )?\d+\b)"
    rf"|(?<![\w.+-])[+-]?\d+\.\d+(?:e-?\d+)?(?![\w.])"
    rf"|(?<![\w.+-])[+-]?\d{{3,}}(?:,\d{{3}})*(?![\w.])")
# What is masked before the scan: link targets, code spans, run folders' names, dates and
# version numbers (torch 2.11.0+cu130) are never figures.
_MASKED = re.compile(r"\]\([^)]*\)|`[^`]*`|\d{8}T\d{6}Z[\w-]*|\d{4}-\d{2}-\d{2}"
                     r"|\b\d+\.\d+\.\d+[\w.+]*")
# Parameters of a workload or a run, never figures (a bare number only): "batch 256", "224 px".
_PARAMETER = re.compile(
    r"(?:batch(?:es)?(?: of)?|micro-batch(?:es)?(?: of)?|version|versions|seed|split|"
    r"splits|part|chunk|chunks|--[\w-]+|Python|torch|CUDA|cuDNN|NCCL|driver|#)\s?$")
_PARAMETER_AFTER = re.compile(r"^\s?(?:px|images?|ranks?|GPUs|devices|stages|blocks|units|"
                              r"layers|classes|steps|trials|rounds|x \d)\b")


def page_text(page: str) -> str:
    """A page as figures are quoted from it: escaped pipes as pipes, whitespace as one space."""
    return _normal((ROOT / page).read_text())


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\\|", "|")).strip()


@dataclass(frozen=True)
class Passage:
    start: int  # in page_text(page)
    text: str


def _pieces(text: str, splitter: re.Pattern) -> list[tuple[int, str]]:
    """`text` cut where `splitter` matches: (offset in `text`, piece)."""
    pieces, at = [], 0
    for match in splitter.finditer(text):
        pieces.append((at, text[at:match.start()]))
        at = match.end()
    return [*pieces, (at, text[at:])]


class _Locator:
    """Finds each block's normalised text in the page's, in order."""

    def __init__(self, page_text_: str):
        self.text, self.at = page_text_, 0

    def find(self, piece: str) -> int:
        found = self.text.find(piece, self.at)
        assert found >= 0, f"not found in the page's text: {piece[:80]!r}"
        self.at = found
        return found


def _blocks(raw: str, left_out: tuple[str, ...]):
    """(heading chain names a GPU, kind, lines) for each paragraph, list item, table row and
    heading outside code fences and outside the sections whose heading is in `left_out`."""
    headings: dict[int, str] = {}
    block: list[str] = []
    fenced = False
    skipping = 0  # the level of the heading left out, while in its section

    def gpu_section() -> bool:
        return any(GPU_SECTION.search(h) for h in headings.values())

    for line in [*raw.splitlines(), ""]:
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        starts_new = (not line.strip() or line.startswith("#") or line.lstrip().startswith("|")
                      or re.match(r"\s*(?:[-*]|\d+\.)\s", line))
        if starts_new and block:
            yield gpu_section(), "prose", block
            block = []
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            skipping = level if line in left_out else (0 if level <= skipping else skipping)
            headings = {k: v for k, v in headings.items() if k < level}
            headings[level] = line
            if not skipping:
                yield gpu_section(), "heading", [line]
        elif skipping:
            continue
        elif line.lstrip().startswith("|"):
            yield gpu_section(), "row", [line]
        elif line.strip():
            block.append(line)


def gpu_passages(page: str, left_out: tuple[str, ...] = ()) -> list[Passage]:
    """Every passage of `page` about a GPU, where it starts in page_text(page), outside the
    sections whose heading line is in `left_out`."""
    raw = (ROOT / page).read_text()
    locator = _Locator(page_text(page))
    passages: list[Passage] = []
    header: list[str] = []
    for in_gpu_section, kind, lines in _blocks(raw, left_out):
        text = _normal(" ".join(lines))
        start = locator.find(text)
        if kind != "row":
            header = []
            pieces = [(0, text)] if in_gpu_section else _pieces(text, _SENTENCE_END)
            passages += [Passage(start + at, piece) for at, piece in pieces
                         if in_gpu_section or GPU_NAMED.search(piece)]
            continue
        cells = [_normal(cell) for cell in _CELL_SEPARATOR.split(lines[0].strip())[1:-1]]
        if not header:
            header = cells
        if set("".join(cells)) <= set("-: "):
            continue
        for column, cell in enumerate(cells):
            at = locator.find(cell) if cell else start
            column_named = column < len(header) and GPU_NAMED.search(header[column])
            whole = in_gpu_section or column_named
            pieces = [(0, cell)] if whole else _pieces(cell, _CLAUSE_END)
            passages += [Passage(at + offset, piece) for offset, piece in pieces
                         if whole or GPU_NAMED.search(piece)]
    return passages


def figures_in(text: str) -> list[tuple[int, int]]:
    """The spans of `text` that read as measured figures (see FIGURE), parameters left out."""
    masked = _MASKED.sub(lambda m: "_" * len(m.group()), text)
    spans = []
    for match in FIGURE.finditer(masked):
        before, after = masked[:match.start()], masked[match.end():]
        bare = match.group("measured") is None
        if bare and (_PARAMETER.search(before[-24:]) or _PARAMETER_AFTER.match(after)):
            continue
        spans.append((match.start(), match.end()))
    return spans
