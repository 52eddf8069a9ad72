"""The gateway (grammar_parse.serving._server) on loopback: the OpenAI client against /v1, the LMSP protocol's
corner cases (the tool loop over previous_response_id, truncation, tool_choice, versions, media types),
and its hardening tried as a client that means harm would try it (body size and time, JSON depth and
digits, item counts, the store's bounds, tokens, a client that leaves, a backend that fails). Every
server here listens on 127.0.0.1 only and stops with its test."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import uvicorn

import grammar_parse
from grammar_parse.serving._backends import Generation, ReplayBackend, UpstreamError, tokens
from grammar_parse._cli import build_argparser
from grammar_parse.errors import ERROR_CODES
from grammar_parse.adapters.lmsp import parse_sse, schema_validator
from grammar_parse.serving._server import PROBLEM_CODES, Limits, LMSPApp, ResponseStore, random_ids
from test_lmsp import Server, check_stream, rebuild, valid

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ReplayBackend().samples
TWO_CALLS = (ROOT / "examples" / "qwen3_tool_call.txt").read_text(encoding="utf-8")
QWEN3_TEMPLATE = Path(__file__).resolve().parent / "data" / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
           "required": ["city"]}
TIME = {"type": "object", "properties": {"timezone": {"type": "string"}}}
LMSP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather now", "parameters": WEATHER},
              {"type": "function", "name": "get_time", "description": "Time now", "parameters": TIME}]
CHAT_TOOLS = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}}
              for t in LMSP_TOOLS]
TOKEN = "s3cret-token"
PROBLEM = schema_validator("problem")
HTTP = httpx.Client(timeout=20)  # (one client for the module: making one costs more than a request here)


# ---------------------------------------------------------------------------- harness
def app_with(**kwargs: Any) -> LMSPApp:
    return LMSPApp(**{"grammar": "qwen3", "model": "qwen3", "token": TOKEN, "clock": lambda: 1794200000, **kwargs})


_SHARED: list[tuple[str, LMSPApp]] = []


@pytest.fixture(scope="module", autouse=True)
def shared_server() -> Iterator[None]:
    """One server for the module (starting and stopping one costs more than most tests): each test sets
    the parts of the app it needs through gateway(), which puts the defaults back after it."""
    global HTTP
    HTTP = httpx.Client(timeout=20)  # (made again if xdist runs this module's tests in two turns)
    app = app_with()
    with Server(app, log_level="warning") as address:
        _SHARED.append((address, app))
        yield
        _SHARED.clear()
    for made in _CLIENTS.values():  # (their connections, before the interpreter exits)
        made.close()
    _CLIENTS.clear()
    HTTP.close()


@contextlib.contextmanager
def gateway(**settings: Any) -> Iterator[str]:
    """The shared server's address, its app set up with ``settings`` (backend, store, limits, ...)."""
    address, app = _SHARED[0]
    defaults = {"backend": ReplayBackend(), "store": ResponseStore(), "limits": Limits(), "chat_template": None,
                "request_schema": schema_validator("request")}
    for name, value in {**defaults, **settings}.items():
        setattr(app, name, value)
    try:
        yield address
    finally:
        for name, value in defaults.items():
            setattr(app, name, value)


def shared_app() -> LMSPApp:
    return _SHARED[0][1]


@pytest.fixture()
def url() -> Iterator[str]:
    with gateway() as address:
        yield address


_CLIENTS: dict[tuple[str, str], openai.OpenAI] = {}


def client(address: str, token: str = TOKEN) -> openai.OpenAI:
    """An openai client for the server (one per address and token: making one costs more than a request)."""
    if (address, token) not in _CLIENTS:
        _CLIENTS[address, token] = openai.OpenAI(base_url=f"{address}/v1", api_key=token, max_retries=0, timeout=20)
    return _CLIENTS[address, token]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def lmsp(address: str, body: Any, *, token: str | None = TOKEN, headers: dict[str, str] | None = None) -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    sent = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {}),
            **(headers or {})}
    return HTTP.post(f"{address}/lmsp/v1/responses", content=data, headers=sent)


def chat(address: str, body: Any, token: str | None = TOKEN) -> httpx.Response:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    return HTTP.post(f"{address}/v1/chat/completions", content=json.dumps(body), headers=headers, timeout=20)


def is_problem(reply: httpx.Response, code: str) -> dict[str, Any]:
    """The reply is the problem document of ``code``, with the status PROBLEM_CODES gives it."""
    assert reply.headers["content-type"] == "application/problem+json", reply.text
    document = reply.json()
    assert document["code"] == code, document
    assert reply.status_code == PROBLEM_CODES[code][0] == document["status"]
    valid(PROBLEM, {k: v for k, v in document.items() if k != "error"})  # (the OpenAI error object under /v1)
    return dict(document)


def raw_http(address: str, head: bytes, body_parts: tuple[bytes, ...] = ()) -> bytes:
    """The response the server gives to a request written by hand (one httpx would not send): read to its
    Content-Length, without waiting for the connection to close."""
    host, port = address.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=20) as sock:
        sock.sendall(head)
        for part in body_parts:
            sock.sendall(part)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            top, found, body = answer.partition(b"\r\n\r\n")
            length = re.search(rb"(?im)^content-length: *(\d+)", top)
            if found and length and len(body) >= int(length.group(1)):
                break
    return answer


def status_and_body(answer: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def text_of(response: dict[str, Any]) -> str | None:
    messages = [item for item in response["output"] if item["type"] == "message"]
    return messages[0]["content"][0]["text"] if messages else None


def content(reply: httpx.Response) -> str:
    """The answer text of a reply from either API, streamed or not."""
    if reply.headers["content-type"].startswith("text/event-stream"):
        if reply.text.startswith("id:"):
            return text_of({"output": rebuild(parse_sse(reply.text))}) or ""
        chunks = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
    body = reply.json()
    return (text_of(body) if "output" in body else body["choices"][0]["message"]["content"]) or ""


class RecordingBackend(ReplayBackend):
    """The replay backend, keeping each request and prompt it was asked to continue."""

    def __init__(self, samples: dict[str, str] | None = None) -> None:
        super().__init__(samples)
        self.requests: list[dict[str, Any]] = []
        self.prompts: list[str] = []

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        self.requests.append(request)
        self.prompts.append(prompt)
        return super().start(request, prompt)


class FailingBackend(ReplayBackend):
    """Replays a few pieces, then raises ``error`` from its pieces (an upstream that breaks mid-stream)."""

    def __init__(self, error: Exception, after: int = 3) -> None:
        super().__init__()
        self.error, self.after = error, after

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        generation = super().start(request, prompt)
        generation.pieces = self._fail(generation.pieces)
        return generation

    async def _fail(self, pieces: AsyncIterator[str]) -> AsyncIterator[str]:
        count = 0
        async for piece in pieces:
            if count == self.after:
                raise self.error
            count += 1
            yield piece


def always(text: str) -> dict[str, str]:
    """Replay samples that answer ``text`` whatever the request."""
    return {"answer": text, "tool_call": text, "after_tool": text}


def accumulate(chunks: Any) -> tuple[dict[str, Any], str | None, Any]:
    """The message a client builds from streamed Chat Completions chunks, as the OpenAI docs tell it to."""
    message: dict[str, Any] = {"role": None, "content": "", "reasoning_content": "", "tool_calls": {}}
    finish, usage = None, None
    for item in chunks:
        usage = item.usage or usage
        for choice in item.choices:
            delta = choice.delta
            message["role"] = delta.role or message["role"]
            message["content"] += delta.content or ""
            message["reasoning_content"] += (delta.model_extra or {}).get("reasoning_content") or ""
            for call in delta.tool_calls or []:
                entry = message["tool_calls"].setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                entry["name"] += (call.function.name or "") if call.function else ""
                entry["arguments"] += (call.function.arguments or "") if call.function else ""
            finish = choice.finish_reason or finish
    message["tool_calls"] = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
    return message, finish, usage


def one_shot(sample: str, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return dict(grammar_parse.parse_response(sample, "qwen3", prefix="", tools=tools))


# ---------------------------------------------------------------------------- the OpenAI client
def test_openai_client_without_streaming_gets_reasoning_and_typed_calls(url):
    completion = client(url).chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "Weather in Hangzhou?"}], tools=CHAT_TOOLS)
    choice = completion.choices[0]
    expected = one_shot(SAMPLES["tool_call"], CHAT_TOOLS)
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == expected["content"] == "Let me look that up."
    assert choice.message.model_extra["reasoning_content"] == expected["reasoning_content"]
    [call] = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == expected["tool_calls"][0]["function"]["arguments"]
    assert completion.usage.completion_tokens == len(tokens(SAMPLES["tool_call"]))
    assert completion.usage.prompt_tokens > 0 and completion.model == "qwen3"


def test_openai_client_streaming_adds_up_to_the_one_shot_parse(url):
    stream = client(url).chat.completions.create(
        model="qwen3", messages=[{"role": "user", "content": "Weather in Hangzhou?"}], tools=CHAT_TOOLS,
        stream=True, stream_options={"include_usage": True})
    message, finish, usage = accumulate(stream)
    expected = one_shot(SAMPLES["tool_call"], CHAT_TOOLS)
    assert finish == "tool_calls" and message["role"] == "assistant"
    assert message["content"] == expected["content"]
    assert message["reasoning_content"] == expected["reasoning_content"]
    assert [(c["name"], json.loads(c["arguments"])) for c in message["tool_calls"]] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in expected["tool_calls"]]
    assert message["tool_calls"][0]["id"].startswith("call_")
    assert usage.completion_tokens == len(tokens(SAMPLES["tool_call"])) and usage.total_tokens > usage.completion_tokens


def test_openai_client_tool_loop_answers_after_the_tool():
    backend = RecordingBackend()
    with gateway(backend=backend) as address:
        api = client(address)
        messages: list[Any] = [{"role": "user", "content": "Weather in Hangzhou?"}]
        first = api.chat.completions.create(model="qwen3", messages=messages, tools=CHAT_TOOLS).choices[0].message
        call = first.tool_calls[0]
        messages += [first.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 17}'}]
        second = api.chat.completions.create(model="qwen3", messages=messages, tools=CHAT_TOOLS).choices[0]
        orphan = chat(address, {"model": "qwen3", "messages": [
            messages[0], {"role": "tool", "tool_call_id": "call_nobody", "content": "17"}]})
    assert second.finish_reason == "stop" and second.message.tool_calls is None
    assert second.message.content == "It is 17 degrees Celsius in Hangzhou, with light rain."
    # the backend saw an LMSP-shaped request: the call and its output as items (so the replay chose its answer)
    assert [item["type"] for item in backend.requests[1]["input"]] == ["message", "message", "function_call",
                                                                       "function_call_output"]
    assert "<tool_response>\n{\"temperature_c\": 17}\n</tool_response>" in backend.prompts[1]
    assert '"name": "get_weather", "arguments": {"city": "Hangzhou"}' in backend.prompts[1]
    is_problem(orphan, "invalid_request")


def test_chat_messages_render_with_the_model_s_chat_template():
    pytest.importorskip("jinja2")
    from grammar_parse import load_chat_template, render_prompt

    template = load_chat_template(QWEN3_TEMPLATE)
    backend = RecordingBackend()
    messages = [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Weather in Hangzhou?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Hangzhou"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 17}'}]
    with gateway(backend=backend, chat_template=template) as address:
        reply = chat(address, {"model": "qwen3", "messages": messages, "tools": CHAT_TOOLS})
    assert reply.status_code == 200, reply.text
    assert backend.prompts[0] == render_prompt([
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Hangzhou?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Hangzhou"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature_c": 17}'}], template, tools=CHAT_TOOLS)


def test_models_health_and_routes(url):
    api = client(url)
    assert [m.id for m in api.models.list().data] == ["qwen3"]
    assert api.models.retrieve("qwen3").id == "qwen3"
    with pytest.raises(openai.NotFoundError) as missing:
        api.models.retrieve("other")
    assert missing.value.code == "model_not_found"
    health = HTTP.get(f"{url}/health")  # (no token: it says nothing about the model)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    is_problem(HTTP.get(f"{url}/v1/models"), "unauthorized")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    is_problem(HTTP.get(f"{url}/v1/chat/completions", headers=auth), "method_not_allowed")
    is_problem(HTTP.get(f"{url}/nowhere", headers=auth), "not_found")


def test_openai_client_errors_carry_the_problem_code(url):
    with pytest.raises(openai.AuthenticationError):
        client(url, token="wrong").chat.completions.create(model="qwen3", messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.NotFoundError) as wrong_model:
        client(url).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert wrong_model.value.code == "model_not_found"


@pytest.mark.parametrize("extra, refused", [
    ({"n": 2}, "n above 1"),
    ({"logprobs": True}, "logprobs"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "'image_url'"),
    ({"tools": [{"type": "web_search"}]}, "'web_search'"),
])
def test_chat_features_the_server_cannot_give_are_refused(url, extra, refused):
    reply = chat(url, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], **extra})
    assert refused in is_problem(reply, "unsupported_capability")["detail"]
    assert reply.json()["error"]["code"] == "unsupported_capability"  # (what the openai client reads)


def test_chat_token_limit_and_sampling_reach_the_backend():
    backend = RecordingBackend()
    with gateway(backend=backend) as address:
        cut = chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                             "temperature": 0.2, "top_p": 0.9, "seed": 7}).json()
        chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
                       "max_completion_tokens": 6})
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == 4
    sent = backend.requests[0]
    assert (sent["max_output_tokens"], sent["temperature"], sent["top_p"], sent["seed"]) == (4, 0.2, 0.9, 7)
    assert backend.requests[1]["max_output_tokens"] == 6  # max_completion_tokens wins, as in the OpenAI API


# ---------------------------------------------------------------------------- protocol
def test_tool_loop_over_previous_response_id(url):
    first = lmsp(url, {"model": "qwen3", "input": [user("Weather in Hangzhou?")], "tools": LMSP_TOOLS, "store": True})
    call = next(item for item in first.json()["output"] if item["type"] == "function_call")
    answer = {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temperature_c": 17}'}
    # The call is in the stored response, not in this request: ids are checked once the two are merged.
    second = lmsp(url, {"model": "qwen3", "tools": LMSP_TOOLS, "previous_response_id": first.json()["id"],
                        "input": [answer]})
    assert second.status_code == 200, second.text
    assert text_of(second.json()) == "It is 17 degrees Celsius in Hangzhou, with light rain."
    stray = lmsp(url, {"model": "qwen3", "previous_response_id": first.json()["id"],
                       "input": [{**answer, "call_id": "call_unknown"}]})
    assert "call_unknown" in is_problem(stray, "invalid_request")["detail"]


def cut_where(sample: str, ends: str) -> int:
    """The token count at which the sample's replay stops with text ending in ``ends``."""
    pieces = tokens(sample)
    return next(n for n in range(1, len(pieces)) if "".join(pieces[:n]).endswith(ends))


#: (where generation stops, the call's arguments as parsed, whether the call is flagged)
CUT, CUT_PATH = "the arguments ended before their JSON did: the wire closes them", "$.function.arguments.city"
CUTS = [('"Han', {"city": "Han"}, True), ("</tool_c", {"city": "Hangzhou"}, False)]


@pytest.mark.parametrize("ends, arguments, flagged", CUTS, ids=["inside-arguments", "partial-closer"])
def test_lmsp_output_cut_inside_a_call_is_incomplete_not_failed(url, ends, arguments, flagged):
    body = {"model": "qwen3", "input": [user("Weather?")], "tools": LMSP_TOOLS,
            "max_output_tokens": cut_where(SAMPLES["tool_call"], ends)}
    sync = lmsp(url, body)
    assert sync.status_code == 200, sync.text
    response = sync.json()
    valid(schema_validator("response"), response)
    assert response["status"] == "incomplete" and response["incomplete_details"] == {"reason": "max_output_tokens"}
    call = response["output"][-1]
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == arguments
    assert text_of(response) == "Let me look that up."  # (the cut closer is not text)
    streamed = lmsp(url, {**body, "stream": True})
    events = parse_sse(streamed.text)
    check_stream(events)
    assert events[-1]["event"] == "response.incomplete"
    strip = lambda items: [{k: v for k, v in i.items() if k not in ("id", "call_id")} for i in items]  # noqa: E731
    assert strip(rebuild(events)) == strip(response["output"])
    problems = [e["data"] for e in events if e["event"] == "response.parse_error"]
    assert bool(problems) == flagged
    for found in problems:  # the code's description, or the wire's own words on the argument: nothing of the text
        assert found["field"] == "tool_calls" and found["message"] in (ERROR_CODES[found["code"]], f"{CUT_PATH}: {CUT}")
    assert "</tool_c" not in streamed.text and "Han\\n" not in streamed.text


@pytest.mark.parametrize("ends, arguments, flagged", CUTS, ids=["inside-arguments", "partial-closer"])
def test_chat_output_cut_inside_a_call_finishes_with_length(url, ends, arguments, flagged):
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "Weather?"}], "tools": CHAT_TOOLS,
            "max_tokens": cut_where(SAMPLES["tool_call"], ends)}
    reply = chat(url, body)
    assert reply.status_code == 200, reply.text
    choice = reply.json()["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == "Let me look that up."
    [call] = choice["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == arguments
    assert bool(call.get("errors")) == flagged
    for error in call.get("errors", []):
        said = (error["message"], error["path"])
        assert said in ((ERROR_CODES[error["code"]], "$.function.arguments"), (CUT, CUT_PATH))
    message, finish, _ = accumulate(client(url).chat.completions.create(**body, stream=True))
    assert finish == "length" and message["content"] == "Let me look that up."
    assert [json.loads(c["arguments"]) for c in message["tool_calls"]] == [arguments]


def lmsp_and_chat(address: str, tool_choice: Any, chat_choice: Any, *, stream: bool, **extra: Any) -> tuple[Any, Any]:
    lmsp_body = {"model": "qwen3", "input": [user("Weather?")], "tools": LMSP_TOOLS, "stream": stream}
    chat_body = {"model": "qwen3", "messages": [{"role": "user", "content": "Weather?"}], "tools": CHAT_TOOLS,
                 "stream": stream, **extra}
    if tool_choice is not None:
        lmsp_body["tool_choice"], chat_body["tool_choice"] = tool_choice, chat_choice
    return lmsp(address, lmsp_body), chat(address, chat_body)


def violated(lmsp_reply: httpx.Response, chat_reply: httpx.Response, stream: bool) -> None:
    """Both replies say tool_choice_violated: a failed stream / a 502 problem."""
    if stream:
        events = parse_sse(lmsp_reply.text)
        check_stream(events)
        assert events[-1]["event"] == "response.failed"
        assert events[-1]["data"]["error"]["code"] == "tool_choice_violated"
        errors = [json.loads(line[6:]) for line in chat_reply.text.splitlines() if line.startswith("data: {")]
        assert errors[-1]["error"]["code"] == "tool_choice_violated"
        assert not any(c.get("choices") and c["choices"][0]["finish_reason"] for c in errors[:-1])
    else:
        is_problem(lmsp_reply, "tool_choice_violated")
        is_problem(chat_reply, "tool_choice_violated")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_choice_none_offers_no_tools_and_a_call_anyway_fails(stream):
    backend = RecordingBackend()
    with gateway(backend=backend) as address:
        answered = lmsp_and_chat(address, "none", "none", stream=stream)
    assert [r.status_code for r in answered] == [200, 200]
    assert [request["tools"] for request in backend.requests] == [[], []]  # (so the replay answers, no call)
    assert [content(reply) for reply in answered] == [content(reply) for reply in answered][:1] * 2
    assert content(answered[0]).startswith("Hello!")
    with gateway(backend=ReplayBackend(always(SAMPLES["tool_call"]))) as address:
        violated(*lmsp_and_chat(address, "none", "none", stream=stream), stream)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tool_choice_required_and_named_are_checked_against_the_output(stream):
    backend = RecordingBackend()
    with gateway(backend=backend) as address:
        required = lmsp_and_chat(address, "required", "required", stream=stream)
        named = lmsp_and_chat(address, {"type": "function", "name": "get_weather"},
                              {"type": "function", "function": {"name": "get_weather"}}, stream=stream)
        other = lmsp_and_chat(address, {"type": "function", "name": "get_time"},
                              {"type": "function", "function": {"name": "get_time"}}, stream=stream)
        unknown = lmsp_and_chat(address, {"type": "function", "name": "nope"},
                                {"type": "function", "function": {"name": "nope"}}, stream=stream)
    for reply in (*required, *named):
        assert reply.status_code == 200 and "get_weather" in reply.text and "tool_choice_violated" not in reply.text
    assert [t["name"] for t in backend.requests[2]["tools"]] == ["get_weather"]  # (only the named tool offered)
    violated(*other, stream)  # (the replay calls get_weather)
    for reply in unknown:
        is_problem(reply, "invalid_request")
    with gateway(backend=ReplayBackend(always(SAMPLES["answer"]))) as address:
        violated(*lmsp_and_chat(address, "required", "required", stream=stream), stream)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_parallel_tool_calls_false_is_checked_and_lmsp_has_no_such_field(stream):
    with gateway(backend=ReplayBackend(always(TWO_CALLS))) as address:
        both = chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "?"}], "tools": CHAT_TOOLS,
                              "stream": stream})
        one = lmsp_and_chat(address, None, None, stream=stream, parallel_tool_calls=False)
        lmsp_field = lmsp(address, {"model": "qwen3", "input": [user("?")], "parallel_tool_calls": False})
    assert both.status_code == 200 and "get_time" in both.text and "tool_choice_violated" not in both.text
    assert one[0].status_code == 200  # (LMSP: no parallel_tool_calls was asked for)
    if stream:
        errors = [json.loads(line[6:]) for line in one[1].text.splitlines() if line.startswith("data: {")]
        assert errors[-1]["error"]["code"] == "tool_choice_violated"
    else:
        is_problem(one[1], "tool_choice_violated")
    assert "parallel_tool_calls" in is_problem(lmsp_field, "invalid_request")["detail"]


@pytest.mark.parametrize("version, ok", [(None, True), ("1.0", True), ("1", True), ("1.3", True), ("2.0", False),
                                         ("one", False)])
def test_lmsp_version_header(url, version, ok):
    reply = lmsp(url, {"model": "qwen3", "input": [user("Hi")]}, headers={"LMSP-Version": version} if version else {})
    if ok:
        assert reply.status_code == 200 and reply.headers["lmsp-version"] == "1.0"
    else:
        is_problem(reply, "unsupported_version")


@pytest.mark.parametrize("content_type, body, code", [
    ("text/plain", b'{"model": "qwen3"}', "unsupported_media_type"),
    (None, b'{"model": "qwen3"}', "unsupported_media_type"),
    ("application/json; charset=utf-8", b"{not json", "invalid_request"),
    ("application/json", b"\xff\xfe\x00", "invalid_request"),
    ("application/json", b'{"model": "qwen3", "input": [], "temperature": NaN}', "invalid_request"),
    ("application/json", b"[1, 2]", "invalid_request"),
])
@pytest.mark.parametrize("path", ["/lmsp/v1/responses", "/v1/chat/completions"])
def test_bodies_that_are_not_json_objects(url, path, content_type, body, code):
    headers = {"Authorization": f"Bearer {TOKEN}", **({"Content-Type": content_type} if content_type else {})}
    is_problem(HTTP.post(f"{url}{path}", content=body, headers=headers), code)


def test_parse_failures_say_nothing_of_the_output_and_log_it_all(caplog):
    broken = "<tool_call>\n{SECRET-OUTPUT not json\n</tool_call><|im_end|>"
    with gateway(backend=ReplayBackend(always(broken))) as address, \
            caplog.at_level(logging.INFO, logger="grammar_parse.serving._server"):
        replies = [lmsp(address, {"model": "qwen3", "input": [user("Hi")], "stream": stream}) for stream in (False, True)]
        replies += [chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], "stream": stream})
                    for stream in (False, True)]
    for reply in replies:
        assert "SECRET" not in reply.text and "allow_non_json" not in reply.text and "content_args" not in reply.text
        assert reply.headers["x-request-id"] in reply.text  # (the client can quote it to whoever runs the server)
        assert f"request_id={reply.headers['x-request-id']} parse_failed" in caplog.text
    is_problem(replies[0], "parse_failed")
    assert parse_sse(replies[1].text)[-1]["data"]["error"]["code"] == "parse_failed"
    is_problem(replies[2], "parse_failed")
    assert '"code": "parse_failed"' in replies[3].text
    assert "SECRET-OUTPUT" in caplog.text


# ---------------------------------------------------------------------------- hardening
def post_head(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}",
             "Content-Type: application/json", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_declared_body_over_the_limit_is_refused_before_it_is_read():
    with gateway(limits=Limits(max_body=1000)) as address:
        # 10**9 bytes announced and none sent: only an answer given before reading can come back (the body
        # read timeout is 10 s, and would give 408).
        answer = raw_http(address, post_head("/lmsp/v1/responses", {"Content-Length": str(10**9)}))
    status, body = status_and_body(answer)
    assert status == 413 and body["code"] == "request_too_large"


def test_a_chunked_body_is_refused_once_it_passes_the_limit():
    chunk = b"x" * 600
    with gateway(limits=Limits(max_body=1000)) as address:
        # two chunks (1200 bytes) and no end of body: the answer comes as the count passes the limit
        answer = raw_http(address, post_head("/v1/chat/completions", {"Transfer-Encoding": "chunked"}),
                          (b"%x\r\n%s\r\n" % (len(chunk), chunk),) * 2)
    status, body = status_and_body(answer)
    assert status == 413 and body["code"] == "request_too_large"


def test_a_stalled_body_times_out():
    with gateway(limits=Limits(body_timeout=0.2)) as address:
        answer = raw_http(address, post_head("/lmsp/v1/responses", {"Content-Length": "100"}), (b'{"model": ',))
    status, body = status_and_body(answer)
    assert status == 408 and body["code"] == "request_timeout"


def connect(address: str) -> socket.socket:
    host, port = address.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=5)


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (reading gets the end of the stream, or a reset)."""
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"p" * 40 + b"\r\n\r\n"


@pytest.fixture(scope="module")
def guarded() -> Iterator[str]:
    """A server whose request heads must arrive within 0.5 s."""
    with Server(app_with(), header_timeout=0.5, max_connections=400) as address:
        yield address


def test_a_head_dribbled_slower_than_the_header_timeout_is_cut_off(guarded):
    sock = connect(guarded)
    started = time.monotonic()
    with contextlib.suppress(OSError):  # (a byte sent after the close may be refused)
        for byte in HEAD[:30]:  # (a byte each 0.1 s: 3 s for these, were the connection kept)
            sock.send(bytes([byte]))
            time.sleep(0.1)
            sock.settimeout(0.001)
            with contextlib.suppress(TimeoutError, BlockingIOError):
                if closed_by_server(sock):
                    break
    sock.settimeout(5)
    assert closed_by_server(sock) and time.monotonic() - started < 1.5
    sock.close()


def test_half_open_connections_are_closed_and_the_server_still_answers(guarded):
    silent = [connect(guarded) for _ in range(150)]  # (connected, nothing sent)
    partial = [connect(guarded) for _ in range(150)]  # (half a head sent)
    for sock in partial:
        sock.sendall(HEAD[:20])
    time.sleep(1.0)
    assert all(closed_by_server(sock) for sock in silent + partial)
    for sock in silent + partial:
        sock.close()
    assert httpx.get(f"{guarded}/health", timeout=5).status_code == 200


def test_a_keep_alive_pause_longer_than_the_header_timeout_is_fine(guarded):
    """The head's clock starts at its first byte, not when the previous response ended."""
    sock = connect(guarded)
    for _ in range(2):
        sock.sendall(HEAD)
        answer = b""
        while b'"ok"' not in answer and (got := sock.recv(4096)):
            answer += got
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'"ok"}')
        time.sleep(0.8)
    sock.close()


def test_connections_beyond_the_limit_are_closed_at_once():
    with Server(app_with(), max_connections=3) as address:
        held = [connect(address) for _ in range(3)]
        extra = connect(address)
        assert closed_by_server(extra)
        held[0].sendall(HEAD)  # (the ones within the limit are served)
        assert held[0].recv(4096).startswith(b"HTTP/1.1 200")
        for sock in [*held, extra]:
            sock.close()


def test_requests_beyond_max_concurrent_get_a_503_problem_and_health_still_answers():
    with gateway(limits=Limits(max_concurrent=1), backend=ReplayBackend(delay=0.05)) as address:
        body = {"model": "qwen3", "input": [{"type": "message", "role": "user", "content": "Hi"}], "stream": True}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.stream("POST", f"{address}/lmsp/v1/responses", json=body, headers=headers, timeout=20) as first:
            assert first.status_code == 200
            lines = first.iter_lines()  # (kept: a dropped iterator would close the stream)
            next(lines)  # (the first stream is in progress)
            second = HTTP.post(f"{address}/v1/chat/completions", headers=headers,
                               json={"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]})
            assert HTTP.get(f"{address}/health").status_code == 200
        assert second.status_code == 503 and second.headers["retry-after"] == "1"
        assert second.headers["content-type"] == "application/problem+json"
        PROBLEM.validate({k: v for k, v in second.json().items() if k != "error"})
        assert second.json()["code"] == "overloaded" and second.json()["error"]["code"] == "overloaded"
        # Served again once the first is done: the server sees the first stream's client gone a moment
        # after it closed (on a busy machine, after the next request may have arrived).
        deadline = time.monotonic() + 5
        while (status := HTTP.post(f"{address}/lmsp/v1/responses", json={**body, "stream": False},
                                   headers=headers).status_code) == 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200


@pytest.mark.parametrize("body, says", [
    (b'{"model": "qwen3", "input": [], "max_output_tokens": ' + b"9" * 5000 + b"}", "more than 32 digits"),
    (b'{"model": "qwen3", "input": [], "max_output_tokens": ' + b"9" * 33 + b"}", "more than 32 digits"),
    (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 64"),
    (b'{"model": "qwen3", "extensions": ' + b'{"a": ' * 65 + b"1" + b"}" * 65 + b"}", "nests deeper than 64"),
], ids=["5000-digits", "33-digits", "100000-deep", "65-deep-object"])
@pytest.mark.parametrize("path", ["/lmsp/v1/responses", "/v1/chat/completions"])
def test_hostile_json_is_a_problem_not_a_crash(url, path, body, says):
    reply = HTTP.post(f"{url}{path}", content=body, timeout=20,
                       headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    assert says in is_problem(reply, "invalid_request")["detail"]


def test_item_and_tool_counts_are_limited():
    with gateway(limits=Limits(max_items=3, max_tools=1)) as address:
        items = lmsp(address, {"model": "qwen3", "input": [user("a")] * 4})
        tools = lmsp(address, {"model": "qwen3", "input": [user("a")], "tools": LMSP_TOOLS})
        messages = chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "a"}] * 4})
        chat_tools = chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "a"}],
                                    "tools": CHAT_TOOLS})
        # a previous_response_id chain counts with what it continues: 1 + 1 output item + 1 (of 3), then 5
        first = lmsp(address, {"model": "qwen3", "input": [user("a")], "store": True}).json()
        second = lmsp(address, {"model": "qwen3", "input": [user("b")], "store": True,
                                "previous_response_id": first["id"]})
    assert "input: at most 3" in is_problem(items, "invalid_request")["detail"]
    assert "tools: at most 1" in is_problem(tools, "invalid_request")["detail"]
    assert "messages: at most 3" in is_problem(messages, "invalid_request")["detail"]
    assert "tools: at most 1" in is_problem(chat_tools, "invalid_request")["detail"]
    assert "at most 3" in is_problem(second, "invalid_request")["detail"]


class GatedSchema:
    """The request validator, holding a big request's validation until a small request has been answered
    (or 30 s have passed): if validation ran on the event loop, nothing could be answered meanwhile."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.entered, self.answered = threading.Event(), threading.Event()
        self.answered_meanwhile: bool | None = None

    def iter_errors(self, request: Any) -> Any:
        if len(request.get("input", [])) > 1:
            self.entered.set()
            self.answered_meanwhile = self.answered.wait(30)
        return self.real.iter_errors(request)


def test_a_request_is_answered_while_another_is_being_validated():
    gate = GatedSchema(schema_validator("request"))
    with gateway(request_schema=gate) as address:
        big: dict[str, httpx.Response] = {}
        worker = threading.Thread(target=lambda: big.update(reply=lmsp(address, {"model": "qwen3",
                                                                                "input": [user("x")] * 200})))
        worker.start()
        assert gate.entered.wait(30)
        small = lmsp(address, {"model": "qwen3", "input": [user("Hi")]})
        gate.answered.set()
        worker.join(30)
    assert small.status_code == 200
    assert gate.answered_meanwhile is True  # the small one was answered before the big one's validation returned
    assert big["reply"].status_code == 200


def test_the_store_is_bounded_in_number_and_time():
    now = [0.0]
    store = ResponseStore(max_entries=2, ttl=60, clock=lambda: now[0])
    with gateway(store=store) as address:
        kept = [lmsp(address, {"model": "qwen3", "input": [user("Hi")], "store": True}).json()["id"] for _ in range(3)]
        auth = {"Authorization": f"Bearer {TOKEN}"}
        got = [HTTP.get(f"{address}/lmsp/v1/responses/{i}", headers=auth).status_code for i in kept]
        evicted = lmsp(address, {"model": "qwen3", "input": [user("Hi")], "previous_response_id": kept[0]})
        alive = lmsp(address, {"model": "qwen3", "input": [user("Hi")], "previous_response_id": kept[2]})
        now[0] = 61.0
        expired = lmsp(address, {"model": "qwen3", "input": [user("Hi")], "previous_response_id": kept[2]})
        gone = HTTP.get(f"{address}/lmsp/v1/responses/{kept[2]}", headers=auth)
    assert got == [404, 200, 200] and len(store) == 0
    is_problem(evicted, "response_not_found")
    assert alive.status_code == 200
    is_problem(expired, "response_not_found")
    is_problem(gone, "response_not_found")


def test_a_stored_response_keeps_its_conversation_once():
    """Each link of a previous_response_id chain stores the merged conversation as one list: the next link
    extends that list, not a chain of lists."""
    store = ResponseStore()
    with gateway(store=store) as address:
        previous = None
        for word in ("one", "two", "three"):
            body = {"model": "qwen3", "input": [user(word)], "store": True,
                    **({"previous_response_id": previous} if previous else {})}
            reply = lmsp(address, body).json()
            if previous:
                assert store.get(reply["id"]).conversation == [*store.get(previous).conversation, user(word),
                                                               *reply["output"]]
            previous = reply["id"]
    conversation = store.get(previous).conversation
    assert [item.get("role") for item in conversation if item["type"] == "message"] == ["user", "assistant"] * 3


def test_response_ids_are_unguessable(url):
    random.seed(0)
    first = [random_ids("resp") for _ in range(3)]
    random.seed(0)  # (reseeding the random module does not replay them: they come from secrets)
    assert [random_ids("resp") for _ in range(3)] != first
    ids = {random_ids("resp") for _ in range(500)}
    assert len(ids) == 500 and all(re.fullmatch(r"resp_[0-9A-HJKMNP-TV-Z]{26}", i) for i in ids)
    served = lmsp(url, {"model": "qwen3", "input": [user("Hi")]}).json()["id"]
    assert re.fullmatch(r"resp_[0-9A-HJKMNP-TV-Z]{26}", served)


@pytest.mark.parametrize("header, ok", [
    (f"Bearer {TOKEN}".encode(), True), (f"bearer {TOKEN}".encode(), True), (f"BEARER  {TOKEN}".encode(), True),
    (f"Basic {TOKEN}".encode(), False), (b"Bearer " + TOKEN.encode()[:-1], False), (b"Bearer", False),
    ("Bearer s3cret-tokén".encode("latin-1"), False), (b"Bearer \xff\xfe", False),
], ids=["Bearer", "bearer", "BEARER-spaces", "Basic", "prefix", "no-credentials", "latin-1", "not-text"])
def test_bearer_tokens(url, header, ok):
    reply = HTTP.post(f"{url}/lmsp/v1/responses", content=json.dumps({"model": "qwen3", "input": [user("Hi")]}),
                       headers={"Authorization": header, "Content-Type": "application/json"})
    if ok:
        assert reply.status_code == 200
    else:
        is_problem(reply, "unauthorized")
        assert reply.headers["www-authenticate"].startswith("Bearer")


def test_each_request_is_logged_with_its_id_and_never_its_body(url, caplog):
    with caplog.at_level(logging.INFO, logger="grammar_parse.serving._server"):
        reply = lmsp(url, {"model": "qwen3", "input": [user("PRIVATE-WORDS")]})
        missing = HTTP.get(f"{url}/nowhere%0A", headers={"Authorization": f"Bearer {TOKEN}"})
        lines = logged(caplog, reply.headers["x-request-id"], missing.headers["x-request-id"])
    assert re.fullmatch(rf'request_id={reply.headers["x-request-id"]} method=POST path="/lmsp/v1/responses" '
                        r"status=200 duration_ms=\d+\.\d", lines[0])
    assert re.fullmatch(rf'request_id={missing.headers["x-request-id"]} method=GET path="/nowhere\\n" '
                        r"status=404 duration_ms=\d+\.\d", lines[1])  # (the path escaped: one line per request)
    assert "PRIVATE-WORDS" not in caplog.text


def logged(caplog: pytest.LogCaptureFixture, *request_ids: str) -> list[str]:
    """The log line of each request (written once its response is sent: waited for, up to 10 s)."""
    for _ in range(1000):
        lines = [next((r.getMessage() for r in caplog.records if r.getMessage().startswith(f"request_id={i} method=")),
                      None) for i in request_ids]
        if all(lines):
            return lines  # type: ignore[return-value]
        time.sleep(0.01)
    raise AssertionError(f"no log line for the requests {request_ids}")


class SlowBackend:
    """Pieces a little at a time; says when its pieces are closed (a client that left stops it)."""

    def __init__(self) -> None:
        self.pulled = 0
        self.started, self.closed = threading.Event(), threading.Event()
        self.pieces = tokens(SAMPLES["answer"])

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        return Generation(pieces=self._emit(), input_tokens=1, output_tokens=len(self.pieces))

    async def _emit(self) -> AsyncIterator[str]:
        import asyncio

        try:
            for piece in self.pieces:
                self.pulled += 1
                if self.pulled == 2:
                    self.started.set()
                await asyncio.sleep(0.05)
                yield piece
        finally:
            self.closed.set()


@pytest.mark.parametrize("path, body", [
    ("/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")]}),
    ("/v1/chat/completions", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}),
], ids=["lmsp", "chat"])
def test_a_generation_stops_when_its_client_leaves_without_streaming(path, body):
    backend = SlowBackend()
    with gateway(backend=backend) as address:
        data = json.dumps(body).encode()
        host, port = address.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=20) as sock:
            sock.sendall(post_head(path, {"Content-Length": str(len(data))}) + data)
            assert backend.started.wait(20)
        assert backend.closed.wait(20), "the generation went on after its client left"
    assert backend.pulled < len(backend.pieces)


BACKEND_FAILURES = [
    (RuntimeError("SECRET upstream detail"), "upstream_failed"),
    (UpstreamError("http://10.1.2.3:9/v1/completions dropped SECRET", code="upstream.reset"), "upstream_failed"),
    (UpstreamError("http://10.1.2.3:9/v1/completions sent nothing SECRET", code="upstream.timeout"), "upstream_timeout"),
]


@pytest.mark.parametrize("error, code", BACKEND_FAILURES, ids=["exception", "reset", "timeout"])
def test_a_backend_failing_mid_generation_ends_the_response_cleanly(error, code, caplog):
    with gateway(backend=FailingBackend(error)) as address, caplog.at_level(logging.INFO):
        sync = lmsp(address, {"model": "qwen3", "input": [user("Hi")]})
        streamed = lmsp(address, {"model": "qwen3", "input": [user("Hi")], "stream": True})
        chat_sync = chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]})
        with pytest.raises(openai.APIError) as chat_streamed:
            accumulate(client(address).chat.completions.create(
                model="qwen3", messages=[{"role": "user", "content": "Hi"}], stream=True))
    is_problem(sync, code)
    is_problem(chat_sync, code)
    events = parse_sse(streamed.text)
    check_stream(events)
    assert events[-1]["event"] == "response.failed" and events[-1]["data"]["error"]["code"] == code
    assert chat_streamed.value.code == code
    for said in (sync.text, streamed.text, chat_sync.text, str(chat_streamed.value)):
        assert "SECRET" not in said and "10.1.2.3" not in said and "Traceback" not in said
    assert "SECRET" in caplog.text  # (the server's log has it)


def test_a_backend_that_cannot_start_is_a_502():
    class Refusing(ReplayBackend):
        def start(self, request: dict[str, Any], prompt: str) -> Generation:
            raise UpstreamError("could not connect to http://10.1.2.3:9/v1/completions", code="upstream.unreachable")

    with gateway(backend=Refusing()) as address:
        reply = lmsp(address, {"model": "qwen3", "input": [user("Hi")]})
    assert "10.1.2.3" not in is_problem(reply, "upstream_failed")["detail"]


# ---------------------------------------------------------------------------- the command line
def test_serve_token_sources(tmp_path, monkeypatch):
    from grammar_parse._cli import _serve_token

    token_file = tmp_path / "token"
    token_file.write_text("from-file\n", encoding="utf-8")
    monkeypatch.setenv("GRAMMAR_PARSE_TOKEN", "from-env")
    parse = build_argparser().parse_args
    assert _serve_token(parse(["serve", "--token", "given"])) == "given"
    assert _serve_token(parse(["serve", "--token-file", str(token_file)])) == "from-file"
    assert _serve_token(parse(["serve"])) == "from-env"
    monkeypatch.delenv("GRAMMAR_PARSE_TOKEN")
    assert _serve_token(parse(["serve"])) is None


def free_port() -> int:
    with socket.socket() as sock:  # a port nothing listens on: an upstream that refuses connections
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class FakeUpstream:
    """An OpenAI-compatible completions server (ASGI) streaming the replay samples, chosen from the prompt
    as the replay backend chooses from the request; it keeps the bodies it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        data = b""
        while True:
            message = await receive()
            data += message.get("body", b"")
            if not message.get("more_body"):
                break
        body = json.loads(data)
        self.bodies.append(body)
        prompt = body["prompt"]
        last_turn = prompt.rsplit("<|im_start|>", 2)[-2]
        name = "after_tool" if "<tool_response>" in last_turn else "tool_call" if "get_weather" in prompt else "answer"
        pieces = tokens(SAMPLES[name])[:body.get("max_tokens") or None]
        frames = [{"choices": [{"index": 0, "text": piece, "finish_reason": None}]} for piece in pieces]
        frames.append({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 11, "completion_tokens": len(pieces), "total_tokens": 11 + len(pieces)}})
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        stream = "".join(f"data: {json.dumps(frame)}\n\n" for frame in frames) + "data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": stream.encode()})


def test_an_upstream_that_refuses_connections_is_a_502():
    from grammar_parse.serving._backends import UpstreamBackend

    upstream = f"http://127.0.0.1:{free_port()}/v1"
    with gateway(backend=UpstreamBackend(upstream)) as address:
        replies = [lmsp(address, {"model": "qwen3", "input": [user("Hi")]}),
                   chat(address, {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]})]
    for reply in replies:
        assert upstream not in is_problem(reply, "upstream_failed")["detail"]


def test_the_serve_command_is_a_gateway_to_an_upstream(tmp_path):
    """grammar-parse serve --upstream URL --model-dir DIR --grammar auto: both APIs, the token from its file."""
    pytest.importorskip("jinja2")
    model = tmp_path / "model"
    model.mkdir()
    (model / "chat_template.jinja").write_text(QWEN3_TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "token").write_text("file-token\n", encoding="utf-8")
    fake = FakeUpstream()
    upstream = uvicorn.Server(uvicorn.Config(fake, host="127.0.0.1", port=0, log_level="error", lifespan="off"))
    thread = threading.Thread(target=upstream.run, daemon=True)
    thread.start()
    for _ in range(1000):
        if upstream.started:
            break
        time.sleep(0.01)
    upstream_url = "http://127.0.0.1:%d/v1" % upstream.servers[0].sockets[0].getsockname()[1]
    command = [sys.executable, "-m", "grammar_parse", "serve", "--port", "0", "--upstream", upstream_url,
               "--upstream-model", "qwen3-upstream", "--model", "qwen3", "--model-dir", str(model),
               "--grammar", "auto", "--token-file", str(tmp_path / "token"), "--log-level", "warning",
               "--upstream-body", '{"skip_special_tokens": false}', "--header-timeout", "3",
               "--store", "memory", "--store-bytes", "1000000", "--send-timeout", "5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "GRAMMAR_PARSE_TOKEN": "env-token"})
    stack = contextlib.ExitStack()
    try:
        line = process.stdout.readline()  # printed once the port is bound: the address answers at once
        address = re.search(r"at (http://127\.0\.0\.1:\d+):", line).group(1)
        assert HTTP.get(f"{address}/health").json() == {"status": "ok"}
        api = stack.enter_context(openai.OpenAI(base_url=f"{address}/v1", api_key="file-token", max_retries=0,
                                                timeout=20))
        assert [m.id for m in api.models.list().data] == ["qwen3"]
        first = api.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": "Weather?"}],
                                            tools=CHAT_TOOLS, max_tokens=200)
        answer = lmsp(address, {"model": "qwen3", "input": [user("Hi")]}, token="file-token")
        refused = lmsp(address, {"model": "qwen3", "input": [user("Hi")]}, token="env-token")
    finally:
        stack.close()
        process.terminate()
        process.communicate(timeout=20)
        upstream.should_exit = True
        thread.join(10)
    assert first.choices[0].message.tool_calls[0].function.name == "get_weather"
    assert first.usage.prompt_tokens == 11  # (the upstream's count)
    assert text_of(answer.json()).startswith("Hello!")
    is_problem(refused, "unauthorized")  # (--token-file wins over the environment)
    assert [(b["model"], b.get("max_tokens")) for b in fake.bodies] == [("qwen3-upstream", 200), ("qwen3-upstream", None)]
    assert all(b["skip_special_tokens"] is False for b in fake.bodies)
    assert fake.bodies[0]["prompt"].endswith("<|im_start|>assistant\n") and "get_weather" in fake.bodies[0]["prompt"]


def test_shutdown_closes_the_backend_and_the_store():
    """The lifespan's shutdown closes what the app holds open (an upstream backend's connections, a shared
    store's), then says it is done."""
    import asyncio

    closed: list[str] = []

    class Closing(ReplayBackend):
        async def aclose(self) -> None:
            closed.append("backend")

    class ClosingStore(ResponseStore):
        async def aclose(self) -> None:
            closed.append("store")

    app = app_with(backend=Closing(), store=ClosingStore())
    events = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return next(events)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
    asyncio.run(app({"type": "lifespan"}, receive, send))
    assert closed == ["backend", "store"]
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
