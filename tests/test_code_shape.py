"""The code keeps the shape the house asks for: no function whose code (its docstring aside) runs over 80 lines unless
a comment right above it says why, and ruff's configuration stays the one `make lint` runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "src" / "beyondlabels", ROOT / "callbacks", ROOT / "train.py", ROOT / "evaluate.py"]
MAX_LINES = 80
REASON = "# Over 80 lines"


def _files() -> list[Path]:
    return sorted(p for s in SOURCES for p in ([s] if s.is_file() else s.rglob("*.py")))


def code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's last line, less its docstring's."""
    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        lines -= first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return lines


def long_functions(source: str) -> list[tuple[int, str, int]]:
    """``(line, name, code lines)`` of the functions of ``source`` over the limit without a reason above them."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and code_lines(node) > MAX_LINES:
            top = (
                min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1
            )  # 0-based line of the first decorator
            above = [line.strip() for line in lines[max(0, top - 4) : top]]
            if not any(line.startswith(REASON) for line in above):
                found.append((node.lineno, node.name, code_lines(node)))
    return found


def test_the_rule_counts_code_and_reads_the_reason():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    long = f'def f():\n    """A docstring\n\n    of lines."""\n{body}\n'
    assert long_functions(long) == [(1, "f", MAX_LINES + 1)]
    assert long_functions(f"{REASON}: one table of every case.\n{long}") == []
    short = 'def f():\n    """A docstring\n' + "\n" * 100 + f'    """\n{body[: body.rfind(chr(10))]}\n'
    assert long_functions(short) == []  # a long docstring is not long code


def test_no_function_runs_over_80_lines_without_its_reason():
    found = [
        f"{p.relative_to(ROOT)}:{line} {name} ({n} lines)"
        for p in _files()
        for line, name, n in long_functions(p.read_text(encoding="utf-8"))
    ]
    assert not found, "split these along their concerns, or write the reason above them:\n" + "\n".join(found)


def test_ruff_is_configured_for_the_whole_repository():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert config["line-length"] == 120
    assert {"E", "F", "W", "I", "B"} <= set(config["lint"]["select"])
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "ruff check" in makefile and "ruff format --check" in makefile
