"""XML-style argument values (issue 31, classes 2 and 3), for every built-in grammar that writes arguments as
raw text between tags (``<parameter=K>``, ``<parameter name="K">``, ``<arg_value>``, DSML, ATEM, xml-inline
tags): a string value is the model's text less only the template's own separators, one-shot, streamed in any
chunking and as the Chat Completions argument deltas; typed values may lose the whitespace around them; nested
elements (MiniMax-M3) are objects and lists, typed by the tool's schema all the way down.

The values are rewritten into each grammar's own golden samples (the markup around them is the family's), so a
grammar added with such arguments is covered by its goldens; tests/test_drift.py's ``indented_value`` runs the
same rewrite through the drift checks.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import strict_equal
from goldens import goldens, parsed
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.templates._derive import derive_grammar
from grammar_parse._engine.grammar import Grammar, build_grammar
from grammar_parse.templates._probes import render_probes
from strategies import chunkings, examples

# ---------------------------------------------------------------------------- where values are raw text


def raw_value_regions(grammar: Grammar) -> list[Any]:
    """The regions whose argument values are the model's raw text: a parameter component read as text (or as
    JSON that falls back to text), or a call region whose xml-inline tags hold the values."""
    out = []
    for region in grammar.regions.values():
        content, args = getattr(region.spec, "content", None), getattr(region.spec, "content_args", {}) or {}
        if region.parent is not None and (content == "text" or content == "json" and args.get("allow_non_json")):
            out.append(region)
        elif region.parent is None and content == "xml-inline" and args.get("value_parser") is None:
            out.append(region)
    return out


XML_GRAMMARS = sorted(n for n in gp.list_grammars() if raw_value_regions(gp.load_grammar(n)))


def indent(value: str) -> str:
    """Code as an edit tool receives it: leading indentation, an inner blank line, a trailing newline."""
    return f"    {value}\n\n    {value}\n"


def value_spans(grammar: Grammar, text: str, prefix: str, tools: Any,
                expected: dict[str, Any]) -> list[tuple[int, str, int, int]]:
    """Where the sample's string arguments are written as raw text: (call index, key, start, end) of each value
    that is the whole of its parameter's text (not a JSON string inside it; for xml-inline, its tag's value
    group) and is followed by a delimiter (not cut off by the end of the output)."""
    raw = raw_value_regions(grammar)
    parser = gp.ResponseParser(grammar, prefix, tools=tools, trace=True)
    parser.finalize(text)
    found = [s for s in parser.spans if s["start"] >= 0]
    out = []
    for index, call in enumerate(expected.get("tool_calls") or []):
        arguments = call.get("function", call).get("arguments")
        for key, value in (arguments.items() if isinstance(arguments, dict) else ()):
            if not isinstance(value, str) or not value or value != value.strip() or text.count(value) != 1:
                continue
            at = text.index(value)
            pos = next((i for i, s in enumerate(found) if s["kind"] == "text" and s["start"] <= at
                        and at + len(value) <= s["end"]), None)
            opener = next((s for s in reversed(found[:pos]) if s["kind"] == "delimiter"), None) if pos else None
            term = grammar.terminals.get(opener["terminal"]) if opener is not None else None
            if pos is None or term is None or term.role != "open" or term.region not in raw \
                    or pos + 1 >= len(found) or found[pos + 1]["kind"] != "delimiter":
                continue
            start, end = found[pos]["start"], found[pos]["end"]
            region = term.region
            assert region is not None
            if region.parent is None:  # xml-inline: the value group of the tag holding it
                pattern = getattr(region.spec, "content_args", {})["tag_pattern"]
                tags = [m for m in re.finditer(pattern, text[start:end], re.DOTALL)
                        if start + m.start("value") <= at < start + m.end("value")]
                if not tags or (tags[0].group("value") or "").strip() != value:
                    continue
                start, end = start + tags[0].start("value"), start + tags[0].end("value")
            elif text[start:end].strip() != value:
                continue  # (a JSON string, or more than the value)
            out.append((index, key, start, end))
    return out


def with_argument(expected: dict[str, Any], index: int, key: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(expected))
    call = out["tool_calls"][index]
    call.get("function", call)["arguments"][key] = value
    return out


@cache
def indented_cases(name: str) -> tuple[tuple[str, str, str, Any, dict[str, Any]], ...]:
    """Every golden sample of ``name`` with one string argument indented: (case, text, prefix, tools, expected)."""
    grammar = gp.load_grammar(name)
    out = []
    for g in goldens(name):
        if "error" in g.expected:
            continue
        for index, key, start, end in value_spans(grammar, g.text, g.prefix, g.tools, g.expected):
            value = g.expected["tool_calls"][index].get("function", {}).get("arguments", {})[key]
            at = g.text.index(value, start, end)
            text = g.text[:at] + indent(value) + g.text[at + len(value):]
            expected = with_argument(g.expected, index, key, indent(value))
            out.append((f"{g.name}/{index}/{key}", text, g.prefix, g.tools, expected))
    return tuple(out)


def arguments_streamed(grammar: Grammar, text: str, prefix: str, tools: Any, chunks: list[str]) -> list[Any]:
    """Each call's arguments as a Chat Completions client joins the deltas' fragments, parsed."""
    stream = ChatCompletionsStream(grammar, prefix, tools=tools)
    deltas = [d for c in chunks for d in stream.feed(c)] + stream.finish()
    fragments: dict[int, list[str]] = {}
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            fragments.setdefault(call["index"], []).append(call["function"].get("arguments", ""))
    return [json.loads("".join(fragments[i])) for i in sorted(fragments)]


def call_arguments(message: dict[str, Any]) -> list[Any]:
    return [c["function"]["arguments"] for c in message.get("tool_calls") or []]


# ---------------------------------------------------------------------------- every XML-argument grammar


def test_the_xml_argument_grammars_are_found() -> None:
    """The families with raw-text arguments are all here (the figure of issue 31: 10 of them stripped)."""
    assert {"qwen3_coder", "qwen3_5", "seed_oss", "minimax_m2", "minimax_m3", "minicpm5", "muse", "muse_glimmer",
            "step3", "glm45", "glm47", "deepseek_v32", "kimi_k3", "k2_horizon", "hunyuan_v3"} <= set(XML_GRAMMARS)
    assert len(XML_GRAMMARS) >= 24


@pytest.mark.parametrize("name", XML_GRAMMARS)
def test_an_indented_value_is_the_models_text(name: str) -> None:
    """Leading indentation, an inner blank line and a trailing newline all stay, one-shot, in fixed chunks and
    as Chat Completions argument deltas (each grammar has at least one golden sample to rewrite)."""
    grammar = gp.load_grammar(name)
    cases = indented_cases(name)
    assert cases, f"{name}: no golden sample writes a string argument as raw text"
    for case, text, prefix, tools, expected in cases:
        got = parsed(grammar, text, prefix, tools)
        assert call_arguments(got) == call_arguments(expected), case
        for size in (1, 4):
            chunks = [text[i:i + size] for i in range(0, len(text), size)]
            assert strict_equal(parsed(grammar, text, prefix, tools, chunks), got), f"{case}: {size}-char chunks"
        assert arguments_streamed(grammar, text, prefix, tools, [text[i:i + 3] for i in range(0, len(text), 3)]) \
            == call_arguments(got), f"{case}: Chat Completions deltas"


@pytest.mark.parametrize("name", XML_GRAMMARS)
@settings(max_examples=examples(0.2))
@given(data=st.data())
def test_an_indented_value_streams_the_same_in_any_chunking(name: str, data: st.DataObject) -> None:
    grammar = gp.load_grammar(name)
    case, text, prefix, tools, expected = data.draw(st.sampled_from(indented_cases(name)), label="case")
    chunks = data.draw(chunkings(text), label="chunks")
    assert strict_equal(parsed(grammar, text, prefix, tools, chunks), parsed(grammar, text, prefix, tools)), case
    assert arguments_streamed(grammar, text, prefix, tools, chunks) == call_arguments(expected), case


# ---------------------------------------------------------------------------- exactly the template's separators

#: (grammar, the whole text written between a parameter's tags, the string argument): Qwen3's template writes
#: one newline after <parameter=K> and one before </parameter>; the others write nothing around a value.
SEPARATORS = [
    ("qwen3_coder", "\nsrc\n", "src"),
    ("qwen3_coder", "\n\n    src\n\n", "\n    src\n"),
    ("qwen3_coder", "src", "src"),
    ("qwen3_coder", "\n", ""),
    ("qwen3_coder", " src ", " src "),
    ("qwen3_5", "\n\tx = 1\n\n", "\tx = 1\n"),
    ("seed_oss", "\nsrc/a.py\n", "\nsrc/a.py\n"),
    ("minimax_m2", "  Paris\n", "  Paris\n"),
    ("minicpm5", " Paris ", " Paris "),
    ("step3", "\n Paris", "\n Paris"),
    ("muse", " Paris\n", " Paris\n"),
    ("muse_glimmer", "\tParis", "\tParis"),
    ("glm45", "\nBeijing\n", "\nBeijing\n"),
    ("deepseek_v32", "  杭州", "  杭州"),
]


@pytest.mark.parametrize(("name", "written", "value"), SEPARATORS, ids=[f"{n}-{w!r}" for n, w, _ in SEPARATORS])
def test_only_the_templates_own_separators_go(name: str, written: str, value: str) -> None:
    grammar = gp.load_grammar(name)
    g = next(g for g in goldens(name) if "error" not in g.expected
             and value_spans(grammar, g.text, g.prefix, g.tools, g.expected))
    index, key, start, end = value_spans(grammar, g.text, g.prefix, g.tools, g.expected)[0]
    text = g.text[:start] + written + g.text[end:]
    expected = with_argument(g.expected, index, key, value)
    got = parsed(grammar, text, g.prefix, None)
    assert call_arguments(got) == call_arguments(expected)
    assert strict_equal(parsed(grammar, text, g.prefix, None, list(text)), got)


@pytest.mark.parametrize("name", ["qwen3_coder", "seed_oss", "minimax_m2", "muse_glimmer", "glm47", "kimi_k3"])
def test_a_typed_value_ignores_the_whitespace_around_it(name: str) -> None:
    """A value the tool's schema types (an integer) is read whatever whitespace the model writes around it."""
    grammar = gp.load_grammar(name)
    g = next(g for g in goldens(name) if "error" not in g.expected
             and value_spans(grammar, g.text, g.prefix, g.tools, g.expected))
    index, key, start, end = value_spans(grammar, g.text, g.prefix, g.tools, g.expected)[0]
    text = g.text[:start] + "\n  42 \n" + g.text[end:]
    call_name = g.expected["tool_calls"][index]["function"]["name"]
    tools = [{"type": "function", "function": {"name": call_name, "parameters": {
        "type": "object", "properties": {key: {"type": "integer"}}}}}]
    got = parsed(grammar, text, g.prefix, tools)
    assert got["tool_calls"][index]["function"]["arguments"][key] == 42
    assert arguments_streamed(grammar, text, g.prefix, tools, list(text))[index][key] == 42


# ---------------------------------------------------------------------------- nested elements (MiniMax-M3)

NS = "]<]minimax[>["


def element(key: str, inner: str) -> str:
    return f"{NS}<{key}>{inner}{NS}</{key}>"


def items(*values: str) -> str:
    return "".join(element("item", v) for v in values)


ORDER = {"type": "function", "function": {"name": "order", "parameters": {"type": "object", "properties": {
    "shipping": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}}},
    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
                                                                          "qty": {"type": "integer"}}}},
    "hours": {"type": "array", "items": {"type": "integer"}},
    "tags": {"type": "array", "items": {"type": "string"}},
    "options": {"type": "object", "additionalProperties": {"type": "string"}},
    "flag": {"anyOf": [{"type": "boolean"}, {"type": "null"}]},
    "note": {"type": "string"}}}}}

#: (case, the invoke's arguments as the model writes them, arguments without tools=, with the tools above)
NESTED = [
    ("object", element("shipping", element("city", "Singapore") + element("zip", "018956")),
     {"shipping": {"city": "Singapore", "zip": "018956"}}, {"shipping": {"city": "Singapore", "zip": "018956"}}),
    ("list_of_objects", element("items", element("item", element("sku", "A1") + element("qty", "2"))
                                + element("item", element("sku", "B2") + element("qty", "1"))),
     {"items": [{"sku": "A1", "qty": "2"}, {"sku": "B2", "qty": "1"}]},
     {"items": [{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": 1}]}),
    ("one_item_list", element("tags", items("x")), {"tags": ["x"]}, {"tags": ["x"]}),
    ("typed_list", element("hours", items("9", "18")), {"hours": ["9", "18"]}, {"hours": [9, 18]}),
    ("repeated_children", element("hours", element("h", "9") + element("h", "18")),
     {"hours": ["9", "18"]}, {"hours": [9, 18]}),
    ("one_child_the_schema_lists", element("hours", element("h", "9")), {"hours": {"h": "9"}}, {"hours": [9]}),
    ("empty_elements", element("tags", "") + element("options", "") + element("note", ""),
     {"tags": "", "options": "", "note": ""}, {"tags": [], "options": {}, "note": ""}),
    ("leaf_whitespace", element("note", "  a\n\n  b\n"), {"note": "  a\n\n  b\n"}, {"note": "  a\n\n  b\n"}),
    ("json_in_a_leaf", element("hours", "[9, 18]") + element("flag", "true"),
     {"hours": "[9, 18]", "flag": "true"}, {"hours": [9, 18], "flag": True}),
    ("text_beside_children", element("note", "see " + element("b", "this")),
     {"note": f"see {NS}<b>this{NS}</b>"}, {"note": f"see {NS}<b>this{NS}</b>"}),
    ("markup_without_the_marker", element("note", "<b>bold</b>"), {"note": "<b>bold</b>"}, {"note": "<b>bold</b>"}),
    ("unclosed_inside", element("shipping", f"{NS}<city>Oslo"), {"shipping": {"city": "Oslo"}},
     {"shipping": {"city": "Oslo"}}),
    ("stray_close", element("note", f"x{NS}</zip>"), {"note": f"x{NS}</zip>"}, {"note": f"x{NS}</zip>"}),
    ("list_in_a_list", element("items", element("item", items("1", "2")) + element("item", items("3"))),
     {"items": [["1", "2"], ["3"]]}, {"items": [["1", "2"], ["3"]]}),
]


TEMPLATES = Path(__file__).resolve().parent / "data" / "chat_templates"


@cache
def element_grammars() -> tuple[Grammar, ...]:
    """The built-in MiniMax-M3 grammar and the one derived from its chat template."""
    template = gp.ChatTemplate((TEMPLATES / "MiniMax-M3.jinja").read_text(encoding="utf-8"),
                               special_tokens={"bos_token": "<s>", "eos_token": "</s>"}, origin="MiniMax-M3")
    return (gp.load_grammar("minimax_m3"), derive_grammar(template, name="minimax_m3_derived",
                                                           renderings=render_probes(template)).grammar)


@pytest.mark.parametrize("which", [0, 1], ids=["minimax_m3", "derived"])
@pytest.mark.parametrize(("case", "body", "plain", "typed"), NESTED, ids=[c[0] for c in NESTED])
def test_nested_elements(which: int, case: str, body: str, plain: dict[str, Any], typed: dict[str, Any]) -> None:
    grammar = element_grammars()[which]
    text = f"{NS}<tool_call>\n{NS}<invoke name=\"order\">{body}{NS}</invoke>\n{NS}</tool_call>[e~["
    pairs, fives = [text[i:i + 2] for i in range(0, len(text), 2)], [text[i:i + 5] for i in range(0, len(text), 5)]
    for tools, want in ((None, plain), ([ORDER], typed)):
        got = parsed(grammar, text, "]~b]ai\n", tools)
        assert call_arguments(got) == [want]
        assert strict_equal(parsed(grammar, text, "]~b]ai\n", tools, pairs), got)
        assert arguments_streamed(grammar, text, "]~b]ai\n", tools, fives) == [want]


def test_elements_nested_past_the_json_depth_are_an_error_not_a_crash() -> None:
    grammar = gp.load_grammar("minimax_m3")
    deep = "".join(f"{NS}<a>" for _ in range(300)) + "x" + "".join(f"{NS}</a>" for _ in range(300))
    text = f"{NS}<tool_call>\n{NS}<invoke name=\"f\">{deep}{NS}</invoke>\n{NS}</tool_call>[e~["
    with pytest.raises(gp.GrammarParseError) as raised:
        gp.parse_response(text, grammar, prefix="")
    assert raised.value.code == "parse.json_depth"
    lenient = gp.parse_response(text, grammar, prefix="", strict=False)
    assert any(e["code"] == "parse.json_depth" for e in lenient["parse_errors"])


# ---------------------------------------------------------------------------- grammar-only options

@pytest.mark.parametrize(("content", "args"), [
    ("text", {"strip": False, "separators": ["\n", "\n"]}),
    ("xml-inline", {"tag_pattern": "<(?P<key>\\w+)>(?P<value>.*?)</(?P=key)>",
                    "elements": {"open": "<(?P<key>\\w+)>", "close": "</(?P<key>\\w+)>"}}),
])
def test_the_new_options_are_for_lark_grammars_only(content: str, args: dict[str, Any]) -> None:
    """transformers' templates keep transformers' parsers exactly: they may not use them."""
    template = {"fields": {"content": {"content": content, "content_args": args}}}
    with pytest.raises(gp.TemplateError) as raised:
        gp.compile_template(template)
    assert raised.value.code == "template.content"


@pytest.mark.parametrize(("args", "problem"), [
    ('{"strip": true, "separators": ["\\n", "\\n"]}', "strip"),
    ('{"strip": false, "separators": ["\\n"]}', "after_open"),
])
def test_separators_are_checked(args: str, problem: str) -> None:
    source = (f'//@ grammar_parse 1\n//@ region content {{"content": "text", "content_args": {args}}}\n'
              "start: content\ncontent: CONTENT_TEXT+\n%declare CONTENT_TEXT\n")
    with pytest.raises(gp.GrammarError, match=problem):
        build_grammar(source, source_name="separators.lark")
