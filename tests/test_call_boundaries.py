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
from collections.abc import Iterator
from dataclasses import replace
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable, strict_equal
from grammar_parse._engine.delimiters import LiteralMatcher
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from grammar_parse.errors import REPORTED_IN_STRICT
from strategies import chunkings, examples
from test_broken_calls import account
from test_drift import (EXTRA_KEY, Sample, calls, golden, key_without_value, keyed_arguments, problems,
                        separated_calls, space_around_separator, spans)

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


# ---------------------------------------------------------------------------- text inside a call, around arguments
ARGUMENT_CALLS = [n for n in KEYED if any(r.made_of_components for r in gp.load_grammar(n).regions.values())]
# the XML-argument families whose calls vLLM's and SGLang's tests write literal markup and repeated keys into
NAMED_ARGUMENT_CALLS = {"qwen3_coder", "qwen3_5", "mimo", "seed_oss", "glm45", "glm47", "minimax_m2", "poolside_v1",
                        "deepseek_v32", "step3"}
STRAY = "\nsome words of no argument\n"


@cache
def first_argument(name: str) -> tuple[Sample, int, int, tuple[int, int], int] | None:
    """A golden sample without problems with a call made of its arguments, and its first keyed argument closed
    by a close of its own (not zero-width): where its opener starts, where it ends (the next argument's opener,
    or the call's close), its close's span, and the call's index."""
    grammar = gp.load_grammar(name)
    for sample in golden(name):
        if "parse_errors" in sample.expected:
            continue  # (a sample of another problem)
        index, start, close = -1, None, None
        for s in spans(grammar, sample):
            term = grammar.terminals[s["terminal"]] if s["kind"] == "delimiter" else None
            region = term.region if term is not None else None
            if term is None or region is None:
                continue
            if term.role == "open" and region.parent is None and region.field == "tool_calls":
                index, start, close = index + 1, None, None
            elif term.role == "open" and region.entry_key is not None:
                if start is not None and close is not None:
                    return sample, start, s["start"], close, index
                start, close = s["start"], None
            elif term.role == "close" and region.entry_key is not None and start is not None and s["end"] > s["start"]:
                close = (s["start"], s["end"])
            elif term.role == "close" and region.parent is None and region.field == "tool_calls" \
                    and start is not None and close is not None:
                return sample, start, s["start"], close, index
    return None


def rewritten(name: str, kind: str) -> tuple[Sample, int]:
    found = first_argument(name)
    assert found is not None, f"{name}: no golden call with a keyed argument closed by a close of its own"
    sample, start, end, close, index = found
    text = sample.text
    if kind == "close_again":
        at, insert = close[1], "\n" + text[close[0]:close[1]]
    else:
        at, insert = end, text[start:end] if kind == "twice" else STRAY
    return replace(sample, name=f"{sample.name}/{kind}", text=text[:at] + insert + text[at:]), index


def test_the_argument_call_grammars_are_covered() -> None:
    assert NAMED_ARGUMENT_CALLS <= set(ARGUMENT_CALLS)


@pytest.mark.parametrize("name", ARGUMENT_CALLS)
def test_an_argument_written_twice_keeps_the_last_and_says_so(name: str) -> None:
    """vLLM's and SGLang's parsers, and transformers' templates, keep the last value of a key written twice;
    so do we, and the call's errors and the message's parse_errors say the first was replaced, in both modes."""
    case, index = rewritten(name, "twice")
    message, parser = parse(name, case, strict=True)
    account(parser, case.text)
    call = message["tool_calls"][index]
    assert call["function"] == case.expected["tool_calls"][index]["function"]
    (error,) = [e for e in call["errors"] if e["code"] == "parse.duplicate_argument"]
    assert error["path"].startswith("$.function.arguments.")
    key = error["path"].removeprefix("$.function.arguments.")
    assert key in call["function"]["arguments"] and repr(key) in error["message"]
    assert [e["code"] for e in message["parse_errors"]] == ["parse.duplicate_argument"]
    assert strict_equal(parse(name, case, strict=False)[0], message), "lenient mode gives the same message"


@pytest.mark.parametrize("name", ARGUMENT_CALLS)
def test_text_between_arguments_is_reported_not_lost(name: str) -> None:
    """Text a call made of its arguments holds outside every argument (a literal close tag the model wrote
    inside a value ends the value early, and the rest falls between arguments): the arguments stay, and the
    call's errors and the message's parse_errors quote the text, in both modes."""
    case, index = rewritten(name, "stray")
    message, parser = parse(name, case, strict=True)
    account(parser, case.text)
    call = message["tool_calls"][index]
    assert call["function"] == case.expected["tool_calls"][index]["function"]
    assert [e["code"] for e in call["errors"]] == ["parse.stray_text"] and STRAY.strip() in call["errors"][0]["message"]
    (entry,) = message["parse_errors"]
    assert entry["code"] == "parse.stray_text" and STRAY in case.text[entry["span"][0]:entry["span"][1]]
    assert strict_equal(parse(name, case, strict=False)[0], message), "lenient mode gives the same message"


@pytest.mark.parametrize("name", ARGUMENT_CALLS)
def test_an_argument_close_written_again_is_markup(name: str) -> None:
    """Qwen3.6 writes </parameter> twice (llama.cpp #24807): an argument's close again is markup, the message
    the golden's."""
    case, _ = rewritten(name, "close_again")
    for strict in (True, False):
        message, parser = parse(name, case, strict=strict)
        account(parser, case.text)
        assert strict_equal(message, jsonable(case.expected)), message


@pytest.mark.parametrize("name", ARGUMENT_CALLS)
@settings(max_examples=examples(0.1))
@given(data=st.data())
def test_text_around_arguments_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    case, _ = rewritten(name, data.draw(st.sampled_from(["twice", "stray", "close_again"]), label="kind"))
    strict = data.draw(st.booleans(), label="strict")
    whole = parse(name, case, strict)[0]
    chunks = data.draw(chunkings(case.text), label="chunks")
    assert strict_equal(parse(name, case, strict, chunks)[0], whole)


# ---------------------------------------------------------------------------- text in a call section
@cache
def in_section(name: str) -> tuple[Sample, tuple[int, int]] | None:
    """A golden sample without problems whose calls sit in a call section (a call region with a wrapper rule:
    ``BEGIN (tool_calls | UNCLAIMED)* END``), rewritten with STRAY right after the section's first delimiter;
    and where STRAY, stripped, stands in the rewrite."""
    grammar = gp.load_grammar(name)
    wrapped = {rule for rule, layout in grammar.format.calls.items() if layout.wrapper is not None}
    if not any(any(t.role == "unclaimed" for t in (info.text, *info.text_candidates) if t is not None)
               and any(t.role == "open" and t.region is not None and t.region.rule in wrapped for t in info.watch)
               for info in grammar.tables.states.values()):
        return None  # (no section takes text outside its calls: llama3_json's <|python_tag|> takes calls only)
    begins = {grammar.format.calls[rule].wrapper[0] for rule in wrapped}  # type: ignore[index]
    for sample in golden(name):
        if "parse_errors" in sample.expected or not sample.expected.get("tool_calls"):
            continue
        at = next((s["end"] for s in spans(grammar, sample) if s["kind"] == "delimiter" and s["terminal"] in begins
                   and s["end"] > s["start"]), None)
        if at is not None:
            text = sample.text[:at] + STRAY + sample.text[at:]
            start = at + STRAY.index(STRAY.strip())
            return replace(sample, text=text), (start, start + len(STRAY.strip()))
    return None


SECTIONED = [n for n in GRAMMARS if in_section(n) is not None]
# the families whose sections the peers' tests (vLLM, SGLang, Ollama) write broken calls into
NAMED_SECTIONED = {"kimi_k2", "deepseek_v3", "deepseek_v31", "hunyuan_v3", "minimax_m2", "step3", "dots", "plamo3",
                   "gigachat35"}


def test_the_call_section_grammars_are_covered() -> None:
    assert NAMED_SECTIONED <= set(SECTIONED), sorted(NAMED_SECTIONED - set(SECTIONED))


@pytest.mark.parametrize("name", SECTIONED)
def test_text_in_a_call_section_outside_every_call_is_reported_not_lost(name: str) -> None:
    """Text a call section holds outside every call (a call written wrong: kimi_k2's without its arguments
    marker, minimax_m2's ``<invoke get_weather>``) is dropped, as the grammars' headers say, and the message's
    parse_errors quote it over its span, in both modes; the calls are the golden's."""
    found = in_section(name)
    assert found is not None
    case, (start, end) = found
    message, parser = parse(name, case, strict=True)
    account(parser, case.text)
    assert message.get("tool_calls") == case.expected["tool_calls"]
    (entry,) = message["parse_errors"]
    assert entry["code"] == "parse.stray_text" and entry["span"] == [start, end], entry
    assert repr(STRAY.strip()) in entry["message"]
    assert strict_equal(parse(name, case, strict=False)[0], message), "lenient mode gives the same message"


@pytest.mark.parametrize("name", SECTIONED)
def test_whitespace_in_a_call_section_is_not_reported(name: str) -> None:
    found = in_section(name)
    assert found is not None
    case, _ = found
    case = replace(case, text=case.text.replace(STRAY, " \n\t"))
    message, parser = parse(name, case, strict=True)
    account(parser, case.text)
    assert "parse_errors" not in message and message.get("tool_calls") == case.expected["tool_calls"]


@pytest.mark.parametrize("name", SECTIONED)
@settings(max_examples=examples(0.1))
@given(data=st.data())
def test_text_in_a_call_section_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    """The problem is decided over the whole run of text: the same span and quote however it was chunked (a
    chunk of whitespace only, the words split), with its ``parse_error`` event."""
    found = in_section(name)
    assert found is not None
    case = found[0]
    strict = data.draw(st.booleans(), label="strict")
    whole = parse(name, case, strict)[0]
    chunks = data.draw(chunkings(case.text), label="chunks")
    streamed, parser = parse(name, case, strict, chunks)
    assert strict_equal(streamed, whole)


# ---------------------------------------------------------------------------- a call read from tags
M = "]<]minimax[>["  # (MiniMax-M3's namespace marker, before every tag)
M3_PROMPT = "]~b]ai\n"


def m3_call(body: str) -> str:
    return f"{M}<tool_call>\n{M}<invoke name=\"get_weather\">\n{body}\n{M}</invoke>\n{M}</tool_call>[e~["


M3_CASES = [
    # (what, the invoke's body, the arguments kept, the text reported (None: nothing))
    ("a wrong close tag", f"{M}<city>Paris{M}</town>", {}, f"{M}<city>Paris{M}</town>"),
    ("a missing close tag before the next argument", f"{M}<city>Paris\n{M}<unit>c{M}</unit>", {},
     f"{M}<city>Paris\n{M}<unit>c{M}</unit>"),
    ("words between arguments", f"{M}<city>Paris{M}</city>\nand then\n{M}<unit>c{M}</unit>",
     {"city": "Paris", "unit": "c"}, "and then"),
    ("a clean call", f"{M}<city>Paris{M}</city>\n{M}<unit>c{M}</unit>", {"city": "Paris", "unit": "c"}, None),
]


@pytest.mark.parametrize("what, body, arguments, stray", M3_CASES, ids=[c[0] for c in M3_CASES])
def test_text_in_a_call_read_from_tags_is_reported_not_lost(what: str, body: str, arguments: dict[str, Any],
                                                             stray: str | None) -> None:
    """MiniMax-M3 reads a call's arguments from tags (xml-inline): a value whose close tag is wrong or missing
    leaves its element open, and its text (and the arguments inside it) fell out of the call with no trace.
    Now the call's errors and the message's parse_errors quote it (report_stray), in both modes, streamed
    as one-shot; the arguments that did close are kept."""
    text = m3_call(body)
    case = Sample("minimax_m3", text, M3_PROMPT, None, {})
    message, parser = parse("minimax_m3", case, strict=True)
    account(parser, text)
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": arguments}
    if stray is None:
        assert "errors" not in call and "parse_errors" not in message
    else:
        assert [e["code"] for e in call["errors"]] == ["parse.stray_text"]
        assert repr(stray) in call["errors"][0]["message"]
        (entry,) = message["parse_errors"]
        start, end = entry["span"]
        assert entry["code"] == "parse.stray_text" and stray in text[start:end]
    assert strict_equal(parse("minimax_m3", case, strict=False)[0], message), "lenient mode gives the same message"
    for size in (1, 3, 7):
        chunks = [text[i:i + size] for i in range(0, len(text), size)]
        assert strict_equal(parse("minimax_m3", case, strict=True, chunks=chunks)[0], message)


def test_a_call_read_from_tags_cut_off_is_not_reported() -> None:
    """The output's end inside an argument: the call is unfinished, not wrong (its open element is left out)."""
    text = m3_call(f"{M}<city>Paris{M}</city>\n{M}<unit>cel").split(f"\n{M}</invoke>")[0]
    message, _ = parse("minimax_m3", Sample("minimax_m3", text, M3_PROMPT, None, {}), strict=True)
    assert message["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"} and "parse_errors" not in message


def test_a_template_reading_tags_ignores_text_outside_them_as_transformers_does() -> None:
    template = {"start_anchor": "<|assistant|>", "fields": {"content": {}, "tool_calls": {
        "open": "<call>", "close": "</call>", "content": "xml-inline", "repeats": True,
        "content_args": {"tag_pattern": r"<(?P<key>\w+)>(?P<value>.*?)</(?P=key)>"}}}}
    message = gp.parse_response("<call><a>1</a> words <b>2</b></call>", gp.compile_template(template),
                                prefix="<|assistant|>")
    assert message["tool_calls"] == [{"a": "1", "b": "2"}] and "parse_errors" not in message


def reported_outputs(name: str) -> list[tuple[str, str, Any]]:
    """(output, prompt, tools) of this module's rewrites whose text is reported (for the differential tests)."""
    out = []
    if (sectioned := in_section(name)) is not None:
        out.append((sectioned[0].text, sectioned[0].prefix, sectioned[0].tools))
    if name == "minimax_m3":
        out += [(m3_call(body), M3_PROMPT, None) for _what, body, _arguments, _stray in M3_CASES]
    return out


def with_delimiters(name: str, calls: int) -> Iterator[tuple[Sample, list[tuple[dict[str, Any], Any]]]]:
    """Each golden sample without problems that has ``calls`` calls or more, with its delimiters' spans and
    terminals, in the output's order."""
    grammar = gp.load_grammar(name)
    for sample in golden(name):
        if "parse_errors" in sample.expected or len(sample.expected.get("tool_calls") or []) < calls:
            continue
        yield sample, [(s, grammar.terminals[s["terminal"]]) for s in spans(grammar, sample) if s["kind"] == "delimiter"]


def closes_before_the_next_call(found: list[tuple[dict[str, Any], Any]]) -> Iterator[int]:
    """Where in a sample's delimiters (:func:`with_delimiters`) a call's own close comes right before the opener of
    the same call region (the next call)."""
    for i, ((close, term), (_opener, next_term)) in enumerate(zip(found, found[1:])):
        region = term.region
        if term.role == "close" and next_term.role == "open" and region is not None and next_term.region is region \
                and region.field == "tool_calls" and region.parent is None and close["end"] > close["start"]:
            yield i


# ---------------------------------------------------------------------------- a call left unclosed before the next
#: The call shapes whose region holds one call read as JSON (a region's broken body is salvaged call by call).
JSON_CALL_MODES = ("json_key", "json_body")


@cache
def unclosed_pairs(name: str) -> tuple[Sample, Sample | None] | None:
    """A golden sample without problems with two calls in regions of their own, one right after the other,
    rewritten with the first call's close left out (``<tool_call>{a}<tool_call>{b}</tool_call>``, as Qwen2.5
    writes it at times) and, where the call object names its function (not the opener), with both calls in one
    block (``<tool_call>{a}{b}</tool_call>``; else None)."""
    for sample, found in with_delimiters(name, 2):
        for i in closes_before_the_next_call(found):
            (close, term), (opener, _) = found[i], found[i + 1]
            if term.region.shape is not None and term.region.shape.mode in JSON_CALL_MODES:
                text = sample.text
                unclosed = text[:close["start"]] + text[close["end"]:]
                one_block = text[:close["start"]] + "\n" + text[opener["end"]:]
                return replace(sample, text=unclosed), \
                    replace(sample, text=one_block) if term.region.shape.mode == "json_key" else None
    return None


UNCLOSED = [n for n in GRAMMARS if unclosed_pairs(n) is not None]
NAMED_UNCLOSED = {"qwen3", "smollm3", "granite4", "internlm2", "longcat", "kimi_k2", "deepseek_v3", "deepseek_v31"}


def test_the_unclosed_call_grammars_are_covered() -> None:
    assert NAMED_UNCLOSED <= set(UNCLOSED), sorted(NAMED_UNCLOSED - set(UNCLOSED))


@pytest.mark.parametrize("name, rewrite", [(n, r) for n in UNCLOSED for r, case in zip(("unclosed", "one_block"),
                                                                                   unclosed_pairs(n) or ()) if case])
def test_a_call_left_unclosed_before_the_next_is_still_two_calls(name: str, rewrite: str) -> None:
    """Lenient mode: the region that holds both calls does not parse as one call; each call in it is a call of
    its own (the second was lost to the content as text, markup and all), the region reported; streamed on the
    Chat Completions wire the same. Strict mode refuses the region, as before."""
    pair = unclosed_pairs(name)
    assert pair is not None
    case = pair[0] if rewrite == "unclosed" else pair[1]
    assert case is not None
    message, parser = parse(name, case, strict=False)
    account(parser, case.text)
    want = [call["function"] for call in jsonable(case.expected)["tool_calls"]]
    assert [call["function"] for call in message["tool_calls"]] == want
    assert message.get("content") == jsonable(case.expected).get("content"), "no call's text is left as content"
    assert [e["code"] for e in message["parse_errors"]] in (["parse.json"], ["parse.transform"])
    stream = ChatCompletionsStream(name, case.prefix, tools=case.tools, strict=False)
    for i in range(0, len(case.text), 5):
        stream.feed(case.text[i:i + 5])
    stream.finish()
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in stream.message["tool_calls"]] \
        == [(f["name"], f["arguments"]) for f in want]
    with pytest.raises(gp.GrammarParseError):
        parse(name, case, strict=True)


def test_a_flood_of_calls_in_one_broken_region_is_read_a_bounded_number_of_times(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call after the first is salvaged from the text left, which is read again: MAX_SALVAGED more at
    most, so a block holding a flood of call objects costs linear work; the calls past the bound are text."""
    from grammar_parse._engine import regions

    read = [0]
    salvage = regions.salvage_calls

    def counted(region: Any, body: str, *args: Any) -> Any:
        read[0] += len(body)
        return salvage(region, body, *args)
    monkeypatch.setattr(regions, "salvage_calls", counted)
    calls = 3 * regions.MAX_SALVAGED
    body = "\n".join('{"name": "f%d", "arguments": {}}' % i for i in range(calls))
    message = gp.parse_response(f"<tool_call>\n{body}\n</tool_call>", "qwen3", prefix="", strict=False)
    assert [c["function"]["name"] for c in message["tool_calls"]] == [f"f{i}" for i in range(regions.MAX_SALVAGED + 1)]
    assert message["content"].startswith('{"name": "f%d"' % (regions.MAX_SALVAGED + 1))  # (not lost: text)
    assert read[0] <= (regions.MAX_SALVAGED + 1) * len(body)


# ------------------------------------------------------------------ a call of arguments left unclosed before the next
@cache
def unclosed_component_calls(name: str) -> tuple[Sample, Sample | None] | None:
    """A golden sample without problems with two calls made of their arguments, one right after the other,
    rewritten with the first call's close left out (``<tool_call><function=a>...<tool_call><function=b>...``: the
    next call's opener ends the call) and, where its last argument's close comes right before it (whitespace
    between), with that close left out too (the argument keeps its value, as the next key's opener would end
    it; else None); None where the grammar has no such sample."""
    for sample, found in with_delimiters(name, 2):
        for i in closes_before_the_next_call(found):
            (close, term), text = found[i], sample.text
            if not term.region.made_of_components:
                continue
            unclosed = replace(sample, text=text[:close["start"]] + text[close["end"]:])
            argument, before = found[i - 1] if i else ({}, None)
            if before is None or before.role != "close" or before.region is None or before.region.parent is None \
                    or text[argument["end"]:close["start"]].strip():
                return unclosed, None
            return unclosed, replace(sample, text=text[:argument["start"]] + text[argument["end"]:close["start"]] +
                                     text[close["end"]:])
    return None


UNCLOSED_COMPONENT = [n for n in GRAMMARS if unclosed_component_calls(n) is not None]


def test_the_unclosed_component_call_grammars_are_covered() -> None:
    assert {"qwen3_coder", "qwen3_5", "mimo", "seed_oss", "step3", "hunyuan_v3", "deepseek_v32", "deepseek_v4",
            "deepseek_v41", "dots", "gigachat35", "glm45", "glm47", "iquest_q1", "k2_horizon", "kimi_k3", "ling3",
            "minimax_m2", "muse", "muse_glimmer", "poolside_v1"} <= set(UNCLOSED_COMPONENT)


@pytest.mark.parametrize("name", UNCLOSED_COMPONENT)
def test_a_call_of_arguments_left_unclosed_ends_at_the_next_call(name: str) -> None:
    """Both modes: the next call's opener ends the call whose close the model left out, wherever it stands (after
    an argument's close, or inside an argument it did not close either); the calls, the content and the problems
    are the sample's, every character accounted for."""
    cases = unclosed_component_calls(name)
    assert cases is not None
    for case, unclosed_argument in zip(cases, (False, True)):
        if case is None:
            continue
        want = jsonable(case.expected)
        for strict in (False, True):
            message, parser = parse(name, case, strict=strict)
            account(parser, case.text)
            if unclosed_argument:  # (the whitespace before the next call is the unclosed argument's text)
                message, want = stripped_values(message), stripped_values(want)
            assert message == want


def stripped_values(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with its calls' string arguments stripped of whitespace."""
    calls = [{**call, "function": {**call["function"], "arguments": {
        k: v.strip() if isinstance(v, str) else v for k, v in call["function"]["arguments"].items()}}}
        for call in message.get("tool_calls") or []]
    return {**message, "tool_calls": calls}


@pytest.mark.parametrize("name", UNCLOSED_COMPONENT)
@settings(max_examples=examples(0.1), deadline=None)
@given(data=st.data())
def test_a_call_of_arguments_left_unclosed_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    case = data.draw(st.sampled_from([c for c in unclosed_component_calls(name) or () if c is not None]))
    chunks = data.draw(chunkings(case.text))
    for strict in (False, True):
        assert parse(name, case, strict, chunks)[0] == parse(name, case, strict)[0]


# ---------------------------------------------------------------------------- a call the turn's end closes
@cache
def ended_by_turn(name: str) -> Sample | None:
    """A golden sample without problems whose last call is followed by the end of turn (after its close and any
    section end, whitespace between), rewritten with the call's close and what follows it up to the end of turn
    left out (``<tool_call>{...}<|im_end|>``), else None."""
    for sample, found in with_delimiters(name, 1):
        for i, (close, term) in enumerate(found):
            region = term.region
            if term.role != "close" or region is None or region.field != "tool_calls" or region.parent is not None \
                    or close["end"] == close["start"]:
                continue
            j = i + 1  # (past the section's end and the like: no opener, nothing but whitespace between them)
            while j < len(found) and found[j][1].name != "END_OF_TURN" and found[j][1].role != "open" \
                    and not sample.text[found[j - 1][0]["end"]:found[j][0]["start"]].strip():
                j += 1
            if j < len(found) and found[j][1].name == "END_OF_TURN" \
                    and not sample.text[found[j - 1][0]["end"]:found[j][0]["start"]].strip():
                return replace(sample, text=sample.text[:close["start"]] + sample.text[found[j][0]["start"]:])
    return None


ENDED_BY_TURN = [n for n in GRAMMARS if ended_by_turn(n) is not None]


def test_the_grammars_with_calls_the_turn_may_end_are_covered() -> None:
    assert {"qwen3", "kimi_k2", "deepseek_v3", "deepseek_v31", "qwen3_coder", "minimax_m2", "glm47", "smollm3",
            "granite4", "lfm2", "olmo3", "cohere2", "minimax_m1", "plamo3"} <= set(ENDED_BY_TURN)


@pytest.mark.parametrize("name", ENDED_BY_TURN)
def test_a_call_the_turn_ends_before_its_close_is_the_call(name: str) -> None:
    """Both modes: the end-of-turn token ends the call whose close the model left out, as the output's end would
    (it was the call's text: lenient mode salvaged the call and put the token in the content, strict mode raised);
    the message is the sample's, every character accounted for."""
    case = ended_by_turn(name)
    assert case is not None
    for strict in (False, True):
        message, parser = parse(name, case, strict=strict)
        account(parser, case.text)
        assert message == jsonable(case.expected)


@pytest.mark.parametrize("name", ENDED_BY_TURN)
@settings(max_examples=examples(0.1), deadline=None)
@given(data=st.data())
def test_a_call_the_turn_ends_streams_as_one_shot(name: str, data: st.DataObject) -> None:
    case = ended_by_turn(name)
    assert case is not None
    chunks = data.draw(chunkings(case.text))
    for strict in (False, True):
        assert parse(name, case, strict, chunks)[0] == parse(name, case, strict)[0]


@pytest.mark.parametrize("name", UNCLOSED_COMPONENT)
def test_a_value_that_mentions_the_call_opener_stays_the_value(name: str) -> None:
    """Only the next call's whole opener ends a call left unclosed: the opener's first literal text written in an
    argument's value (``<tool_call>`` in prose about the format) is the value's text, in both modes."""
    found = first_argument(name)
    if found is None:
        pytest.skip("no golden call with a keyed argument closed by a close of its own")
    sample, _start, _end, close, index = found
    grammar = gp.load_grammar(name)
    layout = next(iter(grammar.format.calls.values()))
    heads = [h for o in layout.openers for h in (grammar.terminals[o].matcher.heads or ())]
    assert heads, "the call's opener starts with literal text"
    mention = f" ({heads[0]} is how a call starts) "
    case = replace(sample, text=sample.text[:close[0]] + mention + sample.text[close[0]:])
    for strict in (False, True):
        message, parser = parse(name, case, strict=strict)
        account(parser, case.text)
        assert len(message["tool_calls"]) == len(sample.expected["tool_calls"])
        assert "parse_errors" not in message
        assert any(mention.strip() in str(v) for v in message["tool_calls"][index]["function"]["arguments"].values())


# ---------------------------------------------------------------------------- any call whose close is left out
@cache
def first_close_cut(name: str) -> Sample | None:
    """A golden sample without problems with two calls or more, rewritten with the first call's close left out
    (whatever follows it: the next call, a message header, the section's end), else None."""
    for sample, found in with_delimiters(name, 2):
        close = next((s for s, term in found if term.role == "close" and term.region is not None
                      and term.region.field == "tool_calls" and term.region.parent is None and s["end"] > s["start"]),
                     None)
        if close is not None:
            return replace(sample, text=sample.text[:close["start"]] + sample.text[close["end"]:])
    return None


FIRST_CLOSE_CUT = [n for n in GRAMMARS if first_close_cut(n) is not None]


@pytest.mark.parametrize("name", FIRST_CLOSE_CUT)
def test_a_call_whose_close_is_left_out_keeps_the_calls_after_it(name: str) -> None:
    """Lenient mode, every grammar: the first call's close left out, the message still has every call, named as
    the sample names them (the arguments of a call read as text may keep what follows it; lfm2's list left open
    before text and the next list is reported as parse.json, its calls kept and the text after them content)."""
    case = first_close_cut(name)
    assert case is not None
    message, parser = parse(name, case, strict=False)
    account(parser, case.text)
    assert [c["function"]["name"] for c in message.get("tool_calls") or []] == \
        [c["function"]["name"] for c in case.expected["tool_calls"]]
