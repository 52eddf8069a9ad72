"""The decoding-constraint exports (grammar_parse.constrain) are plain Python: every built-in grammar either
exports both ways or is listed in docs/constraints.md as not supported, and the page's count is the real
one. (What the constraints accept is checked against the engines in tests/constrain, opt-in.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import grammar_parse as gp
from grammar_parse import constrain

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "constraints.md").read_text(encoding="utf-8")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _refusal(name: str) -> str | None:
    grammar = gp.load_grammar(name)
    try:
        constrain.to_llguidance(grammar, tools=TOOLS)
        constrain.to_structural_tag(grammar, tools=TOOLS)
    except gp.GrammarParseError as e:
        assert e.code == "constrain.unsupported", e
        return str(e)
    return None


def _listed() -> set[str]:
    table = PAGE[PAGE.index("Not supported, each export"):PAGE.index("Known limits:")]
    return {n for row in table.splitlines() if row.startswith("| `") for n in re.findall(r"`(\w+)`", row.split(" | ")[0])}


def test_the_page_lists_exactly_the_grammars_that_are_refused() -> None:
    refused = {n for n in gp.list_grammars() if _refusal(n) is not None}
    assert refused == _listed()


def test_the_page_counts_the_grammars_that_export() -> None:
    total = len(gp.list_grammars())
    exported = total - len(_listed())
    assert f"Both exports take {exported} of the {total} built-in grammars" in PAGE


@pytest.mark.parametrize("choice", ["auto", "required", "none", {"type": "function", "function": {"name": "get_weather"}}])
def test_every_exported_grammar_exports_every_tool_choice(choice: object) -> None:
    for name in sorted(gp.list_grammars()):
        if name in _listed():
            continue
        grammar = gp.load_grammar(name)
        lark = constrain.to_llguidance(grammar, tools=TOOLS, tool_choice=choice)
        tag = constrain.to_structural_tag(grammar, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
        assert lark.startswith("%llguidance {}") and tag["type"] == "structural_tag"
        if choice != "none":
            assert "get_weather" in lark, name
