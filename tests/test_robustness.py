"""Reliability: lenient mode and its error channel, byte accounting, hostile templates and outputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse as gp
from grammar_parse.errors import ERROR_CODES
from grammar_parse._engine.content import parse_content

CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'


# ---------------------------------------------------------------------------- lenient mode
def test_lenient_keeps_text_that_names_no_call_as_content_and_reports_the_problem():
    text = "Hi.\n<tool_call>\n{bad json\n</tool_call>\n" + CALL + "<|im_end|>"
    with pytest.raises(gp.ParseError):
        gp.parse_response(text, "qwen3", prefix="")  # strict, as transformers
    message = gp.parse_response(text, "qwen3", prefix="", strict=False)
    # the broken region names no function: it is no call, and its text stays where it was written
    assert message["tool_calls"] == [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]
    assert message["content"] == "Hi.\n<tool_call>\n{bad json\n</tool_call>"
    (error,) = message["parse_errors"]
    assert error["code"] == "parse.json" and error["field"] == "tool_calls"
    start, end = error["span"]
    assert text[start:end].startswith("<tool_call>") and "{bad json" in text[start:end]


def test_lenient_errors_reach_the_stream_and_the_parser():
    parser = gp.ResponseParser("qwen3", "", strict=False)
    events = parser.feed("<tool_call>{nope</tool_call>")
    assert [e for e in events if e["type"] == "parse_error"][0]["code"] == "parse.json"
    message, _ = parser.finalize()
    assert parser.errors == message["parse_errors"] and len(parser.errors) == 1


def test_lenient_missing_required_field_is_reported():
    template = {"start_anchor": "A", "fields": {"answer": {"open": "<a>", "close": "</a>", "optional": False}}}
    message = gp.parse_response("nothing", template, prefix="", strict=False)
    assert message["parse_errors"][0]["code"] == "parse.missing_field"


def test_lenient_text_where_the_grammar_allows_none_is_discarded_and_reported(tmp_path):
    path = tmp_path / "strict.lark"
    path.write_text('//@ region answer {}\nstart: answer\nanswer: ANSWER_OPEN ANSWER_TEXT* ANSWER_CLOSE\n'
                    'ANSWER_OPEN: "<a>"\nANSWER_CLOSE: "</a>"\n%declare ANSWER_TEXT\n')
    with pytest.raises(gp.ParseError):
        gp.parse_response("junk<a>yes</a>more", str(path), prefix="")
    parser = gp.ResponseParser(str(path), "", strict=False)
    parser.feed("junk<a>yes</a>more")
    message, _ = parser.finalize()
    assert message["answer"] == "yes"
    assert parser.discarded_spans == [(0, 4), (14, 18)]
    assert {e["code"] for e in message["parse_errors"]} == {"parse.unexpected"}


def test_every_recorded_code_is_documented():
    parser = gp.ResponseParser("qwen3", "", strict=False)
    parser.feed("<tool_call>{x</tool_call><tool_call>" + "[" * 1000 + "</tool_call>")
    message, _ = parser.finalize()
    assert {e["code"] for e in message["parse_errors"]} == {"parse.json", "parse.json_depth"}
    assert all(e["code"] in ERROR_CODES for e in message["parse_errors"])


# ---------------------------------------------------------------------------- byte accounting
def account(parser: gp.ResponseParser, text: str) -> None:
    """Spans tile the output: every character is text of a field, a delimiter, or discarded."""
    spans = [s for s in parser.spans if s["end"] > 0]
    assert spans[0]["start"] == 0 and spans[-1]["end"] == len(text)
    for before, after in zip(spans, spans[1:]):
        assert before["end"] == after["start"], (before, after)
    discarded = [(s["start"], s["end"]) for s in spans if s["kind"] == "discarded"]
    merged: list[tuple[int, int]] = []
    for a, b in discarded:
        merged = merged[:-1] + [(merged[-1][0], b)] if merged and merged[-1][1] == a else merged + [(a, b)]
    assert merged == parser.discarded_spans


def test_byte_accounting_of_a_sample():
    text = "<think>plan</think>Hi " + CALL + " bye<|im_end|>\n<|endoftext|>"
    parser = gp.ResponseParser("qwen3", "", trace=True)
    for i in range(0, len(text), 3):
        parser.feed(text[i:i + 3])
    parser.finalize()
    account(parser, text)
    assert parser.discarded_spans == [(text.index("\n<|endoftext|>"), len(text))]


# ---------------------------------------------------------------------------- hostile templates
@pytest.mark.parametrize("pattern", [r"(a+)+b", r"<x>(\w+\s?)*</x>", r"(?:\d*)*;"])
def test_catastrophic_patterns_are_rejected_at_load(pattern):
    with pytest.raises(gp.TemplateError) as info:
        gp.compile_template({"start_anchor": "A", "fields": {"x": {"open_pattern": pattern, "close": "</x>"}}})
    assert info.value.code == "template.regex_backtracking" and info.value.path == "fields.x.open_pattern"
    with pytest.raises(gp.TemplateError) as info:
        gp.compile_template({"start_anchor": "A", "fields": {"x": {"open": "<x>", "close": "</x>", "content": "xml-inline",
                                                                   "content_args": {"tag_pattern": f"(?P<key>k){pattern}"}}}})
    assert info.value.path == "fields.x.content_args.tag_pattern"


def test_a_pattern_whose_linear_fallback_is_too_large_is_refused_at_load(tmp_path):
    """A pattern searched under a time limit whose counted runs give the linear matcher more than
    MAX_CHOICE_POINTS places to read at every character (1.3 s per KB of newlines here) fails at load, naming
    the field or the terminal; bounded runs (no time limit needed) load."""
    flood_prone = r'(?:\s{0,900};\s*|[ \t]{0,900}\n\s{0,900})(?=\{)'
    with pytest.raises(gp.TemplateError) as info:
        gp.compile_template({"start_anchor": "A", "fields": {"x": {"open_pattern": flood_prone, "close": "</x>"}}})
    assert info.value.code == "template.regex_size" and info.value.path == "fields.x.open_pattern"
    assert "choice points" in str(info.value)
    grammar = tmp_path / "g.lark"
    grammar.write_text('//@ grammar_parse 1\n//@ region content {"content": "text"}\n//@ region tool_calls {"content": "json"}\n'
                       "start: content? (tool_calls content?)*\ncontent: CONTENT_TEXT+\n"
                       "tool_calls: TOOL_CALLS_OPEN TOOL_CALLS_TEXT* TOOL_CALLS_CLOSE\n"
                       f"TOOL_CALLS_OPEN: /{flood_prone}/\nTOOL_CALLS_CLOSE: \"</x>\"\n%declare CONTENT_TEXT TOOL_CALLS_TEXT\n")
    with pytest.raises(gp.GrammarError) as caught:
        gp.load_grammar(str(grammar))
    assert caught.value.code == "grammar.regex_size" and "TOOL_CALLS_OPEN" in str(caught.value)
    grammar.write_text(grammar.read_text().replace(r"\s*", r"\s{0,900}"))
    gp.load_grammar(str(grammar))


def test_a_slow_pattern_hands_over_at_run_time(monkeypatch):
    """A cubic delimiter pattern past its limit is finished by the linear matcher: the same message
    one-shot and streamed, whenever the limit fires."""
    from grammar_parse._engine import delimiters

    monkeypatch.setattr(delimiters, "REGEX_TIMEOUT", 0.01)
    template = {"start_anchor": "A", "fields": {"x": {"open_pattern": r"<x>.*?(?:a|b).*?(?:a|b).*?!", "close": "</x>"},
                                                "content": {}}}
    never = "<x>" + "ab" * 10_000 + "?"
    opens = "<x>" + "ab" * 10_000 + "!inside</x>tail"
    for text, expected in ((never, {"content": never}), (opens, {"x": "inside", "content": "tail"})):
        assert gp.parse_response(text, template, prefix="") == expected
        p = gp.ResponseParser(template, "")
        p.feed(text[:7_001])
        assert p.finalize(text[7_001:])[0] == expected


def test_region_size_limit():
    with pytest.raises(gp.ParseError) as info:
        p = gp.ResponseParser("qwen3", "", max_region_chars=100)
        p.feed("<think>" + "x" * 200)
    assert info.value.code == "parse.region_too_large"
    p = gp.ResponseParser("qwen3", "", max_region_chars=100, strict=False)
    for _ in range(10):
        p.feed("<think>" if _ == 0 else "x" * 30)
    message, _ = p.finalize()
    assert len(message["reasoning_content"]) == 100
    assert message["parse_errors"][0]["code"] == "parse.region_too_large"


@pytest.mark.parametrize("size", [1, 3, 7, 64])
def test_region_size_limit_holds_for_any_chunking(size):
    """Small chunks of plain text take the session's fast path; the limit must hold there too."""
    text = "Hello " * 40 + "<|im_end|>"
    one_shot = gp.ResponseParser("qwen3", "", max_region_chars=100, strict=False).finalize(text)[0]
    assert len(one_shot["content"]) == 100 and one_shot["parse_errors"][0]["code"] == "parse.region_too_large"
    for strict in (False, True):
        p = gp.ResponseParser("qwen3", "", max_region_chars=100, strict=strict)
        try:
            for i in range(0, len(text), size):
                p.feed(text[i:i + size])
            message, _ = p.finalize()
        except gp.ParseError as e:
            assert strict and e.code == "parse.region_too_large"
        else:
            assert not strict and message == one_shot
            assert p.discarded_spans == [(100, len(text) - 10)]


def test_lenient_stream_after_an_unrecoverable_error_matches_one_shot(tmp_path):
    """After an error the rest is discarded; no stale fast path may route a later chunk into a region."""
    path = tmp_path / "branches.lark"
    path.write_text('//@ grammar_parse 1\n//@ region body {"content": "text"}\nstart: A body X | B body Y\n'
                    'body: BODY_OPEN BODY_TEXT*\nA: "a"\nB: "b"\nX: "x"\nY: "y"\nBODY_OPEN.1: "<"\n%declare BODY_TEXT\n')
    chunks = ["a<hello", " world", "y", "zzz"]
    one_shot = gp.ResponseParser(str(path), "", strict=False)
    expected, _ = one_shot.finalize("".join(chunks))
    streamed = gp.ResponseParser(str(path), "", strict=False)
    events = [e for c in chunks for e in streamed.feed(c)]
    message, _ = streamed.finalize()
    assert message == expected and streamed.discarded_spans == one_shot.discarded_spans == [(14, 17)]
    assert "".join(e["text"] for e in events if e["type"] == "region_chunk") == "hello world"


# ---------------------------------------------------------------------------- custom string quotes
QUOTES = [["<<", ">>"], ['<|"|>', '<|"|>'], ["'", "'"]]


def _quoted_reference(text: str, delims: list[list[str]]) -> Any:
    """The dialect as transformers rewrites it: a lazy regex per quote pair, then JSON."""
    import regex

    captured: list[str] = []

    def capture(m: Any) -> str:
        captured.append(m.group(1))
        return f"\x01{len(captured) - 1}\x02"

    for open_quote, close_quote in delims:
        text = regex.sub(regex.escape(open_quote) + "(.*?)" + regex.escape(close_quote), capture, text, flags=regex.DOTALL)
    for i, s in enumerate(captured):
        text = text.replace(f"\x01{i}\x02", json.dumps(s))
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return "not json"


@given(st.lists(st.sampled_from(['<<', '>>', '<|"|>', "'", "a", ",", "[", "]", '"', "1", " "]), max_size=24))
def test_string_delims_rewrite_as_the_lazy_regex_does(parts):
    text = "".join(parts)
    expected = _quoted_reference(text, QUOTES)
    try:
        got = parse_content(text, "json", {"string_delims": QUOTES})
    except gp.ParseError:
        got = "not json"
    assert got == expected


class _Scanned(str):
    """A text that counts the characters its ``find`` calls read (to the match's end, or to the end), and
    fails the test once they pass its length: read twice, it would be read n times."""

    read = 0

    def find(self, sub: str, start: Any = 0, end: Any = None) -> int:
        found = str.find(self, sub, start) if end is None else str.find(self, sub, start, end)
        self.read += (len(self) if found == -1 else found + len(sub)) - (start or 0)
        assert self.read <= len(self), f"more than {len(self)} characters read"
        return found


@pytest.mark.parametrize("text", [
    "[" + "<<x" * 200_000 + "]",                    # opens without a close: the regex retried every one
    "[" + ",".join(["<<x>>"] * 100_000) + "]",      # many strings: one replace per string
    "[" + ",".join(['<|"|>x<|"|>'] * 100_000) + "]",
])
def test_string_delims_cost_is_linear(text, monkeypatch):
    """Each quote pair's rewrite reads its text once, and the strings go back in one pass, however many
    (quadratic: about a minute for the first)."""
    from grammar_parse._engine.content import json as json_content

    hide, hidden = json_content._hide_strings, json_content._HIDDEN
    rewrites: list[tuple[int, int]] = []  # (characters, characters read) of each quote pair's rewrite
    strings: list[str] = []
    passes: list[int] = []  # characters of each pass that puts the strings back

    def counted_hide(text: str, open_quote: str, close_quote: str, captured: list[str]) -> str:
        scanned = _Scanned(text)
        out = hide(scanned, open_quote, close_quote, captured)
        rewrites.append((len(text), scanned.read))
        strings[:] = captured
        return out

    class CountedHidden:
        def sub(self, repl: Any, text: str) -> str:
            passes.append(len(text))
            return hidden.sub(repl, text)

    monkeypatch.setattr(json_content, "_hide_strings", counted_hide)
    monkeypatch.setattr(json_content, "_HIDDEN", CountedHidden())
    parse_content(text, "json", {"string_delims": QUOTES, "allow_non_json": True})
    assert len(rewrites) == len(QUOTES) and all(0 < read <= chars for chars, read in rewrites), rewrites
    assert len(passes) == (1 if strings else 0), passes


# ---------------------------------------------------------------------------- hostile outputs
@pytest.mark.parametrize("text", [
    "<tool_cal" * 50_000,                                   # near-delimiters
    "<think>" + "word " * 100_000,                          # an unterminated region
    "<tool_call>" + "[" * 100_000,                          # deep JSON, unterminated
    "Hi \ud800 there \x00 and \udfff<|im_end|>",            # lone surrogates and NUL
    "</think>" * 10_000 + "<tool_call>" * 10_000,           # delimiters out of place
])
@pytest.mark.parametrize("strict", [True, False])
def test_hostile_outputs_end_with_a_result_or_a_clear_error(text, strict):
    for chunks in ([text], [text[i:i + 4096] for i in range(0, len(text), 4096)]):
        parser = gp.ResponseParser("qwen3", "", strict=strict)
        try:
            for chunk in chunks:
                parser.feed(chunk)
            message, _ = parser.finalize()
        except gp.GrammarParseError as e:
            assert strict and e.code in ERROR_CODES
        else:
            assert isinstance(message, dict)
            json.dumps(message)  # serialisable, surrogates and all


def test_surrogates_survive_the_wire_formats():
    from grammar_parse.adapters.lmsp import ResponseStream, parse_sse, sse

    stream = ResponseStream("qwen3", "", ids=lambda kind: f"{kind}_1")
    events = stream.feed("Hi \ud800 there<|im_end|>") + stream.complete()
    wire = "".join(map(sse, events)).encode("utf-8")  # strict UTF-8: no lone surrogate reaches the wire
    back = parse_sse(wire.decode("utf-8"))
    assert back[-1]["event"] == "response.completed"
    assert "".join(e["data"]["delta"] for e in back if e["event"] == "response.output_text.delta") == "Hi \ud800 there"


# ---------------------------------------------------------------------------- lenient adapters
BROKEN_THEN_GOOD = ('<tool_call>{"name": "get_weather", "arguments": {"city": "Par</tool_call>'
                    '<tool_call>{"nam</tool_call>' + CALL + "Done.")


def test_lenient_chat_completions_keep_streamed_calls_and_dense_indexes():
    from grammar_parse.adapters.chat_completions import ChatCompletionsStream

    stream = ChatCompletionsStream("qwen3", "", strict=False, ids=lambda kind: f"{kind}_{kind}")
    deltas = []
    for i in range(0, len(BROKEN_THEN_GOOD), 3):
        deltas += stream.feed(BROKEN_THEN_GOOD[i:i + 3])
    deltas += stream.finish()
    indexes = [d["tool_calls"][0]["index"] for d in deltas if "tool_calls" in d]
    assert sorted(set(indexes)) == [0, 1]  # the call that never got a name sends nothing
    first, second = stream.message["tool_calls"]
    # the broken call's arguments: as much of the model's text as is JSON, closed (a strict parser reads it)
    assert first["function"] == {"name": "get_weather", "arguments": '{"city": "Par"}'}
    # why it did not parse, and (from the wire) that its arguments were closed
    assert [(e["path"], e["code"]) for e in first["errors"]] == [("$.function.arguments", "parse.json"),
                                                                ("$.function.arguments.city", "parse.arguments")]
    assert "errors" not in second
    assert second["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert [e["code"] for e in stream.message["parse_errors"]] == ["parse.json", "parse.json"]
    # the region that names no function is content, streamed as content
    assert stream.message["content"] == '<tool_call>{"nam</tool_call>Done.' and stream.finish_reason == "tool_calls"
    assert "".join(d.get("content", "") for d in deltas) == stream.message["content"]
    with pytest.raises(gp.ParseError):
        ChatCompletionsStream("qwen3", "").feed(BROKEN_THEN_GOOD)  # strict by default


def test_lenient_lmsp_stream_reports_parse_errors_and_completes():
    from grammar_parse.adapters.lmsp import ResponseStream, schema_validator

    counter = iter(range(1000))
    stream = ResponseStream("qwen3", "", ids=lambda kind: f"{kind}_{next(counter)}", strict=False)
    events = stream.feed(BROKEN_THEN_GOOD) + stream.complete()
    validator = schema_validator("event")
    for event in events:
        validator.validate(event)
    errors = [e["data"] for e in events if e["event"] == "response.parse_error"]
    # the broken call's region, the region that names no function, then (as the call's item is done) the
    # wire closing the broken call's arguments
    assert [(e["code"], e["field"], e["span"] is None) for e in errors] == [
        ("parse.json", "tool_calls", False), ("parse.json", "tool_calls", False), ("parse.arguments", "tool_calls", True)]
    start, end = errors[1]["span"]
    assert BROKEN_THEN_GOOD[start:end] == '<tool_call>{"nam</tool_call>'
    assert events[-1]["event"] == "response.completed"
    calls = [item for item in stream.output if item["type"] == "function_call"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("get_weather", '{"city": "Par"}'), ("f", '{"a": 1}')]
    strict = ResponseStream("qwen3", "", ids=lambda kind: f"{kind}_{next(counter)}")
    assert strict.feed(BROKEN_THEN_GOOD)[-1]["event"] == "response.failed"
