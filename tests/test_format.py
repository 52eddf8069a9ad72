"""The compiled grammar's format (grammar_parse._engine.format): one record of what a message is, read by every
consumer, inferred for every built-in grammar and stated where an authored grammar needs to."""

from __future__ import annotations

import pickle
import re
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import batch
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.errors import GrammarError
from grammar_parse._engine.grammar import build_grammar
from grammar_parse.integrations import oneshot_message

NAMES = sorted(gp.list_grammars())

# A grammar whose reasoning field says nothing by its name: only its stated role makes it reasoning.
SCRATCHPAD = r'''
//@ defaults {"role": "assistant"}
//@ region scratchpad {"content": "text", "role": "reasoning"}
//@ region content {"content": "text"}
//@ region calls {"field": "tool_calls", "content": "json", "repeats": true, "transform": {"type": "function", "function": "{content}"}}
start: scratchpad? content? _end?
scratchpad: SCRATCHPAD_OPEN SCRATCHPAD_TEXT* SCRATCHPAD_CLOSE
content: (CONTENT_TEXT | calls)+
calls: CALLS_OPEN CALLS_TEXT* CALLS_CLOSE
_end: END_OF_TURN UNCLAIMED*
SCRATCHPAD_OPEN: "<pad>"
SCRATCHPAD_CLOSE: "</pad>"
CALLS_OPEN: "<call>"
CALLS_CLOSE: "</call>"
END_OF_TURN: "<eot>" | "<end>"
%declare SCRATCHPAD_TEXT CONTENT_TEXT CALLS_TEXT UNCLAIMED
'''
OUTPUT = '<pad>Plan it.</pad>Sure.<call>{"name": "f", "arguments": {"a": 1}}</call><eot>'


@pytest.fixture(scope="module")
def scratchpad() -> gp.Grammar:
    return build_grammar(SCRATCHPAD, source_name="scratchpad.lark")


def test_a_stated_role_makes_any_field_reasoning_for_every_consumer(scratchpad: gp.Grammar) -> None:
    fmt = scratchpad.format
    assert fmt.reasoning == ("scratchpad",) and fmt.reasoning_fields == ("scratchpad",)
    assert list(fmt.calls) == ["calls"] and fmt.content == ("content",)
    assert fmt.reasoning_delimiters == ("<pad>", "</pad>")
    assert fmt.end_of_turn == ("<eot>", "<end>")
    # The wire adapter sends the scratchpad as reasoning, the calls as calls.
    stream = ChatCompletionsStream(scratchpad, "")
    deltas = [d for chunk in (stream.feed(OUTPUT[i:i + 5]) for i in range(0, len(OUTPUT), 5)) for d in chunk]
    deltas += stream.finish()
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content") or "" for d in deltas)
    assert reasoning == "Plan it." and content == "Sure."
    assert [c["function"]["name"] for d in deltas for c in d.get("tool_calls", []) if "name" in c["function"]] == ["f"]
    # The engines' one-shot message and a batch row find it too.
    assert oneshot_message(OUTPUT, scratchpad, "", None)["reasoning_content"] == "Plan it."
    row = next(iter(batch.parse_many([{"completion": OUTPUT}], grammar=scratchpad)))
    assert row["reasoning"] == "Plan it." and row["content"] == "Sure."


@pytest.mark.parametrize("role", ["thoughts", "component", ""])
def test_a_bad_role_fails_at_load_naming_the_region(role: str) -> None:
    text = SCRATCHPAD.replace('"role": "reasoning"', f'"role": "{role}"') if role else \
        SCRATCHPAD.replace('{"field": "tool_calls",', '{"field": "tool_calls", "role": 3,')
    with pytest.raises(GrammarError, match=r"region (scratchpad|calls): role must be one of") as caught:
        build_grammar(text, source_name="scratchpad.lark")
    assert caught.value.code == "grammar.directive" and caught.value.line is not None


@pytest.mark.parametrize("name", NAMES)
def test_the_inferred_roles_follow_the_template_conventions(name: str) -> None:
    grammar = gp.load_grammar(name)
    top = [r for r in grammar.regions.values() if r.parent is None]
    fmt = grammar.format
    assert set(fmt.calls) == {r.rule for r in top if r.field == "tool_calls"}
    assert set(fmt.reasoning) == {r.rule for r in top if r.field in ("reasoning_content", "thinking", "reasoning")}
    assert set(fmt.content) == {r.rule for r in top if r.field == "content"}
    assert all(r.role == "component" for r in grammar.regions.values() if r.parent is not None)
    for rule, layout in fmt.calls.items():
        region = grammar.regions[rule]
        assert layout.shape is region.call is region.shape
        assert all(grammar.terminals[t].region is region and grammar.terminals[t].role == "open" for t in layout.openers)
        assert all(grammar.terminals[t].role == "delimiter" for t in (*layout.separators, *(layout.wrapper or ()))
                   if t is not None)
    eot = grammar.terminals.get("END_OF_TURN")
    assert bool(fmt.end_of_turn) == (eot is not None and not hasattr(eot.matcher, "pattern"))


@pytest.mark.parametrize("name", NAMES)
def test_the_format_travels_with_a_pickled_grammar(name: str) -> None:
    grammar = gp.load_grammar(name)
    back = pickle.loads(pickle.dumps(grammar))

    def plain(value: Any) -> str:
        return re.sub(r" at 0x[0-9a-f]+", "", repr(value))

    assert plain(back.format) == plain(grammar.format)
    for rule in grammar.format.calls:
        assert back.regions[rule].call is back.format.calls[rule].shape


@pytest.mark.parametrize("name", [n for n in NAMES if gp.load_grammar(n).format.end_of_turn])
def test_the_end_of_turn_literals_end_the_message(name: str) -> None:
    grammar = gp.load_grammar(name)
    if gp.parse_response("Hello there.", grammar, prefix="", strict=False).get("content") != "Hello there.":
        pytest.skip("plain text is not content at the start of this grammar's output (its reasoning opens there)")
    for eot in grammar.format.end_of_turn:
        parser = gp.ResponseParser(grammar, "", strict=False)
        message = parser.finalize(f"Hello there.{eot}trailing words")[0]
        assert "trailing" not in str(message), (eot, message)


def test_calls_under_any_field_stream_when_the_role_says_they_are_calls() -> None:
    """The tool-call streamer watches the fields the format names as holding calls, not a field name."""
    grammar = build_grammar(SCRATCHPAD.replace('{"field": "tool_calls",', '{"field": "actions", "role": "tool_calls",'),
                            source_name="actions.lark")
    assert [grammar.regions[r].field for r in grammar.format.calls] == ["actions"]
    stream = ChatCompletionsStream(grammar, "")
    deltas = stream.feed(OUTPUT) + stream.finish()
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "f"
    assert "".join(c["function"]["arguments"] for c in calls) == '{"a": 1}'


def test_content_and_calls_under_any_field_reach_every_consumer() -> None:
    """The content and the calls are found by their roles, not their names: the engines' one-shot message and a
    batch row read them from an authored grammar that calls them ``answer`` and ``actions``."""
    source = SCRATCHPAD
    for old, new in [('//@ region content {"content": "text"}',
                      '//@ region answer {"content": "text", "role": "content"}'),
                     ("content? _end?", "answer? _end?"),
                     ("content: (CONTENT_TEXT | calls)+", "answer: (ANSWER_TEXT | calls)+"),
                     ("SCRATCHPAD_TEXT CONTENT_TEXT", "SCRATCHPAD_TEXT ANSWER_TEXT"),
                     ('{"field": "tool_calls",', '{"field": "actions", "role": "tool_calls",')]:
        assert old in source
        source = source.replace(old, new)
    grammar = build_grammar(source, source_name="answer.lark")
    assert grammar.format.content_fields == ("answer",) and grammar.format.call_fields == ("actions",)
    message = oneshot_message(OUTPUT, grammar, "", None)
    assert message["content"] == "Sure." and [c["function"]["name"] for c in message["tool_calls"]] == ["f"]
    assert [c["function"]["arguments"] for c in message["parsed_calls"]] == [{"a": 1}]
    row = next(iter(batch.parse_many([{"completion": OUTPUT}], grammar=grammar)))
    assert row["content"] == "Sure." and [(c["name"], c["arguments"]) for c in row["tool_calls"]] == [("f", {"a": 1})]
