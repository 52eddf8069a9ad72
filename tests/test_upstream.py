"""The gateway's backends: UpstreamBackend against a real loopback model server (a separate process, its
stream in the OpenAI completions shape, faults on request), CallableBackend for each kind of result, and
the LMSP endpoint in front of the upstream, served by uvicorn and read with httpx."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from grammar_parse.serving._backends import CallableBackend, ReplayBackend, UpstreamBackend, UpstreamError, tokens
from grammar_parse.errors import ERROR_CODES
from grammar_parse.adapters.lmsp import parse_sse, respond, schema_validator
from grammar_parse.serving._server import LMSPApp

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
from upstream_server import Gateway, Upstream  # noqa: E402

SAMPLES = {**ReplayBackend().samples, "short": "Hi there.<|im_end|>",
           "default": "<think>\nSECRET-REASONING é 漢字\n</think>\n\nSECRET-ANSWER, in a few words.<|im_end|>"}
SECRETS = ("SECRET", "漢字")  # what no error message may say
TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather now",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
EVENT = schema_validator("event")


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream(SAMPLES, lifetime=120) as running:
        yield running


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, 30))  # (a hung stream fails the test, never the run)


async def generate(url: str, prompt: str, request: dict[str, Any] | None = None, **options: Any
                   ) -> tuple[list[str], Any]:
    """The pieces of one generation and the Generation (its counts set once the pieces are done)."""
    backend = UpstreamBackend(url, **options)
    try:
        generation = backend.start({"model": "qwen3", **(request or {})}, prompt)
        return [piece async for piece in generation.pieces], generation
    finally:
        await backend.aclose()


def chunks(text: str) -> list[str]:
    """The upstream's chunks of a sample (token-sized)."""
    return tokens(text)


# ---------------------------------------------------------------------------- UpstreamBackend
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_the_text_is_the_recording(upstream, name):
    pieces, generation = run(generate(upstream.url, f"[[sample:{name}]][[id:text-{name}]]"))
    assert "".join(pieces) == SAMPLES[name]
    assert len(pieces) == upstream.log(f"text-{name}")["sent"] and generation.truncated is False


@pytest.mark.parametrize("ends", ["lf", "crlf", "cr"])
def test_the_text_is_the_recording_whatever_the_streams_line_ends(upstream, ends):
    pieces, generation = run(generate(upstream.url, f"[[lines:{ends}]][[sample:tool_call]][[id:ends-{ends}]]"))
    assert "".join(pieces) == SAMPLES["tool_call"]  # (and the usage event after the text was read too)
    assert generation.output_tokens == upstream.log(f"ends-{ends}")["usage"]["completion_tokens"] != len(pieces)


def test_the_request_carries_the_prompt_the_limits_and_the_extra_body(upstream):
    prompt = "[[id:body]] Hi"
    run(generate(upstream.url, prompt, {"max_output_tokens": 500, "temperature": 0.25},
                 model="served-name", extra_body={"skip_special_tokens": False}))
    assert upstream.log("body")["body"] == {
        "model": "served-name", "prompt": prompt, "stream": True, "stream_options": {"include_usage": True},
        "max_tokens": 500, "temperature": 0.25, "skip_special_tokens": False}
    sampling = {"top_p": 0.9, "seed": 7, "stop": ["</answer>"], "presence_penalty": 0.5, "frequency_penalty": -0.5,
                "logit_bias": {"42": -100}}
    run(generate(upstream.url, "[[id:body-sampling]]", {"temperature": 0, **sampling, "not_sampling": 1}))
    assert upstream.log("body-sampling")["body"] == {
        "model": "qwen3", "prompt": "[[id:body-sampling]]", "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0, **sampling}
    run(generate(upstream.url, "[[id:body-default]]"))  # without them: the request's model, no limits
    assert upstream.log("body-default")["body"] == {
        "model": "qwen3", "prompt": "[[id:body-default]]", "stream": True, "stream_options": {"include_usage": True}}


@pytest.mark.parametrize("limit", [1, 5, 12])
def test_max_output_tokens_cuts_the_stream_and_marks_it_truncated(upstream, limit):
    pieces, generation = run(generate(upstream.url, "x", {"max_output_tokens": limit}))
    assert pieces == chunks(SAMPLES["default"])[:limit] and generation.truncated is True


def test_a_limit_above_the_output_is_not_truncation(upstream):
    pieces, generation = run(generate(upstream.url, "x", {"max_output_tokens": 10_000}))
    assert "".join(pieces) == SAMPLES["default"] and generation.truncated is False


def test_usage_is_the_upstreams_when_sent_else_counted(upstream):
    prompt = "[[id:usage]] three more words"
    pieces, generation = run(generate(upstream.url, prompt))
    sent = upstream.log("usage")["usage"]
    assert (generation.input_tokens, generation.output_tokens) == (sent["prompt_tokens"], sent["completion_tokens"])
    assert sent["completion_tokens"] != len(pieces)  # (the upstream counts words: the figures are its own)
    prompt = "[[nousage]] three more words"
    pieces, generation = run(generate(upstream.url, prompt))
    assert (generation.input_tokens, generation.output_tokens) == (len(tokens(prompt)), len(pieces))


def test_slow_chunks_within_the_read_timeout_are_fine(upstream):
    # (each wait is under the timeout, the whole stream well over it: the timeout is per read)
    pieces, _ = run(generate(upstream.url, "[[slow:0.05]]", read_timeout=0.3))
    assert "".join(pieces) == SAMPLES["default"] and len(pieces) * 0.05 > 0.3


def test_closing_the_pieces_early_disconnects_the_upstream(upstream):
    async def read_three() -> list[str]:
        backend = UpstreamBackend(upstream.url)
        pieces = backend.start({"model": "qwen3"}, "[[id:early]][[slow:0.02]]").pieces
        got = [await pieces.__anext__() for _ in range(3)]
        await pieces.aclose()  # (what the server does when its client goes away)
        await backend.aclose()
        return got

    assert run(read_three()) == chunks(SAMPLES["default"])[:3]
    record = upstream.log("early")
    assert record["disconnected"] and not record["finished"]
    assert record["sent"] < len(chunks(SAMPLES["default"]))


def test_the_connection_is_reused_across_generations(upstream):
    before = upstream.stats()["connections"]

    async def three() -> None:
        backend = UpstreamBackend(upstream.url)
        for _ in range(3):
            async for _piece in backend.start({"model": "qwen3"}, "x").pieces:
                pass
            assert upstream.stats()["connections"] == before + 1  # (the stream is read to its end)
        await backend.aclose()

    run(three())


FAULTS = [  # marker, code, upstream status
    ("[[fault:status=500]]", "upstream.status", 500),
    ("[[fault:status=429]]", "upstream.status", 429),
    ("[[fault:reset@3]]", "upstream.reset", None),
    ("[[fault:reset]]", "upstream.reset", None),
    ("[[fault:eof@3]]", "upstream.reset", None),
    ("[[fault:stall@2]]", "upstream.timeout", None),
    ("[[fault:malformed@2]]", "upstream.protocol", None),
    ("[[fault:binary@2]]", "upstream.protocol", None),
    ("[[fault:longline@2]]", "upstream.protocol", None),
    ("[[fault:json]]", "upstream.protocol", None),
    ("[[fault:error@2]]", "upstream.status", 500),
    ("[[fault:context]]", "upstream.context_length", 400),
]


@pytest.mark.parametrize("marker, code, status", FAULTS, ids=[f[0].strip("[]") for f in FAULTS])
def test_each_upstream_fault_raises_its_code_and_never_the_output(upstream, marker, code, status):
    with pytest.raises(UpstreamError) as raised:
        run(generate(upstream.url, marker, read_timeout=0.5))
    error = raised.value
    assert (error.code, error.status) == (code, status) and code in ERROR_CODES
    assert not any(secret in str(error) for secret in SECRETS) and len(str(error)) < 1000
    assert error.problem()["status"] == {"upstream.timeout": 504, "upstream.context_length": 400}.get(code, 502)


def test_an_upstreams_error_body_is_quoted():
    with pytest.raises(UpstreamError) as raised:
        with Upstream(SAMPLES, api_key="right", lifetime=60) as guarded:
            run(generate(guarded.url, "x", api_key="wrong"))
    assert raised.value.code == "upstream.status" and raised.value.status == 401
    assert "invalid api key" in str(raised.value) and "api_key" in (raised.value.hint or "")


def test_the_api_key_is_sent():
    with Upstream(SAMPLES, api_key="k-123", lifetime=60) as guarded:
        pieces, _ = run(generate(guarded.url, "[[id:key]]", api_key="k-123"))
        assert "".join(pieces) == SAMPLES["default"]
        assert guarded.log("key")["authorization"] == "Bearer k-123"


def test_a_closed_port_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(UpstreamError) as raised:  # (nothing listens there now: refused)
        run(generate(f"http://127.0.0.1:{port}/v1", "x"))
    assert raised.value.code == "upstream.unreachable" and raised.value.hint


def test_aclose_closes_only_the_client_the_backend_made(upstream):
    async def check() -> None:
        own = UpstreamBackend(upstream.url)
        client = own.client
        await own.aclose()
        assert client.is_closed
        given = httpx.AsyncClient()
        backend = UpstreamBackend(upstream.url, client=given)
        assert "".join([p async for p in backend.start({"model": "m"}, "x").pieces]) == SAMPLES["default"]
        await backend.aclose()
        assert not given.is_closed
        await given.aclose()

    run(check())


# ---------------------------------------------------------------------------- CallableBackend
TEXT = SAMPLES["tool_call"]


def gives_str(prompt: str, request: dict[str, Any]) -> str:
    return TEXT


def gives_list(prompt: str, request: dict[str, Any]) -> list[str]:
    return tokens(TEXT)


def gives_generator(prompt: str, request: dict[str, Any]) -> Iterator[str]:
    yield from tokens(TEXT)


async def gives_async_generator(prompt: str, request: dict[str, Any]) -> AsyncIterator[str]:
    for piece in tokens(TEXT):
        await asyncio.sleep(0)
        yield piece


async def gives_awaitable(prompt: str, request: dict[str, Any]) -> str:
    return TEXT


KINDS = [gives_str, gives_list, gives_generator, gives_async_generator, gives_awaitable]


async def drain(backend: Any, request: dict[str, Any], prompt: str) -> tuple[list[str], Any]:
    generation = backend.start(request, prompt)
    return [piece async for piece in generation.pieces], generation


@pytest.mark.parametrize("fn", KINDS, ids=[fn.__name__ for fn in KINDS])
def test_a_callable_gives_its_text_whatever_it_returns(fn):
    pieces, generation = run(drain(CallableBackend(fn), {"model": "m"}, "the prompt"))
    assert pieces == tokens(TEXT)
    assert (generation.input_tokens, generation.output_tokens, generation.truncated) == (
        len(tokens("the prompt")), len(tokens(TEXT)), False)


def test_a_callable_is_given_the_prompt_and_the_request():
    seen = []
    run(drain(CallableBackend(lambda prompt, request: seen.append((prompt, request)) or "ok"), {"model": "m"}, "p"))
    assert seen == [("p", {"model": "m"})]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["generator", "async generator"])
def test_closing_a_callables_pieces_closes_its_generator(asynchronous):
    closed = []

    def sync(prompt: str, request: dict[str, Any]) -> Iterator[str]:
        try:
            yield from ["a", "b", "c", "d"]
        finally:
            closed.append("sync")

    async def agen(prompt: str, request: dict[str, Any]) -> AsyncIterator[str]:
        try:
            for piece in ["a", "b", "c", "d"]:
                yield piece
        finally:
            closed.append("async")

    async def two() -> list[str]:
        pieces = CallableBackend(agen if asynchronous else sync).start({}, "").pieces
        got = [await pieces.__anext__(), await pieces.__anext__()]
        await pieces.aclose()
        return got

    assert run(two()) == ["a", "b"] and closed == ["async" if asynchronous else "sync"]


@pytest.mark.parametrize("fn", [lambda p, r: 42, lambda p, r: ["a", 7]], ids=["returns an int", "yields an int"])
def test_a_callable_that_gives_no_text_is_a_type_error(fn):
    with pytest.raises(TypeError, match="int"):
        run(drain(CallableBackend(fn), {}, ""))


# ---------------------------------------------------------------------------- the LMSP endpoint in front
def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def events(text: str) -> list[dict[str, Any]]:
    """A stream's events, checked: ids 1..n, each valid, exactly one final event and it is the last."""
    found = parse_sse(text)
    assert [e["id"] for e in found] == list(range(1, len(found) + 1))
    assert not [e for e in found if list(EVENT.iter_errors(e))]
    finals = [e for e in found if e["event"] in ("response.completed", "response.incomplete", "response.failed",
                                                 "response.cancelled")]
    assert len(finals) == 1 and found[-1] is finals[0]
    return found


def bare(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in items]


def one_shot(name: str) -> list[dict[str, Any]]:
    """The output items of the recording parsed in one go."""
    ids = iter(range(10**6))
    response = respond(SAMPLES[name], "qwen3", prefix="", model="qwen3", created_at=0,
                       ids=lambda kind: f"{kind}_{next(ids)}")
    return bare(response["output"])


@pytest.fixture(scope="module")
def gateway(upstream) -> Iterator[str]:
    app = LMSPApp(grammar="qwen3", backend=UpstreamBackend(upstream.url, read_timeout=1.0))
    with Gateway(app) as url:
        yield url


def post(url: str, body: dict[str, Any]) -> Any:
    return httpx.post(f"{url}/lmsp/v1/responses", json=body, timeout=10, trust_env=False)


@pytest.mark.parametrize("name, tools", [("default", None), ("answer", None), ("tool_call", TOOLS)])
def test_the_gateway_streams_the_parse_of_the_recording(gateway, upstream, name, tools):
    body = {"model": "qwen3", "input": [user(f"[[sample:{name}]][[id:gw-{name}]]")], "stream": True,
            **({"tools": tools} if tools else {})}
    streamed = events(post(gateway, body).text)
    done = {e["data"]["output_index"]: e["data"]["item"] for e in streamed if e["event"] == "response.output_item.done"}
    assert bare([done[i] for i in sorted(done)]) == one_shot(name)
    usage = upstream.log(f"gw-{name}")["usage"]
    assert streamed[-1]["event"] == "response.completed"
    assert streamed[-1]["data"]["usage"] == {"input_tokens": usage["prompt_tokens"],
                                             "output_tokens": usage["completion_tokens"],
                                             "total_tokens": usage["total_tokens"]}
    sync = post(gateway, {**body, "stream": False}).json()
    assert sync["status"] == "completed" and bare(sync["output"]) == one_shot(name)


def test_the_gateway_answers_incomplete_at_max_output_tokens(gateway):
    body = {"model": "qwen3", "input": [user("Hi")], "max_output_tokens": 4}
    streamed = events(post(gateway, {**body, "stream": True}).text)
    assert streamed[-1]["event"] == "response.incomplete"
    assert streamed[-1]["data"]["incomplete_details"] == {"reason": "max_output_tokens"}
    sync = post(gateway, body).json()
    assert sync["status"] == "incomplete" and sync["incomplete_details"] == {"reason": "max_output_tokens"}
    assert sync["usage"]["output_tokens"] == len("".join(chunks(SAMPLES["default"])[:4]).split())  # (the upstream's)


def test_a_callable_backend_serves_through_the_endpoint():
    app = LMSPApp(grammar="qwen3", backend=CallableBackend(gives_generator))
    with Gateway(app) as url:
        body = {"model": "qwen3", "input": [user("Weather?")], "tools": TOOLS}
        assert bare(post(url, body).json()["output"]) == one_shot("tool_call")
        streamed = events(post(url, {**body, "stream": True}).text)
        assert streamed[-1]["event"] == "response.completed"
        calls = [e["data"]["item"] for e in streamed if e["event"] == "response.output_item.done"
                 and e["data"]["item"]["type"] == "function_call"]
        assert [json.loads(call["arguments"]) for call in calls] == [{"city": "Hangzhou"}]


GATEWAY_FAULTS = [  # marker, problem code, status (the failures mid-stream: after three pieces)
    ("[[fault:reset@3]]", "upstream_failed", 502),
    ("[[fault:eof@3]]", "upstream_failed", 502),
    ("[[fault:malformed@3]]", "upstream_failed", 502),
    ("[[fault:error@3]]", "upstream_failed", 502),
    ("[[fault:stall@3]]", "upstream_timeout", 504),
]
BEFORE_ANY_PIECE = [("[[fault:status=500]]", "upstream_failed", 502), ("[[fault:reset]]", "upstream_failed", 502),
                    ("[[fault:context]]", "context_length_exceeded", 400)]


def answered(url: str, marker: str, code: str, status: int) -> str:
    """The gateway's answer to a request whose upstream fails, checked: a problem document of the code."""
    answer = post(url, {"model": "qwen3", "input": [user(marker)]})
    assert answer.headers["content-type"] == "application/problem+json"
    assert (answer.status_code, answer.json()["code"]) == (status, code)
    assert post(url, {"model": "qwen3", "input": [user("Hi")]}).json()["status"] == "completed"  # (still serving)
    return str(answer.text)


@pytest.mark.parametrize("marker, code, status", GATEWAY_FAULTS, ids=[f[0].strip("[]") for f in GATEWAY_FAULTS])
def test_an_upstream_failure_mid_stream_ends_the_response_cleanly(gateway, marker, code, status):
    streamed = post(gateway, {"model": "qwen3", "input": [user(marker)], "stream": True}).text
    final = events(streamed)[-1]
    assert final["event"] == "response.failed"
    assert (final["data"]["error"]["code"], final["data"]["error"]["status"]) == (code, status)
    for text in (streamed, answered(gateway, marker, code, status)):  # (the failure quotes nothing upstream)
        assert "SECRET-ANSWER" not in text and "127.0.0.1" not in text


@pytest.mark.parametrize("marker, code, status", BEFORE_ANY_PIECE, ids=[f[0].strip("[]") for f in BEFORE_ANY_PIECE])
def test_an_upstream_that_fails_before_any_text_is_a_problem_document(gateway, marker, code, status):
    assert "127.0.0.1" not in answered(gateway, marker, code, status)


def test_chat_completions_sampling_fields_reach_the_upstream(gateway, upstream):
    body = {"model": "qwen3", "messages": [{"role": "user", "content": "[[id:chat-sampling]]"}], "top_p": 0.5,
            "seed": 3, "stop": "</x>", "max_tokens": 50, "temperature": 0.1}
    answer = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=10, trust_env=False)
    assert answer.status_code == 200
    sent = upstream.log("chat-sampling")["body"]
    assert {k: sent[k] for k in ("top_p", "seed", "stop", "max_tokens", "temperature")} == {
        "top_p": 0.5, "seed": 3, "stop": "</x>", "max_tokens": 50, "temperature": 0.1}


def test_a_prompt_too_long_for_the_upstream_is_context_length_exceeded_for_the_openai_client(gateway):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{gateway}/v1", api_key="none", max_retries=0) as client, \
            pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": "[[fault:context]]"}])
    assert raised.value.code == "context_length_exceeded"
    assert "127.0.0.1" not in str(raised.value) and "4096" not in str(raised.value)  # (the upstream's words are logged)
