"""Where the gateway keeps ``store: true`` responses, for ``GET /lmsp/v1/responses/{id}`` and
``previous_response_id`` follow-ups: one small interface (:class:`ResponseStorage`), two stores.

* :class:`ResponseStore` keeps them in the gateway's memory (the default): one process, nothing to run;
* :class:`RedisResponseStore` keeps them in Redis (the ``redis`` extra), so that gateway replicas behind a
  load balancer share them: a follow-up may land on any replica.

Both bound what they keep in number, in bytes and in time (the oldest entries go first), since every
entry is a client's conversation of up to a request body's size. :func:`open_store` picks one from a
URL (``memory`` or ``redis://host:port/db``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..errors import ArgumentError


class StoredResponse(NamedTuple):
    """A kept response and its whole conversation (the merged input and the response's output: what a
    follow-up continues), kept once so that a follow-up copies one list."""

    response: dict[str, Any]
    conversation: list[dict[str, Any]]
    expires: float  # (when it expires, in this process's time.monotonic() seconds, or the store's clock)


@runtime_checkable
class ResponseStorage(Protocol):
    """What the gateway asks of a response store. Both calls are coroutines: a shared store is a network
    away, and the event loop must not wait on it."""

    async def aget(self, response_id: str) -> StoredResponse | None:
        """The entry, or None if it was never kept, was evicted, or has expired."""

    async def aput(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """Keep a response under its ``id`` (evicting the oldest beyond the store's bounds)."""


def entry_json(response: dict[str, Any], conversation: list[dict[str, Any]]) -> bytes:
    """An entry as the stores measure and keep it: ASCII JSON (a lone surrogate in the model's output is
    written as its escape, so any entry can be written and read back unchanged)."""
    return json.dumps([response, conversation], separators=(",", ":")).encode("ascii")


class ResponseStore:
    """Responses kept in memory: at most ``max_entries`` and ``max_bytes`` (their :func:`entry_json`
    size; an entry larger than ``max_bytes`` alone is not kept), each for ``ttl`` seconds (``clock`` is
    monotonic seconds); the oldest are evicted first."""

    def __init__(self, max_entries: int = 1000, ttl: float = 3600.0, clock: Callable[[], float] = time.monotonic,
                 *, max_bytes: int = 256 * 2**20) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.clock = clock
        self.size = 0  # bytes kept
        self._entries: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]], size: int | None = None) -> None:
        """Keep a response; ``size`` is its :func:`entry_json` length (measured here when not given)."""
        size = len(entry_json(response, conversation)) if size is None else size
        now = self.clock()
        self._expire(now)
        self._drop(response["id"])
        if size > self.max_bytes:
            return
        self._entries[response["id"]] = (StoredResponse(response, conversation, now + self.ttl), size)
        self.size += size
        while len(self._entries) > self.max_entries or self.size > self.max_bytes:
            self.size -= self._entries.popitem(last=False)[1][1]

    def get(self, response_id: str) -> StoredResponse | None:
        """The entry, or None if it was never kept, was evicted, or has expired."""
        self._expire(self.clock())
        kept = self._entries.get(response_id)
        return kept[0] if kept is not None else None

    async def aget(self, response_id: str) -> StoredResponse | None:
        """:meth:`get`, as :class:`ResponseStorage` asks."""
        return self.get(response_id)

    async def aput(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """:meth:`put`, its entry measured in a worker thread (a 4 MiB conversation takes milliseconds)."""
        size = len(await asyncio.to_thread(entry_json, response, conversation))
        self.put(response, conversation, size)

    def _drop(self, response_id: str) -> None:
        kept = self._entries.pop(response_id, None)
        if kept is not None:
            self.size -= kept[1]

    def _expire(self, now: float) -> None:
        while self._entries:
            oldest, size = next(iter(self._entries.values()))
            if oldest.expires > now:
                break
            self._entries.popitem(last=False)
            self.size -= size

    def __len__(self) -> int:
        return len(self._entries)


# One script keeps an entry and enforces the bounds atomically, whichever replica runs it: the entry under
# its key with Redis's own expiry, its id in a sorted set by time kept (Redis's clock, so the replicas'
# clocks do not matter) and its size in a hash; then the index drops what has expired and evicts the
# oldest while the count or the byte total is over its bound.
_PUT = """
local index, sizes, prefix = KEYS[1], KEYS[2], ARGV[1]
local id, value, ttl_ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
local max_entries, max_bytes = tonumber(ARGV[5]), tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(old)
  redis.call('DEL', prefix .. old)
  redis.call('ZREM', index, old)
  local size = tonumber(redis.call('HGET', sizes, old) or '0')
  redis.call('HDEL', sizes, old)
  redis.call('HINCRBY', sizes, '', -size)
end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now - ttl_ms)) do drop(old) end
if redis.call('ZSCORE', index, id) then drop(id) end
if #value > max_bytes then return 0 end
redis.call('SET', prefix .. id, value, 'PX', ttl_ms)
redis.call('ZADD', index, now, id)
redis.call('HSET', sizes, id, #value)
local total = redis.call('HINCRBY', sizes, '', #value)
while redis.call('ZCARD', index) > max_entries or total > max_bytes do
  local oldest = redis.call('ZRANGE', index, 0, 0)[1]
  if not oldest then break end
  drop(oldest)
  total = tonumber(redis.call('HGET', sizes, ''))
end
return 1
"""


class RedisResponseStore:
    """Responses kept in Redis (``pip install 'grammar-parse[redis]'``), shared by every gateway replica
    that names the same ``url`` and ``prefix``: at most ``max_entries`` and ``max_bytes`` (the
    :func:`entry_json` sizes; the oldest evicted first, an entry larger than ``max_bytes`` not kept), each
    for ``ttl`` seconds by Redis's own expiry. ``client`` gives a ``redis.asyncio.Redis`` configured
    otherwise (TLS, a pool), which the caller then closes."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, max_entries: int = 10_000, ttl: float = 3600.0,
                 max_bytes: int = 1024 * 2**20, prefix: str = "grammar-parse:response:", client: Any = None) -> None:
        self._owns_client = client is None
        if client is None:
            try:
                import redis.asyncio
            except ImportError:
                raise ArgumentError("the Redis response store needs the redis package", code="usage.argument",
                                    hint="pip install 'grammar-parse[redis]'") from None
            client = redis.asyncio.Redis.from_url(url)
        self.client = client
        self.max_entries, self.ttl, self.max_bytes, self.prefix = max_entries, ttl, max_bytes, prefix
        self._put = client.register_script(_PUT)

    async def aget(self, response_id: str) -> StoredResponse | None:
        """The entry, or None if it was never kept, was evicted, or has expired."""
        async with self.client.pipeline(transaction=True) as pipe:
            value, left_ms = await pipe.get(self.prefix + response_id).pttl(self.prefix + response_id).execute()
        if value is None:
            return None
        response, conversation = await asyncio.to_thread(json.loads, value)
        return StoredResponse(response, conversation, time.monotonic() + max(0, left_ms) / 1000)

    async def aput(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        """Keep a response (evicting the oldest beyond the bounds), in one atomic script."""
        value = await asyncio.to_thread(entry_json, response, conversation)
        await self._put(keys=[self.prefix + "~index", self.prefix + "~sizes"],
                        args=[self.prefix, response["id"], value, max(1, round(self.ttl * 1000)), self.max_entries,
                              self.max_bytes])

    async def aclose(self) -> None:
        """Close the client this store made (and its connections); a given client is the caller's."""
        if self._owns_client:
            await self.client.aclose()


def open_store(url: str, **bounds: Any) -> ResponseStorage:
    """The store a URL names: ``memory`` (:class:`ResponseStore`) or ``redis://`` / ``rediss://`` /
    ``unix://`` (:class:`RedisResponseStore`); ``bounds`` (``max_entries``, ``max_bytes``, ``ttl``) go to it."""
    if url == "memory":
        return ResponseStore(**bounds)
    if url.split("://", 1)[0] in ("redis", "rediss", "unix"):
        return RedisResponseStore(url, **bounds)
    raise ArgumentError(f"a response store is 'memory' or a redis:// URL, not {url[:80]!r}", code="usage.argument",
                        hint="Give store='memory' or store='redis://host:6379/0'.")


__all__ = ["RedisResponseStore", "ResponseStorage", "ResponseStore", "StoredResponse", "entry_json", "open_store"]
