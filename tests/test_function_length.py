"""No function in the product packages is longer than 80 lines (small functions are the style)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("fbs", "storage", "engine", "p2p", "node")
#: Generated code is exempt (flatc and protoc output).
GENERATED = ("fbs/generated", "engine/proto")
MAX_LINES = 80


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1})"
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_80_lines(package: str) -> None:
    found = [
        line
        for path in sorted((ROOT / package).rglob("*.py"))
        if not any(str(path.relative_to(ROOT)).startswith(g) for g in GENERATED)
        for line in _long_functions(path)
    ]
    assert found == []
