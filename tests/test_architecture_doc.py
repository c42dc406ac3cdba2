"""docs/architecture.md's file tree (its Files section) names every module of parbench in its
package's section, and names no module that is not there."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = ("parbench",)


def _tree() -> list[str]:
    """The Files section's code block, line by line."""
    text = DOC.read_text().split("\n## Files\n", 1)[1]
    return text.split("```\n", 1)[1].split("\n```", 1)[0].splitlines()


def _sections() -> dict[str, str]:
    """Each package's folder (`parbench/launch`) -> the tree's text of its section: from its
    `name/` line to the next folder line at its own indent or less."""
    sections: dict[str, str] = {}
    path: list[tuple[int, str]] = []  # (indent, folder) from the top down
    for line in _tree():
        match = re.match(r"( *)([\w.]+)/\s", line + " ")
        if match and len(match.group(1)) < 8:
            indent = len(match.group(1))
            path = [(i, name) for i, name in path if i < indent] + [(indent, match.group(2))]
        if path:
            folder = "/".join(name for _, name in path)
            sections[folder] = sections.get(folder, "") + line + "\n"
    return sections


def _packages() -> dict[str, set[str]]:
    """Each package folder -> its modules' file names."""
    return {str(init.parent.relative_to(ROOT)): {p.name for p in init.parent.glob("*.py")}
            for top in PACKAGES for init in (ROOT / top).rglob("__init__.py")}


def test_the_file_tree_names_every_module_in_its_package():
    sections = _sections()
    missing = [f"{folder}/{module}" for folder, modules in sorted(_packages().items())
               for module in sorted(modules - {"__init__.py", "__main__.py"})
               if not re.search(rf"(?<![\w/]){re.escape(module)}\b", sections.get(folder, ""))]
    assert not missing, f"docs/architecture.md's file tree does not name {missing}"


def test_the_file_tree_names_no_module_that_is_not_there():
    packages = _packages()
    absent = [f"{folder}/{name}" for folder, text in _sections().items() if folder in packages
              for name in re.findall(r"(?<![\w/.])(\w+\.py)\b", text)
              if name not in packages[folder]
              and not any(name in packages[sub] for sub in packages
                          if sub.startswith(folder + "/"))]
    assert not absent, f"docs/architecture.md's file tree names modules that do not exist: {absent}"


def test_the_tests_mirror_the_packages():
    packages = {init.parent.name for init in (ROOT / "parbench").glob("*/__init__.py")}
    mirrored = {folder.name for folder in (ROOT / "tests" / "parbench").iterdir()
                if folder.is_dir() and any(folder.glob("test_*.py"))}
    assert packages <= mirrored, f"no tests/parbench/<package>/ for {sorted(packages - mirrored)}"
