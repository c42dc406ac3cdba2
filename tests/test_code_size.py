"""Small modules and functions a newcomer reads in one sitting: no module of parbench
or benchmarks over 400 lines, no function over 60 (docstring included)."""

import ast
from pathlib import Path

from tests.support import ROOT, source_files

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return source_files("parbench", "benchmarks")


def test_no_module_is_over_its_limit():
    long = {str(path.relative_to(ROOT)): lines for path in _modules()
            if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_no_function_is_over_its_limit():
    long = {f"{path.relative_to(ROOT)}:{node.lineno} {node.name}": length
            for path in _modules() for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"
