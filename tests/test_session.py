"""The public API around the session: prefixes, batches, tools, errors, and one-shot equivalence."""

from __future__ import annotations

import json
from pathlib import Path

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

import grammar_parse
import grammar_parse as gp

XML_TEMPLATE = {
    "start_anchor": "<|im_start|>assistant\n",
    "defaults": {"role": "assistant"},
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {
            "open_pattern": r"<tool_call>\s*<function=(?P<name>\w+)>", "close": "</tool_call>", "repeats": True,
            "content": "xml-inline",
            "content_args": {"tag_pattern": r"<parameter=(?P<key>\w+)>\s*(?P<value>.*?)\s*</parameter>"},
            "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
        },
        "content": {"close": "<|im_end|>"},
    },
}
CALL = "<tool_call><function=set_alarm><parameter=hour>7</parameter><parameter=loud>true</parameter></tool_call>"


def test_prefix_is_truncated_after_the_last_anchor_and_replayed():
    prefix = "<|im_start|>assistant\nold<|im_end|><|im_start|>user\nhi<|im_end|><|im_start|>assistant\n<think>\n"
    parser = gp.ResponseParser(XML_TEMPLATE, prefix=prefix)
    assert parser.initial_events == [{"type": "region_open", "field": "thinking"},
                                     {"type": "region_chunk", "field": "thinking", "text": "\n", "dirty": False}]
    parser.feed("plan</think>Done.")
    message, _ = parser.finalize()
    assert message == {"role": "assistant", "thinking": "plan", "content": "Done."}


def test_prefix_without_anchor_is_used_whole_and_said():
    with pytest.warns(gp.AnchorWarning, match="no start anchor") as caught:
        message = gp.parse_response("b</think>c", XML_TEMPLATE, prefix="<think>a ")
    assert message == {"role": "assistant", "thinking": "a b", "content": "c"}
    assert caught[0].message.code == "usage.anchor" and caught[0].filename == __file__  # (the caller's line)


def test_a_prefix_with_the_anchor_is_not_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gp.parse_response("c", XML_TEMPLATE, prefix="<|im_start|>assistant\n")["content"] == "c"


def test_batches_take_one_prefix_or_one_per_text():
    texts = ["<think>x</think>one", "two"]
    assert gp.parse_response(texts, XML_TEMPLATE, prefix="") == [
        {"role": "assistant", "thinking": "x", "content": "one"}, {"role": "assistant", "content": "two"}]
    with pytest.warns(gp.AnchorWarning):
        got = gp.parse_response(texts, XML_TEMPLATE, prefix=["", "<think>"])
    assert got[1] == {"role": "assistant", "thinking": "two"}
    with pytest.raises(gp.ArgumentError) as info:
        gp.parse_response(texts, XML_TEMPLATE, prefix=[""])
    assert info.value.code == "usage.batch" and isinstance(info.value, ValueError)


def test_tools_type_arguments_from_schemas_and_callables():
    schema = [{"type": "function", "function": {"name": "set_alarm", "parameters": {
        "type": "object", "properties": {"hour": {"type": "integer"}, "loud": {"type": "boolean"}}}}}]

    def set_alarm(hour: int, loud: bool = False) -> None:
        """Set an alarm."""

    for tools in (schema, [set_alarm]):
        message = gp.parse_response(CALL, XML_TEMPLATE, prefix="", tools=tools)
        assert message["tool_calls"][0]["function"]["arguments"] == {"hour": 7, "loud": True}
    untyped = gp.parse_response(CALL, XML_TEMPLATE, prefix="")
    assert untyped["tool_calls"][0]["function"]["arguments"] == {"hour": "7", "loud": "true"}


def test_streaming_types_arguments_in_region_close():
    parser = gp.ResponseParser(XML_TEMPLATE, prefix="", tools=[lambda_free_schema()])
    events = [e for chunk in (CALL[:30], CALL[30:]) for e in parser.feed(chunk)]
    close = [e for e in events if e["type"] == "region_close"]
    assert close[0]["value"]["function"]["arguments"]["hour"] == 7


def lambda_free_schema():
    return {"name": "set_alarm", "parameters": {"properties": {"hour": {"type": ["integer", "null"]}}}}


def test_invalid_json_raises_a_located_parse_error():
    with pytest.raises(gp.ParseError) as info:
        gp.parse_response("<think>t</think>ok <tool_call>{bad</tool_call>", "qwen3", prefix="")
    err = info.value
    assert isinstance(err, ValueError) and err.code == "parse.json"
    assert err.field == "tool_calls" and err.position == 19  # where its open delimiter <tool_call> starts
    assert "offset 19" in str(err)
    assert err.message_so_far == {"role": "assistant", "reasoning_content": "t"}  # content is still open
    assert "JSON" in str(err) and "allow_non_json" in str(err)


def test_undefined_placeholder_is_a_key_error():
    template = {"start_anchor": "A", "fields": {"x": {"open": "<x>", "close": "</x>", "transform": {"a": "{nope}"}}}}
    with pytest.raises(KeyError) as info:
        gp.parse_response("<x>1</x>", template, prefix="")
    assert isinstance(info.value, gp.PlaceholderError) and "nope" in str(info.value)


def test_missing_required_field():
    template = {"start_anchor": "A", "fields": {"answer": {"open": "<a>", "close": "</a>", "optional": False}}}
    with pytest.raises(gp.ParseError, match="answer") as info:
        gp.parse_response("nothing", template, prefix="")
    assert info.value.code == "parse.missing_field"


def test_finalize_with_text_equals_feed_then_finalize():
    text = "<think>a</think>b " + CALL + " c<|im_end|>"
    p1 = gp.ResponseParser(XML_TEMPLATE, prefix="")
    events = p1.feed(text)
    m1, final = p1.finalize()
    p2 = gp.ResponseParser(XML_TEMPLATE, prefix="")
    m2, events2 = p2.finalize(text)
    assert m1 == m2
    assert gp._engine.events.merge_chunks(events + final) == gp._engine.events.merge_chunks(events2)


def test_message_property_shows_closed_regions():
    parser = gp.ResponseParser(XML_TEMPLATE, prefix="")
    parser.feed("<think>a</think>b")
    assert parser.message == {"role": "assistant", "thinking": "a"}
    assert not parser.finalized


def test_grammar_argument_forms(tmp_path: Path):
    lark_file = tmp_path / "mine.lark"
    lark_file.write_text(gp.load_grammar("smollm3").lark_source)
    json_file = tmp_path / "tpl.json"
    json_file.write_text(json.dumps({"response_template": XML_TEMPLATE}))
    for template in ("smollm3", "SmolLM", lark_file, str(lark_file), gp.load_grammar("smollm3")):
        assert gp.parse_response("<think>a</think>b", template, prefix="") == {
            "role": "assistant", "thinking": "a", "content": "b"}
    assert gp.parse_response("x", str(json_file), prefix="") == {"role": "assistant", "content": "x"}


# ---------------------------------------------------------------------------- where an error is
ERRORS_AT = [  # (grammar, output with an error, its code)
    ("qwen3", "<think>a\nb</think>\nsee <tool_call>{bad json}</tool_call>", "parse.json"),
    ("qwen3", "line one\nline two <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>", "parse.json"),
    ("llama3_pythonic", "\n\n[f(a=1), g(b=]", "parse.content"),
]


def _line_column(text, offset):
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


@pytest.mark.parametrize("grammar, text, code", ERRORS_AT)
@given(cuts=st.lists(st.integers(0, 80), max_size=6))
def test_an_error_says_its_line_and_column_in_any_chunking(grammar, text, code, cuts):
    """Strict errors carry the line and column of their position, counted from the output's start, when
    the parser still holds that text (always, one-shot); ``context`` puts a caret under it."""
    with pytest.raises(grammar_parse.ParseError) as raised:
        grammar_parse.parse_response(text, grammar, prefix="")
    e = raised.value
    assert e.code == code and (e.line, e.column) == _line_column(text, e.position)
    line = text.split("\n")[e.line - 1]
    assert e.context(text).split("\n")[:2] == [line, " " * (e.column - 1) + "^"]
    parser = grammar_parse.ResponseParser(grammar, "")
    bounds = sorted({min(c, len(text)) for c in cuts})
    with pytest.raises(grammar_parse.ParseError) as raised:
        for a, b in zip([0, *bounds], [*bounds, len(text)]):
            parser.feed(text[a:b])
        parser.finalize()
    streamed = raised.value
    assert (streamed.code, streamed.position) == (e.code, e.position)
    assert streamed.line is None or (streamed.line, streamed.column) == (e.line, e.column)


def test_unexpected_input_has_one_code_in_both_modes_and_says_what_was_expected():
    from grammar_parse._engine.grammar import build_grammar

    grammar = build_grammar('start: A B\nA: "<a>"\nB: "<b>"\n')
    with pytest.raises(grammar_parse.ParseError) as raised:
        grammar_parse.parse_response("<a>\nx", grammar, prefix="")
    assert raised.value.code == "parse.unexpected" and raised.value.expected == ("B",)
    assert (raised.value.line, raised.value.column) == (1, 4)
    lenient = grammar_parse.parse_response("<a>\nx", grammar, prefix="", strict=False)
    assert [e["code"] for e in lenient["parse_errors"]] == ["parse.unexpected"]


def _spans_without_trace():
    return gp.ResponseParser("qwen3", "").spans


def _message_before_finish():
    from grammar_parse.adapters.chat_completions import ChatCompletionsStream

    return ChatCompletionsStream("qwen3", "").message


def _unknown_schema():
    from grammar_parse.adapters.lmsp import schema_validator

    return schema_validator("no-such-schema")


@pytest.mark.parametrize("call, code, builtin", [
    (_spans_without_trace, "usage.no_trace", RuntimeError),
    (_message_before_finish, "usage.not_finished", RuntimeError),
    (_unknown_schema, "usage.schema", KeyError),
])
def test_api_misuse_raises_errors_of_the_hierarchy(call, code, builtin):
    """Every error the package raises is a GrammarParseError with a code and a hint, and still the built-in
    type it raised before (RuntimeError, KeyError), so existing handlers keep working."""
    from grammar_parse.errors import ERROR_CODES

    with pytest.raises(gp.GrammarParseError) as raised:
        call()
    assert raised.value.code == code and code in ERROR_CODES and raised.value.hint
    assert isinstance(raised.value, builtin)


def _nested(depth: int) -> str:
    return '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * depth + "]" * depth + "}}</tool_call>"


@pytest.mark.parametrize("limit", [8, 256, 600])
@pytest.mark.parametrize("chunk", [0, 7])
def test_the_json_depth_limit_is_a_parameter_of_the_parser(limit, chunk):
    """``max_json_depth`` bounds JSON nesting for that parser only (no global to mutate): at the limit the
    call parses, one level past it is a recorded ``parse.json_depth``, and parsers side by side keep
    their own limits."""
    def parse(text, depth):
        parser = gp.ResponseParser("qwen3", "", strict=False, max_json_depth=depth)
        pieces = [text] if not chunk else [text[i:i + chunk] for i in range(0, len(text), chunk)]
        for piece in pieces[:-1]:
            parser.feed(piece)
        return parser.finalize(pieces[-1])[0]

    inside, past = _nested(limit - 2), _nested(limit - 1)  # (the call and its arguments are two levels)
    assert "parse_errors" not in parse(inside, limit)
    assert [e["code"] for e in parse(past, limit)["parse_errors"]] == ["parse.json_depth"]
    assert "parse_errors" not in parse(past, limit + 1)  # another parser, another limit


def test_the_adapters_stream_with_the_parsers_json_depth():
    from grammar_parse._engine.toolstream import ToolCallStreamer

    text = _nested(299)
    for depth, sent_whole in ((256, False), (400, True)):
        parser = gp.ResponseParser("qwen3", "", strict=False, max_json_depth=depth, extended_events=True)
        streamer = ToolCallStreamer(parser.grammar, max_json_depth=depth)
        deltas = streamer.feed(parser.feed(text)) + streamer.feed(parser.finalize()[1])
        sent = "".join(d.get("arguments", "") for d in deltas)
        assert (sent.count("[") == 299) is sent_whole, depth


def _prefixed_goldens() -> list[Any]:
    from goldens import all_goldens

    return [c for c in all_goldens() if c.prefix and "error" not in c.expected and c.grammar in gp.list_grammars()]


def test_a_parser_started_from_a_kept_replay_is_the_parser_that_replayed():
    """A prompt tail is replayed once per grammar and parser options; later parsers start from a copy of
    the state it left. They give the same initial events, events feed by feed and message as the parser
    that replayed it, and share nothing with it or each other (each run mutates its own frames)."""
    from conformance import jsonable

    cases = _prefixed_goldens()
    kept = 0
    for case in cases:
        grammar = gp.load_grammar(case.grammar)
        grammar.tables.shared.pop("replays", None)
        runs = []
        for _ in range(3):
            parser = gp.ResponseParser(grammar, case.prefix, tools=case.tools, extended_events=True, strict=False)
            events = list(parser.initial_events)
            for i in range(0, len(case.text), 3):
                events += parser.feed(case.text[i:i + 3])
            message, final = parser.finalize()
            runs.append(jsonable([message, events + final, parser.discarded_spans]))
        assert runs[0] == runs[1] == runs[2], (case.grammar, case.name)
        kept += bool(grammar.tables.shared.get("replays"))
    assert len(cases) > 50 and kept > len(cases) // 2  # (most prompt tails are kept; the rest replay each time)


def test_kept_replays_are_bounded_and_long_prompt_tails_are_not_kept():
    from grammar_parse._engine.session import MAX_REPLAY_CHARS, MAX_REPLAYS

    grammar = gp.load_grammar("qwen3")
    grammar.tables.shared.pop("replays", None)
    anchor = "<|im_start|>assistant\n"
    for i in range(MAX_REPLAYS + 40):
        message = gp.parse_response("b</think>c", grammar, prefix=f"{anchor}<think>a{i}")
        assert message["reasoning_content"] == f"a{i}b"  # (each tail its own replay)
    assert len(grammar.tables.shared["replays"]) == MAX_REPLAYS
    grammar.tables.shared.pop("replays", None)
    long_tail = "<think>" + "x" * MAX_REPLAY_CHARS
    assert gp.parse_response("</think>c", grammar, prefix=anchor + long_tail)["reasoning_content"] == "x" * MAX_REPLAY_CHARS
    assert not grammar.tables.shared.get("replays")


@pytest.mark.parametrize("name, head, tail", [
    ("deepseek_v3", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n",
     "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),   # (its close may start with a newline)
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n", "\n</parameter>\n</function>\n</tool_call>"),
])
def test_a_long_argument_streams_on_the_fast_path(name, head, tail, monkeypatch):
    """Inside a call, chunks that cannot start a live delimiter skip the scan, whatever the delimiters'
    first characters are (an optional prefix, a newline): the scans stay few however long the argument."""
    from grammar_parse._engine import session

    scans = []
    original = session.ResponseParser._process
    monkeypatch.setattr(session.ResponseParser, "_process",
                        lambda self, events, eos: (scans.append(eos), original(self, events, eos))[1])
    body = '{"a": "' + "word " * 4000 + '"}' if name == "deepseek_v3" else "word " * 4000
    text = head + body + tail
    parser = gp.ResponseParser(name, "")
    for i in range(0, len(text), 4):
        parser.feed(text[i:i + 4])
    message, _ = parser.finalize()
    assert len(scans) < 60  # (5,000 chunks)
    arguments = message["tool_calls"][0]["function"]["arguments"]
    assert arguments == {"a": "word " * 4000}  # (as written: only the template's newlines around it are markup)
