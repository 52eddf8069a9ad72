"""The gateway under load, on loopback only: hundreds of concurrent streams through the LMSP endpoint to
the loopback upstream, clients that leave mid-stream, upstream faults mid-stream, and 10,000 stored
responses. Nothing may leak: tasks in the gateway's loop, its connections, and streams at the upstream
all return to where they were."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx

from test_upstream import SAMPLES, TOOLS, bare, events, one_shot
from traffic import client, run, settle, stream, user

FINALS = ("response.completed", "response.incomplete", "response.failed", "response.cancelled")


def request(i: int, marks: str = "") -> dict[str, Any]:
    name = ("default", "answer", "tool_call")[i % 3]
    return {"model": "qwen3", "input": [user(f"[[sample:{name}]]{marks}")],
            **({"tools": TOOLS} if name == "tool_call" else {})}


def test_200_concurrent_streams_each_end_once_with_the_recorded_output(gateway, upstream):
    url = gateway().url
    before = upstream.stats()

    async def all_at_once() -> list[Any]:
        async with client() as http:
            return await asyncio.gather(*(stream(http, url, request(i, "[[slow:0.01]]")) for i in range(200)))

    results = run(all_at_once())
    assert [r.status for r in results] == [200] * 200
    for i, result in enumerate(results):
        found = events(result.text)  # (ids 1..n, each event valid, exactly one final event, last)
        assert found[-1]["event"] == "response.completed"
        done = {e["data"]["output_index"]: e["data"]["item"] for e in found
                if e["event"] == "response.output_item.done"}
        assert bare([done[k] for k in sorted(done)]) == one_shot(("default", "answer", "tool_call")[i % 3])
    after = settle(upstream.stats, lambda s: s["active"] == 0)
    assert after["active"] == 0 and after["completed"] - before["completed"] == 200
    assert after["disconnects"] == before["disconnects"]


def test_clients_that_leave_mid_stream_stop_the_upstream_and_leak_nothing(gateway, upstream):
    served = gateway()
    url = served.url
    run(warm(url))
    before, upstream_connections = served.figures(), upstream.stats()["connections"]
    n, pace = 100, 0.1

    async def leave() -> list[Any]:
        async with client() as http:
            return await asyncio.gather(*(stream(http, url, request(i, f"[[slow:{pace}]][[timed]][[id:leave-{i}]]"),
                                                 drop_after=4 + i % 5) for i in range(n)))

    results = run(leave())
    lags, late = [], []
    for i, result in enumerate(results):
        assert result.closed_at is not None and not [e for e in result.events if e["event"] in FINALS]
        record = upstream.log(f"leave-{i}")
        assert record["disconnected"] and not record["finished"]
        # Chunks the upstream sent after the client left: the gateway closes its upstream stream as soon as
        # the client goes, so at most the one on its way and, under this load, one more (chunks are 100 ms
        # apart; a gateway that read on would send the ten or more left).
        late.append(sum(1 for _, sent in record["times"] if sent > result.closed_at))
        lags.append(record["disconnected_at"] - result.closed_at)
    assert max(late) <= 2, late
    lags.sort()
    print(f"\n{n} clients gone mid-stream -> upstream disconnected after: median {lags[n // 2] * 1000:.1f} ms, "
          f"p90 {lags[n * 9 // 10] * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms; chunks sent after the client left: "
          f"{sum(late)} in all, at most {max(late)} in one stream")
    assert settle(upstream.stats, lambda s: s["active"] == 0)["active"] == 0
    after = settle(served.figures, lambda f: (f["tasks"], f["connections"]) <= (before["tasks"], before["connections"]))
    assert (after["tasks"], after["connections"]) == (before["tasks"], before["connections"])
    assert upstream.stats()["connections"] <= upstream_connections  # (the dropped streams' connections closed)


async def warm(url: str) -> None:
    """A few requests first, so the client pools and the loop's standing tasks are what they will stay."""
    async with client() as http:
        for result in await asyncio.gather(*(stream(http, url, request(i)) for i in range(6))):
            assert events(result.text)[-1]["event"] == "response.completed"


# marker -> the final event and problem code a stream ends with
FAULTS = {"[[fault:reset@3]]": ("response.failed", "upstream_failed"),
          "[[fault:error@3]]": ("response.failed", "upstream_failed"),  # (a 5xx reported mid-stream, as vLLM does)
          "[[fault:malformed@3]]": ("response.failed", "upstream_failed"),
          "[[fault:eof@3]]": ("response.failed", "upstream_failed"),
          "[[fault:stall@3]]": ("response.failed", "upstream_timeout"),
          "": ("response.completed", None)}


def test_upstream_faults_mid_stream_end_each_stream_once_and_leak_nothing(gateway, upstream):
    served = gateway(read_timeout=1.0)
    url = served.url
    run(warm(url))
    tasks = served.figures()["tasks"]
    markers = list(FAULTS) * 20

    async def faulty() -> list[Any]:
        async with client() as http:
            return await asyncio.gather(*(stream(http, url, request(i, marker)) for i, marker in enumerate(markers)))

    for marker, result in zip(markers, run(faulty())):
        final = events(result.text)[-1]
        assert (final["event"], (final["data"].get("error") or {}).get("code")) == FAULTS[marker], marker
        assert "127.0.0.1" not in result.text
    assert settle(upstream.stats, lambda s: s["active"] == 0)["active"] == 0  # (stalled ones closed too)
    assert settle(lambda: served.figures()["tasks"], lambda t: t <= tasks) == tasks


def test_10000_stored_responses_stay_bounded(gateway, upstream):
    served = gateway()
    url = served.url
    run(warm(url))
    bound = served.figures()["store_bound"]
    assert bound is not None, "the store has no bound"
    figures = {}

    async def store(count: int) -> None:
        async with client() as http:
            queue = iter(range(count))

            async def worker() -> None:
                for i in queue:  # (the three recordings in turn: reasoning and an answer, an answer, a call)
                    body = {**request(i), "store": True}
                    answer = await http.post(f"{url}/lmsp/v1/responses", json=body)
                    assert answer.status_code == 200 and answer.json()["status"] == "completed"

            await asyncio.gather(*(worker() for _ in range(32)))

    start, sent = served.figures()["rss_mib"], 0
    for total in (1000, 2000, 5000, 10_000):
        run(store(total - sent))
        sent = total
        now = served.figures()
        figures[total] = now["rss_mib"] - start
        assert now["stored"] == min(total, bound)
    print("\nRSS growth (MiB) after n stored: " + ", ".join(f"{n:,}: {mib:.1f}" for n, mib in figures.items())
          + f" (store bound {bound:,})")
    assert served.figures()["stored"] == bound < 10_000


def test_520_clients_that_never_read_free_every_slot_within_the_send_timeout(gateway, upstream):
    """520 streaming clients that send a request and never read (more than the 512 request slots): each
    response is given up once a write has waited the send timeout, its upstream stream is closed, and
    the gateway serves again. (Before the send timeout they held every slot, and an upstream generation
    each, for as long as they stayed connected.)"""
    served = gateway(send_timeout=2.0)
    port = int(served.url.rsplit(":", 1)[1])
    body = json.dumps({"model": "qwen3", "input": [user("[[fault:flood=16384]]")], "stream": True}).encode()
    head = (b"POST /lmsp/v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    sockets = []
    try:
        for _ in range(520):
            stalled = socket.socket()
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.connect(("127.0.0.1", port))
            stalled.sendall(head + body)
            sockets.append(stalled)
        busy = settle(served.figures, lambda f: f["in_progress"] >= 500, wait=30)
        assert busy["in_progress"] >= 500
        started = time.monotonic()
        freed = settle(served.figures, lambda f: f["in_progress"] == 0, wait=120)
        assert freed["in_progress"] == 0, f"{freed['in_progress']} requests still held"
        took = time.monotonic() - started
        after = settle(upstream.stats, lambda s: s["active"] == 0, wait=30)
        assert after["active"] == 0  # (every upstream stream was closed)
        answer = httpx.post(f"{served.url}/lmsp/v1/responses", timeout=30,
                            json={"model": "qwen3", "input": [user("[[sample:answer]]")]})
        assert answer.status_code == 200, (answer.status_code, took)
    finally:
        for stalled in sockets:
            stalled.close()
