"""A loopback model server for the gateway tests: recorded raw outputs served as an OpenAI completions stream.

    python tests/upstream_server.py --port 0 --samples samples.json [--api-key KEY] [--lifetime 300]

prints its port on the first stdout line and serves ``POST /v1/completions`` (``stream: true``) on
127.0.0.1 only. Standard library only (asyncio streams), so it controls every byte and can break a
stream the way real servers do. The prompt picks what happens, through markers a test writes in its
user message (they reach the upstream in the rendered prompt):

* ``[[sample:NAME]]``: the recorded output to replay (the samples file maps names to raw outputs; the
  ``default`` entry, else the first, without a marker). It is sent in token-sized chunks, at most
  ``max_tokens`` of them (then ``finish_reason`` is ``"length"``), then a usage chunk when
  ``stream_options.include_usage`` (counts in words, unlike the gateway's own estimate), then ``[DONE]``;
* ``[[id:NAME]]``: keep a record of the request under NAME (``GET /_log/NAME``): its body, its
  authorization header, the chunks sent, whether it finished or the client disconnected, and when;
* ``[[slow:SECONDS]]``: wait that long before each chunk; ``[[timed]]``: record each chunk's send time
  (``time.monotonic()``, one clock for every process on the machine) and the text offset it ends at;
* ``[[nousage]]``: send no usage chunk; ``[[usage:P,C]]``: send ``P`` and ``C`` (JSON as written, so
  ``-5``, ``1e3`` or ``true`` too) as the usage's prompt and completion tokens; ``[[lines:crlf]]``, ``[[lines:cr]]``: end the stream's lines so;
* ``[[fault:KIND]]`` or ``[[fault:KIND@N]]`` (after N chunks): ``status=CODE`` answers that HTTP status
  (with a megabyte of error body); ``context`` answers 400 with vLLM's error for a prompt longer than the
  context window; ``json`` answers a whole completion as JSON, not a stream;
  ``reset`` aborts the connection (TCP RST); ``stall`` sends nothing more, holding the connection open;
  ``malformed`` sends an event that is not JSON (the rest of the output in a string left open, so an
  error that quoted it would show); ``binary`` an event that is not UTF-8; ``longline`` an event line
  that never ends (17 MiB); ``error`` sends an error object in the stream, as vLLM does;
  ``eof`` ends a close-delimited body cleanly with no finish_reason and no ``[DONE]``; ``flood`` ignores
  ``max_tokens`` and sends the sample's chunks over and over until the client leaves (a lying upstream;
  ``flood=N``: chunks of N characters of words instead);
  ``noblank`` sends completions chunks as ``data:`` lines with no blank line between them, for ever.

``GET /_stats`` counts requests, streams in progress, open connections and client disconnects, and gives
the process's CPU time. The process exits after ``--lifetime`` seconds, or when its parent goes away,
whatever happens to the test.
:class:`Upstream` runs it as a subprocess for tests and benchmarks. In front of it, :class:`Gateway` serves
an LMSP app in a thread of the test's process, and :class:`GatewayProcess` in a process of its own
(``--gateway URL``), for load: a client in the same interpreter would share its lock and distort the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKER = re.compile(r"\[\[(sample|id|slow|fault|nousage|usage|timed|lines)(?::([^\]]*))?\]\]")
CHUNKS = re.compile(r"\s*\S{1,4}|\s+")  # token-sized, like a model's pieces


@dataclass
class Plan:
    """What one request asks the upstream to do (read from the markers in its prompt)."""

    sample: str | None = None
    record: str | None = None
    slow: float = 0.0
    usage: bool = True
    timed: bool = False
    fault: str | None = None
    fault_at: int = 0
    status: int = 500
    line_end: bytes = b"\n"
    counts: tuple[str, str] | None = None  # (the usage's two counts as JSON text, [[usage:P,C]])

    @classmethod
    def read(cls, prompt: str) -> Plan:
        plan = cls()
        for name, value in MARKER.findall(prompt):
            if name == "sample":
                plan.sample = value
            elif name == "id":
                plan.record = value
            elif name == "slow":
                plan.slow = float(value)
            elif name == "nousage":
                plan.usage = False
            elif name == "usage":
                prompt_tokens, _, completion_tokens = value.partition(",")
                plan.counts = (prompt_tokens, completion_tokens)
            elif name == "timed":
                plan.timed = True
            elif name == "lines":
                plan.line_end = {"crlf": b"\r\n", "cr": b"\r"}.get(value, b"\n")
            elif name == "fault":
                kind, _, at = value.partition("@")
                kind, _, code = kind.partition("=")
                plan.fault, plan.fault_at = kind, int(at or 0)
                plan.status = int(code or 500)
        return plan


@dataclass
class Stats:
    requests: int = 0
    active: int = 0
    connections: int = 0
    disconnects: int = 0
    completed: int = 0
    records: dict[str, dict[str, Any]] = field(default_factory=dict)


class Connection:
    """One client connection: a byte buffer filled from the socket, so a watcher and the request reader
    share it (the watcher's read is what notices the client going away mid-stream)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.buffer = bytearray()
        self.eof = False
        self.eof_at: float | None = None  # when the client's end of the connection was seen

    async def fill(self) -> None:
        try:
            data = await self.reader.read(65536)
        except OSError:
            data = b""
        if data:
            self.buffer += data
        else:
            self.eof, self.eof_at = True, time.monotonic()

    async def request(self) -> tuple[str, str, dict[str, str], bytes] | None:
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            if self.eof:
                return None
            await self.fill()
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[:end + 4]
        method, path, _ = head[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length and not self.eof:
            await self.fill()
        body = bytes(self.buffer[:length])
        del self.buffer[:length]
        return method, path, headers, body

    async def watch(self, gone: asyncio.Event) -> None:
        while not self.eof:
            await self.fill()
        gone.set()

    async def write(self, data: bytes) -> bool:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except OSError:
            return False
        return True


class UpstreamServer:
    def __init__(self, samples: dict[str, str], api_key: str | None = None) -> None:
        self.samples = samples
        self.api_key = api_key
        self.stats = Stats()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(reader, writer)
        self.stats.connections += 1
        try:
            while (request := await conn.request()) is not None:
                if not await self.answer(conn, *request):
                    break
        finally:
            self.stats.connections -= 1
            writer.close()

    async def answer(self, conn: Connection, method: str, path: str, headers: dict[str, str], body: bytes) -> bool:
        """Answer one request; False when the connection is done with."""
        if method == "GET" and path == "/_stats":
            stats = {k: v for k, v in vars(self.stats).items() if k != "records"} | {"cpu": time.process_time()}
            return await self.json(conn, 200, stats)
        if method == "GET" and path.startswith("/_log/"):
            kept = self.stats.records.get(path.removeprefix("/_log/"))
            return await self.json(conn, 200 if kept else 404, kept or {"error": "no such record"})
        if method != "POST" or not path.endswith("/completions"):
            return await self.json(conn, 404, {"error": {"message": f"no route {method} {path}"}})
        self.stats.requests += 1
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return await self.json(conn, 401, {"error": {"message": "invalid api key", "type": "auth"}})
        try:
            request = json.loads(body)
            prompt = request["prompt"]
        except (ValueError, KeyError, TypeError):
            return await self.json(conn, 400, {"error": {"message": "the body needs a JSON prompt"}})
        plan = Plan.read(prompt)
        record: dict[str, Any] = {"body": request, "authorization": headers.get("authorization"), "sent": 0,
                                  "chars": 0, "times": [], "finished": False, "disconnected": False,
                                  "disconnected_at": None, "ended": False, "usage": None}
        if plan.record:
            self.stats.records[plan.record] = record
        if plan.fault == "status":  # (an error page of a megabyte: the client must not quote, or hold, all of it)
            record["ended"] = True
            return await self.json(conn, plan.status, {"error": {"message": "injected failure", "code": plan.status,
                                                                 "trace": "at frame\n" * 100_000}})
        if plan.fault == "context":  # (vLLM's wording, as its OpenAI-compatible server sends it)
            record["ended"] = True
            return await self.json(conn, 400, {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
                                               "message": "This model's maximum context length is 4096 tokens. However, "
                                                          "you requested 5120 tokens (4096 in the messages, 1024 in the "
                                                          "completion). Please reduce the length of the messages or "
                                                          "completion."})
        if plan.fault == "json":  # (a server that ignores "stream": a whole completion as one JSON body)
            record["ended"] = True
            return await self.json(conn, 200, {"object": "text_completion", "choices": [
                {"index": 0, "text": self.samples.get(plan.sample or "default", ""), "finish_reason": "stop"}]})
        if not request.get("stream"):
            record["ended"] = True
            return await self.json(conn, 400, {"error": {"message": "this upstream only streams"}})
        self.stats.active += 1
        try:
            return await self.stream(conn, request, prompt, plan, record)
        finally:
            self.stats.active -= 1
            record["ended"] = True

    async def stream(self, conn: Connection, request: dict[str, Any], prompt: str, plan: Plan,
                     record: dict[str, Any]) -> bool:
        name = plan.sample or ("default" if "default" in self.samples else next(iter(self.samples)))
        chunks = CHUNKS.findall(self.samples[name])
        limit = request.get("max_tokens")
        finish = "length" if limit is not None and limit < len(chunks) else "stop"
        chunks = chunks[:limit] if finish == "length" else chunks
        framed = plan.fault != "eof"  # a close-delimited body can end cleanly at any point
        head = ("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                + ("transfer-encoding: chunked\r\n" if framed else "connection: close\r\n") + "\r\n")
        gone = asyncio.Event()
        watcher = asyncio.create_task(conn.watch(gone))

        async def send(data: bytes) -> bool:
            if gone.is_set():
                return False
            frame = b"%x\r\n%s\r\n" % (len(data), data) if framed else data
            return await conn.write(frame)

        def event(payload: Any) -> bytes:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            return b"data: " + data + plan.line_end * 2

        def chunk(text: str, reason: str | None) -> dict[str, Any]:
            return {"id": "cmpl-loopback", "object": "text_completion", "created": int(time.time()),
                    "model": request.get("model"), "choices": [{"index": 0, "text": text, "logprobs": None,
                                                                "finish_reason": reason}]}

        try:
            if not await conn.write(head.encode()):
                return self.lost(conn, record)
            for number, text in enumerate(chunks):
                if plan.fault is not None and number == plan.fault_at:
                    return await self.fault(conn, plan, gone, send, event, record, "".join(chunks[number:]))
                if plan.slow:
                    try:
                        await asyncio.wait_for(gone.wait(), plan.slow)
                    except asyncio.TimeoutError:
                        pass
                if not await send(event(chunk(text, None))):
                    return self.lost(conn, record)
                record["sent"] += 1
                record["chars"] += len(text)
                if plan.timed:
                    record["times"].append((record["chars"], time.monotonic()))
            if plan.fault is not None:  # (a fault after the last chunk: before the finish)
                return await self.fault(conn, plan, gone, send, event, record, "")
            tail = [event(chunk("", finish))]
            if plan.usage and (request.get("stream_options") or {}).get("include_usage"):
                record["usage"] = {"prompt_tokens": len(prompt.split()),
                                   "completion_tokens": len("".join(chunks).split())}
                record["usage"]["total_tokens"] = sum(record["usage"].values())
                if plan.counts is not None:  # (the counts as the test wrote them, whatever they are)
                    record["usage"] = {"raw": list(plan.counts)}
                    tail.append(event(b'{"id": "cmpl-loopback", "object": "text_completion", "choices": [], '
                                      b'"usage": {"prompt_tokens": %s, "completion_tokens": %s}}'
                                      % (plan.counts[0].encode(), plan.counts[1].encode())))
                else:
                    tail.append(event({"id": "cmpl-loopback", "object": "text_completion", "choices": [],
                                       "usage": record["usage"]}))
            tail.append(event(b"[DONE]"))
            # [DONE] and the body's end in one write, as servers flush them: the client reads both at once
            if not await send(b"".join(tail)) or not await conn.write(b"0\r\n\r\n"):
                return self.lost(conn, record)
            record["finished"] = True
            self.stats.completed += 1
            return True
        finally:
            watcher.cancel()
            await asyncio.wait([watcher])  # (its read must be over before the next request is read)

    async def fault(self, conn: Connection, plan: Plan, gone: asyncio.Event, send: Any, event: Any,
                    record: dict[str, Any], rest: str) -> bool:
        if plan.fault == "reset":
            sock = conn.writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.writer.transport.abort()
            return False
        if plan.fault == "stall":
            await gone.wait()  # until the client gives up
            return self.lost(conn, record)
        if plan.fault == "malformed":  # (the next chunk's text in a string left open: the output is in it)
            await send(event(b'{"choices": [{"text": ' + json.dumps(rest)[:-1].encode()))
        elif plan.fault == "binary":  # (the rest of the output, and a byte that is not UTF-8)
            await send(event(b'{"choices": [{"text": "' + rest.encode()[:20] + b'\xff"}]}'))
        elif plan.fault == "longline":  # (an event that never ends: 17 MiB and counting, no line end)
            await send(b"data: " + rest.encode())
            for _ in range(17):
                if not await send(b"x" * 2**20):
                    break
        elif plan.fault in ("flood", "noblank"):  # (for ever, until the client leaves)
            text = self.samples.get(plan.sample or "default", "") or "x"
            if plan.fault == "flood" and plan.status != 500:  # (flood=N)
                text = ("word " * plan.status)[:plan.status]
            payload = json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": None}]}).encode()
            frame = event(payload) if plan.fault == "flood" else b"data: " + payload + plan.line_end
            repeat = max(1, 4096 // len(frame))  # (about 4 KiB a write)
            while not gone.is_set():
                if not await send(frame * repeat):
                    break
                record["sent"] += repeat
                record["chars"] += repeat * len(text)
                await asyncio.sleep(0)
        elif plan.fault == "error":
            await send(event({"error": {"message": "injected mid-stream failure", "type": "InternalError",
                                        "code": 500}}))
        # (malformed, error: the stream is left open, as a confused server would; eof: the body just ends)
        if plan.fault != "eof":
            await gone.wait()
            return self.lost(conn, record)
        return False

    def lost(self, conn: Connection, record: dict[str, Any]) -> bool:
        record["disconnected"], record["disconnected_at"] = True, conn.eof_at or time.monotonic()
        self.stats.disconnects += 1
        return False

    async def json(self, conn: Connection, status: int, body: Any) -> bool:
        data = json.dumps(body).encode()
        head = f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
        return await conn.write(head.encode() + data)


async def serve(samples: dict[str, str], port: int, api_key: str | None, lifetime: float) -> None:
    app = UpstreamServer(samples, api_key)
    server = await asyncio.start_server(app.handle, "127.0.0.1", port, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await outlive(lifetime)


async def outlive(lifetime: float) -> None:
    """Return after ``lifetime`` seconds, or as soon as the parent process has gone."""
    parent = os.getppid()
    deadline = time.monotonic() + lifetime
    while time.monotonic() < deadline and os.getppid() == parent:
        await asyncio.sleep(0.5)


async def serve_gateway(upstream: str, port: int, read_timeout: float, lifetime: float,
                        send_timeout: float = 30.0) -> None:
    """An LMSP app with an UpstreamBackend on ``upstream``, served as serve() serves it on 127.0.0.1, with
    ``GET /_gateway`` answering what the tests count: tasks, connections, stored responses, RSS, CPU."""
    import uvicorn

    from grammar_parse.serving._backends import UpstreamBackend
    from grammar_parse.serving._server import Limits, LMSPApp, uvicorn_config

    app = LMSPApp(grammar="qwen3", backend=UpstreamBackend(upstream, read_timeout=read_timeout),
                  limits=Limits(send_timeout=send_timeout))
    logging.getLogger("grammar_parse.serving._server").setLevel(logging.ERROR)  # (the tests' upstream faults are expected)
    server: Any = None

    async def control(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/_gateway":
            await app(scope, receive, send)
            return
        figures = {"tasks": len(asyncio.all_tasks()) - 1, "connections": len(server.server_state.connections),
                   "stored": len(app.store), "store_bound": getattr(app.store, "max_entries", None),
                   "in_progress": app.in_progress,
                   "rss_mib": rss_mib(), "cpu": time.process_time(), "cpu_user": os.times().user,
                   "cpu_system": os.times().system}
        data = json.dumps(figures).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})

    # (IPPROTO_TCP named: asyncio sets TCP_NODELAY only on sockets that say it, and without it each response's
    # body waits out the client's delayed ACK behind its headers: 40 ms a request)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", port))
    print(sock.getsockname()[1], flush=True)
    config = uvicorn_config(app, "127.0.0.1", port, log_level="critical")  # (serve()'s: guarded h11, limits)
    config.app, config.backlog = control, 1024  # (the figures route in front of the app)
    server = uvicorn.Server(config)

    async def watchdog() -> None:
        await outlive(lifetime)
        server.should_exit = True

    guard = asyncio.create_task(watchdog())
    await server.serve(sockets=[sock])
    guard.cancel()


def rss_mib() -> float:
    """This process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--samples", help="JSON file: sample name -> raw model output")
    parser.add_argument("--api-key")
    parser.add_argument("--gateway", metavar="URL", help="serve the LMSP gateway in front of this upstream instead")
    parser.add_argument("--read-timeout", type=float, default=10.0, help="the gateway's upstream read timeout")
    parser.add_argument("--send-timeout", type=float, default=30.0, help="the gateway's Limits.send_timeout")
    parser.add_argument("--lifetime", type=float, default=300.0, help="seconds before the process exits")
    args = parser.parse_args()
    if args.gateway:
        asyncio.run(serve_gateway(args.gateway, args.port, args.read_timeout, args.lifetime, args.send_timeout))
        return
    if not args.samples:
        parser.error("--samples is needed (or --gateway)")
    samples = json.loads(Path(args.samples).read_text(encoding="utf-8"))
    asyncio.run(serve(samples, args.port, args.api_key, args.lifetime))


class Loopback:
    """This script run as a subprocess on 127.0.0.1 (``arguments`` after the script), for a ``with``
    block: started, its port read from its first line, killed on exit."""

    def __init__(self, arguments: list[str]) -> None:
        self.arguments = arguments

    def __enter__(self) -> Any:
        import httpx

        command = [sys.executable, __file__, "--port", "0", *self.arguments]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 30)
        line = self.process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            self.__exit__()
            raise RuntimeError(f"{Path(__file__).name} {' '.join(self.arguments[:1])} did not start")
        self.port = int(line)
        self.root = f"http://127.0.0.1:{self.port}"
        self.control = httpx.Client(base_url=self.root, timeout=10, trust_env=False)
        return self

    def __exit__(self, *exc: Any) -> None:
        if getattr(self, "control", None) is not None:
            self.control.close()
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        if self.process.stdout is not None:
            self.process.stdout.close()


class Upstream(Loopback):
    """The loopback upstream as a subprocess: ``url`` is its API root (``.../v1``)."""

    def __init__(self, samples: dict[str, str], *, api_key: str | None = None, lifetime: float = 300.0) -> None:
        handle, self.samples_file = tempfile.mkstemp(suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump(samples, f)
        super().__init__(["--samples", self.samples_file, "--lifetime", str(lifetime),
                          *(["--api-key", api_key] if api_key else [])])

    def __enter__(self) -> Upstream:
        super().__enter__()
        self.url = f"{self.root}/v1"
        return self

    def stats(self) -> dict[str, Any]:
        """The upstream's counters (requests, active streams, open connections, disconnects, completed) and
        its CPU time (``cpu``)."""
        result: dict[str, Any] = self.control.get("/_stats").json()
        return result

    def log(self, name: str, *, wait: float = 10.0) -> dict[str, Any]:
        """The record of request ``name`` once its stream has ended (polled for up to ``wait`` seconds)."""
        deadline = time.monotonic() + wait
        while True:
            answer = self.control.get(f"/_log/{name}")
            if answer.status_code == 200 and answer.json()["ended"]:
                record: dict[str, Any] = answer.json()
                return record
            if time.monotonic() > deadline:
                raise TimeoutError(f"request {name!r} did not end at the upstream")
            time.sleep(0.01)

    def __exit__(self, *exc: Any) -> None:
        super().__exit__()
        os.unlink(self.samples_file)


class GatewayProcess(Loopback):
    """The LMSP gateway in front of an upstream, as its own process (its own interpreter: load on it is
    not slowed by the test's client, nor its CPU mixed with the client's); ``url`` is its root."""

    def __init__(self, upstream: str, *, read_timeout: float = 10.0, lifetime: float = 300.0,
                 send_timeout: float = 30.0) -> None:
        super().__init__(["--gateway", upstream, "--read-timeout", str(read_timeout), "--lifetime", str(lifetime),
                          "--send-timeout", str(send_timeout)])

    def __enter__(self) -> GatewayProcess:
        super().__enter__()
        self.url = self.root
        return self

    def figures(self) -> dict[str, Any]:
        """Tasks in its loop, open client connections, requests in progress, stored responses (and the
        store's bound), RSS, CPU
        (``cpu`` its process time; ``cpu_user`` and ``cpu_system`` the two parts of it)."""
        result: dict[str, Any] = self.control.get("/_gateway").json()
        return result


class Gateway:
    """An LMSP app served by uvicorn on 127.0.0.1 in a thread (``with Gateway(app) as url``); at shutdown
    the backend's ``aclose()`` runs in the serving loop, as a gateway's lifespan should do it."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.app = app
        self.loop: asyncio.AbstractEventLoop | None = None
        config = uvicorn.Config(self.serve, host="127.0.0.1", port=0, log_level="critical", lifespan="on",
                                interface="asgi3", http="h11", backlog=1024)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    async def serve(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                self.loop = asyncio.get_running_loop()
                await send({"type": "lifespan.startup.complete"})
        closer = getattr(self.app.backend, "aclose", None)
        if closer is not None:
            await closer()
        await send({"type": "lifespan.shutdown.complete"})

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the gateway did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def tasks(self) -> int:
        """Tasks alive in the gateway's loop (besides the one counting them)."""
        async def count() -> int:
            return len(asyncio.all_tasks()) - 1

        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(count(), self.loop).result(10)

    def connections(self) -> int:
        """Client connections the gateway holds open."""
        return len(self.server.server_state.connections)

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


if __name__ == "__main__":
    main()
