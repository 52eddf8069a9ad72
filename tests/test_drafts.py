"""Calls drafted or quoted inside reasoning (issue 31, class 1): text inside a reasoning block that the model
closes later is reasoning, whole; a drafted call never runs twice; a call after a reasoning opener that is
never closed is still a call; one-shot equals streamed. The per-grammar tables here are written by hand
from the families' formats; tests/test_drift.py applies the same rewrites to every grammar's goldens."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import strict_equal
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.errors import ArgumentError, GrammarError
from grammar_parse._engine.grammar import build_grammar
from strategies import chunkings, examples

QWEN_DRAFT = ('<think>I could write <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
              ' but let me check the unit first.</think><tool_call>{"name": "get_weather", "arguments": '
              '{"city": "Paris", "unit": "c"}}</tool_call>')
SEED_CALL = ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n</function>\n"
             "</seed:tool_call>")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


#: (grammar, output, expected message): drafts and quotes in a block that closes, hand-written per family.
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("qwen3", QWEN_DRAFT, {
        "role": "assistant",
        "reasoning_content": 'I could write <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                             '</tool_call> but let me check the unit first.',
        "tool_calls": [call("get_weather", city="Paris", unit="c")]}),
    # a Seed-OSS transcript that explains the format before using it: the call is made once
    ("seed_oss", f"<seed:think>The format is {SEED_CALL} so I will write that.</seed:think>{SEED_CALL}<seed:eos>", {
        "role": "assistant",
        "reasoning_content": f"The format is {SEED_CALL} so I will write that.",
        "tool_calls": [call("get_weather", city="Paris")]}),
    # the reasoning merely quotes the marker
    ("mistral_v11", '[THINK]I must answer with [TOOL_CALLS] and the name.[/THINK][TOOL_CALLS]get_weather[ARGS]'
                    '{"city": "Paris"}</s>', {
        "role": "assistant", "reasoning_content": "I must answer with [TOOL_CALLS] and the name.",
        "tool_calls": [call("get_weather", city="Paris")]}),
    ("lfm2", "<think>Calls go in <|tool_call_start|> blocks; none needed.</think>Hello!<|im_end|>", {
        "role": "assistant", "thinking": "Calls go in <|tool_call_start|> blocks; none needed.",
        "content": "Hello!"}),
    ("deepseek_r1", "<think>Maybe <｜tool▁calls▁begin｜> later.</think>Hi.<｜end▁of▁sentence｜>", {
        "role": "assistant", "reasoning_content": "Maybe <｜tool▁calls▁begin｜> later.", "content": "Hi."}),
    # a call after a reasoning opener that is never closed is a call (the last round's fix holds)
    ("qwen3", '<think>Let me look. <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
     {"role": "assistant", "reasoning_content": "Let me look.", "tool_calls": [call("get_weather", city="Paris")]}),
    ("seed_oss", f"<seed:think>I will call it.{SEED_CALL}<seed:eos>", {
        "role": "assistant", "reasoning_content": "I will call it.", "tool_calls": [call("get_weather", city="Paris")]}),
]

IDS = [f"{g}-{i}" for i, (g, _, _) in enumerate(CASES)]


def parse(grammar: str, text: str, chunks: list[str] | None = None, **options: Any) -> Any:
    parser = gp.ResponseParser(grammar, "", **options)
    if chunks is None:
        return parser.finalize(text)[0]
    for chunk in chunks:
        parser.feed(chunk)
    return parser.finalize()[0]


def trimmed(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v.strip() if isinstance(v, str) else v for k, v in message.items()}


@pytest.mark.parametrize("grammar, text, expected", CASES, ids=IDS)
def test_a_draft_is_reasoning_and_a_call_is_made_once(grammar: str, text: str, expected: dict[str, Any]) -> None:
    got = parse(grammar, text)
    assert strict_equal(trimmed(got), expected), json.dumps(got, ensure_ascii=False)
    for size in (1, 3, 7):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert strict_equal(parse(grammar, text, chunks), got), f"{size}-char chunks differ"


@pytest.mark.parametrize("grammar, text, expected", CASES, ids=IDS)
@settings(max_examples=examples(0.1), deadline=None)
@given(data=st.data())
def test_any_chunking_equals_one_shot(grammar: str, text: str, expected: dict[str, Any], data: st.DataObject) -> None:
    assert strict_equal(parse(grammar, text, data.draw(chunkings(text))), parse(grammar, text))


def test_a_drafted_call_reaches_a_client_once() -> None:
    """The Chat Completions deltas of the issue's output carry one call, with the real call's arguments, and
    reasoning deltas that hold the draft."""
    stream = ChatCompletionsStream("qwen3", "")
    deltas = [d for ch in QWEN_DRAFT for d in stream.feed(ch)] + stream.finish()
    calls = {c["index"]: c for d in deltas for c in d.get("tool_calls", []) if "id" in c}
    assert len(calls) == 1
    arguments = "".join(c["function"].get("arguments", "") for d in deltas for c in d.get("tool_calls", []))
    assert json.loads(arguments) == {"city": "Paris", "unit": "c"}
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    assert "<tool_call>" in reasoning and reasoning.endswith("check the unit first.")
    assert not "".join(d.get("content") or "" for d in deltas).strip()


def test_what_follows_call_markup_in_open_reasoning_is_held_until_it_is_known() -> None:
    """Streamed, nothing after the markup comes out while the block is open: it may be reasoning (a close
    follows) or a call (the output ends first). With the "fallback" reading (Qwen3's default) the hold
    lasts past the close, until a call follows or the output ends."""
    parser = gp.ResponseParser("qwen3", "", calls_in_reasoning="never")
    assert [e["type"] for e in parser.feed("<think>Plan. ")] == ["region_open", "region_chunk"]
    assert parser.feed('<tool_call>{"name": "f", "arguments": {}}</tool_call> more') == []
    events = parser.feed("</think>")
    assert [e["type"] for e in events] == ["region_chunk", "region_chunk", "region_close"]
    assert events[-1]["value"] == 'Plan. <tool_call>{"name": "f", "arguments": {}}</tool_call> more'
    assert parser.feed("Done.") != []  # the held text is out: streaming goes on

    parser = gp.ResponseParser("qwen3", "")
    parser.feed('<think>Plan. <tool_call>{"name": "f", "arguments": {}}</tool_call></think>')
    assert parser.feed("Done.") == []  # a call may still follow: the draft may still be the call
    message, events = parser.finalize()
    assert message["tool_calls"] == [call("f")] and message["content"] == "Done."
    assert [e["field"] for e in events if e["type"] == "region_close"] == ["tool_calls", "reasoning_content", "content"]


CLOSED_CALL = '<think>Check it.\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>\n</think>Done.'


@pytest.mark.parametrize("reading, calls, reasoning", [
    ("never", [], 'Check it.\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'),
    ("fallback", [call("f", a=1)], "Check it."),  # no call follows the block: the one in it is the call
    ("always", [call("f", a=1)], "Check it."),
    (False, [], 'Check it.\n<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>'),
    (True, [call("f", a=1)], "Check it."),
])
def test_calls_in_reasoning_chooses_the_reading(reading: Any, calls: list[Any], reasoning: str) -> None:
    for chunks in (None, list(CLOSED_CALL)):
        got = parse("qwen3", CLOSED_CALL, chunks, calls_in_reasoning=reading)
        assert got.get("tool_calls", []) == calls
        assert got["reasoning_content"].strip() == reasoning and got["content"] == "Done."


def test_always_reads_the_draft_as_a_call_too() -> None:
    """The other reading, asked for: every call written is a call (the draft included)."""
    got = parse("qwen3", QWEN_DRAFT, calls_in_reasoning="always")
    assert [c["function"]["arguments"] for c in got["tool_calls"]] == [{"city": "Paris"}, {"city": "Paris", "unit": "c"}]
    assert parse("qwen3", QWEN_DRAFT, calls_in_reasoning="fallback")["tool_calls"] == [call("get_weather", city="Paris", unit="c")]


@pytest.mark.parametrize("name, reading", [("qwen3", "fallback"), ("qwen3_coder", "fallback"), ("glm47", "never"),
                                           ("deepseek_r1", "never"), ("gpt_oss", "always"), ("apertus", "always")])
def test_each_family_has_a_documented_default(name: str, reading: str) -> None:
    grammar = gp.load_grammar(name)
    assert grammar.calls_in_reasoning == reading
    if reading != "never":  # the header says why
        assert f'//@ calls_in_reasoning "{reading}"' in grammar.source


def test_bad_readings_are_refused() -> None:
    with pytest.raises(ArgumentError) as e:
        gp.ResponseParser("qwen3", "", calls_in_reasoning="sometimes")
    assert e.value.code == "usage.calls_in_reasoning"
    with pytest.raises(GrammarError, match="calls_in_reasoning"):
        build_grammar('//@ calls_in_reasoning "maybe"\n//@ region content {"content": "text"}\n'
                      'start: content?\ncontent: CONTENT_TEXT+\n%declare CONTENT_TEXT\n')
