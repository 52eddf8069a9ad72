"""Golden samples of every built-in grammar: tests/golden/<grammar>/<case>.txt is a model output,
<case>.json the message it must give (reviewed by hand against the format's documentation), with an
optional <case>.prefix.txt (the prompt) and <case>.tools.json (tool schemas). A <case>.json of the form
{"error": {"type": ..., "code": ...}} expects that error instead.

Each case is checked one-shot and streamed at several chunk sizes. `pytest --update-golden` rewrites the
.json files from the current output, for review; never commit one unread.
"""

from __future__ import annotations

import json

import pytest

import grammar_parse
from conformance import strict_equal
from goldens import GOLDEN, all_goldens, arguments_members, goldens, parsed

REQUIRED = {"plain", "one_call", "parallel_calls", "no_args", "text_around_calls"}
TRUNCATION = {"truncated", "malformed"}
CASES = all_goldens()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.grammar}/{c.name}" for c in CASES])
def test_golden(case, request):
    got = parsed(case.grammar, case.text, case.prefix, case.tools)
    if request.config.getoption("--update-golden"):
        case.expected_path.write_text(json.dumps(got, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    expected = json.loads(case.expected_path.read_text(encoding="utf-8"))
    assert strict_equal(got, expected), f"one-shot: {json.dumps(got, ensure_ascii=False)}"
    for size in (1, 2, 3, 5, 7, 13):
        chunks = [case.text[i:i + size] for i in range(0, len(case.text), size)]
        streamed = parsed(case.grammar, case.text, case.prefix, case.tools, chunks)
        assert strict_equal(streamed, expected), f"chunk size {size}: {json.dumps(streamed, ensure_ascii=False)}"


@pytest.mark.parametrize("name", sorted(grammar_parse.list_grammars()))
def test_every_builtin_grammar_has_its_golden_cases(name):
    folder = GOLDEN / name
    assert folder.is_dir(), f"tests/golden/{name}/ is missing"
    stems = {case.name for case in goldens(name)}
    assert REQUIRED <= stems, f"missing cases: {sorted(REQUIRED - stems)}"
    assert stems & TRUNCATION, "needs a truncated or malformed case"
    grammar = grammar_parse.load_grammar(name)
    if any(r.field in ("reasoning_content", "thinking", "reasoning") for r in grammar.regions.values()):
        assert "reasoning" in stems, "a grammar with reasoning needs a reasoning case"


def _limited(name):
    from grammar_parse._engine.delimiters import RegexMatcher

    return any(isinstance(m, RegexMatcher) and m.limit
               for info in grammar_parse.load_grammar(name).tables.states.values() for _, m, *_ in info.scanner.entries)


HANDED_OVER = [c for c in CASES if _limited(c.grammar)]


@pytest.mark.parametrize("case", HANDED_OVER, ids=[f"{c.grammar}/{c.name}" for c in HANDED_OVER])
def test_golden_with_every_limited_search_handed_over(case, monkeypatch):
    """A delimiter search that runs past its limit hands over to the linear matcher; with a limit of zero
    every such search does, and each sample still gives its message, one-shot and streamed."""
    from grammar_parse._engine import delimiters

    monkeypatch.setattr(delimiters, "search_budget", lambda chars, rate=0.0: 0.0)
    expected = json.loads(case.expected_path.read_text(encoding="utf-8"))
    assert strict_equal(parsed(case.grammar, case.text, case.prefix, case.tools), expected)
    for size in (1, 4):
        chunks = [case.text[i:i + size] for i in range(0, len(case.text), size)]
        assert strict_equal(parsed(case.grammar, case.text, case.prefix, case.tools, chunks), expected), size


def _arguments_cut(text: str) -> str | None:
    """The output with the first JSON call's arguments member (``, "arguments": {...}``) cut out, or None."""
    for start, _, end, _ in arguments_members(text):
        if start is not None:
            return text[:start] + text[end:]
    return None


WITHOUT_ARGUMENTS = [(c, cut) for c in CASES if "tool_calls" in json.loads(c.expected_path.read_text(encoding="utf-8"))
                     and (cut := _arguments_cut(c.text)) is not None]


@pytest.mark.parametrize("case, text", WITHOUT_ARGUMENTS, ids=[f"{c.grammar}/{c.name}" for c, _ in WITHOUT_ARGUMENTS])
def test_a_json_call_written_without_arguments_is_a_call_without_them(case, text):
    """A model calling a tool that takes no parameters often leaves the member out (``{"name": "get_time"}``).
    Every grammar reads that as a call without arguments, as qwen3's template does, not as an error that
    loses the message: the golden's calls, one of them without its arguments."""
    expected = json.loads(case.expected_path.read_text(encoding="utf-8"))["tool_calls"]
    got = parsed(case.grammar, text, case.prefix, case.tools)
    assert "parse_errors" not in got, got
    calls = got["tool_calls"]
    assert len(calls) == len(expected), calls
    changed = [(have, want) for have, want in zip(calls, expected) if have != want]
    assert len(changed) == 1, changed
    have, want = changed[0]
    assert "arguments" not in have["function"], have
    assert {**have["function"], "arguments": want["function"].get("arguments")} == want["function"], (have, want)
