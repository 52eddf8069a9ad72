"""Client traffic for the load tests: many LMSP requests at once through one httpx client, each stream
read as it arrives (optionally dropped after some events), every test's work under one overall bound."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from grammar_parse.adapters.lmsp import parse_sse

#: Every test's client work runs under this bound (seconds): a hung stream fails the test, never the run.
OVERALL = 300.0


def run(coroutine: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coroutine, OVERALL))


def client() -> httpx.AsyncClient:
    """One client for hundreds of concurrent streams (no connection cap, no proxy from the environment)."""
    return httpx.AsyncClient(limits=httpx.Limits(max_connections=None), timeout=60, trust_env=False)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@dataclass
class Streamed:
    status: int
    text: str = ""
    closed_at: float | None = None  # when the client had closed the stream's connection (monotonic), if it did
    arrivals: list[float] = field(default_factory=list)  # when each event arrived (monotonic)

    @property
    def events(self) -> list[dict[str, Any]]:
        return parse_sse(self.text)


async def stream(http: httpx.AsyncClient, url: str, body: dict[str, Any], *, drop_after: int | None = None
                 ) -> Streamed:
    """One streaming request; with ``drop_after``, the connection is closed once that many events came."""
    async with http.stream("POST", f"{url}/lmsp/v1/responses", json={**body, "stream": True}) as response:
        got = Streamed(response.status_code)
        parts: list[str] = []
        async for line in response.aiter_lines():
            parts.append(line + "\n")
            if not line and len(parts) > 1 and parts[-2] != "\n":  # (a blank line ends an event)
                got.arrivals.append(time.monotonic())
                if drop_after is not None and len(got.arrivals) >= drop_after:
                    break  # (leaving the block closes the connection: the body is not read to its end)
        got.text = "".join(parts)
    if drop_after is not None and len(got.arrivals) >= drop_after:
        got.closed_at = time.monotonic()  # (once the connection is closed, not when the client chose to)
    return got


def settle(read: Callable[[], Any], want: Callable[[Any], bool], wait: float = 15.0) -> Any:
    """``read()`` polled until ``want`` holds of it (or ``wait`` seconds pass): the last value read."""
    deadline = time.monotonic() + wait
    while not want(value := read()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value
