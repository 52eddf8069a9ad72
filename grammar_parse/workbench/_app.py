"""The workbench's web server: a plain ASGI app serving the page (``static/``) and the JSON API over a
:class:`~grammar_parse.workbench._api.Workbench`, run by :func:`grammar_parse.serving._server.serve` (uvicorn,
with the gateway's guards on connections and request heads).

The workbench listens on loopback and holds an author's files, so a web page elsewhere must not drive it:
every request's ``Host`` must be the loopback address and port it listens on (a DNS-rebinding page's host is
refused), a request with an ``Origin`` must come from that address (no cross-site request is served), the page
is served only with the per-run token in its URL, and every API call must carry the token in the
``X-Workbench-Token`` header (which a cross-site form cannot send). Bodies are JSON within the gateway's
limits (:class:`~grammar_parse.serving._server.Limits`: size, time to arrive, depth, digits), and each call's
work runs in a worker thread, one at a time, answered ``busy`` past the time bound. Errors are problem
documents with the codes of :data:`~grammar_parse.workbench._api.PROBLEM_CODES`, never a traceback."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

from ..serving._server import ClientGone, HTTPProblem, Limits, lifespan, read_body, read_json
from ._api import PROBLEM_CODES, Refusal, Workbench

_log = logging.getLogger("grammar_parse.workbench")

Scope = Mapping[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The page's own files (nothing else is served from the package, and nothing is fetched from elsewhere).
STATIC = {"workbench.js": b"text/javascript; charset=utf-8", "workbench.css": b"text/css; charset=utf-8"}
TOKEN_HEADER = b"x-workbench-token"
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
#: Every response: no caching, no sniffing, no framing by other pages; the page runs only its own script and
#: talks only to this server (the view's page, shown in a sandboxed frame, keeps its inline style).
SECURITY_HEADERS = [
    (b"cache-control", b"no-store"), (b"x-content-type-options", b"nosniff"), (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                 b"connect-src 'self'; img-src 'self' data:; frame-src 'self'; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'none'"),
]


def _problem(code: str, detail: str) -> HTTPProblem:
    return HTTPProblem(PROBLEM_CODES[code][0], code, detail)


def _document(problem: HTTPProblem) -> dict[str, Any]:
    """The problem document as the workbench sends it (the gateway's type URNs name LMSP)."""
    return {**problem.document, "type": f"urn:grammar-parse:workbench:{problem.document['code']}"}


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return ""


class WorkbenchApp:
    """The ASGI app over one :class:`Workbench` (see the module doc). ``token``: the per-run secret (random
    by default); ``limits``: the request bodies' bounds."""

    def __init__(self, workbench: Workbench, *, token: str | None = None, limits: Limits | None = None) -> None:
        self.workbench = workbench
        self.token = token or secrets.token_urlsafe(24)
        self.limits = limits or Limits()  # (the gateway's: 4 MiB bodies within 10 s, 64 levels, 32-digit integers)

    def url(self, base: str) -> str:
        """The page's address under ``base`` (``http://127.0.0.1:PORT``), with the token."""
        return f"{base}/?token={self.token}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            self._guard(scope)
            await self._route(scope, receive, send)
        except ClientGone:
            return  # (the client left before its body arrived: no one to answer)
        except HTTPProblem as e:
            await _send(send, e.status, _document(e), b"application/problem+json", e.headers)
        except Refusal as e:
            await _send(send, e.status, _document(_problem(e.code, e.detail)), b"application/problem+json")
        except Exception:  # noqa: BLE001 - a bug: logged in full, answered without a traceback
            _log.exception("the workbench failed on %s %s", scope.get("method"), scope.get("path"))
            document = _document(_problem("internal_error", "the workbench failed: its log has the error"))
            await _send(send, 500, document, b"application/problem+json")

    # ------------------------------------------------------------------ the guard
    def _guard(self, scope: Scope) -> None:
        """Refuse a request whose Host is not this loopback address, or that comes from another origin."""
        port = (scope.get("server") or (None, None))[1]
        allowed = {f"{name}:{port}" for name in _LOOPBACK_NAMES}
        host = _header(scope, b"host").lower()
        if host not in allowed:
            raise _problem("forbidden", "the Host header is not this workbench's address (127.0.0.1 and its port)")
        origin = _header(scope, b"origin").lower()
        if origin and origin not in {f"http://{a}" for a in allowed}:
            raise _problem("forbidden", "requests from other origins are refused")
        if _header(scope, b"sec-fetch-site").lower() == "cross-site":
            raise _problem("forbidden", "requests from other sites are refused")

    def _check_token(self, given: str) -> None:
        if not hmac.compare_digest(given.encode("latin-1", "replace"), self.token.encode()):
            raise _problem("forbidden", "the workbench token is missing or wrong (open the URL the command printed)")

    # ------------------------------------------------------------------ routing
    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        method, path = scope["method"], scope["path"]
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin-1")).items()}
        if path == "/":
            _method(method, "GET")
            self._check_token(query.get("token", ""))
            page = resources.files(__package__).joinpath("static").joinpath("index.html").read_text(encoding="utf-8")
            await _send_bytes(send, 200, page.replace("__WORKBENCH_TOKEN__", self.token).encode(),
                              b"text/html; charset=utf-8")
            return
        if path.startswith("/static/"):
            _method(method, "GET")
            name = path.removeprefix("/static/")
            if name not in STATIC:
                raise _problem("not_found", "no such file")
            data = resources.files(__package__).joinpath("static").joinpath(name).read_bytes()
            await _send_bytes(send, 200, data, STATIC[name])
            return
        if not path.startswith("/api/"):
            raise _problem("not_found", "no endpoint at this path")
        self._check_token(_header(scope, TOKEN_HEADER))
        body = await self._body(scope, receive) if method in ("POST", "PUT") else {}
        await _send(send, 200, await self._call(method, path.removeprefix("/api/"), query, body), b"application/json")

    async def _call(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
        """The API call's answer, worked out in a worker thread (module doc)."""
        bench = self.workbench
        found = re.fullmatch(r"(samples|result|golden)/(\d{1,9})", path)
        work: Callable[[], dict[str, Any]]
        if path == "state":
            _method(method, "GET")
            status = query.get("status") or None
            work = lambda: bench.state(_int(query, "offset", 0), _int(query, "limit", 100), status)  # noqa: E731
        elif path in ("grammar", "start", "samples", "save"):
            _method(method, "POST")
            work = {"grammar": lambda: bench.set_grammar(body), "start": lambda: bench.start(body),
                    "samples": lambda: bench.add_sample(body), "save": lambda: bench.save(body)}[path]
        elif path == "register":
            _method(method, "GET")
            work = bench.registration
        elif found is not None:
            kind, sample = found.group(1), int(found.group(2))
            if kind == "samples":
                _method(method, "GET", "PUT")
                work = (lambda: bench.sample(sample)) if method == "GET" else (lambda: bench.put_sample(sample, body))
            elif kind == "result":
                _method(method, "GET")
                work = lambda: bench.result(sample, _int(query, "chunk", 8))  # noqa: E731
            else:
                _method(method, "POST")
                work = lambda: bench.golden(sample, body)  # noqa: E731
        else:
            raise _problem("not_found", "no endpoint at this path")
        return await self._run(work)

    async def _run(self, work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """``work`` in a worker thread holding the workbench's lock, within the time bound: past it the call is
        answered ``busy`` (the thread finishes its parse; the next call waits for it)."""
        lock = self.workbench.lock

        def locked() -> dict[str, Any]:
            if not lock.acquire(timeout=self.workbench.limits.parse_seconds):
                raise _problem("busy", "the last request's parse is still running: retry shortly")
            try:
                return work()
            finally:
                lock.release()

        try:
            return await asyncio.wait_for(asyncio.to_thread(locked), self.workbench.limits.parse_seconds)
        except asyncio.TimeoutError:
            raise _problem("busy", f"the parse ran past {self.workbench.limits.parse_seconds:g} s") from None

    async def _body(self, scope: Scope, receive: Receive) -> dict[str, Any]:
        """The request's JSON object, read as the gateway reads bodies (declared JSON, size, time)."""
        value = read_json(await read_body(scope, receive, self.limits), self.limits)
        if not isinstance(value, dict):
            raise _problem("invalid_request", "the body must be a JSON object")
        return value


def _method(method: str, *allowed: str) -> None:
    if method not in allowed:
        raise _problem("method_not_allowed", f"this endpoint takes {' or '.join(allowed)}")


def _int(query: dict[str, str], key: str, default: int) -> int:
    value = query.get(key)
    if value is None:
        return default
    if not value.isdigit() or len(value) > 9:
        raise _problem("invalid_request", f"{key}: must be a whole number")
    return int(value)


async def _send(send: Send, status: int, body: dict[str, Any], content_type: bytes,
                headers: list[tuple[bytes, bytes]] | None = None) -> None:
    # (ASCII JSON: a lone surrogate in a sample, a JSON log's \ud800, stays an escape instead of failing to encode)
    await _send_bytes(send, status, json.dumps(body, ensure_ascii=True).encode(), content_type, headers)


async def _send_bytes(send: Send, status: int, data: bytes, content_type: bytes,
                      headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode()),
                            *SECURITY_HEADERS, *(headers or [])]})
    await send({"type": "http.response.body", "body": data})


__all__ = ["SECURITY_HEADERS", "STATIC", "TOKEN_HEADER", "WorkbenchApp"]
