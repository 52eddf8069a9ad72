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

from grammar_parse.serving._backends import ReplayBackend
from grammar_parse.adapters.lmsp import ResponseStream, parse_sse, schema_validator, sse
from grammar_parse.serving._server import LMSPApp
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
        if (client := _RESPONSES_CLIENTS.pop(address, None)) is not None:
            client.close()
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


_RESPONSES_CLIENTS: dict[str, openai.OpenAI] = {}


def responses_client(url: str) -> openai.OpenAI:
    """One openai client per server, closed with it (a client left to the garbage collector leaves its
    sockets to a ResourceWarning that fails whichever test is running then)."""
    if url not in _RESPONSES_CLIENTS:
        _RESPONSES_CLIENTS[url] = openai.OpenAI(base_url=f"{url}/lmsp/v1", api_key=TOKEN, max_retries=0, timeout=20)
    return _RESPONSES_CLIENTS[url]


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


# ---------------------------------------------------------------------------- b. per-call errors
#: Calls that are wrong for the request's tools, and what a client is told: the error's code, its path
#: (keys the tool's schema does not name shown as ``*``) and words its message must hold. The model's
#: own text (SECRET) must never be in it.
CALL_ERRORS = [
    pytest.param(call(f"zz_{SECRET}", '{"city": "Paris"}'), "call.unknown_tool", "$.function.name",
                 ["not offered", "get_time, get_weather"], id="unknown tool"),
    pytest.param(call("get_weather", f'{{"city": "Paris", "location": {{"lat": "{SECRET}"}}}}'), "call.type",
                 "$.function.arguments.location.lat", ["expected number, got string"], id="type mismatch"),
    pytest.param(call("get_weather", f'{{"city": "Paris", "counts": {{"{SECRET}": "{SECRET}"}}}}'), "call.type",
                 "$.function.arguments.counts.*", ["expected integer, got string"], id="type under a free key"),
    pytest.param(call("get_weather", '{"location": {"lat": 1.5}}'), "call.required", "$.function.arguments.city",
                 ["required argument is missing"], id="missing required"),
    pytest.param(call("get_time", f'{{"zone": "UTC", "{SECRET}": 1}}'), "call.schema", "$.function.arguments",
                 ["an argument the schema does not define", "additionalProperties"], id="undeclared argument"),
    pytest.param(call("get_weather", '{"city": "Paris", "location": {"lat": NaN}}'), "parse.json_constant",
                 "$.function.arguments.location.lat", ["sent as null"], id="NaN"),
    pytest.param(call("get_weather", f'{{"city": "Paris", "{SECRET}": -Infinity}}'), "parse.json_constant",
                 "$.function.arguments.*", ["sent as null"], id="Infinity under an unknown key"),
]


def said_safely(error: dict[str, Any], code: str, path: str, words: list[str]) -> None:
    assert error["code"] == code, error
    text = json.dumps(error)
    assert SECRET not in text and "does not parse here" not in text, error
    for word in words:
        assert word in error["message"], error


@pytest.mark.parametrize("output, code, path, words", CALL_ERRORS)
def test_a_chat_call_error_says_which_tool_or_argument_and_why(url, output, code, path, words):
    replay(output)
    reply = post(url, "/v1/chat/completions", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}],
                                               "tools": CHAT_TOOLS})
    assert reply.status_code == 200, reply.text
    (tool_call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    errors = [e for e in tool_call["errors"] if e.get("code") == code]
    assert len(errors) == 1, tool_call["errors"]  # (before: no code, "the model's output does not parse here")
    said_safely(errors[0], code, path, words)
    assert errors[0]["path"] == path
    for error in tool_call["errors"]:
        assert SECRET not in json.dumps(error) and error.get("code"), tool_call["errors"]


@pytest.mark.parametrize("output, code, path, words", CALL_ERRORS)
def test_an_lmsp_call_error_is_a_parse_error_event_saying_which_tool_or_argument_and_why(url, output, code, path,
                                                                                        words):
    replay(output)
    reply = post(url, "/lmsp/v1/responses", {"model": "qwen3", "input": "Hi", "tools": LMSP_TOOLS, "stream": True})
    events = parse_sse(reply.text)
    check_stream(events)
    assert events[-1]["event"] == "response.completed"
    problems = [e["data"] for e in events if e["event"] == "response.parse_error"]
    errors = [p for p in problems if p["code"] == code]
    assert len(errors) == 1, problems  # (before: none for a tool or schema error, a general text for NaN)
    said_safely(errors[0], code, path, words)
    assert errors[0]["message"].startswith(f"{path}: ")
    assert SECRET not in json.dumps(problems)


#: Broken JSON in a call fails the whole response (the gateway parses strictly): the failure says the code,
#: the region and where, never the text.
BROKEN = "Let me see.\n" + call("get_weather", f'{{"city": {SECRET}}}')


@pytest.mark.parametrize("path", ["/lmsp/v1/responses", "/v1/chat/completions"])
@pytest.mark.parametrize("stream", [False, True])
def test_broken_call_json_fails_saying_the_code_and_region_not_the_text(url, path, stream):
    replay(BROKEN)
    body = {"model": "qwen3", "stream": stream, **({"input": "Hi", "tools": LMSP_TOOLS} if path.startswith("/lmsp")
                                                   else {"messages": [{"role": "user", "content": "Hi"}],
                                                         "tools": CHAT_TOOLS})}
    reply = post(url, path, body)
    if not stream:
        assert reply.status_code == 500
        detail = reply.json()["detail"]
    elif path.startswith("/lmsp"):
        detail = parse_sse(reply.text)[-1]["data"]["error"]["detail"]
    else:
        (error,) = [json.loads(line[6:])["error"] for line in reply.text.splitlines() if '"error"' in line]
        detail = error["message"]
    assert SECRET not in reply.text
    # (before: "the model's output could not be parsed", whatever was wrong)
    assert "parse.json" in detail and "tool_calls" in detail and "get_weather" in detail, detail
    # (where the call's region opens: character 12, streamed too, though that had left the parser's buffer)
    assert "starting at line 2, column 1 of the output" in detail, detail
