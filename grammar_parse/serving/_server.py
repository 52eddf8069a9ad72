"""A reference gateway: LMSP 1.0 Responses and OpenAI-compatible Chat Completions over one model.

A plain ASGI application (run it with any ASGI server; ``grammar-parse serve`` runs it with uvicorn, the
``serve`` extra, through :func:`serve`). Generation is pluggable: a backend turns a request and its prompt
into text pieces (``grammar_parse.serving._backends``: recorded outputs, an upstream completions server, a Python
function). The prompt is rendered with the model's chat template when one is given (ChatML ending in the
grammar's own start anchor otherwise), and the output goes through grammar_parse, so responses and
streams are correct by construction.

Endpoints:

* ``POST /lmsp/v1/responses`` (JSON, or server-sent events with ``"stream": true``) and
  ``GET /lmsp/v1/responses/{id}`` (responses kept with ``"store": true``). LMSP 1.0 names no model
  listing in its Responses section, so there is none under ``/lmsp``;
* ``POST /v1/chat/completions`` (streaming or not; ``reasoning_content`` and ``tool_calls`` deltas,
  ``stream_options.include_usage``), ``GET /v1/models`` and ``GET /v1/models/{id}``: the official
  ``openai`` client works against ``{url}/v1`` unchanged;
* ``GET /health``: ``{"status": "ok"}``, without the bearer token (it says nothing about the model).

What the server cannot do, it says: a request needing it is refused with 400 ``unsupported_capability``,
never served as if it had been honoured. The server cannot constrain what the model generates, so:

* ``tool_choice``: ``auto`` (the default) offers the tools; ``none`` leaves them out of the prompt and the
  backend's request, and a call the model writes anyway fails the response; ``required`` and a named
  function (``{"type": "function", "name": ...}`` in LMSP, ``{"type": "function", "function": {"name":
  ...}}`` in Chat Completions; only that tool is offered) are checked against the output: a completed
  generation without a call, or with a call to another function, fails. A failure is ``response.failed``
  (or a 502 problem document) with ``tool_choice_violated``; a generation cut at its token limit ends
  ``incomplete`` as usual;
* ``parallel_tool_calls`` (Chat Completions; LMSP requests have no such field and its schema refuses it)
  ``false`` is checked the same way: a second call fails the response;
* Chat Completions' ``n`` above 1, ``logprobs``, ``top_logprobs``, a ``response_format`` other than text,
  audio output and content parts other than text are refused; ``temperature`` and the token limit
  (``max_completion_tokens``, else ``max_tokens``) reach the backend as LMSP's ``temperature`` and
  ``max_output_tokens``; ``top_p``, ``seed``, ``stop``, ``presence_penalty``, ``frequency_penalty`` and
  ``logit_bias`` are passed in the backend's request under their own names, for backends that read them
  (:class:`grammar_parse.serving._backends.UpstreamBackend` sends temperature and the token limit only).

A generation cut at its token limit ends ``incomplete`` (Chat Completions: ``finish_reason`` ``length``)
with what was parsed: a delimiter cut part-way at the end (``</tool_c``) is dropped, and a tool call cut
inside its arguments is kept with its arguments closed and flagged (a ``response.parse_error`` event; in
Chat Completions an ``errors`` list on the call), never a failure.

Errors are problem documents (``application/problem+json``, RFC 9457 shape, code in ``code``; under
``/v1`` they also carry an OpenAI ``error`` object, which the openai client reads), with the codes of
:data:`PROBLEM_CODES`. What reaches a client never holds the model's raw output, a template's internals or
an upstream's address: a parse failure, a template failure and an upstream failure are said in general
terms, and the full error goes to the server log (logger ``grammar_parse.serving._server``) under the request id
that every response carries in ``X-Request-ID``. What the request itself names is said: a parse failure
gives its code, region and offset, and the offered tool whose call it broke; a call's errors (LMSP
``response.parse_error`` events, a Chat Completions call's ``errors``) give their code, the argument's path
in the tool schema's own names and the JSON types (``grammar_parse._engine.wire.CallChecker``), never a value.
LMSP requests take ``input`` as a plain string too (one user message), and each event's data carries its
``type`` and ``sequence_number``, so the ``openai`` client's Responses API works against ``{url}/lmsp/v1``.

Hardening (the defaults of :class:`Limits`): bodies of at most 4 MiB (a declared ``Content-Length`` above
it is refused before anything is read, a chunked body as soon as it passes it), read within 10 s of the
headers (408 after), JSON of at most 64 levels of nesting and integers of at most 32 digits (NaN,
Infinity and numbers too large for a double refused, by path), sampling fields and token limits in
their ranges (:data:`NUMERIC_FIELDS`), at most 1024 input items or messages (after a
``previous_response_id`` chain is merged) and 128 tools; a lone surrogate in a string becomes U+FFFD.
Request validation and prompt rendering run in worker threads, so one large request does not hold up
the others. Stored responses (:mod:`grammar_parse.serving.store`: in memory, or Redis for replicas) are bounded
in number, bytes (oldest evicted first) and time. The bearer token is compared in constant time. At most
512 requests are served at once (503 ``overloaded`` with ``Retry-After`` beyond), and a response whose
client does not read is given up after one write has waited 30 s (its generation closed). Under :func:`serve`, a request's head
must arrive within 10 s and be at most 64 KiB, idle keep-alive connections are closed after 5 s, and at
most 2048 connections are open (see :func:`uvicorn_config`). A client that goes away stops
its generation, streaming or not. A backend that fails mid-generation ends the response cleanly:
``response.failed`` in a stream, a 502 (504 for a stall) problem document otherwise, an error chunk in a
Chat Completions stream.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import json
import logging
import math
import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._engine.grammar import Grammar
from .._engine.reading import LONE_SURROGATE
from .._engine.session import resolve_grammar
from .._engine.tools import check_tools
from .._engine.toolstream import call_regions
from .._engine.wire import CallChecker, ClientText, open_call, parse_failure, wire_json
from ..adapters.chat_completions import ChatCompletionsStream, chunk
from ..adapters.lmsp import ResponseStream, problem, schema_validator, sse
from ..errors import ERROR_CODES, ArgumentError, ChatTemplateError, GrammarParseError
from ..templates._chat_template import ChatTemplate
from ._backends import SAMPLING_FIELDS, Generation, ReplayBackend, tokens
from .store import ResponseStorage, ResponseStore, open_store

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

_log = logging.getLogger("grammar_parse.serving._server")
_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")  # (for the log)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

Scope = Mapping[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
#: What :func:`serve` runs: any ASGI application (the gateway, or the grammar workbench).
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: Every problem code the server answers with: code -> (HTTP status, the situation it names).
PROBLEM_CODES: dict[str, tuple[int, str]] = {
    "invalid_request": (400, "the body is not JSON, nests too deeply, holds too long an integer, does not fit "
                             "the request schema, or breaks a limit (items, tools)"),
    "unsupported_capability": (400, "the request needs what this model or server cannot do"),
    "unsupported_version": (400, "the LMSP-Version header names a version other than 1.x"),
    "context_length_exceeded": (400, "the prompt and max_output_tokens do not fit the model's context window "
                                     "(the model server said so)"),
    "unauthorized": (401, "the bearer token is missing, wrong, or not ASCII"),
    "not_found": (404, "no endpoint at this path"),
    "model_not_found": (404, "the request names a model this server does not serve"),
    "response_not_found": (404, "no stored response has this id (never stored, evicted or expired)"),
    "method_not_allowed": (405, "the endpoint exists but not for this method"),
    "request_timeout": (408, "the body did not arrive within the body read timeout"),
    "request_too_large": (413, "the body is larger than the limit"),
    "overloaded": (503, "the server has as many requests in progress as it takes: retry after Retry-After seconds"),
    "unsupported_media_type": (415, "the body is not declared as application/json"),
    "internal_error": (500, "the server failed (its log has the error)"),
    "parse_failed": (500, "the model's output could not be parsed (the server log has the details)"),
    "tool_choice_violated": (502, "the model's output breaks the request's tool_choice or parallel_tool_calls"),
    "upstream_failed": (502, "the backend (model server) failed"),
    "upstream_timeout": (504, "the backend (model server) stalled"),
}


def random_ids(kind: str) -> str:
    """``kind_`` plus 26 random Crockford base-32 characters (130 bits from :mod:`secrets`), like the ids in
    the LMSP examples: response ids cannot be guessed, which is what keeps stored responses private."""
    return f"{kind}_" + "".join(secrets.choice(_CROCKFORD) for _ in range(26))


# ---------------------------------------------------------------------------- prompts
def _part_text(content: Any) -> str:
    if content is None:
        return ""
    return content if isinstance(content, str) else "".join(part.get("text", "") for part in content)


def _arguments(text: str) -> Any:
    """A call's arguments as chat templates read them: the JSON value, or the text if it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LMSP input items as the chat messages a chat template renders: a message item is a message, the
    function calls in a row are one assistant message's ``tool_calls``, a call's output is a ``tool`` message."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": item["role"], "content": _part_text(item["content"])})
        elif kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": _arguments(item["arguments"])}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
    return messages


def template_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LMSP function tools in the form chat templates read (the OpenAI Chat Completions ``tools``)."""
    return [{"type": "function", "function": {key: tool[key] for key in ("name", "description", "parameters")
                                              if key in tool}} for tool in tools]


def chatml_messages(messages: list[dict[str, Any]], anchor: str = "<|im_start|>assistant\n") -> str:
    """A ChatML rendering of chat messages ending with ``anchor``, an open assistant turn (the parser's
    prefix): the prompt when the model's chat template is not given. The grammar's own start anchor keeps
    the parser from reading the prompt as output whatever the grammar (gpt-oss's ``<|start|>assistant``).
    Tool calls are Hermes ``<tool_call>`` blocks, tool results ``<tool_response>`` blocks in a user turn."""
    out = []
    for message in messages:
        if message["role"] == "tool":
            out.append(f"<|im_start|>user\n<tool_response>\n{message['content']}\n</tool_response><|im_end|>\n")
            continue
        parts = [message.get("content") or ""]
        for call in message.get("tool_calls") or []:
            arguments = call["function"]["arguments"]
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            parts.append(f'<tool_call>\n{{"name": {json.dumps(call["function"]["name"])}, "arguments": {text}}}\n'
                         "</tool_call>")
        out.append(f"<|im_start|>{message['role']}\n" + "\n".join(p for p in parts if p) + "<|im_end|>\n")
    return "".join(out) + anchor


def chatml_prompt(items: list[dict[str, Any]], anchor: str = "<|im_start|>assistant\n") -> str:
    """:func:`chatml_messages` of LMSP input items."""
    return chatml_messages(chat_messages(items), anchor)


# ---------------------------------------------------------------------------- limits, problems, the store
@dataclass(frozen=True)
class Limits:
    """What one request may hold, how long its body may take to arrive, and how long a response may wait
    on a client that does not read."""

    max_body: int = 4 * 1024 * 1024  # bytes
    body_timeout: float = 10.0  # seconds from the first read of the body to its end
    max_depth: int = 64  # JSON nesting levels
    max_int_digits: int = 32  # digits of one JSON integer
    max_items: int = 1024  # input items / messages, after a previous_response_id chain is merged
    max_tools: int = 128
    max_concurrent: int = 512  # requests in progress (health checks excepted); beyond it, 503 with Retry-After
    # seconds one write of a response may wait on a client that does not read (its buffers full): past it
    # the response is given up, its generation closed (an upstream's too) and the connection dropped
    send_timeout: float = 30.0


class HTTPProblem(Exception):
    """A problem document to answer with (``code`` one of :data:`PROBLEM_CODES`)."""

    def __init__(self, status: int, code: str, detail: str, title: str | None = None,
                 headers: list[tuple[bytes, bytes]] | None = None) -> None:
        super().__init__(detail)
        self.document = problem(code, detail, status, title)
        self.status = status
        self.headers = headers or []


def _refuse(code: str, detail: str, **kwargs: Any) -> HTTPProblem:
    return HTTPProblem(PROBLEM_CODES[code][0], code, detail, **kwargs)


# ---------------------------------------------------------------------------- request bodies
class _NumberTooLong(ValueError):
    pass


def read_json(body: bytes, limits: Limits) -> Any:
    """The body as JSON, within the limits (depth, integer digits; NaN and Infinity are not JSON, nor is
    a number too large for a double, like ``1e400``), or an ``invalid_request`` problem naming where.
    A lone surrogate (a ``\\ud800`` escape: valid JSON, but no character) becomes U+FFFD, as a UTF-8
    decoder reads a broken sequence, so it can be encoded for the model server: a client that sends
    back the model's own output (which can hold one) is not refused."""
    def integer(text: str) -> int:
        if len(text) - text.startswith("-") > limits.max_int_digits:
            raise _NumberTooLong(text)
        return int(text)

    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    try:
        value = json.loads(body, parse_int=integer, parse_constant=constant)
    except _NumberTooLong:
        raise _refuse("invalid_request", f"the body holds an integer of more than {limits.max_int_digits} digits"
                      ) from None
    except RecursionError:
        raise _refuse("invalid_request", f"the body nests deeper than {limits.max_depth} levels") from None
    except ValueError as e:  # (not UTF-8, not JSON, a constant)
        raise _refuse("invalid_request", f"the body is not JSON: {_short(str(e))}") from None
    return _checked(value, limits.max_depth)


def well_formed(value: Any) -> Any:
    """``value`` (JSON data) with every lone surrogate in its strings and keys made U+FFFD: text that
    can be encoded as UTF-8, for a model server or a store. Containers are changed in place."""
    return _checked(value, None)


def _checked(value: Any, limit: int | None) -> Any:
    """``value`` with lone surrogates made U+FFFD (in place), refused if it nests deeper than ``limit``
    or holds a number that is not finite (an ``invalid_request`` naming its path)."""
    if isinstance(value, str):
        return LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, float) and not math.isfinite(value):
        raise _refuse("invalid_request", "(body): the number is too large (it must fit a double)")
    # (no recursion: the check is for values too deep to recurse into; a container's path is kept with it
    # so that what is refused is named)
    stack: list[tuple[Any, int, tuple[str | int, ...]]] = [(value, 1, ())]
    while stack:
        node, depth, path = stack.pop()
        if limit is not None and depth > limit:
            raise _refuse("invalid_request", f"the body nests deeper than {limit} levels")
        if isinstance(node, dict):
            if any(LONE_SURROGATE.search(key) for key in node):
                items = [(LONE_SURROGATE.sub("\ufffd", key), child) for key, child in node.items()]
                node.clear()
                node.update(items)
            entries: Iterable[tuple[Any, Any]] = node.items()
        else:
            entries = enumerate(node)
        for key, child in entries:
            if isinstance(child, str):
                if LONE_SURROGATE.search(child):
                    node[key] = LONE_SURROGATE.sub("\ufffd", child)
            elif isinstance(child, (dict, list)):
                stack.append((child, depth + 1, (*path, key)))
            elif isinstance(child, float) and not math.isfinite(child):
                where = "/".join(str(p) for p in (*path, key))
                raise _refuse("invalid_request", f"{where}: the number is too large (it must fit a double)")
    return value


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _validate(validator: Draft202012Validator, request: Any) -> None:
    errors = sorted(validator.iter_errors(request), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(body)"
        raise _refuse("invalid_request", f"{where}: {_short(errors[0].message)}")
    if not isinstance(request, dict):  # the schemas want an object: validation has refused the rest
        raise _refuse("invalid_request", "(body): the request must be a JSON object")


#: The numeric request fields a model server reads, with the range each may take (OpenAI's, where it sets
#: one) and whether it is an integer: a value outside it is the client's mistake, a 400 naming the field,
#: never sent on for the model server to fail on. ``logit_bias`` maps token ids to a bias in [-100, 100].
NUMERIC_FIELDS: dict[str, tuple[float, float, bool]] = {
    "temperature": (0, 2, False), "top_p": (0, 1, False), "presence_penalty": (-2, 2, False),
    "frequency_penalty": (-2, 2, False), "max_output_tokens": (1, 2**31 - 1, True),
    "max_tokens": (1, 2**31 - 1, True), "max_completion_tokens": (1, 2**31 - 1, True),
    "seed": (-2**63, 2**63 - 1, True), "n": (1, 128, True), "top_logprobs": (0, 20, True)}
_BIAS = (-100, 100)


def _check_numbers(request: dict[str, Any]) -> None:
    """Every field of :data:`NUMERIC_FIELDS` (and each ``logit_bias`` entry) a number in its range."""
    for name, (low, high, integer) in NUMERIC_FIELDS.items():
        value = request.get(name)
        if value is not None:
            _in_range(name, value, low, high, integer)
    bias = request.get("logit_bias")
    if bias is None:
        return
    if not isinstance(bias, dict):
        raise _refuse("invalid_request", "logit_bias: must be an object of token ids to biases")
    for token, value in bias.items():
        if not token.isdigit() or len(token) > 12:
            raise _refuse("invalid_request", f"logit_bias: {_short(token, 40)!r} is not a token id")
        _in_range(f"logit_bias/{token}", value, *_BIAS, False)


def _in_range(name: str, value: Any, low: float, high: float, integer: bool) -> None:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        raise _refuse("invalid_request", f"{name}: must be {kind}")
    if not low <= value <= high:
        raise _refuse("invalid_request", f"{name}: must be {kind} from {low:g} to {high:g}, not {value:.6g}")


def _check_tools(tools: list[dict[str, Any]]) -> None:
    """A tool whose schema the parser cannot type by (its parameters the bare properties map, say) is the
    request's mistake: a 400 naming the tool, not a 500 from the parser."""
    try:
        check_tools(tools)
    except ArgumentError as error:
        raise _refuse("invalid_request", error.detail) from None


def _count(what: str, values: Any, limit: int) -> None:
    if isinstance(values, list) and len(values) > limit:
        raise _refuse("invalid_request", f"{what}: at most {limit} are accepted (this one has {len(values)})")


async def lifespan(receive: Receive, send: Send, on_shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
    """An ASGI lifespan with nothing to start: each event acknowledged until shutdown, which runs
    ``on_shutdown`` first (what an app must close)."""
    while (message := await receive())["type"] != "lifespan.shutdown":
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
    if on_shutdown is not None:
        await on_shutdown()
    await send({"type": "lifespan.shutdown.complete"})


async def read_body(scope: Scope, receive: Receive, limits: Limits) -> bytes:
    """The request's body, as JSON declared, at most ``limits.max_body`` bytes, arriving within
    ``limits.body_timeout`` s (HTTPProblem past them; ClientGone when the client leaves first)."""
    content_type = _header(scope, b"content-type").split(b";")[0].strip().lower()
    if content_type != b"application/json":
        raise _refuse("unsupported_media_type", "the body must be JSON, sent as Content-Type: application/json")
    declared = _header(scope, b"content-length")
    if declared:
        if not declared.isdigit():
            raise _refuse("invalid_request", "Content-Length is not a number")
        if int(declared) > limits.max_body:
            raise _refuse("request_too_large", f"the body may be at most {limits.max_body} bytes",
                          headers=[(b"connection", b"close")])
    chunks: list[bytes] = []
    size = 0

    async def read() -> None:
        nonlocal size
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            data = message.get("body", b"")
            size += len(data)
            if size > limits.max_body:
                raise _refuse("request_too_large", f"the body may be at most {limits.max_body} bytes",
                              headers=[(b"connection", b"close")])
            chunks.append(data)
            if not message.get("more_body"):
                return

    try:
        await asyncio.wait_for(read(), limits.body_timeout)
    except asyncio.TimeoutError:
        raise _refuse("request_timeout", f"the body did not arrive within {limits.body_timeout:g} s",
                      headers=[(b"connection", b"close")]) from None
    return b"".join(chunks)


async def _body(ctx: _Request, limits: Limits) -> bytes:
    return await read_body(ctx.scope, ctx.receive, limits)


def _decode(body: bytes, validator: Draft202012Validator, counted: tuple[str, str], limits: Limits) -> dict[str, Any]:
    """The request from its body (run in a worker thread: validation costs ~1.7 ms per input item);
    ``counted`` names its list of items (or messages) and its list of tools, bounded by the limits."""
    request = read_json(body, limits)
    if isinstance(request, dict):  # (limits before the schema: they bound what validation costs)
        _count(counted[0], request.get(counted[0]), limits.max_items)
        _count(counted[1], request.get(counted[1]), limits.max_tools)
    _validate(validator, request)
    _check_numbers(request)
    return request  # type: ignore[no-any-return]  # (_validate has checked it is an object)


# ---------------------------------------------------------------------------- Chat Completions requests
_TEXT_PARTS = {"type": "array", "items": {"type": "object", "properties": {"type": {"type": "string"}},
                                          "required": ["type"]}}
_CONTENT = {"oneOf": [{"type": "string"}, _TEXT_PARTS, {"type": "null"}]}
_CALL = {"type": "object", "required": ["id", "function"], "properties": {
    "id": {"type": "string", "minLength": 1}, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "arguments"], "properties": {
        "name": {"type": "string", "minLength": 1}, "arguments": {"type": "string"}}}}}


def _NULLABLE(schema: dict[str, Any]) -> dict[str, Any]:
    return {"oneOf": [schema, {"type": "null"}]}


CHAT_REQUEST_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "OpenAI Chat Completions request, as this server reads it (other fields are passed to the backend "
             "or refused, see the module doc)",
    "type": "object", "required": ["model", "messages"], "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role"], "properties": {
                "role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                "content": _CONTENT, "name": {"type": "string"}, "tool_calls": _NULLABLE({"type": "array", "items": _CALL}),
                "tool_call_id": {"type": "string", "minLength": 1},
                "reasoning_content": _NULLABLE({"type": "string"})}}},
        "stream": _NULLABLE({"type": "boolean"}),
        "stream_options": _NULLABLE({"type": "object", "properties": {"include_usage": {"type": "boolean"}}}),
        "max_tokens": _NULLABLE({"type": "integer", "minimum": 1}),
        "max_completion_tokens": _NULLABLE({"type": "integer", "minimum": 1}),
        "temperature": _NULLABLE({"type": "number", "minimum": 0, "maximum": 2}),
        "n": _NULLABLE({"type": "integer", "minimum": 1}),
        "tools": _NULLABLE({"type": "array", "items": {"type": "object", "required": ["type"], "properties": {
            "type": {"type": "string"},
            "function": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1}, "description": {"type": "string"},
                "parameters": {"type": "object"}, "strict": _NULLABLE({"type": "boolean"})}}}}}),
        "tool_choice": _NULLABLE({"oneOf": [{"enum": ["none", "auto", "required"]}, {
            "type": "object", "required": ["type", "function"], "properties": {
                "type": {"const": "function"}, "function": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string", "minLength": 1}}}}}]}),
        "parallel_tool_calls": _NULLABLE({"type": "boolean"}),
        "response_format": _NULLABLE({"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}}}),
        "logprobs": _NULLABLE({"type": "boolean"}),
        "top_logprobs": _NULLABLE({"type": "integer"}),
        "modalities": _NULLABLE({"type": "array", "items": {"type": "string"}}),
    }}


def _input_items(given: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request's ``input`` as input items: a plain string is one user message with that text, as the OpenAI
    Responses API reads it (its clients send ``input="..."``)."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": given}]}]
    return given


def _chat_unsupported(request: dict[str, Any]) -> str | None:
    """What a Chat Completions request asks for that this server cannot give, if anything."""
    if (request.get("n") or 1) > 1:
        return "n above 1 (one choice per request)"
    if request.get("logprobs") or request.get("top_logprobs"):
        return "logprobs"
    if (request.get("response_format") or {}).get("type", "text") != "text":
        return "a response_format other than text (structured output)"
    if request.get("audio") is not None or any(m != "text" for m in request.get("modalities") or []):
        return "output other than text"
    for tool in request.get("tools") or []:
        if tool["type"] != "function" or "function" not in tool:
            return f"tools of type {tool['type']!r} (function tools only)"
    for message in request["messages"]:
        for part in message.get("content") if isinstance(message.get("content"), list) else []:
            if part["type"] != "text" or not isinstance(part.get("text"), str):
                return f"content parts of type {part['type']!r} (text only)"
    return None


def _chat_normalized(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as chat templates read them (text content, parsed call arguments)."""
    out = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        normal: dict[str, Any] = {"role": role, "content": _part_text(message.get("content"))}
        if role == "assistant":
            if message.get("reasoning_content"):
                normal["reasoning_content"] = message["reasoning_content"]
            if message.get("tool_calls"):
                normal["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                    "name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}}
                    for c in message["tool_calls"]]
        elif role == "tool":
            normal["tool_call_id"] = message.get("tool_call_id", "")
        out.append(normal)
    return out


def _chat_items(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as LMSP input items (what backends read: the replay backend picks its
    recorded answer from them, as for an LMSP request)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        role = "system" if message["role"] == "developer" else message["role"]
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": message.get("tool_call_id", ""),
                          "output": _part_text(message.get("content"))})
            continue
        calls = message.get("tool_calls") or [] if role == "assistant" else []
        if message.get("content") or not calls:
            items.append({"type": "message", "role": role, "content": _part_text(message.get("content"))})
        items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                   "arguments": c["function"]["arguments"]} for c in calls]
    return items


def _check_call_ids(items: list[dict[str, Any]], checked: list[dict[str, Any]], what: str) -> None:
    """Every call output in ``checked`` answers a call in ``items`` (the whole conversation)."""
    calls = {item["call_id"] for item in items if item.get("type") == "function_call"}
    for item in checked:
        if item.get("type") == "function_call_output" and item["call_id"] not in calls:
            raise _refuse("invalid_request", f"{what} {_short(item['call_id'], 80)!r} answers no tool call in the "
                                             "conversation")


# ---------------------------------------------------------------------------- tool_choice
@dataclass(frozen=True)
class ToolChoice:
    """A request's ``tool_choice`` and ``parallel_tool_calls``, as this server honours them (module doc)."""

    mode: str = "auto"  # auto | none | required | function
    name: str | None = None
    parallel: bool = True

    @classmethod
    def read(cls, choice: Any, tools: list[dict[str, Any]], parallel: bool | None) -> ToolChoice:
        """From the request's fields (``choice`` a mode or ``{"name": ...}``; tools in LMSP shape)."""
        parallel = True if parallel is None else parallel
        if choice is None or choice == "auto":
            return cls("auto", parallel=parallel)
        if choice == "none":
            return cls("none", parallel=parallel)
        if not tools:
            raise _refuse("invalid_request", "tool_choice asks for a tool call, but the request offers no tools")
        if choice == "required":
            return cls("required", parallel=parallel)
        name = choice["name"]
        if name not in {tool["name"] for tool in tools}:
            raise _refuse("invalid_request", f"tool_choice names {_short(name, 80)!r}, which is not among the tools")
        return cls("function", name, parallel)

    def offered(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools the prompt and the backend see."""
        if self.mode == "none":
            return []
        return [tool for tool in tools if tool["name"] == self.name] if self.mode == "function" else tools

    def on_call(self, name: str, count: int) -> str | None:
        """Why the ``count``-th call (to ``name``) breaks the choice, if it does."""
        if self.mode == "none":
            return "tool_choice is none, and the model called a tool"
        if self.mode == "function" and name != self.name:
            return f"tool_choice names {self.name!r}, and the model called another tool"
        if not self.parallel and count > 1:
            return "parallel_tool_calls is false, and the model made more than one call"
        return None

    def at_end(self, count: int) -> str | None:
        """Why a completed generation with ``count`` calls breaks the choice, if it does."""
        if self.mode in ("required", "function") and count == 0:
            return "tool_choice asks for a tool call, and the model made none"
        return None


def _violated(why: str) -> dict[str, Any]:
    return problem("tool_choice_violated", why, 502, "The model did not follow tool_choice")


# ---------------------------------------------------------------------------- one generation's output
class _Ids:
    """An id factory that records what it made, so a replay of the same output gets the same ids."""

    def __init__(self, make: Callable[[str], str]) -> None:
        self.make = make
        self.made: list[tuple[str, str]] = []

    def __call__(self, kind: str) -> str:
        made = self.make(kind)
        self.made.append((kind, made))
        return made

    def replay(self) -> Callable[[str], str]:
        queues: dict[str, deque[str]] = {}
        for kind, made in self.made:
            queues.setdefault(kind, deque()).append(made)
        return lambda kind: queues[kind].popleft() if queues.get(kind) else self.make(kind)


def _generic(code: str) -> str:
    """What a client is told about a parse problem: the code's general description, never the text."""
    return ERROR_CODES.get(code, "the model's output does not parse here")


def _said(problem_: dict[str, Any]) -> str:
    """A problem's message as a client may read it: its own when it quotes nothing of the output
    (:class:`~grammar_parse._engine.wire.ClientText`), its code's general description otherwise."""
    message = problem_.get("message")
    return message if isinstance(message, ClientText) else _generic(problem_.get("code", ""))


class _Output:
    """One generation's wire output: LMSP events or Chat Completions chunks (see the subclasses). Outputs
    are dicts; ``frame`` writes one. ``failure`` is the (client-safe) problem once the generation failed."""

    failure: dict[str, Any] | None = None

    def feed(self, piece: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def finish(self, generation: Generation) -> list[dict[str, Any]]:
        """End of generation: the last outputs, all but the final one (see :meth:`close`)."""
        raise NotImplementedError

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def close(self) -> list[dict[str, Any]]:
        """The final outputs (after :meth:`finish`, or nothing more after a failure)."""
        raise NotImplementedError

    def violate(self, error: dict[str, Any]) -> None:
        """A finished generation that breaks tool_choice ends failed instead."""
        raise NotImplementedError

    def calls(self, outs: list[dict[str, Any]]) -> list[str]:
        """The names of the calls these outputs start."""
        raise NotImplementedError

    def lenient(self, pieces: list[str], generation: Generation) -> tuple[_Output, list[dict[str, Any]]]:
        """The same output parsed leniently (for a truncated generation): a new output and all it gives."""
        raise NotImplementedError

    def frame(self, out: dict[str, Any]) -> bytes:
        raise NotImplementedError

    @property
    def ended(self) -> bool:
        raise NotImplementedError


class _LMSPOutput(_Output):
    def __init__(self, app: LMSPApp, prompt: str, tools: list[dict[str, Any]] | None, ids: _Ids, *,
                 strict: bool = True, response_id: str | None = None) -> None:
        self.app, self.prompt, self.tools, self.ids = app, prompt, tools, ids
        self.stream = ResponseStream(app.compiled, prompt, tools=tools, ids=ids, strict=strict,
                                     response_id=response_id)
        self.held: dict[str, Any] | None = None
        self.estimated = False  # (the usage is the gateway's estimate: LMSP's usage object takes no mark)

    def _clean(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for event in events:
            if event["event"] == "response.failed":
                self.failure = event["data"]["error"] = self.app.client_problem(event["data"]["error"],
                                                                                said=self.stream.failure_text())
            elif event["event"] == "response.parse_error":
                event["data"]["message"] = _said(event["data"])
        return events

    def feed(self, piece: str) -> list[dict[str, Any]]:
        return self._clean(self.stream.feed(piece))

    def finish(self, generation: Generation) -> list[dict[str, Any]]:
        self.estimated = generation.estimated
        events = self._clean(self.stream.complete(generation.input_tokens, generation.output_tokens,
                                                  truncated=generation.truncated))
        if events and self.stream.final is events[-1]:
            self.held = events.pop()
        return events

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        return self._clean(self.stream.fail(error))

    def close(self) -> list[dict[str, Any]]:
        held, self.held = self.held, None
        return [held] if held is not None else []

    def violate(self, error: dict[str, Any]) -> None:
        final = self.stream.final
        assert final is not None  # (after finish)
        # The final event is rewritten where it stands, so its id stays the next one in sequence.
        final["event"] = "response.failed"
        final["data"] = {"response_id": self.stream.response_id, "status": "failed", "error": error}
        self.failure = error

    def calls(self, outs: list[dict[str, Any]]) -> list[str]:
        return [e["data"]["item"]["name"] for e in outs if e["event"] == "response.output_item.added"
                and e["data"]["item"]["type"] == "function_call"]

    def lenient(self, pieces: list[str], generation: Generation) -> tuple[_Output, list[dict[str, Any]]]:
        again = _LMSPOutput(self.app, self.prompt, self.tools, _Ids(self.ids.replay()), strict=False,
                            response_id=self.stream.response_id)
        outs = [e for piece in pieces for e in again.feed(piece)]
        return again, outs + again.finish(generation)

    def frame(self, out: dict[str, Any]) -> bytes:
        if self.estimated and out is self.stream.final and "usage" in out["data"]:
            return _ESTIMATED_COMMENT + sse(out).encode()  # (a comment line: every SSE reader skips it)
        return sse(out).encode()

    @property
    def ended(self) -> bool:
        return self.stream.status != "in_progress"


class _ChatOutput(_Output):
    def __init__(self, app: LMSPApp, prompt: str, tools: list[dict[str, Any]] | None, ids: _Ids, *,
                 completion_id: str, created: int, include_usage: bool, strict: bool = True) -> None:
        self.app, self.prompt, self.tools, self.ids = app, prompt, tools, ids
        self.completion_id, self.created, self.include_usage = completion_id, created, include_usage
        self.stream = ChatCompletionsStream(app.compiled, prompt, tools=tools, ids=ids, strict=strict)
        self.finished = False
        self.violation: dict[str, Any] | None = None  # (the error chunk close() sends instead of the last one)
        self.checker = CallChecker(tools or [])
        self.parse_failure: ClientText | None = None  # why the output failed to parse, as a client may read it
        self.usage: dict[str, int | bool] | None = None

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out = chunk(delta, completion_id=self.completion_id, model=self.app.model, created=self.created,
                    finish_reason=finish_reason)
        if self.include_usage:
            out["usage"] = None
        return out

    def _parse_failed(self, error: GrammarParseError) -> list[dict[str, Any]]:
        self.app.log_failure("parse_failed", error)
        self.parse_failure = parse_failure(error, open_call(self.stream.calls, self.checker.offered))
        return self.fail(problem("parse_failed", "the model's output could not be parsed", 500,
                                 "The model output could not be parsed"))

    def feed(self, piece: str) -> list[dict[str, Any]]:
        if self.ended:
            return []
        try:
            return [self._chunk(d) for d in self.stream.feed(piece)]
        except GrammarParseError as e:
            return self._parse_failed(e)

    def finish(self, generation: Generation) -> list[dict[str, Any]]:
        if self.ended:
            return []
        try:
            deltas = self.stream.finish(truncated=generation.truncated)
        except GrammarParseError as e:
            return self._parse_failed(e)
        self.finished = True
        self.usage = {"prompt_tokens": generation.input_tokens, "completion_tokens": generation.output_tokens,
                      "total_tokens": generation.input_tokens + generation.output_tokens}
        if generation.estimated:  # (counted by the gateway, not the model's tokenizer: OpenAI's usage takes more keys)
            self.usage["estimated"] = True
        return [self._chunk(d) for d in deltas]

    def fail(self, error: dict[str, Any]) -> list[dict[str, Any]]:
        if self.failure is not None:
            return []
        self.failure = self.app.client_problem(error, said=self.parse_failure)
        return [{"error": _openai_error(self.failure)}]

    def close(self) -> list[dict[str, Any]]:
        if self.violation is not None:
            violation, self.violation = self.violation, None
            return [violation]
        if self.failure is not None or not self.finished:
            return []
        outs = [self._chunk({}, self.stream.finish_reason)]
        if self.include_usage:
            outs.append({"id": self.completion_id, "object": "chat.completion.chunk", "created": self.created,
                         "model": self.app.model, "choices": [], "usage": self.usage})
        return outs

    def violate(self, error: dict[str, Any]) -> None:
        self.finished = False
        self.violation = self.fail(error)[0]

    def calls(self, outs: list[dict[str, Any]]) -> list[str]:
        return [call["function"]["name"] for out in outs for choice in out.get("choices", [])
                for call in choice["delta"].get("tool_calls", []) if "name" in call.get("function", {})]

    def lenient(self, pieces: list[str], generation: Generation) -> tuple[_Output, list[dict[str, Any]]]:
        again = _ChatOutput(self.app, self.prompt, self.tools, _Ids(self.ids.replay()),
                            completion_id=self.completion_id, created=self.created,
                            include_usage=self.include_usage, strict=False)
        outs = [o for piece in pieces for o in again.feed(piece)]
        return again, outs + again.finish(generation)

    def frame(self, out: dict[str, Any]) -> bytes:
        return f"data: {wire_json(out)}\n\n".encode()

    @property
    def ended(self) -> bool:
        return self.failure is not None

    def message(self) -> dict[str, Any]:
        """The final message, its problems said as a client may read them (see :meth:`_call_errors`)."""
        message = dict(self.stream.message)
        if "parse_errors" in message:
            message["parse_errors"] = [{**e, "message": _said(e)} for e in message["parse_errors"]]
        if "tool_calls" in message:
            message["tool_calls"] = [self._call_errors(call) for call in message["tool_calls"]]
        return message

    def _call_errors(self, call: dict[str, Any]) -> dict[str, Any]:
        """A call with its ``errors`` said with their codes, in the request's words: what is wrong for the
        tools is checked again on the arguments as sent (:class:`CallChecker`: the tool offered or not, the
        argument path, the types), the parser's own entries keep their code with a path whose keys the
        schema does not name shown as ``*``, and a message that could quote the output is its code's
        description."""
        name, sent = call["function"]["name"], call["function"]["arguments"]
        # (the parser's own entries; the tools check's, call.*, are redone on the arguments as sent)
        coded = [e for e in call.get("errors", []) if not e.get("code", "call.").startswith("call.")]
        errors: list[dict[str, Any]] = []
        if self.tools is not None:
            broken = any(e["code"] != "parse.json_constant" for e in coded)
            try:  # (a broken call's arguments are what was valid of it: only its tool is checked)
                arguments = json.loads(sent) if not broken else {}
            except ValueError:
                arguments = {}
            if not broken or name not in self.checker.offered:
                errors += self.checker.client_problems(name, arguments)
        errors += [{**e, **({"path": self.checker.path(name, e["path"])} if "path" in e else {}), "message": _said(e)}
                   for e in coded]
        out = {key: value for key, value in call.items() if key != "errors"}
        return {**out, "errors": errors} if errors else out


def _openai_error(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAI ``error`` object for a problem document (what the openai client reads and raises)."""
    return {"message": document.get("detail") or document["title"], "type": document["code"], "param": None,
            "code": document["code"]}


async def _close(pieces: AsyncIterator[str]) -> None:
    aclose = getattr(pieces, "aclose", None)
    if aclose is not None:
        await aclose()


# ---------------------------------------------------------------------------- the application
@dataclass
class _Request:
    """One HTTP request in flight: its ASGI channels, its id, and what the log line says of it."""

    scope: Scope
    receive: Receive
    send: Send
    id: str
    status: int = 0
    outcome: str = ""


@dataclass
class LMSPApp:
    """The ASGI application. ``model`` is the id clients ask for; ``grammar`` parses its output;
    ``chat_template`` (the model's) renders each request's prompt, or ChatML ending in the grammar's
    start anchor without one. ``token`` (when set) is the bearer token every endpoint but ``/health``
    needs; ``limits`` bound requests; ``store`` keeps ``store: true`` responses (a
    :class:`~grammar_parse.serving.store.ResponseStorage`, or a URL for :func:`~grammar_parse.serving.store.open_store`:
    ``"redis://127.0.0.1:6379/0"`` shares them between replicas); ``template_kwargs`` are variables for
    the chat template (``{"enable_thinking": False}``)."""

    grammar: Any = "qwen3"
    model: str = "qwen3"
    token: str | None = None
    chat_template: ChatTemplate | None = None
    backend: Any = field(default_factory=ReplayBackend)
    ids: Callable[[str], str] = random_ids
    clock: Callable[[], float] = time.time
    store: ResponseStorage = field(default_factory=ResponseStore)
    limits: Limits = field(default_factory=Limits)
    template_kwargs: dict[str, Any] = field(default_factory=dict)  # variables for the chat template

    def __post_init__(self) -> None:
        if isinstance(self.store, str):
            self.store = open_store(self.store)
        self.compiled: Grammar = resolve_grammar(self.grammar)
        self.request_schema = schema_validator("request")
        import jsonschema

        self.chat_schema = jsonschema.Draft202012Validator(CHAT_REQUEST_SCHEMA)
        self.has_tools = bool(call_regions(self.compiled))
        anchor = self.compiled.start_anchor
        self.anchor = anchor.literals[0] if anchor is not None and anchor.literals else "<|im_start|>assistant\n"
        self.created = int(self.clock())
        self.in_progress = 0  # requests being served (the max_concurrent limit)

    # ------------------------------------------------------------------ prompts
    def prompt(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt the model continues: the items (and tools) rendered with the model's chat template."""
        return self.render(chat_messages(items), tools)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt for chat messages and LMSP-shaped tools (ChatML without the model's template)."""
        if self.chat_template is None:
            return chatml_messages(messages, self.anchor)
        return self.chat_template.render(messages, tools=template_tools(tools) or None, add_generation_prompt=True,
                                         **self.template_kwargs)

    async def _render(self, ctx: _Request, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                      items: bool = False) -> str:
        """The prompt, rendered in a worker thread (a long conversation takes milliseconds); ``items``: the
        ``messages`` are LMSP input items, made chat messages in the thread too."""
        try:
            return await asyncio.to_thread(self.prompt if items else self.render, messages, tools)
        except ChatTemplateError as e:
            # The template's own refusal (roles must alternate, ...) is the client's to fix; anything else is
            # the server's template, logged in full here and never sent (it names the template's internals).
            _log.warning("request_id=%s chat template: %s", ctx.id, e)
            if e.code == "chat_template.raised":
                said = _short(e.detail.partition("the template raised: ")[2] or "it raised an error")
                raise _refuse("invalid_request", f"the model's chat template refuses this conversation: {said}"
                              ) from None
            raise _refuse("internal_error", "the model's chat template could not render this request",
                          title="The response could not be produced") from None

    # ------------------------------------------------------------------ problems
    def client_problem(self, error: dict[str, Any], *, said: ClientText | None = None) -> dict[str, Any]:
        """A problem as a client may see it: failures whose detail could quote the model's output, the
        template or the upstream are said in general terms (the full one is logged); ``said`` adds why, in
        words that quote nothing of the output (a parse failure's code, region and call)."""
        code = error.get("code", "internal_error")
        safe = {"parse_failed": "the model's output could not be parsed",
                "internal_error": "the response could not be produced",
                "upstream_failed": "the model server failed", "upstream_timeout": "the model server did not answer in time",
                "context_length_exceeded": "the prompt and max_output_tokens do not fit the model's context window"}
        if code not in safe:
            return error
        if not str(error.get("detail", "")).startswith(safe[code]):
            self.log_failure(code, error.get("detail"))
        why = f"{safe[code]}: {said}" if said else safe[code]
        return problem(code, f"{why} (request {_request_id.get()}; the server log has the details)",
                       error.get("status", PROBLEM_CODES[code][0]), error.get("title"))

    def log_failure(self, code: str, detail: Any) -> None:
        """The full error, in the server log under the request's id."""
        _log.warning("request_id=%s %s: %s", _request_id.get(), code, detail)

    # ------------------------------------------------------------------ ASGI
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send, self._close)
            return
        if scope["type"] != "http":
            return
        ctx = _Request(scope, receive, send, secrets.token_hex(8))
        send_timeout = self.limits.send_timeout
        ctx.send = _logged_send(ctx, send_timeout)
        _request_id.set(ctx.id)  # (each ASGI call runs in its own task, so in its own context)
        started = time.perf_counter()
        self.in_progress += 1
        try:
            if self.in_progress > self.limits.max_concurrent and scope.get("path") != "/health":
                raise _refuse("overloaded", f"the server is serving {self.limits.max_concurrent} requests already",
                              title="Too many requests in progress", headers=[(b"retry-after", b"1")])
            await self._dispatch(ctx)
        except HTTPProblem as e:
            await self._problem(ctx, e)
        except ClientGone:
            ctx.outcome = "client_closed"
        except _ClientStalled:
            # (the response is left unfinished: the ASGI server drops the connection)
            ctx.outcome = "client_stalled"
            _log.warning("request_id=%s the client read nothing for %g s: the response was given up", ctx.id,
                         send_timeout)
        except Exception:  # noqa: BLE001 - a bug is logged and answered with a problem, never a traceback
            _log.exception("request_id=%s failed", ctx.id)
            if ctx.status == 0:
                await self._problem(ctx, _refuse("internal_error", f"the server failed (request {ctx.id})",
                                                 title="The response could not be produced"))
        finally:
            self.in_progress -= 1
            _log.info("request_id=%s method=%s path=%s status=%d duration_ms=%.1f%s", ctx.id, scope.get("method"),
                      json.dumps(scope.get("path", "")), ctx.status, (time.perf_counter() - started) * 1000,
                      f" outcome={ctx.outcome}" if ctx.outcome else "")

    async def _close(self) -> None:
        for owner in (self.backend, self.store):  # (an upstream backend's connections, a shared store's)
            aclose = getattr(owner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _problem(self, ctx: _Request, e: HTTPProblem) -> None:
        if ctx.status:
            return  # (the response has started: nothing more can be said on it)
        document = dict(e.document)
        if ctx.scope["path"].startswith("/v1/"):
            document["error"] = _openai_error(document)
        headers = list(e.headers)
        if e.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="lmsp"'))
        await _json(ctx.send, e.status, document, content_type=b"application/problem+json", headers=headers)

    async def _dispatch(self, ctx: _Request) -> None:
        path, method = ctx.scope["path"].rstrip("/") or "/", ctx.scope["method"]
        if path == "/health":
            self._allow(method, "GET")
            await _json(ctx.send, 200, {"status": "ok"})
            return
        self._authorize(ctx.scope)
        if path.startswith("/lmsp/"):
            self._check_version(ctx.scope)
        if path == "/lmsp/v1/responses":
            self._allow(method, "POST")
            await self._lmsp_create(ctx)
        elif path.startswith("/lmsp/v1/responses/"):
            self._allow(method, "GET")
            stored = await self.store.aget(path.rsplit("/", 1)[1])
            if stored is None:
                raise _refuse("response_not_found", "no stored response has this id")
            await _json(ctx.send, 200, stored.response, headers=[_VERSION])
        elif path == "/v1/chat/completions":
            self._allow(method, "POST")
            await self._chat_create(ctx)
        elif path == "/v1/models":
            self._allow(method, "GET")
            await _json(ctx.send, 200, {"object": "list", "data": [self._model_card()]})
        elif path.startswith("/v1/models/"):
            self._allow(method, "GET")
            if path.removeprefix("/v1/models/") != self.model:
                raise _refuse("model_not_found", f"this service serves {self.model!r}")
            await _json(ctx.send, 200, self._model_card())
        else:
            raise _refuse("not_found", f"{method} {_short(ctx.scope['path'], 100)} is not an endpoint here")

    def _model_card(self) -> dict[str, Any]:
        return {"id": self.model, "object": "model", "created": self.created, "owned_by": "grammar-parse"}

    @staticmethod
    def _allow(method: str, allowed: str) -> None:
        if method != allowed:
            raise _refuse("method_not_allowed", f"this endpoint takes {allowed}",
                          headers=[(b"allow", allowed.encode())])

    def _authorize(self, scope: Scope) -> None:
        if self.token is None:
            return
        given = _header(scope, b"authorization")
        try:
            scheme, _, credentials = given.decode("ascii").strip().partition(" ")
        except UnicodeDecodeError:
            scheme, credentials = "", ""
        # (compared as bytes in constant time, whatever the scheme said, so timing tells nothing)
        matches = hmac.compare_digest(credentials.strip().encode(), self.token.encode())
        if not (matches and scheme.lower() == "bearer"):
            raise _refuse("unauthorized", "a valid bearer token is required", title="Unauthorized")

    @staticmethod
    def _check_version(scope: Scope) -> None:
        version = _header(scope, b"lmsp-version")
        if version and not re.fullmatch(rb"\s*1(\.\d+)?\s*", version):
            raise _refuse("unsupported_version", f"this service speaks LMSP 1.0, not {_short(version.decode('latin-1'), 40)!r}")

    def _check_model(self, request: dict[str, Any]) -> None:
        if request["model"] != self.model:
            raise _refuse("model_not_found", f"this service serves {self.model!r}, not {_short(request['model'], 80)!r}")
        if request.get("tools") and not self.has_tools:
            raise _refuse("unsupported_capability", "the model's output format has no tool calls")

    # ------------------------------------------------------------------ LMSP
    async def _lmsp_create(self, ctx: _Request) -> None:
        body = await _body(ctx, self.limits)
        request = await asyncio.to_thread(_decode, body, self.request_schema, ("input", "tools"), self.limits)
        self._check_model(request)
        if (request.get("response_format") or {}).get("type") == "json_schema":
            raise _refuse("unsupported_capability", "structured output is not available for this model")
        items = request["input"] = _input_items(request["input"])
        if (previous := request.get("previous_response_id")) is not None:
            stored = await self.store.aget(previous)
            if stored is None:
                raise _refuse("response_not_found", "previous_response_id is not a stored response (never stored, "
                                                    "evicted or expired)")
            items = stored.conversation + items  # (the stored conversation is one list: one copy per link)
            _count("input (with the stored conversation it continues)", items, self.limits.max_items)
        _check_call_ids(items, request["input"], "function_call_output")
        tools = list(request.get("tools") or [])
        choice = ToolChoice.read(request.get("tool_choice"), tools, None)
        offered = choice.offered(tools)
        prompt = await self._render(ctx, items, offered, items=True)
        typed = [{"name": t["name"], "parameters": t.get("parameters", {})} for t in offered]
        _check_tools(typed)
        ids = _Ids(self.ids)
        output = _LMSPOutput(self, prompt, typed or None, ids)
        created_at = int(self.clock())
        generation = self._start({**request, "input": items, "tools": offered}, prompt)
        streaming = bool(request.get("stream"))
        if streaming:
            await ctx.send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), _VERSION]})
        done = await _watch(ctx, _generate(self.compiled, output, generation, choice, ctx.send if streaming else None))
        if done is None:
            return
        assert isinstance(done, _LMSPOutput)
        response = done.stream.response(model=self.model, created_at=created_at)
        if request.get("store"):
            # The conversation is replayed as a follow-up's input: lone surrogates in the model's output (an
            # upstream's \\ud800 escape) made U+FFFD, as in a client's input, so the prompt can be encoded.
            await self.store.aput(response, well_formed(items + json.loads(json.dumps(response["output"]))))
        if streaming:
            await ctx.send({"type": "http.response.body", "body": b"", "more_body": False})
        elif response["status"] == "failed":
            error = response["error"]
            raise HTTPProblem(error["status"], error["code"], error["detail"], error["title"])
        else:
            await _json(ctx.send, 200, response, headers=[_VERSION, *([_ESTIMATED] if done.estimated else [])])

    def _start(self, request: dict[str, Any], prompt: str) -> Generation:
        try:
            generation: Generation = self.backend.start(request, prompt)
        except Exception as e:  # noqa: BLE001 - a backend that cannot start is the upstream's failure
            raise self._backend_problem(e) from None
        return generation

    def _backend_problem(self, error: Exception) -> HTTPProblem:
        document = self.client_problem(_backend_error(error))
        return HTTPProblem(document["status"], document["code"], document["detail"], document["title"])

    # ------------------------------------------------------------------ Chat Completions
    async def _chat_create(self, ctx: _Request) -> None:
        body = await _body(ctx, self.limits)
        request = await asyncio.to_thread(_decode, body, self.chat_schema, ("messages", "tools"), self.limits)
        self._check_model(request)
        refused = _chat_unsupported(request)
        if refused is not None:
            raise _refuse("unsupported_capability", f"this server cannot give {refused}")
        items = _chat_items(request["messages"])
        _check_call_ids(items, items, "the tool message for")
        tools = [{"type": "function", **{k: t["function"][k] for k in ("name", "description", "parameters")
                                         if k in t["function"]}} for t in request.get("tools") or []]
        raw_choice = request.get("tool_choice")
        choice = ToolChoice.read(raw_choice["function"] if isinstance(raw_choice, dict) else raw_choice, tools,
                                 request.get("parallel_tool_calls"))
        offered = choice.offered(tools)
        prompt = await self._render(ctx, _chat_normalized(request["messages"]), offered)
        limit = request.get("max_completion_tokens") or request.get("max_tokens")
        backend_request = {"model": request["model"], "input": items, "messages": request["messages"],
                           "tools": offered, "stream": bool(request.get("stream")),
                           **({"max_output_tokens": limit} if limit else {}),
                           **({"temperature": request["temperature"]} if request.get("temperature") is not None else {}),
                           **{k: request[k] for k in SAMPLING_FIELDS if request.get(k) is not None}}
        typed = [{"name": t["name"], "parameters": t.get("parameters", {})} for t in offered]
        _check_tools(typed)
        streaming = bool(request.get("stream"))
        include_usage = streaming and bool((request.get("stream_options") or {}).get("include_usage"))
        output = _ChatOutput(self, prompt, typed or None, _Ids(self.ids), completion_id=f"chatcmpl-{secrets.token_hex(12)}",
                             created=int(self.clock()), include_usage=include_usage)
        generation = self._start(backend_request, prompt)
        if streaming:
            await ctx.send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        done = await _watch(ctx, _generate(self.compiled, output, generation, choice, ctx.send if streaming else None))
        if done is None:
            return
        assert isinstance(done, _ChatOutput)
        if streaming:
            await ctx.send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
            return
        if done.failure is not None:
            failure = done.failure
            raise HTTPProblem(failure["status"], failure["code"], failure["detail"], failure["title"])
        await _json(ctx.send, 200, {
            "id": done.completion_id, "object": "chat.completion", "created": done.created, "model": self.model,
            "choices": [{"index": 0, "message": done.message(), "finish_reason": done.stream.finish_reason,
                         "logprobs": None}], "usage": done.usage})


# ---------------------------------------------------------------------------- one generation, run and framed
async def _watch(ctx: _Request, work: Awaitable[_Output]) -> _Output | None:
    """Run a generation while watching the connection: a client that leaves cancels it (its pieces are
    closed, so an upstream stops too). None when the client left."""
    task = asyncio.ensure_future(work)

    async def gone() -> None:
        while (await ctx.receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(gone())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        ctx.outcome = "client_closed"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return None
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def _generate(grammar: Grammar, output: _Output, generation: Generation, choice: ToolChoice,
                    send: Send | None) -> _Output:
    """Feed the backend's pieces to ``output`` (its parser's ``grammar`` trims a delimiter cut at the end),
    sending its frames as they come when ``send`` is given (streaming); returns the output as it ended (a
    truncated one re-read leniently: a new output)."""
    pieces: list[str] = []
    digest = hashlib.blake2b(digest_size=16)
    sent = 0
    calls = 0

    async def emit(outs: list[dict[str, Any]]) -> None:
        nonlocal sent
        sent += len(outs)
        if send is not None and outs:
            frames = [output.frame(out) for out in outs]
            for frame in frames:
                digest.update(frame)
            await send({"type": "http.response.body", "body": b"".join(frames), "more_body": True})

    def check(outs: list[dict[str, Any]]) -> str | None:
        nonlocal calls
        for name in output.calls(outs):
            calls += 1
            if (why := choice.on_call(name, calls)) is not None:
                return why
        return None

    source = generation.pieces
    exhausted = False
    try:
        try:
            async for piece in source:
                pieces.append(piece)
                outs = output.feed(piece)
                if (why := check(outs)) is not None:
                    outs += output.fail(_violated(why))
                await emit(outs)
                if output.ended:
                    break
            else:
                exhausted = True
        except _ClientStalled:
            raise  # (nothing more can be sent: the pieces are closed below)
        except Exception as e:  # noqa: BLE001 - a backend failing mid-generation ends the response cleanly
            exhausted = True  # (an iterator that raised is finished)
            await emit(output.fail(_backend_error(e)))
    finally:
        if not exhausted:
            await _close(source)
    if output.ended:
        return output
    outs = output.finish(generation)
    if output.failure is not None and output.failure["code"] == "parse_failed" and generation.truncated:
        # Cut at the token limit inside a region: what was parsed is kept, leniently, so the response ends
        # incomplete rather than failed. The re-read gives what was sent again (same pieces, same ids).
        again = _reread(grammar, output, pieces, generation, sent, digest.digest() if send is not None else None)
        if again is not None:
            output, outs = again
    elif output.failure is None:
        why = check(outs) or (None if generation.truncated else choice.at_end(calls))
        if why is not None:
            output.violate(_violated(why))
    await emit(outs + output.close())
    return output


def _reread(grammar: Grammar, output: _Output, pieces: list[str], generation: Generation, sent: int,
            digest: bytes | None) -> tuple[_Output, list[dict[str, Any]]] | None:
    """A truncated output read again leniently, with a delimiter cut part-way at its end dropped: the
    new output and what it has to send beyond the ``sent`` outputs already sent (whose ``digest``, when
    streaming, they must match). None when they would not match: the failure stands."""
    for trimmed in (_trim(grammar, pieces), pieces):
        again, outs = output.lenient(trimmed, generation)
        if digest is not None:
            check = hashlib.blake2b(digest_size=16)
            for out in outs[:sent]:
                check.update(again.frame(out))
            if check.digest() != digest:
                continue
        return again, outs[sent:]
    return None


def _trim(grammar: Grammar, pieces: list[str]) -> list[str]:
    """The pieces without a delimiter the output was cut inside of at its end (``</tool_c``)."""
    text = "".join(pieces)
    cut = len(text)
    lo = max(0, cut - 64)  # (delimiters are short: only the very end can hold a cut one)
    for terminal in grammar.terminals.values():
        matcher = terminal.matcher
        if terminal.role not in ("open", "close", "delimiter") or matcher is None:
            continue
        _, pending = matcher.probe(text, lo, matcher.search(text, lo))
        if pending == -1 or pending >= cut:
            continue
        whole = matcher.search(text, pending)
        if whole is not None and whole[0] == pending and whole[1] == len(text):
            continue  # (a complete delimiter at the end: kept)
        cut = pending
    if cut == len(text):
        return pieces
    kept: list[str] = []
    length = 0
    for piece in pieces:
        if length + len(piece) >= cut:
            kept.append(piece[:cut - length])
            break
        kept.append(piece)
        length += len(piece)
    return [p for p in kept if p]


def _backend_error(error: Exception) -> dict[str, Any]:
    """The problem of a backend that failed (its detail is logged, never sent: see client_problem)."""
    said = getattr(error, "problem", None)
    if callable(said):  # (an UpstreamError says its own: 502, 504 for a stall)
        document: dict[str, Any] = said()
        document["detail"] = f"[{getattr(error, 'code', 'upstream')}] {document.get('detail')}"
        return document
    _log.warning("request_id=%s the backend failed", _request_id.get(), exc_info=error)
    return problem("upstream_failed", f"{type(error).__name__}: {error}", 502, "The model server failed")


class ClientGone(Exception):
    """The client closed the connection before its body arrived."""


class _ClientStalled(Exception):
    """A send waited ``Limits.send_timeout`` on a client that does not read."""


_VERSION = (b"lmsp-version", b"1.0")
# How an LMSP response says its usage is the gateway's estimate (the backend counted no tokens): a header on
# a JSON response, a comment line before a stream's final event (LMSP's usage object takes no other keys).
_ESTIMATED = (b"x-usage-estimated", b"true")
_ESTIMATED_COMMENT = b": usage estimated (the model server counted no tokens)\n"


def _logged_send(ctx: _Request, send_timeout: float) -> Send:
    """The request's ``send``, noting the response's status (for the log line) and adding its
    ``X-Request-ID``, and given up on (:class:`_ClientStalled`) when one send waits ``send_timeout`` s."""
    send = ctx.send
    loop = asyncio.get_running_loop()

    async def logged_send(message: Message) -> None:
        if message["type"] == "http.response.start":
            ctx.status = message["status"]
            message = {**message, "headers": [*message.get("headers", []), (b"x-request-id", ctx.id.encode())]}
        # A client that does not read fills the connection's buffers and the server's send waits: bounded
        # by cancelling the waiting task (a timer costs ~1 us a send, a wait_for task ~20 us).
        task = asyncio.current_task()
        stalled = False

        def give_up() -> None:
            nonlocal stalled
            stalled = True
            if task is not None:
                task.cancel()

        timer = loop.call_later(send_timeout, give_up)
        try:
            await send(message)
        except asyncio.CancelledError:
            if not stalled:
                raise
            if task is not None and hasattr(task, "uncancel"):
                task.uncancel()
            raise _ClientStalled from None
        finally:
            timer.cancel()

    return logged_send


def _header(scope: Scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return b""


async def _json(send: Send, status: int, body: dict[str, Any], *, content_type: bytes = b"application/json",
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = wire_json(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


# ---------------------------------------------------------------------------- running it
def _guarded_protocol(header_timeout: float, max_connections: int) -> type:
    """uvicorn's h11 protocol with the two limits it lacks: a request's head (request line and headers)
    must arrive within ``header_timeout`` s of its first byte (of the connection, for the first request),
    else the connection is closed, so slowly dribbled or never-sent heads do not hold connections (uvicorn
    times out only idle keep-alive connections); and a connection beyond ``max_connections`` open ones is
    closed as soon as it is accepted. (uvicorn's own ``limit_concurrency`` answers a plain-text 503: the
    app's ``Limits.max_concurrent`` answers a problem document instead.)"""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                _log.warning("closed a connection: %d connections are open already", max_connections)
                transport.close()
                return
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.conn.their_state is h11.IDLE:
                self._arm()  # (the first byte of a head after a keep-alive pause starts its clock)
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self.head_timer is None:
                self.head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _disarm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _head_timed_out(self) -> None:
            self.head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                _log.info("closed a connection whose request head did not arrive within %s s", header_timeout)
                self.transport.close()

    return GuardedH11Protocol


def uvicorn_config(app: ASGIApp, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info",
                   header_timeout: float = 10.0, max_connections: int = 2048, timeout_keep_alive: int = 5,
                   timeout_graceful_shutdown: int = 10, max_header_bytes: int = 64 * 1024) -> Any:
    """The uvicorn configuration :func:`serve` runs: h11 (so ``max_header_bytes`` bounds a request's head),
    each request's head read within ``header_timeout`` s, at most ``max_connections`` open connections,
    idle keep-alive connections closed after ``timeout_keep_alive`` s, ``timeout_graceful_shutdown`` s for
    requests in flight to finish on shutdown, no access log (the app logs each request itself, with its
    id). Requests in progress are bounded by the app (``Limits.max_concurrent``), not by uvicorn."""
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, lifespan="on",
                          http=_guarded_protocol(header_timeout, max_connections), ws="none",
                          h11_max_incomplete_event_size=max_header_bytes, timeout_keep_alive=timeout_keep_alive,
                          timeout_graceful_shutdown=timeout_graceful_shutdown, server_header=False)


def serve(app: ASGIApp, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info",
          on_ready: Callable[[str], None] | None = None, **options: Any) -> None:
    """Run an ASGI app (the gateway's :class:`LMSPApp`, or any other) with uvicorn (``pip install
    'grammar-parse[serve]'``) on ``host`` (loopback by default:
    give ``0.0.0.0`` to serve other machines, and a token). ``on_ready(url)`` is called once the port is
    bound (``port=0`` picks a free one: the url has it); ``options`` go to :func:`uvicorn_config`."""
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("grammar-parse serve (and workbench) needs an ASGI server: pip install "
                         "'grammar-parse[serve]'") from None

    class AnnouncingServer(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if self.started and on_ready is not None:
                bound = self.servers[0].sockets[0].getsockname()
                on_ready(f"http://{_url_host(bound[0])}:{bound[1]}")

    AnnouncingServer(uvicorn_config(app, host, port, log_level=log_level, **options)).run()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


__all__ = ["ASGIApp", "CHAT_REQUEST_SCHEMA", "ClientGone", "Generation", "LMSPApp", "Limits", "NUMERIC_FIELDS", "PROBLEM_CODES", "ReplayBackend", "ResponseStore",
           "SAMPLING_FIELDS", "ToolChoice", "chat_messages", "chatml_messages", "chatml_prompt", "lifespan", "random_ids", "read_body", "read_json",
           "serve", "template_tools", "tokens", "uvicorn_config", "well_formed"]
