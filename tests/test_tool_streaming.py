"""Tool calls streamed the way servers stream them, for every built-in format (its golden samples with
tool calls) and any chunking: the name comes first, argument fragments only append and join into the
final arguments string, whose JSON is the typed arguments; indices stay put; `{}` for no arguments; and
the real OpenAI client, accumulating the deltas, gets the one-shot message."""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import grammar_parse
from grammar_parse.adapters.chat_completions import ChatCompletionsStream, chat_message
from grammar_parse._engine.reading import JsonWalker
from grammar_parse._engine.tools import validate_call
from goldens import arguments_members
from strategies import chunkings, examples

GOLDEN = Path(__file__).resolve().parent / "golden"


def call_cases() -> list[tuple[str, Path]]:
    out = []
    for folder in sorted(GOLDEN.iterdir()):
        for path in sorted(folder.glob("*.json")):
            if path.name.endswith(".tools.json"):
                continue
            expected = json.loads(path.read_text(encoding="utf-8"))
            if expected.get("tool_calls") and "error" not in expected:
                out.append((folder.name, path.with_suffix(".txt")))
    return out


CASES = call_cases()
# Each of the ~420 samples gets this share of the profile's examples (5 by default, 370 deep): the
# samples already vary the format; the examples vary only where the chunks split. (8 each when there
# were ~290 samples: the total stays about the same as the samples grow.)
TOOL_CALL_SHARE = 0.17


def counter():
    n = iter(range(10**6))
    return lambda kind: f"{kind}_{next(n)}"


def stream(grammar: str, chunks: list[str], prefix: str, tools: Any) -> tuple[ChatCompletionsStream, list[dict]]:
    s = ChatCompletionsStream(grammar, prefix, tools=tools, ids=counter())
    deltas = []
    for c in chunks:
        deltas += s.feed(c)
    deltas += s.finish()
    return s, deltas


class Case(NamedTuple):
    """A golden sample with tool calls and what the chunking cannot change: its one-shot message."""

    text: str
    prefix: str
    tools: Any
    expected: dict[str, Any]
    one_shot: dict[str, Any]
    reason: str


@cache
def load_case(grammar: str, path: Path) -> Case:
    """Read and parse one-shot once per sample; the property test only varies the chunking."""
    prefix_file = path.with_name(path.stem + ".prefix.txt")
    tools_file = path.with_name(path.stem + ".tools.json")
    text = path.read_text(encoding="utf-8")
    prefix = prefix_file.read_text(encoding="utf-8") if prefix_file.exists() else ""
    tools = json.loads(tools_file.read_text(encoding="utf-8")) if tools_file.exists() else None
    one_shot, reason = chat_message(text, grammar, prefix=prefix, tools=tools, ids=counter())
    return Case(text, prefix, tools, json.loads(path.with_suffix(".json").read_text(encoding="utf-8")), one_shot, reason)


def test_there_are_tool_call_samples():
    assert len(CASES) >= 3


@pytest.mark.parametrize("grammar, path", CASES, ids=[f"{g}/{p.stem}" for g, p in CASES])
@settings(max_examples=examples(TOOL_CALL_SHARE))
@given(data=st.data())
def test_tool_call_deltas(grammar, path, data):
    text, prefix, tools, expected, one_shot, reason = load_case(grammar, path)
    chunks = data.draw(chunkings(text), label="chunks")
    s, deltas = stream(grammar, chunks, prefix, tools)
    seen_name: set[int] = set()
    fragments: dict[int, list[str]] = {}
    order: list[int] = []
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            index = call["index"]
            if "id" in call:
                assert index not in seen_name, "a call's head is sent once"
                assert call["function"]["name"] and call["type"] == "function"
                seen_name.add(index)
                order.append(index)
            assert index in seen_name, "the name arrives before any argument fragment"
            fragments.setdefault(index, []).append(call["function"]["arguments"])
    assert order == list(range(len(order))), "indices in order of appearance"
    message_calls = s.message["tool_calls"]
    assert len(message_calls) == len(expected["tool_calls"]) == len(order)
    for index, (got, want) in enumerate(zip(message_calls, expected["tool_calls"])):
        arguments = "".join(fragments[index])
        assert arguments == got["function"]["arguments"], "fragments join into the final string"
        assert json.loads(arguments) == want["function"].get("arguments", {}), "its JSON is the typed arguments"
        assert got["function"]["name"] == want["function"]["name"]
        if want.get("id"):
            assert got["id"] == want["id"], "a model-written id is kept"
        if not want["function"].get("arguments"):
            assert arguments == "{}"
    assert s.message == one_shot and s.finish_reason == reason == "tool_calls"
    openai = pytest.importorskip("openai")  # in the test extra
    assert accumulate(openai, json.dumps(deltas), s.finish_reason) == on_the_wire(one_shot)


def on_the_wire(message: dict[str, Any]) -> dict[str, Any]:
    """The message without what Chat Completions deltas do not carry: ``parse_errors`` and a call's
    ``errors``, which a problem strict mode reports gives (a key written without a value)."""
    out = {k: v for k, v in message.items() if k != "parse_errors"}
    if out.get("tool_calls"):
        out["tool_calls"] = [{k: v for k, v in call.items() if k != "errors"} for call in out["tool_calls"]]
    return out


@lru_cache(maxsize=4096)
def accumulate(openai: Any, deltas_json: str, finish_reason: str) -> dict[str, Any]:
    """What the OpenAI Python client assembles from the stream (the deltas as JSON text): validating each
    chunk and accumulating it is most of this test's cost, so a chunking that gives the same deltas as an
    earlier example is not sent through the client again."""
    from openai.lib.streaming.chat._completions import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

    deltas = json.loads(deltas_json)
    state = ChatCompletionStreamState()
    for i, delta in enumerate([*deltas, {}]):
        state.handle_chunk(ChatCompletionChunk.model_validate({
            "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason if i == len(deltas) else None}]}))
    message = state.get_final_completion().choices[0].message
    out: dict[str, Any] = {"role": "assistant", "content": message.content}
    for key, value in (message.model_extra or {}).items():
        if value is not None:
            out[key] = value
    if message.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.function.name,
                                                                           "arguments": c.function.arguments}}
                             for c in message.tool_calls]
    return out


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=12,
)


@given(JSON_VALUES, st.booleans(), st.data())
def test_json_walker_finds_the_exact_value_bytes_at_any_split(value, ascii_only, data):
    indent = data.draw(st.sampled_from([None, 1]))
    raw = json.dumps({"name": "f", "arguments": value}, ensure_ascii=ascii_only, indent=indent)
    spans: dict[str, tuple[int, int]] = {}

    class Listener:
        def on_key(self, depth, key, pos):
            self.key = key if depth == 1 else getattr(self, "key", None)

        def on_value_start(self, depth, pos):
            if depth == 1:
                spans[self.key] = (pos, -1)

        def on_value_end(self, depth, pos):
            if depth == 1:
                spans[self.key] = (spans[self.key][0], pos)

    walker = JsonWalker(Listener())
    for piece in data.draw(chunkings(raw)):
        walker.feed(piece)
    walker.finish()
    start, end = spans["arguments"]
    assert json.loads(raw[start:end]) == value
    if indent is None:
        assert raw[start:end] == json.dumps(value, ensure_ascii=ascii_only)  # exactly the value's own bytes


def test_validation_attaches_problems_instead_of_raising():
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}]
    text = ('<tool_call>\n{"name": "get_weather", "arguments": {"days": "x"}}\n</tool_call>'
            '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>')
    message, reason = chat_message(text, "qwen3", prefix="", tools=tools, ids=counter())
    first, second = message["tool_calls"]
    assert {e["path"] for e in first["errors"]} == {"$.function.arguments", "$.function.arguments.days"}
    assert second["errors"] == [{"code": "call.unknown_tool", "path": "$.function.name",
                                 "message": "unknown tool 'launch'; offered: ['get_weather']"}]
    assert reason == "tool_calls"


def test_truncation_is_reported_as_length():
    s = ChatCompletionsStream("qwen3", "", ids=counter())
    s.feed("<think>still thinking")
    s.finish(length=True)
    assert s.finish_reason == "length"
    assert s.message == {"role": "assistant", "content": None, "reasoning_content": "still thinking"}



CALL = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'


@pytest.mark.parametrize("text, knob, reason", [
    ("<think>still thinking", {"truncated": True}, "length"),
    ("<think>still thinking", {"length": True}, "length"),  # the former name, kept as an alias
    ("<think>still thinking", {"truncated": False}, "stop"),
    ("<think>still thinking", {}, "stop"),
    (CALL, {"truncated": True}, "length"),  # a call cut off at the limit: the limit is not hidden
    (CALL, {"length": True}, "length"),
    (CALL, {}, "tool_calls"),
])
def test_the_token_limit_knob_and_its_alias(text, knob, reason):
    s = ChatCompletionsStream("qwen3", "", ids=counter())
    s.feed(text)
    s.finish(**knob)
    assert s.finish_reason == reason
    message, one_shot_reason = chat_message(text, "qwen3", prefix="", ids=counter(), **knob)
    assert one_shot_reason == reason and message == s.message

def test_typed_values_stream_typed():
    tools = [{"name": "set", "parameters": {"properties": {"n": {"type": "integer"}, "s": {"type": "string"}}}}]
    text = '<tool_call>{"name": "set", "arguments": {"n": "7", "s": "7"}}</tool_call>'
    s, deltas = stream("qwen3", [text[i:i + 2] for i in range(0, len(text), 2)], "", tools)
    assert s.message["tool_calls"][0]["function"]["arguments"] == '{"n": 7, "s": "7"}'
    assert grammar_parse.parse_response(text, "qwen3", prefix="", tools=tools)["tool_calls"][0]["function"][
        "arguments"] == {"n": 7, "s": "7"}


@pytest.mark.parametrize("grammar, head, tail", [
    ("llama3_json", "<|python_tag|>", "<|eom_id|>"),
    ("internlm2", "<|action_start|><|plugin|>\n", "<|action_end|><|im_end|>"),
])
@pytest.mark.parametrize("key", ["parameters", "arguments"])
def test_alternative_argument_keys_stream_before_the_call_closes(grammar, head, tail, key):
    """`{content.parameters|content.arguments}`: whichever key the model writes streams as it arrives."""
    body = f'{{"name": "get_weather", "{key}": {{"city": "Paris", "days": 3}}}}'
    s = ChatCompletionsStream(grammar, "", ids=counter())
    early = s.feed(head + body[:-8])  # the call is still open
    fragments = "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in early if "tool_calls" in d)
    assert fragments.startswith('{"city": "Paris"')
    s.feed(body[-8:] + tail)
    s.finish()
    assert s.message["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris", "days": 3}'



def _xml_streamed(grammar: str) -> bool:
    return any(r.spec.content == "xml-inline" for r in grammar_parse.load_grammar(grammar).regions.values())


XML_CASES = [(g, p) for g, p in CASES if _xml_streamed(g)]


@pytest.mark.parametrize("grammar, path", XML_CASES, ids=[f"{g}/{p.stem}" for g, p in XML_CASES])
def test_xml_tag_scans_handed_over_stream_the_same(grammar, path, monkeypatch):
    """The xml-inline streamer's tag scans run under a limit; past it the linear matcher finishes them
    (complete and partial tags alike). With the limit at zero every scan is handed over, and the deltas
    still fold into the one-shot message."""
    from grammar_parse._engine import toolstream

    monkeypatch.setattr(toolstream, "search_budget", lambda chars: 0.0)
    text, prefix, tools, expected, one_shot, reason = load_case(grammar, path)
    for size in (1, 6):
        s, deltas = stream(grammar, [text[i:i + size] for i in range(0, len(text), size)], prefix, tools)
        assert s.message == one_shot
        for index, call in enumerate(one_shot["tool_calls"]):
            sent = "".join(d["function"]["arguments"] for delta in deltas for d in delta.get("tool_calls", [])
                           if d["index"] == index)
            assert sent == call["function"]["arguments"], size


def test_tool_schemas_are_checked_once_not_per_call(monkeypatch):
    """A stream with tools= checks each call against its tool's schema; the schema is checked and its
    validator built once per distinct schema (it cost 2.5-3 ms a call: 850 calls took 1.2 s in finish),
    and the problems are the ones validate_call gives for each call alone."""
    from grammar_parse._engine import tools as tools_module

    built = []
    real = tools_module._schema_validator
    monkeypatch.setattr(tools_module, "_schema_validator", lambda schema: built.append(schema) or real(schema))
    tools_module._cached_validator.cache_clear()
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
              "additionalProperties": False}
    offered = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}},
               {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}]
    calls = ['{"name": "get_weather", "arguments": {"city": "Paris %d"}}' % i for i in range(40)]
    calls += ['{"name": "get_weather", "arguments": {"town": "x"}}', '{"name": "get_time", "arguments": {}}',
              '{"name": "nope", "arguments": {}}']
    text = "".join(f"<tool_call>{c}</tool_call>" for c in calls)
    for _ in range(2):  # (a second stream with the same tools builds nothing)
        s = ChatCompletionsStream("qwen3", "", tools=offered)
        s.feed(text)
        s.finish()
    assert len(built) == 2
    got = [call.get("errors", []) for call in s.message["tool_calls"]]
    expected = [validate_call({"type": "function", "function": json.loads(c)}, offered) for c in calls]
    assert got == expected and got[-3] and got[-1] and not any(got[:40]) and not got[-2]


@pytest.mark.parametrize("case", [g for g in __import__("goldens").all_goldens() if "error" not in g.expected],
                         ids=lambda g: f"{g.grammar}/{g.name}")
def test_chat_completions_text_is_the_parsers_text(case):
    """The content and reasoning that Chat Completions deltas add up to are the parser's own, on every
    golden sample: a field whose regions the parser joins (functionary's content, joined with a newline)
    gets the join between its regions' deltas too."""
    message, _ = chat_message(case.text, case.grammar, prefix=case.prefix, tools=case.tools, strict=False)
    parsed = grammar_parse.parse_response(case.text, case.grammar, prefix=case.prefix, tools=case.tools, strict=False)
    reasoning = next((parsed[f] for f in ("reasoning_content", "reasoning", "thinking") if parsed.get(f)), None)
    assert (message.get("content") or None, message.get("reasoning_content") or None) == \
        (parsed.get("content") or None, reasoning)


def _encoded(text: str) -> tuple[str, Any] | None:
    """The output with its first JSON call's arguments object written as a JSON string (Granite 4 and others
    write ``"arguments": "{\\"city\\": \\"Paris\\"}"``), and that object; None where it has none."""
    for _, start, end, value in arguments_members(text):
        if value:
            return text[:start] + json.dumps(text[start:end]) + text[end:], value
    return None


ENCODED = [(g, p) for g, p in CASES if _encoded(p.read_text(encoding="utf-8")) is not None]


@pytest.mark.parametrize("grammar, path", ENCODED, ids=[f"{g}/{p.stem}" for g, p in ENCODED])
@settings(max_examples=examples(TOOL_CALL_SHARE))
@given(data=st.data())
def test_arguments_written_as_a_json_string_go_out_as_the_object_they_hold(grammar, path, data):
    """The message keeps such arguments as the string the model wrote (as transformers does); the wire, whose
    arguments are a string of JSON, sends the object text it holds, streamed under any chunking as one-shot."""
    case = load_case(grammar, path)
    text, inner = _encoded(case.text)  # type: ignore[misc]
    one_shot, _ = chat_message(text, grammar, prefix=case.prefix, tools=case.tools, ids=counter())
    chunks = data.draw(chunkings(text), label="chunks")
    s, deltas = stream(grammar, chunks, case.prefix, case.tools)
    assert s.message == one_shot
    sent = [json.loads(c["function"]["arguments"]) for c in s.message["tool_calls"]]
    assert inner in sent, (sent, inner)
    assert all("errors" not in c for c in s.message["tool_calls"])
