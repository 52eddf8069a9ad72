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


def run_checked(code: str, namespace: dict) -> int:
    """Run ``code`` statement by statement; an expression followed by a literal comment must equal it.
    Returns how many values were checked."""
    lines = code.splitlines()
    checked = 0
    for stmt in ast.parse(code).body:
        shown = shown_value(lines, stmt) if isinstance(stmt, ast.Expr) else None
        try:
            expected = ast.literal_eval(shown) if shown else None
        except (ValueError, SyntaxError):
            shown = None
        if shown is None:
            exec(compile(ast.Module([stmt], []), "example", "exec"), namespace)
            continue
        value = eval(compile(ast.Expression(stmt.value), "example", "eval"), namespace)  # type: ignore[attr-defined]
        assert value == expected, (ast.unparse(stmt), value)
        checked += 1
    return checked


def test_readme_examples_run_and_show_true_values(monkeypatch):
    monkeypatch.chdir(ROOT)
    blocks = python_blocks()
    assert blocks, "the README has Python examples"
    assert sum(run_checked(code, {}) for code in blocks) >= 2
    assert os.path.exists(ROOT / "examples" / "qwen3_tool_call.txt")


def test_readme_server_loop_streams_what_one_shot_parses(monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    code = next(block for block in python_blocks() if "def serve(" in block)
    exec(compile(code, "README.md", "exec"), namespace)
    pieces = ["<think>Need the tool.</th", 'ink>Checking. <tool_call>{"name": "get_weather", "argu',
              'ments": {"city": "Paris"}}</tool_call><|im_end|>']
    chunks = list(namespace["serve"](lambda prompt: iter(pieces), "", None))
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant"}
    assert "".join(d.get("content", "") for d in deltas) == "Checking."
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "Need the tool."
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "get_weather"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_readme_lists_every_built_in_grammar_with_its_aliases():
    import grammar_parse as gp

    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## Built-in grammars", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]*) \|", section, re.M)
    listed = {name: [a.strip() for a in aliases.split(",") if a.strip()] for name, aliases in rows}
    assert listed == {name: list(aliases) for name, aliases in gp.list_grammars().items()}
    assert f"{len(listed)} formats" in section
