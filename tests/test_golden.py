"""Golden samples of every built-in grammar: tests/golden/<grammar>/<case>.txt is a model output,
<case>.json the message it must give (reviewed by hand against the format's documentation), with an
optional <case>.prefix.txt (the prompt) and <case>.tools.json (tool schemas). A <case>.json of the form
{"error": {"type": ..., "code": ...}} expects that error instead.

Each case is checked one-shot and streamed at several chunk sizes. `pytest --update-golden` rewrites the
.json files from the current output, for review; never commit one unread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import grammar_parse
from conformance import jsonable, strict_equal

GOLDEN = Path(__file__).resolve().parent / "golden"
REQUIRED = {"plain", "one_call", "parallel_calls", "no_args", "text_around_calls"}
TRUNCATION = {"truncated", "malformed"}


def cases() -> list[tuple[str, Path]]:
    return [(d.name, t) for d in sorted(GOLDEN.iterdir()) if d.is_dir() for t in sorted(d.glob("*.txt"))
            if not t.name.endswith(".prefix.txt")]


def run(grammar: str, text: str, prefix: str, tools: Any, chunk: int | None) -> Any:
    try:
        parser = grammar_parse.ResponseParser(grammar, prefix, tools=tools)
        if chunk is None:
            return jsonable(parser.finalize(text)[0])
        for i in range(0, len(text), chunk):
            parser.feed(text[i:i + chunk])
        return jsonable(parser.finalize()[0])
    except grammar_parse.GrammarParseError as e:
        return {"error": {"type": type(e).__name__, "code": e.code}}


@pytest.mark.parametrize("grammar, path", cases(), ids=[f"{g}/{p.stem}" for g, p in cases()])
def test_golden(grammar, path, request):
    text = path.read_text(encoding="utf-8")
    prefix_file = path.with_name(path.stem + ".prefix.txt")
    prefix = prefix_file.read_text(encoding="utf-8") if prefix_file.exists() else ""
    tools_file = path.with_name(path.stem + ".tools.json")
    tools = json.loads(tools_file.read_text(encoding="utf-8")) if tools_file.exists() else None
    expected_file = path.with_suffix(".json")
    got = run(grammar, text, prefix, tools, None)
    if request.config.getoption("--update-golden"):
        expected_file.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(expected_file.read_text(encoding="utf-8"))
    assert strict_equal(got, expected), f"one-shot: {json.dumps(got, ensure_ascii=False)}"
    for chunk in (1, 2, 3, 5, 7, 13):
        streamed = run(grammar, text, prefix, tools, chunk)
        assert strict_equal(streamed, expected), f"chunk size {chunk}: {json.dumps(streamed, ensure_ascii=False)}"
@pytest.mark.parametrize("name", sorted(grammar_parse.list_grammars()))
def test_every_builtin_grammar_has_its_golden_cases(name):
    folder = GOLDEN / name
    assert folder.is_dir(), f"tests/golden/{name}/ is missing"
    stems = {p.stem for p in folder.glob("*.txt") if not p.name.endswith(".prefix.txt")}
    assert REQUIRED <= stems, f"missing cases: {sorted(REQUIRED - stems)}"
    assert stems & TRUNCATION, "needs a truncated or malformed case"
    grammar = grammar_parse.load_grammar(name)
    if any(r.field in ("reasoning_content", "thinking", "reasoning") for r in grammar.regions.values()):
        assert "reasoning" in stems, "a grammar with reasoning needs a reasoning case"
