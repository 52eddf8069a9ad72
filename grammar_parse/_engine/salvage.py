"""Broken tool calls (lenient mode): what a tool-call region that failed to parse still says.

A call cut off at the token limit, or written with broken JSON, is still a call when its name is certain:
the open delimiter captured it (``<function=NAME>``, ``functions.NAME:0``), or the complete part of the
body holds it (``{"name": "f", "arguments": {"a": 1`` names ``f``; so does ``[f(a=1), g(b=`` for both).
Such a call is built from the region's transform with the parts that exist; arguments that did not
parse are the model's own text (a string), and the call carries ``errors``. In a list of calls, the
complete ones stay as they would have parsed. Text that names no function is no call: it is handed
back, to go where text goes.

Where the calls of a broken body are is the content parser's to say (its ``salvage``, in
grammar_parse._engine.content): JSON bodies are read with the walker the tool-call streamer uses, so a broken
call's raw arguments are exactly the bytes a streaming client was sent as that call's arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ParseError
from .content import CONTENT_PARSERS, Piece
from .grammar import Region
from .reading import PLACEHOLDER
from .tools import call_function
from .toolstream import call_name
from .values import ValueSpec, fill, fill_known


@dataclass
class Salvage:
    """The calls a failed tool-call region still holds (complete ones as parsed, broken ones with
    ``errors``) and its text that belongs to no call (``rest``, ``""`` if none)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    rest: str = ""


def salvage_calls(region: Region, body: str, captures: Mapping[str, Any], children: Mapping[str, Any],
                  problem: Mapping[str, str]) -> Salvage:
    """The calls of a tool-call region whose body did not parse (see the module doc). ``problem``
    (``{"message", "code"}``) is why it did not: a broken call's ``errors`` say it."""
    spec = region.spec
    if not isinstance(spec, ValueSpec) or not isinstance(spec.transform, dict):
        return Salvage()
    parser = CONTENT_PARSERS.get(spec.content)
    found = parser.salvage(spec, region.shape, body, captures) if parser is not None and parser.salvage else None
    pieces, tail = found if found is not None else ([], len(body))
    if not pieces:
        # The body gives nothing certain: the open delimiter's captures may still name the call.
        pieces, tail = [Piece(0, None, {**captures, **children, "content": body.strip()}, False)], len(body)
    out = Salvage()
    rest: list[str] = []
    for piece in pieces:
        call = _call(spec.transform, piece, problem)
        if call is not None:
            out.calls.append(call)
        else:  # names no function: its text is text
            rest.append(body[piece.start:piece.end if piece.end is not None else tail])
    rest.append(body[tail:])
    out.rest = "".join(rest).strip()
    return out


def _call(transform: Any, piece: Piece, problem: Mapping[str, str]) -> dict[str, Any] | None:
    """A call from one piece, or None if it names no function."""
    if piece.complete:
        try:
            call = fill(transform, piece.scope)
        except ParseError as e:
            problem = {"message": e.detail, "code": e.code}
        else:
            if call_name(call) is not None and "arguments" in call["function"]:
                return dict(call)
    call = fill_known(transform, piece.scope)
    if call_name(call) is None:
        return None
    fn = call["function"] = dict(call["function"])
    missing = "arguments" not in fn
    if missing:
        # a call whose text ended without arguments has none ({}, as a stream sends it); a cut-off one
        # has no text of them yet
        fn["arguments"] = {} if piece.end is not None else ""
    path = "$.function.arguments" if missing or isinstance(fn["arguments"], str) else "$"
    return {**call, "errors": [{"path": path, **problem}]}


def component_errors(region: Region, problems: list[dict[str, str]]) -> list[dict[str, str]]:
    """A call's ``errors`` for its components that did not parse (each kept as the model's text): the
    path is where the transform puts the component's key (``$.function.arguments.city``)."""
    transform = getattr(region.spec, "transform", None)
    out = []
    for problem in problems:
        path = _placeholder_path(transform, problem["key"]) or "$"
        if problem["entry"]:
            path += f".{problem['entry']}"
        out.append({"path": path, "message": problem["message"], "code": problem["code"]})
    return out


def _placeholder_path(template: Any, key: str, path: str = "$") -> str | None:
    """The JSON path of the place ``template`` fills from ``{key}``, if it has one."""
    if isinstance(template, dict):
        for name, value in template.items():
            found = _placeholder_path(value, key, f"{path}.{name}")
            if found is not None:
                return found
    elif isinstance(template, str) and (m := PLACEHOLDER.fullmatch(template)) is not None \
            and key in m.group(1).split("|"):
        return path
    return None


def check_calls(value: Any) -> None:
    """Raise ``parse.tool_call`` if a call in a tool-call region's value has no name: its function is not
    an object, or its name is missing or empty. (A name of another type, such as a list, is transformers'
    own result and is left as it is; the adapters do not send such a call.)"""
    if type(value) is dict and type(fn := value.get("function")) is dict and fn.get("name") not in (None, ""):
        return  # (one call with its name: the usual case, on every region close)
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and "function" in item:
            fn = call_function(item)
            if fn is None or fn.get("name") in (None, ""):
                raise ParseError(f"a tool call without a name: {item!r:.200}", code="parse.tool_call",
                                 hint="A call names the function it calls; the model wrote none.")


__all__ = ["Salvage", "check_calls", "component_errors", "salvage_calls"]
