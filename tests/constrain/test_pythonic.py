"""Tool calls in a call syntax as a constraint (grammar_parse.constrain._pythonic): Python-style calls
(llama4_pythonic, olmo3) and Gemma's ``call:NAME{key:<escape>v<escape>}`` (function_gemma, gemma4), each
argument typed by the tool's schema so that the grammar's value parser reads back a value the schema
accepts. Checked byte by byte with both engines, as in test_constrain.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import constrain
from grammar_parse.constrain import pythonic
from grammar_parse.constrain._regexes import Unsupported

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip("xgrammar")

from test_constrain import BACKENDS, _Drawing, run_xgrammar, sample_from, verdict  # noqa: E402  (after the engines)


def tool(name: str, properties: dict[str, Any] | None = None, required: list[str] | None = None,
         **extra: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties or {}, "required": required or []}
    return {"type": "function", "function": {"name": name, "parameters": {**parameters, **extra}}}


WEATHER = tool("get_weather", {"city": {"type": "string"}, "days": {"type": "integer"},
                               "metric": {"type": "boolean"}, "note": {"type": ["string", "null"]}}, ["city"])
TIME = tool("get_time")


@pytest.fixture(params=list(BACKENDS))
def backend(request: Any) -> str:
    return str(request.param)


def check(backend: str, grammar: str, text: str, tools: list[dict[str, Any]], **options: Any) -> str:
    got = verdict(backend, gp.load_grammar(grammar), text, tools, prefix="", **options)
    return "reject" if got.startswith("reject@") else got


def llama4(*calls: str) -> str:
    return "<|python_start|>[" + ", ".join(calls) + "]<|python_end|>"


def gemma(name: str, body: str) -> str:
    return f"<start_function_call>call:{name}{body}<end_function_call>"


# ---------------------------------------------------------------------------- Python-style calls
@pytest.mark.parametrize(("call", "expected"), [
    ('get_weather(city="Paris")', "accept"),
    ('get_weather(city="Paris", days=3, metric=True, note=None)', "accept"),
    ("get_weather(city='Paris', metric=false, note=null)", "accept"),  # single quotes, JSON's literals
    ('get_weather(\n    city="Paris",\n    days=-2,\n)', "reject"),  # a trailing comma is not offered
    ('get_weather(\n    city="Paris",\n    days=-2\n)', "accept"),
    (r'get_weather(city="Pa\"ris \\ caf\u00e9 \x41\n")', "accept"),  # escapes Python and JSON agree on
    ('get_weather(city="Paris")', "accept"),
    ('get_weather("Paris")', "reject"),  # a positional argument
    ("get_weather(city=Paris)", "reject"),  # an unquoted string
    ("get_weather(days=3)", "reject"),  # the required argument missing
    ('get_weather(days=3, city="Paris")', "reject"),  # not the schema's order
    ('get_weather(city="Paris", unit="c")', "reject"),  # an argument the schema does not declare
    ('get_weather(city="Paris", days="3")', "reject"),
    ('get_weather(city="Paris", days=3.5)', "reject"),
    ('get_weather(city="Paris", days=' + "9" * 65 + ")", "reject"),  # past MAX_DIGITS
    (r'get_weather(city="\d")', "reject"),  # an escape Python warns about
    (r'get_weather(city="a\/b")', "reject"),  # JSON's slash escape is not Python's
    (r'get_weather(city="\ud800")', "reject"),  # a lone surrogate
    ('get_weather(city="two\nlines")', "reject"),  # a raw newline ends a Python string
    ('get_weather(city="x<|python_end|>y")', "reject"),  # the closer would end the call inside the string
    ('get_weather(city="x<|python_end|y")', "accept"),
    ("get_time()", "accept"),
    ("get_time(x=1)", "reject"),
    ("get_timer()", "reject"),  # not a tool
])
def test_python_arguments_follow_the_schema(backend: str, call: str, expected: str) -> None:
    assert check(backend, "llama4_pythonic", llama4(call), [WEATHER, TIME]) == expected


@pytest.mark.parametrize(("text", "expected"), [
    (llama4('get_weather(city="Paris")', "get_time()"), "accept"),
    ('<|python_start|>get_weather(city="Paris")\n\nget_time()<|python_end|>', "accept"),  # one a line
    ('<|python_start|>get_weather(city="Paris")\n  get_time()<|python_end|>', "reject"),  # an indented line
    ('<|python_start|>[get_weather(city="Paris")\nget_time()]<|python_end|>', "reject"),
    ('<|python_start|> [ get_time() ,get_time() ] <|python_end|>', "accept"),
])
def test_calls_are_a_list_or_one_a_line(backend: str, text: str, expected: str) -> None:
    assert check(backend, "llama4_pythonic", text, [WEATHER, TIME]) == expected


def test_one_call_when_parallel_calls_are_off() -> None:
    grammar = gp.load_grammar("olmo3")
    region = next(r for r in grammar.regions.values() if r.rule == "tool_calls")
    tag = {"type": "structural_tag", "format": pythonic.payload(grammar, region, [("get_time", {})], False)}
    assert run_xgrammar(tag, "get_time()") == "accept"
    assert run_xgrammar(tag, "[get_time()]") == "accept"
    assert run_xgrammar(tag, "get_time()\nget_time()").startswith("reject@")
    assert run_xgrammar(tag, "[get_time(), get_time()]").startswith("reject@")


def test_one_call_when_parallel_calls_are_off_in_the_export(backend: str) -> None:
    # (the export does not use xgrammar's stop_after_first, which in 0.2.9 accepts a malformed call)
    assert check(backend, "olmo3", "<function_calls>get_time()</function_calls>", [TIME],
                 parallel_tool_calls=False) == "accept"
    assert check(backend, "olmo3", "<function_calls>get_time()\nget_time()</function_calls>", [TIME],
                 parallel_tool_calls=False) == "reject"
    assert check(backend, "llama4_pythonic", llama4("get_time()", "get_time()"), [TIME],
                 parallel_tool_calls=False) == "reject"


def test_python_keyword_argument_names(backend: str) -> None:
    flights = tool("search_flights", {"from": {"type": "string"}, "class": {"type": "string"}}, ["from"])
    assert check(backend, "olmo3", '<function_calls>search_flights(from="SFO", class="eco")</function_calls>',
                 [flights]) == "accept"


# ---------------------------------------------------------------------------- Gemma's call syntax
@pytest.mark.parametrize(("body", "expected"), [
    ("{city:<escape>Paris<escape>}", "accept"),
    ("{city:<escape>Paris<escape>,days:3,metric:true,note:null}", "accept"),
    ("{ city : <escape>a, b: c<escape> ,\n days: 3 }", "accept"),  # spaced bare keys
    ('{city:<escape>say "hi" \\n<escape>}', "accept"),  # no escapes: the text is the value
    ('{city:"Paris"}', "reject"),  # JSON quotes: the bare-key rewriting would reach into them
    ("{city:Paris}", "reject"),
    ("{days:3}", "reject"),
    ("{days:3,city:<escape>Paris<escape>}", "reject"),
    ("{city:<escape>Paris<escape>,metric:True}", "reject"),  # Python's True is not JSON
    ("{city:<escape>a<end_function_call>b<escape>}", "reject"),
    ("{city:<escape>a<end_function_cal>b<escape>}", "accept"),
    ("{city:<escape>a\x01b<escape>}", "reject"),  # the value parser's stand-in for a hidden string
    ("{city:<escape>Paris<escape>,}", "reject"),
])
def test_gemma_arguments_follow_the_schema(backend: str, body: str, expected: str) -> None:
    assert check(backend, "function_gemma", gemma("get_weather", body), [WEATHER, TIME]) == expected


def test_gemma4_strings_keep_out_what_may_end_the_call(backend: str) -> None:
    # Its closer is optional (<turn|> ends a call too), so every delimiter of the grammar is kept out.
    def call(text: str) -> str:
        return '<|tool_call>call:get_weather{city:<|"|>' + text + '<|"|>}<tool_call|>'

    assert check(backend, "gemma4", call("Paris <b>"), [WEATHER]) == "accept"
    for inside in ("<turn|>", "<|tool_call>call:", "<tool_call|>", "<eos>"):
        assert check(backend, "gemma4", call("a" + inside), [WEATHER]) == "reject", inside


# ---------------------------------------------------------------------------- schema keywords
ROOMS = tool("book", {
    "city": {"type": "string", "enum": ["Paris", "Oslo"]},
    "nights": {"type": "integer", "minimum": 1, "maximum": 14},
    "guests": {"type": "object", "properties": {"adults": {"type": "integer", "exclusiveMinimum": 0},
                                                "kids": {"type": "integer"}}, "required": ["adults"]},
    "names": {"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 2},
    "extra": {"$ref": "#/$defs/extra"},
    "mode": {"anyOf": [{"type": "integer"}, {"const": "auto"}]},
    "meta": {"type": "object"},
    "level": {"type": "integer", "enum": [0, 5], "minimum": 1},  # an enum value the minimum refuses
    "code": {"type": "string", "enum": ["ab", "cd"], "pattern": "^a"},
}, ["city", "nights"], **{"$defs": {"extra": {"type": "boolean"}}})


@pytest.mark.parametrize(("args", "expected"), [
    ('city="Paris", nights=3', "accept"),
    ('city="Rome", nights=3', "reject"),  # not in the enum
    ('city="Paris", nights=0', "reject"),
    ('city="Paris", nights=14', "accept"),
    ('city="Paris", nights=15', "reject"),
    ('city="Paris", nights=3, guests={"adults": 2, "kids": 0}', "accept"),
    ("city='Oslo', nights=3, guests={'adults': 2}", "accept"),
    ('city="Paris", nights=3, guests={"adults": 0}', "reject"),  # exclusiveMinimum
    ('city="Paris", nights=3, guests={"kids": 1}', "reject"),  # a required key missing
    ('city="Paris", nights=3, names=["ab", "cde"]', "accept"),
    ('city="Paris", nights=3, names=["abcd"]', "reject"),  # maxLength
    ('city="Paris", nights=3, names=[]', "reject"),  # minItems
    ('city="Paris", nights=3, names=["a", "b", "c"]', "reject"),  # maxItems
    ('city="Paris", nights=3, extra=True', "accept"),  # through the $ref
    ('city="Paris", nights=3, extra=1', "reject"),
    ('city="Paris", nights=3, mode=7', "accept"),
    ('city="Paris", nights=3, mode="auto"', "accept"),
    ('city="Paris", nights=3, mode="7"', "reject"),
    ('city="Paris", nights=3, meta={"a": [1, "x", None], "b": {"c": True}}', "accept"),
    ('city="Paris", nights=3, meta={"a": [[1]]}', "reject"),  # deeper than ANY_DEPTH
    ('city="Paris", nights=3, level=5', "accept"),
    ('city="Paris", nights=3, level=0', "reject"),
    ('city="Paris", nights=3, code="ab"', "accept"),
    ('city="Paris", nights=3, code="cd"', "reject"),
])
def test_schema_keywords(backend: str, args: str, expected: str) -> None:
    assert check(backend, "olmo3", f"<function_calls>book({args})</function_calls>", [ROOMS]) == expected


@pytest.mark.parametrize(("schema", "why"), [
    ({"type": "string", "pattern": "^a"}, "'pattern'"),
    ({"type": "number", "minimum": 0}, "'minimum' on a number"),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, "oneOf"),
    ({"$ref": "#"}, "recursive reference"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"not": {"type": "string"}}, "'not'"),
])
def test_keywords_that_cannot_be_written_are_refused(schema: dict[str, Any], why: str) -> None:
    grammar = gp.load_grammar("olmo3")
    with pytest.raises(gp.GrammarParseError) as info:
        constrain.to_structural_tag(grammar, tools=[tool("f", {"x": schema}, ["x"])])
    assert info.value.code == "constrain.unsupported"
    assert why in str(info.value) and "$.x" in str(info.value)


def test_names_python_cannot_write_are_refused() -> None:
    grammar = gp.load_grammar("llama4_pythonic")
    with pytest.raises(gp.GrammarParseError, match="not a Python name"):
        constrain.to_structural_tag(grammar, tools=[tool("get-weather")])
    with pytest.raises(gp.GrammarParseError, match="required argument 'first-name'"):
        constrain.to_structural_tag(grammar, tools=[tool("f", {"first-name": {"type": "string"}}, ["first-name"])])
    # an optional argument with such a name is left out
    tag = constrain.to_structural_tag(grammar, tools=[tool("f", {"first-name": {"type": "string"}})])
    assert run_xgrammar(tag, "<|python_start|>[f()]<|python_end|>") == "accept"


def test_a_region_of_another_value_parser_is_not_mine() -> None:
    def region(grammar: gp.Grammar) -> Any:
        return next(r for r in grammar.regions.values() if r.rule == "tool_calls")

    qwen3, gemma4, olmo3 = (gp.load_grammar(n) for n in ("qwen3", "gemma4", "olmo3"))
    with pytest.raises(Unsupported, match="value parser is 'json'"):
        pythonic.payload(qwen3, region(qwen3), [("f", {})], True)
    with pytest.raises(Unsupported, match="value parser is 'json'"):
        pythonic.payload(gemma4, region(gemma4), [("f", {})], True)
    with pytest.raises(Unsupported, match="value parser is 'pythonic'"):
        pythonic.call_body(olmo3, region(olmo3), "f", {})
    with pytest.raises(Unsupported, match="has no string_delims"):
        pythonic.call_body(qwen3, region(qwen3), "f", {})


def test_llama3_pythonic_is_refused_for_its_zero_width_closer() -> None:
    grammar = gp.load_grammar("llama3_pythonic")
    region = next(r for r in grammar.regions.values() if r.rule == "tool_calls")
    with pytest.raises(Unsupported, match="closer TOOL_CALLS_CLOSE starts with no literal text"):
        pythonic.payload(grammar, region, [("f", {})], True)


def test_lfm2_pythonic_region() -> None:
    """lfm2 holds two call regions (Python-style and JSON); its Python-style payload is ready for the day
    the exports choose between them."""
    grammar = gp.load_grammar("lfm2")
    region = next(r for r in grammar.regions.values() if r.rule == "tool_calls")
    tools = [(t["function"]["name"], t["function"]["parameters"]) for t in (WEATHER, TIME)]
    tag = {"type": "structural_tag", "format": pythonic.payload(grammar, region, tools, True)}
    assert run_xgrammar(tag, '[get_weather(city="Paris", days=2), get_time()]') == "accept"
    assert run_xgrammar(tag, '[get_weather(city="a<|tool_call_end|>")]').startswith("reject@")


# ---------------------------------------------------------------------------- parse back
@pytest.mark.parametrize(("grammar", "text", "arguments"), [
    ("llama4_pythonic", llama4(r'get_weather(city="Pa\"ris\n", days=-3, metric=false, note=None)'),
     {"city": 'Pa"ris\n', "days": -3, "metric": False, "note": None}),
    ("olmo3", "<function_calls>book(city='Oslo', nights=14, guests={'adults': 1}, names=['ab'], mode=\"auto\", "
              'meta={"k": [1.5e3, true]})</function_calls>',
     {"city": "Oslo", "nights": 14, "guests": {"adults": 1}, "names": ["ab"], "mode": "auto",
      "meta": {"k": [1500.0, True]}}),
    ("function_gemma", gemma("get_weather", '{ city: <escape>a, b: "c"<escape>, days: 0, note: null }'),
     {"city": 'a, b: "c"', "days": 0, "note": None}),
    ("gemma4", '<|tool_call>call:book{city:<|"|>Paris<|"|>,nights:2,guests:{adults:2},names:[<|"|>x<|"|>],'
               'meta:{<|"|>a b<|"|>:[1,null]}}<tool_call|>',
     {"city": "Paris", "nights": 2, "guests": {"adults": 2}, "names": ["x"], "meta": {"a b": [1, None]}}),
])
def test_accepted_calls_parse_back(backend: str, grammar: str, text: str, arguments: dict[str, Any]) -> None:
    tools = [WEATHER, TIME, ROOMS]
    assert check(backend, grammar, text, tools) == "accept"
    message = gp.parse_response(text, gp.load_grammar(grammar), prefix="", tools=tools)
    (call,) = message["tool_calls"]
    assert call["function"]["arguments"] == arguments
    schema = next(t["function"]["parameters"] for t in tools if t["function"]["name"] == call["function"]["name"])
    jsonschema.validate(arguments, schema)


@pytest.mark.parametrize("grammar", ["llama4_pythonic", "olmo3", "function_gemma", "gemma4"])
def test_sampled_calls_parse_and_validate(backend: str, grammar: str) -> None:
    """Text drawn from the engine's mask after the trigger, with every keyword above in play, parses into
    calls whose arguments the tool's schema accepts."""
    loaded = gp.load_grammar(grammar)
    tools = [WEATHER, TIME, ROOMS]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    (trigger,) = constrain._call_format(loaded).trigger
    rng = random.Random(grammar)
    parsed = 0
    for _ in range(30):
        drawn = sample_from(_Drawing(backend, loaded, tools), trigger, rng, limit=600)
        if drawn is None:
            continue
        message = gp.parse_response(drawn, loaded, prefix="", tools=tools)
        assert message.get("tool_calls"), drawn
        for call in message["tool_calls"]:
            assert not call.get("errors"), (drawn, call)
            jsonschema.validate(call["function"]["arguments"], schemas[call["function"]["name"]])
            parsed += 1
    assert parsed >= 10, parsed


# ---------------------------------------------------------------------------- the regex pieces
@pytest.mark.parametrize(("lo", "hi"), [(0, 0), (0, 9), (1, 14), (7, 123), (-15, 3), (-120, -7), (99, 100),
                                        (None, 5), (-5, None), (None, -20), (40, None)])
def test_integer_ranges(lo: int | None, hi: int | None) -> None:
    rx = re.compile(pythonic._integers(lo, hi))
    for n in range(-400, 401):
        assert bool(rx.fullmatch(str(n))) == ((lo is None or n >= lo) and (hi is None or n <= hi)), n
    assert not rx.fullmatch("007") and not rx.fullmatch("-0") and not rx.fullmatch("+1")


def test_string_bodies_keep_out_the_words() -> None:
    words = {"<ab>", "<ba", "<c"}
    rx = re.compile(pythonic._body('"', None, words, None))
    for n in range(8):
        for chars in itertools.product('<abc>x"', repeat=n):
            text = "".join(chars)
            assert bool(rx.fullmatch(text)) == (not any(w in text for w in words) and '"' not in text), text


@pytest.mark.parametrize("text", ["{city:<escape>P<escape>,n:3}", "{city:<escape>P<escape>, n:3}",
                                  "{ city:<escape>P<escape>}", "{city :<escape>P<escape>}",
                                  "{city: <escape>P<escape> ,n:3 }", "{city:<escape>P<escape>,o:{k:true}}"])
def test_transformers_bare_keys_touch_the_brace_comma_and_colon(text: str) -> None:
    """With ``unquoted_keys: true`` (transformers' dialect, not "spaced") the value parser reads a bare key
    only right after ``{`` or ``,`` and right before ``:``: the constraint accepts what it reads."""
    from grammar_parse._engine.symbols import Region
    from grammar_parse._engine.content import parse_content
    from grammar_parse._engine.values import ValueSpec

    args = {"unquoted_keys": True, "string_delims": [["<escape>", "<escape>"]]}
    spec = ValueSpec(content="json", content_args=args,
                     transform={"type": "function", "function": {"name": "{name}", "arguments": "{content}"}})
    params = {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "n": {"type": "integer"}, "o": {"type": "object", "properties": {"k": {"type": "boolean"}}}}}
    body = pythonic.call_body(gp.load_grammar("function_gemma"), Region("tool_calls", "tool_calls", spec, False), "f", params)
    try:
        parse_content(text, "json", args)
        reads = True
    except gp.GrammarParseError:
        reads = False
    assert (run_xgrammar({"type": "structural_tag", "format": body}, text) == "accept") == reads
