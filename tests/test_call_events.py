"""Tool calls stream out of the parser itself (``call_events=True``): call_open, call_arguments and call_close
events in the same pass as the region events, which the wire adapters only frame."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from grammar_parse.errors import ArgumentError
from goldens import Golden, all_goldens
from strategies import chunkings, examples, grammar_outputs

SAMPLES = [g for g in all_goldens() if g.grammar in gp.list_grammars() and "error" not in g.expected
           and g.expected.get("tool_calls")]


def _streamed(grammar: str, chunks: list[str], *, prefix: str = "", tools: Any = None,
              strict: bool = True) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    """The calls the call events of a parse fed ``chunks`` add up to (in order of their heads: name,
    arguments text, and once closed the typed value and problems), every event, and the message."""
    parser = gp.ResponseParser(grammar, prefix, tools=tools, extended_events=True, call_events=True, strict=strict)
    events = list(parser.initial_events)
    for chunk in chunks:
        events += parser.feed(chunk)
    message, last = parser.finalize()
    events += last
    calls: dict[int, dict[str, Any]] = {}
    for event in events:
        if event["type"] == "call_open":
            assert event["index"] not in calls, "a call opened twice"
            calls[event["index"]] = {"name": event["name"], "arguments": "", "closed": False}
        elif event["type"] == "call_arguments":
            assert not calls[event["index"]]["closed"], "arguments after the call closed"
            calls[event["index"]]["arguments"] += event["arguments"]
        elif event["type"] == "call_close":
            assert not calls[event["index"]]["closed"], "a call closed twice"
            calls[event["index"]].update(closed=True, value=event["value"], problems=event["problems"])
    return list(calls.values()), events, message


def _calls(sample: Golden, size: int) -> tuple[list[dict[str, Any]], list[Any], dict[str, Any]]:
    """:func:`_streamed` over a golden sample in chunks of ``size``."""
    chunks = [sample.text[i:i + size] for i in range(0, len(sample.text), size)]
    return _streamed(sample.grammar, chunks, prefix=sample.prefix, tools=sample.tools)


@pytest.mark.parametrize("size", [1, 7, 10_000])
@pytest.mark.parametrize("sample", SAMPLES, ids=[f"{s.grammar}/{s.name}" for s in SAMPLES])
def test_call_events_add_up_to_the_messages_calls(sample: Golden, size: int) -> None:
    calls, _, message = _calls(sample, size)
    expected = [c for c in message["tool_calls"] if isinstance(c["function"].get("name"), str) and c["function"]["name"]]
    assert [c["name"] for c in calls] == [c["function"]["name"] for c in expected]
    assert all(c["closed"] for c in calls)
    for call, want in zip(calls, expected):
        arguments = want["function"].get("arguments", {})
        assert call["value"] == json.loads(call["arguments"])  # (the typed value the closing event carries)
        if not want.get("errors") and isinstance(arguments, dict):
            assert json.loads(call["arguments"]) == arguments == call["value"]


def test_call_events_come_after_the_region_events_of_the_same_piece() -> None:
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    _, events, _ = _calls(Golden("qwen3", None, text, "", None, {}), 10_000)  # type: ignore[arg-type]
    kinds = [e["type"] for e in events]
    assert kinds.index("region_close") < kinds.index("call_open") < kinds.index("call_arguments") < kinds.index("call_close")


def test_call_events_need_extended_events() -> None:
    with pytest.raises(ArgumentError, match="extended_events"):
        gp.ResponseParser("qwen3", "", call_events=True)


CALL_GRAMMARS = sorted(n for n in gp.list_grammars() if gp.load_grammar(n).format.calls)


@pytest.mark.parametrize("name", CALL_GRAMMARS)
@settings(max_examples=examples(0.3), deadline=None)
@given(data=st.data())
def test_call_events_of_any_chunking_add_up_as_one_shot(name: str, data: st.DataObject) -> None:
    """Whatever the chunking, the call events add up to the same calls (one-shot reads plain calls whole,
    a chunked stream walks them: two readers that must agree)."""
    text = data.draw(grammar_outputs(name), label="text")
    chunks = data.draw(chunkings(text), label="chunks")
    assert _streamed(name, chunks, strict=False)[0::2] == _streamed(name, [text], strict=False)[0::2]
