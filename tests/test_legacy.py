"""Legacy response_schema support: transformers 5.13's results for every corpus case, streamed or not,
with streaming regions whose disagreements are reported in one correction event."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import check_error, jsonable, load, model_template_samples, strict_equal
from grammar_parse.compat import from_tokenizer_config, legacy_grammar, recursive_parse, to_template, translate
from grammar_parse.compat.legacy import SCHEMA_KEYS
from grammar_parse.errors import ERROR_CODES, TemplateError
from test_linear_regex import linear_steps

CASES = load("transformers_legacy_xregex.json") + model_template_samples("legacy_xregex")
SCHEMAS = [e["template"] for e in load("transformers_model_templates.json") if e["format"] == "legacy_xregex"]


def test_corpus_is_complete():
    assert len(load("transformers_legacy_xregex.json")) == 45
    assert len(model_template_samples("legacy_xregex")) == 42


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_same_message_or_error_as_transformers_5_13(case):
    expect = case["expect"]
    for run in (
        lambda: gp.parse_response(case["text"], copy.deepcopy(case["template"])),
        lambda: stream(case["template"], case["text"], 3)[0],
    ):
        try:
            got = jsonable(run())
        except Exception as e:  # noqa: BLE001 - the corpus names the expected type
            assert "error" in expect, f"unexpected {type(e).__name__}: {e}"
            assert check_error(case, e) == []
            continue
        assert "error" not in expect, f"expected {expect['error']}, got {got}"
        assert strict_equal(got, expect["message"])


def stream(schema, text, size):
    parser = gp.ResponseParser(copy.deepcopy(schema))
    events = []
    for i in range(0, len(text), size):
        events += parser.feed(text[i:i + size])
    message, final = parser.finalize()
    return message, events + final


@pytest.mark.parametrize("sample", model_template_samples("legacy_xregex"), ids=lambda c: c["id"])
def test_streamed_regions_plus_correction_give_the_final_message(sample):
    message, events = stream(sample["template"], sample["text"], 4)
    closes = {}
    for e in events:
        if e["type"] == "region_close" and e["value"] not in (None, "", [], {}):  # empty values are dropped
            closes.setdefault(e["field"], []).append(e["value"])
    corrections = [e for e in events if e["type"] == "correction"]
    assert len(corrections) <= 1
    if corrections:
        assert events[-1] is corrections[0], "the correction is the last event"
        assert corrections[0]["message"] == message
        assert corrections[0]["fields"]
    else:  # the regions alone told the whole story
        repeats = {r.field: r.spec.repeats for r in legacy_grammar(sample["template"]).regions.values()}
        for field, values in closes.items():
            assert message[field] == (values if repeats[field] else values[-1])


def test_most_real_schemas_stream_without_correction():
    """Measured: 30 of the 42 real-model samples stream exactly; the rest are corrected at finalize()."""
    exact = sum(1 for s in model_template_samples("legacy_xregex")
                if not [e for e in stream(s["template"], s["text"], 4)[1] if e["type"] == "correction"])
    assert exact >= 30


CHUNKED_SCHEMAS = dict(zip(["qwen3-trl", "cohere", "ernie", "gpt-oss"], SCHEMAS[:1] + SCHEMAS[7:10]))


@cache
def legacy_texts(which: str) -> st.SearchStrategy[str]:
    """Outputs made of the schema's literal delimiters and common pieces, built once per schema."""
    grammar = legacy_grammar(CHUNKED_SCHEMAS[which])
    pieces = [t.matcher.literals[0] for t in grammar.terminals.values()
              if t.matcher is not None and hasattr(t.matcher, "literals")]
    pieces += ["<think>", "</think>", "<tool_call>", '{"name": "f", "arguments": {"a": 1}}', "</tool_call>",
               "Hello", "\n", " ", "<|im_end|>"]
    return st.lists(st.sampled_from(pieces), max_size=12).map("".join)


@pytest.mark.parametrize("which", CHUNKED_SCHEMAS)
@given(data=st.data())  # on the parametrized test, so each schema keeps its own database entry
def test_any_chunking_gives_the_oneshot_message(which, data):
    schema = CHUNKED_SCHEMAS[which]
    text = data.draw(legacy_texts(which), label="text")
    try:
        expected = ("ok", jsonable(recursive_parse(text, schema)))
    except (ValueError, TypeError) as e:
        expected = ("error", isinstance(e, TypeError))
    size = data.draw(st.integers(min_value=1, max_value=8), label="size")
    try:
        got = ("ok", jsonable(stream(schema, text, size)[0]))
    except (ValueError, TypeError) as e:
        got = ("error", isinstance(e, TypeError))
    assert strict_equal(got, expected)


def outcome(run):
    try:
        return ("ok", jsonable(run()))
    except (ValueError, TypeError) as e:
        return ("error", type(e).__name__, getattr(e, "code", None))


# Outputs on which a real schema's regexes backtrack for a long time with the regex module (measured
# with the TRL Qwen3 schema: 20 KB of unclosed <think> took 28 s); small enough here for Python's re.
HOSTILE_OUTPUTS = [
    ("unclosed think", "<think>\n" + "word " * 300),
    ("unclosed think, spaces", "<think>\n" + " " * 400),
    ("spaces between words", "x" + " " * 400 + "y"),
    ("closers without openers", "</think>" * 200 + "</tool_call>" * 200),
    ("openers without closers", "<tool_call>" * 300),
]


@pytest.mark.parametrize("schema", SCHEMAS, ids=[f"schema{i}" for i in range(len(SCHEMAS))])
@pytest.mark.parametrize("name, text", HOSTILE_OUTPUTS, ids=[n for n, _ in HOSTILE_OUTPUTS])
def test_the_linear_matcher_gives_transformers_messages_on_hostile_outputs(schema, name, text):
    """timeout=0: every regex of the parse runs on the linear matcher; timeout=None: Python's re, as
    transformers 5.13 runs them."""
    assert outcome(lambda: gp.parse_response(text, legacy_grammar(schema, timeout=0.0))) == \
        outcome(lambda: gp.parse_response(text, legacy_grammar(schema, timeout=None)))


@pytest.mark.parametrize("which", CHUNKED_SCHEMAS)
@given(data=st.data())
def test_the_linear_matcher_agrees_with_python_re(which, data):
    schema = CHUNKED_SCHEMAS[which]
    text = data.draw(legacy_texts(which), label="text")
    assert outcome(lambda: recursive_parse(text, schema, timeout=0.0)) == \
        outcome(lambda: recursive_parse(text, schema, timeout=None))


@pytest.mark.parametrize("size", [20_000])
def test_unterminated_think_with_a_quadratic_regex_is_bounded(size):
    """The TRL Qwen3 schema on 20 KB of unclosed <think> took 28 s on the regex module (100 KB: hours); past
    the time limit the linear matcher finishes it, with Python's re's message, in any chunking, in steps
    that grow as the text does."""
    schema = copy.deepcopy(SCHEMAS[0])
    grammar = legacy_grammar(schema, timeout=0.0)  # (a limit of zero: every regex hands over at once)

    def think(chars):
        return "<think>\n" + "word " * (chars // 5)

    assert gp.parse_response(think(1_000), grammar) == gp.parse_response(think(1_000), legacy_grammar(schema, timeout=None))
    text = think(size)
    half, _ = linear_steps(lambda: gp.parse_response(think(size // 2), grammar))
    steps, message = linear_steps(lambda: gp.parse_response(text, grammar), limit=2.2 * half)
    assert 0 < half and steps <= 2.2 * half, (half, steps)  # (twice the text: twice the steps)
    assert message == {"role": "assistant", "content": text}  # (no </think>: all of it is content, as re gives)
    streamed = gp.ResponseParser(grammar)
    for i in range(0, len(text), 4096):
        streamed.feed(text[i:i + 4096])
    assert streamed.finalize()[0] == message


def test_prefix_is_not_accepted_for_legacy_schemas():
    with pytest.raises(gp.ArgumentError) as info:
        gp.ResponseParser(SCHEMAS[0], prefix="<|im_start|>assistant\n")
    assert info.value.code == "usage.prefix"
    assert gp.parse_response("hi", SCHEMAS[0], prefix="") == gp.parse_response("hi", SCHEMAS[0])


def test_tokenizer_config_prefers_response_template(tmp_path: Path):
    template = load("transformers_model_templates.json")[0]["template"]
    both = {"response_template": template, "response_schema": SCHEMAS[0]}
    assert from_tokenizer_config(both) is gp.compile_template(template)
    assert from_tokenizer_config({"response_schema": SCHEMAS[0]}).legacy_schema == SCHEMAS[0]
    path = tmp_path / "tokenizer_config.json"
    path.write_text(json.dumps({"model_max_length": 10, "response_schema": SCHEMAS[0]}))
    assert from_tokenizer_config(path).legacy_schema == SCHEMAS[0]
    assert gp.load_grammar(path).legacy_schema == SCHEMAS[0]
    with pytest.raises(gp.GrammarError, match="neither a response_template nor a response_schema") as info:
        from_tokenizer_config({"model_max_length": 10})
    assert info.value.code == "grammar.not_found"


def test_lark_text_of_a_legacy_grammar_loads_back():
    grammar = legacy_grammar(SCHEMAS[7])
    again = gp._engine.grammar.build_grammar(grammar.lark_source)
    text = "<|START_THINKING|>hm<|END_THINKING|><|START_RESPONSE|>Hi<|END_RESPONSE|>"
    assert gp.parse_response(text, again) == gp.parse_response(text, grammar) == recursive_parse(text, SCHEMAS[7])


def test_convert_gives_an_equivalent_template_where_one_exists():
    cohere = SCHEMAS[7]
    template, notes = to_template(cohere, translate(cohere))
    assert template is not None and notes
    for sample in [s for s in model_template_samples("legacy_xregex") if s["template"] == cohere]:
        assert gp.parse_response(sample["text"], template, prefix="") == sample["expect"]["message"]
    none, reasons = to_template(SCHEMAS[3], translate(SCHEMAS[3]))  # gpt-oss TRL rewrites its input
    assert none is None and "substitutions" in reasons[0]


def test_cli_convert_and_parse_legacy(tmp_path: Path):
    import io

    from grammar_parse._cli import main

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMAS[7]))
    out = io.StringIO()
    assert main(["convert", str(schema)], out=out) == 0
    text = out.getvalue()
    assert "//@ legacy_schema" in text and "equivalent response_template" in text and '"fields"' in text
    sample = tmp_path / "out.txt"
    sample.write_text("<|START_RESPONSE|>Hi<|END_RESPONSE|>")
    out = io.StringIO()
    assert main(["parse", "-g", str(schema), str(sample)], out=out) == 0
    assert json.loads(out.getvalue()) == {"role": "assistant", "content": "Hi"}


# Schemas of any shape: each key the format knows, mostly with a value of the type it takes, sometimes any
# JSON value; nested nodes included.
_PATTERNS = st.sampled_from(["(?P<content>.*)", "<t>(?P<thinking>.*?)</t>\\s*(?P<content>.*)", "(a)(b)", "x", "(",
                             "(?P<key>\\w+)=(?P<value>\\w+)", "<t>(.*?)</t>", "(.*)"])
_JSON_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), _PATTERNS,
                         st.sampled_from(["string", "object", "array", "integer", "json", "content"]))
_JSON = st.recursive(_JSON_LEAVES, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["content", "thinking", "transform", "x"]), inner, max_size=3),
                     max_leaves=8)


def _node(children: st.SearchStrategy) -> st.SearchStrategy:
    typed = {
        "type": st.sampled_from(["object", "array", "string", "integer", "number", "boolean", "any"]),
        "x-regex": _PATTERNS, "x-regex-iterator": _PATTERNS, "x-regex-key-value": _PATTERNS,
        "x-regex-substitutions": st.lists(st.tuples(_PATTERNS, st.sampled_from(["", "x"])).map(list), max_size=2),
        "x-parser": st.sampled_from(["json", "gemma4-tool-call", "nope"]),
        "x-parser-args": st.fixed_dictionaries({}, optional={"transform": st.sampled_from(["a", "[[", "@"])}),
        "properties": st.dictionaries(st.sampled_from(["content", "thinking", "a"]), children, max_size=3),
        "items": children, "prefixItems": st.lists(children, max_size=2),
        "required": st.lists(st.sampled_from(["content", "a"]), max_size=2),
        "additionalProperties": st.booleans() | children,
        "const": _JSON_LEAVES, "default": _JSON_LEAVES,
    }
    assert set(typed) == SCHEMA_KEYS
    return st.lists(st.sampled_from(sorted(typed)), min_size=1, max_size=4, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: st.one_of(typed[k], typed[k], typed[k], _JSON) for k in keys}))


_NODES = st.recursive(_node(st.just({"type": "string"})), _node, max_leaves=6)


@given(_NODES, st.sampled_from(["", "<t>x</t> hi", '{"a": 1}', "(a)(b)"]))
def test_a_malformed_schema_fails_with_a_grammar_parse_error_never_a_crash(schema, text):
    try:
        grammar = legacy_grammar(schema)
    except TemplateError as e:  # at load, naming the node and key
        assert e.path.startswith("(root)") and e.code in ERROR_CODES
        return
    try:
        gp.parse_response(text, grammar)
    except gp.GrammarParseError as e:  # what transformers reports at parse time (ValueError / TypeError)
        assert e.code in ERROR_CODES and isinstance(e, (ValueError, TypeError))


@pytest.mark.parametrize("timeout", [None, 5.0])
@pytest.mark.parametrize("key, node_type", [("x-regex-iterator", "array"), ("x-regex-key-value", "object")])
def test_a_regex_after_named_groups_fails_with_a_type_error(timeout, key, node_type):
    """An x-regex with named groups leaves a dict, which a further regex cannot read: transformers' ``re`` raises
    TypeError there; so does recursive_parse (a SchemaTypeError), with the time limit or without it (the limited
    path's regex engine raised a bare TypeError before)."""
    schema = {"type": node_type, "x-regex": "(?P<content>.*)", key: "(?P<key>.*)=(?P<value>.*)"}
    with pytest.raises(gp.GrammarParseError) as raised:
        recursive_parse("a=b", schema, timeout=timeout)
    assert isinstance(raised.value, TypeError) and raised.value.code in ERROR_CODES
