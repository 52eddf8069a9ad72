"""Tagged and XML tool-call arguments as a constraint (grammar_parse.constrain._tagged): each parameter in
the schema's order, required ones required, values typed by the schema so that the parser reads them back
as that type. Checked byte by byte with both engines, as in test_constrain.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse import constrain
from grammar_parse.constrain import tagged
from grammar_parse.constrain._regexes import Unsupported

pytest.importorskip("llguidance")
pytest.importorskip("xgrammar")

from test_constrain import BACKENDS, verdict  # noqa: E402  (after the engines are known to be there)


def tool(name: str, properties: dict[str, Any] | None = None, required: list[str] | None = None,
         **extra: Any) -> dict[str, Any]:
    parameters: dict[str, Any] = {"type": "object", "properties": properties or {}, "required": required or []}
    return {"type": "function", "function": {"name": name, "parameters": {**parameters, **extra}}}


READ = tool("read_file", {"path": {"type": "string"}, "offset": {"type": "integer"}}, ["path"])


def qwen(*params: tuple[str, str], name: str = "read_file") -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


@pytest.fixture(params=list(BACKENDS))
def backend(request: Any) -> str:
    return str(request.param)


def check(backend: str, grammar: str, text: str, tools: list[dict[str, Any]]) -> str:
    return verdict(backend, gp.load_grammar(grammar), text, tools, prefix="")


# ---------------------------------------------------------------------------- types, order, presence
@pytest.mark.parametrize(("params", "expected"), [
    ((("path", "a.py"), ("offset", "3")), "accept"),
    ((("path", "a.py"),), "accept"),  # an optional parameter left out
    ((("path", "a.py"), ("offset", "three")), "reject"),  # an integer written as text
    ((("path", "a.py"), ("offset", "3.5")), "reject"),
    ((("offset", "3"), ("path", "a.py")), "reject"),  # not the schema's order
    ((("offset", "3"),), "reject"),  # a required parameter missing
    ((("path", "a.py"), ("path", "b.py")), "reject"),  # a parameter twice
    ((("path", "a.py"), ("mode", "r")), "reject"),  # a parameter the schema does not declare
])
def test_parameters_follow_the_schema(backend: str, params: tuple[tuple[str, str], ...], expected: str) -> None:
    got = check(backend, "qwen3_coder", qwen(*params), [READ])
    assert got == expected if expected == "accept" else got.startswith("reject@"), got


def test_a_typed_value_parses_back_as_its_type() -> None:
    text = qwen(("path", "a.py"), ("offset", "3"))
    assert check("xgrammar", "qwen3_coder", text, [READ]) == "accept"
    message = gp.parse_response(text, gp.load_grammar("qwen3_coder"), prefix="", tools=[READ])
    assert message["tool_calls"][0]["function"]["arguments"] == {"path": "a.py", "offset": 3}


@pytest.mark.parametrize(("value", "expected"), [
    ('{"depth": 2, "hidden": false}', "accept"),
    ('{"depth": "2"}', "reject"),  # the nested schema is enforced
    ('{"depth": 2,}', "reject"),  # broken JSON
])
def test_an_object_parameter_is_json_of_its_schema(backend: str, value: str, expected: str) -> None:
    tools = [tool("ls", {"options": {"type": "object", "properties": {
        "depth": {"type": "integer"}, "hidden": {"type": "boolean"}}}}, ["options"])]
    got = check(backend, "qwen3_coder", qwen(("options", value), name="ls"), tools)
    assert got == expected if expected == "accept" else got.startswith("reject@"), got


def test_an_enum_of_strings_is_one_of_its_values(backend: str) -> None:
    tools = [tool("get_weather", {"unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["unit"])]
    assert check(backend, "qwen3_coder", qwen(("unit", "celsius"), name="get_weather"), tools) == "accept"
    assert check(backend, "qwen3_coder", qwen(("unit", "kelvin"), name="get_weather"), tools).startswith("reject@")


# ---------------------------------------------------------------------------- string values
def test_a_string_may_hold_markup_that_is_not_its_closer(backend: str) -> None:
    tools = [tool("write", {"text": {"type": "string"}}, ["text"])]
    text = '<tool_call>write\n<arg_key>text</arg_key>\n<arg_value>if a < b: return "<tag>"</arg_value>\n</tool_call>'
    assert check(backend, "glm45", text, tools) == "accept"


def test_a_string_ends_at_its_closer(backend: str) -> None:
    tools = [tool("write", {"text": {"type": "string"}}, ["text"])]
    text = "<tool_call>write\n<arg_key>text</arg_key>\n<arg_value>a</arg_value> b</arg_value>\n</tool_call>"
    assert check(backend, "glm45", text, tools).startswith("reject@")


_GLM = "<tool_call>write\n<arg_key>text</arg_key>\n<arg_value>{}</arg_value>\n</tool_call>"
_CDATA = '<function name="write"><param name="text"><![CDATA[{}]]></param></function>'


@pytest.mark.parametrize(("grammar", "text", "expected"), [
    # Qwen3-Coder's </parameter> is optional: a value ends at the next <parameter=...> or at </tool_call>.
    ("qwen3_coder", qwen(("text", "see </tool_call> here"), name="write"), "reject"),
    ("qwen3_coder", qwen(("text", "a <parameter=x> tag"), name="write"), "reject"),
    # GLM's </arg_value> is optional too (the parser ends a value without it at <arg_key> or </tool_call>).
    *((g, _GLM.format(inner), "reject") for g in ("glm45", "glm47")
      for inner in ("see </tool_call> here", "a <arg_key>x</arg_key> tag")),
    # MiniCPM5's CDATA value runs to its required ]]></param>: what ends a plain value may be in it.
    *(("minicpm5", _CDATA.format(inner), "accept")
      for inner in ("see </function> here", 'a <param name="x"> tag', "see </param> here")),
])
def test_a_value_without_a_required_closer_keeps_what_would_end_a_value_without_one(
        backend: str, grammar: str, text: str, expected: str) -> None:
    """A value whose closer the parser may do without keeps out what would end it there; one whose closer
    is required may hold it. The constraint still writes the closer (the canonical form)."""
    tools = [tool("write", {"text": {"type": "string"}}, ["text"])]
    got = check(backend, grammar, text, tools)
    assert got == expected if expected == "accept" else got.startswith("reject@"), got


@pytest.mark.parametrize("inner", ["a <|open|>json<|sep|>{} b", "<|open|>json type=\"object\"<|sep|>"])
def test_a_value_keeps_out_the_opener_of_every_region_of_the_call(backend: str, inner: str) -> None:
    """Kimi K3's </argument> is optional: a value also ends where the call's one-JSON-value arguments open
    (<|open|>json...), a region of the call that names no key. Written in a string, the parser read the
    rest as broken JSON arguments (found by the drawn-calls test)."""
    tools = [tool("search", {"query": {"type": "string"}}, ["query"])]
    call = ('<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="search"<|sep|>'
            '<|open|>argument key="query" type="string"<|sep|>{}<|close|>argument<|sep|><|close|>call<|sep|>'
            '<|close|>tools<|sep|>')
    assert check(backend, "kimi_k3", call.format("a json b"), tools) == "accept"
    assert check(backend, "kimi_k3", call.format(inner), tools).startswith("reject@")
    message = gp.parse_response(call.format(inner), gp.load_grammar("kimi_k3"), prefix="", tools=tools, strict=False)
    assert message["tool_calls"][0]["function"]["arguments"] != {"query": inner}  # (the parser cuts it there)


def test_minicpm5_markup_goes_in_cdata(backend: str) -> None:
    """A plain <param> is not followed by <![CDATA[ (its opener's lookahead): a value starting with "<" is
    written as CDATA, which may hold </param>."""
    tools = [tool("write", {"text": {"type": "string"}}, ["text"])]
    plain = '<function name="write"><param name="text">{}</param></function>'
    assert check(backend, "minicpm5", plain.format("a <b>"), tools) == "accept"
    assert check(backend, "minicpm5", plain.format("<b>bold</b>"), tools).startswith("reject@")
    cdata = '<function name="write"><param name="text"><![CDATA[<b></param></b>]]></param></function>'
    assert check(backend, "minicpm5", cdata, tools) == "accept"


@pytest.mark.parametrize(("value", "expected"), [
    ("    def f():\n        return 1\n", "accept"),  # indented code, the template's plain value
    ("\n  a", "accept"),
    (" " * 9 + "<b>", "accept"),  # past the lookahead's 8 spaces: no CDATA can follow, so markup is plain
    ("  <b>", "reject"),  # markup after a few spaces goes in CDATA, as at the start
])
def test_minicpm5_plain_value_may_start_with_whitespace(backend: str, value: str, expected: str) -> None:
    """The plain <param>'s lookahead (?!\\s{0,8}<!\\[CDATA\\[) bans a CDATA opener after up to 8 spaces,
    not a value that starts with a space: indented code is written plain."""
    tools = [tool("write", {"text": {"type": "string"}}, ["text"])]
    got = check(backend, "minicpm5", f'<function name="write"><param name="text">{value}</param></function>', tools)
    assert got == expected if expected == "accept" else got.startswith("reject@"), got


# ---------------------------------------------------------------------------- text and JSON regions
@pytest.mark.parametrize(("attribute", "value", "expected"), [
    ('string="false"', "5", "accept"),
    ('string="true"', "5", "reject"),  # a non-string goes in the JSON region
    ('string="false"', '"5"', "reject"),
])
def test_dsml_writes_non_strings_as_json(backend: str, attribute: str, value: str, expected: str) -> None:
    tools = [tool("get_weather", {"days": {"type": "integer"}}, ["days"])]
    text = ("<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
            f"<｜DSML｜parameter name=\"days\" {attribute}>{value}</｜DSML｜parameter>\n"
            "</｜DSML｜invoke>\n</｜DSML｜function_calls>")
    got = check(backend, "deepseek_v32", text, tools)
    assert got == expected if expected == "accept" else got.startswith("reject@"), got


def test_kimi_k3_types_its_json_arguments(backend: str) -> None:
    """Kimi's JSON argument opener is type="(?!string")...": a non-string is written under its type name."""
    tools = [tool("get_weather", {"days": {"type": "integer"}}, ["days"])]
    text = ('<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
            '<|open|>argument key="days" type="{}"<|sep|>3<|close|>argument<|sep|><|close|>call<|sep|>'
            '<|close|>tools<|sep|>')
    assert check(backend, "kimi_k3", "<|close|>response<|sep|>" + text.format("integer"), tools) == "accept"
    assert check(backend, "kimi_k3", "<|close|>response<|sep|>" + text.format("string"), tools).startswith("reject@")


_M = "]<]minimax[>["
_ORDER = tool("order", {
    "ship": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}},
             "required": ["city"]},
    "to": {"type": "array", "items": {"type": "string"}},
    "lines": {"type": "array", "items": {"type": "object", "properties": {"qty": {"type": "integer"}}}}}, ["ship"])


def _order(*args: str) -> str:
    return f"{_M}<tool_call>\n{_M}<invoke name=\"order\">{''.join(args)}{_M}</invoke>\n{_M}</tool_call>"


def _el(key: str, inner: str) -> str:
    return f"{_M}<{key}>{inner}{_M}</{key}>"


@pytest.mark.parametrize(("text", "expected"), [
    # The template's to_xml: an object's properties each an element, a list's items each an <item>.
    (_order(_el("ship", _el("city", "Oslo") + _el("zip", "150"))), "accept"),
    (_order(_el("ship", _el("city", "Oslo")), _el("to", _el("item", "ann@x.org") + _el("item", "bob@x.org"))),
     "accept"),
    (_order(_el("ship", _el("city", "Oslo")), _el("to", "")), "accept"),  # an empty list
    (_order(_el("ship", _el("city", "Oslo")), _el("lines", _el("item", _el("qty", "2")))), "accept"),
    (_order(_el("ship", _el("zip", "150"))), "reject"),  # the object's required city missing
    (_order(_el("ship", _el("city", "Oslo") + _el("zip", "ten"))), "reject"),  # a leaf of the wrong type
    (_order(_el("ship", _el("city", "Oslo") + _el("street", "Main"))), "reject"),  # a property not declared
    (_order(_el("ship", _el("city", "Oslo")), _el("lines", _el("item", _el("qty", "x")))), "reject"),
    # JSON in an element (also read by the parser) is not the template's form: not offered.
    (_order(_el("ship", '{"city": "Oslo"}')), "reject"),
    (_order(_el("ship", _el("city", "Oslo")), _el("to", '["ann@x.org"]')), "reject"),
    # A list written as the key repeated (read by the parser, as vLLM does) is not offered either.
    (_order(_el("ship", _el("city", "Oslo")), _el("to", "ann@x.org"), _el("to", "bob@x.org")), "reject"),
])
def test_minimax_m3_writes_objects_and_lists_as_elements(backend: str, text: str, expected: str) -> None:
    """MiniMax-M3's template writes a nested value as child elements (to_xml): the constraint offers that
    form, typed by the schema all the way down, and what it accepts parses back to those values."""
    got = check(backend, "minimax_m3", text, [_ORDER])
    assert got == expected if expected == "accept" else got.startswith("reject@"), got
    if expected == "accept":
        message = gp.parse_response(text, gp.load_grammar("minimax_m3"), prefix="", tools=[_ORDER])
        assert message["tool_calls"][0]["function"]["arguments"]["ship"]["city"] == "Oslo"


def test_minimax_m3_reads_repeated_elements_as_a_list() -> None:
    tools = [tool("send", {"to": {"type": "array", "items": {"type": "string"}}}, ["to"])]
    text = (f"{_M}<tool_call>\n{_M}<invoke name=\"send\">\n{_el('to', 'ann@x.org')}\n{_el('to', 'bob@x.org')}\n"
            f"{_M}</invoke>\n{_M}</tool_call>")
    message = gp.parse_response(text, gp.load_grammar("minimax_m3"), prefix="", tools=tools)
    assert message["tool_calls"][0]["function"]["arguments"] == {"to": ["ann@x.org", "bob@x.org"]}


# ---------------------------------------------------------------------------- schemas without properties
def test_a_tool_without_parameters_takes_none(backend: str) -> None:
    tools = [tool("now")]
    assert check(backend, "qwen3_coder", qwen(name="now"), tools) == "accept"
    assert check(backend, "qwen3_coder", qwen(("tz", "UTC"), name="now"), tools).startswith("reject@")


def test_a_schemaless_tool_takes_any_arguments_as_text(backend: str) -> None:
    tools = [{"type": "function", "function": {"name": "anything", "parameters": {"type": "object"}}}]
    text = qwen(("b", "2"), ("a", "x y"), name="anything")
    assert check(backend, "qwen3_coder", text, tools) == "accept"
    message = gp.parse_response(text, gp.load_grammar("qwen3_coder"), prefix="", tools=tools)
    assert message["tool_calls"][0]["function"]["arguments"] == {"b": "2", "a": "x y"}


def test_additional_properties_types_the_extra_arguments(backend: str) -> None:
    tools = [tool("tag", {"name": {"type": "string"}}, ["name"], additionalProperties={"type": "integer"})]
    assert check(backend, "qwen3_coder", qwen(("name", "x"), ("size", "3"), name="tag"), tools) == "accept"
    assert check(backend, "qwen3_coder", qwen(("name", "x"), ("size", "big"), name="tag"), tools).startswith("reject@")


# ---------------------------------------------------------------------------- what is not tagged
def test_a_json_payload_is_not_tagged_arguments() -> None:
    grammar = gp.load_grammar("qwen3")
    region = constrain._call_format(grammar).region
    with pytest.raises(Unsupported, match="not tagged arguments"):
        tagged.call_body(grammar, region, "f", {"type": "object"})


def test_the_format_is_plain_json() -> None:
    """The body is a structural-tag format of the agreed node types only (the llguidance translator reads
    exactly these)."""
    grammar = gp.load_grammar("deepseek_v32")
    region = constrain._call_format(grammar).region
    body = tagged.call_body(grammar, region, "get_weather", READ["function"]["parameters"])
    kinds = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                kinds.add(node["type"])
            for key, value in node.items():
                if key != "json_schema":
                    walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(json.dumps(body)))
    assert kinds <= {"const_string", "regex", "json_schema", "any_text", "tag", "sequence", "or", "optional",
                     "star", "plus", "repeat"}, kinds
