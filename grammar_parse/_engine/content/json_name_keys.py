"""JSON calls keyed by name (``[{'get_weather': {...}}]`` or ``{'f': {...}}``): each key a call's name, its
value the arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import ParseError
from ..reading import json_depth, skip_chars
from .base import WHOLE, CallShape, CallTemplate, ContentParser, Piece, Pieces
from .json import JSON, TooDeep, loads_within_limit, walk


def _json_name_keys(text: str, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON calls keyed by name (``[{"get_weather": {...}}]`` or ``{"f": {...}}``) as name/arguments."""
    data = JSON.parse(text, args)
    items = data if isinstance(data, list) else [data]
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ParseError(f"expected objects keyed by tool name, got {item!r}", code="parse.content")
        out.extend({"name": name, "arguments": arguments} for name, arguments in item.items())
    return out


class _NameKeys:
    """Walker listener for calls keyed by name (``[{"f": {...}}]`` or ``{"f": {...}}``): each key of a
    call object is a call, its value the arguments."""

    def __init__(self, body: str) -> None:
        self.body = body
        self.depth = -1  # (0: one object of calls; 1: a list of them; decided by the first value, as the streamer does)
        self.calls: list[dict[str, Any]] = []
        self.top_end: int | None = None

    def on_key(self, depth: int, key: str, pos: int) -> None:
        if depth == self.depth + 1:
            self.calls.append({"name": key, "start": pos, "end": None})

    def on_value_start(self, depth: int, pos: int) -> None:
        if depth > json_depth():
            raise TooDeep
        if self.depth < 0:
            self.depth = 1 if self.body.startswith("[", pos) else 0
        if depth == self.depth + 1 and self.calls and self.calls[-1]["end"] is None:
            self.calls[-1]["args_start"] = pos

    def on_value_end(self, depth: int, pos: int) -> None:
        if depth == 0:
            self.top_end = pos
        if depth == self.depth + 1 and self.calls and "args_start" in self.calls[-1]:
            self.calls[-1]["end"] = pos


def _name_key_pieces(body: str, captures: Mapping[str, Any]) -> tuple[list[Piece], int]:
    listener = _NameKeys(body)
    walk(body, listener)
    pieces = []
    for call in listener.calls:
        start, end = call.get("args_start", call["start"]), call["end"]
        ok, value = loads_within_limit(body[start:end]) if end is not None else (False, None)
        ok = ok and isinstance(value, dict)  # arguments are an object; anything else is text
        arguments = value if ok else body[start:end] if "args_start" in call else ""
        pieces.append(Piece(start, end, {**captures, "name": call["name"], "arguments": arguments}, ok))
    if listener.top_end is not None:
        tail = listener.top_end
    elif pieces:
        last = pieces[-1]
        tail = last.end if last.end is not None else len(body)
    else:
        tail = 0
    return pieces, skip_chars(body, tail, " \t\r\n,]}")


def _call_shape(spec: Any, call: CallTemplate) -> CallShape:
    """Each key is a call's head; its value streams as the other JSON shapes' do."""
    return CallShape("at_close", reader="json_name_keys") if spec.transform_each and not spec.content_args else WHOLE


def _salvage(spec: Any, shape: CallShape, body: str, captures: Mapping[str, Any]) -> Pieces | None:
    return _name_key_pieces(body, captures) if not spec.content_args else None


JSON_NAME_KEYS = ContentParser("json-name-keys", _json_name_keys, call_shape=_call_shape, salvage=_salvage)
PARSERS = (JSON_NAME_KEYS,)

__all__ = ["JSON_NAME_KEYS", "PARSERS"]
