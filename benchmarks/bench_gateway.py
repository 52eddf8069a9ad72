"""Benchmark: what the LMSP gateway adds in front of a raw-completion model server, per event.

    python benchmarks/bench_gateway.py                         # 200 concurrent streams at four paces
    python benchmarks/bench_gateway.py --streams 50 --pace 0.05

Everything runs on 127.0.0.1, in three processes: the loopback model server (tests/upstream_server.py:
recorded output in the OpenAI completions stream shape, one token-sized chunk every ``pace`` seconds,
each chunk's send time recorded), the gateway (``LMSPApp`` with an ``UpstreamBackend``, served by uvicorn)
and this client (httpx; the streams start over the first quarter of a stream's length, ``--ramp``, then
run side by side: a burst of simultaneous starts is its own workload, ``--ramp 0``). At each pace, two
runs of the same streams:

* **direct**: the client reads the upstream's completions stream itself;
* **gateway**: the client reads the LMSP stream the gateway makes of it.

An event's latency is its arrival at the client minus the upstream's send time of the chunk that
completes the text it carries (both ``time.monotonic()``, one clock for the machine's processes). The
recording is plain content, so each text delta maps to a place in the raw output; the other events
(``created``, item added and done, the final one) are counted but not timed. The gateway's added latency
is the gateway run's percentile minus the direct run's: the client's own reading cost and the loopback
hops are in both. "Steady" counts only the events that came while every stream was open (after the ramp,
before the first stream ended): the ramp's request starts cost the gateway CPU of their own. The
gateway's CPU per event is its process CPU time over the run divided by the events it sent (every event,
timed or not); the upstream's CPU per chunk, over the direct run, is the floor a minimal asyncio server
pays on the same machine to write one chunk to a socket. Run it on an otherwise idle machine: the three
processes share its cores, and anything else running shows as latency.

Where the offered chunks per second need more CPU than the machine has, latency is queueing: the pace
at which the added latency starts to grow says how many streams a core sustains.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import httpx  # noqa: E402

from grammar_parse.adapters.lmsp import parse_sse  # noqa: E402
from upstream_server import CHUNKS, GatewayProcess, Upstream  # noqa: E402

# Plain content (no reasoning, no call): every text delta is a stretch of the raw output.
PROSE = ("A local model service is a resident layer between applications and the models on the user's own "
         "device: it finds them, loads them and answers every request in one protocol.")
SAMPLES = {"default": PROSE + "<|im_end|>"}
DELTAS = ("response.output_text.delta", "response.reasoning_summary_text.delta",
          "response.function_call_arguments.delta")


@dataclass
class Run:
    """One run's figures: each timed event's latency (s), and how many events came in all."""

    latencies: list[float] = field(default_factory=list)
    steady: list[float] = field(default_factory=list)  # the events that came while every stream was open
    events: int = 0
    seconds: float = 0.0

    def percentile(self, q: float, *, steady: bool = False) -> float:
        ordered = sorted(self.steady if steady else self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def sent_at(times: list[list[float]], offset: int) -> float:
    """The send time of the chunk that completes the text up to ``offset`` (times: [end offset, time])."""
    for end, moment in times:
        if end >= offset:
            return moment
    return times[-1][1]


def clients(n: int) -> list[httpx.AsyncClient]:
    """One client per stream, sharing one TLS context: httpcore 1.0's pool does work quadratic in its
    connections on every request and response (encode/httpx#3215), which would make the client, not the
    servers, the slow part with 200 connections in one pool."""
    context = ssl.create_default_context()
    return [httpx.AsyncClient(timeout=120, trust_env=False, verify=context) for _ in range(n)]


async def each(streams: int, one: Any) -> list[Any]:
    """``one(client, i)`` for every stream at once, each on its own client."""
    opened = clients(streams)
    try:
        return await asyncio.gather(*(one(http, i) for i, http in enumerate(opened)))
    finally:
        for http in opened:
            await http.aclose()


async def direct(upstream: Upstream, streams: int, pace: float, ramp: float
                 ) -> tuple[Run, list[list[tuple[int, float]]]]:
    """Every stream straight from the upstream: (the run, each stream's (text offset, arrival) list)."""
    async def one(http: httpx.AsyncClient, i: int) -> list[tuple[int, float]]:
        await asyncio.sleep(ramp * i / streams)
        body = {"model": "m", "prompt": f"[[timed]][[slow:{pace}]][[id:direct-{i}]]", "stream": True}
        arrivals, offset = [], 0
        async with http.stream("POST", f"{upstream.url}/completions", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    now = time.monotonic()
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    offset += len(choices[0].get("text") or "")
                    arrivals.append((offset, now))
        return arrivals

    start = time.monotonic()
    results = await each(streams, one)
    return Run(seconds=time.monotonic() - start), results


async def through(gateway: GatewayProcess, streams: int, pace: float, ramp: float = 0.0
                  ) -> tuple[Run, list[list[tuple[int, float]]]]:
    """Every stream through the gateway: (the run, each stream's (text offset, arrival) list of deltas)."""
    async def one(http: httpx.AsyncClient, i: int) -> tuple[int, list[tuple[int, float]]]:
        await asyncio.sleep(ramp * i / streams)
        text = f"[[timed]][[slow:{pace}]][[id:gateway-{i}]]"
        body = {"model": "qwen3", "stream": True,
                "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]}
        arrivals, offset, count, frame = [], 0, 0, []
        async with http.stream("POST", f"{gateway.url}/lmsp/v1/responses", json=body) as response:
            async for line in response.aiter_lines():
                frame.append(line)
                if line:
                    continue
                now = time.monotonic()
                for event in parse_sse("\n".join(frame) + "\n"):
                    count += 1
                    if event["event"] in DELTAS:
                        offset += len(event["data"]["delta"])
                        arrivals.append((offset, now))
                    elif event["event"] in ("response.failed", "error"):
                        raise RuntimeError(f"stream {i} failed: {event['data']}")
                frame = []
        return count, arrivals

    start = time.monotonic()
    results = await each(streams, one)
    return Run(events=sum(n for n, _ in results), seconds=time.monotonic() - start), [a for _, a in results]


def timed(run: Run, upstream: Upstream, prefix: str, arrivals: list[list[tuple[int, float]]]) -> Run:
    opened = max(stream[0][1] for stream in arrivals)  # (the last stream's first event)
    closing = min(stream[-1][1] for stream in arrivals)  # (the first stream's last one)
    for i, stream in enumerate(arrivals):
        times = upstream.log(f"{prefix}-{i}")["times"]
        for offset, moment in stream:
            run.latencies.append(moment - sent_at(times, offset))
            if opened <= moment <= closing:
                run.steady.append(run.latencies[-1])
    if not run.events:
        run.events = sum(len(stream) for stream in arrivals)
    return run


def measure(upstream: Upstream, gateway: GatewayProcess, streams: int, pace: float, ramp: float) -> dict[str, Any]:
    """Both runs at one pace: latencies, events, and the CPU each server spent."""
    up = upstream.stats()["cpu"]
    raw, arrivals = asyncio.run(direct(upstream, streams, pace, ramp))
    upstream_cpu = upstream.stats()["cpu"] - up
    raw = timed(raw, upstream, "direct", arrivals)
    before = gateway.figures()
    gated, arrivals = asyncio.run(through(gateway, streams, pace, ramp))
    after = gateway.figures()
    gated = timed(gated, upstream, "gateway", arrivals)
    return {"direct": raw, "gateway": gated, "gateway_cpu": after["cpu"] - before["cpu"],
            "upstream_cpu": upstream_cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200, help="concurrent streaming requests (default 200)")
    parser.add_argument("--pace", type=float, action="append",
                        help="seconds between the upstream's chunks (repeatable; default 0.5, 0.2, 0.1, 0.05)")
    parser.add_argument("--ramp", type=float, default=0.25,
                        help="the streams start over this share of one stream's length (0: all at once; default 0.25)")
    args = parser.parse_args()
    paces = args.pace or [0.5, 0.2, 0.1, 0.05]
    chunks = len(CHUNKS.findall(SAMPLES["default"]))
    print(f"{args.streams} concurrent streams of {chunks} chunks, started over the first {args.ramp:.0%} of a stream; "
          "latency per event = its arrival at the client minus the upstream's send of its chunk (ms)\n")
    print("| chunk every | chunks/s offered | direct p50 | direct p99 | gateway p50 | gateway p99 | **added p50** | "
          "**added p99** | steady: added p50 | steady: added p99 | gateway CPU µs/event | upstream CPU µs/chunk |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with Upstream(SAMPLES, lifetime=1800) as upstream, GatewayProcess(upstream.url, lifetime=1800) as gateway:
        asyncio.run(through(gateway, 4, 0.0))  # (warm: the grammar's first parse, the client pools)
        load = os.getloadavg()[0]
        for pace in paces:
            got = measure(upstream, gateway, args.streams, pace, args.ramp * chunks * pace)
            raw, gated = got["direct"], got["gateway"]
            ms = [run.percentile(q) * 1000 for run in (raw, gated) for q in (0.5, 0.99)]
            st = [run.percentile(q, steady=True) * 1000 for run in (raw, gated) for q in (0.5, 0.99)]
            print(f"| {pace * 1000:g} ms | {args.streams / pace:,.0f} | {ms[0]:.1f} | {ms[1]:.1f} | {ms[2]:.1f} | "
                  f"{ms[3]:.1f} | **{ms[2] - ms[0]:.1f}** | **{ms[3] - ms[1]:.1f}** | {st[2] - st[0]:.1f} | "
                  f"{st[3] - st[1]:.1f} | "
                  f"{got['gateway_cpu'] / gated.events * 1e6:.0f} | {got['upstream_cpu'] / raw.events * 1e6:.0f} |",
                  flush=True)
    print(f"\n{os.cpu_count()} CPUs; load average {load:.2f} before the runs, {os.getloadavg()[0]:.2f} after "
          "(the three processes share the CPUs: other work shows as latency)")


if __name__ == "__main__":
    main()
