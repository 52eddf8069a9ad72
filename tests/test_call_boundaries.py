"""Where a call and its arguments end (issue 31, classes 4 and 5), for every grammar each applies to.

A key written without a value: in every grammar whose calls hold key/value arguments, an argument key with
nothing after it ends at the next key or at the call's close. The call keeps its other arguments, the key's
value is "", the call's ``errors`` and the message's ``parse_errors`` say so, in strict mode as in lenient mode
(errors.REPORTED_IN_STRICT), and the calls after it are kept.

Whitespace around a call separator: in every grammar whose parallel calls sit side by side without closing tags
(a call that ends with its JSON value or at a newline, several calls in one list), spaces and newlines on either
side of what separates two calls leave the calls as they are.

The samples are the grammars' golden samples rewritten as tests/test_drift.py's transformations rewrite them
(key_without_value, space_around_separator). Each is checked one-shot in both modes, character by character
(every one is text of a field, a delimiter or a reported discarded span), and streamed under any chunking.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable, strict_equal
from grammar_parse.errors import REPORTED_IN_STRICT
from strategies import chunkings, examples
from test_broken_calls import account
from test_drift import (EXTRA_KEY, Sample, calls, golden, key_without_value, keyed_arguments, problems,
                        separated_calls, space_around_separator)

GRAMMARS = sorted(gp.list_grammars())
KEYED = [n for n in GRAMMARS if keyed_arguments(gp.load_grammar(n))]
SEPARATED = [n for n in GRAMMARS if separated_calls(gp.load_grammar(n))]
# the grammars the issue names for each class (longcat reads only JSON calls: its header says the key/value
# variant some clients write is not parsed)
NAMED_KEYED = {"glm45", "glm47", "hunyuan_v3", "iquest_q1", "k2_horizon", "ling3", "poolside_v1"}
NAMED_SEPARATED = {"llama3_json", "mistral", "mistral_v11", "granite", "granite_20b_fc", "gigachat3", "firefunction_v2",
                   "phi4_mini", "functionary_v32", "xlam", "apertus", "olmo3", "minimax_m1"}


@cache
def keyless(name: str) -> tuple[Sample, ...]:
    """The grammar's samples with a key written without a value, before a call's close and before its first key."""
    grammar = gp.load_grammar(name)
    return tuple(v for s in golden(name) for at_close in (True, False) for v in key_without_value(grammar, s, at_close))


@cache
def separated(name: str) -> tuple[Sample, ...]:
    grammar = gp.load_grammar(name)
    return tuple(v for s in golden(name) for v in space_around_separator(grammar, s))


def parse(name: str, sample: Sample, strict: bool, chunks: list[str] | None = None) -> tuple[Any, gp.ResponseParser]:
    parser = gp.ResponseParser(name, sample.prefix, tools=sample.tools, strict=strict, trace=True)
    if chunks is None:
        return jsonable(parser.finalize(sample.text)[0]), parser
    for chunk in chunks:
        parser.feed(chunk)
    return jsonable(parser.finalize()[0]), parser


def test_the_grammars_the_issue_names_are_covered() -> None:
    assert NAMED_KEYED <= set(KEYED) and NAMED_SEPARATED <= set(SEPARATED)
    assert "longcat" not in KEYED


# ---------------------------------------------------------------------------- a key without a value
@pytest.mark.parametrize("name", KEYED)
def test_a_key_without_a_value_is_reported_and_the_calls_are_kept(name: str) -> None:
    grammar = gp.load_grammar(name)
    cases = keyless(name)
    assert {c.name.rsplit("/", 1)[1] for c in cases} == {"key_without_value", "key_without_value_before_key"}, \
        f"{name}: no golden sample with key/value arguments to write a key without a value into"
    for case in cases:
        message, parser = parse(name, case, strict=True)
        assert not problems(grammar, case, message), (case.name, problems(grammar, case, message))
        account(parser, case.text)
        keyed = [c for c in message["tool_calls"] if EXTRA_KEY in c["function"]["arguments"]]
        assert len(keyed) == 1 and keyed[0]["function"]["arguments"][EXTRA_KEY] == ""
        assert {"path": f"$.function.arguments.{EXTRA_KEY}", "code": "parse.missing_value"} in \
            [{k: e[k] for k in ("path", "code")} for e in keyed[0]["errors"]], keyed[0]
        (entry,) = [e for e in message["parse_errors"] if EXTRA_KEY in e["message"]]
        start, end = entry["span"]
        assert entry["code"] == "parse.missing_value" and entry["field"] == "tool_calls"
        assert EXTRA_KEY in case.text[start:end] and not case.text[start:end].rstrip().endswith(EXTRA_KEY), \
            "the span is the key's opener as written"
        assert {e["code"] for e in message["parse_errors"]} <= REPORTED_IN_STRICT
        assert strict_equal(parse(name, case, strict=False)[0], message), "lenient mode gives the same message"


@pytest.mark.parametrize("name", KEYED)
@settings(max_examples=examples(0.1))
@given(data=st.data())
def test_a_key_without_a_value_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(keyless(name)), label="sample")
    chunks = data.draw(chunkings(case.text), label="chunks")
    strict = data.draw(st.booleans(), label="strict")
    streamed, parser = parse(name, case, strict, chunks)
    assert strict_equal(streamed, parse(name, case, strict)[0])
    account(parser, case.text)


# ---------------------------------------------------------------------------- whitespace around a separator
@pytest.mark.parametrize("name", SEPARATED)
def test_whitespace_around_a_call_separator_keeps_the_calls(name: str) -> None:
    grammar = gp.load_grammar(name)
    cases = separated(name)
    assert cases, f"{name}: no golden sample with parallel calls to space out"
    for case in cases:
        message, parser = parse(name, case, strict=True)
        assert not problems(grammar, case, message), (case.name, problems(grammar, case, message))
        assert "parse_errors" not in message
        account(parser, case.text)
        assert strict_equal(parse(name, case, strict=False)[0], message), "lenient mode gives the same message"


@pytest.mark.parametrize("name", SEPARATED)
@settings(max_examples=examples(0.1))
@given(data=st.data())
def test_whitespace_around_a_call_separator_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    case = data.draw(st.sampled_from(separated(name)), label="sample")
    chunks = data.draw(chunkings(case.text), label="chunks")
    streamed, parser = parse(name, case, False, chunks)
    assert strict_equal(streamed, parse(name, case, False)[0])
    account(parser, case.text)


SPACES = ["", " ", "\n", "  \n\t "]
LLAMA3 = '{"name": "a", "parameters": {}}%s;%s{"name": "b", "parameters": {"x": 1}}<|eot_id|>'


@pytest.mark.parametrize("before", SPACES, ids=json.dumps)
@pytest.mark.parametrize("after", SPACES, ids=json.dumps)
def test_llama3_json_calls_around_a_spaced_semicolon(before: str, after: str) -> None:
    """The issue's example: '} ; {' gave one call and the rest as content."""
    text = LLAMA3 % (before, after)
    want = [("a", {}), ("b", {"x": 1})]
    for chunks in (None, list(text)):
        message = parse("llama3_json", Sample("s", text, "", None, {}), True, chunks)[0]
        assert calls(message) == want and "content" not in message, (chunks is not None, message)
