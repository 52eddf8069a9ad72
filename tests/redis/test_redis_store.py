"""The Redis response store (issue 32, item 8), against a real ``redis-server`` that this module starts on
127.0.0.1 on a free port and stops: two gateway replicas share stored responses (a follow-up may land on
either), and the store keeps its bounds in number, bytes and time. Opt-in: ``pytest tests/redis --redis``
(needs ``redis-server`` on the PATH and ``pip install 'grammar-parse[redis]'``)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from grammar_parse.serving._backends import CallableBackend
from grammar_parse.serving._server import LMSPApp
from grammar_parse.serving.store import RedisResponseStore, entry_json

redis = pytest.importorskip("redis")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed", allow_module_level=True)

LONE = "\ud800"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """A redis-server on loopback, no persistence; its URL."""
    port = free_port()
    process = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "",
                                "--appendonly", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def url(server: str) -> str:
    """The server, emptied before each test."""
    async def flush() -> None:
        client = redis.asyncio.Redis.from_url(server)
        await client.flushdb()
        await client.aclose()

    asyncio.run(flush())
    return server


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def call(app: LMSPApp, path: str, body: Any) -> tuple[int, Any]:
    """One request to a replica's ASGI app: (status, JSON body). Each call runs in its own event loop, as
    each replica would; the replica's store client is made again for the loop."""
    sent: list[dict[str, Any]] = []
    incoming = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def go() -> None:
        scope = {"type": "http", "method": "POST" if body is not None else "GET", "path": path,
                 "headers": [(b"content-type", b"application/json")]}
        try:
            await app(scope, receive, send)
        finally:
            await app.store.aclose()  # (its connections belong to this loop)

    asyncio.run(asyncio.wait_for(go(), 20))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


def replica(url: str, **bounds: Any) -> LMSPApp:
    return LMSPApp(store=RedisResponseStore(url, **bounds) if bounds else url,
                   backend=CallableBackend(lambda prompt, request: _answer(prompt)))


def _answer(prompt: str) -> str:
    prompt.encode("utf-8")  # (as a model server's client needs it)
    return f"Seen {prompt.count('<|im_start|>user')} {LONE}.<|im_end|>"


def test_a_follow_up_lands_on_either_replica(url):
    one, two = replica(url), replica(url)
    status, first = call(one, "/lmsp/v1/responses", {"model": "qwen3", "input": [user("Hi")], "store": True})
    assert status == 200
    status, got = call(two, f"/lmsp/v1/responses/{first['id']}", None)
    assert status == 200 and got == first  # (the response as it was sent, its lone surrogate too)
    follow = {"model": "qwen3", "input": [user("And?")], "store": True, "previous_response_id": first["id"]}
    status, second = call(two, "/lmsp/v1/responses", follow)
    assert status == 200 and second["output"][0]["content"][0]["text"] == f"Seen 2 {LONE}."
    status, third = call(one, "/lmsp/v1/responses", {**follow, "previous_response_id": second["id"]})
    assert status == 200 and third["output"][0]["content"][0]["text"] == f"Seen 3 {LONE}."


def test_an_unknown_id_is_not_found(url):
    status, problem = call(replica(url), "/lmsp/v1/responses/resp_NOTHERE", None)
    assert status == 404 and problem["code"] == "response_not_found"


def entry(number: int, pad: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return {"id": f"resp_{number}", "pad": "x" * pad}, []


def kept(store: RedisResponseStore, count: int) -> list[bool]:
    async def look() -> list[bool]:
        try:
            return [await store.aget(f"resp_{n}") is not None for n in range(count)]
        finally:
            await store.aclose()
    return asyncio.run(look())


def put(store: RedisResponseStore, *entries: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    async def keep() -> None:
        try:
            for response, conversation in entries:
                await store.aput(response, conversation)
        finally:
            await store.aclose()
    asyncio.run(keep())


def test_the_store_is_bounded_in_bytes(url):
    size = len(entry_json(*entry(0, 1000)))  # '[{"id":"resp_0","pad":"' + 1000 x + '"},[]]'
    assert size == 23 + 1000 + 6
    bound = 2 * size + 100
    put(RedisResponseStore(url, max_bytes=bound), *(entry(n, 1000) for n in range(3)))
    assert kept(RedisResponseStore(url, max_bytes=bound), 3) == [False, True, True]
    put(RedisResponseStore(url, max_bytes=bound), entry(3, 5000))  # (alone over the bound: not kept)
    assert kept(RedisResponseStore(url, max_bytes=bound), 4) == [False, True, True, False]


def test_the_store_is_bounded_in_number(url):
    put(RedisResponseStore(url, max_entries=2), *(entry(n, 10) for n in range(5)))
    assert kept(RedisResponseStore(url, max_entries=2), 5) == [False, False, False, True, True]


def test_the_store_is_bounded_in_time_and_an_expired_entrys_bytes_are_counted_out(url):
    size = len(entry_json(*entry(0, 1000)))
    put(RedisResponseStore(url, ttl=0.3, max_bytes=2 * size), entry(0, 1000), entry(1, 1000))
    time.sleep(0.5)
    assert kept(RedisResponseStore(url, ttl=0.3), 2) == [False, False]
    # (were the expired entries still counted, two new ones would not both fit)
    put(RedisResponseStore(url, ttl=60, max_bytes=2 * size), entry(2, 1000), entry(3, 1000))
    assert kept(RedisResponseStore(url), 4) == [False, False, True, True]


def test_the_gateway_bounds_a_chain_of_stored_responses(url):
    """Each link keeps its whole conversation: with a byte bound a few links wide, the oldest go."""
    app = replica(url, max_bytes=30_000)
    ids, previous = [], None
    for number in range(6):
        body = {"model": "qwen3", "input": [user(f"{number} " + "y" * 3000)], "store": True,
                **({"previous_response_id": previous} if previous else {})}
        status, response = call(app, "/lmsp/v1/responses", body)
        assert status == 200
        ids.append(previous := response["id"])
    found = [call(app, f"/lmsp/v1/responses/{i}", None)[0] for i in ids]
    assert found[-1] == 200 and found[0] == 404


def test_an_entry_says_when_it_expires(url):
    put(RedisResponseStore(url, ttl=60), entry(0, 10))

    async def look() -> float:
        store = RedisResponseStore(url)
        try:
            found = await store.aget("resp_0")
            assert found is not None
            return found.expires - time.monotonic()
        finally:
            await store.aclose()

    assert 55 < asyncio.run(look()) <= 60
