"""Template loading: every malformed template is rejected at load time with the field and key named."""

from __future__ import annotations

import copy

import pytest

import grammar_parse
from grammar_parse.errors import ERROR_CODES, TemplateError

BASE = {"start_anchor": "<|assistant|>", "fields": {"x": {"open": "<x>", "close": "</x>"}}}


def with_field(**changes):
    t = copy.deepcopy(BASE)
    t["fields"]["x"].update(changes)
    for k, v in list(changes.items()):
        if v is None:
            del t["fields"]["x"][k]
    return t


XML = {"content": "xml-inline", "content_args": {"tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</\1>"}}

REJECT = [
    # (id, template, code, path)
    ("not-a-dict", ["fields"], "template.type", ""),
    ("version", {**BASE, "version": 2}, "template.version", "version"),
    ("unknown-top-key", {**BASE, "fieldz": {}}, "template.unknown_key", ""),
    ("defaults-not-dict", {**BASE, "defaults": []}, "template.type", "defaults"),
    ("no-fields", {**BASE, "fields": {}}, "template.fields", "fields"),
    ("field-not-dict", {**BASE, "fields": {"x": "<x>"}}, "template.type", "fields.x"),
    ("unknown-field-key", with_field(opne="<x>"), "template.unknown_key", "fields.x"),
    ("unknown-content", with_field(content="jsn"), "template.content", "fields.x.content"),
    ("open-twice", with_field(open_pattern="<x>"), "template.delimiter", "fields.x.open"),
    ("open-empty-list", with_field(open=[]), "template.delimiter", "fields.x.open"),
    ("open-empty-string", with_field(open=[""]), "template.delimiter", "fields.x.open"),
    ("open-number", with_field(open=5), "template.delimiter", "fields.x.open"),
    ("open-pattern-invalid", with_field(open=None, open_pattern="<(x"), "template.regex", "fields.x.open_pattern"),
    ("close-pattern-number", with_field(close=None, close_pattern=5), "template.type", "fields.x.close_pattern"),
    ("join-number", with_field(join=7, repeats=True), "template.join", "fields.x.join"),
    ("join-without-repeats", with_field(join=""), "template.join", "fields.x.join"),
    ("transform-each-alone", with_field(transform_each=True), "template.transform", "fields.x.transform_each"),
    ("transform-each-string", with_field(transform={"a": "{content}"}, transform_each="yes"),
     "template.transform", "fields.x.transform_each"),
    ("transform-interpolation", with_field(transform={"a": "name: {content}"}), "template.transform",
     "fields.x.transform"),
    ("named-groups-unused", with_field(open=None, open_pattern=r"<x (?P<name>\w+)>"), "template.named_groups",
     "fields.x"),
    ("two-implicit", {**BASE, "fields": {"a": {}, "b": {"close": "</b>"}}}, "template.fields", "fields"),
    ("no-anchor", {"fields": BASE["fields"]}, "template.start_anchor", "start_anchor"),
    ("anchor-twice", {**BASE, "start_anchor_pattern": "x"}, "template.delimiter", "start_anchor"),
    ("content-args-list", with_field(content_args=[]), "template.type", "fields.x.content_args"),
    ("content-args-typo", with_field(content_args={"strp": False}), "template.content", "fields.x.content_args"),
    ("strip-not-bool", with_field(content_args={"strip": "no"}), "template.type", "fields.x.content_args.strip"),
    # "spaced" bare keys are a grammar-only dialect: a transformers template keeps transformers' own.
    ("unquoted-keys-spaced-in-a-template", with_field(content="json", content_args={"unquoted_keys": "spaced"}),
     "template.type", "fields.x.content_args.unquoted_keys"),
    ("xml-without-tag-pattern", with_field(content="xml-inline"), "template.content", "fields.x.content_args"),
    # reporting text outside every tag is a grammar-only argument: a transformers template ignores that text.
    ("xml-report-stray-in-a-template", with_field(content="xml-inline", content_args={
        "tag_pattern": "<(?P<key>a)>(?P<value>.*?)</a>", "report_stray": True}), "template.content",
     "fields.x.content_args"),
    ("xml-tag-pattern-without-key", with_field(content="xml-inline", content_args={"tag_pattern": "<a>"}),
     "template.content", "fields.x.content_args.tag_pattern"),
    ("xml-tag-pattern-invalid", with_field(content="xml-inline", content_args={"tag_pattern": "(?P<key>"}),
     "template.regex", "fields.x.content_args.tag_pattern"),
    ("value-parser-unknown", with_field(content="kv-lines", content_args={"value_parser": {"name": "yaml"}}),
     "template.content", "fields.x.content_args.value_parser.name"),
    ("string-delims-shape", with_field(content="json", content_args={"string_delims": ["'"]}),
     "template.content", "fields.x.content_args.string_delims"),
    ("kv-sep-empty", with_field(content="kv-lines", content_args={"kv_sep": ""}), "template.content",
     "fields.x.content_args.kv_sep"),
    ("repeats-not-bool", with_field(repeats="yes"), "template.type", "fields.x.repeats"),
    ("optional-not-bool", with_field(optional=0), "template.type", "fields.x.optional"),
]


@pytest.mark.parametrize("template, code, path", [r[1:] for r in REJECT], ids=[r[0] for r in REJECT])
def test_bad_template_is_rejected_at_load(template, code, path):
    with pytest.raises(TemplateError) as info:
        grammar_parse.compile_template(template)
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, grammar_parse.GrammarParseError)
    assert (err.code, err.path) == (code, path)
    assert err.code in ERROR_CODES
    assert str(err).startswith(f"{path}: " if path else "")


ACCEPT = [
    ("minimal", BASE),
    ("literal-lists", {**BASE, "fields": {"x": {"open": ["<a>", "<bb>"], "close": ["</a>", "</bb>"]}}}),
    ("implicit-only", {**BASE, "fields": {"content": {}}}),
    ("implicit-with-close", {**BASE, "fields": {"content": {"close_pattern": r"\Z"}}}),
    ("anchor-list", {**BASE, "start_anchor": ["a", "b"]}),
    ("anchor-pattern", {"start_anchor_pattern": r"<\|assistant\|>", "fields": BASE["fields"]}),
    ("xml-inline", with_field(**XML)),
    ("kv-lines", with_field(content="kv-lines", content_args={"line_sep": ";", "kv_sep": "=",
                                                               "value_parser": {"name": "int"}})),
    ("captures-in-transform", with_field(open=None, open_pattern=r"<x (?P<name>\w+)>",
                                         transform={"name": "{name}", "body": "{content}"})),
    ("odd-field-names", {**BASE, "fields": {"start": {"open": "<s>"}, "Tool Calls!": {"open": "<t>"},
                                            "2nd": {"open": "<2>"}, "start_2": {"open": "<s2>"}}}),
]


@pytest.mark.parametrize("template", [r[1] for r in ACCEPT], ids=[r[0] for r in ACCEPT])
def test_good_template_compiles_deterministically(template):
    first = grammar_parse.compile_template(copy.deepcopy(template))
    assert set(first.fields) == set(template["fields"])
    assert grammar_parse.compile_template(copy.deepcopy(template)) is first  # cached
    from grammar_parse._engine.compiler import template_to_lark
    from grammar_parse._engine.template import load_template

    assert template_to_lark(load_template(template)) == first.lark_source
    assert "__ANON" not in first.lark_source


def test_odd_field_names_keep_their_message_keys():
    template = ACCEPT[-1][1]
    got = grammar_parse.parse_response("<t>a<s>b<2>c", template, prefix="")
    assert got == {"Tool Calls!": "a<s>b<2>c"}
    got = grammar_parse.parse_response("<s>b", template, prefix="")
    assert got == {"start": "b"}


REPEATED_LISTS = {"start_anchor": "A:", "fields": {
    "tool_calls": {"open": "<tc>", "close": "</tc>", "repeats": True, "content": "json", "transform_each": True,
                   "transform": {"type": "function", "function": {"name": "{name}"}}},
    "content": {"content": "text"}}}


def test_repeated_list_values_nest_as_in_transformers():
    """transformers 5.23 appends each region's list as one element; a template cannot ask for more (the
    grammar-only ``extend`` option flattens, see docs/grammar-authoring.md)."""
    text = 'Hi<tc>[{"name": "a"}, {"name": "b"}]</tc><tc>[{"name": "c"}]</tc>'
    calls = grammar_parse.parse_response(text, copy.deepcopy(REPEATED_LISTS), prefix="")["tool_calls"]
    assert [[c["function"]["name"] for c in block] for block in calls] == [["a", "b"], ["c"]]
    with pytest.raises(TemplateError) as e:
        grammar_parse.compile_template({**REPEATED_LISTS, "fields": {"tool_calls": {
            **REPEATED_LISTS["fields"]["tool_calls"], "extend": True}}})
    assert e.value.code == "template.unknown_key"


def test_many_fields_keep_the_states_between_regions_small():
    """400 fields took 13.9 s to load: with one rule per region, every state between regions offered a
    nonterminal per field, and Lark's LALR construction went quadratic in fields times rules."""
    fields = {f"f{i}": {"open": f"<f{i}>", "close": f"</f{i}>"} for i in range(100)}
    template = {"start_anchor": "A", "fields": {**fields, "content": {}}}
    grammar = grammar_parse.compile_template(template)
    gotos = max(sum(1 for sym in actions if not sym.isupper()) for actions in grammar.tables.parse_table.states.values())
    assert gotos <= 10  # (209 with a rule per region)
    assert grammar_parse.parse_response("<f7>x</f7>y<f99>z", template, prefix="") == {
        "f7": "x", "content": "y", "f99": "z"}


def _nest(depth, leaf, wrap):
    for _ in range(depth):
        leaf = wrap(leaf)
    return leaf


DEEP = 5_000  # (RecursionError at about 1,000)
DEEP_TEMPLATES = [
    ("defaults", {**BASE, "defaults": _nest(DEEP, 1, lambda x: {"a": x})}, "defaults.a.a"),
    ("defaults-list", {**BASE, "defaults": {"a": _nest(DEEP, 1, lambda x: [x])}}, "defaults.a.0"),
    ("transform", {**BASE, "fields": {"x": {"open": "<x>", "close": "</x>",
                                            "transform": _nest(DEEP, "{content}", lambda x: {"a": x})}}},
     "fields.x.transform"),
    ("value-parser-chain", {**BASE, "fields": {"x": {"open": "<x>", "close": "</x>", "content": "kv-lines",
                                                     "content_args": _nest(DEEP, {}, lambda x: {"value_parser": {
                                                         "name": "kv-lines", "args": x}})}}},
     "fields.x.content_args"),
]


@pytest.mark.parametrize("name, template, path", DEEP_TEMPLATES, ids=[c[0] for c in DEEP_TEMPLATES])
def test_deep_templates_are_rejected_at_load(name, template, path):
    with pytest.raises(TemplateError) as info:
        grammar_parse.compile_template(template)
    assert info.value.code == "template.depth" and info.value.path == path


def test_templates_with_too_many_fields_are_rejected_at_load():
    """A template's LALR table grows with the square of its fields: past MAX_TEMPLATE_FIELDS it is refused
    before the table is built (400 fields took 14 s once), naming the key; at the limit it loads."""
    from grammar_parse._engine.template import MAX_TEMPLATE_FIELDS

    def template(n):
        fields = {f"f{i}": {"open": f"<f{i}>", "close": f"</f{i}>", "optional": True} for i in range(n - 1)}
        return {**BASE, "fields": {**fields, "content": {}}}

    with pytest.raises(TemplateError) as info:
        grammar_parse.compile_template(template(MAX_TEMPLATE_FIELDS + 1))
    assert info.value.code == "template.fields" and info.value.path == "fields"
    assert f"more than {MAX_TEMPLATE_FIELDS}" in str(info.value)
    grammar = grammar_parse.compile_template(template(MAX_TEMPLATE_FIELDS))
    assert grammar_parse.parse_response("<f7>x</f7>rest", grammar, prefix="") == {"f7": "x", "content": "rest"}


DEEP_SCHEMAS = [
    ("properties", _nest(DEEP, {"type": "string"}, lambda x: {"type": "object", "properties": {"a": x}}),
     "properties.a.properties"),
    ("items", _nest(DEEP, {"type": "string"}, lambda x: {"type": "array", "items": x}), "items.items.items"),
    ("const", {"type": "object", "properties": {"a": {"const": _nest(DEEP, 1, lambda x: [x])}}}, "properties.a.const"),
]


@pytest.mark.parametrize("name, schema, path", DEEP_SCHEMAS, ids=[c[0] for c in DEEP_SCHEMAS])
def test_deep_legacy_schemas_are_rejected_at_load(name, schema, path):
    from grammar_parse.compat import legacy_grammar

    with pytest.raises(TemplateError) as info:
        legacy_grammar(schema)
    assert info.value.code == "template.depth" and info.value.path == path


@pytest.mark.parametrize("depth, message", [(150, "deeper than 100 levels"), (DEEP, "not valid JSON")])
def test_deep_grammar_directives_are_directive_errors(depth, message):
    from grammar_parse._engine.grammar import build_grammar

    value = "[" * depth + "]" * depth
    with pytest.raises(grammar_parse.GrammarError) as info:
        build_grammar(f'//@ defaults {{"a": {value}}}\nstart: X\nX: "x"\n')
    assert info.value.code == "grammar.directive" and message in str(info.value) and info.value.line == 1


def test_templates_as_deep_as_the_limit_load():
    from grammar_parse._engine.template import MAX_TEMPLATE_DEPTH

    levels = MAX_TEMPLATE_DEPTH - 2  # (the template and its defaults are two)
    grammar_parse.compile_template({**BASE, "defaults": {"a": _nest(levels, 1, lambda x: [x])}})
    with pytest.raises(TemplateError):
        grammar_parse.compile_template({**BASE, "defaults": {"a": _nest(levels + 1, 1, lambda x: [x])}})
