"""No import cycle among parbench's modules, counting every import a module can run: at its
top, and inside its functions and classes, which import-linter's layers contract
(`[tool.importlinter]`) does not see. And the scripts of benchmarks/ and of published runs
(results/*/) use parbench's public names only."""

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import ROOT, source_files

PACKAGE = "parbench"


def _modules() -> dict[str, Path]:
    """Each module's dotted name -> its file; a package is its `__init__.py`."""
    modules = {}
    for path in source_files(PACKAGE):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run, at any depth. The body of `if TYPE_CHECKING:` never
    runs (only the type checkers read it), so its imports make no cycle and are left out; its
    `else:` runs, and is walked."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
        else:
            stack.extend(ast.iter_child_nodes(node))


def _base(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names, its relative dots resolved."""
    if not node.level:
        return node.module or ""
    parts = name.split(".")
    package = parts if is_package else parts[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path]) -> Iterator[str]:
    """The modules of ours an import statement names: `import a.b` -> a.b; `from a import b`
    -> a.b where that is a module, else a (its `__init__`). A parent package that Python
    imports on the way is not an edge: a package's `__init__` importing its submodules, and
    a submodule importing a sibling, is how packages are built."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in modules)
        return
    base = _base(name, path.name == "__init__.py", node)
    for alias in node.names:
        if f"{base}.{alias.name}" in modules:
            yield f"{base}.{alias.name}"
        elif base in modules:
            yield base


def import_graph() -> dict[str, set[str]]:
    """Each module of parbench -> the modules of parbench it imports (itself left out)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[name] = {target for node in _imports(tree)
                       for target in _targets(name, path, node, modules) if target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan's, iterative), each
    sorted: every module of one imports, at some remove, every other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(tuple(sorted(component)))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found)


def test_the_cycle_finder_sees_a_cycle_through_a_package_init():
    graph = {"p": {"p.a"}, "p.a": {"p"}, "p.b": {"p.c"}, "p.c": {"p.d"}, "p.d": {"p.b"},
             "q": {"q.a"}, "q.a": {"q.b"}, "q.b": set()}
    assert cycles(graph) == [("p", "p.a"), ("p.b", "p.c", "p.d")]


def test_the_graph_sees_imports_inside_functions_and_skips_type_checking(tmp_path):
    tree = ast.parse("from typing import TYPE_CHECKING\n"
                     "if TYPE_CHECKING:\n    from . import a\nelse:\n    from .b import x\n"
                     "def f():\n    from ..c import y\n    import parbench.d\n")
    modules = {name: tmp_path for name in ("parbench", "parbench.p", "parbench.p.a",
                                           "parbench.p.b", "parbench.c", "parbench.d")}
    path = tmp_path / "m.py"
    assert {target for node in _imports(tree)
            for target in _targets("parbench.p.m", path, node, modules)} == {
        "parbench.p.b", "parbench.c", "parbench.d"}


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (imports inside functions count):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in found)


def _private(name: str) -> bool:
    """A name starting with `_` and not a dunder (`__version__` is public)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for each private name or module of parbench a script imports, at any
    depth, or reads as an attribute of a name it imported from parbench (`fc._path` after
    `from parbench.advisor import fixed_costs as fc`)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            bound.update(alias.asname or alias.name.split(".")[0] for alias in node.names
                         if alias.name.split(".")[0] == PACKAGE)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if node.module.split(".")[0] == PACKAGE:
                bound.update(alias.asname or alias.name for alias in node.names)
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == PACKAGE and any(_private(part) for part in parts[1:]):
                yield node.lineno, name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in bound:
                yield node.lineno, ast.unparse(node)


def _scripts() -> list[Path]:
    return source_files("benchmarks", "results")


def test_scripts_use_public_names_of_parbench():
    uses = [f"{path.relative_to(ROOT)}:{line} {name}" for path in _scripts()
            for line, name in sorted(_private_uses(ast.parse(path.read_text(), str(path))))]
    assert not uses, "private names of parbench used:\n" + "\n".join(uses)


def test_the_private_check_sees_private_names_and_modules():
    tree = ast.parse("from parbench.a import _b, c\nimport parbench._d.e\n"
                     "def f():\n    from parbench.g._h import i\n"
                     "from parbench import __version__\nfrom os import _exit\n"
                     "from parbench.j import k as m\nm._n(m.o, c._p, parbench.q._r, os._s)\n")
    assert sorted(_private_uses(tree)) == [
        (1, "parbench.a._b"), (2, "parbench._d.e"), (4, "parbench.g._h"), (4, "parbench.g._h.i"),
        (8, "c._p"), (8, "m._n"), (8, "parbench.q._r")]
