"""Generation backends for the reference server: where the text the parser reads comes from.

A backend's ``start(request, prompt)`` returns a :class:`Generation`: an async iterator of text pieces,
plus what the backend says about the generation (token counts, whether it was cut off), read once the
pieces are exhausted. Three backends:

* :class:`ReplayBackend` replays recorded outputs, so the server runs anywhere;
* :class:`UpstreamBackend` streams raw text from any OpenAI-compatible completions endpoint (vLLM,
  SGLang, llama.cpp's server, ...), so the server is a gateway that turns a raw-completion model into
  parsed LMSP responses. It needs httpx (the ``serve`` extra), imported on first use;
* :class:`CallableBackend` wraps a Python function, for a model embedded in the same process.

An upstream that fails (refuses the connection, drops it, answers an HTTP error, sends what is not an
event stream, stalls past the read timeout, sends more than was asked for) raises :class:`UpstreamError`
from the pieces iterator, with a stable ``code``; its message never holds the model's output.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import aclosing
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Union

import regex

from ..adapters.lmsp import problem
from ..errors import GrammarParseError

if TYPE_CHECKING:
    import httpx

_log = logging.getLogger("grammar_parse.serving._backends")
_TOKENISH = regex.compile(r"\s*[^\s]{1,4}|\s+")


def tokens(text: str) -> list[str]:
    """Text cut into token-sized pieces (a word piece of up to four characters with its leading space)."""
    return _TOKENISH.findall(text)


#: Chat Completions sampling fields a backend request may carry under their own names; an
#: :class:`UpstreamBackend` forwards them to the completions endpoint as they are.
SAMPLING_FIELDS = ("top_p", "seed", "stop", "presence_penalty", "frequency_penalty", "logit_bias")


@dataclass
class Generation:
    """One generation in progress: text pieces, and what the backend says about them once done.

    ``estimated`` says the token counts are the gateway's estimate (:func:`tokens` of the text), not the
    model's: the gateway marks such usage so that no one bills by it unawares."""

    pieces: AsyncIterator[str]
    input_tokens: int = 0
    output_tokens: int = 0
    truncated: bool = False
    estimated: bool = False


class ReplayBackend:
    """Replays recorded outputs (Qwen3 format, shipped with the package): a tool call when the request
    offers tools, an answer after a tool result, otherwise a greeting; at most ``max_output_tokens``."""

    def __init__(self, samples: dict[str, str] | None = None, *, delay: float = 0.0) -> None:
        folder = resources.files("grammar_parse").joinpath("samples")
        self.samples = samples or {name: folder.joinpath(f"{name}.txt").read_text(encoding="utf-8")
                                   for name in ("answer", "tool_call", "after_tool")}
        self.delay = delay
        self.pulled = 0  # pieces handed out, across generations (tests watch it stop)

    def choose(self, request: dict[str, Any]) -> str:
        items = request.get("input", [])
        if items and items[-1].get("type") == "function_call_output":
            return self.samples["after_tool"]
        return self.samples["tool_call"] if request.get("tools") else self.samples["answer"]

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        pieces = tokens(self.choose(request))
        limit = request.get("max_output_tokens")
        truncated = limit is not None and limit < len(pieces)
        kept = pieces[:limit] if truncated else pieces
        generation = Generation(pieces=self._emit(kept), input_tokens=len(tokens(prompt)), output_tokens=len(kept),
                                truncated=truncated, estimated=True)
        return generation

    async def _emit(self, pieces: list[str]) -> AsyncIterator[str]:
        for piece in pieces:
            self.pulled += 1
            if self.delay:
                await asyncio.sleep(self.delay)
            yield piece


class UpstreamError(GrammarParseError):
    """The model server behind an :class:`UpstreamBackend` failed; ``code`` says how (``upstream.*``).

    ``status`` is the HTTP status the upstream answered, where it answered one. The message names the
    failure and, for an HTTP error, the start of the upstream's error body; never the model's output.
    """

    code = "upstream.protocol"

    def __init__(self, message: str, *, code: str, status: int | None = None, hint: str | None = None) -> None:
        self.status = status
        super().__init__(message, code=code, hint=hint)

    def problem(self) -> dict[str, Any]:
        """The LMSP problem object a gateway answers with: 504 ``upstream_timeout`` for a stall, else 502
        ``upstream_failed`` (the client's request was fine; the service behind the gateway was not)."""
        if self.code == "upstream.timeout":
            return problem("upstream_timeout", self.detail, 504, "The model server did not answer in time")
        if self.code == "upstream.context_length":
            return problem("context_length_exceeded", self.detail, 400, "The prompt is too long for the model")
        return problem("upstream_failed", self.detail, 502, "The model server failed")


# An upstream's error body is quoted up to this many characters: enough for its reason, not a dump.
_BODY_QUOTE = 300
# An upstream's usage count above this is no count a model server makes (a 2**31-token context): it is
# dropped for the estimate, like a negative one or one that is not an integer.
_MAX_COUNT = 2**31 - 1


def _httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise UpstreamError("UpstreamBackend needs httpx", code="upstream.httpx",
                            hint="pip install 'grammar-parse[serve]'") from None
    return httpx


class UpstreamBackend:
    """Streams raw text from an OpenAI-compatible completions endpoint: ``POST {url}/completions``.

    ``url`` is the API root, like ``http://127.0.0.1:8080/v1``; ``model`` the upstream's model name (the
    request's ``model`` without one); ``api_key`` is sent as a bearer token. ``max_output_tokens`` goes
    upstream as ``max_tokens``; ``temperature`` and the :data:`SAMPLING_FIELDS` (``top_p``, ``seed``,
    ``stop``, ...) as they are. A ``"length"`` finish reason makes the response incomplete, the upstream's
    usage counts are the response's (pieces counted without them), and an HTTP 400 that says the prompt is
    too long for the context window is ``upstream.context_length`` (the gateway's 400
    ``context_length_exceeded``); usage counts that are not integers from 0 to 2**31 - 1 are logged and
    replaced by the estimate (``Generation.estimated``). ``extra_body`` is merged into every request body: vLLM, for instance, strips special tokens
    from the text unless given ``{"skip_special_tokens": False}``, and some grammars need them.

    An upstream that lies is bounded: the text it sends may hold at most ``chars_per_token`` characters per
    token asked for (``max_tokens``) and never more than ``max_output_chars`` (a model that ignores
    ``max_tokens``), and one server-sent event (its lines and their data) at most ``max_event_bytes``; a
    breach is ``upstream.protocol`` and closes the upstream connection, so the model server stops too.

    One httpx client per backend, reused across requests and closed by :meth:`aclose`; ``client`` gives
    one configured otherwise (proxies, TLS, connection limits), which the caller then closes. Closing a
    generation's pieces early (the client went away) closes its upstream connection, so the model server
    stops generating too.
    """

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None,
                 connect_timeout: float = 10.0, read_timeout: float = 60.0, client: httpx.AsyncClient | None = None,
                 extra_body: Mapping[str, Any] | None = None, max_output_chars: int = 8 * 2**20,
                 chars_per_token: int = 64, max_event_bytes: int = 4 * 2**20) -> None:
        httpx = _httpx()
        self.url = url.rstrip("/")
        self.model = model
        self.extra_body = dict(extra_body or {})
        self.headers = {"Accept": "text/event-stream"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        # read_timeout bounds each wait for the next bytes, so a slow stream is fine and a stalled one is not.
        self.timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._client = client
        self._owns_client = client is None
        # 64 characters per token is generous (the longest tokens of common vocabularies are runs of spaces or
        # punctuation of 16 to 32 characters; text averages 3 to 4); 8 Mi characters is 2 M tokens at 4 each.
        self.max_output_chars = max_output_chars
        self.chars_per_token = chars_per_token
        self.max_event_bytes = max_event_bytes

    @property
    def client(self) -> httpx.AsyncClient:
        """The httpx client requests go through (made on first use, in the event loop that serves them: a
        backend serves one loop)."""
        if self._client is None:
            httpx = _httpx()
            # No connection cap: the model server queues and batches requests, so the gateway should not
            # hold them back (httpx's default of 100 would make the 101st concurrent stream wait).
            self._client = httpx.AsyncClient(timeout=self.timeout, limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=64))
        return self._client

    def body(self, request: dict[str, Any], prompt: str) -> dict[str, Any]:
        """The completions request for an LMSP request and its rendered prompt."""
        body: dict[str, Any] = {"model": self.model or request["model"], "prompt": prompt, "stream": True,
                                "stream_options": {"include_usage": True}}
        if request.get("max_output_tokens") is not None:
            body["max_tokens"] = request["max_output_tokens"]
        for name in ("temperature", *SAMPLING_FIELDS):
            if request.get(name) is not None:
                body[name] = request[name]
        return body | self.extra_body

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        generation = Generation(pieces=_no_pieces())
        generation.pieces = self._stream(generation, self.body(request, prompt), prompt)
        return generation

    def output_bound(self, max_tokens: Any) -> int:
        """How many characters of text a generation of at most ``max_tokens`` tokens may send (None: no
        limit asked for, so the ceiling)."""
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
            return min(self.max_output_chars, max_tokens * self.chars_per_token)
        return self.max_output_chars

    async def aclose(self) -> None:
        """Close the client this backend made (and its connections); a given client is the caller's."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _stream(self, generation: Generation, body: dict[str, Any], prompt: str) -> AsyncIterator[str]:
        httpx = _httpx()
        where = f"{self.url}/completions"
        pieces, finish, usage, done, number, chars = 0, None, None, False, 0, 0
        bound = self.output_bound(body.get("max_tokens"))
        try:
            async with self.client.stream("POST", where, json=body, headers=self.headers,
                                          timeout=self.timeout) as response:
                if response.status_code >= 400:
                    raise _status_error(response.status_code, await _start_of(response), where)
                async with aclosing(_sse_data(response.aiter_bytes(), self.max_event_bytes)) as events:
                    async for data in events:
                        # After [DONE] the body is read to its end, as the openai client does, so the
                        # connection goes back to the pool instead of being closed half-read.
                        done = done or data == b"[DONE]"
                        if done:
                            continue
                        number += 1
                        text, reason, counts = _chunk(data, number)
                        finish = reason or finish
                        usage = counts or usage
                        if text:
                            pieces += 1
                            chars += len(text)
                            if chars > bound:  # (raised inside the stream's context: the connection is closed)
                                raise UpstreamError(
                                    f"{where} sent more than {bound:,} characters of text (max_tokens "
                                    f"{body.get('max_tokens', 'not given')}): it does not keep to the limit",
                                    code="upstream.protocol", hint="Check the model server's max_tokens handling.")
                            yield text
        except httpx.ConnectTimeout:
            raise UpstreamError(f"could not connect to {where} within {self.timeout.connect} s",
                                code="upstream.unreachable", hint="Is the model server running there?") from None
        except httpx.TimeoutException:
            raise UpstreamError(f"{where} sent nothing for {self.timeout.read} s (after {pieces} pieces)",
                                code="upstream.timeout", hint="Raise read_timeout if the model can be this slow."
                                ) from None
        except httpx.ConnectError as e:
            raise UpstreamError(f"could not connect to {where} ({type(e).__name__})", code="upstream.unreachable",
                                hint="Is the model server running there?") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            # (the transport's own message can quote bytes of the body: only its type is said)
            raise UpstreamError(f"{where} dropped the connection after {pieces} pieces ({type(e).__name__})",
                                code="upstream.reset") from None
        except httpx.HTTPError as e:
            raise UpstreamError(f"the request to {where} failed ({type(e).__name__})", code="upstream.reset") from None
        if not done and finish is None and not number:
            kind = response.headers.get("content-type", "no content-type")
            raise UpstreamError(f"{where} answered with no events ({kind}), not an event stream",
                                code="upstream.protocol", hint="Is the url an OpenAI-compatible API root?")
        if not done and finish is None:  # a body that ends cleanly but early (no chunked framing to break)
            raise UpstreamError(f"{where} ended its stream after {pieces} pieces without a finish_reason or [DONE]",
                                code="upstream.reset")
        generation.truncated = finish == "length"
        generation.input_tokens = usage[0] if usage else len(tokens(prompt))
        generation.output_tokens = usage[1] if usage else pieces
        generation.estimated = usage is None


async def _no_pieces() -> AsyncIterator[str]:
    return
    yield  # (an async generator that yields nothing)


async def _start_of(response: httpx.Response, size: int = 4096) -> bytes:
    """The first ``size`` bytes of a body (an error page can be any length; its start says why)."""
    got = b""
    async for chunk in response.aiter_bytes():
        got += chunk
        if len(got) >= size:
            break
    return got[:size]


def _status_error(status: int, body: bytes, where: str) -> UpstreamError:
    text = " ".join(body.decode("utf-8", "replace").split())
    quoted = text[:_BODY_QUOTE] + ("..." if len(text) > _BODY_QUOTE else "")
    if status == 400 and _CONTEXT_LENGTH.search(text):
        return UpstreamError(f"{where} refused the prompt as too long: {quoted}", code="upstream.context_length",
                             status=status, hint="Shorten the conversation or lower max_output_tokens.")
    hint = {401: "Check the api_key.", 403: "Check the api_key.",
            404: "Check the url (the API root, e.g. http://host:port/v1) and the model name."}.get(status)
    return UpstreamError(f"{where} answered HTTP {status}: {quoted or '(no body)'}", code="upstream.status",
                         status=status, hint=hint)


# How model servers word a prompt too long for the context: vLLM and SGLang ("maximum context length",
# "context length"), llama.cpp ("exceed_context_size_error", "exceeds the available context size"), TGI
# ("must have less than N tokens"), OpenAI's own code ("context_length_exceeded").
_CONTEXT_LENGTH = regex.compile(r"context[ _]length|context[ _]size|context[ _]window|must have less than \d+ tokens",
                                regex.IGNORECASE)


async def _sse_data(chunks: AsyncIterable[bytes], limit: int) -> AsyncGenerator[bytes, None]:
    """The data of each server-sent event (its ``data:`` lines joined); comments and other fields skipped.
    An event (the line still arriving, and the data lines gathered before it) of more than ``limit``
    bytes is ``upstream.protocol``: ``data:`` lines without the blank line that ends an event, or a line
    without its end, are not buffered on.

    Read from the body's bytes rather than httpx's text lines so that a line can be bounded (text lines
    grow without limit) and json reads the UTF-8 itself. It costs the same per chunk: about
    250 µs of CPU per paced chunk here, nearly all of it httpx's and the event loop's per read, against
    65 µs for a bare asyncio read (measured beside benchmarks/bench_gateway.py)."""
    data: list[bytes] = []
    size = 0  # (bytes of data gathered for the event in progress)
    rest = bytearray()  # (the line still arriving: a bytearray grows in place, so a long line costs linear time)
    async for chunk in chunks:
        rest += chunk
        if size + len(rest) > limit:
            raise UpstreamError(f"an event of the stream is longer than {limit:,} bytes", code="upstream.protocol")
        if b"\n" not in chunk and b"\r" not in chunk:  # (nothing new to split)
            continue
        if b"\r" in rest:  # (CR LF and a lone CR end lines too; a CR last may be the first half of a CR LF)
            held = rest.endswith(b"\r")
            rest = (rest[:-1] if held else rest).replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if held:
                rest += b"\r"
        *lines, rest = rest.split(b"\n")
        for line in lines:
            if not line:
                if data:
                    yield b"\n".join(data)
                    data, size = [], 0
            elif line.startswith(b"data:"):
                data.append(bytes(line[6:] if line.startswith(b"data: ") else line[5:]))
                size += len(data[-1]) + 1
    rest = rest.rstrip(b"\r")
    if rest.startswith(b"data:"):  # a last line without its line end
        data.append(bytes(rest[6:] if rest.startswith(b"data: ") else rest[5:]))
    if data:  # a last event without its blank line (the stream is over either way)
        yield b"\n".join(data)


def _chunk(data: bytes, number: int) -> tuple[str, str | None, tuple[int, int] | None]:
    """(text, finish_reason, (prompt_tokens, completion_tokens) or None) of one completions chunk."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError as e:  # (its message gives a position, not the text)
        raise UpstreamError(f"event {number} of the stream is not JSON ({e.msg}, character {e.pos})",
                            code="upstream.protocol") from None
    except UnicodeDecodeError as e:
        raise UpstreamError(f"event {number} of the stream is not UTF-8 (byte {e.start})", code="upstream.protocol"
                            ) from None
    except ValueError:  # (an integer of more digits than Python converts)
        raise UpstreamError(f"event {number} of the stream holds a number too long to read", code="upstream.protocol"
                            ) from None
    except RecursionError:
        raise UpstreamError(f"event {number} of the stream nests too deep to read", code="upstream.protocol") from None
    if not isinstance(chunk, dict):
        raise UpstreamError(f"event {number} of the stream is a JSON {type(chunk).__name__}, not an object",
                            code="upstream.protocol")
    if chunk.get("error") is not None:  # (vLLM and others report a failure mid-stream this way)
        error = chunk["error"]
        said = str(error.get("message") if isinstance(error, dict) else error)[:_BODY_QUOTE]
        status = error.get("code") if isinstance(error, dict) else None
        raise UpstreamError(f"the model server reported an error mid-stream: {said}", code="upstream.status",
                            status=status if isinstance(status, int) else None)
    choices = chunk.get("choices") or []
    choice = choices[0] if isinstance(choices, list) and choices else {}
    text = choice.get("text") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or not isinstance(choices, list) or not isinstance(text, (str, type(None))):
        raise UpstreamError(f"event {number} of the stream is not a completions chunk (choices[0].text)",
                            code="upstream.protocol")
    reason = choice.get("finish_reason")
    return text or "", reason if isinstance(reason, str) else None, _usage(chunk.get("usage"), number)


def _usage(counts: Any, number: int) -> tuple[int, int] | None:
    """(prompt_tokens, completion_tokens) of a chunk's usage, when both are counts (integers from 0 to
    ``_MAX_COUNT``); None otherwise, logged when the chunk had a usage that is not (the estimate stands in)."""
    if counts is None:
        return None
    pair = (counts.get("prompt_tokens"), counts.get("completion_tokens")) if isinstance(counts, dict) else ()
    if len(pair) == 2 and all(type(n) is int and 0 <= n <= _MAX_COUNT for n in pair):
        return pair  # type: ignore[return-value]  # (both checked to be int)
    said = ", ".join(f"{key}={_number(value)}" for key, value in zip(("prompt_tokens", "completion_tokens"), pair)) \
        if pair else f"a JSON {type(counts).__name__}"
    _log.warning("the model server's usage in event %d is not token counts (%s): estimated instead", number, said)
    return None


def _number(value: Any) -> str:
    """A usage value as the log says it: a number shortened, anything else by its type."""
    if type(value) is int:
        return str(value) if -10**30 <= value <= 10**30 else f"an integer of about 2**{value.bit_length()}"
    return repr(value)[:40] if isinstance(value, float) else f"a {type(value).__name__}"


#: What a :class:`CallableBackend` function may return.
Produced = Union[str, Iterable[str], AsyncIterable[str], Awaitable[str]]
_END = object()


class CallableBackend:
    """Text from a Python function ``fn(prompt, request)``: a model embedded in the server's process.

    ``fn`` returns the whole output (a str, cut into token-sized pieces), the pieces as an iterable or
    an async iterable, or an awaitable of the whole output. An iterator that is not a sequence (a
    generator) is stepped in a worker thread, so a model computing its next piece does not hold up the
    server's other streams; closing the pieces early closes it. ``fn`` reads ``max_output_tokens`` from
    the request itself (the backend cannot tell a cut-off output from a finished one); the token counts
    are estimates (:func:`tokens` of the prompt, the pieces handed out).
    """

    def __init__(self, fn: Callable[[str, dict[str, Any]], Produced]) -> None:
        self.fn = fn

    def start(self, request: dict[str, Any], prompt: str) -> Generation:
        generation = Generation(pieces=_no_pieces(), input_tokens=len(tokens(prompt)), estimated=True)
        generation.pieces = self._emit(generation, request, prompt)
        return generation

    async def _emit(self, generation: Generation, request: dict[str, Any], prompt: str) -> AsyncIterator[str]:
        produced: Any = self.fn(prompt, request)
        if isinstance(produced, Awaitable):
            produced = await produced
        if isinstance(produced, str):
            produced = tokens(produced)
        if isinstance(produced, AsyncIterable):
            try:
                async for piece in produced:
                    generation.output_tokens += 1
                    yield _text(piece)
            finally:  # (an async for left early does not close what it iterates)
                if isinstance(produced, AsyncGenerator):
                    await produced.aclose()
        elif isinstance(produced, Sequence):
            for piece in produced:
                generation.output_tokens += 1
                yield _text(piece)
        elif isinstance(produced, Iterable):
            iterator = iter(produced)
            while (piece := await asyncio.to_thread(next, iterator, _END)) is not _END:
                generation.output_tokens += 1
                try:
                    yield _text(piece)
                except GeneratorExit:
                    getattr(iterator, "close", lambda: None)()
                    raise
        else:
            raise TypeError(f"the backend function returned {type(produced).__name__}, not text or pieces of text")


def _text(piece: object) -> str:
    if not isinstance(piece, str):
        raise TypeError(f"the backend function produced a {type(piece).__name__}, not a str")
    return piece


__all__ = ["SAMPLING_FIELDS", "CallableBackend", "Generation", "ReplayBackend", "UpstreamBackend", "UpstreamError", "tokens"]
