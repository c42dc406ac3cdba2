"""The README and docs/ stay honest: the option reference is current, every record field is
documented, every relative link leads to a file and heading that exist, and the README stays
short with its quickstart."""

import re
from pathlib import Path

import pytest

from parbench.commands import option_reference
from parbench.machine.environment import collect_environment
from parbench.plan.trials import Trial
from parbench.results.record import FIELDS, PER_TRIAL

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]
QUICKSTART = [
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && "
    ".venv/bin/parbench run",
    "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && "
    ".venv/bin/pytest -n 2 --dist loadfile",
]
README_MAX_LINES = 150

# [text](target) and ![alt](target); the target ends at whitespace or ")" (an optional
# "title" after it is ignored).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without code blocks and code spans, where link syntax is not a link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: markdown links and code marks reduced to their text,
    lower case, punctuation other than hyphens and underscores dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file, repeats numbered as GitHub numbers them."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for match in HEADING.finditer(FENCE.sub("", path.read_text())):
        base = anchor(match.group(2))
        name = base if base not in counts else f"{base}-{counts[base]}"
        counts[base] = counts.get(base, 0) + 1
        found.add(name)
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(_prose(path.read_text()))


def relative(target: str) -> bool:
    return not re.match(r"[a-z][a-z0-9+.-]*:|//", target, re.I)


def test_option_reference_is_current():
    expected = option_reference.markdown()
    actual = (DOCS / "options.md").read_text() if (DOCS / "options.md").exists() else ""
    assert actual == expected, (
        f"docs/options.md is stale: regenerate it with `{option_reference.REGENERATE}`")


def test_option_reference_lists_every_command_and_option():
    text = option_reference.markdown()
    assert text.splitlines()[0].startswith("<!-- Generated") and \
        option_reference.REGENERATE in text.splitlines()[0]
    for command in ("run", "verify", "max-batch", "collectives", "project", "plot", "report",
                    "env", "strategies"):
        assert f"\n## parbench {command}\n" in text
    # A core option with its default, and a strategy option from the registry.
    assert re.search(r"^\| `--batch-size BATCH_SIZE` \| global batch .* \| `32` \|$", text, re.M)
    assert "| `--split-size INT[,...]` |" in text
    assert "`--help`" not in text and "`-h, --help`" not in text
    # A "|" inside a table cell is escaped, so every row of the run table has three cells.
    assert "tutorial\\|time\\|params" in text
    run = text.split("\n## parbench run\n")[1].split("\n## ")[0]
    rows = [line for line in run.splitlines() if line.startswith("| `--")]
    assert len(rows) > 30
    assert all(len(re.split(r"(?<!\\)\|", row)) == 5 for row in rows)


def table_names(page: Path, heading: str) -> set[str]:
    """Every `name` in the first cell of a table row under `## heading` of `page`."""
    section = page.read_text().split(f"\n## {heading}\n")[1].split("\n## ")[0]
    cells = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    return {name for cell in cells for name in re.findall(r"`([^`]+)`", cell)}


def test_every_record_field_is_documented():
    documented = table_names(DOCS / "results.md", "Record fields")
    missing = [name for name in (*FIELDS, *collect_environment()) if name not in documented]
    assert not missing, f"docs/results.md's record-fields table lacks {missing}"


def test_the_trials_row_names_what_each_trial_keeps():
    """A trial keeps the figures the Record declares per trial; the docs name each."""
    row = next(line for line in (DOCS / "results.md").read_text().splitlines()
               if line.startswith("| `trials`"))
    kept = Trial(0, "ok", measured={name: None for name in PER_TRIAL}).to_dict()
    missing = [name for name in kept if f"`{name}`" not in row]
    assert not missing, f"docs/results.md's trials row lacks {missing}"


def broken_links(page: Path) -> list[str]:
    """Each relative link of `page` whose file, or heading in it, does not exist."""
    broken = []
    for target in links(page):
        if not relative(target):
            continue
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {path}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file):
            broken.append(f"{target}: no heading #{fragment} in {file.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    assert links(page), f"{page.name} links to nothing"
    broken = broken_links(page)
    assert not broken, f"broken links in {page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(ROOT / target.partition("#")[0]).resolve()
              for target in links(README) if relative(target)}
    missing = [page.name for page in PAGES[1:] if page.resolve() not in linked]
    assert not missing, f"README.md's Documentation list lacks {missing}"


def test_readme_is_short_and_keeps_the_quickstart():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES} and move detail "
        "into docs/")
    for command in QUICKSTART:
        assert command in lines, f"README.md lost the quickstart line: {command}"
    ci = (README.parent / ".ci" / "run").read_text().splitlines()
    assert QUICKSTART[1] in ci, ".ci/run no longer runs the README's test command"


def test_anchor_rule():
    assert anchor("Several nodes: torchrun") == "several-nodes-torchrun"
    assert anchor("The tutorial's experiment") == "the-tutorials-experiment"
    assert anchor("Collective bandwidth: `parbench collectives`") == \
        "collective-bandwidth-parbench-collectives"
    assert anchor("Micro-batching x parallelism") == "micro-batching-x-parallelism"
    assert anchor("FLOPs and MFU") == "flops-and-mfu"
    assert anchor("snake_case name") == "snake_case-name"


def test_link_checker_finds_broken_links(tmp_path: Path):
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## A heading\n")
    page.write_text("# Page\n\n[ok](other.md#a-heading) ![img](missing.png) "
                    "[bad](other.md#nope) [web](https://example.org) `[code](nothing.md)`\n"
                    "```\n[fenced](nothing.md)\n```\n")
    assert links(page) == ["other.md#a-heading", "missing.png", "other.md#nope",
                           "https://example.org"]
    assert anchors(tmp_path / "other.md") == {"other", "a-heading"}
    assert broken_links(page) == ["missing.png: no file missing.png",
                                  "other.md#nope: no heading #nope in other.md"]
