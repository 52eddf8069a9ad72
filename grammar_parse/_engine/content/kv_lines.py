"""``key: value`` lines, as an object.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .base import ContentParser
from .text import text_value
from .xml import sub_parse


def _kv_lines(text: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """``key<kv_sep>value`` lines into a dict; lines without the separator are skipped."""
    kv_sep = args.get("kv_sep", ":")
    value_parser = args.get("value_parser")
    out: dict[str, Any] = {}
    for line in text.split(args.get("line_sep", "\n")):
        line = text_value(line, args)
        if not line or kv_sep not in line:
            continue
        key, value = line.split(kv_sep, 1)
        out[text_value(key, args)] = sub_parse(text_value(value, args), value_parser)
    return out


KV_LINES = ContentParser("kv-lines", _kv_lines)
PARSERS = (KV_LINES,)

__all__ = ["KV_LINES", "PARSERS"]
