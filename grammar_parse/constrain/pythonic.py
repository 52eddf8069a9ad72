"""Python-style tool calls (``[get_weather(city="Paris"), ...]``) as a constraint: a small grammar per
tool. (Being written: the exports raise ``constrain.unsupported`` for these grammars until it is.)"""

from __future__ import annotations

from typing import Any

from ..grammar import Grammar
from ..symbols import Region
from .regexes import Unsupported


def payload(grammar: Grammar, region: Region, tools: list[tuple[str, dict[str, Any]]],
            parallel: bool) -> dict[str, Any]:
    """The xgrammar structural-tag format of the call region's payload, between its open and close
    delimiters, for an ``at_close`` region whose payload is Python-style calls."""
    raise Unsupported("pythonic calls are not exported yet")


def call_body(grammar: Grammar, region: Region, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The structural-tag format of what follows an opener that names the tool (Gemma's ``call:NAME``) up
    to the call's closer, for an ``at_close`` region whose arguments are written in a call syntax."""
    raise Unsupported("call-syntax arguments are not exported yet")
