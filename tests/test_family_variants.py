"""Family variants (issue 31, classes 6 to 8, and Muse Glimmer's namespaced names).

Class 6: text outside a message part is content unless a marker says otherwise, in every grammar whose output
is a series of headed parts (inkling, gpt_oss, beam, muse, muse_glimmer, kimi_k3, ernie4_5, cohere2): before
the first part, between two, and in an output with no markup. Inkling's <|content_invoke_tool_text|> part is a
call with ``{"text": body}`` as its arguments. Class 7: gpt-oss headers read as openai/harmony reads them (a
functions.* recipient on the analysis channel, the recipient in the role part, a content type on the final
channel). Class 8: Granite 3.3's <think>/<response>. Muse names: a doubled namespace resolves to the request's
tool, any other unknown name carries an ``errors`` entry.

Every row is checked one-shot, streamed in 1, 3 and 7-character chunks, and in lenient mode (the same message,
every character in a field, a reported error or a discarded span); then a property inserts stray text at every
part boundary of every golden sample of the class-6 grammars and checks it lands in content, nothing else moved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable
from goldens import goldens, parsed
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from strategies import chunkings, examples

#: The grammars whose output is a series of headed message parts (class 6 applies to each).
MESSAGE_PART_GRAMMARS = ("inkling", "gpt_oss", "beam", "muse", "muse_glimmer", "kimi_k3", "ernie4_5", "cohere2")

REASONING = ("reasoning_content", "thinking")
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
DOTTED = [*WEATHER, {"type": "function", "function": {"name": "weather.get", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
INKLING_PROMPT = "<|message_user|><|content_text|>Weather in Paris?<|end_message|><|message_model|>"
HARMONY_PROMPT = "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"
MUSE_PROMPT = "<|start|>user<|message|>Weather in Paris?<|eot|><|start|>assistant"
KIMI_PROMPT = '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'
COHERE_PROMPT = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
GRANITE_PROMPT = "<|start_of_role|>assistant<|end_of_role|>"


def call(name: str, arguments: dict[str, Any], errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if errors is not None:
        out["errors"] = errors
    return out


def message(**fields: Any) -> dict[str, Any]:
    return {"role": "assistant", **fields}


@dataclass(frozen=True)
class Row:
    grammar: str
    name: str
    text: str
    expected: dict[str, Any]
    prefix: str = ""
    tools: Any = None

    @property
    def id(self) -> str:
        return f"{self.grammar}-{self.name}"


def muse_call(name: str) -> str:
    return (f' to={name}<|message|><atem:function_calls>\n<atem:invoke name="{name}">\n'
            '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>')


def unknown(name: str, offered: list[str]) -> list[dict[str, str]]:
    return [{"code": "call.unknown_tool", "path": "$.function.name",
             "message": f"unknown tool {name!r}; offered: {offered}"}]


ROWS = [
    # --- class 6: text outside a part is content --------------------------------------------------------
    Row("inkling", "text_before_message",
        'Sure, let me check.<|message_model|>get_weather<|content_invoke_tool_json|>'
        '{"name":"get_weather","args":{"city":"SF"}}<|end_message|>',
        message(content="Sure, let me check.", tool_calls=[call("get_weather", {"city": "SF"})]), INKLING_PROMPT),
    Row("inkling", "text_between_messages",
        "<|content_text|>A.<|end_message|> Between. <|message_model|><|content_text|>B.<|end_message|>",
        message(content="A. Between. B."), INKLING_PROMPT),
    Row("inkling", "message_without_part",
        "<|content_thinking|>Plan.<|end_message|><|message_model|>Hello<|end_message|><|content_model_end_sampling|>",
        message(thinking="Plan.", content="Hello"), INKLING_PROMPT),
    Row("inkling", "no_markup", "Hello there.", message(content="Hello there."), INKLING_PROMPT),
    Row("inkling", "text_call_after_header", "web_search<|content_invoke_tool_text|>search the web<|end_message|>",
        message(tool_calls=[call("web_search", {"text": "search the web"})]), INKLING_PROMPT),
    Row("inkling", "text_call_in_later_message",
        "<|content_text|>One moment.<|end_message|><|message_model|>web_search<|content_invoke_tool_text|>"
        " Paris weather\n<|end_message|>",
        message(content="One moment.", tool_calls=[call("web_search", {"text": " Paris weather\n"})]), INKLING_PROMPT),
    Row("gpt_oss", "text_between_messages",
        "<|channel|>analysis<|message|>Easy.<|end|>One moment.<|start|>assistant<|channel|>final<|message|>"
        "It is sunny.<|return|>",
        message(thinking="Easy.", content="One moment.\n\nIt is sunny."), HARMONY_PROMPT),
    Row("gpt_oss", "no_markup", "I'm sorry, but I can't help with that.",
        message(content="I'm sorry, but I can't help with that."), HARMONY_PROMPT),
    Row("beam", "text_between_messages",
        "<|channel|>analysis<|message|>Easy.<|end|>One moment.<|start|>assistant<|channel|>final<|message|>"
        "It is sunny.<|return|>",
        message(thinking="Easy.", content="One moment.\n\nIt is sunny."), HARMONY_PROMPT),
    Row("muse", "text_between_messages",
        " to=self<|message|>Easy.<|eom|>One moment. <|start|>assistant to=user<|message|>It is sunny.<|eot|>",
        message(reasoning_content="Easy.", content="One moment.It is sunny."), MUSE_PROMPT),
    Row("muse_glimmer", "text_between_messages",
        " to=self<|message|>Easy.<|eom|>One moment. <|start|>assistant to=user<|message|>It is sunny.<|eot|>",
        message(reasoning_content="Easy.", content="One moment.It is sunny."), MUSE_PROMPT),
    Row("kimi_k3", "answer_without_response_channel", "Easy.<|close|>think<|sep|>It is sunny.<|close|>message<|sep|>",
        message(reasoning_content="Easy.", content="It is sunny."), KIMI_PROMPT),
    Row("kimi_k3", "text_after_response_channel",
        "Easy.<|close|>think<|sep|>\n<|open|>response<|sep|>It is sunny.<|close|>response<|sep|> Anything else?"
        "<|close|>message<|sep|>",
        message(reasoning_content="Easy.", content="It is sunny.\n\nAnything else?"), KIMI_PROMPT),
    Row("ernie4_5", "answer_without_response_block", "Easy.\n</think>\n\nIt is sunny.\n</s>",
        message(thinking="Easy.", content="It is sunny.")),
    Row("cohere2", "answer_without_response_block", "<|START_THINKING|>Easy.<|END_THINKING|>It is sunny.",
        message(thinking="Easy.", content="It is sunny."), COHERE_PROMPT),
    # --- class 7: gpt-oss headers as harmony reads them ---------------------------------------------------
    Row("gpt_oss", "call_on_analysis_channel",
        '<|channel|>analysis to=functions.get_weather <|constrain|>json<|message|>{"city":"SF"}<|call|>',
        message(tool_calls=[call("get_weather", {"city": "SF"})]), HARMONY_PROMPT),
    Row("gpt_oss", "call_on_analysis_channel_after_reasoning",
        '<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>analysis to=functions.get_weather'
        '<|constrain|>json<|message|>{"city":"SF"}<|call|>',
        message(thinking="Need it.", tool_calls=[call("get_weather", {"city": "SF"})]), HARMONY_PROMPT),
    Row("gpt_oss", "recipient_in_role_on_analysis",
        '<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant to=functions.get_weather<|channel|>analysis'
        ' <|constrain|>json<|message|>{"city":"SF"}<|call|>',
        message(thinking="Need it.", tool_calls=[call("get_weather", {"city": "SF"})]), HARMONY_PROMPT),
    Row("gpt_oss", "recipient_in_role_on_commentary",
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city":"SF"}<|call|>',
        message(tool_calls=[call("get_weather", {"city": "SF"})]), HARMONY_PROMPT),
    Row("gpt_oss", "structured_final",
        '<|channel|>final <|constrain|>json<|message|>{"items": ["eggs"]}<|return|>',
        message(content='{"items": ["eggs"]}'), HARMONY_PROMPT),
    Row("gpt_oss", "structured_final_without_space",
        '<|channel|>final<|constrain|>json<|message|>{"items": ["eggs"]}<|return|>',
        message(content='{"items": ["eggs"]}'), HARMONY_PROMPT),
    Row("gpt_oss", "preamble_with_content_type",
        "<|channel|>commentary json<|message|>Checking.<|end|>",
        message(content="Checking."), HARMONY_PROMPT),
    Row("gpt_oss", "builtin_tool_is_reasoning",
        '<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"x"}<|call|>',
        message(thinking='{"query":"x"}'), HARMONY_PROMPT),
    Row("gpt_oss", "reasoning_messages_join",
        "<|channel|>analysis<|message|>One.<|end|><|start|>assistant<|channel|>analysis<|message|>Two.<|end|>",
        message(thinking="One.\n\nTwo."), HARMONY_PROMPT),
    # --- class 8: Granite 3.3's <think> and <response> ----------------------------------------------------
    Row("granite", "think_response", "<think>Easy.</think>\n<response>\nIt is sunny.\n</response><|end_of_text|>",
        message(reasoning_content="Easy.", content="It is sunny."), GRANITE_PROMPT),
    Row("granite", "think_response_call",
        '<think>Need it.</think><response>Checking.</response><|tool_call|>[{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}]<|end_of_text|>',
        message(reasoning_content="Need it.", content="Checking.", tool_calls=[call("get_weather", {"city": "Paris"})]),
        GRANITE_PROMPT),
    Row("granite", "call_inside_response",
        '<think>Need it.</think><response>Checking.<|tool_call|>[{"name": "get_weather", '
        '"arguments": {"city": "Paris"}}]</response>',
        message(reasoning_content="Need it.", content="Checking.", tool_calls=[call("get_weather", {"city": "Paris"})]),
        GRANITE_PROMPT),
    Row("granite", "think_then_plain_text", "<think>Easy.</think>It is sunny.",
        message(reasoning_content="Easy.", content="It is sunny."), GRANITE_PROMPT),
    Row("granite", "response_cut_off", "<think>Easy.</think><response>It is sun",
        message(reasoning_content="Easy.", content="It is sun"), GRANITE_PROMPT),
    Row("granite", "thinking_cut_off", "<think>Still thinking about it",
        message(reasoning_content="Still thinking about it"), GRANITE_PROMPT),
    Row("granite", "text_markers_still_read", "Here is my thought process:\nEasy.\nHere is my response:\nIt is sunny.",
        message(reasoning_content="Easy.", content="It is sunny."), GRANITE_PROMPT),
    # --- Muse names: the request's name, or an errors entry ---------------------------------------------
    *[row for g in ("muse", "muse_glimmer") for row in (
        Row(g, "doubled_namespace", muse_call("get_weather.get_weather"),
            message(tool_calls=[call("get_weather", {"city": "Paris"})]), MUSE_PROMPT, WEATHER),
        Row(g, "namespaced_tool_kept", muse_call("weather.get"),
            message(tool_calls=[call("weather.get", {"city": "Paris"})]), MUSE_PROMPT, DOTTED),
        Row(g, "unknown_namespaced_name", muse_call("get_weather.forecast"),
            message(tool_calls=[call("get_weather.forecast", {"city": "Paris"},
                                     unknown("get_weather.forecast", ["get_weather"]))]), MUSE_PROMPT, WEATHER),
        Row(g, "no_tools_name_as_written", muse_call("get_weather.get_weather"),
            message(tool_calls=[call("get_weather.get_weather", {"city": "Paris"})]), MUSE_PROMPT),
    )],
]


def chunked(text: str, size: int) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]


def lenient(row: Row, chunks: list[str] | None = None, **options: Any) -> tuple[dict[str, Any], gp.ResponseParser]:
    parser = gp.ResponseParser(row.grammar, row.prefix, tools=row.tools, strict=False, **options)
    if chunks is None:
        return jsonable(parser.finalize(row.text)[0]), parser
    for chunk in chunks:
        parser.feed(chunk)
    return jsonable(parser.finalize()[0]), parser


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_variant_gives_the_message(row: Row) -> None:
    assert parsed(row.grammar, row.text, row.prefix, row.tools) == row.expected
    for size in (1, 3, 7):
        assert parsed(row.grammar, row.text, row.prefix, row.tools, chunked(row.text, size)) == row.expected, size


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_variant_loses_no_character_in_lenient_mode(row: Row) -> None:
    """Lenient mode gives the same message, and every character of the output is a field's text, a
    delimiter, or a discarded span."""
    got, parser = lenient(row, trace=True)
    assert got == row.expected
    covered = sorted((s["start"], s["end"]) for s in parser.spans if s["start"] >= 0)
    assert covered[0][0] == 0 and covered[-1][1] == len(row.text)
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:])), covered


def test_a_text_call_without_a_header_names_no_function() -> None:
    """<|content_invoke_tool_text|> with no header is a call without a name: strict mode says so
    (parse.tool_call), lenient mode keeps its text and reports it."""
    row = Row("inkling", "headerless", "<|content_invoke_tool_text|>search the web<|end_message|>", {}, INKLING_PROMPT)
    assert parsed(row.grammar, row.text, row.prefix, None) == {"error": {"type": "ParseError", "code": "parse.tool_call"}}
    for chunks in (None, chunked(row.text, 3)):
        got, _ = lenient(row, chunks)
        assert "search the web" in got["content"] and "tool_calls" not in got
        assert [e["code"] for e in got["parse_errors"]] == ["parse.tool_call"]


def sequential_ids() -> Any:
    n = iter(range(10**6))
    return lambda kind: f"{kind}_{next(n)}"


@pytest.mark.parametrize("grammar", ["muse", "muse_glimmer"])
def test_chat_completions_streams_the_resolved_name(grammar: str) -> None:
    """The name a Chat Completions client is sent is the request's, as in the message; an unknown name is
    reported once on the call. Streamed in 1, 3 and 7-character chunks, the deltas add up to the same call."""
    for written, name, errors in (("get_weather.get_weather", "get_weather", None),
                                  ("get_weather.forecast", "get_weather.forecast",
                                   unknown("get_weather.forecast", ["get_weather"]))):
        text = muse_call(written)
        msg, reason = chat_message(text, grammar, prefix=MUSE_PROMPT, tools=WEATHER, ids=sequential_ids())
        (got,) = msg["tool_calls"]
        assert got["function"]["name"] == name and got.get("errors") == errors and reason == "tool_calls"
        assert json.loads(got["function"]["arguments"]) == {"city": "Paris"}
        for size in (1, 3, 7):
            stream = ChatCompletionsStream(grammar, MUSE_PROMPT, tools=WEATHER, ids=sequential_ids())
            deltas = [d for piece in chunked(text, size) for d in stream.feed(piece)] + stream.finish()
            names = [c["function"]["name"] for d in deltas for c in d.get("tool_calls", []) if "name" in c["function"]]
            assert names == [name] and stream.message == msg, size


# ---------------------------------------------------------------------------- stray text at every boundary
STRAY = "Stray words here."


def squash(text: Any) -> str:
    return "".join(text.split()) if isinstance(text, str) else ""


def boundaries(grammar: gp.Grammar, sample: Any) -> list[int]:
    """Where a top-level reasoning or content part ends (after its close delimiter) in a golden output."""
    parser = gp.ResponseParser(grammar, sample.prefix, tools=sample.tools, trace=True)
    parser.finalize(sample.text)
    out = []
    for span in parser.spans:
        term = grammar.terminals.get(span.get("terminal", ""))
        region = term.region if term is not None else None
        if span["kind"] == "delimiter" and span["start"] >= 0 and term is not None and term.role == "close" \
                and region is not None and region.parent is None and region.field in ("content", *REASONING):
            out.append(span["end"])
    return out


def stray_cases() -> list[Any]:
    out = []
    for name in MESSAGE_PART_GRAMMARS:
        grammar = gp.load_grammar(name)
        for sample in goldens(name):
            if "error" in sample.expected:
                continue
            for at in boundaries(grammar, sample):
                out.append(pytest.param(name, sample, at, id=f"{name}-{sample.name}-{at}"))
    return out


def test_every_message_part_grammar_has_a_boundary_to_try() -> None:
    assert {p.values[0] for p in stray_cases()} == set(MESSAGE_PART_GRAMMARS)


@pytest.mark.parametrize(("name", "sample", "at"), stray_cases())
@settings(max_examples=examples(0.05))
@given(data=st.data())
def test_stray_text_after_a_part_is_content(name: str, sample: Any, at: int, data: st.DataObject) -> None:
    """Text the model writes right after a reasoning or content part ends is content: the other fields are
    unchanged, and the content is the old content with the stray words in it, one-shot and streamed."""
    text = sample.text[:at] + STRAY + sample.text[at:]
    got = parsed(name, text, sample.prefix, sample.tools)
    expected = parsed(name, sample.text, sample.prefix, sample.tools)  # (test_golden checks it is the golden's)
    for key in set(got) | set(expected):
        if key == "parse_errors":  # (their spans move with the inserted text)
            assert [e["code"] for e in got[key]] == [e["code"] for e in expected.get(key, [])]
        elif key != "content":
            assert got.get(key) == expected.get(key), key
    content = squash(got.get("content"))
    assert squash(STRAY) in content and content.replace(squash(STRAY), "", 1) == squash(expected.get("content"))
    chunks = data.draw(chunkings(text), label="chunks")
    assert parsed(name, text, sample.prefix, sample.tools, chunks) == got
