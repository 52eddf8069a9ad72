"""XML and tagged tool-call arguments as a constraint: one parameter region after another, each value
typed by the tool's JSON Schema. (Being written: the exports raise ``constrain.unsupported`` for these
grammars until it is.)"""

from __future__ import annotations

from typing import Any

from ..grammar import Grammar
from ..symbols import Region
from .regexes import Unsupported


def call_body(grammar: Grammar, region: Region, name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """The xgrammar structural-tag format of what follows a call's opener (the tool's name written) up to
    its closer, for a ``components`` call region."""
    raise Unsupported("XML-tagged arguments are not exported yet")


def payload(grammar: Grammar, region: Region, tools: list[tuple[str, dict[str, Any]]],
            parallel: bool) -> dict[str, Any]:
    """The structural-tag format of an ``at_close`` call region's payload written as XML (the tool's name
    inside the payload, as MiniMax's ``<invoke name="...">``), between the region's open and close."""
    raise Unsupported("XML payloads read at the call's close are not exported yet")
