"""Lenient mode is total, the adapters never crash, and wire values are valid (issue 12, classes 4 to 6).

Every reproducer of the issue is a row of a table here: the content parsers turn any text into a value
or a ParseError with a stable code (never ValueError, RecursionError, MemoryError, UnicodeEncodeError or
TypeError); a grammar in lenient mode records the problem; the Chat Completions and LMSP streams send
calls whose ``arguments`` a strict JSON parser reads as an object, fold to their own final message, and
never raise; legacy schemas apply the same limits and reject bad replacement patterns when they load.
A property test then drives every built-in grammar and both adapters with hostile outputs.
"""

from __future__ import annotations

import json
import math
from functools import cache
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from goldens import goldens
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.compat import legacy_grammar, recursive_parse
from grammar_parse.errors import ERROR_CODES, ParseError, TemplateError
from grammar_parse.adapters.lmsp import ResponseStream, schema_validator
from grammar_parse._engine.toolstream import call_name
from grammar_parse._engine.content import parse_content
from grammar_parse._engine.wire import WireArguments, arguments_text, dumps
from strategies import chunkings, delimiter_examples, examples
from test_tool_streaming import JSON_VALUES
from wire_checks import fold, strict_object

BIG = "1" * 5000  # past Python's 4,300-digit int limit
DEEP = "[" * 400 + "]" * 400  # past JSON_MAX_DEPTH (256)
CHAIN_DOTS = ".".join(["a"] * 100_000)  # ast recursion
CHAIN_PLUS = "+".join(["1"] * 100_000)

# ---------------------------------------------------------------------------- content parsers
# (parser, args, text, the value, or the code of the ParseError it raises)
XML_JSON = {"tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>", "value_parser": {"name": "json"}}
CONTENT_CASES: list[tuple[str, dict[str, Any], str, Any]] = [
    ("json", {}, '{"a": %s}' % BIG, "parse.digits"),
    ("json", {"allow_non_json": True}, '{"a": %s}' % BIG, "parse.digits"),  # a limit, not text that is not JSON
    ("json", {"unquoted_keys": True}, "{a: %s}" % BIG, "parse.digits"),
    ("json", {}, DEEP, "parse.json_depth"),
    ("json", {}, '{"a": -%s.5}' % BIG, {"a": -math.inf}),  # a float of any length converts
    ("json", {}, '{"a": 1e999, "b": -Infinity}', {"a": math.inf, "b": -math.inf}),  # as transformers
    ("json", {}, '{"a": "\ud800"}', {"a": "\ud800"}),
    ("json-name-keys", {}, '[{"f": {"a": %s}}]' % BIG, "parse.digits"),
    ("json-name-keys", {}, '[{"f": %s}]' % DEEP, "parse.json_depth"),
    ("xml-inline", XML_JSON, "<a>%s</a>" % BIG, "parse.digits"),
    ("xml-inline", XML_JSON, "<a>%s</a>" % DEEP, "parse.json_depth"),
    ("kv-lines", {"value_parser": {"name": "json"}}, "a: %s" % BIG, "parse.digits"),
    ("int", {}, BIG, "parse.content"),
    ("pythonic", {}, '[f(a="\ud800x", b="\udfff")]', [{"name": "f", "arguments": {"a": "\ud800x", "b": "\udfff"}}]),
    ("pythonic", {}, '[f(a="\U000f0000")]', [{"name": "f", "arguments": {"a": "\U000f0000"}}]),
    ("pythonic", {}, '[f(a="\U000f0000\ud800")]', "parse.content"),  # the stand-ins are taken: refused
    ("pythonic", {}, "[f(a=%s)]" % CHAIN_DOTS, "parse.depth"),
    ("pythonic", {}, "[f(a=%s)]" % CHAIN_PLUS, "parse.depth"),
    ("pythonic", {}, "[f(a=%s1)]" % ("-" * 100_000), "parse.depth"),  # MemoryError in Python's parser
    ("pythonic", {}, "[%s(x=1)]" % CHAIN_DOTS, "parse.depth"),  # (the callee)
    ("pythonic", {}, "[f(a=%s)]" % DEEP, "parse.depth"),
    ("pythonic", {}, "[f(a=%s)]" % BIG, "parse.digits"),
    ("pythonic", {}, "[f(a={1, 2})]", "parse.content"),  # a set: not JSON
    ("pythonic", {}, "[f(a=1j)]", "parse.content"),
    ("pythonic", {}, "[f(a=1+2j)]", "parse.content"),
    ("pythonic", {}, '[f(a=b"x")]', "parse.content"),
    ("pythonic", {}, "[f(a=...)]", "parse.content"),
    ("pythonic", {}, "[f(a={1: 2})]", "parse.content"),  # JSON keys are strings
    ("pythonic", {}, '[f(a={"k": (1, -2.5, +3)}, b=null, c=True)]',
     [{"name": "f", "arguments": {"a": {"k": [1, -2.5, 3]}, "b": None, "c": True}}]),
    ("pythonic", {}, '[f(from="SFO")]', [{"name": "f", "arguments": {"from": "SFO"}}]),
]


def _same(a: Any, b: Any) -> bool:
    """Equality of JSON-like values that also holds for NaN-free floats of any sign."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b)


@pytest.mark.parametrize("parser, args, text, expected", CONTENT_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CONTENT_CASES)])
def test_a_content_parser_gives_a_value_or_a_parse_error(parser, args, text, expected):
    if isinstance(expected, str) and expected in ERROR_CODES:
        with pytest.raises(ParseError) as raised:
            parse_content(text, parser, args)
        assert raised.value.code == expected
    else:
        assert _same(parse_content(text, parser, args), expected)


PARSERS = [("json", {}), ("json", {"unquoted_keys": True, "string_delims": [["<|\"|>", "<|\"|>"]]}),
           ("json", {"allow_non_json": True}), ("json-name-keys", {}), ("pythonic", {}), ("xml-inline", XML_JSON),
           ("kv-lines", {"value_parser": {"name": "json"}}), ("int", {}), ("float", {}), ("bool", {}), ("text", {})]
PIECES = st.sampled_from([BIG, DEEP, "{", "}", "[", "]", '"', ":", ",", "NaN", "1e999", "\ud800", "\x00", "\\q",
                          "f(", ")", "=", "a.", "1+", "-", "{1, 2}", "1j", 'b"x"', "...", "<a>", "</a>", "\n"])


@pytest.mark.parametrize("parser, args", PARSERS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(PARSERS)])
@settings(max_examples=examples(0.5))
@given(text=st.lists(PIECES | st.text(max_size=4), max_size=8).map("".join))
def test_any_text_gives_a_value_or_a_parse_error(parser, args, text):
    try:
        parse_content(text, parser, args)
    except ParseError as e:
        assert e.code in ERROR_CODES


# ---------------------------------------------------------------------------- grammars, lenient and strict
# (grammar, output, the codes lenient mode records): strict mode raises a ParseError with the first one
GRAMMAR_CASES = [
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"a": %s}}</tool_call>' % BIG, ["parse.digits"]),
    ("jamba", "<tool_calls>%s</tool_calls>" % BIG, ["parse.digits"]),
    ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {"a": %s}}]' % BIG, ["parse.digits"]),
    ("apertus", '<|tools_prefix|>[{"f": {"a": %s}}]<|tools_suffix|>' % BIG, ["parse.digits"]),
    ("qwen3", '<tool_call>{"name": "f", "arguments": %s}</tool_call>' % DEEP, ["parse.json_depth"]),
    ("llama3_pythonic", '[f(a="\ud800")]', []),
    ("llama4_pythonic", '<|python_start|>[f(a="x\ud800")]<|python_end|>', []),
    ("llama3_pythonic", "[f(a=%s)]" % CHAIN_DOTS, ["parse.depth"]),
    ("llama3_pythonic", "[f(a=%s)]" % CHAIN_PLUS, ["parse.depth"]),
    ("lfm2", "<|tool_call_start|>[f(a=%s)]<|tool_call_end|>" % BIG, ["parse.digits"]),
    ("llama3_pythonic", '[f(a={1, 2}, b=1j, c=b"x")]', ["parse.content"]),
    # a call without a name is no call: its text is content (strict mode: a parse.tool_call error)
    ("qwen3", '<tool_call>{"name": "", "arguments": {}}</tool_call>', ["parse.tool_call"]),
    ("qwen3", '<tool_call>{"arguments": {"a": 1}}</tool_call>', ["parse.tool_call"]),
    ("qwen3", '<tool_call>[{"name": "f", "arguments": {}}]</tool_call>', ["parse.tool_call"]),
    ("mistral", '[TOOL_CALLS] [{"name": "f", "arguments": {}}, {"name": "", "arguments": {}}]', ["parse.tool_call"]),
]


@pytest.mark.parametrize("grammar, text, codes", GRAMMAR_CASES, ids=[f"{g}-{i}" for i, (g, *_) in enumerate(GRAMMAR_CASES)])
def test_lenient_parsing_records_what_strict_parsing_raises(grammar, text, codes):
    message = gp.parse_response(text, grammar, prefix="", strict=False)
    assert [e["code"] for e in message.get("parse_errors", [])] == codes
    streamed = gp.ResponseParser(grammar, "", strict=False)
    for i in range(0, len(text), 997):
        streamed.feed(text[i:i + 997])
    assert json.dumps(streamed.finalize()[0]) == json.dumps(message)
    if codes:
        with pytest.raises(ParseError) as raised:
            gp.parse_response(text, grammar, prefix="")
        assert raised.value.code == codes[0]
    else:
        assert gp.parse_response(text, grammar, prefix="") == message


def test_a_call_without_a_name_is_content_in_lenient_mode():
    text = 'Hi <tool_call>{"name": "", "arguments": {}}</tool_call> there'
    message = gp.parse_response(text, "qwen3", prefix="", strict=False)
    assert message["content"] == text and "tool_calls" not in message
    mixed = gp.parse_response('[TOOL_CALLS] [{"name": "f", "arguments": {}}, {"name": "", "arguments": {}}]',
                              "mistral", prefix="", strict=False)
    assert [c["function"]["name"] for c in mixed["tool_calls"]] == ["f"]
    assert mixed["content"] == '{"name": "", "arguments": {}}'  # (the list's brackets are the calls' markup)


# ---------------------------------------------------------------------------- the wire filter
# (fragments of a call's arguments text, the arguments string sent, the codes of its problems)
WIRE_CASES: list[tuple[str, str, list[str]]] = [
    ('{"city": "Paris", "n": [1, 2.5e3, -0, true, null]}', '{"city": "Paris", "n": [1, 2.5e3, -0, true, null]}', []),
    ('  {"a": 1}  ', '{"a": 1}', []),
    ("", "{}", []),
    ('{"a": NaN, "b": [Infinity, -Infinity]}', '{"a": null, "b": [null, null]}', ["parse.json_constant"] * 3),
    ('{"a": "x\ud800y"}', '{"a": "x\\ud800y"}', []),  # the same value, in text UTF-8 can encode
    ('[1, 2]', "{}", ["parse.arguments"]),
    ('"x"', "{}", ["parse.arguments"]),
    ('{"\\q": 1}', "{}", ["parse.arguments"]),
    ('{"a": "b\\q", "c": 1}', '{"a": "b"}', ["parse.arguments"]),
    ('{"a": "x\ny"}', '{"a": "x"}', ["parse.arguments"]),  # a raw control character
    ('{"city": "Par', '{"city": "Par"}', ["parse.arguments"]),  # cut off: closed
    ('{"a": [1, {"b": [', '{"a": [1, {"b": []}]}', ["parse.arguments"]),
    ('{"a": 1, ', '{"a": 1}', ["parse.arguments"]),  # (the comma waits for the next key)
    ('{"a": tru', "{}", ["parse.arguments"]),  # (a key waits for its value to be complete)
    ('{"a": 1.', "{}", ["parse.arguments"]),
    ('{"a": 12', '{"a": 12}', ["parse.arguments"]),
    ('{"a": "\\u12', '{"a": ""}', ["parse.arguments"]),
    ('{"a": 01}', "{}", ["parse.arguments"]),
    ('{a: 1}', "{}", ["parse.arguments"]),
    ('{"a": 1 "b": 2}', '{"a": 1 }', ["parse.arguments"]),
    ('{"a": 1} trailing', '{"a": 1}', []),
    ('{"a": %s}' % BIG, "{}", ["parse.digits"]),
    ('{"a": %s}' % DEEP, '{"a": ' + "[" * 255 + "]" * 255 + "}", ["parse.json_depth"]),
]


@pytest.mark.parametrize("text, sent, codes", WIRE_CASES, ids=[str(i) for i in range(len(WIRE_CASES))])
def test_the_wire_sends_strict_json_objects_whatever_the_chunking(text, sent, codes):
    for size in (len(text) or 1, 1, 3):
        wire = WireArguments()
        out = "".join(wire.feed(text[i:i + size]) for i in range(0, len(text), size)) + wire.finish()
        assert out == sent
        assert [p["code"] for p in wire.problems] == codes
        strict_object(out)
        assert all(p["path"].startswith("$.function.arguments") for p in wire.problems)


JSON_ISH = st.lists(st.sampled_from(['{', '}', '[', ']', '"', ":", ",", " ", "\\", "u", "1", "-", ".", "e", "0",
                                     "true", "nul", "NaN", "-Infinity", "\ud800", "\n", "a", '"k"', '"\\u00e9"'])
                    | st.text(max_size=3), max_size=30).map("".join)


@settings(max_examples=examples(2))
@given(text=JSON_ISH, data=st.data())
def test_the_wire_gives_a_strict_json_object_for_any_text(text, data):
    whole = WireArguments()
    sent = whole.feed(text) + whole.finish()
    strict_object(sent)
    pieces = data.draw(chunkings(text), label="chunks")
    chunked = WireArguments()
    assert "".join(chunked.feed(piece) for piece in pieces) + chunked.finish() == sent
    assert chunked.problems == whole.problems


@settings(max_examples=examples(1))
@given(value=st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4), indent=st.sampled_from([None, 1]),
       data=st.data())
def test_the_wire_sends_a_strict_json_object_as_it_is(value, indent, data):
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    wire = WireArguments()
    assert "".join(wire.feed(piece) for piece in data.draw(chunkings(text), label="chunks")) + wire.finish() == text
    assert wire.problems == [] and wire.done


#: Argument values the wire must change: NaN and infinities, a lone surrogate, nesting past the limit, an
#: integer past Python's digits limit (json.dumps cannot write it), values JSON has no form for.
_AWKWARD = st.one_of(st.sampled_from([float("nan"), float("inf"), -float("inf"), "\ud800x", "\udfff",
                                      [[[[[]]]]], 10 ** 5000, {"k": set()}, object()]), JSON_VALUES)


def _deep(levels: int) -> dict[str, object]:
    value: object = []
    for _ in range(levels):
        value = [value]
    return {"a": value}


@settings(max_examples=examples(2))
@given(value=st.one_of(st.dictionaries(st.text(max_size=5), _AWKWARD, max_size=4),
                       st.sampled_from([_deep(254), _deep(255), _deep(256), _deep(400)])))
def test_a_parsed_value_is_sent_as_the_wire_filter_sends_it(value):
    """One-shot arguments of a parsed object (arguments_text: a plain one written directly) are the filter's
    over dumps() (anything else goes through the filter itself)."""
    wire = WireArguments()
    assert arguments_text(value) == wire.feed(dumps(value)) + wire.finish()


@given(value=st.one_of(_AWKWARD, st.integers(), st.booleans(), st.text(max_size=6)))
@example(value=10 ** 5000)  # (past the digits limit: null, as the encoder's ValueError gives)
@example(value=True)
def test_the_wire_writes_a_value_as_the_json_encoder_does(value):
    """wire.dumps, which writes strings, integers and booleans without the encoder's wrapper, writes what the
    encoder writes (``null`` where it fails)."""
    encode = json.JSONEncoder(ensure_ascii=False, default=repr).encode
    try:
        expected = encode(value)
    except (TypeError, ValueError, RecursionError):
        expected = "null"
    assert dumps(value) == expected


#: What a streamed call's wire filter is fed: a member the streamer writes (first or not, a key and a value), a piece
#: of the model's own text, or the end of a number the streamer held.
_WIRE_STEPS = st.one_of(
    st.tuples(st.just("member"), st.sampled_from(["{", ", ", ","]), st.text(max_size=4),
              st.one_of(st.text(max_size=6), _AWKWARD)),
    st.tuples(st.just("text"), st.sampled_from(['{"a": 1', ", ", "}", '"', "x", "\\", "\ud800", "NaN", " 2", "]"]),
              st.none(), st.none()))


#: Sequences a stream gives its filter, each where the fast case is taken or must not be.
_MEMBER_CASES = [
    [("member", "{", "city", "Hanoi"), ("member", ", ", "unit", "c")],  # both passed unread
    [("member", "{", "a\"\\\n", "\x00\u2028"), ("member", ", ", "b", "")],  # escapes written by dumps
    [("member", "{", "a", "\ud800x")], [("member", "{", "a", "x"), ("member", ", ", "b", "\udfff")],  # surrogates
    [("member", "{", "\ud800", "x")], [("member", "{", "a", "x"), ("member", ", ", "\udfff", "y")],
    [("member", "{", "a", 1), ("member", ", ", "b", "x")],  # a number is held, as reading holds it, till the comma
    [("member", "{", "", -40), ("member", ", ", "b\"c", 0), ("member", ", ", "d", 12)],  # (ends with finish)
    [("member", "{", "a", 7), ("text", "5", None, None), ("member", ", ", "b", "x")],  # (the number goes on)
    [("member", "{", "a", 7), ("text", "}", None, None)], [("member", "{", "a", 7), ("member", "{", "b", 1)],
    [("member", "{", "a", 2.5), ("member", ", ", "b", -1e20)], [("member", "{", "a", -0.0)],
    [("member", "{", "\ud800", 3)],
    [("member", "{", "a", True), ("member", ", ", "b", 3)], [("member", "{", "a", 10 ** 5000)],
    [("member", "{", "a", float("nan")), ("member", ", ", "b", "x")],
    [("member", "{", "a", {"b": "c"}), ("member", ", ", "d", "e")],
    [("text", '{"a": [', None, None), ("member", ", ", "b", "x")],  # not at the object's top
    [("text", '{"a": ["x"', None, None), ("member", ", ", "b", "x")],  # after a value in an array
    [("text", '{"a": {"b": "x"', None, None), ("member", ", ", "c", "x")],
    [("member", "{", "a", "x"), ("member", "{", "b", "y")], [("member", "{", "a", "x"), ("member", ",", "b", "y")],
    [("text", '{"a": "x"} ', None, None), ("member", ", ", "b", "x")],  # the object closed
    [("text", "x", None, None), ("member", "{", "b", "x")],  # broken
    [("member", "{", "a", "x"), ("text", '"', None, None), ("member", ", ", "b", "x")],
]


@pytest.mark.parametrize("steps", _MEMBER_CASES)
@pytest.mark.parametrize("depth", [0, 1, 256])
def test_a_member_the_streamer_writes_is_filtered_as_its_text(steps, depth):
    """``WireArguments.member`` (a string member passed without being read, where nothing is held) sends what
    ``feed`` of its text sends, and leaves the filter as reading it would: the same state, problems and end."""
    _same_as_read(steps, depth)


@settings(max_examples=examples(2))
@given(steps=st.lists(_WIRE_STEPS, max_size=8), depth=st.sampled_from([0, 1, 2, 256]))
def test_a_member_the_streamer_writes_is_filtered_as_its_text_in_any_sequence(steps, depth):
    _same_as_read(steps, depth)


def _same_as_read(steps, depth):
    from grammar_parse._engine.reading import json_depth_limit

    fast, read = WireArguments(), WireArguments()
    with json_depth_limit(depth):
        for kind, first, key, value in steps:
            if kind == "member":
                key_text, value_text = dumps(key), dumps(value)
                assert fast.member(first, key_text, value_text) == read.feed(f"{first}{key_text}: {value_text}")
            else:
                assert fast.feed(first) == read.feed(first)
            assert vars(fast) == vars(read)
        assert fast.finish() == read.finish() and fast.problems == read.problems


def test_a_member_passes_unread_where_it_can() -> None:
    """The fast case is taken (a mutant that always reads would pass the property above): a string or number
    member opens the object and follows a string or number member without the filter reading its text."""
    wire = WireArguments()
    wire.feed = None  # type: ignore[method-assign]  # (reading would fail)
    assert wire.member("{", '"city"', '"Hanoi"') + wire.member(", ", '"unit"', '"a\\"b"') == \
        '{"city": "Hanoi", "unit": "a\\"b"'
    assert wire.finish() == "}"
    wire = WireArguments()
    wire.feed = None  # type: ignore[method-assign]
    assert wire.member("{", '"days"', "12") + wire.member(", ", '"n"', "-3") + wire.member(", ", '"unit"', '"c"') \
        == '{"days": 12, "n": -3, "unit": "c"'  # (a number held till the next member ends it, unread)
    assert wire.finish() == "}"


# ---------------------------------------------------------------------------- the adapters
def run_adapters(grammar: str, text: str, chunks: list[str], *, prefix: str = "", tools: Any = None,
                 strict: bool = False) -> tuple[dict[str, Any], list[dict[str, Any]], ResponseStream]:
    """Both adapters over one chunking; checks what every run must hold and returns the Chat Completions
    message, the LMSP events and the LMSP stream."""
    n = iter(range(10**9))
    ids = lambda kind: f"{kind}_{next(n)}"  # noqa: E731
    chat = ChatCompletionsStream(grammar, prefix, tools=tools, strict=strict, ids=ids)
    deltas = [d for chunk in chunks for d in chat.feed(chunk)] + chat.finish()
    message = chat.message
    folded = fold(deltas)
    assert folded.get("tool_calls", []) == [{"id": c["id"], "name": c["function"]["name"],
                                             "arguments": c["function"]["arguments"]}
                                            for c in message.get("tool_calls", [])], "the deltas fold to the message"
    for key in ("content", "reasoning_content"):
        assert (folded.get(key) or None) == (message.get(key) or None), key
    for call in message.get("tool_calls", []):
        assert isinstance(call["function"]["name"], str) and call["function"]["name"]
        strict_object(call["function"]["arguments"])
        for error in call.get("errors", []):
            assert error["path"].startswith("$") and ("code" not in error or error["code"] in ERROR_CODES)
    for error in message.get("parse_errors", []):
        assert error["code"] in ERROR_CODES

    lmsp = ResponseStream(grammar, prefix, tools=tools, strict=strict, ids=ids)
    events = [e for chunk in chunks for e in lmsp.feed(chunk)] + lmsp.complete()
    validated: set[tuple[str, Any]] = set()
    for event in events:
        data = event["data"]
        if event["event"].endswith(".delta") and (event["event"], data["item_id"]) in validated:
            # (the schema costs 0.1 ms an event: a delta of an item already validated is checked for what varies)
            assert isinstance(data["delta"], str) and data["delta"] and set(data) == DELTA_KEYS, event
            continue
        EVENT.validate(event)
        if event["event"].endswith(".delta"):
            validated.add((event["event"], data["item_id"]))
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["event"] == "response.completed"
    RESPONSE.validate(lmsp.response(model="m", created_at=0))
    items = [i for i in lmsp.output if i["type"] == "function_call"]
    assert [(i["name"], i["arguments"]) for i in items] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls", [])]
    return message, events, lmsp


class _Events:
    """Validates an event against the schema of its own name: as ``event`` does (a oneOf over every
    event's schema), ten times faster."""

    @cache
    def validator(self, name: str) -> Any:
        return schema_validator(f"event:{name}")

    def validate(self, event: dict[str, Any]) -> None:
        self.validator(event["event"]).validate(event)


EVENT = _Events()
RESPONSE = schema_validator("response")
DELTA_KEYS = {"response_id", "item_id", "output_index", "delta"}

# (grammar, output, the calls sent as (name, arguments, codes of the parser's errors on the call, codes of
# the wire's), the codes of the message's parse_errors)
ADAPTER_CASES: list[tuple[str, str, list[tuple[str, str, list[str], list[str]]], list[str]]] = [
    # an invalid escape (JSONDecodeError in the adapters before): the call, its arguments the valid part
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"\\q": 1}}</tool_call>',
     [("f", "{}", ["parse.json"], ["parse.arguments"])], ["parse.json"]),
    # a JSON list inside qwen3's <tool_call> (AttributeError before): no call, its text is content
    ("qwen3", '<tool_call>[{"name": "f", "arguments": {}}]</tool_call>', [], ["parse.tool_call"]),
    # pythonic set/complex/bytes literals (TypeError: not JSON serialisable, before): a broken call
    ("llama3_pythonic", '[f(a={1, 2}, b=1j, c=b"x")]', [("f", "{}", ["parse.content"], ["parse.arguments"])],
     ["parse.content"]),
    # a huge integer (ValueError before)
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"a": %s}}</tool_call>' % BIG,
     [("f", "{}", ["parse.digits"], ["parse.digits"])], ["parse.digits"]),
    ("jamba", '<tool_calls>[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {"b": %s}}]</tool_calls>'
     % BIG, [("f", '{"a": 1}', [], []), ("g", "{}", ["parse.digits"], ["parse.digits"])], ["parse.digits"]),
    # NaN and Infinity parse (as in transformers) but go to clients as null, with an error saying so
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"a": NaN, "b": -Infinity}}</tool_call>',
     [("f", '{"a": null, "b": null}', [], ["parse.json_constant", "parse.json_constant"])], []),
    ("llama3_json", '{"name": "f", "parameters": {"x": Infinity}}', [("f", '{"x": null}', [], ["parse.json_constant"])],
     []),
    # arguments that are not an object
    ("qwen3", '<tool_call>{"name": "f", "arguments": [1, 2]}</tool_call>', [("f", "{}", [], ["parse.arguments"])], []),
    ("qwen3", '<tool_call>{"name": "f", "arguments": "x"}</tool_call>', [("f", "{}", [], ["parse.arguments"])], []),
    # a call named "" (LMSP items that failed the package's own schema, before): content, with an error
    ("qwen3", 'A <tool_call>{"name": "", "arguments": {}}</tool_call>', [], ["parse.tool_call"]),
    # a lone surrogate: the same value, escaped
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"a": "\ud800"}}</tool_call>',
     [("f", '{"a": "\\ud800"}', [], [])], []),
    ("llama3_pythonic", '[f(a="\ud800")]', [("f", '{"a": "\\ud800"}', [], [])], []),
    # cut off: closed
    ("qwen3", '<tool_call>{"name": "f", "arguments": {"city": "Par',
     [("f", '{"city": "Par"}', ["parse.json"], ["parse.arguments"])], ["parse.json"]),
    # a value nested too deeply in a list of calls: nothing after it is certain, for the streamer as for the
    # parser (the streamer walked on: three calls streamed, one in the message)
    ("mistral", '[TOOL_CALLS][{"name": "a", "arguments": {}}, %s{"name": "b", "arguments": {}}, '
     '{"name": "c", "arguments": {}}]' % ("{" * 300 + "}" * 300), [("a", "{}", [], [])], ["parse.json_depth"]),
    ("mistral", '[TOOL_CALLS][{"name": "a", "arguments": {"x": %s}}, {"name": "b", "arguments": {}}, '
     '{"name": "c", "arguments": {}}]' % DEEP,
     [("a", '{"x": %s}' % ("[" * 255 + "]" * 255), ["parse.json_depth"], ["parse.json_depth"])], ["parse.json_depth"]),
]


@pytest.mark.parametrize("grammar, text, calls, codes", ADAPTER_CASES,
                         ids=[f"{g}-{i}" for i, (g, *_) in enumerate(ADAPTER_CASES)])
def test_the_adapters_send_valid_calls_and_never_raise(grammar, text, calls, codes):
    for chunks in ([text], list(text)):
        message, events, _ = run_adapters(grammar, text, chunks)
        assert [(c["function"]["name"], c["function"]["arguments"], [e["code"] for e in c.get("errors", [])])
                for c in message.get("tool_calls", [])] == [(name, arguments, parsed + wire)
                                                            for name, arguments, parsed, wire in calls]
        assert [e["code"] for e in message.get("parse_errors", [])] == codes
        # LMSP reports every parse error, and every change the wire made
        reported = [e["data"]["code"] for e in events if e["event"] == "response.parse_error"]
        assert sorted(reported) == sorted(codes + [code for *_, wire in calls for code in wire])
        if "parse.tool_call" in codes:
            assert message["content"] == text, "a call without a name is content"


def test_the_wire_is_the_same_in_strict_mode():
    text = '<tool_call>{"name": "f", "arguments": {"a": NaN}}</tool_call>'
    message, _, _ = run_adapters("qwen3", text, [text], strict=True)
    (call,) = message["tool_calls"]
    assert call["function"]["arguments"] == '{"a": null}' and call["errors"][0]["code"] == "parse.json_constant"


def test_the_lmsp_stream_has_one_final_event_whatever_fails():
    ids = iter(range(100))
    stream = ResponseStream("qwen3", "", ids=lambda kind: f"{kind}_{next(ids)}")
    assert stream.feed("<tool_call>{oops}</tool_call>")[-1]["event"] == "response.failed"
    assert stream.feed("more text") == [] and stream.complete() == []  # nothing after the final event

    broken = ResponseStream("qwen3", "", ids=lambda kind: f"{kind}_{next(ids)}", strict=False)

    def fail(text: str) -> list:
        raise RuntimeError("a bug")

    broken.parser.feed = fail  # type: ignore[method-assign]
    events = broken.feed("Hi")
    assert events[-1]["event"] == "response.failed" and events[-1]["data"]["error"]["code"] == "internal_error"
    EVENT.validate(events[-1])
    assert broken.feed("more") == [] and broken.complete() == []


# ---------------------------------------------------------------------------- legacy schemas
def _legacy(node: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"c": node}}


@pytest.mark.parametrize("node, key", [
    ({"type": "string", "x-regex-substitutions": [["(a)", "\\2"]]}, "x-regex-substitutions[0]"),
    ({"type": "string", "x-regex-substitutions": [["a", "b"], ["(a)", "\\g<x>"]]}, "x-regex-substitutions[1]"),
    ({"type": "string", "x-regex-substitutions": [["a", "\\"]]}, "x-regex-substitutions[0]"),
])
def test_a_legacy_replacement_that_cannot_work_fails_at_load(node, key):
    with pytest.raises(TemplateError) as raised:
        legacy_grammar(_legacy(node))
    assert raised.value.path == f"(root).properties.c.{key}" and raised.value.code == "template.regex"
    with pytest.raises(TemplateError):  # called directly, with no load to check it
        recursive_parse("a", _legacy(node))


@pytest.mark.parametrize("node, text, code", [
    ({"x-parser": "json"}, DEEP, "parse.json_depth"),
    ({"x-parser": "json"}, BIG, "parse.digits"),
    ({"x-parser": "json", "x-parser-args": {"allow_non_json": True}}, BIG, "parse.digits"),
    ({"type": "object", "x-regex": "(.*)", "x-parser": "json"}, '{"a": %s}' % DEEP, "parse.json_depth"),
])
def test_legacy_json_has_the_same_limits(node, text, code):
    schema = _legacy(node)
    message = gp.parse_response(text, schema, strict=False)
    assert [e["code"] for e in message["parse_errors"]] == [code]
    with pytest.raises(ParseError) as raised:
        gp.parse_response(text, schema)
    assert raised.value.code == code


# ---------------------------------------------------------------------------- hostile outputs, every grammar
# Floods stay a few hundred characters long to keep the test quick: what they cost at 10 KB, 100 KB and
# 1 MB in every grammar is measured by `benchmarks/bench_hostile.py --grammars` (and counted, for the floods
# that were quadratic, by tests/test_hostile_cost.py).
HOSTILE = [
    " " * 300, "\n" * 200, "\t \r\n" * 50, BIG, "-" + BIG, "1e999", "\ud800", "\udfff\ud800", "\x00", "\x0b",
    "[" * 300, "{" * 300, '{"a":' * 300, "]" * 50, DEEP, "{" * 300 + "}" * 300, "NaN", "Infinity", "-Infinity", '"\\q"', '"\\u12', '"',
    "{", "}", ",", ":", '{"name": "", "arguments": {}}', '{"name": "f", "arguments": [1]}',
    '{"name": "f", "arguments": "x"}', '{"name": "f", "arguments": {"a": NaN}}', '[{"name": "f", "arguments": {}}]',
    "f(a={1,2})", "f(a=1j)", 'f(a=b"x")', "f(a=...)", "a." * 500 + "a", "1+" * 1500 + "1", "-" * 2000 + "1",
]


@cache
def hostile_pieces(grammar: str) -> tuple[list[str], list[tuple[str, str, Any]]]:
    """The delimiters of a grammar (and their prefixes, for near-delimiter floods), and its golden samples."""
    delims = delimiter_examples(gp.load_grammar(grammar)) or ["<", ">"]
    samples = [(case.text, case.prefix, case.tools) for case in goldens(grammar)]
    return delims, samples


@st.composite
def hostile_output(draw: st.DrawFn, grammar: str) -> tuple[str, str, Any]:
    """A golden sample of ``grammar`` (or nothing) with a few hostile edits: floods, near-delimiters,
    huge numbers, lone surrogates, deep nesting, deletions."""
    delims, samples = hostile_pieces(grammar)
    text, prefix, tools = draw(st.sampled_from(samples)) if samples and draw(st.booleans()) else ("", "", None)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        kind = draw(st.sampled_from(["hostile", "delimiter", "flood", "delete"]))
        if kind == "delete":
            text = text[:at] + text[at + draw(st.integers(1, 8)):]
            continue
        if kind == "hostile":
            piece = draw(st.sampled_from(HOSTILE))
        else:
            delim = draw(st.sampled_from(delims))
            piece = delim if kind == "delimiter" else \
                delim[:draw(st.integers(1, max(1, len(delim) - 1)))] * draw(st.integers(2, 40))
        text = text[:at] + piece + text[at:]
    return text, prefix, tools if draw(st.booleans()) else None


@pytest.mark.parametrize("grammar", sorted(gp.list_grammars()))
@settings(max_examples=examples(0.07))
@given(data=st.data())
def test_hostile_outputs_never_break_the_adapters(grammar, data):
    text, prefix, tools = data.draw(hostile_output(grammar), label="output")
    size = data.draw(st.sampled_from([7, 64, max(1, len(text))]), label="chunk size")
    chunks = [text[i:i + size] for i in range(0, len(text), size)]
    message, _, _ = run_adapters(grammar, text, chunks, prefix=prefix, tools=tools)
    parsed = gp.parse_response(text, grammar, prefix=prefix, tools=tools, strict=False)
    assert [c["function"]["name"] for c in message.get("tool_calls", [])] == \
        [name for c in parsed.get("tool_calls", []) if (name := call_name(c))], "the calls of the one-shot parse"


def test_brackets_inside_json_strings_are_not_walked_in_python(monkeypatch):
    """Nesting is checked on the parsed value: a long argument full of brackets (past the depth limit in
    number) is not walked character by character; text that does not parse, and nests too deeply, is
    still reported as too deep first."""
    from grammar_parse._engine import reading

    walked = []
    original = reading._check_depth
    monkeypatch.setattr(reading, "_check_depth", lambda text, limit: (walked.append(len(text)), original(text, limit))[1])
    brackets = '{"query": "%s"}' % ("[x] {y} " * 200)
    assert parse_content(brackets, "json", {}) == {"query": "[x] {y} " * 200}
    assert walked == []
    with pytest.raises(ParseError) as caught:
        parse_content("[" * 300 + "1", "json", {})
    assert caught.value.code == "parse.json_depth" and walked == [301]
    with pytest.raises(ParseError) as caught:
        parse_content(DEEP, "json", {})
    assert caught.value.code == "parse.json_depth"
