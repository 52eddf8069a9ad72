"""Constraint export (grammar_parse.constrain) with real tool schemas, at a cost linear in their size, cached,
and naming its grammar as every other API does (issue 32, items 2, 9 and "one way to name a grammar").

* Schemas as pydantic writes them (``$defs`` / ``$ref``, nested, optional, listed, mapped and recursive
  models) and draft-7 ``definitions`` export for every grammar the exports take, and every JSON Schema
  document in the constraint is self-contained: each ``$ref`` in it points at something inside that same
  document (a nested arguments schema whose ``#/$defs/X`` still pointed at the wrapper's root is what
  llguidance and xgrammar refused). A ``$ref`` to nothing is an ArgumentError naming the tool.
* An enum's size costs linear work: the Python calls an export makes are counted (not timed) at two sizes.
* An export is kept per (grammar, tools, options): asking again with equal tools (another prompt that leaves
  the same state) does no work, and a caller changing what it got back changes no later answer.
* Every public function takes a grammar as a name, a path, a response-template dict or a Grammar, and
  refuses anything else with an ArgumentError saying what it expected.

(What the engines make of these constraints is checked in tests/constrain/test_schema_engines.py, opt-in.)
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from pydantic import BaseModel, Field

import grammar_parse as gp
from grammar_parse import constrain
from grammar_parse._engine.reading import NOWHERE, json_pointer
from grammar_parse.errors import ArgumentError

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------- pydantic models
class Address(BaseModel):
    street: str
    city: str


class Person(BaseModel):
    name: str
    address: Address = Field(description="where they live")  # ($ref beside a description)
    backup: Optional[Address] = None  # (anyOf: [$ref, null])
    previous: list[Address] = []  # (items: $ref)
    by_label: dict[str, Address] = {}  # (additionalProperties: $ref)


class Node(BaseModel):
    value: int
    children: list[Node] = []


class Tree(BaseModel):
    title: str
    root: Node


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


#: A draft-7 schema: definitions, and a reference from one definition to another.
DRAFT7 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "definitions": {"Unit": {"type": "string", "enum": ["c", "f"]},
                    "Reading": {"type": "object", "properties": {"unit": {"$ref": "#/definitions/Unit"},
                                                                 "degrees": {"type": "number"}},
                                "required": ["unit", "degrees"]}},
    "properties": {"reading": {"$ref": "#/definitions/Reading"}},
    "required": ["reading"],
}

#: (tools, words the constraint must hold: the referenced definitions' own property names or values).
NESTED = {
    "nested": ([_tool("add_person", Person.model_json_schema())], ["street", "city"]),
    "draft7": ([_tool("log_reading", DRAFT7)], ["degrees"]),
    "pointer": ([_tool("move", {"type": "object", "required": ["to"], "properties": {
        "to": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]},
        "via": {"type": "array", "items": {"$ref": "#/properties/to"}}}})], ["street"]),
    "two_tools": ([_tool("add_person", Person.model_json_schema()), _tool("log_reading", DRAFT7)],
                  ["street", "degrees"]),
}
RECURSIVE = {
    "recursive_root": [_tool("make_node", Node.model_json_schema())],  # (the root itself is a $ref)
    "recursive_nested": [_tool("make_tree", Tree.model_json_schema())],
}


def _exports(name: str) -> bool:
    try:
        constrain.to_structural_tag(gp.load_grammar(name), tools=[_tool("f", {"type": "object"})])
        return True
    except gp.GrammarParseError as e:
        assert e.code == "constrain.unsupported", e
        return False


EXPORTED = [n for n in sorted(gp.list_grammars()) if _exports(n)]


def _call_syntax(grammar: gp.Grammar) -> bool:
    """Whether the grammar's calls are written in a call syntax (Python, Gemma's dialect), which the
    constraint spells out value by value as regexes: a recursive model is written a few levels deep there."""
    spec = constrain._call_format(grammar).region.spec
    return getattr(spec, "content", None) == "pythonic" or bool((getattr(spec, "content_args", None) or {})
                                                                .get("string_delims"))


# ---------------------------------------------------------------------------- the JSON documents in an export
def _documents_of_tag(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        if node.get("type") == "json_schema":
            yield node["json_schema"]
            return
        for value in node.values():
            yield from _documents_of_tag(value)
    elif isinstance(node, list):
        for value in node:
            yield from _documents_of_tag(value)


def _documents_of_lark(text: str) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    at = text.find("%json ")
    while at >= 0:
        document, end = decoder.raw_decode(text, at + len("%json "))
        yield document
        at = text.find("%json ", end)


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for key, value in node.items():
            if key not in ("enum", "const", "default", "examples"):
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _resolves(document: Any, ref: str) -> bool:
    """Whether a JSON pointer reference leads somewhere in ``document`` (the root it is resolved against)."""
    return json_pointer(document, ref) is not NOWHERE


def _dangling(documents: list[Any]) -> list[str]:
    return [ref for document in documents for ref in _refs(document) if not _resolves(document, ref)]


def _both(grammar: gp.Grammar, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    return constrain.to_llguidance(grammar, tools=tools), constrain.to_structural_tag(grammar, tools=tools)


@pytest.mark.parametrize("case", sorted(NESTED))
@pytest.mark.parametrize("name", EXPORTED)
def test_referenced_definitions_are_in_the_constraint_and_every_ref_resolves(name: str, case: str) -> None:
    grammar = gp.load_grammar(name)
    tools, words = NESTED[case]
    lark, tag = _both(grammar, tools)
    assert _dangling(list(_documents_of_lark(lark))) == []
    assert _dangling(list(_documents_of_tag(tag))) == []
    # The definitions are constrained where they are used (not left behind at the schema's root, nor
    # written as free text): their own property names are in both constraints.
    for word in words:
        assert word in lark and word in json.dumps(tag), word


@pytest.mark.parametrize("case", sorted(RECURSIVE))
@pytest.mark.parametrize("name", EXPORTED)
def test_a_recursive_model_exports(name: str, case: str) -> None:
    """JSON payloads keep the recursion (a reference to a definition the document carries: both engines read
    it); a call syntax writes the model a few levels inside itself (pythonic.RECURSION_DEPTH)."""
    grammar = gp.load_grammar(name)
    lark, tag = _both(grammar, RECURSIVE[case])
    documents = [*_documents_of_lark(lark), *_documents_of_tag(tag)]
    assert _dangling(documents) == []
    assert "children" in lark and "children" in json.dumps(tag)


#: A recursion no value ends: each Chain must hold another.
ENDLESS = {"type": "object", "$defs": {"Chain": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Chain"}},
                                                 "required": ["next"]}},
           "properties": {"chain": {"$ref": "#/$defs/Chain"}}, "required": ["chain"]}


@pytest.mark.parametrize("name", [n for n in EXPORTED if _call_syntax(gp.load_grammar(n))])
def test_a_recursion_no_value_ends_is_refused_in_a_call_syntax(name: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        constrain.to_structural_tag(gp.load_grammar(name), tools=[_tool("chain", ENDLESS)])
    assert raised.value.code == "constrain.unsupported" and "recursi" in str(raised.value), raised.value


BROKEN_REFS = {
    "missing_def": {"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}},
    "missing_in_anyof": {"type": "object", "$defs": {"A": {"type": "string"}},
                         "properties": {"a": {"anyOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/B"}]}}},
    "missing_in_items": {"type": "object",
                         "properties": {"a": {"type": "array", "items": {"$ref": "#/definitions/X"}}}},
    "missing_in_additional": {"type": "object", "additionalProperties": {"$ref": "#/$defs/Gone"}},
    "remote": {"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}},
}


@pytest.mark.parametrize("case", sorted(BROKEN_REFS))
@pytest.mark.parametrize("name", EXPORTED)
def test_a_reference_to_nothing_is_an_argument_error_naming_the_tool(name: str, case: str) -> None:
    grammar = gp.load_grammar(name)
    for export in (constrain.to_llguidance, constrain.to_structural_tag):
        with pytest.raises(ArgumentError) as raised:
            export(grammar, tools=[_tool("broken_tool", BROKEN_REFS[case])])
        assert raised.value.code == "constrain.tools" and "broken_tool" in str(raised.value), raised.value


@pytest.mark.parametrize("name", ["llama4_pythonic", "gemma4"])
def test_an_enum_beside_a_runaway_pattern_is_checked_in_bounded_time(name: str) -> None:
    """A call syntax writes an enum's values that the rest of the schema accepts, checked with a validator that
    runs the schema's regexes bounded (tools.bounded_validator): a value that nearly matches ``^(a+)+$`` (2 ** 40
    steps for re) is left out, and the export ends."""
    near_miss = "a" * 40 + "b"
    tools = [_tool("t", {"type": "object", "properties": {"s": {"type": "string", "enum": [near_miss, "aaaaaaa"],
                                                                "pattern": "^(a+)+$"}}})]
    grammar = gp.load_grammar(name)
    for export in (constrain.to_llguidance, constrain.to_structural_tag):
        text = json.dumps(export(grammar, tools=tools))
        assert "aaaaaaa" in text and near_miss not in text  # (the kept value: the other is not in the text)


def test_a_reference_cycle_with_no_way_out_does_not_loop() -> None:
    """``A: {$ref: B}``, ``B: {$ref: A}`` names no schema at all: refused, at once."""
    schema = {"type": "object", "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
              "properties": {"a": {"$ref": "#/$defs/A"}}}
    with pytest.raises(ArgumentError) as raised:
        constrain.to_structural_tag(gp.load_grammar("qwen3"), tools=[_tool("loop", schema)])
    assert raised.value.code == "constrain.tools" and "loop" in str(raised.value)


def test_a_schema_that_references_itself_exponentially_is_bounded() -> None:
    """Definitions that each use the next twice would inline to 2**40 nodes: refused with a clear error."""
    defs = {f"D{i}": {"type": "object", "properties": {"l": {"$ref": f"#/$defs/D{i + 1}"},
                                                      "r": {"$ref": f"#/$defs/D{i + 1}"}}} for i in range(40)}
    defs["D40"] = {"type": "string"}
    schema = {"type": "object", "$defs": defs, "properties": {"x": {"$ref": "#/$defs/D0"}}}
    with pytest.raises(ArgumentError) as raised:
        constrain.to_structural_tag(gp.load_grammar("qwen3"), tools=[_tool("wide", schema)])
    assert raised.value.code == "constrain.tools" and "wide" in str(raised.value)


def test_a_schema_nested_too_deep_is_bounded() -> None:
    """100 objects within objects (or a chain of definitions as deep): refused, not a RecursionError."""
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(100):
        deep = {"type": "object", "properties": {"a": deep}}
    chain = {"type": "object", "$defs": {f"D{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/D{i + 1}"}}}
                                         for i in range(100)}, "properties": {"a": {"$ref": "#/$defs/D0"}}}
    chain["$defs"]["D100"] = {"type": "string"}
    for schema in (deep, chain):
        with pytest.raises(ArgumentError) as raised:
            constrain.to_structural_tag(gp.load_grammar("qwen3"), tools=[_tool("deep", schema)])
        assert raised.value.code == "constrain.tools" and "deep" in str(raised.value)


# ---------------------------------------------------------------------------- an enum's cost
SMALL, LARGE = 100, 800  # 8x the values


def _enum_tools(n: int) -> list[dict[str, Any]]:
    return [_tool("pick", {"type": "object", "required": ["v", "n"], "properties": {
        "v": {"type": "string", "enum": [f"value_{i}" for i in range(n)]},
        "n": {"type": "integer", "enum": list(range(n))}}})]


def _calls(run: Callable[[], object]) -> int:
    """The Python and C function calls ``run`` makes: work, counted the same on every machine."""
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1
    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count[0]


@pytest.mark.parametrize("name", EXPORTED)
def test_an_enum_costs_linear_work(name: str) -> None:
    grammar = gp.load_grammar(name)
    constrain.clear_cache()
    _both(grammar, _enum_tools(1))  # (what does not depend on the tools is read once)
    work = []
    for n in (SMALL, LARGE):
        tools = _enum_tools(n)
        work.append(_calls(lambda: (constrain.to_llguidance(grammar, tools=tools),
                                    constrain.to_structural_tag(grammar, tools=tools))))
    # 8x the values: linear work is about 8x (plus what does not depend on the enum), quadratic 64x.
    assert work[1] < 12 * work[0], work


# ---------------------------------------------------------------------------- the cache
def test_an_export_is_kept_per_grammar_and_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    grammar = gp.load_grammar("qwen3")
    constrain.clear_cache()
    built = []
    original = constrain._tools

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(constrain, "_tools", counted)
    first = constrain.to_structural_tag(grammar, tools=_enum_tools(50), prefix="<|im_start|>assistant\n")
    # Equal tools (another list), and another prompt that leaves the output in the same state.
    again = constrain.to_structural_tag(grammar, tools=_enum_tools(50), prefix="<|im_start|>user\nhi<|im_end|>\n"
                                        "<|im_start|>assistant\n")
    assert again == first and len(built) == 1
    again["format"] = "changed by the caller"
    assert constrain.to_structural_tag(grammar, tools=_enum_tools(50)) == first
    # Other options, or other tools, are other exports.
    constrain.to_structural_tag(grammar, tools=_enum_tools(50), tool_choice="required")
    constrain.to_structural_tag(grammar, tools=_enum_tools(51))
    lark = constrain.to_llguidance(grammar, tools=_enum_tools(50))
    assert constrain.to_llguidance(grammar, tools=_enum_tools(50)) == lark
    assert len(built) == 4


def test_the_cache_is_bounded() -> None:
    grammar = gp.load_grammar("qwen3")
    constrain.clear_cache()
    for n in range(constrain.CACHE_ENTRIES + 20):
        constrain.to_structural_tag(grammar, tools=[_tool(f"tool_{n}", {"type": "object"})])
    assert constrain.cache_info()["entries"] <= constrain.CACHE_ENTRIES
    assert constrain.cache_info()["bytes"] <= constrain.CACHE_BYTES


# ---------------------------------------------------------------------------- naming the grammar
def _template_dict() -> dict[str, Any]:
    """A response-template dict the exports take (the first such case of the transformers conformance set)."""
    cases = json.loads((ROOT / "tests" / "data" / "conformance" / "transformers_response_template.json")
                       .read_text(encoding="utf-8"))
    for case in cases:
        try:
            constrain.to_structural_tag(gp._engine.session.resolve_grammar(case["template"]), tools=[_tool("f", {})])
        except gp.GrammarParseError:
            continue
        return dict(case["template"])
    raise AssertionError("no template of the conformance set exports")


FORMS: dict[str, Callable[[], Any]] = {
    "name": lambda: "qwen3",
    "alias": lambda: "hermes",
    "path_str": lambda: str(ROOT / "grammars" / "qwen3.lark"),
    "path": lambda: ROOT / "grammars" / "qwen3.lark",
    "dict": _template_dict,
    "grammar": lambda: gp.load_grammar("qwen3"),
}
TOOLS = [_tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})]
#: Every public function of grammar_parse.constrain that takes a grammar, called with it.
PUBLIC: dict[str, Callable[[Any], Any]] = {
    "to_llguidance": lambda g: constrain.to_llguidance(g, tools=TOOLS),
    "to_structural_tag": lambda g: constrain.to_structural_tag(g, tools=TOOLS),
    "end_of_turn": lambda g: constrain.end_of_turn(g),
}


def test_the_table_covers_every_public_function_that_takes_a_grammar() -> None:
    assert {n for n in constrain.__all__ if "grammar" in getattr(constrain, n).__code__.co_varnames[:1]} == set(PUBLIC)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("function", sorted(PUBLIC))
def test_every_public_function_takes_every_form_of_a_grammar(function: str, form: str) -> None:
    given = FORMS[form]()
    expected = PUBLIC[function](gp._engine.session.resolve_grammar(given) if form != "grammar" else given)
    assert PUBLIC[function](given) == expected


WRONG = {"int": 3, "bytes": b"qwen3", "none": None, "list": ["qwen3"], "tokenizer": object()}


@pytest.mark.parametrize("wrong", sorted(WRONG))
@pytest.mark.parametrize("function", sorted(PUBLIC))
def test_a_grammar_of_the_wrong_type_is_an_argument_error(function: str, wrong: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        PUBLIC[function](WRONG[wrong])
    message = str(raised.value)
    assert raised.value.code == "usage.argument" and "`grammar`" in message, message
    assert "grammar" in message and "name" in message and "path" in message and "Grammar" in message, message
    assert (type(WRONG[wrong]).__name__ if WRONG[wrong] is not None else "None") in message, message


OPTIONS = {
    "tools_dict": {"tools": {"get_weather": {"type": "object"}}},
    "parameters_list": {"tools": [_tool("f", ["city"])]},  # type: ignore[arg-type]
    "parallel_str": {"parallel_tool_calls": "yes"},
    "prefix_bytes": {"prefix": b"<think>"},
    "reasoning_str": {"reasoning": "no"},
    "tool_choice_int": {"tool_choice": 1},
}


@pytest.mark.parametrize("option", sorted(OPTIONS))
@pytest.mark.parametrize("function", ["to_llguidance", "to_structural_tag"])
def test_an_option_of_the_wrong_type_is_an_argument_error(function: str, option: str) -> None:
    arguments: dict[str, Any] = {"tools": TOOLS, **OPTIONS[option]}
    with pytest.raises(ArgumentError) as raised:
        getattr(constrain, function)("qwen3", **arguments)
    key = next(iter(OPTIONS[option]))
    assert key in str(raised.value) or (key == "tools" and "tool" in str(raised.value)), raised.value


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.mark.parametrize("export", ["to_llguidance", "to_structural_tag"])
def test_every_tool_shape_the_parser_reads_constrains_the_same(export: str) -> None:
    """The export reads tools as the parser does (grammar_parse._engine.tools.check_tools): Anthropic's
    input_schema and MCP's inputSchema give the constraint an OpenAI tool gives (they went unconstrained)."""
    shapes = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
              {"name": "get_weather", "input_schema": SCHEMA}, {"name": "get_weather", "inputSchema": SCHEMA}]
    exports = [getattr(constrain, export)("qwen3", tools=[tool], tool_choice="required") for tool in shapes]
    assert exports[0] == exports[1] == exports[2]
    assert "city" in json.dumps(exports[0])
