"""What the adapters promise about a call's ``arguments`` string on the wire, as test helpers."""

from __future__ import annotations

import json
import re
from typing import Any

_CLOSERS = re.compile(r'"?[\]}]*')


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def strict_object(text: str) -> dict[str, Any]:
    """``text`` read by a strict JSON parser (no NaN or Infinity), which must find one object."""
    value = json.loads(text, parse_constant=_no_constants)
    assert isinstance(value, dict), f"arguments that are not an object: {text!r}"
    return value


def closed_prefix(wire: str, raw: str) -> bool:
    """Whether ``wire`` is a prefix of the model's ``raw`` arguments text (less its leading whitespace)
    followed only by the quote and brackets that close it, or ``{}`` when no part of it was valid."""
    if wire == "{}":
        return True
    body = raw.lstrip()
    return any(body.startswith(wire[:k]) and _CLOSERS.fullmatch(wire[k:]) for k in range(len(wire), 0, -1))


def fold(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """What a Chat Completions client assembles from the deltas."""
    out: dict[str, Any] = {}
    calls: dict[int, dict[str, Any]] = {}
    for delta in deltas:
        for key, value in delta.items():
            if key == "tool_calls":
                for part in value:
                    call = calls.setdefault(part["index"], {"id": None, "name": None, "arguments": ""})
                    call["id"] = part.get("id", call["id"])
                    call["name"] = part.get("function", {}).get("name", call["name"])
                    call["arguments"] += part.get("function", {}).get("arguments", "")
            elif key != "role":
                out[key] = out.get(key, "") + value
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out
