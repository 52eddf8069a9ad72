"""LMSP 1.0 Responses: items and events from parsed output, validated against the protocol's schemas,
and the reference endpoint tested end to end on loopback with a real HTTP client."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grammar_parse.adapters.lmsp import ResponseStream, parse_sse, respond, schema_validator, sse
from grammar_parse.serving._server import LMSPApp, ReplayBackend, tokens, uvicorn_config

uvicorn = pytest.importorskip("uvicorn")  # in the test extra
httpx = pytest.importorskip("httpx")

EVENT, RESPONSE = schema_validator("event"), schema_validator("response")
SAMPLE = (Path(__file__).resolve().parents[1] / "examples" / "qwen3_tool_call.txt").read_text(encoding="utf-8")
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather now",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def counter():
    n = itertools.count(1)
    return lambda kind: f"{kind}_{next(n):026d}"


def valid(validator, obj) -> None:
    errors = list(validator.iter_errors(obj))
    assert not errors, f"{errors[0].message} at {list(errors[0].absolute_path)} in {json.dumps(obj)[:300]}"


def check_stream(events: list[dict[str, Any]]) -> None:
    """Ids 1..n strictly increasing, every frame valid, exactly one final event, last."""
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    for e in events:
        valid(EVENT, e)
    finals = [e for e in events if e["event"] in ("response.completed", "response.incomplete", "response.failed",
                                                  "response.cancelled")]
    assert len(finals) == 1 and events[-1] is finals[0]
    assert events[0]["event"] == "response.created"


def rebuild(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output array a client assembles from the stream: items as done, in output_index order."""
    done = {e["data"]["output_index"]: e["data"]["item"] for e in events if e["event"] == "response.output_item.done"}
    texts: dict[int, str] = {}
    for e in events:
        if e["event"].endswith(".delta"):
            texts[e["data"]["output_index"]] = texts.get(e["data"]["output_index"], "") + e["data"]["delta"]
    for index, item in done.items():  # the deltas add up to what each done item says
        said = item.get("arguments") if item["type"] == "function_call" else (
            (item.get("content") or item.get("summary"))[0]["text"])
        assert texts.get(index, "") == said
    return [done[i] for i in sorted(done)]


# ---------------------------------------------------------------------------- pure items and events
@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_stream_and_one_shot_describe_the_same_output(size):
    stream = ResponseStream("qwen3", "", ids=counter())
    events = []
    for i in range(0, len(SAMPLE), size):
        events += stream.feed(SAMPLE[i:i + size])
    events += stream.complete(12, 40)
    check_stream(events)
    response = stream.response(model="qwen3", created_at=1)
    valid(RESPONSE, response)
    assert rebuild(events) == response["output"]
    assert [item["type"] for item in response["output"]] == ["reasoning", "message", "function_call", "function_call"]
    assert json.loads(response["output"][2]["arguments"]) == {"city": "Paris", "unit": "celsius"}
    assert respond(SAMPLE, "qwen3", prefix="", model="qwen3", created_at=1, ids=counter(), input_tokens=12,
                   output_tokens=40) == response
    assert parse_sse("".join(map(sse, events))) == events


# Characters str.splitlines() breaks lines at that an event stream does not, and that JSON data holds
# verbatim (it escapes the control characters among them).
NOT_LINE_ENDS = ["\u2028", "\u2029", "\x85"]


@pytest.mark.parametrize("char", NOT_LINE_ENDS, ids=[f"U+{ord(c):04X}" for c in NOT_LINE_ENDS])
def test_sse_lines_end_only_at_cr_and_lf(char):
    stream = ResponseStream("qwen3", "", ids=counter())
    events = stream.feed(f"a{char}b<|im_end|>") + stream.complete()
    wire = "".join(map(sse, events))
    assert char in wire  # (the JSON keeps it verbatim, so the parser must not split there)
    assert parse_sse(wire) == events


FRAMINGS = [("LF", "\n"), ("CRLF", "\r\n"), ("CR", "\r")]


@pytest.mark.parametrize("name, end", FRAMINGS, ids=[name for name, _ in FRAMINGS])
def test_sse_frames_in_any_line_ending_comments_and_split_data(name, end):
    frames = [["id: 1", "event: a", 'data: {"x":', "data: 1}", ""], [": keep-alive", ""],
              ["id:2", "event:b", "data:[]", ""]]
    text = "".join(line + end for frame in frames for line in frame)
    assert parse_sse(text) == [{"id": 1, "event": "a", "data": {"x": 1}}, {"id": 2, "event": "b", "data": []}]


def test_truncation_closes_regions_and_keeps_them():
    stream = ResponseStream("qwen3", "", ids=counter())
    events = stream.feed("<think>Half a thought") + stream.complete(3, 5, truncated=True)
    check_stream(events)
    assert events[-1]["data"]["incomplete_details"] == {"reason": "max_output_tokens"}
    response = stream.response(model="qwen3", created_at=1)
    assert response["status"] == "incomplete" and response["output"][0]["summary"][0]["text"] == "Half a thought"
    valid(RESPONSE, response)


@pytest.mark.parametrize(("end", "final"), [("fail", "response.failed"), ("cancel", "response.cancelled")])
def test_a_stream_ended_before_its_first_piece_still_starts_with_created(end, final):
    stream = ResponseStream("qwen3", "", ids=counter())
    events = stream.fail({"code": "upstream_failed"}) if end == "fail" else stream.cancel()
    assert [(e["id"], e["event"]) for e in events] == [(1, "response.created"), (2, final)]


def test_parse_failure_ends_the_stream_with_a_problem():
    stream = ResponseStream("qwen3", "", ids=counter())
    events = stream.feed("<tool_call>{not json</tool_call>") + stream.complete()
    check_stream(events)
    assert events[-1]["event"] == "response.failed" and events[-1]["data"]["error"]["code"] == "parse_failed"



BROKEN_CALL = 'Hi.<tool_call>\n{"name": "f", "arguments": {"a": 1</tool_call>'


@pytest.mark.parametrize("strict, status, output", [
    (None, "failed", []),  # the default is strict, as for ResponseStream and ChatCompletionsStream
    (True, "failed", []),
    (False, "completed", [("message", None, None), ("function_call", "f", {"a": 1})]),
], ids=["default", "strict", "lenient"])
def test_respond_is_strict_unless_told_otherwise(strict, status, output):
    kwargs = {} if strict is None else {"strict": strict}
    response = respond(BROKEN_CALL, "qwen3", prefix="", model="m", created_at=0, ids=counter(), **kwargs)
    valid(RESPONSE, response)
    assert response["status"] == status
    assert (response["error"] or {}).get("code") == ("parse_failed" if status == "failed" else None)
    # lenient: the broken call is a function_call item with the valid part of its arguments, closed
    assert [(item["type"], item.get("name"), json.loads(item["arguments"]) if "arguments" in item else None)
            for item in response["output"]] == output

def test_model_written_call_ids_are_kept():
    stream = ResponseStream("kimi_k2", "", ids=counter())
    text = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
            '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>')
    stream.feed(text)
    stream.complete()
    item = stream.response(model="m", created_at=0)["output"][0]
    assert item["call_id"] == "functions.get_weather:0" and item["name"] == "get_weather"


def test_tools_given_as_any_iterable_type_the_streamed_arguments():
    tools = [{"name": "set", "parameters": {"properties": {"n": {"type": "integer"}}}}]
    text = '<tool_call>{"name": "set", "arguments": {"n": "7"}}</tool_call>'
    streams = [ResponseStream("qwen3", "", tools=given, ids=counter()) for given in (tools, iter(tools))]
    deltas = [[e["data"]["delta"] for e in s.feed(text) + s.complete()
               if e["event"] == "response.function_call_arguments.delta"] for s in streams]
    assert "".join(deltas[0]) == '{"n": 7}' and deltas[1] == deltas[0]


# ---------------------------------------------------------------------------- the endpoint on loopback
class Server:
    """The app under uvicorn with the configuration serve() runs, on 127.0.0.1 and a free port."""

    def __init__(self, app: LMSPApp, *, log_level: str = "error", **options: Any) -> None:
        self.server = uvicorn.Server(uvicorn_config(app, "127.0.0.1", 0, log_level=log_level, **options))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        for _ in range(1000):
            if self.server.started:
                break
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture()
def served() -> Iterator[tuple[str, LMSPApp]]:
    app = LMSPApp(grammar="qwen3", model="qwen3", token="secret", ids=counter(), clock=lambda: 1794200000)
    with Server(app) as url:
        yield url, app


def post(url: str, body: Any, token: str | None = "secret", **kw: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(f"{url}/lmsp/v1/responses", content=data, headers={**headers, "Content-Type": "application/json"},
                      timeout=10, **kw)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_sync_and_stream_describe_the_same_output(served):
    url, _ = served
    sync = post(url, {"model": "qwen3", "input": [user("Hi")]})
    assert sync.status_code == 200
    response = sync.json()
    valid(RESPONSE, response)
    assert response["status"] == "completed" and response["usage"]["output_tokens"] > 0
    streamed = post(url, {"model": "qwen3", "input": [user("Hi")], "stream": True})
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(streamed.text)
    check_stream(events)
    output = rebuild(events)
    strip_ids = lambda items: [{k: v for k, v in i.items() if k != "id"} for i in items]  # noqa: E731
    assert strip_ids(output) == strip_ids(response["output"])
    assert [i["type"] for i in output] == ["reasoning", "message"]


def test_tool_call_round_trip(served):
    url, _ = served
    first = post(url, {"model": "qwen3", "input": [user("Weather in Hangzhou?")], "tools": TOOLS}).json()
    call = next(item for item in first["output"] if item["type"] == "function_call")
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Hangzhou"}
    follow = {"model": "qwen3", "tools": TOOLS, "input": [
        user("Weather in Hangzhou?"), {k: call[k] for k in ("type", "call_id", "name", "arguments")},
        {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temperature_c": 17}'}]}
    second = post(url, follow)
    assert second.status_code == 200, second.text
    text = next(item for item in second.json()["output"] if item["type"] == "message")["content"][0]["text"]
    assert "17 degrees" in text
    wrong = post(url, {**follow, "input": follow["input"][:1] + follow["input"][2:]})
    assert wrong.status_code == 400 and wrong.json()["code"] == "invalid_request"


def test_max_output_tokens_gives_response_incomplete(served):
    url, _ = served
    events = parse_sse(post(url, {"model": "qwen3", "input": [user("Hi")], "stream": True,
                                  "max_output_tokens": 5}).text)
    check_stream(events)
    assert events[-1]["event"] == "response.incomplete"
    assert events[-1]["data"]["incomplete_details"]["reason"] == "max_output_tokens"
    sync = post(url, {"model": "qwen3", "input": [user("Hi")], "max_output_tokens": 5}).json()
    assert sync["status"] == "incomplete" and sync["usage"]["output_tokens"] == 5


@pytest.mark.parametrize("body, token, status, code", [
    ({"model": "qwen3", "input": [user("Hi")]}, None, 401, "unauthorized"),
    ({"model": "qwen3", "input": [user("Hi")]}, "wrong", 401, "unauthorized"),
    (b"{not json", "secret", 400, "invalid_request"),
    ({"model": "qwen3"}, "secret", 400, "invalid_request"),
    ({"model": "qwen3", "input": [user("Hi")], "max_output_tokens": 0}, "secret", 400, "invalid_request"),
    ({"model": "other", "input": [user("Hi")]}, "secret", 404, "model_not_found"),
    ({"model": "qwen3", "input": [user("Hi")], "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object"}}}}, "secret", 400, "unsupported_capability"),
])
def test_errors_are_problem_documents(served, body, token, status, code):
    url, _ = served
    reply = post(url, body, token=token)
    assert reply.status_code == status
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.json()["code"] == code
    valid(schema_validator("problem"), reply.json())


def test_tools_need_a_grammar_with_tool_calls():
    app = LMSPApp(grammar={"start_anchor": "A", "fields": {"content": {}}}, model="plain", ids=counter())
    with Server(app) as url:
        reply = post(url, {"model": "plain", "input": [user("Hi")], "tools": TOOLS}, token=None)
    assert reply.status_code == 400 and reply.json()["code"] == "unsupported_capability"


def test_stored_responses_and_unknown_ids(served):
    url, app = served
    kept = post(url, {"model": "qwen3", "input": [user("Hi")], "store": True}).json()
    got = httpx.get(f"{url}/lmsp/v1/responses/{kept['id']}", headers={"Authorization": "Bearer secret"})
    assert got.status_code == 200 and got.json() == kept
    missing = httpx.get(f"{url}/lmsp/v1/responses/resp_nope", headers={"Authorization": "Bearer secret"})
    assert missing.status_code == 404 and missing.json()["code"] == "response_not_found"
    not_kept = post(url, {"model": "qwen3", "input": [user("Hi")]}).json()
    assert httpx.get(f"{url}/lmsp/v1/responses/{not_kept['id']}",
                     headers={"Authorization": "Bearer secret"}).status_code == 404


class ClosingBackend(ReplayBackend):
    """The replay backend, slowed down, saying when a generation's pieces are closed."""

    def __init__(self) -> None:
        super().__init__(delay=0.02)
        self.closed = threading.Event()

    def start(self, request: dict[str, Any], prompt: str) -> Any:
        generation = super().start(request, prompt)
        generation.pieces = self._watched(generation.pieces)
        return generation

    async def _watched(self, pieces: Any) -> Any:
        try:
            async for piece in pieces:
                yield piece
        finally:
            self.closed.set()


def test_closing_the_connection_stops_generation():
    backend = ClosingBackend()
    app = LMSPApp(grammar="qwen3", model="qwen3", backend=backend, ids=counter())
    with Server(app) as url:
        with httpx.stream("POST", f"{url}/lmsp/v1/responses", timeout=10,
                          json={"model": "qwen3", "input": [user("Hi")], "stream": True}) as reply:
            for _ in itertools.islice(reply.iter_lines(), 6):
                pass
        assert backend.closed.wait(10), "the generation's pieces were not closed when the client left"
        pulled = backend.pulled
    total = len(tokens(backend.samples["answer"]))
    assert pulled < total, "generation went on to the end after the client left"


def test_a_streamed_response_keeps_the_whole_conversation(served):
    """previous_response_id chains: a stored streamed response carries the history it continued, exactly
    as a stored synchronous one does (the next prompt, and so its input_tokens, are the same)."""
    url, _ = served

    def chain(stream_second: bool) -> int:
        first = post(url, {"model": "qwen3", "input": [user("Hi")], "store": True}).json()
        second = {"model": "qwen3", "input": [user("And then?")], "store": True, "previous_response_id": first["id"]}
        if stream_second:
            events = parse_sse(post(url, {**second, "stream": True}).text)
            second_id = events[-1]["data"]["response_id"]
        else:
            second_id = post(url, second).json()["id"]
        third = post(url, {"model": "qwen3", "input": [user("Bye")], "previous_response_id": second_id}).json()
        return third["usage"]["input_tokens"]

    assert chain(stream_second=True) == chain(stream_second=False)


# ---------------------------------------------------------------------------- prompts from the chat template
class RecordingBackend(ReplayBackend):
    """The replay backend, keeping the prompts it was asked to continue."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    def start(self, request: dict[str, Any], prompt: str) -> Any:
        self.prompts.append(prompt)
        return super().start(request, prompt)


CHAT_TEMPLATES = Path(__file__).resolve().parent / "data" / "chat_templates"


def test_prompts_are_rendered_with_the_model_s_chat_template():
    pytest.importorskip("jinja2")
    from grammar_parse import load_chat_template, render_prompt

    template = load_chat_template(CHAT_TEMPLATES / "Qwen-Qwen3-0.6B.jinja")
    backend = RecordingBackend()
    app = LMSPApp(grammar="qwen3", model="qwen3", backend=backend, ids=counter(), chat_template=template)
    with Server(app) as url:
        first = post(url, {"model": "qwen3", "input": [user("Weather in Hangzhou?")], "tools": TOOLS}, token=None).json()
        call = next(item for item in first["output"] if item["type"] == "function_call")
        follow = [user("Weather in Hangzhou?"), {k: call[k] for k in ("type", "call_id", "name", "arguments")},
                  {"type": "function_call_output", "call_id": call["call_id"], "output": '{"temperature_c": 17}'}]
        second = post(url, {"model": "qwen3", "tools": TOOLS, "input": follow}, token=None)
        assert second.status_code == 200, second.text
    tools = [{"type": "function", "function": {k: TOOLS[0][k] for k in ("name", "description", "parameters")}}]
    assert backend.prompts[0] == render_prompt([{"role": "user", "content": "Weather in Hangzhou?"}], template, tools=tools)
    assert backend.prompts[1] == render_prompt([
        {"role": "user", "content": "Weather in Hangzhou?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call["call_id"], "type": "function", "function": {
            "name": "get_weather", "arguments": {"city": "Hangzhou"}}}]},
        {"role": "tool", "tool_call_id": call["call_id"], "content": '{"temperature_c": 17}'}], template, tools=tools)
    assert "<tool_response>\n{\"temperature_c\": 17}\n</tool_response>" in backend.prompts[1]


def test_without_a_chat_template_the_prompt_ends_in_the_grammar_s_anchor():
    """gpt-oss's anchor is <|start|>assistant: a ChatML prompt ending in <|im_start|>assistant would be read
    as output (the user's question coming back as the answer)."""
    import warnings

    backend = RecordingBackend()
    backend.samples["answer"] = "<|channel|>final<|message|>Hello.<|return|>"
    app = LMSPApp(grammar="gpt_oss", model="gpt-oss", backend=backend, ids=counter())
    with Server(app) as url, warnings.catch_warnings():
        warnings.simplefilter("error")
        reply = post(url, {"model": "gpt-oss", "input": [user("Say hello")]}, token=None).json()
    assert backend.prompts[0].endswith("<|start|>assistant")
    text = next(item for item in reply["output"] if item["type"] == "message")["content"][0]["text"]
    assert text == "Hello."


def test_a_template_s_refusal_is_the_client_s_error_and_nothing_else_leaks():
    pytest.importorskip("jinja2")
    from grammar_parse import ChatTemplate

    refusing = ChatTemplate("{% if messages|length > 1 %}{{ raise_exception('Only one message, please.') }}{% endif %}"
                            "{{ messages[0].content }}<|im_start|>assistant\n", origin="/srv/models/x/chat_template.jinja")
    broken = ChatTemplate("{{ messages[0].content.nope.deeper }}<|im_start|>assistant\n", origin="/srv/models/x/t.jinja")
    for template, status in ((refusing, 400), (broken, 500)):
        app = LMSPApp(grammar="qwen3", model="qwen3", ids=counter(), chat_template=template)
        with Server(app) as url:
            reply = post(url, {"model": "qwen3", "input": [user("a"), user("b")]}, token=None)
        assert reply.status_code == status and reply.headers["content-type"] == "application/problem+json"
        body = reply.json()
        assert "/srv/models" not in reply.text and "jinja" not in reply.text
        if status == 400:
            assert body["code"] == "invalid_request" and body["detail"].endswith("Only one message, please.")
        else:
            assert body["code"] == "internal_error"
