"""Arguments typed by the request's tool schemas: what a schema says a value is, read from the text a model
wrote (an XML parameter's text, or a JSON string where the schema wants another type), the same one-shot and
streamed on the Chat Completions wire. Cases from what other parsers' tests ask of the same formats (vLLM,
SGLang, Ollama): numbers past 2**53 kept exact, ``null`` for an unset argument, schemas whose types sit behind
local ``$ref``\\ s (as pydantic writes nested models) or a one-element ``allOf``, an ``enum`` or ``const`` without a
``type`` (as pydantic writes a Literal or an IntEnum: the types of its values, as SGLang reads them)."""

from __future__ import annotations

import json
from typing import Any

import pytest

import grammar_parse as gp
from grammar_parse.adapters.chat_completions import ChatCompletionsStream

LOCATION = {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "integer"}}}
DEFS = {"$defs": {"Location": LOCATION, "Count": {"type": "integer"}, "Level": {"enum": [1, 2, 3]}},
        "definitions": {"Days": {"type": "integer"}}}

CASES: list[tuple[str, dict[str, Any], str, Any]] = [
    # (what, the argument's schema, as written, the value)
    ("a number past 2**53", {"type": "number"}, "9007199254740993", 9007199254740993),
    ("a number past 2**64", {"type": "number"}, "18446744073709551615", 18446744073709551615),
    ("a number in exponent form", {"type": "number"}, "1e3", 1000),
    ("a fraction", {"type": "number"}, "3.5", 3.5),
    ("an integer past 2**53", {"type": "integer"}, "1790892345000000001", 1790892345000000001),
    ("null for an integer", {"type": "integer"}, "null", None),
    ("None for a boolean", {"type": "boolean"}, "None", None),
    ("null for a string stays text", {"type": "string"}, "null", "null"),
    ("null where null is allowed", {"type": ["integer", "null"]}, "null", None),
    ("an object behind $ref", {"$ref": "#/$defs/Location"}, '{"city": "Shanghai", "zip": 200000}',
     {"city": "Shanghai", "zip": 200000}),
    ("an integer behind a definitions $ref", {"$ref": "#/definitions/Days"}, "3", 3),
    ("a $ref with a description beside it", {"$ref": "#/$defs/Count", "description": "how many"}, "4", 4),
    ("a $ref in anyOf", {"anyOf": [{"$ref": "#/$defs/Location"}, {"type": "null"}]}, '{"city": "X"}', {"city": "X"}),
    ("a one-element allOf", {"allOf": [{"$ref": "#/definitions/Days"}], "description": "d"}, "7", 7),
    ("a $ref to another document stays text", {"$ref": "https://example.com/s.json"}, "5", "5"),
    ("a $ref that names nothing stays text", {"$ref": "#/$defs/Missing"}, "5", "5"),
    ("an enum of integers without a type", {"enum": [1, 2, 3]}, "2", 2),
    ("an enum of strings stays text", {"enum": ["1", "2"]}, "2", "2"),
    ("an enum of numbers and integers", {"enum": [0.5, 2]}, "0.5", 0.5),
    ("a const boolean", {"const": True}, "true", True),
    ("an enum of strings and null", {"enum": ["a", None]}, "null", None),
    ("an enum behind $ref", {"$ref": "#/$defs/Level"}, "3", 3),
]


def tools(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", **DEFS, "properties": {"p": schema}}}}]


def outputs(written: str) -> dict[str, str]:
    """The argument as an XML parameter's text, and as a JSON string."""
    return {"qwen3_coder": f"<tool_call>\n<function=f>\n<parameter=p>\n{written}\n</parameter>\n</function>\n</tool_call>",
            "qwen3": '<tool_call>\n{"name": "f", "arguments": {"p": %s}}\n</tool_call>' % json.dumps(written)}


@pytest.mark.parametrize("what, schema, written, value", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("grammar", ["qwen3_coder", "qwen3"])
def test_an_argument_is_typed_as_its_schema_says(grammar: str, what: str, schema: dict[str, Any], written: str,
                                                 value: Any) -> None:
    text = outputs(written)[grammar]
    message = gp.parse_response(text, grammar, prefix="", tools=tools(schema))
    (call,) = message["tool_calls"]
    assert call["function"]["arguments"] == {"p": value} and type(call["function"]["arguments"]["p"]) is type(value)
    stream = ChatCompletionsStream(grammar, "", tools=tools(schema))
    for i in range(0, len(text), 3):
        stream.feed(text[i:i + 3])
    stream.finish()
    assert json.loads(stream.message["tool_calls"][0]["function"]["arguments"]) == {"p": value}


def test_a_cycle_of_references_stays_bounded() -> None:
    """A schema that names itself (a linked list) is followed as far as the bound, and parses."""
    looped = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
        "properties": {"p": {"$ref": "#/$defs/N"}}}}}]
    text = outputs('{"next": {"next": {}}}')["qwen3_coder"]
    message = gp.parse_response(text, "qwen3_coder", prefix="", tools=looped)
    assert message["tool_calls"][0]["function"]["arguments"] == {"p": {"next": {"next": {}}}}
