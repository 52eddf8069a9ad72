"""The README's Python examples run, and every value they show in a comment is what the code returns."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def shown_value(lines: list[str], stmt: ast.stmt) -> str | None:
    """The literal in a comment at the end of the statement's last line, or alone on the next line."""
    last = lines[stmt.end_lineno - 1]
    inline = re.search(r"#\s*(.+)$", last[stmt.end_col_offset:])
    if inline:
        return inline.group(1)
    following = lines[stmt.end_lineno].strip() if stmt.end_lineno < len(lines) else ""
    return following[1:].strip() if following.startswith("#") else None


def test_readme_examples_run_and_show_true_values(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = python_blocks()
    assert blocks, "the README has Python examples"
    checked = 0
    for code in blocks:
        namespace: dict = {}
        lines = code.splitlines()
        for stmt in ast.parse(code).body:
            exec(compile(ast.Module([stmt], []), "README.md", "exec"), namespace)
            if isinstance(stmt, ast.Expr):
                shown = shown_value(lines, stmt)
                try:
                    expected = ast.literal_eval(shown) if shown else None
                except (ValueError, SyntaxError):
                    continue
                value = eval(compile(ast.Expression(stmt.value), "README.md", "eval"), namespace)
                assert value == expected, (ast.unparse(stmt), value)
                checked += 1
    assert checked >= 2
    assert os.path.exists(ROOT / "examples" / "qwen3_tool_call.txt")
