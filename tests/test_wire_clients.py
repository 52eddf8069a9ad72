"""The gateway as real clients meet it (issue 32, "what a new user meets"): the official ``openai`` client's
Responses API against the LMSP endpoint, streaming and not, and per-call errors that say which tool or
argument is wrong and why, without quoting the model's output. Every server here listens on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from grammar_parse.backends import ReplayBackend
from grammar_parse.lmsp import ResponseStream, parse_sse, schema_validator, sse
from grammar_parse.server import LMSPApp
from test_lmsp import Server, check_stream, counter, valid

TOKEN = "wire-token"
EVENT = schema_validator("event")
SECRET = "SECRETX"  # in every model output below where a client must never see it

#: A tool whose schema has a required argument, a nested typed one and a free-keyed object of integers.
WEATHER = {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"},
    "location": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}}},
    "counts": {"type": "object", "additionalProperties": {"type": "integer"}}}}
CLOSED = {"type": "object", "properties": {"zone": {"type": "string"}}, "additionalProperties": False}
LMSP_TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
              {"type": "function", "name": "get_time", "parameters": CLOSED}]
CHAT_TOOLS = [{"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}} for t in LMSP_TOOLS]


def call(name: str, arguments: str) -> str:
    """A qwen3 output holding one tool call (arguments as the model wrote them)."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call><|im_end|>'


def always(text: str) -> dict[str, str]:
    return {"answer": text, "tool_call": text, "after_tool": text}


_APP: list[LMSPApp] = []


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    app = LMSPApp(grammar="qwen3", model="qwen3", token=TOKEN, clock=lambda: 1794200000)
    _APP.append(app)
    with Server(app) as address:
        yield address
    _APP.clear()


def replay(text: str) -> None:
    _APP[0].backend = ReplayBackend(always(text))


def post(url: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=20)


# ---------------------------------------------------------------------------- a. the openai Responses client
#: Outputs and what a Responses client must read from them: (output, with tools, answer text, reasoning
#: text, calls as (name, arguments)).
OUTPUTS = [
    pytest.param("Paris is the capital of France.<|im_end|>", False, "Paris is the capital of France.", None, [],
                 id="answer"),
    pytest.param("<think>\nThe user asks for a capital.\n</think>\n\nIt is Paris.<|im_end|>", False, "It is Paris.",
                 "The user asks for a capital.", [], id="reasoning+answer"),
    pytest.param("<think>\nA tool knows.\n</think>\n\n" + call("get_weather", '{"city": "Paris"}'), True, None,
                 "A tool knows.", [("get_weather", {"city": "Paris"})], id="tool call"),
]


def responses_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/lmsp/v1", api_key=TOKEN, max_retries=0, timeout=20)


@pytest.mark.parametrize("output, with_tools, answer, reasoning, calls", OUTPUTS)
def test_openai_responses_streaming_reads_every_event_type(url, output, with_tools, answer, reasoning, calls):
    replay(output)
    tools = {"tools": LMSP_TOOLS} if with_tools else {}
    names = [e["event"] for e in parse_sse(post(url, "/lmsp/v1/responses",
                                                {"model": "qwen3", "input": "Hi", "stream": True, **tools}).text)]
    events = list(responses_client(url).responses.create(model="qwen3", input="Hi", stream=True, **tools))
    assert [event.type for event in events] == names  # (before: every type None)
    assert [event.sequence_number for event in events] == list(range(1, len(names) + 1))
    assert names[0] == "response.created" and names[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == (answer or "")
    thought = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert thought == (reasoning or "")
    done = [e.item for e in events if e.type == "response.output_item.done" and e.item.type == "function_call"]
    assert [(item.name, json.loads(item.arguments)) for item in done] == calls


@pytest.mark.parametrize("output, with_tools, answer, reasoning, calls", OUTPUTS)
def test_openai_responses_without_streaming_takes_a_plain_string_input(url, output, with_tools, answer, reasoning,
                                                                       calls):
    replay(output)
    tools = {"tools": LMSP_TOOLS} if with_tools else {}
    response = responses_client(url).responses.create(model="qwen3", input="Hi", **tools)  # (before: 400)
    assert response.status == "completed"
    assert response.output_text == (answer or "")
    assert [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"] == calls


@pytest.mark.parametrize("text", ["Hi", "", "two\nlines, \u00e9 and \U0001f600"])
def test_a_plain_string_input_is_one_user_message(url, text):
    """The prompt rendered from ``input: "..."`` is the one rendered from that user message as an item."""
    prompts: list[str] = []

    class Recording(ReplayBackend):
        def start(self, request: dict[str, Any], prompt: str) -> Any:
            prompts.append(prompt)
            return super().start(request, prompt)

    _APP[0].backend = Recording(always("Fine.<|im_end|>"))
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    for given in (text, [item]):
        reply = post(url, "/lmsp/v1/responses", {"model": "qwen3", "input": given})
        assert reply.status_code == 200, reply.text
    assert len(prompts) == 2 and prompts[0] == prompts[1]
    assert f"<|im_start|>user\n{text}<|im_end|>" in prompts[0]


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("output", [p.values[0] for p in OUTPUTS] + [call("get_weather", '{"city": NaN}'),
                                                                      '<tool_call>\n{"name": "get_weather", "argu'])
def test_every_frame_carries_its_type_and_sequence_number_in_its_data(output, strict):
    """On the wire each event's data says its ``type`` (the event name) and ``sequence_number`` (its id), as
    the Responses API's events do; read back, the frame is the event again, and it fits the protocol schema."""
    stream = ResponseStream("qwen3", "", tools=LMSP_TOOLS, ids=counter(), strict=strict)
    events = stream.feed(output) + stream.complete(3, 4)
    check_stream(events)
    for event in events:
        frame = sse(event)
        data = json.loads(frame.split("\ndata: ", 1)[1])
        assert data["type"] == event["event"] and data["sequence_number"] == event["id"]
        assert parse_sse(frame) == [event]
        valid(EVENT, {"id": event["id"], "event": event["event"], "data": data})
