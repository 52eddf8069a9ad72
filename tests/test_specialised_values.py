"""The region values the compiled walk builds (values.specialised_value, regions.component_storer,
reading.load_json's direct scan) against the general ones they stand in for, on any input: the same value, keys in the
same order, or the same error; and the quick check that lets a call skip its schema validator
(tools.surely_valid) against that validator."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from conformance import strict_equal
from grammar_parse.errors import GrammarParseError
from grammar_parse._engine.reading import json_depth, load_json
from grammar_parse._engine.regions import component_storer, store_component
from grammar_parse._engine.symbols import Region
from grammar_parse._engine.tools import plain_check, surely_valid
from grammar_parse._engine.values import ValueSpec, specialised_value

NAMES = st.sampled_from(["name", "arguments", "id", "content", "key", "a"])
PATHS = st.one_of(NAMES, st.builds("{}.{}".format, NAMES, NAMES), st.builds("{}|{}".format, NAMES, NAMES))
PLACEHOLDERS = st.builds(lambda path, optional: "{" + path + ("?" if optional else "") + "}", PATHS, st.booleans())
LEAVES = st.one_of(PLACEHOLDERS, st.sampled_from(["function", "", "{", "x{name}", 3, None, True]))
TEMPLATES = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(NAMES, inner, max_size=3)), max_leaves=8)
JSON_VALUES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4)),
                           lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                   st.dictionaries(NAMES, inner, max_size=3)),
                           max_leaves=8)
BODIES = st.one_of(st.text(max_size=12), JSON_VALUES.map(json.dumps),
                   st.builds(lambda v, pad: pad + json.dumps(v) + pad, JSON_VALUES, st.sampled_from(["", " \n", "\t"])),
                   st.sampled_from(["[1, 2", "NaN", "\ufeff{}", "{} x", "[" * 300 + "]" * 300, "1" * 5000]))
SCOPES = st.one_of(st.fixed_dictionaries({n: JSON_VALUES for n in ["name", "arguments", "id", "content", "key", "a"]}),
                   st.dictionaries(NAMES, JSON_VALUES, max_size=4))  # (most often every name: the fill goes through)
ENTRY_SCOPES = st.dictionaries(st.sampled_from(["key", "name"]), st.one_of(st.text(max_size=2), st.integers()),
                               max_size=2)
ARGS = st.one_of(st.just({}), st.just({"strip": False}), st.just({"strip": False, "separators": ["\n", "\n"]}),
                 st.just({"allow_non_json": True}), st.just({"unquoted_keys": True}))


def same(a: Any, b: Any) -> bool:
    """Equal, types and key order too (NaN is the same as NaN: json.loads reads it)."""
    return (strict_equal(a, b) or repr(a) == repr(b)) and json.dumps(a, default=str) == json.dumps(b, default=str)


def outcome(run: Any) -> tuple[str, Any]:
    try:
        return "value", run()
    except GrammarParseError as e:
        return "error", (type(e).__name__, e.code)
    except Exception as e:  # noqa: BLE001 - what the general value raises, the specialised must too
        return "error", type(e).__name__


@given(st.sampled_from(["text", "json"]), ARGS, st.one_of(st.none(), TEMPLATES), st.booleans(), BODIES, SCOPES,
       SCOPES)
def test_a_specialised_value_is_the_specs_value(content: str, args: dict[str, Any], transform: Any, each: bool,
                                                 body: str, captures: dict[str, Any], children: dict[str, Any]) -> None:
    spec = ValueSpec(content=content, content_args=args, transform=transform,
                     transform_each=each and transform is not None)
    want = outcome(lambda: spec.value(body, captures, "<a>", "</a>", children))
    have = outcome(lambda: specialised_value(spec)(body, captures, "<a>", "</a>", children))
    assert want[0] == have[0] and same(want[1], have[1]), (want, have)


FILLED = st.recursive(st.one_of(st.sampled_from(["{name}", "{arguments}", "{content}", "{id?}", "{a.b}", "function", 3,
                                                 "{a.b|name}", "{x|a.c|id}", "{name|arguments}", "{a.b?}",
                                                 "{content.arguments|content.parameters?}", "{x|a.c?}"])),
                      lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(NAMES, inner, max_size=4)),
                      max_leaves=10)


@given(FILLED, JSON_VALUES, st.dictionaries(st.sampled_from(["name", "arguments", "id", "a"]), JSON_VALUES, min_size=2))
@example({"id": "{id?}", "type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}, 1,
         {"id": "x", "name": "f", "arguments": {}})  # (mistral's call, with an id and without)
@example({"id": "{id?}", "type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}, 1,
         {"name": "f", "arguments": {}})
@example({"type": "function", "function": "{content}"}, {"name": "f", "arguments": {"a": [1]}}, {"a": 1})  # (qwen3's)
@example({"type": "function", "function": {"name": "{content.name}",
                                           "arguments": "{content.parameters|content.arguments}"}},
         {"name": "f", "arguments": {"a": 1}}, {"a": 1})  # (llama3_json's)
@example({"n": "{name|arguments}"}, 1, {"name": "f", "arguments": {}})  # (both there: the first)
@example({"type": "function", "function": {"name": "{content.name}",
                                           "arguments": "{content.parameters|content.arguments?}"}},
         {"name": "f"}, {"a": 1})  # (a call written without arguments: the key left out)
@example({"function": {"arguments": "{content.args?}"}}, [1], {"a": 1})  # (content that is no object)
def test_a_written_transform_fills_as_the_template_does(transform: Any, content: Any, captures: dict[str, Any]) -> None:
    """Templates the written filler takes (no alternatives), over scopes that fill most of them: the same value,
    keys in the same order."""
    spec = ValueSpec(content="json", transform=transform)
    body = json.dumps(content)
    want = outcome(lambda: spec.value(body, captures))
    have = outcome(lambda: specialised_value(spec)(body, captures, "", "", {}))
    assert want[0] == have[0] and same(want[1], have[1]), (want, have)


@given(st.sampled_from(["{key}", "{a.b}", "{key|name}", "{key?}", None]), st.booleans(), ENTRY_SCOPES, ENTRY_SCOPES,
       JSON_VALUES,
       st.one_of(st.none(), st.just({}), st.just("text"), st.just({"k": 1})))
def test_a_component_is_stored_as_store_component_stores_it(entry_key: str | None, repeats: bool,
                                                            captures: dict[str, Any], children: dict[str, Any],
                                                            value: Any, have: Any) -> None:
    region = Region(rule="parameter", field="parameter", spec=ValueSpec(repeats=repeats), implicit=False,
                    parent="tool_calls",
                    key="arguments", entry_key=entry_key)
    want_scope: dict[str, Any] = {} if have is None else {"arguments": json.loads(json.dumps(have))}
    have_scope: dict[str, Any] = {} if have is None else {"arguments": json.loads(json.dumps(have))}
    want = outcome(lambda: store_component(want_scope, region, {**captures, **children}, value))
    got = outcome(lambda: component_storer(region)(have_scope, captures, children, value))
    assert want[0] == got[0] and same(want[1], got[1]) and same(want_scope, have_scope)


@given(BODIES)
def test_load_json_reads_as_json_loads_does(text: str) -> None:
    """load_json scans plain JSON with json.loads's scanner directly: where json.loads gives a value within
    the depth limit, the same value; where it finds no JSON, the same error."""
    try:
        expected: tuple[str, Any] = ("value", json.loads(text))
    except json.JSONDecodeError:
        expected = ("error", "JSONDecodeError")
    except (ValueError, RecursionError):
        return  # (limits: load_json's own errors, tested with the limits)
    if expected[0] == "value" and text.count("[") + text.count("{") > json_depth():
        return
    got = outcome(lambda: load_json(text))
    assert got[0] == expected[0] and same(got[1], expected[1]), (got, expected)


TYPES = st.sampled_from(["string", "integer", "number", "boolean", "null", "object", "array", "uint"])
SCHEMAS = st.recursive(
    st.one_of(st.builds(lambda t: {"type": t}, TYPES), st.builds(lambda ts: {"type": ts}, st.lists(TYPES, max_size=2)),
              st.just({"type": "string", "enum": ["a", "b"]}), st.just({"enum": [1, "a", True]}), st.just({}),
              st.just({"type": "string", "format": "date-time", "description": "d"}), st.just({"minimum": 2}),
              st.just(True), st.just(False), st.just({"items": [{"type": "string"}]}), st.just({"$ref": "#"})),
    lambda inner: st.one_of(
        st.builds(lambda props, req, extra: {"type": "object", "properties": props, "required": req,
                                             **({} if extra is None else {"additionalProperties": extra})},
                  st.dictionaries(NAMES, inner, max_size=3), st.lists(NAMES, max_size=2),
                  st.one_of(st.none(), st.booleans(), inner)),
        st.builds(lambda items: {"type": "array", "items": items}, inner)),
    max_leaves=6)
INSTANCES = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                                   st.sampled_from(["a", "b", "c"]), st.just(2.0)),
                         lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                 st.dictionaries(NAMES, inner, max_size=3)),
                         max_leaves=8)


@given(SCHEMAS, INSTANCES)
@example({"type": "object", "properties": {"days": {"type": "integer"}}}, {"days": 2.0})  # (an "integer" float)
@example({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"b": "x"})
@example({"enum": [1]}, True)  # (jsonschema tells True from 1)
@example({"type": "string", "enum": ["a", "b"]}, "c")
@example({"type": "object", "properties": {"a": {"type": "number"}}}, {"a": True})  # (a bool is no number)
@example({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}, {"a": 1})
@example({"type": "array", "items": {"type": "string"}}, ["a", 1])
@example({"type": "object", "additionalProperties": {"type": "string"}}, {"a": 1})
@example({"type": ["string", "null"]}, 0)
@example({"type": "integer"}, 2.5)
def test_a_call_surely_valid_is_one_jsonschema_finds_nothing_wrong_with(schema: Any, instance: Any) -> None:
    """tools.surely_valid, which lets a call's check skip the validator: never True where the validator
    (built as the call check builds it) finds an error."""
    import jsonschema

    if surely_valid(schema, instance):
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        assert not list(validator(schema).iter_errors(instance)), (schema, instance)


ODD_SCHEMAS = st.one_of(SCHEMAS, st.builds(lambda key, value: {"type": "object", key: value},
                                           st.sampled_from(["properties", "required", "enum", "items",
                                                            "additionalProperties", "type"]),
                                           st.one_of(st.none(), st.integers(), st.lists(st.one_of(NAMES, st.integers(),
                                                                                                 st.none()),
                                                                                        max_size=3),
                                                     st.dictionaries(NAMES, st.booleans(), max_size=2))))


@given(ODD_SCHEMAS, INSTANCES)
@example({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}, {"b": "x"})
@example({"type": "object", "properties": 3, "additionalProperties": {"type": "integer"}}, {"b": 1})
@example({"required": ["a", 1]}, {"a": 1})
@example({"required": ["a", 1]}, "x")
@example({"type": ["number", {"x": 1}]}, True)
@example({"enum": ["a", 1]}, "a")
@example({"items": [{}]}, [])
@example({"type": "array", "items": False}, [1])
@example({"type": "array", "items": True}, [1])
@example({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"a": "x", "b": 1})
@example({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {}}, {"a": "x", "b": 1})
@example({"type": "object", "additionalProperties": True}, {"b": 1})
def test_a_written_check_is_surely_valid(schema: Any, instance: Any) -> None:
    """tools.plain_check, a schema's surely_valid written out once per tool, answers as surely_valid does on
    any schema, well formed or not, and any instance."""
    assert plain_check(schema)(instance) is surely_valid(schema, instance), (schema, instance)


def test_a_schema_too_large_to_write_out_is_checked_by_surely_valid() -> None:
    """A schema that holds itself (only a Python caller can pass one) or has more nodes than the written
    check takes is left to surely_valid: the same answers, and writing it out ends."""
    cyclic: dict[str, Any] = {"type": "object"}
    cyclic["properties"] = {"a": cyclic, "b": cyclic}
    for schema, instance in ((cyclic, {"a": {"b": {}}}), (cyclic, {"a": {"b": 1}}), (cyclic, 1)):
        assert plain_check(schema)(instance) is surely_valid(schema, instance)
    for levels in (31, 32, 33, 34):  # (surely_valid gives up past 32 levels: so does the written check)
        nested: Any = {"type": "integer"}
        value: Any = 1
        for _ in range(levels):
            nested, value = {"type": "array", "items": nested}, [value]
        assert plain_check(nested)(value) is surely_valid(nested, value) is (levels <= 32)
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(600)}}
    assert plain_check(wide)({"p3": 1}) and not plain_check(wide)({"p3": "x"})


def test_common_tool_arguments_are_surely_valid() -> None:
    """The case it is for: a tool's usual parameters schema and arguments that fit it."""
    schema = {"type": "object", "properties": {"city": {"type": "string", "description": "where"},
                                               "days": {"type": "integer"}, "unit": {"type": "string",
                                                                                     "enum": ["c", "f"]},
                                               "tags": {"type": "array", "items": {"type": "string"}}},
              "required": ["city"], "additionalProperties": False}
    assert surely_valid(schema, {"city": "Paris", "days": 3, "unit": "c", "tags": ["a"]})
    assert not surely_valid(schema, {"days": 3})  # (then the validator says what is wrong)
