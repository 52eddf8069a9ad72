"""A reference LMSP 1.0 endpoint: ``POST /lmsp/v1/responses`` and ``GET /lmsp/v1/responses/{id}``.

A plain ASGI application (run it with any ASGI server; ``grammar-parse serve`` uses uvicorn, the
``serve`` extra). Generation is pluggable: a backend turns a request and its prompt into text pieces.
The default :class:`ReplayBackend` replays recorded model outputs chunked like tokens, honouring
``max_output_tokens``, so the whole service runs on any machine. The output goes through grammar_parse
(:class:`grammar_parse.lmsp.ResponseStream`), so responses and streams are LMSP-correct by construction.

Errors are problem documents (``application/problem+json``): 400 ``invalid_request`` for a malformed
request, 400 ``unsupported_capability`` when it needs tools or structured output the grammar cannot
produce, 401 ``unauthorized`` without the configured bearer token, 404 ``model_not_found`` and
``response_not_found``. If the client closes a streaming connection, generation stops.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

from .backends import Generation, ReplayBackend, tokens
from .chat_template import ChatTemplate
from .errors import ChatTemplateError
from .grammar import Grammar
from .lmsp import ResponseStream, problem, schema_validator, sse
from .session import resolve_grammar
from .toolstream import call_regions
from .wire import wire_json

_log = logging.getLogger("grammar_parse.server")
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def random_ids(kind: str) -> str:
    """``kind_`` plus 26 random Crockford base-32 characters, like the ids in the LMSP examples."""
    return f"{kind}_" + "".join(secrets.choice(_CROCKFORD) for _ in range(26))


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """LMSP input items as the chat messages a chat template renders: a message item is a message, the
    function calls in a row are one assistant message's ``tool_calls``, a call's output is a ``tool`` message."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
            messages.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            try:
                arguments: Any = json.loads(item["arguments"])
            except ValueError:
                arguments = item["arguments"]
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": arguments}}
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


def chatml_prompt(items: list[dict[str, Any]], anchor: str = "<|im_start|>assistant\n") -> str:
    """A ChatML rendering of the input items ending with ``anchor``, an open assistant turn (the parser's
    prefix): the prompt when the model's chat template is not given. The grammar's own start anchor keeps
    the parser from reading the prompt as output whatever the grammar (gpt-oss's ``<|start|>assistant``)."""
    out = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "message":
            content = item["content"]
            text = content if isinstance(content, str) else "".join(part.get("text", "") for part in content)
            out.append(f"<|im_start|>{item['role']}\n{text}<|im_end|>\n")
        elif kind == "function_call":
            out.append(f'<|im_start|>assistant\n<tool_call>\n{{"name": {json.dumps(item["name"])}, '
                       f'"arguments": {item["arguments"]}}}\n</tool_call><|im_end|>\n')
        elif kind == "function_call_output":
            out.append(f"<|im_start|>user\n<tool_response>\n{item['output']}\n</tool_response><|im_end|>\n")
    return "".join(out) + anchor


class HTTPProblem(Exception):
    def __init__(self, status: int, code: str, detail: str, title: str | None = None) -> None:
        super().__init__(detail)
        self.document = problem(code, detail, status, title)
        self.status = status


@dataclass
class LMSPApp:
    """The ASGI application. ``model`` is the id clients ask for; ``grammar`` parses its output;
    ``chat_template`` (the model's) renders each request's prompt, or ChatML ending in the grammar's
    start anchor without one."""

    grammar: Any = "qwen3"
    model: str = "qwen3"
    token: str | None = None
    chat_template: ChatTemplate | None = None
    backend: Any = field(default_factory=ReplayBackend)
    ids: Callable[[str], str] = random_ids
    clock: Callable[[], float] = time.time
    store: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.compiled: Grammar = resolve_grammar(self.grammar)
        self.request_schema = schema_validator("request")
        self.has_tools = bool(call_regions(self.compiled))
        anchor = self.compiled.start_anchor
        self.anchor = anchor.literals[0] if anchor is not None and anchor.literals else "<|im_start|>assistant\n"

    def prompt(self, items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The prompt the model continues: the items (and tools) rendered with the model's chat template."""
        if self.chat_template is None:
            return chatml_prompt(items, self.anchor)
        return self.chat_template.render(chat_messages(items), tools=template_tools(tools) or None,
                                         add_generation_prompt=True)

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        try:
            self._authorize(scope)
            path, method = scope["path"].rstrip("/"), scope["method"]
            if path == "/lmsp/v1/responses" and method == "POST":
                await self._create(scope, receive, send)
            elif path.startswith("/lmsp/v1/responses/") and method == "GET":
                stored = self.store.get(path.rsplit("/", 1)[1])
                if stored is None:
                    raise HTTPProblem(404, "response_not_found", "no stored response has this id")
                await _json(send, 200, stored)
            else:
                raise HTTPProblem(404, "not_found", f"{method} {scope['path']} is not an LMSP endpoint here")
        except HTTPProblem as e:
            headers = [(b"www-authenticate", b'Bearer realm="lmsp"')] if e.status == 401 else []
            await _json(send, e.status, e.document, content_type=b"application/problem+json", headers=headers)

    def _authorize(self, scope: dict[str, Any]) -> None:
        if self.token is None:
            return
        given = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        if not secrets.compare_digest(given, f"Bearer {self.token}"):
            raise HTTPProblem(401, "unauthorized", "a valid bearer token is required", "Unauthorized")

    async def _read(self, receive: Callable[..., Any]) -> dict[str, Any]:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        try:
            request = json.loads(body)
        except (ValueError, RecursionError) as e:  # (not UTF-8 or not JSON; numbers too long, nesting too deep)
            raise HTTPProblem(400, "invalid_request", f"the body is not JSON that can be read: {e}") from None
        errors = sorted(self.request_schema.iter_errors(request), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path) or "(body)"
            raise HTTPProblem(400, "invalid_request", f"{where}: {errors[0].message}")
        if not isinstance(request, dict):  # the schema wants an object: validation has refused the rest
            raise HTTPProblem(400, "invalid_request", "(body): the request must be a JSON object")
        return request

    def _check(self, request: dict[str, Any]) -> None:
        if request["model"] != self.model:
            raise HTTPProblem(404, "model_not_found", f"this service serves {self.model!r}, not {request['model']!r}")
        if request.get("tools") and not self.has_tools:
            raise HTTPProblem(400, "unsupported_capability", "the model's output format has no tool calls")
        if (request.get("response_format") or {}).get("type") == "json_schema":
            raise HTTPProblem(400, "unsupported_capability", "structured output is not available for this model")
        calls = {item["call_id"] for item in request["input"] if item.get("type") == "function_call"}
        for item in request["input"]:
            if item.get("type") == "function_call_output" and item["call_id"] not in calls:
                raise HTTPProblem(400, "invalid_request",
                                  f"function_call_output {item['call_id']!r} answers no function_call in the input")

    async def _create(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        request = await self._read(receive)
        self._check(request)
        items = list(request["input"])
        if (previous := request.get("previous_response_id")) is not None:
            if previous not in self.store:
                raise HTTPProblem(404, "response_not_found", "previous_response_id is not a stored response")
            items = self.store[previous].get("_input", []) + self.store[previous]["output"] + items
        request_tools = list(request.get("tools") or [])
        try:
            prompt = self.prompt(items, request_tools)
        except ChatTemplateError as e:
            # The template's own refusal (roles must alternate, ...) is the client's to fix; anything else is
            # the server's template, logged in full here and never sent (it names the template's internals).
            _log.warning("chat template: %s", e)
            if e.code == "chat_template.raised":
                said = e.detail.partition("the template raised: ")[2] or "it raised an error"
                raise HTTPProblem(400, "invalid_request", f"the model's chat template refuses this conversation: {said}"
                                  ) from None
            raise HTTPProblem(500, "internal_error", "the model's chat template could not render this request",
                              "The response could not be produced") from None
        tools = [{"name": t["name"], "parameters": t.get("parameters", {})} for t in request_tools]
        stream = ResponseStream(self.compiled, prompt, tools=tools or None, ids=self.ids)
        created_at = int(self.clock())
        generation = self.backend.start(request, prompt)
        if request.get("stream"):
            await self._stream(stream, generation, receive, send, request, items, created_at)
            return
        async for piece in generation.pieces:
            stream.feed(piece)
        stream.complete(generation.input_tokens, generation.output_tokens, truncated=generation.truncated)
        response = stream.response(model=self.model, created_at=created_at)
        if response["status"] == "failed":
            error = response["error"]
            raise HTTPProblem(error["status"], error["code"], error["detail"], error["title"])
        self._keep(request, items, response)
        await _json(send, 200, response)

    async def _stream(self, stream: ResponseStream, generation: Generation, receive: Callable[..., Any],
                      send: Callable[..., Any], request: dict[str, Any], items: list[dict[str, Any]],
                      created_at: int) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        gone = asyncio.Event()

        async def watch() -> None:  # the client closing the connection stops generation
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            pieces = generation.pieces
            async for piece in pieces:
                if gone.is_set():
                    break
                if not await _frames(send, stream.feed(piece)) or stream.status != "in_progress":
                    break
            if gone.is_set():
                if isinstance(pieces, AsyncGenerator):  # a backend may give any async iterator
                    await pieces.aclose()
                return
            await _frames(send, stream.complete(generation.input_tokens, generation.output_tokens,
                                                truncated=generation.truncated))
            self._keep(request, items, stream.response(model=self.model, created_at=created_at))
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            watcher.cancel()

    def _keep(self, request: dict[str, Any], items: list[dict[str, Any]], response: dict[str, Any]) -> None:
        if request.get("store"):
            self.store[response["id"]] = response | {"_input": items}


async def _frames(send: Callable[..., Any], events: list[dict[str, Any]]) -> bool:
    if events:
        try:
            await send({"type": "http.response.body", "body": "".join(map(sse, events)).encode(), "more_body": True})
        except OSError:
            return False
    return True


async def _json(send: Callable[..., Any], status: int, body: dict[str, Any], *, content_type: bytes = b"application/json",
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    data = wire_json({k: v for k, v in body.items() if not k.startswith("_")}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


def serve(app: LMSPApp, host: str = "127.0.0.1", port: int = 8000) -> None:  # pragma: no cover - CLI entry
    """Run the app with uvicorn (``pip install 'grammar-parse[serve]'``)."""
    try:
        import uvicorn
    except ImportError:
        raise SystemExit("grammar-parse serve needs an ASGI server: pip install 'grammar-parse[serve]'") from None
    uvicorn.run(app, host=host, port=port, log_level="warning")


__all__ = ["Generation", "LMSPApp", "ReplayBackend", "chat_messages", "chatml_prompt", "random_ids", "serve",
           "template_tools", "tokens"]
