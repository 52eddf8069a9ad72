"""The event and message dicts the parser produces (plain dicts with transformers' exact keys)."""

from __future__ import annotations

from typing import Any, Literal, TypedDict, Union


class RegionOpen(TypedDict):
    """A field's region began (its open delimiter completed, or its first byte arrived)."""

    type: Literal["region_open"]
    field: str


class RegionChunk(TypedDict):
    """Text routed into the open region. ``dirty`` marks raw bytes of a structured value (json, ...)."""

    type: Literal["region_chunk"]
    field: str
    text: str
    dirty: bool


class RegionClose(TypedDict):
    """A region ended; ``value`` is what the field received (after content parsing, transform, typing)."""

    type: Literal["region_close"]
    field: str
    value: Any


Event = Union[RegionOpen, RegionChunk, RegionClose]

#: A parsed assistant message: ``{"role": "assistant", "content": ..., "tool_calls": [...], ...}``.
Message = dict[str, Any]


def merge_chunks(events: list[Event]) -> list[Event]:
    """Events with adjacent chunks of the same field merged: the view that does not depend on chunking."""
    merged: list[Event] = []
    for event in events:
        last = merged[-1] if merged else None
        if (
            event["type"] == "region_chunk"
            and last is not None
            and last["type"] == "region_chunk"
            and last["field"] == event["field"]
        ):
            merged[-1] = {**last, "text": last["text"] + event["text"]}  # type: ignore[typeddict-item]
        else:
            merged.append(event)
    return merged


__all__ = ["Event", "Message", "RegionChunk", "RegionClose", "RegionOpen", "merge_chunks"]
