"""Failures that today's parsers (vLLM, SGLang, Ollama, llama.cpp) show on real model output, each as a test
against our library, one-shot and streamed with any chunking.

A table of cases (grammar, the failure it guards against, output, prompt, expected message) is checked
under random chunkings; the failures that are about behaviour rather than one output have tests below.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse as gp
from conformance import jsonable, strict_equal
from grammar_parse.adapters.chat_completions import ChatCompletionsStream
from strategies import chunkings, examples

CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
HERMES = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
KIMI = ("<|tool_calls_section_begin|><|tool_call_begin|>{id}<|tool_call_argument_begin|>"
        '{{"city": "Paris"}}<|tool_call_end|><|tool_calls_section_end|>')
XML = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"

CASES: list[tuple[str, str, str, str, dict[str, Any]]] = [
    # (failure, grammar, output, prompt, expected)
    ("1 two calls in one delta", "qwen3", HERMES + HERMES.replace("Paris", "Oslo") + "<|im_end|>", "",
     {"role": "assistant", "tool_calls": [CALL, json.loads(json.dumps(CALL).replace("Paris", "Oslo"))]}),
    ("2 stream equals one-shot around calls", "qwen3_coder", "before " + XML + " after", "",
     {"role": "assistant", "content": "before  after", "tool_calls": [CALL]}),
    ("3 tool call inside think", "qwen3", "<think>Let me call " + HERMES + " now.</think>Done.", "",
     {"role": "assistant", "reasoning_content": "Let me call  now.", "content": "Done.", "tool_calls": [CALL]}),
    ("3 tool call inside prefilled think", "qwen3_5", "Need it.\n" + XML + "\n</think>\n\nDone.",
     "<|im_start|>assistant\n<think>\n",
     {"role": "assistant", "reasoning_content": "Need it.", "content": "Done.", "tool_calls": [CALL]}),
    ("4 prefilled think, no opener in output", "qwen3", "Reasoning here.</think>\n\nAnswer.<|im_end|>",
     "<|im_start|>assistant\n<think>\n",
     {"role": "assistant", "reasoning_content": "Reasoning here.", "content": "Answer."}),
    ("4 no-think output is content", "qwen3", "Just the answer.<|im_end|>", "<|im_start|>assistant\n",
     {"role": "assistant", "content": "Just the answer."}),
    ("4 disabled thinking pre-fills an empty block", "qwen3", "Answer.<|im_end|>",
     "<|im_start|>assistant\n<think>\n\n</think>\n\n", {"role": "assistant", "content": "Answer."}),
    ("8 parameterless call", "qwen3", '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', "",
     {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "get_time", "arguments": {}}}]}),
    ("10 GLM-4.7 drops the opening <arg_value>", "glm47",
     "<tool_call>get_weather<arg_key>city</arg_key>Paris</arg_value></tool_call>", "", {"role": "assistant", "tool_calls": [CALL]}),
    ("10 GLM-4.7 repeats </arg_key>", "glm47",
     "<tool_call>get_weather<arg_key>city</arg_key></arg_key><arg_value>Paris</arg_value></tool_call>", "",
     {"role": "assistant", "tool_calls": [CALL]}),
    ("10 Kimi id without punctuation", "kimi_k2", KIMI.format(id="functionsget_weather5"), "",
     {"role": "assistant", "tool_calls": [{"id": "functionsget_weather5", **CALL}]}),
    ("10 Kimi id sanitised by the client", "kimi_k2", KIMI.format(id="functions_get_weather_1"), "",
     {"role": "assistant", "tool_calls": [{"id": "functions_get_weather_1", **CALL}]}),
    ("10 gpt-oss answers without channel tokens", "gpt_oss", "I can't help with that.", "",
     {"role": "assistant", "content": "I can't help with that."}),
    ("10 Qwen3.6 duplicate </parameter>", "qwen3_5", XML.replace("</parameter>", "</parameter>\n</parameter>"), "",
     {"role": "assistant", "tool_calls": [CALL]}),
    ("10 nested JSON arguments", "hunyuan_a13b",
     '<answer><tool_calls>[{"name": "f", "arguments": {"a": {"b": [1, {"c": "]}"}]}}}]</tool_calls></answer>', "",
     {"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": {"b": [1, {"c": "]}"}]}}}}]}),
    ("12 prose mentioning markup stays content", "qwen3", "Wrap each call in <tool_call> tags.<|im_end|>", "",
     {"role": "assistant", "content": "Wrap each call in <tool_call> tags."}),
    ("13 stop tokens do not leak", "qwen3", "Answer.<|im_end|>\n<|endoftext|>", "",
     {"role": "assistant", "content": "Answer."}),
    ("14 text before, between and after calls", "qwen3",
     "First.\n" + HERMES + "\nSecond.\n" + HERMES + "\nThird.<|im_end|>", "",
     {"role": "assistant", "content": "First.\n\nSecond.\n\nThird.", "tool_calls": [CALL, CALL]}),
]


@cache
def one_shot(grammar: str, text: str, prefix: str) -> Any:
    """The one-shot message, parsed once per case (the examples vary only the chunking)."""
    return jsonable(gp.parse_response(text, grammar, prefix=prefix))


@pytest.mark.parametrize("failure, grammar, text, prefix, expected", CASES, ids=[c[0] for c in CASES])
@given(data=st.data())
def test_failure_case(failure, grammar, text, prefix, expected, data):
    assert strict_equal(one_shot(grammar, text, prefix), expected)
    parser = gp.ResponseParser(grammar, prefix)
    for chunk in data.draw(chunkings(text)):
        parser.feed(chunk)
    assert strict_equal(jsonable(parser.finalize()[0]), expected)


@settings(max_examples=examples(3))  # cheap: three times the profile's examples
@given(st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=400))
def test_1_multi_token_deltas_never_lose_arguments(sizes):
    """SGLang #31915: two parallel calls lost data in 71-91% of random 1-4 character splits."""
    text = HERMES + "\n" + HERMES.replace("Paris", "Oslo") + "<|im_end|>"
    stream = ChatCompletionsStream("qwen3", "", ids=lambda kind: kind)
    deltas, pos = [], 0
    for size in sizes * (len(text) // max(sum(sizes), 1) + 1):
        if pos >= len(text):
            break
        deltas += stream.feed(text[pos:pos + size])
        pos += size
    deltas += stream.finish()
    args = {}
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            args[call["index"]] = args.get(call["index"], "") + call["function"]["arguments"]
    assert [json.loads(a) for a in args.values()] == [{"city": "Paris"}, {"city": "Oslo"}]


@pytest.mark.parametrize("split", range(1, len("</think>")))
def test_5_split_delimiters_never_leak(split):
    text = "<think>Plan.</think>Answer."
    cut = text.index("</think>") + split
    parser = gp.ResponseParser("qwen3", "")
    events = parser.feed(text[:cut]) + parser.feed(text[cut:])
    message, final = parser.finalize()
    chunks = {e["field"]: "" for e in events + final if e["type"] == "region_chunk"}
    for e in events + final:
        if e["type"] == "region_chunk":
            chunks[e["field"]] += e["text"]
    assert chunks == {"reasoning_content": "Plan.", "content": "Answer."}
    assert message == {"role": "assistant", "reasoning_content": "Plan.", "content": "Answer."}


@settings(max_examples=examples(6))  # cheap, and it spreads its examples over every grammar
@given(st.sampled_from(sorted(gp.list_grammars())),
       st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.binary(max_size=60).map(
           lambda b: b.decode("utf-8", "replace")))
def test_6_unexpected_output_gives_a_message_or_a_parse_error_never_a_crash(name, text):
    try:
        gp.parse_response(text, name, prefix="")
    except gp.GrammarParseError:
        pass  # a documented error with a code and position; never an IndexError, KeyError, ...


def test_7_untyped_xml_values_typed_by_schema_and_strings_left_alone():
    tools = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {
        "offset": {"type": "integer"}, "ratio": {"type": "string"}}}}}]
    text = ("<tool_call>\n<function=read>\n<parameter=offset>\n130\n</parameter>\n<parameter=ratio>\n1.000001\n"
            "</parameter>\n</function>\n</tool_call>")
    message = gp.parse_response(text, "qwen3_coder", prefix="", tools=tools)
    assert message["tool_calls"][0]["function"]["arguments"] == {"offset": 130, "ratio": "1.000001"}


def test_11_per_chunk_work_does_not_grow_with_the_output(monkeypatch):
    """vLLM RFC #11522: parsers re-scan the whole output on every token. Here the held-back buffer stays
    small and the parser sees one token per region, however long the output."""
    from grammar_parse._engine import session

    fed = []
    original = session.feed
    monkeypatch.setattr(session, "feed", lambda table, stack, symbol, *rest: (
        fed.append(symbol), original(table, stack, symbol, *rest))[1])
    parser = gp.ResponseParser("qwen3", "")
    parser.feed("<think>")
    largest = 0
    for i in range(20_000):
        parser.feed(f"word{i % 10} ")
        largest = max(largest, len(parser._buf))
    parser.feed("</think>done")
    message, _ = parser.finalize()
    assert largest < 16
    assert "REASONING_CONTENT_CLOSE" in fed and len(fed) < 10  # (the count is of the real parser steps)
    assert message["reasoning_content"].startswith("word0 word1")


def test_9_truncation_keeps_the_message_and_reports_length():
    """SGLang #35565 (the message deleted when generation stops at a tool-call marker), vLLM #58228
    (finish_reason "tool_calls" hides "length"), exo PR #2184 (truncation reported as a 500)."""
    at_marker = ChatCompletionsStream("qwen3", "", ids=lambda kind: kind)
    at_marker.feed("Let me check the weather.\n<tool_call>\n")
    at_marker.finish(length=True)
    assert at_marker.message["content"].startswith("Let me check the weather.")
    assert at_marker.finish_reason == "length"

    mid_call = ChatCompletionsStream("qwen3", "", ids=lambda kind: kind, strict=False)
    deltas = mid_call.feed('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    deltas += mid_call.finish(length=True)
    (call,) = mid_call.message["tool_calls"]
    # the cut-off arguments are closed when the stream ends: a client's JSON parser reads them
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Pa"}'} and call["errors"]
    assert mid_call.message["content"] == "Checking."
    assert mid_call.message["parse_errors"][0]["code"] == "parse.json"
    assert mid_call.finish_reason == "length"
    streamed = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas if "tool_calls" in d)
    assert streamed == '{"city": "Pa"}'  # what the client holds is what the message says


def test_12_prose_mentioning_markup_streams_without_stalling():
    """club-3090 #72 / vLLM #22975: a literal <tool_call> in prose left the stream silent for a minute.
    Here the text after the would-be opener shows it is prose, and it streams on at once."""
    stream = ChatCompletionsStream("qwen3", "", ids=lambda kind: kind)
    sent = [d.get("content", "") for d in stream.feed("Wrap each call in <tool_call> tags")]
    assert "".join(sent) == "Wrap each call in <tool_call> tags"


def test_15_one_grammar_per_family_under_every_name():
    """GLM's glm45 vs glm4_moe confusion, paired reasoning/tool parsers: here one grammar covers both,
    and every alias loads the same grammar."""
    for name, aliases in gp.list_grammars().items():
        grammar = gp.load_grammar(name)
        assert all(gp.load_grammar(alias) is grammar for alias in aliases)
