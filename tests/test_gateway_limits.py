"""The gateway bounds every client and upstream (issue 32, items 4, 5, 7, 8 and 11): a client that does not
read, numbers and lone surrogates in a request, a model output with a lone surrogate followed up, an
upstream that ignores max_tokens or never ends an event, the response store's bytes, upstream usage that
is no count, usage the gateway estimated, and a template's long refusal. Real servers on 127.0.0.1 where
the behaviour is the network's (uvicorn for the gateway, the loopback upstream); the ASGI app called
directly where it is the app's."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from grammar_parse.serving._backends import CallableBackend, UpstreamBackend, UpstreamError, tokens
from grammar_parse.templates._chat_template import ChatTemplate
from grammar_parse.errors import ArgumentError
from grammar_parse.adapters.lmsp import parse_sse
from grammar_parse.serving._server import NUMERIC_FIELDS, Limits, LMSPApp
from grammar_parse.serving.store import ResponseStore, entry_json

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
from test_upstream import generate, run  # noqa: E402  (one generation through an UpstreamBackend, bounded)
from upstream_server import Gateway, Upstream  # noqa: E402

LONE = "\ud800"  # (what json.loads makes of the escape "\\ud800": no character, and no UTF-8 for it)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def asgi(app: LMSPApp, path: str, body: Any) -> tuple[int, dict[str, str], bytes]:
    """One request to the app, called directly: (status, headers, body)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": data, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.sleep(3600)  # (the client stays: no disconnect)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST" if body is not None else "GET", "path": path,
             "headers": [(b"content-type", b"application/json")]}
    asyncio.run(asyncio.wait_for(app(scope, receive, send), 20))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def strict_model(output: str) -> CallableBackend:
    """A model that, like a model server's client, needs its prompt as UTF-8, and writes ``output``."""
    def model(prompt: str, request: dict[str, Any]) -> str:
        prompt.encode("utf-8")  # (UnicodeEncodeError on a lone surrogate, as httpx's JSON encoding raises)
        return output
    return CallableBackend(model)


# ---------------------------------------------------------------------------- 4: a client that never reads
def endless(closed: list[bool]) -> CallableBackend:
    """A model that writes for ever (until its pieces are closed, which it records)."""
    async def model(prompt: str, request: dict[str, Any]) -> AsyncIterator[str]:
        try:
            while True:
                yield "word " * 800
                await asyncio.sleep(0)
        finally:
            closed.append(True)
    return CallableBackend(model)


STALLED = [("/lmsp/v1/responses", {"input": [user("Hi")]}),
           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})]


@pytest.mark.parametrize("path, fields", STALLED, ids=["lmsp", "chat"])
def test_a_client_that_never_reads_frees_its_slot_within_the_send_timeout(path, fields):
    """Over a real connection: a streaming client that reads nothing holds the only request slot until
    the send timeout, then its generation is closed and the slot serves the next client."""
    closed: list[bool] = []
    app = LMSPApp(backend=endless(closed), limits=Limits(max_concurrent=1, send_timeout=0.5))
    body = json.dumps({"model": "qwen3", **fields, "stream": True}).encode()
    with Gateway(app) as url:
        port = int(url.rsplit(":", 1)[1])
        stalled = socket.socket()
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (small buffers fill sooner)
        stalled.connect(("127.0.0.1", port))
        stalled.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))
        try:
            deadline = time.monotonic() + 3
            while app.in_progress == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert app.in_progress == 1
            busy = httpx.post(f"{url}/lmsp/v1/responses", json={"model": "qwen3", "input": [user("Hi")]})
            assert busy.status_code == 503  # (the stalled client has the slot)
            started = time.monotonic()
            while (app.in_progress or not closed) and time.monotonic() - started < 8:
                time.sleep(0.02)
            freed = time.monotonic() - started
            assert closed == [True] and app.in_progress == 0, f"still held after {freed:.1f} s"
            served = httpx.post(f"{url}/lmsp/v1/responses", json={"model": "qwen3", "input": [user("Hi")]})
            assert served.status_code != 503
        finally:
            stalled.close()


def test_the_send_timeout_is_a_limit_with_a_default():
    assert Limits().send_timeout == 30.0 and Limits(send_timeout=2).send_timeout == 2


# ---------------------------------------------------------------------------- 5: numbers and lone surrogates
# Each numeric field (both endpoints where the field exists) with a value too large for a double (1e400
# parses to inf), and one beyond its range: each is a 400 naming the field, never an upstream failure.
def _numeric_cases() -> Iterator[tuple[str, str, Any, str]]:
    lmsp_fields = ("temperature", "max_output_tokens")  # (the LMSP request schema takes no other)
    for name, (low, high, integer) in NUMERIC_FIELDS.items():
        for path in ("/v1/chat/completions", "/lmsp/v1/responses"):
            if path.startswith("/lmsp") and name not in lmsp_fields:
                continue
            if name == "max_output_tokens" and path.startswith("/v1"):
                continue
            yield path, name, "1e400", name
            yield path, name, "-1e400", name
            over = str(int(high) + 1) if integer else repr(high + 0.5)
            yield path, name, over, name
    yield "/v1/chat/completions", "logit_bias", '{"42": 1e400}', "logit_bias/42"
    yield "/v1/chat/completions", "logit_bias", '{"42": -101}', "logit_bias/42"
    yield "/v1/chat/completions", "logit_bias", '{"x": 1}', "logit_bias"
    yield "/v1/chat/completions", "tools", ('[{"type": "function", "function": {"name": "f", "parameters": '
                                            '{"type": "number", "maximum": 1e999}}}]'), "tools/0/function/parameters/maximum"


@pytest.mark.parametrize("path, name, value, named", list(_numeric_cases()))
def test_a_number_out_of_range_is_a_400_naming_the_field(path, name, value, named):
    app = LMSPApp(backend=strict_model("Hi.<|im_end|>"))
    if path.startswith("/lmsp"):
        body = '{"model": "qwen3", "input": [%s], "%s": %s}' % (json.dumps(user("Hi")), name, value)
    else:
        body = '{"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], "%s": %s}' % (name, value)
    status, _, answer = asgi(app, path, body.encode())
    problem = json.loads(answer)
    assert (status, problem["code"]) == (400, "invalid_request"), problem
    assert problem["detail"].startswith(f"{named}:"), problem["detail"]


def test_numbers_in_range_still_reach_the_model():
    seen: list[dict[str, Any]] = []

    def model(prompt: str, request: dict[str, Any]) -> str:
        seen.append(request)
        return "Hi.<|im_end|>"

    app = LMSPApp(backend=CallableBackend(model))
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}], "temperature": 2, "top_p": 0,
            "presence_penalty": -2, "frequency_penalty": 2, "seed": -7, "logit_bias": {"42": -100}, "max_tokens": 5}
    status, _, _ = asgi(app, "/v1/chat/completions", body)
    assert status == 200 and seen[0]["logit_bias"] == {"42": -100} and seen[0]["temperature"] == 2


# Where a lone surrogate can sit in a request: a message's text, a tool's description, a call's arguments,
# a key of a tool's schema. Each reaches the model as U+FFFD, never as a failure of the model server.
LMSP_WITH_LONE = [
    ("message", {"input": [user(f"Hi {LONE} there")]}),
    ("tool description", {"input": [user("Hi")], "tools": [
        {"type": "function", "name": "f", "description": f"d{LONE}", "parameters": {"type": "object"}}]}),
    ("call arguments", {"input": [user("Hi"), {"type": "function_call", "call_id": "c1", "name": "f",
                                               "arguments": json.dumps({"x": LONE}, ensure_ascii=False)},
                                  {"type": "function_call_output", "call_id": "c1", "output": f"o{LONE}"}]}),
    ("schema key", {"input": [user("Hi")], "tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {f"k{LONE}": {}}}}]}),
]


@pytest.mark.parametrize("where, fields", LMSP_WITH_LONE, ids=[c[0] for c in LMSP_WITH_LONE])
@pytest.mark.parametrize("endpoint", ["lmsp", "chat"])
def test_a_lone_surrogate_in_a_request_reaches_the_model_as_a_replacement_character(endpoint, where, fields):
    prompts: list[str] = []

    def model(prompt: str, request: dict[str, Any]) -> str:
        # (what the model reads: the prompt, and the request's tools and items, encoded as a server would)
        prompts.append(prompt + json.dumps([request.get("tools"), request.get("input")], ensure_ascii=False))
        prompts[-1].encode("utf-8")
        return "Hi.<|im_end|>"

    app = LMSPApp(backend=CallableBackend(model))
    body = {"model": "qwen3", **fields}
    if endpoint == "chat":  # (the same content as Chat Completions messages and tools)
        items, tools = fields["input"], fields.get("tools")
        messages: list[dict[str, Any]] = []
        for item in items:
            if item.get("type") == "function_call":
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": item["call_id"], "type": "function",
                     "function": {"name": item["name"], "arguments": item["arguments"]}}]})
            elif item.get("type") == "function_call_output":
                messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
            else:
                messages.append({"role": "user", "content": item["content"][0]["text"]})
        body = {"model": "qwen3", "messages": messages, **({"tools": [
            {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}} for t in tools]}
            if tools else {})}
    path = "/lmsp/v1/responses" if endpoint == "lmsp" else "/v1/chat/completions"
    # (json.dumps writes the lone surrogate as the escape \ud800, as a client would send it)
    status, _, answer = asgi(app, path, json.dumps(body).encode())
    assert status == 200, answer
    assert LONE not in prompts[0]
    assert "\ufffd" in prompts[0]


def test_a_follow_up_of_a_response_whose_output_holds_a_lone_surrogate_is_served():
    """The model's own output (an upstream's \\ud800 escape) is kept, and replayed as a follow-up's input
    with U+FFFD in its place: the follow-up reaches the model, and the stored response reads back."""
    app = LMSPApp(backend=strict_model(f"Hi {LONE} there.<|im_end|>"))
    status, _, answer = asgi(app, "/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")], "store": True})
    assert status == 200
    first = json.loads(answer)
    assert first["output"][0]["content"][0]["text"] == f"Hi {LONE} there."  # (the output is what the model wrote)
    follow = {"model": "qwen3", "input": [user("And?")], "store": True, "previous_response_id": first["id"]}
    status, _, answer = asgi(app, "/lmsp/v1/responses", follow)
    assert status == 200, answer
    second = json.loads(answer)
    status, _, answer = asgi(app, "/lmsp/v1/responses", {**follow, "previous_response_id": second["id"]})
    assert status == 200, answer
    status, _, answer = asgi(app, f"/lmsp/v1/responses/{first['id']}", None)
    assert status == 200 and json.loads(answer)["id"] == first["id"]


# ---------------------------------------------------------------------------- 7: a lying upstream
SAMPLES = {"default": "Hello there, a few words.<|im_end|>"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream(SAMPLES, lifetime=120) as running:
        yield running


@pytest.mark.parametrize("request_, options, bound", [
    ({"max_output_tokens": 10}, {}, 10 * 64),  # max_tokens x 64 characters a token, by default
    ({"max_output_tokens": 10}, {"chars_per_token": 8}, 80),
    ({}, {"max_output_chars": 5000}, 5000),  # no max_tokens: the ceiling
    ({"max_output_tokens": 10**6}, {"max_output_chars": 5000}, 5000),  # the ceiling below max_tokens' bound
])
def test_an_upstream_that_ignores_max_tokens_is_cut_at_the_bound(upstream, request_, options, bound):
    name = f"flood-{bound}-{len(options)}-{len(request_)}"
    with pytest.raises(UpstreamError) as raised:
        run(generate(upstream.url, f"[[fault:flood]][[id:{name}]]", request_, **options))
    assert raised.value.code == "upstream.protocol" and f"{bound:,} characters" in str(raised.value)
    assert upstream.log(name)["disconnected"] is True  # (the upstream was closed, so it stops)


def test_the_output_bound_lets_a_full_answer_through(upstream):
    text = SAMPLES["default"]
    pieces, _ = run(generate(upstream.url, "[[id:within]]", {"max_output_tokens": len(tokens(text))},
                             chars_per_token=len(text) // len(tokens(text)) + 1))
    assert "".join(pieces) == text


@pytest.mark.parametrize("limit", [4096, 64 * 1024])
def test_data_lines_without_a_blank_line_are_cut_at_the_event_bound(upstream, limit):
    name = f"noblank-{limit}"
    with pytest.raises(UpstreamError) as raised:
        run(generate(upstream.url, f"[[fault:noblank]][[id:{name}]]", max_event_bytes=limit))
    assert raised.value.code == "upstream.protocol" and f"longer than {limit:,} bytes" in str(raised.value)
    assert upstream.log(name)["disconnected"] is True


def test_the_event_bound_is_four_mebibytes_by_default(upstream):
    with pytest.raises(UpstreamError) as raised:
        run(generate(upstream.url, "[[fault:noblank]][[id:noblank-default]]"))
    assert f"longer than {4 * 2**20:,} bytes" in str(raised.value)


def test_a_lying_upstream_behind_the_gateway_ends_in_a_clean_502(upstream):
    app = LMSPApp(backend=UpstreamBackend(upstream.url, max_output_chars=2000))
    with Gateway(app) as url:
        answer = httpx.post(f"{url}/lmsp/v1/responses", timeout=10, json={
            "model": "qwen3", "input": [user("[[fault:flood]][[id:gateway-flood]]")], "max_output_tokens": 5})
    assert answer.status_code == 502 and answer.json()["code"] == "upstream_failed"
    assert "Hello" not in answer.text and upstream.log("gateway-flood")["disconnected"] is True


# ---------------------------------------------------------------------------- 11: usage that is no count
@pytest.mark.parametrize("counts", ["-5,3", "1000000000000000000000000000000,3", "3,2147483648", "true,3",
                                    "1.5,3", '"7",3', "null,3"])
def test_upstream_usage_that_is_no_count_is_replaced_by_the_estimate(upstream, counts, caplog):
    prompt = f"[[usage:{counts}]][[id:usage-{counts}]]"
    with caplog.at_level(logging.WARNING, "grammar_parse.serving._backends"):
        pieces, generation = run(generate(upstream.url, prompt))
    assert generation.estimated is True
    assert (generation.input_tokens, generation.output_tokens) == (len(tokens(prompt)), len(pieces))
    assert any("not token counts" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("counts, expected", [("0,0", (0, 0)), ("12,2147483647", (12, 2**31 - 1))])
def test_upstream_usage_that_is_a_count_is_kept(upstream, counts, expected):
    _, generation = run(generate(upstream.url, f"[[usage:{counts}]]"))
    assert (generation.input_tokens, generation.output_tokens) == expected and generation.estimated is False


def test_estimated_usage_is_marked_on_every_endpoint():
    """A backend that counts no tokens (CallableBackend estimates): Chat Completions' usage says
    ``estimated``; LMSP's usage object takes no extra key, so its JSON answer has the header and its
    stream a comment line before the final event."""
    app = LMSPApp(backend=CallableBackend(lambda prompt, request: "Hi.<|im_end|>"))
    chat = {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}
    _, _, answer = asgi(app, "/v1/chat/completions", chat)
    assert json.loads(answer)["usage"]["estimated"] is True
    _, _, answer = asgi(app, "/v1/chat/completions", {**chat, "stream": True, "stream_options": {"include_usage": True}})
    usage = [json.loads(line[6:])["usage"] for line in answer.decode().split("\n\n")
             if line.startswith("data: {") and json.loads(line[6:]).get("usage")]
    assert usage[-1]["estimated"] is True
    _, headers, _ = asgi(app, "/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")]})
    assert headers.get("x-usage-estimated") == "true"
    _, _, answer = asgi(app, "/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")], "stream": True})
    text = answer.decode()
    assert ": usage estimated" in text.split("event: response.completed")[0].rsplit("\n\n", 1)[-1]
    assert [e["event"] for e in parse_sse(text)][-1] == "response.completed"


def test_counted_usage_is_not_marked(upstream):
    app = LMSPApp(backend=UpstreamBackend(upstream.url))
    with Gateway(app) as url:
        chat = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
            "model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]})
        lmsp = httpx.post(f"{url}/lmsp/v1/responses", timeout=10, json={"model": "qwen3", "input": [user("Hi")]})
    assert chat.status_code == 200 and "estimated" not in chat.json()["usage"]
    assert lmsp.status_code == 200 and "x-usage-estimated" not in lmsp.headers


@pytest.mark.parametrize("size", [400, 5000, 100_000])
def test_a_templates_refusal_is_shortened(size):
    template = ChatTemplate("{{ raise_exception('" + "no " * (size // 3) + "') }}")
    app = LMSPApp(chat_template=template)
    status, _, answer = asgi(app, "/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")]})
    detail = json.loads(answer)["detail"]
    assert status == 400 and "no no" in detail
    prefix = "the model's chat template refuses this conversation: "
    assert detail.startswith(prefix) and len(detail) <= len(prefix) + 300 + len("...")


# ---------------------------------------------------------------------------- 8: the store's bytes
def entry(number: int, pad: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return {"id": f"resp_{number}", "pad": "x" * pad}, []


def test_the_memory_store_is_bounded_in_bytes():
    # '[{"id":"resp_N","pad":"' + pad + '"},[]]': 23 + pad + 6 bytes for a one-digit N
    sizes = [len(entry_json(*entry(n, 1000))) for n in range(3)]
    assert sizes == [1029] * 3
    store = ResponseStore(max_bytes=2 * 1029 + 100)
    for number in range(3):
        store.put(*entry(number, 1000))
    assert store.get("resp_0") is None and store.get("resp_1") is not None and store.get("resp_2") is not None
    assert store.size == 2 * 1029 and len(store) == 2
    store.put(*entry(3, 5000))  # (larger than the bound alone: not kept, nothing else evicted for it)
    assert store.get("resp_3") is None and len(store) == 2


def test_the_memory_store_counts_an_expired_or_replaced_entrys_bytes_out():
    now = [0.0]
    store = ResponseStore(ttl=10, clock=lambda: now[0], max_bytes=10**6)
    store.put(*entry(1, 1000))
    store.put(*entry(1, 500))
    assert store.size == 529
    now[0] = 11
    assert store.get("resp_1") is None and store.size == 0


def test_the_gateway_keeps_stored_responses_within_the_byte_bound():
    store = ResponseStore(max_bytes=20_000)
    app = LMSPApp(store=store)
    ids = []
    for number in range(4):
        _, _, answer = asgi(app, "/lmsp/v1/responses",
                            {"model": "qwen3", "input": [user(f"{number} " + "y" * 6000)], "store": True})
        ids.append(json.loads(answer)["id"])
    assert store.size <= 20_000 and store.get(ids[-1]) is not None and store.get(ids[0]) is None
    status, _, _ = asgi(app, f"/lmsp/v1/responses/{ids[0]}", None)
    assert status == 404


@pytest.mark.parametrize("given, kind", [("memory", ResponseStore)])
def test_the_store_is_chosen_by_url(given, kind):
    assert isinstance(LMSPApp(store=given).store, kind)


def test_an_unknown_store_url_is_refused():
    with pytest.raises(ArgumentError) as raised:
        LMSPApp(store="postgres://x")
    assert raised.value.code == "usage.argument"


# ---------------------------------------------------------------------------- a tool the parser cannot type by
BAD_TOOL_PARAMETERS = {"properties_map": {"city": {"type": "string"}},
                       "properties_not_an_object": {"type": "object", "properties": ["city"]}}


@pytest.mark.parametrize("parameters", list(BAD_TOOL_PARAMETERS.values()), ids=list(BAD_TOOL_PARAMETERS))
@pytest.mark.parametrize("path", ["/lmsp/v1/responses", "/v1/chat/completions"])
def test_a_tool_in_a_shape_the_parser_cannot_type_by_is_a_400_naming_it(path, parameters):
    """A client's tool schema the parser refuses is the client's mistake (it was a 500 from the parser)."""
    app = LMSPApp(backend=strict_model("Hi.<|im_end|>"))
    if path.startswith("/lmsp"):
        body = {"model": "qwen3", "input": [user("Hi")],
                "tools": [{"type": "function", "name": "get_weather", "parameters": parameters}]}
    else:
        body = {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}],
                "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": parameters}}]}
    status, _, answer = asgi(app, path, body)
    problem = json.loads(answer)
    assert (status, problem["code"]) == (400, "invalid_request"), problem
    assert "get_weather" in problem["detail"], problem["detail"]
