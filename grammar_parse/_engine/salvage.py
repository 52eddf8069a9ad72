"""Broken tool calls (lenient mode): what a tool-call region that failed to parse still says.

A call cut off at the token limit, or written with broken JSON, is still a call when its name is certain:
the open delimiter captured it (``<function=NAME>``, ``functions.NAME:0``), or the complete part of the
body holds it (``{"name": "f", "arguments": {"a": 1`` names ``f``; so does ``[f(a=1), g(b=`` for both).
Such a call is built from the region's transform with the parts that exist; arguments that did not
parse are the model's own text (a string), and the call carries ``errors``. In a list of calls, the
complete ones stay as they would have parsed. Text that names no function is no call: it is handed
back, to go where text goes.

JSON bodies are read with the tool-call streamer's walker, so a broken call's raw arguments are exactly
the bytes a streaming client was sent as that call's arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from ..errors import ParseError
from .grammar import Region
from .shapes import CallShape
from .tools import call_function
from .toolstream import JsonWalker, call_name
from .values import PLACEHOLDER, ValueSpec, fill, fill_known, json_depth, parse_content, python_tokens, skip_chars


@dataclass
class Salvage:
    """The calls a failed tool-call region still holds (complete ones as parsed, broken ones with
    ``errors``) and its text that belongs to no call (``rest``, ``""`` if none)."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    rest: str = ""


@dataclass
class _Piece:
    """One call's worth of a body: where its text is, whether it is complete, and the scope its
    transform is filled from (``complete``: the parsed value's; otherwise the parts that are known)."""

    start: int
    end: int | None
    scope: dict[str, Any]
    complete: bool


def salvage_calls(region: Region, body: str, captures: Mapping[str, Any], children: Mapping[str, Any],
                  problem: Mapping[str, str]) -> Salvage:
    """The calls of a tool-call region whose body did not parse (see the module doc). ``problem``
    (``{"message", "code"}``) is why it did not: a broken call's ``errors`` say it."""
    spec = region.spec
    if not isinstance(spec, ValueSpec) or not isinstance(spec.transform, dict):
        return Salvage()
    plan = region.shape
    pieces: list[_Piece]
    if plan.mode in ("json_body", "json_key", "json_array"):
        pieces, tail = _json_pieces(plan, body, captures)
    elif spec.content == "json-name-keys" and not spec.content_args:
        pieces, tail = _name_key_pieces(body, captures)
    elif spec.content == "pythonic":
        pieces, tail = _pythonic_pieces(body, captures)
    else:
        pieces, tail = [], len(body)
    if not pieces:
        # The body gives nothing certain: the open delimiter's captures may still name the call.
        pieces, tail = [_Piece(0, None, {**captures, **children, "content": body.strip()}, False)], len(body)
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


def _call(transform: Any, piece: _Piece, problem: Mapping[str, str]) -> dict[str, Any] | None:
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
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict) and "function" in item:
            fn = call_function(item)
            if fn is None or fn.get("name") in (None, ""):
                raise ParseError(f"a tool call without a name: {item!r:.200}", code="parse.tool_call",
                                 hint="A call names the function it calls; the model wrote none.")


def _loads(text: str) -> tuple[bool, Any]:
    """(True, value) if ``text`` is JSON within the depth limit."""
    try:
        return True, parse_content(text, "json", {})
    except ParseError:
        return False, None


# ---------------------------------------------------------------------------- JSON bodies
class _TooDeep(Exception):
    pass


class _Outline:
    """Walker listener: the call objects at ``depth`` of a JSON body, each with its name and id strings
    and its arguments' span (the first of the argument keys written, as the streamer takes it)."""

    def __init__(self, body: str, depth: int, plan: CallShape) -> None:
        self.body = body
        self.depth = depth
        self.names = {k: a for k, a in ((plan.name_key, "name"), (plan.id_key, "id")) if k is not None}
        self.args_keys = (plan.args_key, *plan.args_alternatives)
        self.objects: list[dict[str, Any]] = []
        self.key_at: dict[int, str | None] = {}
        self.member: tuple[str | None, int] | None = None
        self.top_end: int | None = None

    def on_key(self, depth: int, key: str, pos: int) -> None:
        self.key_at[depth] = key

    def on_value_start(self, depth: int, pos: int) -> None:
        if depth > json_depth():
            raise _TooDeep  # the rest is raw text: walking on would cost time and find nothing certain
        if depth == self.depth:
            self.objects.append({"start": pos, "end": None})
            self.key_at[depth + 1] = None
        elif depth == self.depth + 1 and self.objects and self.objects[-1]["end"] is None:
            key = self.key_at.get(depth)
            self.member = (key, pos)
            if key in self.args_keys and "args_start" not in self.objects[-1]:
                self.objects[-1].update(args_key=key, args_start=pos)

    def on_value_end(self, depth: int, pos: int) -> None:
        if depth == 0:
            self.top_end = pos
        if depth == self.depth and self.objects:
            self.objects[-1]["end"] = pos
        elif depth == self.depth + 1 and self.member is not None and self.objects:
            (key, start), self.member, obj = self.member, None, self.objects[-1]
            if obj.get("args_start") == start:
                obj["args_end"] = pos
            elif key in self.names and self.names[key] not in obj:
                ok, value = _loads(self.body[start:pos])
                if ok and isinstance(value, str):
                    obj[self.names[key]] = value


def _walk(body: str, listener: Any) -> None:
    walker = JsonWalker(listener)
    try:
        walker.feed(body)
        walker.finish()
    except _TooDeep:
        pass


def _json_pieces(plan: CallShape, body: str, captures: Mapping[str, Any]) -> tuple[list[_Piece], int]:
    """Calls of a JSON body: the body is the arguments (``json_body``), one call object (``json_key``),
    or a list of call objects (``json_array``). Returns the pieces and where the text after the body's
    JSON value starts."""
    outline = _Outline(body, 1 if plan.mode == "json_array" else 0, plan)
    _walk(body, outline)
    tail = outline.top_end if outline.top_end is not None else len(body)
    if plan.mode == "json_body":
        if not outline.objects:
            return [], tail
        start, end = outline.objects[0]["start"], outline.objects[0]["end"]
        ok, value = _loads(body[start:end]) if end is not None else (False, None)
        if ok and isinstance(value, dict):
            return [_Piece(start, end, {**captures, "content": value}, True)], tail
        return [_Piece(start, None, {**captures, "content": body[start:]}, False)], len(body)  # all of it, raw
    pieces = []
    for obj in outline.objects:
        start, end = obj["start"], obj["end"]
        ok, value = _loads(body[start:end]) if end is not None else (False, None)
        known: dict[str, Any] = {}
        if ok and isinstance(value, dict):
            known = value
        else:
            ok = False
            for key, found in ((plan.name_key, "name"), (plan.id_key, "id")):
                if key is not None and obj.get(found):  # the first one written, if it says something
                    known[key] = obj[found]
            if "args_start" in obj:
                args_end = obj.get("args_end")
                raw = body[obj["args_start"]:args_end]
                parsed, value = _loads(raw) if args_end is not None else (False, None)
                # arguments are an object; any other value in a broken call stays the text written
                known[obj["args_key"]] = value if parsed and isinstance(value, dict) else raw
        scope = {**captures, "content": known} if plan.mode == "json_key" else {**captures, **known}
        pieces.append(_Piece(start, end, scope, ok))
    return pieces, tail


class _NameKeys:
    """Walker listener for calls keyed by name (``[{"f": {...}}]`` or ``{"f": {...}}``): each key of a
    call object is a call, its value the arguments."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.calls: list[dict[str, Any]] = []
        self.top_end: int | None = None

    def on_key(self, depth: int, key: str, pos: int) -> None:
        if depth == self.depth + 1:
            self.calls.append({"name": key, "start": pos, "end": None})

    def on_value_start(self, depth: int, pos: int) -> None:
        if depth > json_depth():
            raise _TooDeep
        if depth == self.depth + 1 and self.calls and self.calls[-1]["end"] is None:
            self.calls[-1]["args_start"] = pos

    def on_value_end(self, depth: int, pos: int) -> None:
        if depth == 0:
            self.top_end = pos
        if depth == self.depth + 1 and self.calls and "args_start" in self.calls[-1]:
            self.calls[-1]["end"] = pos


def _name_key_pieces(body: str, captures: Mapping[str, Any]) -> tuple[list[_Piece], int]:
    listener = _NameKeys(0 if body.lstrip().startswith("{") else 1)
    _walk(body, listener)
    pieces = []
    for call in listener.calls:
        start, end = call.get("args_start", call["start"]), call["end"]
        ok, value = _loads(body[start:end]) if end is not None else (False, None)
        ok = ok and isinstance(value, dict)  # arguments are an object; anything else is text
        arguments = value if ok else body[start:end] if "args_start" in call else ""
        pieces.append(_Piece(start, end, {**captures, "name": call["name"], "arguments": arguments}, ok))
    if listener.top_end is not None:
        tail = listener.top_end
    elif pieces:
        last = pieces[-1]
        tail = last.end if last.end is not None else len(body)
    else:
        tail = 0
    return pieces, skip_chars(body, tail, " \t\r\n,]}")


# ---------------------------------------------------------------------------- Python call syntax
_CALLEE = regex.compile(r"[A-Za-z_][\w.]*")


def _call_end(text: str, open_paren: int) -> int | None:
    """The offset after the parenthesis that closes the one at ``open_paren`` (strings and nested
    brackets skipped), or None if the text ends first."""
    for m, quote, depth in python_tokens(text, open_paren):
        if depth == 0 and not quote and m.group() in ")]}":
            return m.end()
    return None


def _pythonic_pieces(body: str, captures: Mapping[str, Any]) -> tuple[list[_Piece], int]:
    """Calls in Python call syntax (``[f(a=1), g(b="x")]`` or one per line): a complete call parses as
    the content parser would; a cut-off one keeps the text after its ``(``."""
    pos = skip_chars(body, 0, " \t\r\n")
    pos = skip_chars(body, pos, "[")
    pieces: list[_Piece] = []
    parse: Callable[[str], Any] = lambda text: parse_content(text, "pythonic", {})  # noqa: E731
    while True:
        pos = skip_chars(body, pos, " \t\r\n,;")
        if pos >= len(body) or body[pos] == "]":
            return pieces, pos + 1 if pos < len(body) else pos
        m = _CALLEE.match(body, pos)
        paren = skip_chars(body, m.end(), " \t") if m is not None else pos
        if m is None or paren >= len(body) or body[paren] != "(":
            return pieces, pos  # no name followed by "(": nothing certain from here on
        end = _call_end(body, paren)
        if end is not None:
            try:
                (item,) = parse(body[pos:end])
            except (ParseError, ValueError):
                pass
            else:
                pieces.append(_Piece(pos, end, {**captures, **item}, True))
                pos = end
                continue
        arguments = body[paren + 1:end - 1] if end is not None else body[paren + 1:]
        pieces.append(_Piece(pos, end, {**captures, "name": m.group(), "arguments": arguments}, False))
        if end is None:
            return pieces, len(body)
        pos = end


__all__ = ["Salvage", "check_calls", "component_errors", "salvage_calls"]
