"""A call whose region opens and closes in one feed is read whole (grammar_parse._engine.toolstream.WHOLE_CALLS)
instead of walked value by value: differentially, the Chat Completions message and its deltas' sum are the
same either way, on every golden sample of every grammar and on mutations of its calls' arguments that
each take the whole reading off its plain path (constants, huge integers, surrogates, control
characters, bad escapes, deep nesting, repeated keys, typing, keys out of order, text after the object)."""

from __future__ import annotations

from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse._engine import toolstream
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from goldens import Golden, all_goldens, called_tools
from wire_checks import fold

SAMPLES = [g for g in all_goldens() if g.grammar in gp.list_grammars()]

#: Each replaces the first ``"arguments": {`` (a Hermes-style call's arguments) of a sample's output.
MUTATIONS = {
    "nan": '"n": NaN, ',
    "infinite": '"n": 1e999, ',
    "huge_int": '"n": ' + "9" * 5000 + ", ",
    "limit_int": '"n": ' + "9" * 4300 + ", ",  # (the longest integer Python converts: read whole)
    "past_limit_int": '"n": -' + "9" * 4301 + ", ",
    "escaped_surrogate": '"s": "\\ud800", ',
    "raw_surrogate": '"s": "\ud800", ',
    "raw_tab": '"s": "a\tb", ',
    "bad_escape": '"s": "\\q", ',
    "deep": '"d": ' + "[" * 300 + "]" * 300 + ", ",
    "repeated_key": '"k": 1, "k": 2, ',
    "typed_strings": '"n": "3", "flag": "true", "f": "2.5", ',
    "nested": '"o": {"n": "3", "list": [1, {"a": null}]}, ',
}
TEXT_MUTATIONS = {
    "spaced": ('"arguments": {', '"arguments" :  {  '),
    "arguments_first": ('{"name": ', '{"arguments": {"q": 1}, "name": '),
    "no_name": ('"name": ', '"title": '),
    "other_key": ('"arguments": {', '"parameters": {'),
    "string_arguments": ('"arguments": {', '"arguments": "{}", "x": {'),
    "trailing": ('"arguments": {', '"arguments": {"a": 1}}, "b": {'),
}


def _tools(sample: Golden) -> list[dict[str, Any]]:
    """The sample's tools, plus typed parameters the mutations write (so typing has work to do)."""
    tools = sample.tools or called_tools(sample, open_arguments=True)
    typed = {"n": {"type": "integer"}, "flag": {"type": "boolean"}, "f": {"type": "number"},
             "o": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    out = []
    for tool in tools:
        fn = dict(tool.get("function", tool))
        params = dict(fn.get("parameters") or {"type": "object"})
        params["properties"] = {**params.get("properties", {}), **typed}
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def _both(grammar: str, text: str, prefix: str, tools: Any) -> list[Any]:
    """The one-shot message and finish reason, and the sum of a one-shot stream's deltas, read whole and
    walked."""
    results = []
    for whole in (True, False):
        toolstream.WHOLE_CALLS = whole
        try:
            message = chat_message(text, grammar, prefix=prefix, tools=tools, strict=False, ids=lambda kind: kind)
            stream = ChatCompletionsStream(grammar, prefix, tools=tools, strict=False, ids=lambda kind: kind)
            results.append((message, fold(stream.feed(text) + stream.finish())))
        finally:
            toolstream.WHOLE_CALLS = True
    return results


@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.grammar}/{s.name}" for s in SAMPLES])
def test_a_whole_call_reads_as_the_walk_does(sample: Golden) -> None:
    whole, walked = _both(sample.grammar, sample.text, sample.prefix, sample.tools)
    assert whole == walked


def _mutants() -> list[tuple[str, Golden, str]]:
    out = []
    for sample in SAMPLES:
        if '"arguments": {' not in sample.text or sample.name.startswith(("broken", "cut")):
            continue
        for name, inserted in MUTATIONS.items():
            out.append((name, sample, sample.text.replace('"arguments": {', '"arguments": {' + inserted, 1)))
        for name, (old, new) in TEXT_MUTATIONS.items():
            if old in sample.text:
                out.append((name, sample, sample.text.replace(old, new, 1)))
    return out


MUTANTS = _mutants()


@pytest.mark.parametrize(("mutation", "sample", "text"), MUTANTS,
                         ids=[f"{s.grammar}/{s.name}/{m}" for m, s, _ in MUTANTS])
def test_a_mutated_call_reads_whole_as_the_walk_does(mutation: str, sample: Golden, text: str) -> None:
    whole, walked = _both(sample.grammar, text, sample.prefix, _tools(sample))
    assert whole == walked


def test_the_mutations_reach_the_whole_reading() -> None:
    """Guard: mutants are read whole and walked both (else the differential above compares the walk with itself)."""
    reads: list[bool] = []
    original = toolstream._JsonCallReader.whole

    def counted(self: Any, body: str, values: list[Any]) -> bool:
        reads.append(original(self, body, values))
        return reads[-1]

    toolstream._JsonCallReader.whole = counted  # type: ignore[method-assign]
    try:
        for _, sample, text in MUTANTS:
            if sample.grammar == "qwen3":
                chat_message(text, "qwen3", prefix=sample.prefix, tools=_tools(sample), strict=False)
    finally:
        toolstream._JsonCallReader.whole = original  # type: ignore[method-assign]
    assert reads.count(True) >= 10 and reads.count(False) >= 10, reads
