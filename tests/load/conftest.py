"""Fixtures for the gateway's load and fault tests (``--load``): one loopback upstream process per module,
and gateway processes in front of it (each in its own interpreter, so the test's client does not slow it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from test_upstream import SAMPLES
from upstream_server import GatewayProcess, Upstream


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with Upstream(SAMPLES, lifetime=600) as running:
        yield running


@pytest.fixture()
def gateway(upstream) -> Iterator[Callable[..., GatewayProcess]]:
    """``gateway(read_timeout=..., send_timeout=...)``: an LMSP gateway process with an UpstreamBackend on
    the upstream."""
    opened: list[GatewayProcess] = []

    def make(read_timeout: float = 10.0, send_timeout: float = 30.0) -> GatewayProcess:
        served = GatewayProcess(upstream.url, read_timeout=read_timeout, lifetime=600,
                                send_timeout=send_timeout).__enter__()
        opened.append(served)
        return served

    yield make
    for served in opened:
        served.__exit__()
