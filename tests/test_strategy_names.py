"""No module of parbench/ outside the strategy registry picks behaviour by a strategy's name.

A strategy declares what its callers need: its `Layout` (`strategies.layout_of(name)`, with
properties such as `data_parallel`, `pipelined`, `splits_layers`), whether it all-reduces its
gradients (`strategies.allreduces_gradients(name)`), its options (`strategies.options_of`).
A caller asks those, so that a strategy added to, renamed in or removed from the registry
(parbench/strategies/__init__.py, the one module this test does not read) changes no caller.

The rule, read from each module's syntax tree (ast). A *name literal* is a string constant
equal to a registered name (`strategies.names()`), a tuple, list or set literal (or `set(...)`,
`frozenset(...)`, `tuple(...)` of one) holding such a constant, or a variable the same module
binds to one of those. A *name-keyed dict* is a dict literal with such a constant as a key,
or a variable bound to one. An expression *plausibly holds a strategy's name* where it is a
variable or attribute called `strategy`, `strategies`, `name`, `names`, `strategy_name(s)` or
ending in `_strategy`/`_strategies`; a subscript `x["strategy"]` or call `x.get("strategy")`
(a record's, a table row's, a frame's column); or one of those passed through `str(...)`, a
string method (`.lower()`, `.split(...)`, ...), pandas' `.str` or indexed (`names[0]`).
Flagged, where one side plausibly holds a strategy's name:

* a comparison (`==`, `!=`, `in`, `not in`, either way round) with a name literal;
* a lookup of it in a name-keyed dict (`TABLE[strategy]`, `TABLE.get(record["strategy"])`);
* `match` on it with a `case` of a registered name;
* a method that compares it: `.startswith`/`.endswith` with a prefix/suffix of a registered
  name, pandas' `.isin`/`.eq`/`.ne` with a name literal.

Not flagged, as names used as data: a name literal that nothing is compared to (a default list
of strategies to run, an experiment, a `Prediction("ddp", ...)` or record's `strategy=` label
being built, help text, `strategies.plan("ddp", ...)` or `Config("ddp", ...)` building that
strategy); a comparison with the registry's own constant (`strategy == strategies.BASELINE`);
two names compared with each other (`config.strategy == name`); and an option's value that
happens to spell a strategy's name (tensor_parallel.py's `shard_with == "fsdp"`: `shard_with`
does not hold a strategy's name). Names bound in another module are not followed.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from parbench import strategies
from parbench.advisor.version import MODEL_FILES
from tests.support import ROOT, source_files

REGISTRY_MODULE = "parbench/strategies/__init__.py"
NAMES = frozenset(strategies.names())

# Lookups by name left in MODEL_FILES, by file: how many. The models' next version asks the
# registry instead (their sources are fingerprinted: parbench/advisor/version.py, so changing
# their code changes FINGERPRINT and owes a new PREDICTOR_VERSION). None left today.
IN_THE_MODELS: dict[str, int] = {}

_NAME_WORDS = {"strategy", "strategies", "name", "names", "strategy_name", "strategy_names"}
_STRING_METHODS = {"lower", "upper", "casefold", "strip", "lstrip", "rstrip", "split",
                   "rsplit", "partition", "rpartition", "removeprefix", "removesuffix",
                   "replace", "title"}
_COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in NAMES


def _word(word: str) -> bool:
    return word in _NAME_WORDS or word.endswith(("_strategy", "_strategies"))


def _holds_a_name(node: ast.AST) -> bool:
    """Whether `node` plausibly holds a strategy's registered name (see the module's rule)."""
    if isinstance(node, ast.Name):
        return _word(node.id)
    if isinstance(node, ast.Attribute):
        return _word(node.attr) or (node.attr == "str" and _holds_a_name(node.value))
    if isinstance(node, ast.Subscript):
        key = node.slice
        return (isinstance(key, ast.Constant) and key.value == "strategy") or _holds_a_name(
            node.value)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "str" and node.args:
            return _holds_a_name(node.args[0])
        if isinstance(func, ast.Attribute):
            if func.attr == "get" and node.args and isinstance(node.args[0], ast.Constant):
                return node.args[0].value == "strategy"
            return func.attr in _STRING_METHODS and _holds_a_name(func.value)
    return False


class _Finder(ast.NodeVisitor):
    """The lines of one module that look a strategy up by its name."""

    def __init__(self, tree: ast.Module) -> None:
        self.literals: set[str] = set()  # variables bound to a name literal
        self.dicts: set[str] = set()  # variables bound to a name-keyed dict
        for node in ast.walk(tree):
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                if isinstance(target, ast.Name) and value is not None:
                    if self._literal(value):
                        self.literals.add(target.id)
                    elif self._keyed(value):
                        self.dicts.add(target.id)
        self.found: list[int] = []

    def _literal(self, node: ast.AST) -> bool:
        if _is_name(node):
            return True
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return any(_is_name(element) for element in node.elts)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("set", "frozenset", "tuple") and len(node.args) == 1):
            return self._literal(node.args[0])
        return isinstance(node, ast.Name) and node.id in getattr(self, "literals", ())

    def _keyed(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Dict):
            return any(key is not None and _is_name(key) for key in node.keys)
        return isinstance(node, ast.Name) and node.id in getattr(self, "dicts", ())

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
            if isinstance(op, _COMPARISONS) and (
                    (self._literal(left) and _holds_a_name(right))
                    or (self._literal(right) and _holds_a_name(left))):
                self.found.append(node.lineno)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self._keyed(node.value) and _holds_a_name(node.slice):
            self.found.append(node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and node.args:
            first = node.args[0]
            if func.attr == "get" and self._keyed(func.value) and _holds_a_name(first):
                self.found.append(node.lineno)
            elif _holds_a_name(func.value) and (
                    (func.attr in ("isin", "eq", "ne") and self._literal(first))
                    or (func.attr in ("startswith", "endswith") and _affixes(func.attr, first))):
                self.found.append(node.lineno)
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        if _holds_a_name(node.subject):
            for case in node.cases:
                if any(isinstance(pattern, ast.MatchValue) and _is_name(pattern.value)
                       for pattern in ast.walk(case.pattern)):
                    self.found.append(case.pattern.lineno)
        self.generic_visit(node)


def _affixes(method: str, node: ast.AST) -> bool:
    """`.startswith(node)`/`.endswith(node)` matches some registered name."""
    values = node.elts if isinstance(node, ast.Tuple) else [node]
    return any(isinstance(value, ast.Constant) and isinstance(value.value, str)
               and any(getattr(name, method)(value.value) for name in NAMES)
               for value in values)


def lookups(source: str) -> list[int]:
    """The lines of `source` that pick behaviour by a strategy's registered name."""
    tree = ast.parse(source)
    finder = _Finder(tree)
    finder.visit(tree)
    return sorted(finder.found)


def _modules() -> list[Path]:
    return [path for path in source_files("parbench")
            if path.relative_to(ROOT).as_posix() != REGISTRY_MODULE]


def test_no_caller_picks_a_strategy_by_its_name():
    found: dict[str, list[int]] = {}
    for path in _modules():
        lines = lookups(path.read_text())
        if lines:
            found[path.relative_to(ROOT).as_posix()] = lines
    counts = {path: len(lines) for path, lines in found.items()}
    unexplained = [f"{path}:{line}" for path, lines in found.items()
                   if counts[path] != IN_THE_MODELS.get(path) for line in lines]
    assert not unexplained, (
        "strategies looked up by their registered name (ask strategies.layout_of, a Layout "
        "property, allreduces_gradients or options_of instead): " + ", ".join(unexplained))
    stale = {path: count for path, count in IN_THE_MODELS.items() if counts.get(path) != count}
    assert not stale, f"IN_THE_MODELS counts lookups no longer there: {stale}; found {counts}"


def test_only_the_models_are_allowed_their_lookups():
    assert set(IN_THE_MODELS) <= set(MODEL_FILES)


@pytest.mark.parametrize("code", [
    'if strategy == "ddp": pass',
    'if "ddp" != config.strategy: pass',
    'ok = record["strategy"] in ("fsdp", "hsdp")',
    'ok = row["strategy"] not in ["single"]',
    'ok = str(record.get("strategy")) in {"tp", "fsdp-tp"}',
    'SHARDED = frozenset({"fsdp", "hsdp"})\ndef f(name):\n    return name in SHARDED',
    'ok = plan.strategy.lower() == "pipeline"',
    'ok = frame[frame["strategy"].isin(["ddp", "fsdp"])]',
    'ok = names[0] == "single"',
    'ok = self.strategy.startswith("pipeline-")',
    'ok = frame["strategy"].str.startswith(("pipe", "x"))',
    'STYLE = {"ddp": 1, "fsdp": 2}\ndef f(record):\n    return STYLE[record["strategy"]]',
    'x = {"ddp": 1}.get(strategy_name)',
    'match strategy:\n    case "ddp" | "fsdp":\n        pass',
], ids=lambda code: code.splitlines()[-1].strip())
def test_a_lookup_by_name_is_found(code):
    assert lookups(textwrap.dedent(code)), code


@pytest.mark.parametrize("code", [
    'DEFAULT = ["single", "ddp", "fsdp"]',
    'p = Prediction("ddp", 8, 1.0)',
    'record = Record(strategy="single")',
    'config = Config("ddp", workload, 2, devices)',
    'plan = strategies.plan("fsdp", workload, 8, devices)',
    'if options.shard_with == "fsdp": pass',
    'if self.shard_with in ("none", "fsdp"): pass',
    'if strategy == strategies.BASELINE: pass',
    'same = [c for c in configs if c.strategy == name]',
    'mesh = self._mesh["tp"]',
    'ok = record["status"] in ("ok", "oom")',
    'if strategy == "torchgpipe": pass',
    'ok = record["strategy_options"] == "ddp"',
    'ok = strategy.startswith("zz")',
    'match kind:\n    case "pipeline":\n        pass',
    'help = "give --strategy ddp or fsdp"',
], ids=lambda code: code.splitlines()[-1].strip())
def test_a_name_used_as_data_is_not_a_lookup(code):
    assert not lookups(textwrap.dedent(code)), code
